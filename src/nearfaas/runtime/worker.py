"""The function worker: our own watchdog (OpenFaaS's Go modules cannot be fetched here).

One process per warm instance. It imports the handler once (the cold start), then serves calls
over HTTP on 127.0.0.1 until it is told to stop (jailed: on a unix socket in its own network
namespace, which the gateway connects to directly, node/netns.py and node/netrelay.py).

Execution model: the handler runs like a normal program. The worker's main thread imports it and
runs every call of a sync handler, one at a time (``x-nearfaas.execution: main``, the default),
so libraries that keep state per thread (RNGs seeded on the importing thread, signal handlers,
thread-local sessions) behave as they would in a script. ``execution: threads`` runs up to
``max_inflight`` (else 8) calls at once on handler threads instead. An ``async def handle`` runs
on the event loop, which lives on a thread of its own and keeps the clock either way: past
``exec_timeout`` the caller gets a 504 naming this layer and the process exits, so a runaway
handler can never keep a worker; the node agent then replaces it.

Unmodified S3 code (boto3 and the other AWS SDKs) reaches the cluster through the worker's own S3
endpoint (runtime/s3proxy.py), which the environment points the SDKs at.

Run by the node agent as ``python -P -m nearfaas.runtime.jailed_start --spec FILE --ready-fd N`` (which enters the jail first). With
``--jail PLAN`` it first isolates itself (node/jail.py: own uid, mount namespace, cgroups), after
reading its spec and before importing any function code; ``--object-fd N`` is its end of the
socket through which the node hands it local object files (node/objectfds.py).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import importlib.util
import hmac
import inspect
import json
import os
import queue
import signal
import sys
import threading
import time
import traceback
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import parse_qsl, unquote

from aiohttp import web
from multidict import CIMultiDict

from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.link.profiles import EmulatedLink, get_profile
from nearfaas.node import jail, netns
from nearfaas.cgroups import DEFAULT_MEMORY
from nearfaas.runtime import lambda_style
from nearfaas.runtime.jailed_start import function_paths
from nearfaas.spec.errors import parse_memory
from nearfaas.runtime.context import (Context, Event, IOStats, LocalObjects, ObjectClient, ObjectRef, Secrets,
                                      signer_from_environment)
from nearfaas.runtime.s3proxy import Calls, S3Endpoint, current_call, install_botocore_hook

CLASSIC_LANGS = {"python3", "python3-flask"}
LAMBDA_LANG = "python3-lambda"  # AWS Lambda's handler(event, context) (runtime/lambda_style.py)
# Hop-by-hop or framing headers that must not be copied from a handler's answer.
_SKIP_HEADERS = {"content-length", "transfer-encoding", "connection", "keep-alive"}


class JsonLineWriter:
    """Turns print() output into one JSON record per line, so /system/logs can say when and where."""

    def __init__(self, fd: int, function: str, instance: str, stream: str):
        self._fd, self._function, self._instance, self._stream = fd, function, instance, stream
        self._buffer = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buffer += text
            *lines, self._buffer = self._buffer.split("\n")
            for line in lines:
                self._emit(line)
        return len(text)

    def _emit(self, line: str) -> None:
        record = {"timestamp": time.time(), "name": self._function, "instance": self._instance, "stream": self._stream, "text": line}
        os.write(self._fd, (json.dumps(record) + "\n").encode())

    def flush(self) -> None:
        with self._lock:
            if self._buffer:
                self._emit(self._buffer)
                self._buffer = ""

    def isatty(self) -> bool:
        return False


def load_handler(handler_dir: str, module_file: str = "handler.py", function: str = "handle"):
    path = os.path.join(handler_dir, module_file)
    if os.path.exists(path) and not os.access(path, os.R_OK):
        raise RuntimeError(f"{path} is not readable by the function's uid {os.getuid()}; make the handler folder "
                           f"world-readable (chmod -R o+rX {handler_dir}) and deploy it again")
    sys.path.insert(0, handler_dir)  # lets the handler import its sibling modules
    module_name = module_file[:-3].replace("/", ".")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or not os.path.exists(path):
        raise RuntimeError(f"{module_file} is not in the handler folder; add it, or fix _HANDLER (module.function)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    handle = getattr(module, function, None)
    if not callable(handle):
        raise RuntimeError(f"{module_file} defines no callable {function}(event, context)")
    return module, handle


class MainThread:
    """An executor of one: the process's main thread, which ``run_forever`` hands over to it."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def run_forever(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # the caller decides what an exception means
                future.set_exception(exc)


