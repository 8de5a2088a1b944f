"""Pre-allocated op buffers, recycled after every op: Bitar's bound on in-flight memory.

The thesis's Bitar pre-allocates DPDK mbufs because embedded devices have little memory and an
allocation per op disrupts the engine's throughput (§5.2.1). Here the pool is one anonymous
mapping cut into equal buffers (pages are only backed once touched); an op takes a buffer for
its output and the caller ``recycle``s it once it has copied the bytes out. The pool's size is
the device's window — the most bytes in flight (the thesis's runs used 160 MB). A caller that
finds the pool empty waits for a buffer, which is back-pressure, not an error.

Known caveats:
- A buffer recycled twice, or one from another pool, raises: a silent double free would hand
  one buffer to two ops.
"""

from __future__ import annotations

import mmap
import threading


class PoolError(RuntimeError):
    pass


class Buffer:
    __slots__ = ("pool", "index", "view", "used")

    def __init__(self, pool: BufferPool, index: int, view: memoryview):
        self.pool, self.index, self.view, self.used = pool, index, view, 0

    def data(self) -> memoryview:
        return self.view[:self.used]


class BufferPool:
    def __init__(self, count: int, size: int):
        if count < 1 or size < 1:
            raise PoolError(f"a pool needs count >= 1 and size >= 1, got {count} x {size}")
        self.count, self.size = count, size
        self._mem = mmap.mmap(-1, count * size)
        whole = memoryview(self._mem)
        self._buffers = [Buffer(self, i, whole[i * size:(i + 1) * size]) for i in range(count)]
        self._free = list(range(count - 1, -1, -1))
        self._out = [False] * count
        self._cond = threading.Condition()
        self.acquired = self.recycled = 0

    @property
    def free(self) -> int:
        with self._cond:
            return len(self._free)

    def acquire(self, timeout: float | None = None) -> Buffer:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout):
                raise PoolError(f"no free buffer in {timeout} s (all {self.count} in flight)")
            i = self._free.pop()
            self._out[i] = True
            self.acquired += 1
            buf = self._buffers[i]
            buf.used = 0
            return buf

    def recycle(self, buf: Buffer) -> None:
        if buf.pool is not self:
            raise PoolError("recycle: the buffer belongs to another pool")
        with self._cond:
            if not self._out[buf.index]:
                raise PoolError(f"recycle: buffer {buf.index} is already free (recycled twice)")
            self._out[buf.index] = False
            self._free.append(buf.index)
            self.recycled += 1
            self._cond.notify()
