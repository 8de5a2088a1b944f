"""A Bitar device: one DEFLATE engine, N worker threads each draining its own queue pair.

The thesis's Bitar (§5.2.2) hides DPDK's packet model behind a (de)compress call: inputs are
sliced into <= 64 KiB segments, each segment is one op on a queue pair, outputs land in
pre-allocated buffers that are recycled, and several cores feed the engine. This is the same
shape over the engines in ``codecs``:

    caller ──segments──▶ queue pair 0 ──▶ worker 0 ──┐
                         queue pair 1 ──▶ worker 1 ──┼──▶ pool buffers ──▶ caller copies out, recycles
                         ...                         ┘

* ``compress(data)`` returns a Bitar frame (``frame``); ``decompress(frame)`` the raw bytes.
  Both are synchronous; ``compress_async`` / ``decompress_async`` return futures of the same.
* ``run_compress`` / ``run_decompress`` also return the op count and the host CPU seconds the
  workers spent (measured, ``time.thread_time``) and, for the modelled engine, the engine's
  makespan for the call (modelled: ops scheduled on its lanes, ``EngineModel``; no host CPU).
* ``inflate_raw(stream)`` reads any raw DEFLATE stream (e.g. stock zlib's, ``wbits=-15``).

Worked example: 1 MiB at the default segment size is 16 ops; with ``threads=2`` ops alternate
between queue pairs 0 and 1; the window (default 32 MiB of buffers) never fills, so the caller
submits all 16, then copies results out in order, recycling each buffer as it goes.

Known caveats:
- Python's zlib, ISA-L and libdeflate bindings release the GIL while they (de)compress, so
  threads scale on real cores; the segmenting, copying and CRC are Python-side costs that
  ``benchmarks/bitar.py`` includes in every figure.
- Results come back in submission order: one slow op holds the copy-out, not the workers.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from nearfaas.bitar import frame as fr
from nearfaas.bitar.codecs import MAX_SEGMENT, CodecError, engine
from nearfaas.bitar.pool import BufferPool

DEFAULT_WINDOW = 32 * 1024 * 1024

try:  # ISA-L's CRC-32 is ~5x zlib's here (0.8 vs 3.9 ms per 16 MB); same polynomial, same value
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - make setup installs isal
    _crc32 = zlib.crc32


def buffer_size(segment_size: int) -> int:
    """Room for one op's output: a raw segment, or its DEFLATE stream when it does not shrink
    (stored blocks add 5 bytes per 64 KiB; the slack covers every engine's worst case)."""
    return segment_size + segment_size // 16 + 1024


@dataclass
class Run:
    output: bytearray
    ops: int
    host_cpu_s: float  # measured: the workers' thread CPU time (0 for the modelled engine: it uses none)
    engine_s: float  # modelled: the engine's makespan over its lanes for this call (0 for software engines)
    wall_s: float


class _Op:
    __slots__ = ("compress", "src", "raw_len", "buf", "future", "cpu_s", "crc")

    def __init__(self, compress, src, raw_len, buf):
        self.compress, self.src, self.raw_len, self.buf = compress, src, raw_len, buf
        self.future: Future = Future()
        self.cpu_s, self.crc = 0.0, 0


class QueuePair:
    """One worker's submission queue; completions are the ops' futures."""

    def __init__(self, index: int):
        self.index, self.submitted, self.completed = index, 0, 0
        self.sq: queue.SimpleQueue = queue.SimpleQueue()


class Device:
    def __init__(self, engine_name: str = "isal", threads: int = 1, level: int = 1,
                 segment_size: int = MAX_SEGMENT, window_bytes: int = DEFAULT_WINDOW):
        if not 1 <= segment_size <= MAX_SEGMENT:
            raise CodecError(f"segment_size must be 1..{MAX_SEGMENT} bytes (the engine's packet limit), got {segment_size}")
        if not 1 <= threads <= 64:
            raise CodecError(f"threads must be 1..64, got {threads}")
        self.codec = engine(engine_name, level)
        self.name, self.threads, self.segment_size = engine_name, threads, segment_size
        size = buffer_size(segment_size)
        self.pool = BufferPool(max(2 * threads, window_bytes // size), size)
        self.queue_pairs = [QueuePair(i) for i in range(threads)]
        self._next_qp = itertools.count()
        self._workers = [threading.Thread(target=self._work, args=(qp,), daemon=True, name=f"bitar-{engine_name}-{qp.index}")
                         for qp in self.queue_pairs]
        for w in self._workers:
            w.start()
        self._driver = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bitar-submit")
        self._closed = False
        self._active = 0  # calls inside _pump; close() waits for them
        self._state = threading.Condition()

    # ---- the public calls -------------------------------------------------------------
    def compress(self, data) -> bytearray:
        return self.run_compress(data).output

    def decompress(self, frame) -> bytearray:
        return self.run_decompress(frame).output

    def compress_async(self, data) -> Future:
        return self._driver.submit(self.compress, data)

    def decompress_async(self, frame) -> Future:
        return self._driver.submit(self.decompress, frame)

    def run_compress(self, data) -> Run:
        view = memoryview(data).cast("B")
        n = fr.segments_for(len(view), self.segment_size)
        head = fr.header_size(n)
        out = bytearray(head)
        sizes = [min(self.segment_size, len(view) - i * self.segment_size) for i in range(n)]
        srcs = (view[i * self.segment_size:i * self.segment_size + s] for i, s in enumerate(sizes))
        lengths, crcs = [], []

        def take(op):
            data = op.buf.data()
            out.extend(data)
            lengths.append(len(data))
            crcs.append(op.crc)

        run = self._pump(True, zip(srcs, sizes, strict=True), take)
        out[:head] = fr.pack_header(fr.Header(self.segment_size, len(view), tuple(lengths), tuple(crcs)))
        run.output = out
        return run

    def run_decompress(self, frame) -> Run:
        h = fr.unpack_header(frame)
        view = memoryview(frame)
        out = bytearray(h.raw_len)
        starts = list(itertools.accumulate(h.lengths, initial=h.size))[:-1]
        srcs = ((view[s:s + n], r) for s, n, r in zip(starts, h.lengths, h.raw_lengths(), strict=True))
        pos, index = 0, itertools.count()

        def take(op):
            nonlocal pos
            i, data = next(index), op.buf.data()
            if op.crc != h.crcs[i]:
                raise CodecError(f"segment {i}: CRC-32 {op.crc:#010x} does not match the frame's {h.crcs[i]:#010x} (corrupt payload)")
            out[pos:pos + len(data)] = data
            pos += len(data)

        run = self._pump(False, srcs, take)
        run.output = out
        return run

    def inflate_raw(self, stream, max_out: int = 1 << 30) -> bytes:
        """Decompress one raw DEFLATE stream from any producer (stock zlib with wbits=-15,
        gzip's payload): a single op, since a foreign stream has no segment table. More than
        ``max_out`` bytes of output is an error, not an allocation."""
        d = zlib.decompressobj(-15)
        try:
            out = d.decompress(stream, max_out + 1)
        except zlib.error as e:
            raise CodecError(f"not valid raw DEFLATE: {e}") from None
        if len(out) > max_out or d.unconsumed_tail:
            raise CodecError(f"the stream inflates to more than {max_out} bytes (raise max_out if that is expected)")
        if not d.eof:
            raise CodecError("the DEFLATE stream is truncated")
        return out

    def close(self) -> None:
        with self._state:
            if self._closed:
                return
            self._closed = True  # no new call starts; calls already running finish first
            self._state.wait_for(lambda: self._active == 0)
        self._driver.shutdown(wait=True)
        for qp in self.queue_pairs:
            qp.sq.put(None)
        for w in self._workers:
            w.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the machinery ----------------------------------------------------------------
    def _pump(self, compress: bool, work, take) -> Run:
        """Submit ops while buffers are free; copy results out in order; always recycle — a
        buffer a worker may still be writing goes back only once its op is done."""
        with self._state:
            if self._closed:
                raise CodecError("device is closed")
            self._active += 1
        t0 = time.perf_counter()
        pending: deque[_Op] = deque()
        ops, cpu = 0, 0.0
        engine_lanes = [0.0] * self._lanes()
        error = None

        def finish(op):
            nonlocal cpu, error
            try:
                op.future.result()
                cpu += op.cpu_s
                self._charge(engine_lanes, op.raw_len, compress)
                if error is None:
                    take(op)
            except Exception as e:  # keep draining: every buffer must come back
                error = error or e
            finally:
                if op.future.done():
                    self.pool.recycle(op.buf)
                else:  # interrupted while waiting (KeyboardInterrupt): the worker still owns it
                    op.future.add_done_callback(lambda _f, b=op.buf: self.pool.recycle(b))

        try:
            for src, raw_len in work:
                if error is not None:
                    break
                while pending and self.pool.free == 0:
                    finish(pending.popleft())
                op = _Op(compress, src, raw_len, self.pool.acquire())
                qp = self.queue_pairs[next(self._next_qp) % self.threads]
                qp.sq.put(op)
                pending.append(op)
                ops += 1
        except BaseException:
            for op in pending:  # not waiting for them: each buffer comes back when its op ends
                op.future.add_done_callback(lambda _f, b=op.buf: self.pool.recycle(b))
            pending.clear()
            raise
        finally:
            while pending:
                finish(pending.popleft())
            with self._state:
                self._active -= 1
                self._state.notify_all()
        if error is not None:
            raise error
        # The modelled engine spends no host CPU: the stand-in codec's CPU is not reported.
        return Run(bytearray(), ops, 0.0 if self.codec.modelled else cpu,
                   max(engine_lanes, default=0.0) if self.codec.modelled else 0.0, time.perf_counter() - t0)

    def _lanes(self) -> int:
        return self.codec.model.lanes if self.codec.modelled else 1

    def _charge(self, lanes: list[float], raw_len: int, compress: bool) -> None:
        """Modelled engine: the op starts on the lane that frees first (ops in submission order)."""
        if self.codec.modelled:
            heapq.heapify(lanes)
            heapq.heapreplace(lanes, lanes[0] + self.codec.model.op_s(raw_len, compress))

    def _work(self, qp: QueuePair) -> None:
        while (op := qp.sq.get()) is not None:
            qp.submitted += 1  # counted by the queue pair's one worker: no race between callers
            try:
                c0 = time.thread_time()
                if op.compress:
                    result = self.codec.compress(op.src)
                    op.crc = _crc32(op.src)
                else:
                    result = self.codec.decompress(op.src, op.raw_len)
                    op.crc = _crc32(result)
                if len(result) > len(op.buf.view):
                    raise CodecError(f"op output {len(result)} bytes exceeds its {len(op.buf.view)}-byte buffer")
                op.buf.view[:len(result)] = result
                op.buf.used = len(result)
                op.cpu_s = time.thread_time() - c0
                qp.completed += 1
                op.future.set_result(None)
            except BaseException as e:  # an op never kills its worker
                op.future.set_exception(e if isinstance(e, Exception) else CodecError(repr(e)))