def to_response(result) -> tuple[int, CIMultiDict, bytes]:
    """Map a handler's return value onto (status, headers, body), python3-http style. A header
    whose value is a list is sent once per item (several ``Set-Cookie``, say)."""
    status, headers, body = 200, CIMultiDict(), result
    if isinstance(result, dict) and ("statusCode" in result or "body" in result):
        status = int(result.get("statusCode", 200))  # a non-number raises ValueError: reported as a bad answer
        for k, v in (result.get("headers") or {}).items():
            for item in (v if isinstance(v, list | tuple) else [v]):
                headers.add(str(k), str(item))
        body = result.get("body", b"")
    if isinstance(body, (bytes, bytearray, memoryview)):
        payload = bytes(body)
    elif isinstance(body, str):
        payload = body.encode()
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
    elif body is None:
        payload = b""
    else:
        payload = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    return status, headers, payload


class Worker:
    def __init__(self, spec: dict, node: str, gateway: str, local: LocalObjects | None, secrets_dir: str | None, instance: str,
                 link: str = "local"):
        self.spec = spec
        self.name = spec["name"]
        self.node = node
        self.instance = instance
        self.exec_timeout = float(spec.get("exec_timeout", 10.0))
        limit = int(spec.get("max_inflight", 0))
        self.max_inflight = limit
        self.inflight = 0
        self.execution = (spec.get("x") or {}).get("execution") or "main"
        threads = 1 if self.execution == "main" else (limit or 8)
        self.pool = MainThread() if self.execution == "main" else ThreadPoolExecutor(max_workers=threads, thread_name_prefix="handler")
        # A call waits for a free handler thread *before* its exec_timeout clock starts, so a
        # burst queued behind busy threads never looks like a runaway handler.
        self.slots = asyncio.Semaphore(threads)
        self.gateway = gateway
        self.local = local  # this node's object files, handed over as fds (storage nodes only)
        self.node_url = os.environ.get("NEARFAAS_NODE_URL")  # this node's own S3 endpoint (storage nodes)
        # The token a call must carry (node/pool.py); out of os.environ before handler code runs.
        self.call_token = os.environ.pop("NEARFAAS_CALL_TOKEN", "").encode()
        self.secrets = Secrets(secrets_dir)
        self.link = EmulatedLink(get_profile(link))
        self.signer = signer_from_environment()
        self.calls = Calls(self._objects(IOStats(), None, False, None))
        self.s3 = self._start_s3_endpoint()
        environment = spec.get("environment") or {}
        # AWS Lambda's contract (runtime/lambda_style.py): the event shape, else None
        self.lambda_shape = lambda_style.event_shape(environment) if spec.get("lang") == LAMBDA_LANG else None
        entry = lambda_style.entry_point(environment) if self.lambda_shape else ("handler.py", "handle")
        self.module, self.handle = load_handler(spec["handler_dir"], *entry)
        self.memory_mb = parse_memory(str((spec.get("limits") or {}).get("memory") or DEFAULT_MEMORY)) // (1 << 20)
        self.is_async = inspect.iscoroutinefunction(self.handle)
        self.classic = spec.get("lang") in CLASSIC_LANGS
        self.dying = False
        self.private_tmp = False  # set by _run when the instance has a tmpfs /tmp of its own

    def _start_s3_endpoint(self) -> S3Endpoint | None:
        """Point the AWS SDKs at this worker's S3 endpoint, before the handler creates a client.
        A function that sets its own endpoint (AWS_ENDPOINT_URL in its environment) keeps it."""
        if os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3"):
            return None
        endpoint = S3Endpoint(self.calls, os.environ.get("NEARFAAS_ACCESS_KEY"), os.environ.get("NEARFAAS_SECRET_KEY"),
                              os.environ.get("NEARFAAS_REGION", "us-east-1"))
        os.environ.update(endpoint.environment())
        install_botocore_hook(endpoint.url)
        endpoint.start()
        return endpoint

    def _objects(self, stats: IOStats, output: ObjectRef | None, output_local: bool, app: str | None,
                 run_key: str | None = None) -> ObjectClient:
        # One client per call: its stats are the call's data-movement measurement. Its writes
        # name the chain (or the function) they come from, so they never trigger it again.
        return ObjectClient(self.gateway, self.local, stats, auth_headers=self.signer, link=self.link, node_url=self.node_url,
                            output=output, output_local=output_local, caller=app or self.name, run_key=run_key)

    def _run_as(self, call_id: str, event: Event, context: Context):
        token = current_call.set(call_id)  # this thread's S3 requests are this call's (runtime/s3proxy.py)
        try:
            return self._run(event, context)
        finally:
            current_call.reset(token)

    def _run(self, event: Event, context: Context):
        if self.classic:  # OpenFaaS's python3 / python3-flask templates: handle(req) with the body as text
            return self.handle(event.body.decode("utf-8", errors="replace"))
        if self.lambda_shape:  # Lambda's handler(event, context): its event and context made at the call
            return lambda_style.make_answer(self.lambda_shape, self.handle(*context.lambda_call))
        return self.handle(event, context)

    async def serve(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/_/health":
            return web.json_response({"status": "ok", "function": self.name, "inflight": self.inflight})
        if self.call_token and not hmac.compare_digest(request.headers.get(WORKER_TOKEN_HEADER, "").encode(), self.call_token):
            return web.Response(status=401, text="calls reach this worker through the gateway only\n")
        if self.dying:
            return web.Response(status=503, text="worker is being replaced (a timeout or a spent /tmp); retry")
        if self.max_inflight and self.inflight >= self.max_inflight:
            return web.Response(status=429, headers={"Retry-After": "1"}, text=f"function {self.name!r} is at max_inflight={self.max_inflight} on this worker")
        self.inflight += 1
        try:
            return await self._call(request)
        finally:
            self.inflight -= 1

    async def _call(self, request: web.Request) -> web.Response:
        body = await request.content.read()  # not request.read(): its 1 MiB cap is below the gateway's limit
        h = request.headers
        try:
            ref, output = (ObjectRef.parse(json.loads(h[name])) if h.get(name) else None
                           for name in ("X-Nearfaas-Input", "X-Nearfaas-Output"))
        except ValueError as exc:
            return web.Response(status=400, text=f"bad X-Nearfaas-Input or X-Nearfaas-Output header: {exc}")
        # The gateway forwards the query and path still percent-encoded (safe in a header).
        query = dict(parse_qsl(h.get("X-Nearfaas-Query", ""), keep_blank_values=True))
        event = Event(body=body, headers={k: v for k, v in h.items() if not k.lower().startswith("x-nearfaas-")},
                      method=h.get("X-Nearfaas-Method", request.method), query=query,
                      path=unquote(h.get("X-Nearfaas-Path", "/")))
        stats = IOStats()
        objects = self._objects(stats, output, h.get("X-Nearfaas-Output-Mode") == "local", h.get("X-Nearfaas-App"),
                                h.get("X-Nearfaas-Run-Key"))  # a chain stage's key for its call's intermediates
        call_id = h.get("X-Nearfaas-Call-Id") or f"local-{uuid.uuid4().hex}"
        context = Context(function=self.name, node=self.node, call_id=call_id, input=ref,
                          objects=objects, secrets=self.secrets, output=output)
        if self.lambda_shape:
            try:
                context.lambda_call = (lambda_style.make_event(self.lambda_shape, body, event.method, event.path, query,
                                                              event.headers, call_id),
                                       lambda_style.LambdaContext(self.name, call_id, self.instance, self.exec_timeout,
                                                                  self.memory_mb, os.environ.get("AWS_REGION", "us-east-1"), context))
            except lambda_style.BadEvent as exc:
                return web.Response(status=400, text=f"{exc}\n", headers={"X-Nearfaas-Layer": "worker"})
        started = time.perf_counter()
        self.calls.begin(call_id, objects)
        try:
            if self.is_async and not self.classic:
                current_call.set(call_id)  # this request's task only
                if self.lambda_shape:
                    result = lambda_style.make_answer(self.lambda_shape, await asyncio.wait_for(self.handle(*context.lambda_call),
                                                                                                 self.exec_timeout))
                else:
                    result = await asyncio.wait_for(self.handle(event, context), self.exec_timeout)
            else:
                async with self.slots:
                    started = time.perf_counter()
                    future = asyncio.wrap_future(self.pool.submit(functools.partial(self._run_as, call_id, event, context)))
                    result = await asyncio.wait_for(future, self.exec_timeout)
            status, headers, payload = to_response(result)
        except TimeoutError:
            self._die_after_reply()
            return web.Response(status=504, headers={"X-Nearfaas-Error": "exec-timeout", "X-Nearfaas-Layer": "worker"},
                                text=f"function {self.name!r} exceeded exec_timeout={self.exec_timeout:g}s in the worker "
                                     f"on node {self.node}; the worker was stopped and will be replaced")
        except Exception as exc:  # the user's handler raised: report it, keep the worker unless it is broken
            # The traceback goes to the function's log only: it names the node's paths, which a
            # caller has no business seeing; the answer says where to read it.
            print(traceback.format_exc(), file=sys.stderr, flush=True)
            fix = f"the traceback is in the function's log: nearfaas logs {self.name}"
            fault = persistent_fault(exc, "/tmp" if self.private_tmp else None)
            if fault is not None:  # every later call here would fail the same way: a fresh instance serves them
                print(f"this instance is replaced: {fault}", file=sys.stderr, flush=True)
                self._die_after_reply()
                fix = f"{fault}; this instance is replaced by a fresh one for the next call. {fix}"
            return web.json_response(
                {"error": f"handler raised {type(exc).__name__}: {exc}", "layer": "function", "function": self.name,
                 "instance": self.instance, "fix": fix},
                status=502, headers={"X-Nearfaas-Error": "instance-fault" if fault else "handler-exception",
                                     "X-Nearfaas-Layer": "function", "X-Nearfaas-Instance": self.instance})
        finally:
            self.calls.end(call_id)
        # A handler may not speak for the platform: its own X-Nearfaas-* headers are dropped.
        out = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _SKIP_HEADERS and not k.lower().startswith("x-nearfaas-"))
        out.update(stats.call_headers(time.perf_counter() - started, self.link.profile.name, self.instance, objects.wrote_output))
        spent = tmp_spent() if self.private_tmp else None
        if spent is not None:  # the call worked, but left no room for the next: it goes to a fresh instance
            print(f"this instance is replaced after this call: {spent}", file=sys.stderr, flush=True)
            self._die_after_reply()
            out[RETIRING_HEADER] = spent
        try:
            return web.Response(status=status, headers=out, body=payload)
        except (ValueError, TypeError) as exc:  # e.g. statusCode 1000 or a header value with a newline
            return web.json_response({"error": f"handler returned an invalid HTTP answer: {exc}", "layer": "function",
                                      "function": self.name}, status=502,
                                     headers={"X-Nearfaas-Error": "bad-handler-response", "X-Nearfaas-Layer": "function"})

    def _die_after_reply(self) -> None:
        # The stuck thread cannot be killed from Python; the process can. Give the 504 a moment
        # to reach the caller, then exit: the node agent sees it and starts a replacement.
        self.dying = True
        asyncio.get_running_loop().call_later(0.05, os._exit, 70)


