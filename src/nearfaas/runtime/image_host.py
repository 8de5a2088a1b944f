"""The host side of one image-function instance: the worker contract outside, a container inside.

node/pool.py starts it as it starts a Python worker (``--ready-fd``: ``READY <port>`` or
``FAILED [...]``), in its own session, output into the function's log; the gateway calls it on
127.0.0.1 with the instance's call token (runtime/worker.py has the same contract). It never runs
function code itself: everything the image brings runs in the container (bundle.py).

Two ways to run a call, as OpenFaaS's two watchdogs do:
- classic (``fprocess`` without ``mode: http``): the container is *created* but never started,
  so its namespaces and cgroup exist with no process of the image running; each call is
  ``runtime exec`` of ``fprocess`` in it, the request body on stdin, the request as ``Http_*``
  variables (Http_Method, Http_Path, Http_Query, Http_ContentLength, one per header), stdout the
  answer, a non-zero exit a 500. exec into a live container costs about 30 ms here, less than
  ``runtime run`` per call (about 45 ms) and the instance's memory cgroup stays one.
- http (``mode: http``, or an image without ``fprocess``): the container runs ``fprocess`` (else
  the image's Entrypoint + Cmd) as a long-lived server, and calls are proxied to its port
  (``upstream_url``, ``port``, the first ExposedPort, else 8080) in the container's own network
  namespace, which only this process enters (per proxy thread, setns), so every instance can use
  the same port.
Objects, as the Python worker reaches them (runtime/s3proxy.py): the host serves the worker's S3
endpoint on a socket it opens *inside* the container's network namespace (127.0.0.1:``s3_port``
there), and the container's environment points the AWS SDKs at it (``AWS_ENDPOINT_URL`` and a key
pair made for this instance alone). A GET of an object this node stores is answered from the
object file the node hands over (sendfile, no link crossed): near-data placement gives an image
function local reads as it gives a Python one; everything else is forwarded to the cluster,
signed again with the function's own key. In a chain, a stage that did not write its output
object itself gets its answer written there (onto this node when it stores objects), so the next
stage reads it near the data.
Timeouts: ``read_timeout`` bounds reading the request, ``exec_timeout`` the function's answer,
``write_timeout`` reading an http upstream's body once its headers came.

The HTTP side is a small asyncio server (``_Connection``) rather than aiohttp: importing aiohttp
costs about 0.2 s, a third of an image function's cold start here, and the gateway's worker
client sends one simple shape of request (POST, Content-Length, keep-alive).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import hmac
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

CLONE_NEWNET = 0x40000000
UPSTREAM_WAIT_S = 30.0
PROXY_THREADS = 8
_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "host", "upgrade", "te", "trailer", "proxy-connection"}


def _log(line: str) -> None:
    """A line of the host's own into the function's log (stderr is the instance's log pipe)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class Container:
    """The instance's container, by its runtime, state root and id."""

    def __init__(self, plan: dict):
        self.runtime, self.root, self.id, self.bundle = plan["runtime"], plan["root"], plan["id"], plan["bundle"]
        self.pid: int | None = None

    def argv(self, *args: str) -> list[str]:
        return [self.runtime, "--root", self.root, *args]

    def create(self) -> None:
        """Namespaces and cgroup, no process of the image yet (classic mode stays so)."""
        pid_file = os.path.join(self.bundle, "init.pid")
        self._run("create", "--bundle", self.bundle, "--pid-file", pid_file, self.id)
        with open(pid_file) as f:
            self.pid = int(f.read().strip())

    def start(self) -> None:
        """Run the image's process in the created container (http mode's long-lived server)."""
        self._run("start", self.id)

    def _run(self, *args: str) -> None:
        # Our stdout/stderr are the function's log, and the container keeps them (its server's
        # output goes there too): a pipe would never reach EOF, so the runtime's words are read
        # back from the log.
        log = os.readlink("/proc/self/fd/2")
        offset = os.path.getsize(log) if os.path.isfile(log) else None
        done = subprocess.run(self.argv(*args), stdin=subprocess.DEVNULL, stdout=sys.stdout.fileno(), stderr=sys.stderr.fileno(),
                              timeout=60)
        if done.returncode != 0:
            said = ""
            if offset is not None:
                with open(log, "rb") as f:
                    f.seek(offset)
                    said = f.read(4000).decode(errors="replace").strip()
            raise RuntimeError(f"{os.path.basename(self.runtime)} could not {args[0]} the container: {said or f'exit {done.returncode}'}")

    def alive(self) -> bool:
        return self.pid is not None and os.path.exists(f"/proc/{self.pid}")

    def delete(self) -> None:
        subprocess.run(self.argv("delete", "--force", self.id), stdin=subprocess.DEVNULL, capture_output=True, timeout=30)


class Objects:
    """What the Python worker has for objects (runtime/context.py, runtime/s3proxy.py), loaded on
    a thread of its own: its imports (aiohttp, botocore, awscrt through the S3 modules) take about
    0.5 s here, which would otherwise add to every image function's cold start. They load while
    the container is made; the first call waits for whatever is left."""

    def __init__(self, name: str, gateway: str, link: str, object_fd: int | None):
        from nearfaas.link.profiles import EmulatedLink, get_profile
        from nearfaas.runtime import context, s3proxy

        self.context, self.s3proxy = context, s3proxy
        self.name, self.gateway = name, gateway
        self.link = EmulatedLink(get_profile(link))
        self.local = context.LocalObjects(object_fd) if object_fd is not None else None  # this node's object files (storage nodes)
        self.node_url = os.environ.get("NEARFAAS_NODE_URL")
        self.signer = context.signer_from_environment()  # the function's own S3 key: what the cluster sees
        self.calls = s3proxy.Calls(self.client(None, False, None))  # charged a request no call can own
        self.endpoint = None

    def serve(self, listener: socket.socket, s3: dict) -> None:
        self.endpoint = self.s3proxy.S3Endpoint(self.calls, s3["access_key"], s3["secret_key"], s3.get("region", "us-east-1"),
                                                listener=listener)
        self.endpoint.start()

    def client(self, output, output_local: bool, app: str | None, run_key: str | None = None):
        """One client per call, as the Python worker makes (its stats are the call's measurement);
        ``run_key``: a chain stage's key for its call's intermediates (auth/function_keys.py)."""
        return self.context.ObjectClient(self.gateway, self.local, self.context.IOStats(), auth_headers=self.signer, link=self.link,
                                         node_url=self.node_url, output=output, output_local=output_local, caller=app or self.name,
                                         run_key=run_key)


class Host:
    def __init__(self, plan: dict, gateway: str = "", node: str = "", link: str = "local", object_fd: int | None = None):
        self.plan = plan
        self.name, self.instance = plan["name"], plan["instance"]
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="objects")  # in order: load, then serve the endpoint
        self.objects_ready = self._loader.submit(Objects, self.name, gateway, link, object_fd)
        self.mode = plan["mode"]
        self.exec_timeout = float(plan.get("exec_timeout", 10.0))
        self.read_timeout = float(plan.get("read_timeout", 10.0))
        self.write_timeout = float(plan.get("write_timeout", 10.0))
        self.token = os.environ.pop("NEARFAAS_CALL_TOKEN", "").encode()
        # auth/internal.py's WORKER_TOKEN_HEADER, handed over in the plan: importing it would load aiohttp
        self.token_header = plan["token_header"].lower()
        self.container = Container(plan)
        self.proxy: ThreadPoolExecutor | None = None
        self.local = threading.local()
        self.dying = False
        self.max_inflight = int(plan.get("max_inflight") or 0)  # as the Python worker: 429 beyond it
        self.inflight = 0

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        started = time.perf_counter()
        self.container.create()
        netns = os.open(f"/proc/{self.container.pid}/ns/net", os.O_RDONLY)
        if self.plan.get("s3"):
            # The socket before the image's process starts (its first request waits in the
            # backlog rather than being refused); served once the object plane has loaded.
            listener = _listen_in(netns, int(self.plan["s3"]["port"]))
            loaded = self.objects_ready

            def serve():
                plane = loaded.result()
                plane.serve(listener, self.plan["s3"])
                return plane

            self.objects_ready = self._loader.submit(serve)
        if self.mode == "http":
            self.container.start()
        made = time.perf_counter()
        if self.mode == "http":
            self.proxy = ThreadPoolExecutor(PROXY_THREADS, thread_name_prefix="proxy", initializer=_enter_netns, initargs=(netns,))
            self._wait_upstream()
        # The container's part of the cold start, in the function's log (raw line, like the runtime's own)
        print(json.dumps({"event": "container-ready", "instance": self.instance, "mode": self.mode, "container_s": round(made - started, 4),
                          "upstream_s": round(time.perf_counter() - made, 4)}), file=sys.stderr, flush=True)

    def _wait_upstream(self) -> None:
        """Until the image's server accepts connections (its cold start), or it died."""
        deadline = time.monotonic() + UPSTREAM_WAIT_S
        port = int(self.plan["port"])
        while True:
            try:
                self.proxy.submit(_probe_port, port).result()
                return
            except OSError:
                if not self.container.alive():
                    raise RuntimeError(f"the container's server ({' '.join(self.plan['args'])}) exited before it listened on "
                                       f"port {port}; see the function's log") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nothing listened on port {port} in the container within {UPSTREAM_WAIT_S:g}s; set "
                                       f"upstream_url (of-watchdog) or port in the function's environment") from None
                time.sleep(0.01)

    # -- calls -----------------------------------------------------------------------------------
    async def serve(self, verb: str, target: str, h: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        """One call: (status, headers as pairs, body). ``h`` has lower-case names."""
        if target == "/_/health":
            return 200, [("Content-Type", "application/json")], json.dumps(
                {"status": "ok", "function": self.name, "container": self.container.alive()}).encode()
        if self.token and not hmac.compare_digest(h.get(self.token_header, "").encode(), self.token):
            return 401, [], b"calls reach this worker through the gateway only\n"
        if self.dying:
            return 503, [], b"the instance is restarting after a timeout; retry\n"
        if self.max_inflight and self.inflight >= self.max_inflight:
            return 429, [("Retry-After", "1")], f"function {self.name!r} is at max_inflight={self.max_inflight} on this instance\n".encode()
        self.inflight += 1
        try:
            return await self._serve_call(verb, h, body)
        finally:
            self.inflight -= 1

    async def _serve_call(self, verb: str, h: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        method = h.get("x-nearfaas-method", verb)
        path, query = unquote(h.get("x-nearfaas-path", "/")), h.get("x-nearfaas-query", "")
        headers = {_title(k): v for k, v in h.items() if not k.startswith("x-nearfaas-") and k not in _HOP}
        try:
            plane = await asyncio.wrap_future(self.objects_ready)
        except Exception as exc:  # a broken installation, not the call's fault: say so in the answer and the log
            print(f"the instance could not load its object client: {exc!r}", file=sys.stderr, flush=True)
            return 500, [("X-Nearfaas-Layer", "worker")], f"the instance could not load its object client: {exc}\n".encode()
        try:
            output = plane.context.ObjectRef.parse(json.loads(h["x-nearfaas-output"])) if h.get("x-nearfaas-output") else None
        except ValueError as exc:
            return 400, [], f"bad X-Nearfaas-Output header: {exc}\n".encode()
        objects = plane.client(output, h.get("x-nearfaas-output-mode") == "local", h.get("x-nearfaas-app"), h.get("x-nearfaas-run-key"))
        call_id = h.get("x-nearfaas-call-id") or f"local-{time.monotonic_ns()}"
        started = time.perf_counter()
        plane.calls.begin(call_id, objects)  # the container's S3 requests meanwhile are this call's
        try:
            if self.mode == "http":
                status, out, payload = await self._proxy(method, path, query, headers, body)
            else:
                status, out, payload = await self._exec(method, path, query, headers, body)
        finally:
            plane.calls.end(call_id)
        # pairs, not a dict: several Set-Cookie stay several
        out = [(k, v) for k, v in out if k.lower() not in _HOP and not k.lower().startswith("x-nearfaas-")]
        if output is not None and status < 300 and objects.wrote_output is None:
            # A chain stage: its answer is its output object (an image function knows no context.output)
            content_type = next((v for k, v in out if k.lower() == "content-type"), "application/octet-stream")
            try:
                await asyncio.to_thread(objects.put, output, payload, content_type=content_type)
            except (plane.context.ObjectError, OSError) as exc:
                return 502, [("X-Nearfaas-Layer", "worker")], f"the answer could not be written to the stage's output {output}: {exc}\n".encode()
        out += list(objects.stats.call_headers(time.perf_counter() - started, plane.link.profile.name, self.instance,
                                               objects.wrote_output).items())
        return status, out, payload

    def _call_env(self, method: str, path: str, query: str, headers: dict, body: bytes) -> list[str]:
        """The classic watchdog's CGI-style variables (Http_<Header_Name>, Http_Method, ...)."""
        env = {"Http_Method": method, "Http_Path": path, "Http_Query": query, "Http_ContentLength": str(len(body))}
        for k, v in headers.items():
            env["Http_" + k.replace("-", "_")] = v
        return [f"{k}={v}" for k, v in env.items() if "\0" not in v and "\n" not in v]

    def _process_file(self, call: str, env: list[str]) -> str:
        """The call's process (the container's, plus the Http_* variables) in a file of the
        instance's 0700 folder: as ``--env`` arguments a caller's Authorization header would be
        in runc's command line, which every process of the host may read."""
        if not hasattr(self, "_process"):
            with open(os.path.join(self.container.bundle, "config.json")) as f:
                self._process = json.load(f)["process"]
        path = os.path.join(self.container.bundle, f"{call}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(dict(self._process, env=[*self._process.get("env", []), *env]), f)
        return path

    async def _exec(self, method: str, path: str, query: str, headers: dict, body: bytes):
        call = f"call-{time.monotonic_ns()}"
        pid_file = os.path.join(self.container.bundle, f"{call}.pid")
        process_file = self._process_file(call, self._call_env(method, path, query, headers, body))
        argv = self.container.argv("exec", "--pid-file", pid_file, "--process", process_file, self.container.id)
        # The classic watchdog's own lines, which users and OpenFaaS's conformance tests look for.
        started = time.perf_counter()
        _log("Forking fprocess.")
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(body), self.exec_timeout)
        except TimeoutError:
            _kill_pid_file(pid_file)  # the function's process: killing runc alone would leave it running
            proc.kill()
            await proc.wait()
            return 504, [("X-Nearfaas-Layer", "function")], (f"function {self.name!r} exceeded exec_timeout={self.exec_timeout:g}s; "
                                                               f"its process was killed\n").encode()
        finally:
            _unlink(pid_file)
            _unlink(process_file)
        if err:
            sys.stderr.buffer.write(err)  # the function's stderr, into its log
            sys.stderr.flush()
        _log(f"Wrote {len(out)} Bytes - Duration: {time.perf_counter() - started:f} seconds")
        if proc.returncode != 0:
            why = "killed by a signal (over limits.memory?)" if proc.returncode in (137, -9) else f"exit {proc.returncode}"
            tail = err.decode(errors="replace").strip()[-500:]
            return 500, [("Content-Type", "text/plain")], f"fprocess failed: {why}\n{tail}\n".encode()
        content_type = self.plan.get("content_type") or headers.get("Content-Type") or "text/plain"
        return 200, [("Content-Type", content_type)], out

    async def _proxy(self, method: str, path: str, query: str, headers: dict, body: bytes):
        target = path + (f"?{query}" if query else "")
        future = asyncio.wrap_future(self.proxy.submit(self._forward, method, target, headers, body))
        try:
            return await asyncio.wait_for(future, self.exec_timeout)
        except TimeoutError:
            # The server may be stuck for good: answer, then exit; the node starts a fresh instance.
            self.dying = True
            asyncio.get_running_loop().call_later(0.05, self._exit, 70)
            return 504, [("X-Nearfaas-Error", "exec-timeout"), ("X-Nearfaas-Layer", "function")], \
                f"function {self.name!r} exceeded exec_timeout={self.exec_timeout:g}s; the instance is replaced\n".encode()
        except OSError as exc:
            return 502, [("X-Nearfaas-Layer", "function")], f"the function's server did not answer: {exc}\n".encode()

    def _forward(self, method: str, target: str, headers: dict, body: bytes):
        """On a proxy thread (inside the container's network namespace); one kept connection each."""
        for attempt in (1, 2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", int(self.plan["port"]), timeout=self.exec_timeout)
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                if conn.sock is not None:
                    conn.sock.settimeout(self.write_timeout)
                payload = resp.read()
                return resp.status, resp.getheaders(), payload
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
            except BaseException:
                conn.close()
                self.local.conn = None
                raise

    def _exit(self, code: int) -> None:
        self.container.delete()
        os._exit(code)

    async def watch(self) -> None:
        """A container whose init died (an http server that exited, a classic container's waiting
        runtime process killed) takes the instance with it: the node replaces it."""
        while True:
            await asyncio.sleep(0.5)
            if not self.container.alive():
                print(f"the container of {self.instance} exited; stopping the instance", file=sys.stderr, flush=True)
                self._exit(75)


def _enter_netns(fd: int) -> None:
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns into the container's network namespace failed")


def _listen_in(netns: int, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` of the network namespace ``netns``: made by a
    thread that enters it and ends; the socket stays in that namespace, served from ours."""
    made: dict = {}

    def bind() -> None:
        try:
            _enter_netns(netns)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            made["sock"] = sock
        except OSError as exc:
            made["error"] = exc

    thread = threading.Thread(target=bind, name="s3-listen")
    thread.start()
    thread.join()
    if "error" in made:
        raise RuntimeError(f"could not open the S3 endpoint on port {port} in the container: {made['error']}")
    return made["sock"]


def _probe_port(port: int) -> None:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()


def _kill_pid_file(path: str) -> None:
    try:
        with open(path) as f:
            os.kill(int(f.read().strip()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 411: "Length Required", 429: "Too Many Requests",
            500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def _title(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


async def _connection(host: Host, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Requests on one kept connection, one at a time (the gateway pools connections)."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            verb, target, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
            h: dict[str, str] = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    h[name.strip().lower()] = value.strip()
            if "chunked" in h.get("transfer-encoding", "").lower():
                status, out, payload = 411, [], b"send a Content-Length\n"
            else:
                try:
                    body = await asyncio.wait_for(reader.readexactly(int(h.get("content-length") or 0)), host.read_timeout)
                except TimeoutError:
                    body = None
                except (asyncio.IncompleteReadError, ValueError, ConnectionError):
                    return
                if body is None:
                    status, out, payload = 408, [], f"reading the request took over read_timeout={host.read_timeout:g}s\n".encode()
                else:
                    status, out, payload = await host.serve(verb, target.split("?", 1)[0], h, body)
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", f"Content-Length: {len(payload)}"]
            lines += [f"{k}: {v}" for k, v in out if "\r" not in str(v) and "\n" not in str(v)]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace") + payload)
            await writer.drain()
            if status in (408, 411):
                return
    finally:
        writer.close()


async def _serve(host: Host, ready_fd: int) -> None:
    server = await asyncio.start_server(lambda r, w: _connection(host, r, w), "127.0.0.1", 0, backlog=1024, limit=1 << 20)
    port = server.sockets[0].getsockname()[1]
    os.write(ready_fd, f"READY {port}\n".encode())
    os.close(ready_fd)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    watcher = loop.create_task(host.watch())
    await stop.wait()
    watcher.cancel()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="nearfaas image-function host (started by a node agent)")
    parser.add_argument("--plan", required=True, help="JSON file: the container and how to call it (node/oci/launch.py)")
    parser.add_argument("--instance", required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--gateway", default="", help="the cluster's S3 endpoint (the gateway), for objects not on this node")
    parser.add_argument("--node", default="")
    parser.add_argument("--link", default="local", help="the emulated compute <-> storage link profile")
    parser.add_argument("--object-fd", type=int, help="this node's object socket (node/objectfds.py), on storage nodes")
    args = parser.parse_args(argv)
    _die_with_parent()
    host = None
    try:
        with open(args.plan) as f:
            host = Host(json.load(f), args.gateway, args.node, args.link, args.object_fd)
        host.start()
    except Exception as exc:
        message = traceback.format_exc().strip().splitlines()
        print("\n".join(message), file=sys.stderr, flush=True)
        if host is not None:
            host.container.delete()
        try:
            os.write(args.ready_fd, ("FAILED " + json.dumps([f"{type(exc).__name__}: {exc}"]) + "\n").encode())
        except OSError:
            pass
        sys.exit(1)
    try:
        asyncio.run(_serve(host, args.ready_fd))
    finally:
        host.container.delete()  # on SIGTERM (a stop, a scale-down, nearfaas down) the container goes too


def _die_with_parent() -> None:
    """Gone with the node agent (PR_SET_PDEATHSIG); its container is deleted by the next start's sweep."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(0)


if __name__ == "__main__":
    main()
