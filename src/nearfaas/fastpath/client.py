"""Clients of the fast path's wire format (docs/fastpath.md; the format itself, status codes and
packing, is ``nearfaas.fastpath.wire``, re-exported here for the clients' users).

UDP: a request is ``lambda_id: u64 BE`` + payload; a reply is ``lambda_id: u64 BE``, ``status: u8``,
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
import tempfile
import threading
import time

from nearfaas.fastpath.wire import (
    BAD_REQUEST,
    EXTERNAL_ERROR,
    FRAME_HEAD,
    HOST_ERROR,
    HOST_OK,
    MAX_DATAGRAM,
    OK,
    OVERLOADED,
    STATUS,
    STATUS_CODES,
    TIMEOUT,
    TOO_LARGE,
    TRAP,
    UNKNOWN,
    decode_memfd_reply,
    decode_reply,
    decode_request,
    encode_memfd_request,
    encode_reply,
    encode_request,
    frame,
    frame_length,
    status_name,
)

__all__ = [
    "BAD_REQUEST", "EXTERNAL_ERROR", "HOST_ERROR", "HOST_OK", "MAX_DATAGRAM", "OK", "OVERLOADED", "STATUS", "STATUS_CODES", "TIMEOUT",
    "TOO_LARGE", "TRAP", "UNKNOWN", "FastpathError", "MemfdClient", "ReplyPoller", "TcpClient", "UdpClient", "decode_reply", "decode_request",
    "encode_reply", "encode_request", "frame", "memfd_call", "parse_addr", "status_name",
]


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


class ReplyPoller:
    """How long a client spins on a non-blocking receive for a reply before it blocks: the
    executor's policy (fastpath/src/poll.rs), from the replies' round trips. A reply a few µs
    away then does not wait for this thread's wake-up (tens of µs on an idle virtual machine);
    a slow one costs at most ``share`` of its wait in spinning. ``mode``: adaptive, spin, block."""

    MIN_S, MAX_S, SHARE, ALPHA = 50e-6, 200e-6, 0.1, 0.2

    def __init__(self, mode: str = "adaptive"):
        if mode not in ("adaptive", "spin", "block"):
            raise ValueError(f"poll: {mode!r}; use adaptive, spin or block")
        self.mode = mode
        self.rtt: float | None = None

    def budget(self) -> float:
        if self.mode == "block":
            return 0.0
        if self.mode == "spin" or self.rtt is None:
            return float("inf") if self.mode == "spin" else self.MIN_S
        if self.rtt <= self.MAX_S:
            return min(max(4 * self.rtt, self.MIN_S), self.MAX_S)
        return min(self.MAX_S, self.SHARE * self.rtt)

    def learn(self, rtt: float) -> None:
        self.rtt = rtt if self.rtt is None else (1 - self.ALPHA) * self.rtt + self.ALPHA * rtt


class UdpClient(_Socketed):
    """One UDP socket connected to the executor (or a baseline); one call at a time. ``poll``:
    how it waits for a reply (ReplyPoller)."""

    def __init__(self, addr, timeout: float = 1.0, poll: str = "adaptive"):
        self.addr = parse_addr(addr)
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(self.addr)
        self.poller = ReplyPoller(poll)

    def call(self, lambda_id: int, payload: bytes = b"", timeout: float | None = None) -> tuple[int, bytes]:
        """(status, reply payload). Replies to other IDs (stale, from an earlier timed-out call) are
        skipped; socket.timeout when no reply arrives in time."""
        wait = self.timeout if timeout is None else timeout
        sent = time.perf_counter()
        self.sock.settimeout(0.0)
        self.sock.send(encode_request(lambda_id, payload))
        spin_until = sent + min(self.poller.budget(), wait)
        while True:
            data = self._spin(spin_until)
            if data is None:
                self.sock.settimeout(max(1e-6, sent + wait - time.perf_counter()))
                data = self.sock.recv(MAX_DATAGRAM + 64)
                self.sock.settimeout(0.0)
            rid, status, body = decode_reply(data)
            if rid == lambda_id:
                self.poller.learn(time.perf_counter() - sent)
                return status, body

    def _spin(self, until: float) -> bytes | None:
        while True:
            try:
                return self.sock.recv(MAX_DATAGRAM + 64)
            except BlockingIOError:
                if time.perf_counter() >= until:
                    return None



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
        return decode_reply(self._recv_exact(frame_length(self._recv_exact(FRAME_HEAD.size))))

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
        msg = encode_memfd_request(lambda_id, len(data))
        self.sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.fd]))], 0, self.unix_path)
        while True:
            rid, status, length = decode_memfd_reply(self.sock.recv(64))
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
