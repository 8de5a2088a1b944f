"""Client of the executor's stream functions (docs/fastpath.md, "Stream functions").

A request is one TCP connection to the executor's ``--stream`` address (the ready file's
``stream_addr``): a 16-byte header (``stream_id: u64 LE``, ``payload_len: u64 LE``, or
``STREAM_UNTIL_EOF`` to end the payload by half-closing), then the payload, which the function
consumes as it arrives; the reply is ``status: u8``, ``count: u32 LE`` and ``count`` elements,
after which the executor closes the connection, or with ``STREAM_KEEP_ALIVE`` or-ed into a
declared payload_len waits for the next request (``Connection``).

    status, top = call("127.0.0.1:9300", 5, b"17 4, 99\\n3")              # a parse -> topk chain
    status, top = call(addr, 6, encode([3.5, 1.0], "f32"), dtype="f32")     # binary f32 elements
    status, pairs = call(addr, 7, (chunk for chunk in chunks), dtype="pairs")  # frequent, until EOF
    with Connection(addr) as conn:                                           # many requests, one handshake
        answers = [conn.call(6, encode(batch)) for batch in batches]
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable

from nearfaas.fastpath.client import FastpathError, parse_addr
from nearfaas.fastpath.wire import (
    STREAM_ELEM_FORMATS,
    STREAM_ELEM_SIZE,
    STREAM_HEAD,
    STREAM_KEEP_ALIVE,
    STREAM_PAIR,
    STREAM_REPLY_HEAD,
    STREAM_UNTIL_EOF,
    status_name,
)

__all__ = ["DTYPES", "Connection", "StreamError", "call", "decode", "encode", "encode_head"]

#: Reply element types: "u32" and "f32" (Top-K), "pairs" ((value, count) from ``frequent``).
DTYPES = ("u32", "f32", "pairs")


class StreamError(FastpathError):
    """The request could not be made or its reply could not be read (not a status: a status,
    UNKNOWN or TIMEOUT included, is returned by ``call``)."""


def encode_head(stream_id: int, payload_len: int = STREAM_UNTIL_EOF) -> bytes:
    """The 16-byte request header."""
    if not isinstance(stream_id, int) or not 0 <= stream_id <= 0xFFFF_FFFF_FFFF_FFFF:
        raise ValueError(f"stream_id must be an integer in 0..2**64-1, got {stream_id!r}")
    if not isinstance(payload_len, int) or not 0 <= payload_len <= STREAM_UNTIL_EOF:
        raise ValueError(f"payload length must be an integer in 0..2**64-1, got {payload_len!r}")
    return STREAM_HEAD.pack(stream_id, payload_len)


def encode(values: Iterable, dtype: str = "u32") -> bytes:
    """Elements as a binary payload (little-endian u32 or f32)."""
    fmt = STREAM_ELEM_FORMATS.get(dtype)
    if fmt is None:
        raise ValueError(f"dtype must be one of {sorted(STREAM_ELEM_FORMATS)} for a payload, got {dtype!r}")
    values = list(values)
    return struct.pack(f"<{len(values)}{fmt[1]}", *values)


def decode(reply: bytes, dtype: str = "u32") -> tuple[str, list]:
    """(status name, values) of a whole reply; StreamError when it is malformed."""
    _check_dtype(dtype)
    if len(reply) < STREAM_REPLY_HEAD.size:
        raise StreamError(f"stream reply of {len(reply)} bytes is shorter than its 5-byte head (status u8, count u32 LE)"
                          if reply else "the executor closed the connection without a reply "
                          "(over --stream-max-connections, or it stopped)")
    status, count = STREAM_REPLY_HEAD.unpack_from(reply)
    item = STREAM_PAIR.size if dtype == "pairs" else STREAM_ELEM_SIZE
    body = reply[STREAM_REPLY_HEAD.size:]
    if len(body) != count * item:
        raise StreamError(f"stream reply announces {count} {dtype} items ({count * item} bytes) but carries "
                          f"{len(body)} bytes; is dtype right for this function?")
    if dtype == "pairs":
        values = [STREAM_PAIR.unpack_from(body, i * item) for i in range(count)]
    else:
        values = list(struct.unpack(f"<{count}{STREAM_ELEM_FORMATS[dtype][1]}", body))
    return status_name(status), values


def call(addr, stream_id: int, payload: bytes | bytearray | memoryview | Iterable[bytes] = b"", dtype: str = "u32",
         length: int | None = None, timeout: float = 10.0, half_close: bool = True) -> tuple[str, list]:
    """Run stream function ``stream_id`` on ``payload``; returns (status name, values).

    ``payload``: bytes (``length`` defaults to its size), or an iterable of byte chunks sent as
    they come (``length`` defaults to ``STREAM_UNTIL_EOF``: the payload ends when this client
    half-closes). ``dtype`` decodes the reply: "u32" or "f32" elements, or "pairs" for
    ``frequent``'s (value, count). ``timeout``: seconds for the connect and for each send or
    receive. ``half_close=False`` keeps the write side open after the payload (the executor then
    answers TIMEOUT after its idle time if it still expects bytes). Raises StreamError when the
    executor cannot be reached or its reply is malformed; a status other than OK is returned.
    """
    _check_dtype(dtype)
    whole = isinstance(payload, (bytes, bytearray, memoryview))
    if length is None:
        length = len(payload) if whole else STREAM_UNTIL_EOF
    head = encode_head(stream_id, length)
    host, port = parse_addr(addr)
    with _connect(host, port, timeout) as sock:
        try:
            _send(sock, head, payload, whole)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the executor answered before taking the whole payload (UNKNOWN, BAD_REQUEST): read it
        except TimeoutError:
            raise StreamError(f"stream {stream_id} at {host}:{port}: sending timed out after {timeout} s "
                              "(the executor stopped reading)") from None
        except OSError as exc:
            raise StreamError(f"stream {stream_id} at {host}:{port}: send failed: {exc}") from None
        reply = _read_all(sock, host, port, stream_id, timeout)
    return decode(reply, dtype)


class Connection:
    """A kept-alive connection to the stream listener: requests one after another without a TCP
    handshake each (the header carries ``STREAM_KEEP_ALIVE``; docs/fastpath.md, "Kept-alive
    connections"). Not thread-safe: one request at a time, as on the wire.

    Payloads are bytes (their length is declared; until-EOF requests end the connection, so use
    ``call`` for those). A reply that ends a request early (UNKNOWN, BAD_REQUEST, a refusal) makes
    the executor close, and the next ``call`` here reconnects. When a reused connection turns out
    to have been closed by the executor (its idle timeout passed) before any reply byte came, the
    request is sent once more on a new connection: stream functions are pure, so that is safe.
    """

    def __init__(self, addr, timeout: float = 10.0):
        self.host, self.port = parse_addr(addr)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        #: Connections opened so far (1 while the same one is reused).
        self.connects = 0

    def call(self, stream_id: int, payload: bytes | bytearray | memoryview = b"", dtype: str = "u32") -> tuple[str, list]:
        """Run stream function ``stream_id`` on ``payload`` on this connection: (status name, values)."""
        _check_dtype(dtype)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"a kept-alive request needs a bytes payload (its length is declared), got {type(payload).__name__}; "
                            "stream an iterable with call()")
        head = encode_head(stream_id, len(payload) | STREAM_KEEP_ALIVE)
        reused = self._sock is not None
        try:
            reply = self._exchange(head, payload, dtype, stream_id)
        except _ClosedEarly:
            self.close()
            if not reused:
                raise StreamError(f"stream {stream_id} at {self.host}:{self.port}: the executor closed the connection "
                                  "without a reply (over --stream-max-connections, or it stopped)") from None
            reply = self._exchange(head, payload, dtype, stream_id)  # the idle timeout closed it: once more
        except BaseException:
            self.close()
            raise
        status, values = decode(reply, dtype)
        if status != "OK":
            self.close()  # the executor closes after an early answer
        return status, values

    def _exchange(self, head: bytes, payload, dtype: str, stream_id: int) -> bytes:
        if self._sock is None:
            self._sock = _connect(self.host, self.port, self.timeout)
            self.connects += 1
        sock = self._sock
        try:
            _send(sock, head, payload, True)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed under us, or an early answer: the reply (or its absence) says which
        except OSError as exc:
            raise StreamError(f"stream {stream_id} at {self.host}:{self.port}: send failed: {exc}") from None
        item = STREAM_PAIR.size if dtype == "pairs" else STREAM_ELEM_SIZE
        head_bytes = self._recv_exact(STREAM_REPLY_HEAD.size, stream_id, first=True)
        _, count = STREAM_REPLY_HEAD.unpack(head_bytes)
        return head_bytes + self._recv_exact(count * item, stream_id, first=False)

    def _recv_exact(self, n: int, stream_id: int, first: bool) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                b = self._sock.recv(n - len(buf))
            except TimeoutError:
                raise StreamError(f"stream {stream_id} at {self.host}:{self.port}: no reply within {self.timeout} s") from None
            except ConnectionResetError:
                b = b""
            if not b:
                if first and not buf:
                    raise _ClosedEarly
                raise StreamError(f"stream {stream_id} at {self.host}:{self.port}: the connection closed "
                                  f"{len(buf)} bytes into a {n}-byte reply part")
            buf += b
        return bytes(buf)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ClosedEarly(Exception):
    """The connection ended before the reply's first byte."""


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise StreamError(f"cannot connect to the stream listener at {host}:{port}: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _send(sock: socket.socket, head: bytes, payload, whole: bool) -> None:
    if whole:
        # One segment for a small request: header and payload together.
        if len(payload) <= 64 * 1024:
            sock.sendall(head + bytes(payload))
        else:
            sock.sendall(head)
            sock.sendall(payload)
        return
    sock.sendall(head)
    for chunk in payload:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload chunks must be bytes, got {type(chunk).__name__}")
        if chunk:
            sock.sendall(chunk)


def _read_all(sock: socket.socket, host: str, port: int, stream_id: int, timeout: float) -> bytes:
    parts = []
    start = time.monotonic()
    while True:
        try:
            b = sock.recv(65536)
        except TimeoutError:
            raise StreamError(f"stream {stream_id} at {host}:{port}: no reply within {timeout} s "
                              f"(waited {time.monotonic() - start:.1f} s)") from None
        except ConnectionResetError:
            if parts:
                break  # the reply came whole before the reset
            raise StreamError(f"stream {stream_id} at {host}:{port}: connection reset before a reply "
                              "(over --stream-max-connections?)") from None
        if not b:
            break
        parts.append(b)
    return b"".join(parts)
