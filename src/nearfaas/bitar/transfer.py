"""Bitar on the wire: object transfers compressed with standard HTTP content coding (gzip), only
when the client asked and only when it pays (issue 19).

A client that wants it sends ``Accept-Encoding: gzip`` *and* ``X-Nearfaas-Transfer: bitar``; the
server then streams the object as gzip members, one per 64 KiB segment, compressed on a Bitar
device (segments in parallel over its queue pairs). Multi-member gzip is plain RFC 1952: any
gzip reader decodes it. A plain S3 client never sends the opt-in header, so it gets exactly
what S3 gives it — the same bytes, Content-Length and ETag — even when its HTTP library
advertises gzip (``requests`` does by default).

When it pays (``pays``): moving ``n`` bytes over a link of bandwidth ``B`` costs ``n / B``;
compressed it costs ``n / C + r n / B + n / D`` (compress at C, ratio r, decompress at D, all
bytes per second of raw data, done one after another — the conservative case). So compression
pays when ``1 / B > 1 / C + r / B + 1 / D``. The client decides, because it knows its link; the
ratio it assumes is the one it last saw (``RatioTracker``), starting from 0.5.

Worked example: the ``s3-like`` link (90 MB/s) with ISA-L measured here (C ~ 450 MB/s,
D ~ 500 MB/s) at r = 0.5: 11.1 ms/MB plain vs 2.2 + 5.6 + 2.0 = 9.8 ms/MB compressed: pays.
On ``dc-25g`` (2.8 GB/s) the codec alone costs more than the transfer: it does not.

Writes mirror reads: a client PUTs gzip members with ``Content-Encoding: gzip`` and the opt-in
header (``sent_compressed``); the server decodes the stream (``gunzip_stream``, bounded) and
stores the raw bytes. Without the opt-in header a gzip PUT is stored as sent, as S3 does.

Known caveats:
- Range requests, objects under one segment, multipart uploads, and objects stored with their
  own Content-Encoding are always sent as they are (a 206 of a compressed stream, or a gzip
  inside a gzip, would surprise any client).
- The server pays the compression CPU; on a busy storage node that competes with functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections import deque

from nearfaas.bitar.codecs import MAX_SEGMENT
from nearfaas.bitar.frame import unpack_header

OPT_IN_HEADER = "X-Nearfaas-Transfer"
OPT_IN_VALUE = "bitar"
MIN_BYTES = MAX_SEGMENT  # smaller objects go as they are: one segment saves too little
# ISA-L level 1 on the synthetic tables here (benchmarks/bitar.py, 2-core VM): measured rates the
# client assumes until it has seen its own; conservative (lower than ISA-L's usual).
DEFAULT_COMPRESS_BPS = 450e6
DEFAULT_DECOMPRESS_BPS = 500e6
_GZIP_HEADER = bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])  # deflate, no flags, no mtime, OS unknown


def pays(link_bytes_per_s: float, ratio: float, compress_bps: float = DEFAULT_COMPRESS_BPS,
         decompress_bps: float = DEFAULT_DECOMPRESS_BPS) -> bool:
    """Whether compressing a transfer over this link is predicted to be faster (module doc)."""
    if not link_bytes_per_s or link_bytes_per_s == float("inf"):
        return False
    return 1 / link_bytes_per_s > 1 / compress_bps + ratio / link_bytes_per_s + 1 / decompress_bps


def wants(headers, size: int, has_range: bool, stored_encoding: str | None) -> bool:
    """Whether a request opted in and the object may be sent compressed."""
    if has_range or stored_encoding or size < MIN_BYTES:
        return False
    if headers.get(OPT_IN_HEADER, "").strip().lower() != OPT_IN_VALUE:
        return False
    return any(part.split(";")[0].strip().lower() == "gzip" and "q=0" not in part.replace(" ", "").split(";")[1:]
               for part in headers.get("Accept-Encoding", "").split(","))


def sent_compressed(headers) -> bool:
    """Whether a request body was sent as Bitar gzip members (the opt-in header and exactly gzip)."""
    return (headers.get(OPT_IN_HEADER, "").strip().lower() == OPT_IN_VALUE
            and headers.get("Content-Encoding", "").strip().lower() == "gzip")


def gzip_members(frame) -> bytes:
    """A Bitar frame as gzip members (RFC 1952), one per segment: header, DEFLATE, CRC-32, size."""
    h = unpack_header(frame)
    view, pos, out = memoryview(frame), h.size, []
    for n, crc, raw in zip(h.lengths, h.crcs, h.raw_lengths(), strict=True):
        out += [_GZIP_HEADER, view[pos:pos + n], struct.pack("<II", crc, raw & 0xFFFFFFFF)]
        pos += n
    return b"".join(out)


gzip_member = gzip_members  # a one-segment frame is one member


class Counters:
    """Bytes in and on the wire, for /metrics (thread-safe: the codec runs off the event loop)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.raw = self.wire = self.transfers = 0

    def add(self, raw: int, wire: int) -> None:
        with self._lock:
            self.raw += raw
            self.wire += wire


