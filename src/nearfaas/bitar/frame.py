"""The Bitar frame: a segment table, then the segments' raw DEFLATE streams back to back.

    offset  size        field
    0       4           magic  b"BTR1"
    4       4           segment_size   raw bytes per segment (the last one may be shorter), <= 64 KiB
    8       8           raw_len        total raw bytes
    16      4           segments       n = ceil(raw_len / segment_size)
    20      8 * n       per segment: compressed length (u32), CRC-32 of its raw bytes (u32)
    20+8n   4           CRC-32 of everything above
    24+8n   ...         n raw DEFLATE streams (RFC 1951), each complete, concatenated

All integers little-endian. The table is what lets a reader decompress segments in parallel and
check each one; without it (``inflate_concatenated``) stock zlib still reads the payload, one
stream after another, like a multi-member gzip file.

Worked example: 150,000 raw bytes at the 64 KiB default are 3 segments (65,536 + 65,536 +
18,928); the header is 20 + 24 + 4 = 48 bytes.

Known caveats:
- CRC-32 covers each segment's raw bytes, so a corrupt payload is caught after inflating it;
  a corrupt header is caught before anything is inflated.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from nearfaas.bitar.codecs import MAX_SEGMENT, CodecError

MAGIC = b"BTR1"
MAX_RATIO = 1032  # DEFLATE's best case: a 258-byte match in about 2 bits
_HEAD = struct.Struct("<4sIQI")
_ENTRY = struct.Struct("<II")
_CRC = struct.Struct("<I")


class FrameError(CodecError):
    """The bytes are not a Bitar frame, or its header does not add up."""


@dataclass(frozen=True)
class Header:
    segment_size: int
    raw_len: int
    lengths: tuple[int, ...]  # compressed bytes per segment
    crcs: tuple[int, ...]

    @property
    def size(self) -> int:
        return header_size(len(self.lengths))

    def raw_lengths(self) -> list[int]:
        n = len(self.lengths)
        return [min(self.segment_size, self.raw_len - i * self.segment_size) for i in range(n)]


def segments_for(raw_len: int, segment_size: int) -> int:
    return -(-raw_len // segment_size) if raw_len else 0


def header_size(segments: int) -> int:
    return _HEAD.size + _ENTRY.size * segments + _CRC.size


def pack_header(h: Header) -> bytes:
    parts = [_HEAD.pack(MAGIC, h.segment_size, h.raw_len, len(h.lengths))]
    parts += [_ENTRY.pack(n, c) for n, c in zip(h.lengths, h.crcs, strict=True)]
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def unpack_header(buf) -> Header:
    """Parse and check a frame's header; every failure names the field."""
    view = memoryview(buf)
    if len(view) < _HEAD.size:
        raise FrameError(f"not a Bitar frame: {len(view)} bytes is shorter than the {_HEAD.size}-byte header")
    magic, seg, raw_len, n = _HEAD.unpack_from(view, 0)
    if magic != MAGIC:
        raise FrameError(f"not a Bitar frame: magic is {bytes(magic)!r}, expected {MAGIC!r} "
                         "(for a plain raw DEFLATE stream use inflate_raw)")
    if not 1 <= seg <= MAX_SEGMENT:
        raise FrameError(f"segment_size {seg} is outside 1..{MAX_SEGMENT}")
    if n != segments_for(raw_len, seg):
        raise FrameError(f"segments is {n}, but raw_len {raw_len} at segment_size {seg} needs {segments_for(raw_len, seg)}")
    end = header_size(n)
    if len(view) < end:
        raise FrameError(f"frame truncated: its header needs {end} bytes, got {len(view)}")
    (crc,) = _CRC.unpack_from(view, end - _CRC.size)
    if zlib.crc32(view[:end - _CRC.size]) != crc:
        raise FrameError("header checksum mismatch: the segment table is corrupt")
    entries = [_ENTRY.unpack_from(view, _HEAD.size + i * _ENTRY.size) for i in range(n)]
    lengths = tuple(e[0] for e in entries)
    payload = len(view) - end
    if sum(lengths) != payload:
        raise FrameError(f"segment lengths add up to {sum(lengths)} bytes, the payload has {payload}")
    h = Header(seg, raw_len, lengths, tuple(e[1] for e in entries))
    for i, (n, raw) in enumerate(zip(lengths, h.raw_lengths(), strict=True)):
        # DEFLATE cannot beat ~1032:1; a table that claims more is a decompression bomb or junk,
        # refused before a byte of output is allocated.
        if raw > MAX_RATIO * n + 64:
            raise FrameError(f"segment {i} claims {raw} raw bytes from {n} compressed, beyond DEFLATE's "
                             f"{MAX_RATIO}:1 limit (corrupt or hostile frame)")
    return h


def payload(frame) -> memoryview:
    """The frame's concatenated raw DEFLATE streams (what stock zlib reads)."""
    return memoryview(frame)[unpack_header(frame).size:]


def inflate_concatenated(stream, max_out: int = 1 << 30) -> bytes:
    """Read back-to-back raw DEFLATE streams with stock zlib only, no segment table: how any
    zlib user reads a Bitar payload. More than ``max_out`` bytes of output is an error."""
    out, rest, total = [], bytes(stream), 0
    while rest:
        d = zlib.decompressobj(-15)
        try:
            piece = d.decompress(rest, max_out - total + 1)
        except zlib.error as e:
            raise CodecError(f"payload is not raw DEFLATE: {e}") from None
        total += len(piece)
        if total > max_out or d.unconsumed_tail:
            raise CodecError(f"payload inflates to more than {max_out} bytes")
        if not d.eof:
            raise CodecError("payload ends inside a DEFLATE stream (truncated)")
        out.append(piece)
        rest = d.unused_data
    return b"".join(out)