# Errors that say the instance itself is spent, not the call: its /tmp (a tmpfs that only the
# instance's end empties) or its file descriptors. Kept warm, it would fail every later call.
EXHAUSTED = {errno.ENOSPC: "its /tmp (or another of its file systems) is full", errno.EDQUOT: "its disk quota is spent",
             errno.EMFILE: "it has no file descriptor left (a leak)"}
TMP_NEARLY_FULL = 0.01  # free share of /tmp under which the instance is spent
RETIRING_HEADER = "X-Nearfaas-Retiring"  # on an answer after which the instance exits (why); the gateway drops it


def persistent_fault(exc: BaseException, tmp: str | None = "/tmp") -> str | None:
    """Why the instance that raised ``exc`` cannot serve another call, or None (the call's own
    failure: the instance stays warm). Looks through the exception's causes, and at /tmp: a
    library may wrap ENOSPC in its own error, but a failed call with /tmp full is the same fault
    (``tmp`` None: the instance has no /tmp of its own to blame, as with isolation off).

    Worked example (SeBS's compression function, 19.4 MB left in /tmp per call, tmp_size 64Mi):
    the fourth call's write raises OSError(ENOSPC) -> "its /tmp ... is full (... tmp_size)"; the
    worker answers 502 saying so and exits, and the fifth call cold-starts an instance with an
    empty /tmp instead of failing too."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in EXHAUSTED:
            return f"{EXHAUSTED[exc.errno]} (x-nearfaas.tmp_size sets /tmp's size; delete what a call leaves there)"
        exc = exc.__cause__ or exc.__context__
    return tmp_spent(tmp) if tmp is not None else None


def tmp_spent(tmp: str = "/tmp") -> str | None:
    """Why /tmp leaves no room for another call (under TMP_NEARLY_FULL of it free), or None."""
    try:
        fs = os.statvfs(tmp)
    except OSError:
        return None
    if fs.f_blocks and fs.f_bavail / fs.f_blocks < TMP_NEARLY_FULL:
        return "its /tmp is full (x-nearfaas.tmp_size sets its size; delete what a call leaves there)"
    return None


def _prepare(args, spec: dict) -> Worker:
    """On the main thread: the function's log, its handler imported, its init() run."""
    for stream, fd in (("stdout", 1), ("stderr", 2)):
        setattr(sys, stream, JsonLineWriter(fd, spec["name"], args.instance, stream))
    local = LocalObjects(args.object_fd) if args.object_fd is not None else None
    worker = Worker(spec, args.node, args.gateway, local, args.secrets_dir, args.instance, args.link)
    init = getattr(worker.module, "init", None)
    if callable(init):
        init()  # optional one-time set-up (model load): part of the cold start, by design
    return worker


