"""/system/functions and /system/function/<name>, /system/scale-function/<name>: what is deployed.

A deployment is an OpenFaaS FunctionDeployment (plus ``handler``/``bundle``, ``lang`` and
``x-nearfaas``), validated into a spec (spec/stack.py) that names every field it rejects; the
code is copied into the state dir (spec/bundle.py); the specs are persisted so a restarted
gateway runs what it ran.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import re
import time
from pathlib import Path

from aiohttp import web

from nearfaas import atomic
from nearfaas.gateway import autoscale
from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.gateway.api.common import SpecErrorResponse, error, json_body, locked_out, on_executor, rfc3339
from nearfaas.gateway.api.secrets import SecretsAPI
from nearfaas.gateway.errors import CallError
from nearfaas.gateway.instances import namespace_of
from nearfaas.spec.bundle import BundleError, copy_folder, unpack
from nearfaas.spec.errors import SpecError
from nearfaas.spec.options import NearfaasOptions, check_chain_cycles
from nearfaas.spec.cluster import GatewaySpec
from nearfaas.spec.stack import IMAGE_ONLY_HANDLER, LABEL_SCALE_MAX, LABEL_SCALE_MIN, FunctionSpec, local_image_path, parse_stack


class FunctionStore:
    """Deployed function specs, persisted so a restarted gateway knows what it was running, and
    shared by every gateway of the cluster (gateway/peers.py): each change is a locked
    read-modify-write of the one file, and each gateway follows the file (``FunctionsAPI.sync``)."""

    def __init__(self, path: Path):
        self.path = path
        atomic.private_dir(path.parent)

    def load(self) -> list[dict]:
        try:
            return json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return []

    def signature(self) -> tuple | None:
        return atomic.signature(self.path)

    async def put(self, spec: dict) -> None:
        """TimeoutError when another gateway holds the file's lock for long (it is stopped)."""
        async with atomic.locked_async(self.path):
            self._save([s for s in self.load() if s.get("name") != spec["name"]] + [spec])

    async def remove(self, name: str) -> None:
        async with atomic.locked_async(self.path):
            self._save([s for s in self.load() if s.get("name") != name])

    def _save(self, specs: list[dict]) -> None:
        atomic.write_text(self.path, json.dumps(specs))  # 0600: it names every function and its uid


class UidAllocator:
    """Each function runs under a uid of its own (node/jail.py). A new function, or a function
    deleted and deployed again, gets a uid never used before, so its S3 key is new too
    (auth/function_keys.py); an update keeps the uid it has. A cluster's first uid is a random
    block of 1,000 from FIRST up (below the jail's derived uids), kept in the state dir: two
    clusters on one host (a test run beside a production one) would otherwise give their first
    functions the same uids, and a process of one could signal or read the other's (red team
    round 7 found its functions sharing uids with another cluster's workers)."""

    FIRST = 200_000
    BLOCKS = 800_000  # first uids from FIRST to FIRST + 1,000 * BLOCKS, under DERIVED_UID_BASE (1e9)

    def __init__(self, path: Path):
        self.path = path

    async def next(self, in_use: list[int]) -> int:
        async with atomic.locked_async(self.path):  # two gateways deploying at once get two uids
            try:
                last = int(self.path.read_text())
            except (FileNotFoundError, ValueError):
                last = self.FIRST + 1000 * secrets.randbelow(self.BLOCKS) - 1
            uid = max([last, *in_use]) + 1
            atomic.write_text(self.path, str(uid))
            return uid



