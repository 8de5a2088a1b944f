"""The gateway's client for the one hop it makes on every call: gateway -> warm worker.

Both ends are ours, and the worker always answers HTTP/1.1 with a Content-Length, so this
client keeps a pool of keep-alive connections per worker and does only what that needs.
It costs a fraction of a general-purpose client's per-request work, which is most of what
the warm-call path spends beyond the handler itself. Everything else in the gateway (S3,
node API, callbacks) uses aiohttp's client.
"""

from __future__ import annotations

import asyncio
import socket
import time

_IDLE_S = 60.0  # close connections idle longer than this (the worker keeps them far longer)


class WorkerUnreachable(Exception):
    """The request never reached the worker: safe to retry elsewhere."""


class WorkerFailed(Exception):
    """The worker took the request and then broke the connection."""


class _Connection:
    __slots__ = ("reader", "writer", "last_used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer, self.last_used = reader, writer, time.monotonic()

    def close(self) -> None:
        self.writer.close()


class WorkerClient:
    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, host: str, port: int) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        except OSError as exc:
            raise WorkerUnreachable(f"{host}:{port}: {exc}") from None
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    def _take(self, address: tuple[str, int]) -> _Connection | None:
        pool = self._idle.get(address)
        now = time.monotonic()
        while pool:
            conn = pool.pop()
            if now - conn.last_used < _IDLE_S and not conn.writer.is_closing():
                return conn
            conn.close()
        return None

    async def request(self, host: str, port: int, headers: dict[str, str], body: bytes, timeout: float) -> tuple[int, dict[str, str], bytes]:
        """POST ``body`` to the worker; returns (status, headers, body)."""
        address = (host, port)
        head = ["POST / HTTP/1.1\r\nHost: worker\r\nContent-Length: ", str(len(body)), "\r\n"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                continue  # never let a header value split the request
            head += [name, ": ", value, "\r\n"]
        head.append("\r\n")
        payload = "".join(head).encode("latin-1", errors="replace") + body
        for attempt in (1, 2):
            conn = self._take(address)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(host, port)
            try:
                async with asyncio.timeout(timeout):
                    conn.writer.write(payload)
                    result = await self._read_response(conn)
            except TimeoutError:
                conn.close()
                raise
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                conn.close()
                # A pooled connection the worker had closed fails before any answer arrives:
                # the request was never taken, so one fresh try is safe.
                if reused and attempt == 1 and isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                    continue
                raise WorkerFailed(f"connection to the worker broke: {type(exc).__name__}") from None
            conn.last_used = time.monotonic()
            self._idle.setdefault(address, []).append(conn)
            return result
        raise WorkerFailed("the worker closed the connection twice")

    @staticmethod
    async def _read_response(conn: _Connection) -> tuple[int, dict[str, str], bytes]:
        raw = await conn.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip()] = value.strip()
        length = int(headers.get("Content-Length", "0"))
        data = await conn.reader.readexactly(length) if length else b""
        return status, headers, data

    def close(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()