async def gzip_stream(chunks, device, depth: int | None = None):
    """Re-chunk an async byte stream into 64 KiB segments and yield each as a gzip member,
    keeping ``depth`` segments in flight on ``device`` (default: two per worker thread). Closed
    early (the client went away), it cancels what has not started and waits for nothing."""
    depth = depth or 2 * device.threads
    pending: deque = deque()
    buf = bytearray()

    def submit(segment: bytes):
        pending.append(asyncio.wrap_future(device.compress_async(segment)))

    try:
        async for chunk in chunks:
            buf += chunk
            while len(buf) >= MAX_SEGMENT:
                submit(bytes(buf[:MAX_SEGMENT]))
                del buf[:MAX_SEGMENT]
                while len(pending) >= depth:
                    yield gzip_member(await pending.popleft())
        if buf:
            submit(bytes(buf))
        while pending:
            yield gzip_member(await pending.popleft())
    finally:
        for f in pending:
            f.cancel()
            f.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no "never retrieved" noise


STEP_OUT = 1 << 20  # decoded bytes per decompress call: bounds the gateway's memory per PUT


async def gunzip_stream(chunks, limit: int):
    """Decode a streamed (multi-member) gzip body chunk by chunk, off the event loop, at most
    ``STEP_OUT`` bytes at a time; more than ``limit`` decoded bytes raise ``ValueError`` (a small
    body must not inflate without bound), and so do bad gzip, truncation and an empty body."""
    import zlib

    loop = asyncio.get_running_loop()
    state = {"d": zlib.decompressobj(31), "started": False, "total": 0, "members": 0}

    def step(data: bytes) -> list[bytes]:
        out = []
        while data:
            d = state["d"]
            piece = d.decompress(data, min(STEP_OUT, limit - state["total"] + 1))  # >= 1: never "unlimited"
            state["started"], state["total"] = True, state["total"] + len(piece)
            if state["total"] > limit:
                raise ValueError(f"the gzip body decodes to more than {limit} bytes")
            out.append(piece)
            if d.unconsumed_tail:  # more output pending from this input: keep going, bounded
                data = d.unconsumed_tail
                continue
            if not d.eof:
                break
            state["members"] += 1
            data = d.unused_data  # the next member starts here
            state["d"], state["started"] = zlib.decompressobj(31), False
        return out

    async for chunk in chunks:
        data = bytes(chunk)
        try:
            pieces = await loop.run_in_executor(None, step, data)
        except zlib.error as e:
            raise ValueError(f"the body is not valid gzip: {e}") from None
        for piece in pieces:
            if piece:
                yield piece
    if state["started"] and not state["d"].eof:
        raise ValueError("the gzip body ends inside a member (truncated)")
    if not state["members"]:
        raise ValueError("the body holds no gzip member (empty)")


def gunzip(data) -> bytes:
    """Decode a (multi-member) gzip body: ISA-L when installed, else the standard library."""
    try:
        from isal import igzip
    except ImportError:  # pragma: no cover - make setup installs isal
        import gzip as igzip
    return igzip.decompress(bytes(data))


class RatioTracker:
    """The compression ratio a client last saw per bucket (an EWMA), so a client whose data
    stopped compressing stops asking. Thread-safe; bounded to ``max_buckets`` entries."""

    def __init__(self, start: float = 0.5, weight: float = 0.3, max_buckets: int = 1024):
        self.start, self.weight, self.max_buckets = start, weight, max_buckets
        self._by_bucket: dict[str, float] = {}
        self._lock = threading.Lock()

    def ratio(self, bucket: str) -> float:
        with self._lock:
            return self._by_bucket.get(bucket, self.start)

    def saw(self, bucket: str, raw: int, wire: int) -> None:
        if raw <= 0:
            return
        with self._lock:
            old = self._by_bucket.pop(bucket, self.start)
            if len(self._by_bucket) >= self.max_buckets:
                self._by_bucket.pop(next(iter(self._by_bucket)))  # the least recently seen
            self._by_bucket[bucket] = (1 - self.weight) * old + self.weight * (wire / raw)


class Server:
    """The serving side: one Bitar device shared by every compressed response, and counters."""

    def __init__(self, engine: str = "isal", threads: int = 2):
        self.engine, self.threads = engine, threads
        self._device = None
        self._lock = threading.Lock()
        self.counters = Counters()

    @property
    def device(self):
        with self._lock:  # built on first use: a gateway that never compresses holds no threads
            if self._device is None:
                from nearfaas.bitar.device import Device

                self._device = Device(self.engine, threads=self.threads)
            return self._device

    async def stream(self, chunks):
        """``chunks`` as gzip members, counted in ``counters``."""
        with self.counters._lock:
            self.counters.transfers += 1
        async with contextlib.aclosing(gzip_stream(_counting(chunks, self.counters), self.device)) as members:
            async for member in members:  # closed with us: pending segments are cancelled
                self.counters.add(0, len(member))
                yield member

    def close(self) -> None:
        if self._device is not None:
            self._device.close()


async def _counting(chunks, counters: Counters):
    async for chunk in chunks:
        counters.add(len(chunk), 0)
        yield chunk
