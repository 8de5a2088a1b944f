"""Clients of the fast path's wire format (docs/fastpath.md).

UDP: a request is ``lambda_id: u32 BE`` + payload; a reply is ``lambda_id: u32 BE``, ``status: u8``,
payload. TCP frames each of those as ``length: u32 BE`` + bytes. Large inputs go through a memfd
passed over the executor's Unix datagram socket (SCM_RIGHTS).
"""

from __future__ import annotations

import array
import fcntl
import contextlib
import mmap
import os
import socket
import struct
import tempfile
import threading

OK, HOST_OK, UNKNOWN, TRAP, TIMEOUT, TOO_LARGE, OVERLOADED, HOST_ERROR, EXTERNAL_ERROR, BAD_REQUEST = range(10)
STATUS = {
    OK: "OK", HOST_OK: "HOST_OK", UNKNOWN: "UNKNOWN", TRAP: "TRAP", TIMEOUT: "TIMEOUT", TOO_LARGE: "TOO_LARGE",
    OVERLOADED: "OVERLOADED", HOST_ERROR: "HOST_ERROR", EXTERNAL_ERROR: "EXTERNAL_ERROR", BAD_REQUEST: "BAD_REQUEST",
}
STATUS_CODES = {name: code for code, name in STATUS.items()}
MAX_DATAGRAM = 65_507
_ID = struct.Struct(">I")
_REPLY_HEAD = struct.Struct(">IB")
_MEMFD_REQ = struct.Struct(">II")
_MEMFD_REPLY = struct.Struct(">IBI")


def status_name(code: int) -> str:
    return STATUS.get(code, f"STATUS_{code}")


def encode_request(lambda_id: int, payload: bytes = b"") -> bytes:
    """A UDP request datagram: the lambda ID as u32 big-endian, then the payload."""
    if not isinstance(lambda_id, int) or not 0 <= lambda_id <= 0xFFFFFFFF:
        raise ValueError(f"lambda id must be an integer in 0..2**32-1, got {lambda_id!r}")
    return _ID.pack(lambda_id) + bytes(payload)


def decode_request(datagram: bytes) -> tuple[int, bytes]:
    """(lambda_id, payload) of a request datagram; ValueError when it is shorter than an ID."""
    if len(datagram) < 4:
        raise ValueError(f"request datagram of {len(datagram)} bytes is shorter than the 4-byte lambda id")
    return _ID.unpack_from(datagram)[0], bytes(datagram[4:])


def encode_reply(lambda_id: int, status: int, payload: bytes = b"") -> bytes:
    if not 0 <= status <= 255:
        raise ValueError(f"status must fit a u8, got {status}")
    return _REPLY_HEAD.pack(lambda_id, status) + bytes(payload)


def decode_reply(datagram: bytes) -> tuple[int, int, bytes]:
    """(lambda_id, status, payload) of a reply datagram; ValueError when it is shorter than 5 bytes."""
    if len(datagram) < 5:
        raise ValueError(f"reply of {len(datagram)} bytes is shorter than the 5-byte header (lambda id u32 BE + status u8)")
    lambda_id, status = _REPLY_HEAD.unpack_from(datagram)
    return lambda_id, status, bytes(datagram[5:])


def frame(message: bytes) -> bytes:
    """TCP framing: length u32 BE, then the message (a UDP request or reply)."""
    return _ID.pack(len(message)) + message


def parse_addr(addr) -> tuple[str, int]:
    if isinstance(addr, tuple):
        return addr[0], int(addr[1])
    host, _, port = str(addr).rpartition(":")
    if not host or not port:
        raise ValueError(f"address must be HOST:PORT, got {addr!r}")
    return host.strip("[]"), int(port)


class FastpathError(RuntimeError):
    pass