async def _serve(worker: Worker, ready_fd: int) -> None:
    """On the event-loop thread: answer calls until the process ends."""
    # The gateway pools connections to this worker; keep them open (it closes idle ones first).
    # auto_decompress off: a call's body reaches the handler as sent, with its Content-Encoding
    # header, as OpenFaaS's watchdogs pass it. Decompressed here, 100 KB of gzip became a 100 MiB
    # body past the gateway's invoke_max_body, and a bad one a 500 (red team, issue 42).
    server = web.Server(worker.serve, access_log=None, keepalive_timeout=3600, auto_decompress=False)
    runner = web.ServerRunner(server, handle_signals=False)  # signals reach the main thread, not this one
    await runner.setup()
    if netns.serving is not None:  # jailed: a unix socket the gateway calls (node/netrelay.py)
        site, port = web.SockSite(runner, netns.serving), 0
        await site.start()
    else:
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
    os.write(ready_fd, f"READY {port}\n".encode())
    os.close(ready_fd)
    await asyncio.Event().wait()


def _run(args, spec: dict) -> None:
    """Serve calls on a loop thread while the main thread runs sync handlers (see the module doc)."""
    worker = _prepare(args, spec)
    worker.private_tmp = bool(getattr(args, "jail", None))  # its own tmpfs /tmp (node/jail.py), whose fill is its own
    failed: list[str] = []

    def loop_thread() -> None:
        try:
            asyncio.run(_serve(worker, args.ready_fd))
        except BaseException:  # a server that cannot start must say why on the ready pipe
            failed.extend(traceback.format_exc().strip().splitlines())
        finally:
            if isinstance(worker.pool, MainThread):
                worker.pool.stop()
            else:
                os.kill(os.getpid(), signal.SIGINT)  # wakes the main thread's wait below

    threading.Thread(target=loop_thread, name="event-loop", daemon=True).start()
    if isinstance(worker.pool, MainThread):
        worker.pool.run_forever()
    else:
        threading.Event().wait()
    if failed:
        raise RuntimeError("the worker's HTTP server stopped: " + " | ".join(failed[-3:]))