class FunctionsAPI:
    def __init__(self, invoker, fastpath, state_dir: Path, handler_roots=(), namespaces: Namespaces | None = None):
        self.invoker, self.fastpath = invoker, fastpath
        self.namespaces = namespaces or Namespaces()  # functions are known as NAME or NAME.NAMESPACE (namespaces.py)
        self.store = FunctionStore(state_dir / "gateway" / "functions.json")
        self.uids = UidAllocator(state_dir / "gateway" / "last_uid")
        self.functions_dir = state_dir / "functions"  # deployed code, one folder per bundle (spec/bundle.py)
        self.handler_roots = [Path(r) for r in handler_roots]
        self.secrets = SecretsAPI(state_dir, self.namespaces)  # to check a deployment's secrets exist (secrets.py)
        self.max_scale = GatewaySpec.max_scale  # instances one function may have (gateway.max_scale, spec/budgets.py)
        self._seen: tuple | None = None  # the function file as this gateway last followed it (sync)
        self._changing = asyncio.Lock()
        # Set with many gateways: counts set by hand are the cluster's (gateway/shared_scale.py), and
        # availableReplicas counts every gateway's instances (_available).
        self.shared_scale = None

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/system/functions", self.list_functions)
        r.add_post("/system/functions", self.deploy)
        r.add_put("/system/functions", self.update)
        r.add_delete("/system/functions", self.delete)
        r.add_get("/system/function/{name}", self.get_function)
        r.add_post("/system/scale-function/{name}", self.scale)

    async def restore(self) -> None:
        """Deploy again what was deployed when the gateway stopped."""
        self._seen = self.store.signature()
        for spec in self.store.load():
            try:
                await self.fastpath.deploy(spec, self._spec_of)
            except CallError as exc:  # the executor is gone or refuses it now: keep the others
                print(json.dumps({"event": "fastpath-restore-failed", "function": spec["name"], "error": str(exc)}), flush=True)
                continue
            self.invoker.deploy(spec)

    async def sync(self) -> None:
        """Follow the shared function file: deploy here what another gateway deployed or updated,
        remove what it removed. A no-op (one stat) while the file is unchanged."""
        signature = self.store.signature()
        if signature == self._seen or self._changing.locked():  # a change here is under way: the next sync
            return
        async with self._changing:
            self._seen = signature
            specs = {s["name"]: s for s in self.store.load() if isinstance(s, dict) and isinstance(s.get("name"), str)}
            for name, spec in specs.items():
                current = self.invoker.functions.get(name)
                if current is None or current.spec != spec:
                    self.invoker.deploy(spec)
            for name in [n for n in self.invoker.functions if n not in specs]:
                await self.invoker.remove(name)

    def _replicas(self, name: str, state) -> int:
        """The count asked for: this gateway's, or with many gateways one set by hand for the
        cluster (gateway/shared_scale.py)."""
        shared = self.shared_scale.target(name, state.created) if self.shared_scale is not None else None
        return state.desired if shared is None else shared

    def _available(self, name: str, state) -> int:
        """Warm instances: this gateway's, or with many gateways every gateway's, as the nodes
        listed them at their last health poll (so that faas-cli describe says the same through
        any gateway)."""
        mine = len(state.instances)
        if self.shared_scale is None:  # one gateway
            return mine
        listed = sum(1 for node in self.invoker.nodes.nodes.values() if node.healthy
                     for worker in (node.status or {}).get("workers", []) if worker.get("function") == name)
        return max(mine, listed)

    def _spec_of(self, name: str) -> dict | None:
        state = self.invoker.functions.get(name)
        return state.spec if state is not None else None

    def _status(self, internal: str) -> dict:
        """A FunctionStatus as faas-provider's Go type marshals it: ``omitempty`` fields left out
        when empty (clients tell nil from empty) but ``annotations``, which clients read without
        a check; ``faas_function`` among the labels; then nearfaas's own fields."""
        name = internal
        state = self.invoker.functions[internal]
        short, namespace = self.namespaces.of(internal)
        spec = FunctionSpec.from_dict(state.spec)
        openfaas = state.spec.get("openfaas") or {}
        optional = {"envProcess": state.spec.get("fprocess") or openfaas.get("envProcess"), "envVars": spec.environment,
                    "constraints": spec.constraints, "secrets": spec.secrets,
                    "limits": spec.limits, "requests": spec.requests, "readOnlyRootFilesystem": openfaas.get("readOnlyRootFilesystem")}
        return {
            "name": short, "image": spec.image, "namespace": namespace,
            **{k: v for k, v in optional.items() if v},
            # always present, {} when empty: OpenFaaS clients index it without checking it exists
            "annotations": dict(spec.annotations or {}),
            "labels": {**spec.labels, "faas_function": short}, "invocationCount": state.invocations,
            # A fast-path lambda has no workers: the executor's one installed version serves it.
            **({"replicas": 1, "availableReplicas": 1} if on_executor(state.spec) and name in self.fastpath.ids
               else {"replicas": self._replicas(name, state), "availableReplicas": self._available(name, state)}),
            "createdAt": rfc3339(state.created),
            # nearfaas's own fields, for functions it runs from code: an image function has neither
            **({} if spec.handler_dir == IMAGE_ONLY_HANDLER else {"handler": str(spec.handler_dir), "lang": spec.lang}),
            "x-nearfaas": state.spec.get("x"), "lambdaId": self.fastpath.ids.get(name),
            # why it has no instance, when a cold start failed (a build, an import): read by `nearfaas deploy`
            **({"coldStartError": state.start_error} if state.start_error and not state.instances else {}),
            # A stream function: where to connect, and the ID to send (docs/fastpath.md, "Stream functions").
            **({"stream": {"id": self.fastpath.ids.get(name), "address": ":".join(map(str, self.fastpath.stream_addr))}}
               if (state.spec.get("x") or {}).get("target") == "stream" and self.fastpath.stream_addr else {}),
            # What `auto` predicts this function's compute with, per target: a measured stage
            # profile until the first calls, then those calls' running average (seconds).
            "estimates": {target: s for (fn, target), s in self.invoker.compute_s.items() if fn == name},
            # The call token is the admin's to see (this API needs their credentials): a benchmark
            # may call a worker directly with it.
            "instances": [{"id": i.id, "node": i.node, "url": i.url, "inflight": i.inflight, "calls": i.calls, "token": i.token,
                           "cpu_seconds": i.cpu_seconds}
                          for i in state.instances.values()],
        }

    async def list_functions(self, request):
        namespace = self.namespaces.requested(request)
        if isinstance(namespace, web.Response):
            return namespace
        return web.json_response([self._status(n) for n in sorted(self.invoker.functions) if self.namespaces.of(n)[1] == namespace])

    async def get_function(self, request):
        name = self.namespaces.resolve(request.match_info["name"], request)
        if isinstance(name, web.Response):
            return name
        if name not in self.invoker.functions:
            return error(404, f"function {request.match_info['name']!r} not found")
        return web.json_response(self._status(name))

    def _spec_from_request(self, body: dict, namespace: str | None = None) -> dict:
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
        if isinstance(body.get("envProcess"), str) and body["envProcess"]:
            fn.setdefault("fprocess", body["envProcess"])
        # With no code at all (an image-only deployment, say), parse_stack names what is missing;
        # an image-only one keeps the lang it was given, or none (the image says what runs).
        has_code = body.get("bundle") is not None or body.get("handler") is not None
        if has_code or not body.get("image"):
            fn.setdefault("lang", "python3-http")
        if has_code and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):  # else parse_stack names the bad name
            fn["handler"] = str(self._code(name, body))
        stack = parse_stack({"version": "1.0", "provider": {"name": "openfaas"}, "functions": {name: fn}}, Path("/"), whole=False)
        spec = stack.functions[name].to_dict()
        if (problem := autoscale.check_labels(spec.get("labels") or {})) is not None:
            raise SpecErrorResponse(problem)
        self._check_image_path(spec.get("image_source") or "")
        spec["namespace"] = namespace = namespace or self.namespaces.default  # NEARFAAS_NAMESPACE in its workers
        if namespace != self.namespaces.default:  # NAME.NAMESPACE inside; its chain's stages are in its namespace
            spec["name"] = self.namespaces.qualify(name, namespace)
            spec["x"]["chain"] = [self.namespaces.qualify(stage, namespace) for stage in spec["x"].get("chain") or []]
        if (missing := self.secrets.unknown_listed(namespace, spec.get("secrets") or [])) is not None:
            raise SpecErrorResponse(missing)
        name = spec["name"]
        current = self.invoker.functions.get(name)
        if current is not None and "uid" in current.spec:  # an update keeps it; a new function gets one (deploy)
            spec["uid"] = current.spec["uid"]
        options = NearfaasOptions.from_dict(spec["x"])
        if ungranted := options.ungranted_triggers():
            raise SpecErrorResponse("; ".join(ungranted))
        buckets = options.allowed_buckets()
        spec["buckets"] = sorted(buckets) if buckets is not None else ["*"]  # what its workers may read locally
        # Echoed as deployed (GET /system/function/NAME), whatever the runtime makes of them.
        spec["openfaas"] = {k: body[k] for k in ("envProcess", "readOnlyRootFilesystem")
                            if isinstance(body.get(k), str | bool) and body[k]}
        # As the shared function file gives it back: another gateway's sync compares the two.
        return json.loads(json.dumps(spec))

    def _check_image_path(self, source: str) -> None:
        """An image read from the nodes' disk must lie under gateway.handler_roots, like a handler
        folder named by path: the API runs nothing from a path it is merely told."""
        where = local_image_path(source)
        if where is None:
            return  # a registry reference
        if not any(where.is_relative_to(root) for root in self.handler_roots):
            roots = ", ".join(map(str, self.handler_roots)) or "none are configured"
            raise SpecErrorResponse(f"image: {where} is not under the cluster's gateway.handler_roots ({roots}); put the "
                                    "image there, or add its folder to handler_roots")

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
        body = await json_body(request)
        namespace = self.namespaces.requested(request, body)
        if isinstance(namespace, web.Response):
            return namespace
        if update and self.namespaces.qualify(str(body.get("service")), namespace) not in self.invoker.functions:
            # faas-cli deploy tries PUT first and creates with POST only on a 404
            return error(404, f"function {body.get('service')!r} not found in namespace {namespace!r}; deploy it with "
                         "POST /system/functions")
        try:
            spec = self._spec_from_request(body, namespace)
        except SpecError as exc:
            return error(400, f"invalid function deployment:\n{exc}", "spec")
        except SpecErrorResponse as exc:
            return error(400, f"invalid function deployment: {exc}", "spec")
        for key, label in (("scale_min", LABEL_SCALE_MIN), ("scale_max", LABEL_SCALE_MAX)):
            if int(spec.get(key) or 0) > self.max_scale:  # the deployer's wish, under the operator's ceiling
                return error(400, f"invalid function deployment: labels.{label} is {spec[key]}, over this cluster's gateway.max_scale "
                                  f"of {self.max_scale}; ask for at most {self.max_scale} (the operator sets the ceiling in "
                                  "the cluster file)", "spec")
        if (refused := self._namespace_floor_refused(spec)) is not None:
            return refused
        try:  # with what is deployed already, the chains must still end
            check_chain_cycles({n: list(s.options.chain) for n, s in self.invoker.functions.items()} | {spec["name"]: spec["x"]["chain"]})
        except SpecError as exc:
            return error(400, f"invalid function deployment, given the functions already deployed:\n{exc}", "spec")
        exists = spec["name"] in self.invoker.functions
        if update and not exists:
            return error(404, f"function {spec['name']!r} not found; deploy it with POST /system/functions")
        was_fast = exists and on_executor(self.invoker.functions[spec["name"]].spec)
        try:
            if "uid" not in spec:
                spec["uid"] = await self.uids.next([s.spec.get("uid", 0) for s in self.invoker.functions.values()])
        except TimeoutError as exc:
            return locked_out(f"function {spec['name']!r} was not deployed", exc)
        try:
            if was_fast and not on_executor(spec):
                await self.fastpath.remove(spec["name"], fastpath=True)
            await self.fastpath.deploy(spec, self._spec_of)
        except CallError as exc:
            return error(exc.status, str(exc), exc.layer)
        # Recorded for every gateway first, then deployed here; a sync meanwhile waits (it would
        # find the file without it). The next sync reads what other gateways changed meanwhile.
        async with self._changing:
            try:
                await self.store.put(spec)
            except TimeoutError as exc:
                return locked_out(f"function {spec['name']!r} was not deployed", exc)
            self.invoker.deploy(spec)
        return web.Response(status=202 if not update else 200, text=f"deployed {spec['name']}\n")

    def _namespace_floor_refused(self, spec: dict) -> web.Response | None:
        """A 400 when a tenant namespace's functions' scale.min floors together (this one's in
        place of its previous version's) would exceed gateway.max_instances_per_namespace (its
        share of one node: floors are kept warm wherever they are placed)."""
        pool = getattr(self.invoker, "pool", None)
        cap = getattr(pool, "max_per_namespace", 0)
        namespace = namespace_of(spec["name"])
        if not cap or not namespace:
            return None
        floors = sum(int(st.spec.get("scale_min") or 0) for name, st in self.invoker.functions.items()
                     if namespace_of(name) == namespace and name != spec["name"]) + int(spec.get("scale_min") or 0)
        if floors <= cap:
            return None
        return error(400, f"invalid function deployment: the scale.min floors of namespace {namespace or '(default)'!r} would add "
                          f"up to {floors} instances, over this cluster's gateway.max_instances_per_namespace of {cap}; lower "
                          f"{LABEL_SCALE_MIN} here or on the namespace's other functions (the operator sets the share in the "
                          "cluster file)", "spec")

    async def update(self, request):
        return await self.deploy(request, update=True)

    async def delete(self, request):
        body = await json_body(request)
        namespace = self.namespaces.requested(request, body)
        if isinstance(namespace, web.Response):
            return namespace
        name = body.get("functionName")
        if not isinstance(name, str):
            return error(400, "functionName: required, the name of the function to delete")
        name = self.namespaces.qualify(name, namespace)
        state = self.invoker.functions.get(name)
        if state is None:
            return error(404, f"function {name!r} not found")
        try:  # the executor first: a removal it did not confirm must not look done (red team round 7)
            await self.fastpath.remove(name, fastpath=on_executor(state.spec))
        except CallError as exc:
            print(json.dumps({"event": "fastpath-remove-failed", "function": name, "error": str(exc)}), flush=True)
            return error(503, f"function {name!r} is still deployed: the fast-path executor did not confirm its removal "
                              f"({exc}); retry the removal", "fastpath")
        async with self._changing:  # a sync meanwhile must not deploy it again from the file
            try:
                await self.store.remove(name)
            except TimeoutError as exc:
                return locked_out(f"function {name!r} is still deployed", exc, "retry the removal")
            if not await self.invoker.remove(name):
                return error(404, f"function {name!r} not found")
        return web.Response(status=202, text=f"removed {name}\n")

    async def scale(self, request):
        body = await json_body(request)
        name = self.namespaces.resolve(request.match_info["name"], request, body)
        if isinstance(name, web.Response):
            return name
        replicas = body.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            return error(400, "replicas: required, a non-negative integer")
        state = self.invoker.functions.get(name)
        if state is None:
            return error(404, f"function {name!r} not found")
        limit = int(state.spec.get("scale_max", 5))
        if replicas > limit:
            return error(400, f"replicas: {replicas} exceeds com.openfaas.scale.max={limit} of {name!r}")
        mine = replicas
        if self.shared_scale is not None:  # many gateways: the count is the cluster's, shared out (gateway/shared_scale.py)
            try:
                mine = await self.shared_scale.record(name, replicas)
            except TimeoutError as exc:
                return locked_out(f"{name!r} was not scaled", exc)
        state.scaled_by_hand = time.monotonic()  # the autoscaler judges the load from now on
        asyncio.get_running_loop().create_task(self.invoker.scale(name, mine))
        shared = f" ({mine} on this gateway, the rest on the others)" if self.shared_scale is not None else ""
        return web.Response(status=202, text=f"scaling {name} to {replicas}{shared}\n")

    def follow_scale(self) -> None:
        """Apply this gateway's share of counts other gateways set by hand (gateway/shared_scale.py)."""
        if self.shared_scale is None:
            return
        deployed = {name: state.created for name, state in self.invoker.functions.items()}
        for name, share in self.shared_scale.changes(deployed):
            self.invoker.functions[name].scaled_by_hand = time.monotonic()
            asyncio.get_running_loop().create_task(self.invoker.scale(name, share))