class _Socketed:
    """A client owning one socket: ``close()`` and ``with``."""

    sock: socket.socket

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class UdpClient(_Socketed):
    """One UDP socket connected to the executor (or a baseline); one call at a time."""

    def __init__(self, addr, timeout: float = 1.0):
        self.addr = parse_addr(addr)
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(self.addr)

    def call(self, lambda_id: int, payload: bytes = b"", timeout: float | None = None) -> tuple[int, bytes]:
        """(status, reply payload). Replies to other IDs (stale, from an earlier timed-out call) are
        skipped; socket.timeout when no reply arrives in time."""
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        self.sock.send(encode_request(lambda_id, payload))
        while True:
            data = self.sock.recv(MAX_DATAGRAM + 64)
            rid, status, body = decode_reply(data)
            if rid == lambda_id:
                return status, body



class TcpClient(_Socketed):
    """A stream connection with length-prefixed framing; replies come back in request order."""

    def __init__(self, addr, timeout: float = 5.0):
        self.addr = parse_addr(addr)
        self.sock = socket.create_connection(self.addr, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionError(f"connection closed after {got} of {n} bytes")
            got += k
        return bytes(buf)

    def send(self, lambda_id: int, payload: bytes = b"") -> None:
        self.sock.sendall(frame(encode_request(lambda_id, payload)))

    def recv(self) -> tuple[int, int, bytes]:
        (length,) = _ID.unpack(self._recv_exact(4))
        return decode_reply(self._recv_exact(length))

    def call(self, lambda_id: int, payload: bytes = b"") -> tuple[int, bytes]:
        with self._lock:
            self.send(lambda_id, payload)
            rid, status, body = self.recv()
        if rid != lambda_id:
            raise FastpathError(f"reply for lambda {rid} to a request for {lambda_id}")
        return status, body



class MemfdClient:
    """Calls over the executor's Unix datagram socket with the input in a memfd (SCM_RIGHTS).

    The client binds its own socket path (in a private temp dir) so the executor can answer.
    One memfd is kept and grown as needed; the executor writes the reply into it."""

    def __init__(self, unix_path: str, timeout: float = 5.0):
        self.unix_path = unix_path
        self._dir = tempfile.mkdtemp(prefix="nf-memfd-")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(os.path.join(self._dir, "c.sock"))
        self.sock.settimeout(timeout)
        self.fd = os.memfd_create("nearfaas-fastpath", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        # The executor maps it and refuses one that could shrink under its mapping (docs/fastpath.md).
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.size = 0
        self.map: mmap.mmap | None = None  # our mapping of the memfd, kept across calls

    def _ensure(self, need: int) -> None:
        if need > self.size:  # sealed against shrinking: it only grows
            if self.map is not None:
                self.map.close()
            os.ftruncate(self.fd, need)
            self.size = need
            self.map = mmap.mmap(self.fd, need, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def call(self, lambda_id: int, data: bytes, capacity: int | None = None) -> tuple[int, bytes]:
        """(status, reply): ``data`` is written into the memfd, the executor writes its reply over it."""
        self._ensure(max(len(data), capacity or 0, 1))
        self.map[: len(data)] = data
        msg = _MEMFD_REQ.pack(lambda_id, len(data))
        self.sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.fd]))], 0, self.unix_path)
        while True:
            reply = self.sock.recv(64)
            if len(reply) < _MEMFD_REPLY.size:
                raise ValueError(f"memfd reply of {len(reply)} bytes is shorter than 9 (id u32 BE, status u8, len u32 BE)")
            rid, status, length = _MEMFD_REPLY.unpack_from(reply)
            if rid == lambda_id:
                break
        if length > self.size:
            raise FastpathError(f"reply length {length} exceeds the memfd's {self.size} bytes")
        return status, bytes(self.map[:length])

    def close(self) -> None:
        self.sock.close()
        if self.map is not None:
            self.map.close()
            self.map = None
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self._dir, "c.sock"))
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def memfd_call(unix_path: str, lambda_id: int, data: bytes, timeout: float = 5.0) -> tuple[int, bytes]:
    """One call with ``data`` in a fresh memfd: (status, reply bytes read back from the memfd)."""
    with MemfdClient(unix_path, timeout) as client:
        return client.call(lambda_id, data)
