"""Client of the executor's stream functions (docs/fastpath.md, "Stream functions").

A request is one TCP connection to the executor's ``--stream`` address (the ready file's
``stream_addr``): a 12-byte header (``stream_id: u32 LE``, ``payload_len: u64 LE``, or
``STREAM_UNTIL_EOF`` to end the payload by half-closing), then the payload, which the function
consumes as it arrives; the reply is ``status: u8``, ``count: u32 LE`` and ``count`` elements,
after which the executor closes the connection.

    status, top = call("127.0.0.1:9300", 5, b"17 4, 99\\n3")              # a parse -> topk chain
    status, top = call(addr, 6, encode([3.5, 1.0], "f32"), dtype="f32")     # binary f32 elements
    status, pairs = call(addr, 7, (chunk for chunk in chunks), dtype="pairs")  # frequent, until EOF
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
    STREAM_PAIR,
    STREAM_REPLY_HEAD,
    STREAM_UNTIL_EOF,
    status_name,
)

__all__ = ["DTYPES", "StreamError", "call", "decode", "encode", "encode_head"]

#: Reply element types: "u32" and "f32" (Top-K), "pairs" ((value, count) from ``frequent``).
DTYPES = ("u32", "f32", "pairs")


class StreamError(FastpathError):
    """The request could not be made or its reply could not be read (not a status: a status,
    UNKNOWN or TIMEOUT included, is returned by ``call``)."""


def encode_head(stream_id: int, payload_len: int = STREAM_UNTIL_EOF) -> bytes:
    """The 12-byte request header."""
    if not isinstance(stream_id, int) or not 0 <= stream_id <= 0xFFFF_FFFF:
        raise ValueError(f"stream_id must be an integer in 0..2**32-1, got {stream_id!r}")
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
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
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
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    whole = isinstance(payload, (bytes, bytearray, memoryview))
    if length is None:
        length = len(payload) if whole else STREAM_UNTIL_EOF
    head = encode_head(stream_id, length)
    host, port = parse_addr(addr)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise StreamError(f"cannot connect to the stream listener at {host}:{port}: {exc}") from None
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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
