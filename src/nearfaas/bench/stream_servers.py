"""The systems ``nearfaas.bench.stream`` measures: the workload, B1 (bare-metal server and interceptor
processes), the one client every system is measured with, the executor's stream target and B2 (the
serverless path). ``nearfaas.bench.stream`` re-exports every name here."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
import random
import selectors
import socket
import struct
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from nearfaas.fastpath.executor import stop_process
from nearfaas.fastpath.wire import STREAM_HEAD

K = 16
SIZES = (64, 128, 256, 1024, 2048, 4096)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
BATCH_BYTES = 1024  # the request size of the concurrency experiment
FULL = {"requests": 1000, "repeats": 3, "batch_repeats": 10, "warmup": 20, "concurrency": CONCURRENCY}
QUICK = {"requests": 100, "repeats": 1, "batch_repeats": 3, "warmup": 5, "concurrency": (1, 4, 16, 64)}
STREAM_IDS = {"executor": 41, "executor_heap": 42}
VARIANTS = {"executor": "insertion", "executor_heap": "heap"}
SYSTEMS = ("executor", "executor_heap", "baremetal", "serverless")
ARRIVE, ANSWER = "x-interceptor-arrive-ns", "x-interceptor-answer-ns"
FUNCTION_DIR = Path(__file__).resolve().parents[3] / "examples" / "functions" / "topk"
SRC = Path(__file__).resolve().parents[2]  # the src/ this nearfaas was imported from


# ---- the workload --------------------------------------------------------------------------------

def check_sizes(sizes) -> list[int]:
    """``sizes`` as ints; ValueError unless each is a positive multiple of 4 bytes (u32 values)."""
    out = []
    for s in sizes:
        try:
            n = int(s)
        except (TypeError, ValueError):
            raise ValueError(f"size {s!r} is not a number of bytes") from None
        if n <= 0 or n % 4:
            raise ValueError(f"size {n} must be a positive multiple of 4 bytes (whole u32 values)")
        out.append(n)
    if not out:
        raise ValueError("no sizes given")
    return out


def check_concurrency(levels) -> list[int]:
    out = []
    for c in levels:
        n = int(c)
        if n < 1:
            raise ValueError(f"concurrency {n} must be at least 1")
        out.append(n)
    if not out:
        raise ValueError("no concurrency levels given")
    return out


def check_requests(n) -> int:
    n = int(n)
    if n < 1:
        raise ValueError(f"requests {n} must be at least 1")
    return n


def payload(size: int, rng: random.Random) -> bytes:
    """``size`` bytes of random little-endian u32 values."""
    (size,) = check_sizes([size])
    return struct.pack(f"<{size // 4}I", *(rng.getrandbits(32) for _ in range(size // 4)))


def values(data: bytes) -> list[int]:
    if len(data) % 4:
        raise ValueError(f"{len(data)} bytes is not a whole number of u32 values")
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def topk(data: bytes, k: int = K) -> bytes:
    """The reference: the ``k`` largest u32 values of ``data``, largest first, as u32 LE."""
    top = heapq.nlargest(k, values(data))
    return struct.pack(f"<{len(top)}I", *top)


def per_request_us(t_first_send_ns: int, t_last_answer_ns: int, n: int) -> float:
    """The paper's per-request time: the batch latency (first send to N-th answer) divided by N."""
    if n < 1:
        raise ValueError("a batch has at least one request")
    if t_last_answer_ns < t_first_send_ns:
        raise ValueError("the last answer came before the first send")
    return (t_last_answer_ns - t_first_send_ns) / 1e3 / n


# ---- B1: bare metal (server + interceptor), each its own process --------------------------------

