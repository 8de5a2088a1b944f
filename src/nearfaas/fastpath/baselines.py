"""λ-NIC's bare-metal baseline, re-implemented in Python: the same wire format as the fast path
(docs/fastpath.md) and the same lambdas, served by the standard library's socket servers.

  B1 ``forking``   — socketserver.ForkingUDPServer: a fork per request (λ-NIC's "bare metal":
                     a process per request, no container)
  B2 ``threading`` — socketserver.ThreadingUDPServer: a thread per request

Lambdas, by fixed ID (``BASELINE_IDS``), answering byte-for-byte what fastpath/lambdas/*.c answer:

  web, web2, web3  "Hello from nearfaas fastpath [lambda N ]v1: " + payload (web.c)
  kv               memcached text-protocol client (kv.c): "GET k" / "SET k v" -> "VALUE v",
                   "NOT_FOUND", "STORED"; a blocking socket to memcached (--memcached HOST:PORT)
  gray             RGBA -> luma, Y = (77R + 150G + 29B) >> 8 (gray.c), with numpy

The image lambda's 256x256 RGBA input (256 KiB) does not fit one datagram. The executor takes it
through a memfd; the baselines take it over TCP instead, framed as the executor's TCP port is
(length u32 BE around each UDP-format message). The TCP server is the same kind as the UDP one
(a fork or a thread per connection); the benchmark opens one connection per image request, so a
baseline still forks (or spawns a thread) per request. Every lambda is served on both ports.

    python -m nearfaas.fastpath.baselines --kind forking|threading --port 0 --ready-file F [--memcached H:P]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import re
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np  # imported up front: a forked child must not pay for the import

from nearfaas import atomic
from nearfaas.fastpath.client import parse_addr
from nearfaas.fastpath.executor import stop_process
from nearfaas.fastpath.wire import (
    BAD_REQUEST,
    EXTERNAL_ERROR,
    FRAME_HEAD,
    OK,
    TOO_LARGE,
    UNKNOWN,
    decode_request,
    encode_reply,
    frame,
    frame_length,
)

BASELINE_IDS = {"web": 1, "web2": 2, "web3": 3, "kv": 4, "gray": 5}
WEB_BUFFER = 65536  # web.c's buffer: the reply (prefix + payload) is truncated to fit it
GRAY_BUFFER = 1 << 20
KV_BUFFER = 128 * 1024
WEB_PREFIX = {"web": b"Hello from nearfaas fastpath v1: ", "web2": b"Hello from nearfaas fastpath lambda 2 v1: ",
              "web3": b"Hello from nearfaas fastpath lambda 3 v1: "}
_KEY = re.compile(rb"^[\x21-\x7e\x80-\xff]{1,250}$")


def web(prefix: bytes, payload: bytes) -> tuple[int, bytes]:
    return OK, prefix + payload[: WEB_BUFFER - len(prefix)]


def gray(payload: bytes) -> tuple[int, bytes]:
    if len(payload) > GRAY_BUFFER:
        return TOO_LARGE, b""
    if len(payload) % 4:
        return BAD_REQUEST, b""
    px = np.frombuffer(payload, dtype=np.uint8).reshape(-1, 4).astype(np.uint32)
    y = (77 * px[:, 0] + 150 * px[:, 1] + 29 * px[:, 2]) >> 8
    return OK, y.astype(np.uint8).tobytes()


def kv_command(payload: bytes) -> bytes | None:
    """The memcached command kv.c would send for this request, or None (BAD_REQUEST)."""
    line = payload
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    if len(line) < 5 or line[3:4] != b" ":
        return None
    verb = line[:3].lower()
    rest = line[4:]
    key, sep, value = rest.partition(b" ")
    if not _KEY.match(key):
        return None
    if verb == b"get":
        return None if sep else b"get " + key + b"\r\n"
    if verb == b"set":
        return b"set " + key + b" 0 0 " + str(len(value)).encode() + b"\r\n" + value + b"\r\n" if sep else None
    return None


def kv_reply(raw: bytes) -> tuple[int, bytes]:
    """kv.c's nf_resume on memcached's reply."""
    if raw == b"END\r\n":
        return OK, b"NOT_FOUND"
    if raw == b"STORED\r\n":
        return OK, b"STORED"
    if not raw.startswith(b"VALUE "):
        return BAD_REQUEST, b""
    eol = raw.find(b"\r\n")
    parts = raw[6:eol].split(b" ") if eol > 0 else []
    if len(parts) not in (3, 4) or not parts[2].isdigit():
        return BAD_REQUEST, b""
    n = int(parts[2])
    data = raw[eol + 2: eol + 2 + n]
    if raw[eol + 2 + n:] != b"\r\nEND\r\n":
        return BAD_REQUEST, b""
    return OK, b"VALUE " + data


_TERMINATORS = (b"END\r\n", b"STORED\r\n", b"NOT_STORED\r\n", b"ERROR\r\n", b"EXISTS\r\n", b"NOT_FOUND\r\n", b"DELETED\r\n")


class Memcached:
    """Blocking connections to memcached, pooled; a forked child makes its own (never shares its
    parent's socket with a sibling)."""

    def __init__(self, addr, timeout: float = 1.0):
        self.addr = parse_addr(addr) if addr else None
        self.timeout = timeout
        self._pool: queue.SimpleQueue = queue.SimpleQueue()
        self._pid = os.getpid()

    def _connect(self) -> socket.socket:
        s = socket.create_connection(self.addr, timeout=self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def roundtrip(self, command: bytes) -> bytes:
        if self.addr is None:
            raise OSError("no memcached address configured (--memcached HOST:PORT)")
        if os.getpid() != self._pid:
            self._pool = queue.SimpleQueue()
            self._pid = os.getpid()
        try:
            s = self._pool.get_nowait()
        except queue.Empty:
            s = self._connect()
        try:
            s.sendall(command)
            buf = b""
            while True:
                chunk = s.recv(KV_BUFFER)
                if not chunk:
                    raise OSError("memcached closed the connection")
                buf += chunk
                if self._complete(buf):
                    break
                if len(buf) > KV_BUFFER:
                    raise OSError("memcached reply larger than the lambda's buffer")
        except BaseException:
            s.close()
            raise
        self._pool.put(s)
        return buf

    @staticmethod
    def _complete(buf: bytes) -> bool:
        if buf.startswith(b"VALUE "):
            return buf.endswith(b"\r\nEND\r\n")
        return buf.endswith(b"\r\n") and (buf.endswith(_TERMINATORS) or buf.startswith((b"SERVER_ERROR", b"CLIENT_ERROR")))


class Lambdas:
    def __init__(self, memcached=None):
        self.memcached = Memcached(memcached)
        self.by_id = {v: k for k, v in BASELINE_IDS.items()}

    def handle(self, lambda_id: int, payload: bytes) -> tuple[int, bytes]:
        name = self.by_id.get(lambda_id)
        if name is None:
            return UNKNOWN, b""
        if name in WEB_PREFIX:
            return web(WEB_PREFIX[name], payload)
        if name == "gray":
            return gray(payload)
        command = kv_command(payload)
        if command is None:
            return BAD_REQUEST, b""
        try:
            raw = self.memcached.roundtrip(command)
        except OSError:
            return EXTERNAL_ERROR, b""
        return kv_reply(raw)

    def answer(self, message: bytes) -> bytes | None:
        """The reply message to a request message; None for one shorter than an ID (dropped)."""
        try:
            lambda_id, payload = decode_request(message)
        except ValueError:
            return None
        try:
            status, body = self.handle(lambda_id, payload)
        except Exception:  # a lambda's failure is answered, never fatal to the server
            status, body = BAD_REQUEST, b""
        return encode_reply(lambda_id, status, body)


class _UdpHandler(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        reply = self.server.lambdas.answer(data)
        if reply is not None:
            with contextlib.suppress(OSError):
                sock.sendto(reply, self.client_address)


class _TcpHandler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(30)  # an idle connection never holds a forked child forever
        f = sock.makefile("rb")
        while True:
            try:
                head = f.read(FRAME_HEAD.size)
            except OSError:
                return
            if len(head) < FRAME_HEAD.size:
                return
            length = frame_length(head)
            if length > GRAY_BUFFER + 4 + 16:
                return  # not a request we can hold: drop the connection
            message = f.read(length)
            if len(message) < length:
                return
            reply = self.server.lambdas.answer(message)
            if reply is None:
                continue
            sock.sendall(frame(reply))


class _Quiet:
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        pass


class ForkingUdp(_Quiet, socketserver.ForkingUDPServer):
    max_packet_size = 65536
    max_children = 256


class ThreadingUdp(_Quiet, socketserver.ThreadingUDPServer):
    max_packet_size = 65536


class ForkingTcp(_Quiet, socketserver.ForkingTCPServer):
    max_children = 256


class ThreadingTcp(_Quiet, socketserver.ThreadingTCPServer):
    pass


KINDS = {"forking": (ForkingUdp, ForkingTcp), "threading": (ThreadingUdp, ThreadingTcp)}


class Baseline:
    """Both servers of one kind, each serving in a thread of this process. A forked child inherits
    every descriptor of the process, so in-process use of ``forking`` is only safe where the
    process holds no other connections; run it as its own process (``start_process``)."""

    def __init__(self, kind: str, host: str = "127.0.0.1", port: int = 0, memcached=None):
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
        udp_cls, tcp_cls = KINDS[kind]
        self.kind = kind
        lambdas = Lambdas(memcached)
        self.udp = udp_cls((host, port), _UdpHandler)
        self.udp.lambdas = lambdas
        self.udp.max_packet_size = 65536
        self.tcp = tcp_cls((host, 0), _TcpHandler)
        self.tcp.lambdas = lambdas
        self._threads: list[threading.Thread] = []

    @property
    def udp_addr(self) -> tuple[str, int]:
        return self.udp.server_address[:2]

    @property
    def tcp_addr(self) -> tuple[str, int]:
        return self.tcp.server_address[:2]

    def serve_in_threads(self) -> Baseline:
        for server in (self.udp, self.tcp):
            t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def close(self) -> None:
        for server in (self.udp, self.tcp):
            server.shutdown()
            server.server_close()

    def __enter__(self) -> Baseline:
        return self.serve_in_threads()

    def __exit__(self, *exc) -> None:
        self.close()


class BaselineProcess:
    """``python -m nearfaas.fastpath.baselines`` as a child process; ``.udp_addr``/``.tcp_addr``."""

    def __init__(self, kind: str, memcached=None, timeout: float = 20.0):
        self._tmp = tempfile.TemporaryDirectory(prefix="nearfaas-baseline-")
        ready = Path(self._tmp.name) / "ready.json"
        src = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "nearfaas.fastpath.baselines", "--kind", kind, "--port", "0", "--ready-file", str(ready)]
        if memcached:
            cmd += ["--memcached", "{}:{}".format(*parse_addr(memcached))]
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"baseline {kind} did not start (exit {self.proc.returncode})")
            time.sleep(0.02)
        self.info = json.loads(ready.read_text())
        self.kind = kind

    @property
    def udp_addr(self) -> tuple[str, int]:
        return parse_addr(self.info["udp"])

    @property
    def tcp_addr(self) -> tuple[str, int]:
        return parse_addr(self.info["tcp"])

    def close(self) -> None:
        stop_process(self.proc)
        self._tmp.cleanup()

    def __enter__(self) -> BaselineProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nearfaas.fastpath.baselines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=sorted(KINDS), required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="UDP port (0: any free one); the TCP port is any free one")
    parser.add_argument("--memcached", default=None, help="HOST:PORT of memcached for the kv lambda")
    parser.add_argument("--ready-file", default=None, help='written once serving: {"kind","udp","tcp","pid","ids"}')
    args = parser.parse_args(argv)
    base = Baseline(args.kind, args.host, args.port, args.memcached)
    base.tcp_thread = threading.Thread(target=base.tcp.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    base.tcp_thread.start()
    info = {"kind": args.kind, "udp": "{}:{}".format(*base.udp_addr), "tcp": "{}:{}".format(*base.tcp_addr), "pid": os.getpid(), "ids": BASELINE_IDS}
    if args.ready_file:
        atomic.write_text(args.ready_file, json.dumps(info), durable=False)  # read once by the parent, never after a crash
    else:
        print(json.dumps(info), flush=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        base.udp.serve_forever(poll_interval=0.05)
    except (KeyboardInterrupt, SystemExit):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
