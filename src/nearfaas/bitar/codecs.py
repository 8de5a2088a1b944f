"""DEFLATE engines behind a Bitar device: three software libraries and one modelled accelerator.

Every engine turns one segment (at most 64 KiB, the BlueField-2 engine's packet limit) into one
complete raw DEFLATE stream (RFC 1951, no zlib or gzip wrapper) and back, the way a stateless
DPDK compress op does. Because each segment is a whole stream with its final-block bit set,
segments compress and decompress independently — on any thread, on any engine — and stock zlib
reads every one with ``wbits=-15``.

| engine | library | host CPU | timing |
|---|---|---|---|
| ``isal`` | Intel ISA-L through ``isal`` (python-isal) | yes | measured |
| ``libdeflate`` | libdeflate through ``deflate`` | yes | measured |
| ``zlib`` | the standard library | yes | measured |
| ``bf2-model`` | modelled BlueField-2 DEFLATE engine | no (modelled) | **modelled** |

The modelled engine (``EngineModel``) charges ``latency_s + bytes / rate`` per op on one of
``lanes`` parallel engine lanes and no host CPU. Its output bytes come from ISA-L at level 1,
a stand-in for the engine's own DEFLATE: the ratio is a real DEFLATE ratio, the time is not a
measurement. Its parameters and their sources are in ``EngineModel``'s fields.

Known caveats:
- ISA-L levels are 0-3 and libdeflate's 1-12; ``level`` is passed through unchanged, so the
  same number means different effort on different engines (each engine's default is its own
  fast setting: 1).
- Segmenting costs ratio: each segment starts with an empty dictionary. At 64 KiB the loss is
  small on tabular data (the thesis's Fig. 5.4 shows no significant change between 1 and 2
  threads); ``benchmarks/bitar.py`` reports the ratio it got.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

MAX_SEGMENT = 64 * 1024  # the BlueField-2 engine's per-packet limit (thesis §5.2.1)


class CodecError(ValueError):
    """A segment is not valid DEFLATE, or does not decompress to the size its frame says."""


def _isal():
    try:
        from isal import isal_zlib
    except ImportError as e:  # pragma: no cover - make setup installs it
        raise CodecError("engine 'isal' needs the isal package: run `make setup` (pip install isal)") from e
    return isal_zlib


def _libdeflate():
    try:
        import deflate
    except ImportError as e:  # pragma: no cover - make setup installs it
        raise CodecError("engine 'libdeflate' needs the deflate package: run `make setup` (pip install deflate)") from e
    return deflate


def _inflate_exact(inflate, segment, raw_len: int) -> bytes:
    """Decompress with a streaming inflater, refusing trailing bytes and wrong sizes."""
    d = inflate()
    try:
        out = d.decompress(segment, raw_len + 1) if raw_len >= 0 else d.decompress(segment)
    except Exception as e:  # zlib.error / isal_zlib.error: corrupt input
        raise CodecError(f"segment is not valid raw DEFLATE: {e}") from None
    if not d.eof:
        raise CodecError("segment ends before its DEFLATE stream does (truncated)")
    if d.unused_data:
        raise CodecError(f"{len(d.unused_data)} bytes follow the segment's DEFLATE stream")
    if raw_len >= 0 and len(out) != raw_len:
        raise CodecError(f"segment decompresses to {len(out)} bytes, its frame says {raw_len}")
    return out


class Zlib:
    name, modelled = "zlib", False

    def __init__(self, level: int = 1):
        if not -1 <= level <= 9:
            raise CodecError(f"zlib level must be -1..9, got {level}")
        self.level = level

    def compress(self, segment) -> bytes:
        c = zlib.compressobj(self.level, zlib.DEFLATED, -15)
        return c.compress(segment) + c.flush()

    def decompress(self, segment, raw_len: int = -1) -> bytes:
        return _inflate_exact(lambda: zlib.decompressobj(-15), segment, raw_len)


class Isal:
    name, modelled = "isal", False

    def __init__(self, level: int = 1):
        self.lib = _isal()
        if not 0 <= level <= 3:
            raise CodecError(f"isal level must be 0..3, got {level}")
        self.level = level

    def compress(self, segment) -> bytes:
        return self.lib.compress(segment, self.level, -15)

    def decompress(self, segment, raw_len: int = -1) -> bytes:
        return _inflate_exact(lambda: self.lib.decompressobj(-15), segment, raw_len)


class Libdeflate:
    name, modelled = "libdeflate", False

    def __init__(self, level: int = 1):
        self.lib = _libdeflate()
        if not 1 <= level <= 12:
            raise CodecError(f"libdeflate level must be 1..12, got {level}")
        self.level = level

    def compress(self, segment) -> bytes:
        return self.lib.deflate_compress(bytes(segment), self.level)

    def decompress(self, segment, raw_len: int = -1) -> bytes:
        if raw_len < 0:  # libdeflate needs the size; a foreign stream goes through zlib instead
            return Zlib().decompress(segment, raw_len)
        try:
            out = self.lib.deflate_decompress(bytes(segment), raw_len)
        except Exception as e:  # deflate.DeflateError: corrupt, short or long
            raise CodecError(f"segment is not valid raw DEFLATE of {raw_len} bytes: {e}") from None
        if len(out) != raw_len:
            raise CodecError(f"segment decompresses to {len(out)} bytes, its frame says {raw_len}")
        return out


@dataclass(frozen=True)
class EngineModel:
    """A BlueField-2-class DEFLATE engine (modelled). Every figure is an input, not a fit.

    - ``decompress_bytes_per_s`` 12.5e9: the thesis (§5.2.3) reports Bitar deserialization
      "greater than 100 Gbps" on the host; 100 Gb/s is used as the engine's rate, a lower bound.
    - ``compress_bytes_per_s`` 12.5e9: *assumption* — an engine on a 100 Gb/s NIC sized to keep
      up with its line rate; the thesis gives no compression rate in absolute terms.
    - ``latency_s`` 5e-6 per op: *assumption* — a PCIe round trip plus descriptor handling
      (a few microseconds).
    - ``lanes`` 2: the thesis's host-side throughput peaks at two submitting threads (§5.2.3),
      read here as the engine saturating with two ops in flight.
    """

    compress_bytes_per_s: float = 12.5e9
    decompress_bytes_per_s: float = 12.5e9
    latency_s: float = 5e-6
    lanes: int = 2

    def op_s(self, nbytes: int, compress: bool) -> float:
        rate = self.compress_bytes_per_s if compress else self.decompress_bytes_per_s
        return self.latency_s + nbytes / rate


class EngineModelCodec:
    """The modelled engine: real DEFLATE bytes (ISA-L level 1 as a stand-in), modelled time."""

    name, modelled = "bf2-model", True

    def __init__(self, level: int = 1, model: EngineModel | None = None):
        self.model = model or EngineModel()
        self._bytes = Isal(level)

    def compress(self, segment) -> bytes:
        return self._bytes.compress(segment)

    def decompress(self, segment, raw_len: int = -1) -> bytes:
        return self._bytes.decompress(segment, raw_len)


ENGINES = {"isal": Isal, "libdeflate": Libdeflate, "zlib": Zlib, "bf2-model": EngineModelCodec}


def engine(name: str, level: int = 1):
    """An engine by name; a clear error lists the choices."""
    try:
        return ENGINES[name](level)
    except KeyError:
        raise CodecError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}") from None
