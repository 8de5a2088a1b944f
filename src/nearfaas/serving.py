"""How the gateway and the nodes face the network: a connection cap and a deadline for a
request to start, in front of aiohttp.

aiohttp on its own waits forever for a connection's first request and for the rest of a
request head, so a client that connects and says nothing (or trickles a header a byte at a
time) holds a descriptor for good: 20,000 of them exhaust a process. ``serve`` puts a small
protocol in front of each aiohttp ``RequestHandler``:

1. **Head deadline.** A new connection must deliver a complete request head (up to the blank
   line) within ``head_timeout`` seconds, or it is closed. After a response, aiohttp's own
   ``keepalive_timeout`` closes connections that stay idle. A body that stops arriving is the
   S3 layer's business (``s3/body.py``: 400 RequestTimeout), as the invoke path's is
   (``gateway.read_timeout``).
2. **Connection cap.** At most ``max_connections`` at once. When full, a new connection evicts
   the oldest one that has not yet sent a complete request head (it costs nothing to drop and
   is the likeliest to be an idle flood), else the longest-idle keep-alive connection between
   two requests (its client reconnects, as HTTP clients do when a server closes an idle
   connection). When every connection is busy with a request, the newcomer is closed at once:
   the client sees a reset and retries, as it would against a full S3 front end.

Worked example: with ``max_connections=4096`` and ``head_timeout=10``, a client opening 20,000
idle sockets holds at most 4,096 slots at a time, each for under 10 s; a real client connecting
meanwhile takes the slot of the oldest idle one and is served.

Known caveats:
- The head deadline applies to a connection's first request only; later ones are covered by
  aiohttp's keep-alive timeout, which a client trickling a second head resets with each byte.
- A request's head is found by scanning for a blank line, not by parsing it: a malformed head is
  still aiohttp's to reject (400).
- The process's descriptor limit is raised to its hard limit at start; the cap should stay
  below it (``serve`` lowers the cap to fit and says so).

3. **Memory back after a flood.** Thousands of connections leave the allocators holding the
   memory their handlers used (Python's arenas and glibc's heap keep freed memory for reuse).
   When the count falls from a flood (``FLOOD`` or more) back to a handful (``CALM``), the guard
   collects garbage and asks glibc to hand free pages back (``malloc_trim``), once per flood.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import json
import os
import resource
import time
from collections import OrderedDict

from aiohttp import web

HEAD_TIMEOUT_S = 10.0
KEEPALIVE_TIMEOUT_S = 15.0
MAX_CONNECTIONS = 4096
_FD_RESERVE = 256  # descriptors kept for files, pipes, outgoing connections
FLOOD = 1024  # connections at once that count as a flood ...
CALM = 64  # ... and how few mean it is over: time to give memory back


class ConnectionGuard:
    """Book-keeping shared by every connection of one listening socket."""

    def __init__(self, max_connections: int, head_timeout: float):
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.active: set[_Guarded] = set()
        self.awaiting_head: OrderedDict[_Guarded, None] = OrderedDict()  # oldest first
        self.evicted = 0
        self.refused = 0
        self.head_timeouts = 0
        self.peak = 0  # most connections at once since memory was last given back
        self.trims = 0

    def admit(self, conn: _Guarded) -> bool:
        if len(self.active) >= self.max_connections:
            victim = self._idlest()
            if victim is None:
                self.refused += 1
                return False
            self.awaiting_head.pop(victim, None)
            self.evicted += 1
            victim.close()
        self.active.add(conn)
        self.awaiting_head[conn] = None
        self.peak = max(self.peak, len(self.active))
        return True

    def _idlest(self) -> _Guarded | None:
        """The connection to drop for a newcomer: the oldest that never sent a whole request
        head, else the longest-idle keep-alive connection between requests; None if all are busy."""
        if self.awaiting_head:
            return next(iter(self.awaiting_head))
        idle = [c for c in self.active if c.between_requests()]
        return min(idle, key=lambda c: c.last_activity) if idle else None

    def forget(self, conn: _Guarded) -> None:
        self.active.discard(conn)
        self.awaiting_head.pop(conn, None)
        if self.peak >= FLOOD and len(self.active) <= CALM:
            self.peak = len(self.active)
            self.trims += 1
            asyncio.get_running_loop().call_later(1.0, give_memory_back)  # once the last handlers are gone

    def stats(self) -> dict:
        return {"connections": len(self.active), "awaiting_head": len(self.awaiting_head), "evicted": self.evicted,
                "refused": self.refused, "head_timeouts": self.head_timeouts, "max_connections": self.max_connections,
                "memory_trims": self.trims}


def give_memory_back() -> None:
    """Free what garbage holds and return free heap pages to the kernel (glibc only)."""
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        try:
            ctypes.CDLL(libc_name).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim): nothing to do
            pass


class _Guarded(asyncio.Protocol):
    """One connection: forwards everything to aiohttp's handler, watching for the first head."""

    def __init__(self, inner, guard: ConnectionGuard):
        self.inner, self.guard = inner, guard
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, so a blank line split across reads is still found
        self.admitted = False
        self.last_activity = 0.0

    def between_requests(self) -> bool:
        """Idle keep-alive: no request running or queued (aiohttp's own flags; if a future
        aiohttp drops them, the connection counts as busy and is never evicted)."""
        inner = self.inner
        return not getattr(inner, "_request_in_progress", True) and not getattr(inner, "_messages", True)

    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.guard.admit(self):
            transport.abort()
            return
        self.admitted = True
        self.last_activity = time.monotonic()
        self.timer = asyncio.get_running_loop().call_later(self.guard.head_timeout, self._head_timed_out)
        self.inner.connection_made(transport)

    def _head_timed_out(self) -> None:
        self.guard.head_timeouts += 1
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        self.last_activity = time.monotonic()
        if self.timer is not None:
            seen = self.tail + data
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self.timer.cancel()
                self.timer = None
                self.guard.awaiting_head.pop(self, None)
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def connection_lost(self, exc) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.guard.forget(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardCollector:
    """Prometheus view of a ConnectionGuard (registered by the gateway once it listens)."""

    def __init__(self, server: str):
        self.server, self.guard = server, None

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.guard is None:
            return
        stats = self.guard.stats()
        open_ = GaugeMetricFamily("nearfaas_connections", "Open client connections (measured)", labels=["server", "state"])
        open_.add_metric([self.server, "awaiting_head"], stats["awaiting_head"])
        open_.add_metric([self.server, "in_use"], stats["connections"] - stats["awaiting_head"])
        yield open_
        closed = CounterMetricFamily("nearfaas_connections_closed", "Connections the server closed to protect itself",
                                     labels=["server", "reason"])
        for reason in ("evicted", "refused", "head_timeouts"):
            closed.add_metric([self.server, reason], stats[reason])
        yield closed


def _raise_fd_limit(wanted: int) -> int:
    """Raise the soft descriptor limit to the hard one; how many connections fit under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return max(1, min(wanted, soft - _FD_RESERVE))


async def serve(runner: web.AppRunner, host: str, port: int, *, backlog: int = 1024, max_connections: int = MAX_CONNECTIONS,
                head_timeout: float = HEAD_TIMEOUT_S, name: str = "server") -> tuple[asyncio.AbstractServer, ConnectionGuard]:
    """Listen on host:port with ``runner``'s application behind a ConnectionGuard. The caller
    closes the returned server before ``runner.cleanup()``."""
    fitted = _raise_fd_limit(max_connections)
    if fitted < max_connections:
        print(json.dumps({"event": "connection-cap-lowered", "server": name, "asked": max_connections, "cap": fitted,
                          "why": "the descriptor limit (ulimit -n) leaves room for no more"}), flush=True)
    guard = ConnectionGuard(fitted, head_timeout)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Guarded(runner.server(), guard), host, port, backlog=backlog, reuse_address=True)
    return server, guard


async def serve_unix(runner: web.AppRunner, path: str, guard: ConnectionGuard) -> asyncio.AbstractServer:
    """The same application on a Unix socket (mode 0600, in the platform's 0700 state folder):
    the balancer's way in, which no other process can take (cluster/balancer.py). Shares the TCP
    listener's connection guard."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket a killed process left
    server = await asyncio.get_running_loop().create_unix_server(lambda: _Guarded(runner.server(), guard), path=path)
    os.chmod(path, 0o600)
    return server
