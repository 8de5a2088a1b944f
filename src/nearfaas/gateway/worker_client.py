"""The gateway's client for the one hop it makes on every call: gateway -> warm worker.

Both ends are ours, and the worker always answers HTTP/1.1 with a Content-Length, so this
client keeps a pool of keep-alive connections per worker and does only what that needs.
It costs a fraction of a general-purpose client's per-request work, which is most of what
the warm-call path spends beyond the handler itself. Everything else in the gateway (S3,
node API, callbacks) uses aiohttp's client.

A worker runs the function's code, so its answer is not trusted to be small: a Content-Length
above ``max_response`` (``gateway.max_response``, 32 MiB by default) is refused before a byte of
the body is read, as is any framing but Content-Length (chunked), and the connection is closed.
The header block is bounded by the reader's 1 MiB limit. Worked example: a handler that writes
``Content-Length: 1000000000000`` to its socket and then streams forever gets its caller a 502
naming the cap, and the gateway holds none of it.

A jailed worker (node/netns.py) answers on a unix socket, ``serve.sock``, that it bound inside
its own network namespace; the gateway, on the same host and root like the node, connects to it
directly (``unix=``): one hop, as for an unjailed worker's TCP port, never through the node's
event loop. Worked example: ``request("127.0.0.1", 41234, headers, body, 10,
unix="/run/nearfaas-net/<node>/<instance>/serve.sock")`` pools connections to that path; the
host and port (the node's relay, node/netrelay.py) are then not used.

Known caveats:
- The cap is per answer; 32 calls in flight may still hold up to 32 answers at once.
"""

from __future__ import annotations

import asyncio
import socket
import time

from multidict import CIMultiDict

_IDLE_S = 60.0  # close connections idle longer than this (the worker keeps them far longer)
MAX_RESPONSE = 32 * 1024 * 1024  # the default for gateway.max_response


class WorkerUnreachable(Exception):
    """The request never reached the worker: safe to retry elsewhere."""


class WorkerFailed(Exception):
    """The worker took the request and then broke the connection."""


class ResponseTooLarge(WorkerFailed):
    """The worker announced an answer larger than the gateway will hold (or framed it otherwise)."""


class _Connection:
    __slots__ = ("reader", "writer", "last_used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.last_used = reader, writer, time.monotonic()

    def close(self) -> None:
        self.writer.close()


class WorkerClient:
    def __init__(self, max_response: int = MAX_RESPONSE) -> None:
        self._idle: dict[tuple[str, int] | str, list[_Connection]] = {}
        self.max_response = max_response

    async def _connect(self, host: str, port: int, unix: str | None = None) -> _Connection:
        if unix:
            try:
                reader, writer = await asyncio.open_unix_connection(unix, limit=1 << 20)
            except OSError as exc:
                raise WorkerUnreachable(f"{unix}: {exc}") from None
            return _Connection(reader, writer)
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        except OSError as exc:
            raise WorkerUnreachable(f"{host}:{port}: {exc}") from None
        try:
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:  # reset already: nothing was sent, so it is as if never reached
            writer.close()
            raise WorkerUnreachable(f"{host}:{port}: {exc}") from None
        return _Connection(reader, writer)

    def _take(self, address: tuple[str, int] | str) -> _Connection | None:
        pool = self._idle.get(address)
        if not pool:
            return None
        # The pool is in last-used order: sweep the stale ones from the front, so a worker that
        # was busy once does not keep a pile of idle sockets open, then reuse the most recent.
        now = time.monotonic()
        stale = 0
        while stale < len(pool) and now - pool[stale].last_used >= _IDLE_S:
            pool[stale].close()
            stale += 1
        del pool[:stale]
        while pool:
            conn = pool.pop()
            # at_eof: the worker closed it while idle; writing to it would only cost a retry.
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                return conn
            conn.close()
        del self._idle[address]
        return None

    def forget(self, host: str, port: int, unix: str | None = None) -> None:
        """Close every idle connection to a worker that is gone (or going)."""
        for conn in self._idle.pop(unix or (host, port), []):
            conn.close()

    async def request(self, host: str, port: int, headers: dict[str, str], body: bytes, timeout: float,
                      unix: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """POST ``body`` to the worker (at ``unix``, its serving socket, when given); returns
        (status, headers, body).

        Raises WorkerUnreachable (never connected), WorkerFailed (connected, then broke or
        answered garbage) or TimeoutError (no answer within ``timeout``, connecting included).
        """
        address = unix or (host, port)
        head = ["POST / HTTP/1.1\r\nHost: worker\r\nContent-Length: ", str(len(body)), "\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                continue  # never let a header value split the request
            head += [name, ": ", value, "\r\n"]
        head.append("\r\n")
        payload = "".join(head).encode("latin-1", errors="replace") + body
        # One clock for the whole call, connecting included: a worker whose listen backlog is
        # full accepts no connection, and that must not hang past the call's timeout.
        async with asyncio.timeout(timeout):
            for attempt in (1, 2):
                conn = self._take(address)
                reused = conn is not None
                try:
                    if conn is None:
                        conn = await self._connect(host, port, unix)
                    conn.writer.write(payload)
                    result = await self._read_response(conn, self.max_response)
                except BaseException as exc:
                    # Whatever went wrong (a broken connection, a garbled answer, the timeout or a
                    # cancellation), the connection is in an unknown state: never pool it again.
                    if conn is not None:
                        conn.close()
                    if attempt == 2 and isinstance(exc, WorkerUnreachable):
                        # The first attempt may have reached a worker that then died (EOF looks the
                        # same as an idle close): the caller must not treat this call as unsent.
                        raise WorkerFailed("the worker closed the connection and can no longer be reached; "
                                           "the request may have been delivered") from None
                    if isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)):
                        # Usually a pooled connection the worker had closed while idle: one fresh try.
                        # If the worker died instead, the fresh try cannot connect (handled above).
                        if reused and attempt == 1 and isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                            continue
                        raise WorkerFailed(f"connection to the worker broke: {type(exc).__name__}") from None
                    if isinstance(exc, ResponseTooLarge):
                        raise
                    if isinstance(exc, (ValueError, IndexError, asyncio.LimitOverrunError)):
                        raise WorkerFailed(f"the worker sent a malformed response: {type(exc).__name__}: {exc}") from None
                    raise
                conn.last_used = time.monotonic()
                self._idle.setdefault(address, []).append(conn)
                return result
        raise WorkerFailed("the worker closed the connection twice")

    @staticmethod
    async def _read_response(conn: _Connection, max_response: int = MAX_RESPONSE) -> tuple[int, CIMultiDict, bytes]:
        raw = await conn.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: CIMultiDict = CIMultiDict()  # a header sent twice (Set-Cookie) stays twice
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers.add(name.strip(), value.strip())
        if "Transfer-Encoding" in headers:  # the worker frames with Content-Length; anything else is not ours
            raise ResponseTooLarge(f"the worker framed its answer with Transfer-Encoding: {headers['Transfer-Encoding'][:40]!r}; "
                                   "only Content-Length is accepted")
        length = int(headers.get("Content-Length", "0"))
        if length < 0:
            raise ValueError(f"negative Content-Length {length}")
        if length > max_response:
            # Refused before reading: the body could be any size, or endless.
            raise ResponseTooLarge(f"the answer is {length} bytes, over the gateway's limit of {max_response} bytes "
                                   "(gateway.max_response); write large results to an object and return its reference")
        data = await conn.reader.readexactly(length) if length else b""
        return status, headers, data

    def close(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()
