"""The OpenFaaS REST API of the gateway: /system/*, /function/*, /async-function/*.

Shapes follow the OpenFaaS gateway's swagger (FunctionDeployment, FunctionStatus, ...), so the
faas-cli and existing clients work; nearfaas's own fields ride along as ``handler``, ``lang`` and
``x-nearfaas``. Everything a client gets wrong is a 4xx that names the field.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import re
import time
import uuid
from pathlib import Path

from aiohttp import web
from multidict import CIMultiDict

from nearfaas import __version__
from nearfaas.gateway.async_queue import AsyncQueue
from nearfaas.gateway.chains import ChainRunner
from nearfaas.gateway.fastpath import STATUS_HTTP, STATUS_NAMES, FastPath
from nearfaas.gateway.invoker import CallError
from nearfaas.gateway.nodes import NodeDirectory
from nearfaas.spec.bundle import BundleError, copy_folder, unpack
from nearfaas.spec.errors import SpecError
from nearfaas.spec.options import NearfaasOptions, check_chain_cycles
from nearfaas.spec.stack import FunctionSpec, parse_stack
from nearfaas.telemetry.metrics import GatewayMetrics

SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$")


def _rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str, layer: str = "gateway", headers: dict | None = None) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers={"X-Nearfaas-Layer": layer, **(headers or {})})


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise web.HTTPBadRequest(text="request body must be a JSON object\n") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="request body must be a JSON object\n")
    return body


class FunctionStore:
    """Deployed function specs, persisted so a restarted gateway knows what it was running."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> list[dict]:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return []

    def save(self, specs: list[dict]) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(specs, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class UidAllocator:
    """Each function runs under a uid of its own (node/jail.py). A new function, or a function
    deleted and deployed again, gets a uid never used before, so its S3 key is new too
    (auth/function_keys.py); an update keeps the uid it has."""

    FIRST = 200_000

    def __init__(self, path: Path):
        self.path = path

    def next(self, in_use: list[int]) -> int:
        try:
            last = int(self.path.read_text())
        except (FileNotFoundError, ValueError):
            last = self.FIRST - 1
        uid = max([last, *in_use]) + 1
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(str(uid))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return uid


def _is_fastpath(spec: dict) -> bool:
    return (spec.get("x") or {}).get("target") == "fastpath"


class OpenFaaSAPI:
    def __init__(self, calls: ChainRunner, nodes: NodeDirectory, metrics: GatewayMetrics, state_dir: Path, invoke_max_body: int,
                 max_inflight: int = 0, read_timeout: float = 60.0, fastpath_layout: dict | None = None,
                 handler_roots: list[str] = ()):
        self.calls, self.invoker, self.nodes, self.metrics = calls, calls.invoker, nodes, metrics
        self.fastpath = FastPath(fastpath_layout, self._run_for_host)
        self.max_inflight = max_inflight  # calls forwarded at once, all functions together (0 = no cap)
        self.inflight = 0
        self.read_timeout = read_timeout
        self.state_dir = state_dir
        self.store = FunctionStore(state_dir / "gateway" / "functions.json")
        self.uids = UidAllocator(state_dir / "gateway" / "last_uid")
        self.functions_dir = state_dir / "functions"  # deployed code, one folder per bundle (spec/bundle.py)
        self.handler_roots = [Path(r) for r in handler_roots]
        self.secrets_dir = state_dir / "secrets"
        self.secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.invoke_max_body = invoke_max_body
        self.queue = AsyncQueue(calls, lambda: nodes.session, metrics, state_dir / "gateway")  # journal: async_queue.py

    def routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/metrics", self.metrics_endpoint)
        r.add_get("/system/info", self.info)
        r.add_get("/system/functions", self.list_functions)
        r.add_post("/system/functions", self.deploy)
        r.add_put("/system/functions", self.update)
        r.add_delete("/system/functions", self.delete)
        r.add_get("/system/function/{name}", self.get_function)
        r.add_post("/system/scale-function/{name}", self.scale)
        r.add_get("/system/logs", self.logs)
        r.add_get("/system/secrets", self.list_secrets)
        r.add_post("/system/secrets", self.put_secret)
        r.add_put("/system/secrets", self.put_secret)
        r.add_delete("/system/secrets", self.delete_secret)
        r.add_get("/system/openapi.json", self.openapi)
        r.add_get("/system/nodes", self.list_nodes)
        r.add_post("/system/nodes/{name}/accelerator", self.set_accelerator)
        r.add_get("/system/fastpath", self.fastpath_status)
        r.add_route("*", "/function/{name}", self.invoke)
        r.add_route("*", "/function/{name}/{path:.*}", self.invoke)
        r.add_post("/async-function/{name}", self.invoke_async)
        r.add_post("/async-function/{name}/{path:.*}", self.invoke_async)

    async def restore(self) -> None:
        await self.fastpath.start()
        for spec in self.store.load():
            try:
                await self.fastpath.deploy(spec)
            except CallError as exc:  # the executor is gone or refuses it now: keep the others
                print(json.dumps({"event": "fastpath-restore-failed", "function": spec["name"], "error": str(exc)}), flush=True)
                continue
            self.invoker.deploy(spec)
        self.queue.start()

    async def _run_for_host(self, name: str, body: bytes) -> tuple[int, bytes]:
        """A fast-path miss: the function of that lambda ID on its normal path."""
        result = await self.calls.invoke(name, "POST", "/", "", CIMultiDict({"Content-Type": "application/octet-stream"}), body)
        return result.status, result.body

    async def fastpath_status(self, request):
        table = [{"name": n, "lambdaId": i, "target": (self.invoker.functions[n].spec.get("x") or {}).get("target", "worker")}
                 for n, i in sorted(self.fastpath.ids.items(), key=lambda kv: kv[1]) if n in self.invoker.functions]
        try:
            executor = await self.fastpath.stats()
        except CallError as exc:
            executor = {"running": False, "error": str(exc)}
        return web.json_response({"table": table, "executor": executor})

    def object_created(self, request: web.Request, bucket: str, key: str, info) -> None:
        """S3 event notifications, Lambda style: a new object under a function's
        ``x-nearfaas.triggers`` prefix queues an async call of it with the object as its input.
        A function's own writes, and those of every stage of its chain, never trigger it (the
        simplest recursive loops)."""
        caller = request.headers.get("X-Nearfaas-Caller", "")
        event = {"type": "s3:ObjectCreated:" + ("Put" if request.method == "PUT" else "CompleteMultipartUpload"),
                 "size": info.size, "etag": info.etag}
        for name, state in self.invoker.functions.items():
            if name == caller or not state.options.triggered_by(bucket, key):
                continue
            call_id = new_call_id()
            body = json.dumps({"input": {"bucket": bucket, "key": key}, "event": event}).encode()
            try:
                self.queue.submit_nowait({"name": name, "path": "/", "query": "", "headers": {"Content-Type": "application/json"},
                                          "body": body, "call_id": call_id, "callback": None})
            except (asyncio.QueueFull, CallError) as exc:
                print(json.dumps({"event": "trigger-dropped", "function": name, "object": f"s3://{bucket}/{key}",
                                  "reason": str(exc) or "async queue full"}), flush=True)
                continue
            self.metrics.triggers.labels(name).inc()

    def requires_auth(self, name: str) -> bool:
        """Whether calls of function ``name`` need the cluster's credentials (x-nearfaas.auth)."""
        state = self.invoker.functions.get(name)
        return state is not None and state.options.auth

    def _persist(self) -> None:
        self.store.save([s.spec for s in self.invoker.functions.values()])

    # -- meta --------------------------------------------------------------------------------------
    async def healthz(self, request):
        return web.Response(text="OK")

    async def metrics_endpoint(self, request):
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def info(self, request):
        return web.json_response({
            "provider": {"provider": "nearfaas", "orchestration": "nearfaas-local", "version": {"release": __version__, "sha": "", "commit_message": ""}},
            "version": {"release": __version__, "sha": "", "commit_message": ""},
            "arch": platform.machine(),
        })

    async def openapi(self, request):
        import yaml

        text = (Path(__file__).with_name("openapi.yaml")).read_text()
        return web.json_response(yaml.safe_load(text))

    # -- functions ---------------------------------------------------------------------------------
    def _status(self, name: str) -> dict:
        state = self.invoker.functions[name]
        spec = FunctionSpec.from_dict(state.spec)
        return {
            "name": name, "image": "", "namespace": "openfaas-fn", "envProcess": "handler.handle",
            "envVars": spec.environment, "constraints": spec.constraints, "secrets": spec.secrets,
            "labels": spec.labels, "annotations": spec.annotations, "limits": spec.limits or None, "requests": None,
            "readOnlyRootFilesystem": False, "invocationCount": state.invocations,
            # A fast-path lambda has no workers: the executor's one installed version serves it.
            **({"replicas": 1, "availableReplicas": 1} if _is_fastpath(state.spec) and name in self.fastpath.ids
               else {"replicas": state.desired, "availableReplicas": len(state.instances)}),
            "createdAt": _rfc3339(state.created), "handler": str(spec.handler_dir), "lang": spec.lang,
            "x-nearfaas": state.spec.get("x"), "lambdaId": self.fastpath.ids.get(name),
            # What `auto` predicts this function's compute with, per target: a measured stage
            # profile until the first calls, then those calls' running average (seconds).
            "estimates": {target: s for (fn, target), s in self.invoker.compute_s.items() if fn == name},
            # The call token is the admin's to see (this API needs their credentials): a benchmark
            # may call a worker directly with it.
            "instances": [{"id": i.id, "node": i.node, "url": i.url, "inflight": i.inflight, "calls": i.calls, "token": i.token}
                          for i in state.instances.values()],
        }

    async def list_functions(self, request):
        return web.json_response([self._status(n) for n in sorted(self.invoker.functions)])

    async def get_function(self, request):
        name = request.match_info["name"]
        if name not in self.invoker.functions:
            return _error(404, f"function {name!r} not found")
        return web.json_response(self._status(name))

    def _spec_from_request(self, body: dict) -> dict:
        """An OpenFaaS FunctionDeployment (+ handler/lang/x-nearfaas) as a validated spec dict."""
        name = body.get("service")
        if not isinstance(name, str) or not name:
            raise SpecErrorResponse("service: required, the function's name (e.g. \"resize\")")
        fn = {k: body[k] for k in ("lang", "handler", "image", "labels", "annotations", "secrets", "limits", "requests",
                                   "constraints", "x-nearfaas") if body.get(k) is not None}
        env = {}
        for field in ("envVars", "environment"):
            value = body.get(field)
            if value is not None and not isinstance(value, dict):
                raise SpecErrorResponse(f"{field}: must be a map of names to strings")
            env.update(value or {})
        if env:
            fn["environment"] = env
        fn.setdefault("lang", "python3-http")
        # With no code at all (an image-only deployment, say), parse_stack names what is missing.
        has_code = body.get("bundle") is not None or body.get("handler") is not None
        if has_code and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):  # else parse_stack names the bad name
            fn["handler"] = str(self._code(name, body))
        stack = parse_stack({"version": "1.0", "provider": {"name": "openfaas"}, "functions": {name: fn}}, Path("/"), whole=False)
        spec = stack.functions[name].to_dict()
        current = self.invoker.functions.get(name)
        spec["uid"] = current.spec["uid"] if current is not None and "uid" in current.spec else \
            self.uids.next([s.spec.get("uid", 0) for s in self.invoker.functions.values()])
        buckets = NearfaasOptions.from_dict(spec["x"]).allowed_buckets()
        spec["buckets"] = sorted(buckets) if buckets is not None else ["*"]  # what its workers may read locally
        return spec

    def _code(self, name: str, body: dict) -> Path:
        """The deployment's code, copied into the state dir: from an uploaded ``bundle``, or from
        a ``handler`` folder under one of the cluster's gateway.handler_roots."""
        if body.get("bundle") is not None:
            try:
                return unpack(body["bundle"], self.functions_dir, name)
            except BundleError as exc:
                raise SpecErrorResponse(str(exc)) from None
        handler, base_dir = body.get("handler"), body.get("base_dir")
        if base_dir is not None and not isinstance(base_dir, str):
            raise SpecErrorResponse("base_dir: must be a string, the folder a relative handler path starts from")
        if not isinstance(handler, str) or not handler.strip():
            raise SpecErrorResponse('handler: required: upload the folder as "bundle" (base64 of a .tar.gz; `nearfaas deploy` '
                                    "does this), or name a folder under the cluster's gateway.handler_roots")
        try:
            folder = (Path(base_dir or "/") / handler.strip()).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            raise SpecErrorResponse(f"handler: cannot use {handler!r}: {exc}") from None
        if not any(folder.is_relative_to(root) for root in self.handler_roots):
            roots = ", ".join(map(str, self.handler_roots)) or "none are configured"
            raise SpecErrorResponse(f"handler: {folder} is not under the cluster's gateway.handler_roots ({roots}); upload "
                                    "the folder as a bundle instead (`nearfaas deploy` does), or add its parent to handler_roots")
        if not folder.is_dir():
            raise SpecErrorResponse(f"handler: {folder} is not a folder")
        try:
            return copy_folder(folder, self.functions_dir, name)
        except BundleError as exc:
            raise SpecErrorResponse(f"handler: {exc}") from None

    async def deploy(self, request, update: bool = False):
        body = await _json_body(request)
        try:
            spec = self._spec_from_request(body)
        except SpecError as exc:
            return _error(400, f"invalid function deployment:\n{exc}", "spec")
        except SpecErrorResponse as exc:
            return _error(400, f"invalid function deployment: {exc}", "spec")
        try:  # with what is deployed already, the chains must still end
            check_chain_cycles({n: list(s.options.chain) for n, s in self.invoker.functions.items()} | {spec["name"]: spec["x"]["chain"]})
        except SpecError as exc:
            return _error(400, f"invalid function deployment, given the functions already deployed:\n{exc}", "spec")
        exists = spec["name"] in self.invoker.functions
        if update and not exists:
            return _error(404, f"function {spec['name']!r} not found; deploy it with POST /system/functions")
        was_fast = exists and _is_fastpath(self.invoker.functions[spec["name"]].spec)
        try:
            if was_fast and not _is_fastpath(spec):
                await self.fastpath.remove(spec["name"], fastpath=True)
            await self.fastpath.deploy(spec)
        except CallError as exc:
            return _error(exc.status, str(exc), exc.layer)
        self.invoker.deploy(spec)
        self._persist()
        return web.Response(status=202 if not update else 200, text=f"deployed {spec['name']}\n")

    async def update(self, request):
        return await self.deploy(request, update=True)

    async def delete(self, request):
        body = await _json_body(request)
        name = body.get("functionName")
        if not isinstance(name, str):
            return _error(400, "functionName: required, the name of the function to delete")
        state = self.invoker.functions.get(name)
        if state is None or not await self.invoker.remove(name):
            return _error(404, f"function {name!r} not found")
        try:
            await self.fastpath.remove(name, fastpath=_is_fastpath(state.spec))
        except CallError as exc:  # removed here anyway; the executor's table is rebuilt at its next start
            print(json.dumps({"event": "fastpath-remove-failed", "function": name, "error": str(exc)}), flush=True)
        self._persist()
        return web.Response(status=202, text=f"removed {name}\n")

    async def scale(self, request):
        name = request.match_info["name"]
        body = await _json_body(request)
        replicas = body.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            return _error(400, "replicas: required, a non-negative integer")
        state = self.invoker.functions.get(name)
        if state is None:
            return _error(404, f"function {name!r} not found")
        limit = int(state.spec.get("scale_max", 5))
        if replicas > limit:
            return _error(400, f"replicas: {replicas} exceeds com.openfaas.scale.max={limit} of {name!r}")
        asyncio.get_running_loop().create_task(self.invoker.scale(name, replicas))
        return web.Response(status=202, text=f"scaling {name} to {replicas}\n")

    async def logs(self, request):
        name = request.query.get("name")
        if not name:
            return _error(400, "name: required query parameter, the function whose logs to read")
        if name not in self.invoker.functions:
            return _error(404, f"function {name!r} not found")
        try:
            tail = int(request.query.get("tail", "0") or 0)
            if tail < 0:
                raise ValueError
            since_raw = request.query.get("since")
            since = dt.datetime.fromisoformat(since_raw.replace("Z", "+00:00")).timestamp() if since_raw else 0.0
        except ValueError:
            return _error(400, "tail must be an integer and since an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)")
        records = await self.nodes.logs(name, since, tail)
        lines = [json.dumps({"name": name, "namespace": "openfaas-fn", "instance": r.get("instance", ""),
                             "timestamp": _rfc3339(r.get("timestamp", 0)), "text": r.get("text", "")}) for r in records]
        return web.Response(text="".join(line + "\n" for line in lines), content_type="application/x-ndjson")

    # -- nodes -------------------------------------------------------------------------------------
    def _node_status(self, node) -> dict:
        accel = node.cls == "dscs"
        return {"name": node.name, "kind": node.kind, "class": node.cls, "healthy": node.healthy, "url": node.url,
                "accelerator": {"available": self.invoker.accel_available.get(node.name, True),
                                "busy": self.invoker.accel_inflight.get(node.name, 0) > 0} if accel else None}

    async def list_nodes(self, request):
        return web.json_response([self._node_status(n) for n in self.nodes.nodes.values()])

    async def set_accelerator(self, request):
        """Mark a dscs node's accelerator available or not (DSCS-Serverless 5.3 fail-over): while
        it is unavailable, its acceleratable functions fall back to CPU compute nodes."""
        node = self.nodes.nodes.get(request.match_info["name"])
        if node is None:
            return _error(404, f"node {request.match_info['name']!r} not found; see GET /system/nodes")
        if node.cls != "dscs":
            return _error(400, f"node {node.name!r} is of class {node.cls!r} and has no accelerator; only dscs nodes do")
        body = await _json_body(request)
        available = body.get("available")
        if not isinstance(available, bool):
            return _error(400, 'available: required, true or false (e.g. {"available": false})')
        self.invoker.accel_available[node.name] = available
        return web.json_response(self._node_status(node))

    # -- secrets -----------------------------------------------------------------------------------
    async def list_secrets(self, request):
        return web.json_response([{"name": p.name} for p in sorted(self.secrets_dir.iterdir()) if p.is_file()])

    async def put_secret(self, request):
        body = await _json_body(request)
        name, value = body.get("name"), body.get("value", body.get("rawValue"))
        if not isinstance(name, str) or not SECRET_NAME.match(name):
            return _error(400, "name: required, lower-case letters, digits, '-', '_' or '.', at most 63 characters")
        if not isinstance(value, str):
            return _error(400, "value: required, the secret as a string")
        tmp = self.secrets_dir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.secrets_dir / name)
        return web.Response(status=201 if request.method == "POST" else 200, text=f"stored secret {name}\n")

    async def delete_secret(self, request):
        body = await _json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not SECRET_NAME.match(name) or not (self.secrets_dir / name).is_file():
            return _error(404, f"secret {name!r} not found")
        (self.secrets_dir / name).unlink()
        return web.Response(status=204)

    # -- invocation --------------------------------------------------------------------------------
    async def _read_invocation_body(self, request) -> bytes:
        if request.content_length is not None and request.content_length > self.invoke_max_body:
            raise CallError(413, f"request body of {request.content_length} bytes exceeds the {self.invoke_max_body}-byte limit "
                                 f"for invocations; put large data in an object and pass an object reference {{\"bucket\": ..., \"key\": ...}}", "gateway")
        # Read to EOF (StreamReader.read(n) returns whatever has arrived, not n bytes), counting
        # as we go so a chunked body cannot exceed the limit either.
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.read_timeout):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > self.invoke_max_body:
                        raise CallError(413, f"request body exceeds the {self.invoke_max_body}-byte limit for invocations; "
                                             f"pass an object reference instead", "gateway")
                    chunks.append(chunk)
        except TimeoutError:
            raise CallError(408, f"the request body did not arrive within read_timeout={self.read_timeout:g}s", "gateway") from None
        return b"".join(chunks)

    @staticmethod
    def _raw_target(request: web.Request) -> tuple[str, str]:
        """The sub-path after /function/<name> and the query, both still percent-encoded: the
        worker decodes them, and an encoded CR or LF can never split a forwarded header."""
        raw_path, _, raw_query = request.raw_path.partition("?")
        parts = raw_path.split("/", 3)  # ['', 'function', '<name>', '<rest>']
        return "/" + (parts[3] if len(parts) > 3 else ""), raw_query

    async def invoke(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if self.max_inflight and self.inflight >= self.max_inflight:
            return _error(429, f"the gateway is forwarding its limit of {self.max_inflight} calls (gateway.max_inflight); retry",
                          headers={"Retry-After": "1"})
        self.inflight += 1
        try:
            body = await self._read_invocation_body(request)
            state = self.invoker.functions.get(name)
            if state is not None and _is_fastpath(state.spec):
                return await self._invoke_fastpath(name, body)
            path, query = self._raw_target(request)
            result = await self.calls.invoke(name, request.method, path, query, request.headers, body, request.get("call_id"))
        except CallError as exc:
            return _error(exc.status, str(exc), exc.layer, exc.headers)
        finally:
            self.inflight -= 1
        return web.Response(status=result.status, headers=result.headers, body=result.body)

    async def _invoke_fastpath(self, name: str, body: bytes) -> web.Response:
        lambda_id = self.fastpath.ids.get(name)  # before the await: a delete meanwhile must not make this a 500
        status, payload = await self.fastpath.call(name, body)
        headers = {"X-Nearfaas-Target": "fastpath", "X-Nearfaas-Fastpath-Status": STATUS_NAMES.get(status, str(status)),
                   "X-Nearfaas-Lambda-Id": str(lambda_id)}
        return web.Response(status=STATUS_HTTP.get(status, 502), body=payload, headers=headers)

    async def invoke_async(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.invoker.functions:
            return _error(404, f"function {name!r} not found")
        callback = request.headers.get("X-Callback-Url")
        if callback and not re.match(r"^https?://[^\s/]+", callback):
            return _error(400, "X-Callback-Url must be an absolute http(s) URL")
        try:
            body = await self._read_invocation_body(request)
            path, query = self._raw_target(request)
            await self.queue.submit({"name": name, "path": path, "query": query, "headers": dict(request.headers), "body": body,
                                     "call_id": request["call_id"], "callback": callback})  # on disk before the 202
        except CallError as exc:
            return _error(exc.status, str(exc), exc.layer)
        except asyncio.QueueFull:
            return _error(429, "the async queue is full; retry later", headers={"Retry-After": "1"})
        return web.Response(status=202, text=f"accepted {request['call_id']}\n")


class SpecErrorResponse(Exception):
    pass


# Call ids: a random per-process prefix and a counter. Unique across gateways and restarts, and
# far cheaper than a uuid4 (an os.urandom syscall) on every warm call.
_CALL_PREFIX = uuid.uuid4().hex[:12]
_call_counter = itertools.count(1)


def new_call_id() -> str:
    return f"{_CALL_PREFIX}-{next(_call_counter):08x}"


@web.middleware
async def stamp_calls(request: web.Request, handler):
    """Every response carries X-Call-Id and X-Duration-Seconds (set just before headers go out)."""
    request["t0"] = time.perf_counter()
    request["call_id"] = request.headers.get("X-Call-Id") or new_call_id()
    return await handler(request)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    if "t0" in request:
        response.headers.setdefault("X-Call-Id", request["call_id"])
        response.headers.setdefault("X-Duration-Seconds", f"{time.perf_counter() - request['t0']:.6f}")