def _die_with_parent() -> None:
    """A worker must not outlive its node agent (say, one killed with -9): ask Linux to SIGKILL
    us when the parent goes, and check it has not gone already."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(0)


def main(argv=None, args: argparse.Namespace | None = None, jailed_spec: dict | None = None) -> None:
    """Serve one function until stopped. A spawned worker parses ``argv``; a pre-warmed generic
    worker (runtime/prewarm.py) passes ``args`` with the same fields, built from its
    specialisation message, so both paths run this same code from here on."""
    if args is None:
        parser = argparse.ArgumentParser(description="nearfaas function worker (started by a node agent)")
        parser.add_argument("--spec", required=True, help="JSON file with the function's spec")
        parser.add_argument("--node", required=True)
        parser.add_argument("--gateway", required=True, help="cluster S3/gateway URL for remote objects")
        parser.add_argument("--object-fd", type=int, default=None,
                            help="inherited socket on which the node hands over local object files (storage nodes)")
        parser.add_argument("--jail", type=json.loads, default=None, help="JSON jail plan (node/jail.py) to enter first")
        parser.add_argument("--secrets-dir", default=None)
        parser.add_argument("--instance", required=True)
        parser.add_argument("--link", default="local", help="emulated compute<->storage link profile for remote object I/O")
        parser.add_argument("--sys-path", default=None, help="the function's requirements env, put on sys.path once jailed")
        parser.add_argument("--ready-fd", type=int, required=True)
        args = parser.parse_args(argv)
    _die_with_parent()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        # The spec lies in the state directory, which the jail hides: read it first. The jail
        # comes before the handler is imported, and while this process has a single thread.
        if jailed_spec is not None:  # spawned: runtime/jailed_start.py entered the jail and set the paths
            spec = jailed_spec
        else:  # a pre-warmed worker, specialised (runtime/prewarm.py): still root here
            with open(args.spec) as f:
                spec = json.load(f)
            code_dir = os.getcwd()  # the handler folder (specialise moved there)
            if args.jail:
                jail.enter(args.jail)
            # its handler folder and env hold the author's files: on sys.path only now, after the jail;
            # modules the generic worker imported stay the platform's (node/prewarm.py shadowed_modules)
            function_paths(code_dir, getattr(args, "sys_path", None))
        if args.jail:
            netns.start_forwarding()  # the gateway's address inside its network namespace, before init() may call it
        _start_memory_sampling()
        _run(args, spec)
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        # A cold start that fails (import error, bad handler) must say why on the ready pipe: the
        # error itself (a SyntaxError names handler.py and the line), never the traceback, whose
        # frames name the node's paths and reach whoever made the call; it goes to the log.
        message = traceback.format_exc().strip().splitlines()
        why = [f"{type(exc).__name__}: {exc}", "(the traceback is in the function's log: nearfaas logs NAME)"]
        try:
            os.write(args.ready_fd, ("FAILED " + json.dumps(why) + "\n").encode())
        except OSError:
            pass
        print("\n".join(message), file=sys.__stderr__)
        sys.exit(1)


def _start_memory_sampling() -> None:
    """A profiled worker (x-nearfaas.memory) has the allocation shim preloaded, its sampling
    thread held back until now: the jail is entered, threads are allowed (memory/shim.py)."""
    if os.environ.get("NEARFAAS_MEMSHIM_DEFER") != "1":
        return
    import ctypes

    start = getattr(ctypes.CDLL(None), "nearfaas_memshim_start", None)
    if start is None or start() != 0:
        print("memory profiling: the shim is not loaded or cannot sample writes; allocations only", file=sys.__stderr__)


if __name__ == "__main__":
    main()