class _TopKHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the stdlib default: one request per connection

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            out, code = topk(body), 200
        except ValueError as exc:
            out, code = str(exc).encode(), 400
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def serve_baremetal(port: int = 0, announce=print) -> None:
    # A listen backlog of 128 rather than socketserver's 5: with 64 connections at once the default
    # would drop SYNs and measure TCP's 1 s retransmission, not the server.
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", port), _TopKHandler)
    announce(f"PORT {server.server_address[1]}")
    server.serve_forever()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: tuple[str, int]) -> None:
    arrive = time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for the client and every process here
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = 0
        kept = [lines[0]]
        for line in lines[1:]:
            if not line:
                continue
            name = line.split(b":", 1)[0].strip().lower()
            if name == b"content-length":
                length = int(line.split(b":", 1)[1])
            if name in (b"connection", b"keep-alive", b"proxy-connection"):
                continue
            kept.append(line)
        body = await reader.readexactly(length) if length else b""
        up_r, up_w = await asyncio.open_connection(*upstream)
        up_w.write(b"\r\n".join([*kept, b"Connection: close", b"", b""]) + body)
        await up_w.drain()
        answer = await up_r.read()  # to the end: the upstream closes after its answer
        up_w.close()
        answered = time.monotonic_ns()
        end = answer.find(b"\r\n\r\n")
        if end < 0:
            raise ValueError("upstream answer without a header block")
        stamps = f"\r\nX-Interceptor-Arrive-Ns: {arrive}\r\nX-Interceptor-Answer-Ns: {answered}".encode()
        writer.write(answer[:end] + stamps + answer[end:])
        await writer.drain()
    except Exception as exc:
        with contextlib.suppress(Exception):
            msg = f"interceptor: {type(exc).__name__}: {exc}".encode()
            writer.write(b"HTTP/1.0 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
            await writer.drain()
    finally:
        writer.close()


def serve_interceptor(upstream: tuple[str, int], port: int = 0, announce=print) -> None:
    async def main():
        server = await asyncio.start_server(lambda r, w: _relay(r, w, upstream), "127.0.0.1", port, backlog=1024)
        announce(f"PORT {server.sockets[0].getsockname()[1]}")
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Process:
    """``python -m nearfaas.bench.stream <args>``, started, its port read from its first line."""

    def __init__(self, *args: str, timeout: float = 20.0):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "nearfaas.bench.stream", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            self.stop()
            err = self.proc.stderr.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(args)}: did not start ({line.strip() or 'no answer'}): {err}")
        self.port = int(line.split()[1])
        self.pid = self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)
        for f in (self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()


@contextlib.contextmanager
def baremetal():
    """B1: the server and its interceptor, two processes: yields the system."""
    server = Process("server")
    try:
        proxy = Process("interceptor", "--upstream", f"127.0.0.1:{server.port}")
        try:
            yield HttpSystem("baremetal", ("127.0.0.1", proxy.port), "/", lambda: [server.pid],
                             interceptor_pid=proxy.pid,
                             transport="HTTP/1.0 POST, a connection per request, via the interceptor",
                             server="python http.server.ThreadingHTTPServer + heapq.nlargest")
        finally:
            proxy.stop()
    finally:
        server.stop()


# ---- one client for every system -----------------------------------------------------------------

def exchange(addr: tuple[str, int], requests: list[bytes], complete=None, timeout: float = 30.0) -> list[tuple[int, int, bytes]]:
    """Each of ``requests`` on a connection of its own, all at once: connect, send, read until the
    peer closes (or ``complete(buffer)`` says the answer is whole), close. Returns (send start ns,
    answer end ns, answer bytes) per request, in order (time.monotonic_ns)."""
    sel = selectors.DefaultSelector()
    n = len(requests)
    out: list = [None] * n
    socks = []
    try:
        for i, req in enumerate(requests):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
            t0 = time.monotonic_ns()
            s.connect_ex(addr)
            socks.append(s)
            sel.register(s, selectors.EVENT_WRITE, [i, t0, memoryview(req), bytearray()])
        left = n
        deadline = time.monotonic() + timeout
        while left:
            events = sel.select(max(0.0, deadline - time.monotonic()))
            if not events and time.monotonic() >= deadline:
                raise TimeoutError(f"{left} of {n} answers missing from {addr[0]}:{addr[1]} after {timeout:g} s")
            for key, mask in events:
                s, st = key.fileobj, key.data
                if mask & selectors.EVENT_WRITE:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise ConnectionError(f"connect to {addr[0]}:{addr[1]}: {os.strerror(err)}")
                    sent = s.send(st[2])
                    st[2] = st[2][sent:]
                    if not st[2]:
                        sel.modify(s, selectors.EVENT_READ, st)
                    continue
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    st[3] += chunk
                if not chunk or (complete and complete(st[3])):
                    out[st[0]] = (st[1], time.monotonic_ns(), bytes(st[3]))
                    sel.unregister(s)
                    s.close()
                    left -= 1
    finally:
        for s in socks:
            with contextlib.suppress(Exception):
                s.close()
        sel.close()
    return out


def parse_http(raw: bytes) -> tuple[int, dict, bytes]:
    """An HTTP/1.x answer read to the end: (status, lower-case headers, body); chunked decoded."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        raise ValueError(f"not an HTTP answer: {raw[:80]!r}")
    lines = raw[:end].decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = raw[end + 4:]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out, pos = bytearray(), 0
        while True:
            eol = body.index(b"\r\n", pos)
            size = int(body[pos:eol].split(b";")[0], 16)
            if size == 0:
                break
            out += body[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2
        body = bytes(out)
    elif "content-length" in headers:
        body = body[:int(headers["content-length"])]
    return status, headers, body


class HttpSystem:
    """A system answering POST <path> with the top-K as u32 LE, behind the interceptor."""

    def __init__(self, name, addr, path, pids, interceptor_pid=None, transport="", server=""):
        self.name, self.addr, self.path, self._pids = name, addr, path, pids
        self.interceptor_pid, self.transport, self.server = interceptor_pid, transport, server
        self.complete = None  # read to the end: the interceptor closes after its answer

    def request(self, data: bytes) -> bytes:
        return (f"POST {self.path} HTTP/1.1\r\nHost: {self.addr[0]}:{self.addr[1]}\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data

    def decode(self, raw: bytes) -> tuple[bytes, tuple[int, int] | None]:
        """(top-K bytes, (interceptor arrival ns, answer ns))."""
        status, headers, body = parse_http(raw)
        if status != 200:
            raise RuntimeError(f"{self.name}: HTTP {status}: {body[:200]!r}")
        stamps = (int(headers[ARRIVE]), int(headers[ANSWER])) if ARRIVE in headers else None
        return body, stamps

    def pids(self) -> list[int]:
        return self._pids()


# ---- the executor's stream target ----------------------------------------------------------------

def stream_reply_complete(buf) -> bool:
    """A stream reply is u8 status + u32 LE count + count u32 values."""
    return len(buf) >= 5 and len(buf) >= 5 + 4 * struct.unpack_from("<I", buf, 1)[0]


class StreamSystem:
    def __init__(self, name, addr, stream_id, pid, variant):
        self.name, self.addr, self.stream_id, self._pid, self.variant = name, addr, stream_id, pid, variant
        self.interceptor_pid = None
        self.complete = stream_reply_complete
        self.transport = "TCP, 16-byte header (u64 stream id, u64 length) + payload, a connection per request"
        self.server = f"nearfaas-fastpath stream target, chain [topk k={K} u32 variant={variant}]"

    def request(self, data: bytes) -> bytes:
        return STREAM_HEAD.pack(self.stream_id, len(data)) + data

    def decode(self, raw: bytes):
        if len(raw) < 5:
            raise RuntimeError(f"{self.name}: short reply {raw!r}")
        status, count = struct.unpack_from("<BI", raw)
        if status != 0:
            raise RuntimeError(f"{self.name}: status {status}: {raw[5:200]!r}")
        return raw[5:5 + 4 * count], None

    def pids(self) -> list[int]:
        return [self._pid]


def stream_unavailable() -> str | None:
    """Why the executor's stream target cannot run here; None when it can."""
    try:
        import nearfaas.fastpath.stream  # noqa: F401
    except ImportError as exc:
        return f"not available: nearfaas.fastpath.stream does not exist yet ({exc})"
    from nearfaas.fastpath.executor import binary_path

    binary = binary_path()
    if not binary.exists():
        return f"not available: {binary} is not built"
    try:
        helptext = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not available: {binary} --help failed ({exc})"
    if "--stream" not in helptext.stdout + helptext.stderr:
        return f"not available: {binary} has no --stream option yet"
    return None


def _normalize(answer) -> list[int]:
    """nearfaas.fastpath.stream.call's (status name, values) as the values; any status but OK
    is an error."""
    status, got = answer
    if status != "OK":
        raise RuntimeError(f"stream call answered {status}")
    return [int(v) for v in got]


@contextlib.contextmanager
def executor_systems(progress, workers: int = 1):
    """The executor with the stream target on, both variants deployed: yields {name: system}."""
    from nearfaas.fastpath import stream
    from nearfaas.fastpath.executor import Executor

    progress(f"executor: starting nearfaas-fastpath --stream (workers {workers})")
    with Executor(workers=workers, extra_args=["--stream", "127.0.0.1:0"]) as ex:
        addr = ex._addr("stream")
        systems = {}
        for name, sid in STREAM_IDS.items():
            ex.control.request(op="deploy", id=sid, kind="stream",
                               stream={"chain": [{"fn": "topk", "k": K, "dtype": "u32", "variant": VARIANTS[name]}]})
            systems[name] = StreamSystem(name, addr, sid, ex.pid, VARIANTS[name])
            data = payload(1024, random.Random(sid))
            got = _normalize(stream.call(addr, sid, data, dtype="u32"))
            if sorted(got, reverse=True) != values(topk(data)):
                raise RuntimeError(f"{name}: stream.call answered {got[:4]}... not the top {K}")
        yield systems


# ---- B2: the serverless path ---------------------------------------------------------------------

def _descendants(roots: set[int]) -> set[int]:
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, grew = set(roots), True
    while grew:
        grew = False
        for pid, pp in parent.items():
            if pp in out and pid not in out:
                out.add(pid)
                grew = True
    return out


@contextlib.contextmanager
def serverless(progress):
    """B2: a private cluster with the warm function `topk`, behind the interceptor: yields the
    system (its ``cold_start`` says how the first call went)."""
    import requests

    from nearfaas.bench.cluster import scratch_cluster
    from nearfaas.client import gateway_session
    from nearfaas.cluster import launcher
    from nearfaas.spec.bundle import pack

    from nearfaas.spec.cluster import load_cluster

    progress("serverless: starting a private cluster")
    # The gateway forwards 32 calls at once by default and answers 429 beyond: the N=64 batch must
    # measure the platform queueing them, not a refusal.
    gateway = load_cluster(None).gateway
    gateway.port, gateway.max_inflight = 0, 0
    with scratch_cluster(gateway=gateway) as (layout, state):
        gw = layout["gateway_url"]
        # As the admin, and as a bundle (the gateway takes a folder by path only under its handler_roots).
        # One worker at most: a concurrency batch must not measure a scale-out's cold starts.
        t_deploy = time.monotonic()
        gateway_session(layout=layout).post(f"{gw}/system/functions", timeout=60, json={
            "service": "topk", "lang": "python3-http", "bundle": pack(FUNCTION_DIR),
            "labels": {"com.openfaas.scale.max": "1"}}).raise_for_status()
        deployed = time.monotonic()
        data = payload(1024, random.Random(1))
        expect = topk(data)
        attempts, first_ok = 0, None
        while True:
            attempts += 1
            t0 = time.monotonic()
            try:
                r = requests.post(f"{gw}/function/topk", data=data, timeout=30, headers={"Connection": "close"})
                if r.status_code == 200:
                    if r.content != expect:
                        raise RuntimeError(f"serverless topk answered {r.content[:64]!r}, not the top {K}")
                    first_ok = time.monotonic() - t0
                    break
            except requests.RequestException:
                pass
            if time.monotonic() - deployed > 60:
                raise RuntimeError("serverless: the function never answered")
            time.sleep(0.05)
        cold = {"deploy_ms": (deployed - t_deploy) * 1e3, "first_answer_after_deploy_ms": (time.monotonic() - deployed) * 1e3,
                "first_call_ms": first_ok * 1e3, "attempts": attempts, "label": "measured",
                "note": "the first call after the deploy; excluded from every warm number"}
        progress(f"serverless: cold start (first answer after deploy) {cold['first_answer_after_deploy_ms']:.0f} ms")
        host, port = gw.split("//", 1)[1].rstrip("/").split(":")
        proxy = Process("interceptor", "--upstream", f"{host}:{port}")
        roots = {p["pid"] for p in layout.get("processes", [])}

        def pids():
            return sorted(_descendants(roots | set(launcher.processes_of(state))))

        try:
            system = HttpSystem("serverless", ("127.0.0.1", proxy.port), "/function/topk", pids, interceptor_pid=proxy.pid,
                                transport="HTTP/1.1 POST, Connection: close, via the interceptor to the gateway",
                                server="nearfaas gateway (max_inflight unlimited) -> warm python3-http worker (examples/functions/topk), scale.max 1")
            system.cold_start = cold
            yield system
        finally:
            proxy.stop()
