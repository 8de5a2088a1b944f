"""Invocation: from a request for a function to an answer from a warm worker.

The gateway proxies straight to a worker (as OpenFaaS's gateway proxies to a watchdog), so a
warm call costs one hop. The node agents only start and stop workers. The gateway tracks each
instance's in-flight calls, deduplicates concurrent cold starts, and keeps a backstop clock in
case a worker cannot keep its own.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property

from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.gateway.nodes import HEALTH_INTERVAL_S, NodeDirectory, NodeError
from nearfaas.placement.replicas import ReplicaCatalog
from nearfaas.gateway.worker_client import WorkerClient, WorkerFailed, WorkerUnreachable
from nearfaas.link.profiles import PROFILES, LinkProfile
from nearfaas.placement.policy import POLICIES, ClusterView, Estimates, Invocation, NoNodeAvailable, make_policy
from nearfaas.placement.view import build_view
from nearfaas.spec.options import NearfaasOptions
from nearfaas.telemetry.headers import format_timing, parse_link
from nearfaas.telemetry.metrics import GatewayMetrics

METERED_PARTS = ("stack", "data", "compute", "cold_start")  # observed per call in nearfaas_call_seconds
BACKSTOP_MARGIN_S = 1.0
SCALE_RETRY_S, SCALE_RETRY_MAX_S = 2.0, 60.0  # after a failed scale-up, the next try (doubling)  # the gateway waits this much longer than the worker's own exec_timeout
_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer"}


@dataclass
class Instance:
    id: str
    node: str
    host: str
    port: int
    inflight: int = 0
    calls: int = 0
    draining: bool = False  # stop once its in-flight calls finish (update, scale-down)
    token: str = ""         # the worker answers only calls that carry it (runtime/worker.py)
    born: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass
class FunctionState:
    spec: dict
    created: float = field(default_factory=time.time)
    instances: dict[str, Instance] = field(default_factory=dict)
    starting: dict[str, asyncio.Future] = field(default_factory=dict)
    invocations: int = 0
    desired: int = 1
    meters: FunctionMeters | None = None
    scaling: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0  # calls queued for a free instance
    retry_scale_at: float = 0.0  # monotonic time to retry a scale-up that failed (0: none pending)
    scale_failures: int = 0  # failed scale-ups in a row
    freed: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        """Wake every queued call: a slot freed or an instance arrived (each re-checks)."""
        event, self.freed = self.freed, asyncio.Event()
        event.set()

    @property
    def name(self) -> str:
        return self.spec["name"]

    @cached_property
    def options(self) -> NearfaasOptions:
        """The parsed x-nearfaas block, once per deployment rather than once per call."""
        return NearfaasOptions.from_dict(self.spec.get("x") or {})

    def bind_meters(self, metrics: GatewayMetrics) -> FunctionMeters:
        self.meters = FunctionMeters(metrics, self.name)
        return self.meters


class FunctionMeters:
    """A function's metric children, looked up once: label lookups cost on every warm call."""

    def __init__(self, metrics: GatewayMetrics, name: str):
        self.inflight = metrics.inflight.labels(name)
        self.seconds = metrics.seconds.labels(name)
        self.parts = {part: metrics.timing.labels(name, part) for part in METERED_PARTS}
        self._counter = metrics.invocations
        self._name = name
        self._by_status: dict[int, object] = {}

    def count(self, status: int):
        child = self._by_status.get(status)
        if child is None:
            child = self._by_status[status] = self._counter.labels(self._name, str(status))
        return child


@dataclass
class CallResult:
    status: int
    headers: dict
    body: bytes
    report: dict = field(default_factory=dict)  # where it ran and the measured breakdown (see _report)


@dataclass(frozen=True)
class StageIO:
    """What a chain tells the invoker about one of its stages."""

    output: tuple[str, str]  # (bucket, key) assigned to the stage's output object
    output_local: bool  # an intermediate: written onto the node that makes it, not replicated
    app: str  # the chain's first function: its writes never trigger the app again
    held_accelerator: str | None = None  # the chain's own hold on a node's accelerator (not "busy" for this stage)
    inputs: tuple | None = None  # the predecessors' outputs, whatever the function's x-nearfaas.inputs say


class NodeLost(Exception):
    """The node chosen for a call stopped answering; ``started`` says whether the call reached it."""

    def __init__(self, node: str, detail: str, started: bool):
        super().__init__(detail)
        self.node, self.detail, self.started = node, detail, started


class CallError(Exception):
    """A call that failed before or around the function: status, message and the layer to blame."""

    def __init__(self, status: int, message: str, layer: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.layer, self.headers = status, layer, headers or {}


def find_input_refs(options: NearfaasOptions, body: bytes) -> list[tuple[str, str]]:
    """Object references named by the function's ``x-nearfaas.inputs`` paths in a JSON body."""
    if not body or body[:1] not in (b"{", b"["):
        return []
    try:
        document = json.loads(body)
    except ValueError:
        return []
    return [(ref["bucket"], ref["key"]) for ref in options.object_refs(document)]


class Invoker:
    def __init__(self, nodes: NodeDirectory, policy, metrics: GatewayMetrics, replication: int, dscs_replica: bool,
                 link: LinkProfile = PROFILES["local"], profiled_compute_s=lambda spec: None):
        self.nodes = nodes
        self.policy = policy
        self.policies = {name: make_policy(name) for name in POLICIES} | {policy.name: policy}
        self.link = link
        self.accel_inflight: dict[str, int] = {}  # node -> dscs-target calls running there
        self.accel_available: dict[str, bool] = {}  # node -> False once an operator marks it down
        # Measured per (function, target): compute seconds and bytes read, smoothed (EWMA), for auto.
        self.compute_s: dict[tuple[str, str], float] = {}
        self.input_bytes: dict[str, float] = {}
        # Before a function's first call, auto predicts with its measured stage profile
        # (benchmarks/apps.py, CPU seconds at batch 1), when one exists; calls refine it.
        self.profiled_compute_s = profiled_compute_s
        self.metrics = metrics
        self.replication = replication
        self.dscs_replica = dscs_replica
        self.functions: dict[str, FunctionState] = {}
        # Where objects are (placement/replicas.py, the simulator's rule too); ``located`` is its
        # catalog of chain intermediates -> the node holding their one copy.
        self.catalog = ReplicaCatalog(nodes.storage_ring(), replication, dscs_replica)
        self.located = self.catalog.located
        self.workers = WorkerClient()
        nodes.on_poll.append(self._reconcile_node)

    # -- placement -------------------------------------------------------------------------------
    def _view(self, state: FunctionState, refs, held: str | None = None) -> ClusterView:
        # The rule itself is placement.view.build_view, shared with the twin's simulator.
        return build_view(self.nodes.nodes.values(), ((i.node, i.inflight) for i in state.instances.values()), self.accel_inflight,
                          self.accel_available, refs, self.catalog.replicas, Estimates(self.compute_s, self.link), held)

    def place(self, state: FunctionState, refs, policy=None, held: str | None = None):
        invocation = Invocation(state.name, state.options.accelerator, state.options.placement, tuple(refs),
                                int(self.input_bytes.get(state.name, 0)))
        try:
            decision = (policy or self.policy).place(invocation, self._view(state, refs, held))
        except NoNodeAvailable as exc:
            raise CallError(503, f"no node can run {state.name!r}: {exc}", "placement", {"Retry-After": "1"}) from None
        self.metrics.placements.labels(state.name, decision.target, decision.reason).inc()
        return decision

    # -- instances -------------------------------------------------------------------------------
    async def acquire(self, state: FunctionState, node: str) -> tuple[Instance, float | None]:
        """A warm instance on ``node`` with room for one more call; cold-starts one if needed.

        Returns the instance and the cold-start seconds (None when it was warm)."""
        limit = int(state.spec.get("max_inflight", 0))
        while True:
            local = [i for i in state.instances.values() if i.node == node]
            free = [i for i in local if not limit or i.inflight < limit]
            if free:
                return min(free, key=lambda i: i.inflight), None
            total = len(state.instances) + sum(1 for f in state.starting.values() if not f.done())
            # A node with no instance may always get one: a data-local placement then adds at most
            # one instance per node holding the data, beyond com.openfaas.scale.max.
            can_grow = total < int(state.spec.get("scale_max", 5)) or not local
            if node in state.starting:
                # Share the starter's outcome: its error is ours too (no retry storm behind a
                # cold start that keeps failing).
                await asyncio.shield(state.starting[node])
                continue
            if can_grow:
                instance, seconds = await self._cold_start(state, node)
                if not limit or instance.inflight < limit:
                    return instance, seconds
                continue
            if not limit:
                return min(local, key=lambda i: i.inflight), None
            await self._wait_for_slot(state, limit, len(local))

    async def _wait_for_slot(self, state: FunctionState, limit: int, instances: int) -> None:
        """Every instance is full and the function is at its scale limit: wait in a bounded
        queue (x-nearfaas.queue_depth) for a call to finish, rather than fail at once."""
        depth = state.options.queue_depth
        if state.waiting >= depth:
            raise CallError(429, f"function {state.name!r} is at max_inflight={limit} on all {instances} instance(s), at its "
                                 f"scale limit, with {state.waiting} call(s) queued (queue_depth={depth}); retry later",
                            "gateway", {"Retry-After": "1"})
        state.waiting += 1
        try:
            async with asyncio.timeout(float(state.spec.get("exec_timeout", 10.0))):
                await state.freed.wait()
        except TimeoutError:
            raise CallError(429, f"function {state.name!r}: no instance became free within exec_timeout while queued; retry later",
                            "gateway", {"Retry-After": "1"}) from None
        finally:
            state.waiting -= 1

    async def _cold_start(self, state: FunctionState, node: str) -> tuple[Instance, float]:
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.exception())  # an error nobody awaited is not "never retrieved"
        state.starting[node] = future
        try:
            timeout = 60.0 + 600.0  # handler import + a first-time requirements install
            try:
                info = await self.nodes.start_worker(node, state.spec, timeout)
            except NodeError as exc:
                raise CallError(exc.status if exc.status != 500 else 502, str(exc), exc.layer) from None
            instance = Instance(info["id"], node, info.get("host", "127.0.0.1"), int(info["port"]), token=info.get("token", ""))
            if self.functions.get(state.name) is not state:  # removed or replaced while it started
                await self.nodes.stop_worker(node, instance.id)
                raise CallError(404, f"function {state.name!r} was updated or removed while it started; retry", "gateway",
                                {"Retry-After": "1"})
            state.instances[instance.id] = instance
            state.notify()
            seconds = float(info["cold_start_seconds"])
            self.metrics.cold_starts.labels(state.name, node).inc()
            self.metrics.cold_start_seconds.labels(state.name).observe(seconds)
            self.metrics.service_count.labels(state.name).set(len(state.instances))
            future.set_result(instance)
            return instance, seconds
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc if isinstance(exc, CallError) else CallError(502, f"cold start failed: {exc!r}", "gateway"))
            raise
        finally:
            if state.starting.get(node) is future:
                del state.starting[node]

    def drop_instance(self, state: FunctionState, instance: Instance, stop: bool) -> None:
        if state.instances.pop(instance.id, None) is None:
            return
        self.metrics.service_count.labels(state.name).set(len(state.instances))
        if instance.inflight and stop:
            instance.draining = True  # the last call to finish stops it (see _invoke)
            return
        self._retire(instance, stop)

    def _retire(self, instance: Instance, stop: bool) -> None:
        self.workers.forget(instance.host, instance.port)
        if stop:
            asyncio.get_running_loop().create_task(self.nodes.stop_worker(instance.node, instance.id))

    def _reconcile_node(self, node) -> None:
        """Forget instances that their node no longer runs (they exited or were killed).

        Only a node that answered says which workers run: an unhealthy one is out of placement
        anyway, and its instances are dropped when a call to them fails or when it answers again."""
        if not node.healthy:
            return
        alive = {w["id"] for w in node.status.get("workers", [])}
        settled = time.monotonic() - 2 * HEALTH_INTERVAL_S  # a poll sent before a worker registered says nothing of it
        for state in self.functions.values():
            for inst in [i for i in state.instances.values()
                         if i.node == node.name and i.id not in alive and i.born < settled]:
                self.drop_instance(state, inst, stop=False)

    # -- calls -----------------------------------------------------------------------------------
    async def invoke(self, name: str, method: str, path: str, query: str, headers, body: bytes, call_id: str | None = None,
                     stage: StageIO | None = None) -> CallResult:
        call_id = call_id or f"internal-{uuid.uuid4().hex}"
        started = time.perf_counter()
        state = self.functions.get(name)
        if state is None:
            raise CallError(404, f"function {name!r} not found; deploy it first (nearfaas deploy -f stack.yml)", "gateway")
        if (state.spec.get("x") or {}).get("target") == "fastpath":
            raise CallError(400, f"function {name!r} is a fast-path lambda: call it with POST /function/{name} or over UDP/TCP by its "
                                 "lambda ID (docs/fastpath.md); it cannot be a chain stage, a trigger or an async call", "fastpath")
        state.invocations += 1
        meters = state.meters or state.bind_meters(self.metrics)
        meters.inflight.inc()
        try:
            result = await self._invoke(state, method, path, query, headers, body, call_id, started, stage)
        except CallError as exc:
            meters.count(exc.status).inc()
            raise
        finally:
            meters.inflight.dec()
        meters.count(result.status).inc()
        meters.seconds.observe(time.perf_counter() - started)
        return result

    def policy_named(self, name: str | None):
        if not name:
            return None
        if name not in self.policies:
            raise CallError(400, f"X-Nearfaas-Policy: unknown placement policy {name!r}; choose one of: {', '.join(self.policies)}", "placement")
        return self.policies[name]

    async def _invoke(self, state, method, path, query, headers, body, call_id, started, stage=None) -> CallResult:
        refs = list(stage.inputs) if stage is not None and stage.inputs is not None else find_input_refs(state.options, body)
        # Placing and marking the accelerator busy happen with no await in between: decisions
        # are taken one at a time in arrival order (first come, first served).
        policy = self.policy_named(headers.get("X-Nearfaas-Policy"))
        idempotent = state.options.idempotent
        for attempt in (1, 2):
            decision = self.place(state, refs, policy, stage and stage.held_accelerator)
            offload = decision.target == "dscs"
            if offload:
                self.accel_inflight[decision.node] = self.accel_inflight.get(decision.node, 0) + 1
            try:
                return await self._call(state, decision, refs, method, path, query, headers, body, call_id, started, stage)
            except NodeLost as lost:
                # The node is now out of placement: place again, once, if that cannot run the
                # function twice (it never started) or the function says running twice is fine.
                if attempt == 2 or (lost.started and not idempotent):
                    hint = "" if idempotent or not lost.started else (
                        "; not retried because the function is not declared idempotent (x-nearfaas.idempotent: true)")
                    raise CallError(502, f"node {lost.node} was lost {'during' if lost.started else 'before'} the call of "
                                         f"{state.name!r}: {lost.detail}{hint}", "node") from None
                self.metrics.placements.labels(state.name, "retry", "node-lost").inc()
            finally:
                if offload:
                    self.accel_inflight[decision.node] -= 1
        raise AssertionError("unreachable")

    def _learn(self, state: FunctionState, target: str, exec_s: float, data_s: float, bytes_moved: int) -> None:
        """Fold one call's measurements into the estimates auto predicts with."""
        alpha = 0.3
        key = (state.name, target)
        compute = max(0.0, exec_s - data_s)
        self.compute_s[key] = compute if key not in self.compute_s else (1 - alpha) * self.compute_s[key] + alpha * compute
        old = self.input_bytes.get(state.name)
        self.input_bytes[state.name] = bytes_moved if old is None else (1 - alpha) * old + alpha * bytes_moved

    async def _call(self, state, decision, refs, method, path, query, headers, body, call_id, started, stage=None) -> CallResult:
        forward = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS and not k.lower().startswith("x-nearfaas-")}
        forward.update({"X-Nearfaas-Call-Id": call_id, "X-Nearfaas-Method": method, "X-Nearfaas-Path": path, "X-Nearfaas-Query": query})
        if refs:
            forward["X-Nearfaas-Input"] = json.dumps({"bucket": refs[0][0], "key": refs[0][1]})
        if stage is not None:
            forward["X-Nearfaas-Output"] = json.dumps({"bucket": stage.output[0], "key": stage.output[1]})
            forward["X-Nearfaas-Output-Mode"] = "local" if stage.output_local else "cluster"
            forward["X-Nearfaas-App"] = stage.app
        exec_timeout = float(state.spec.get("exec_timeout", 10.0))
        for attempt in (1, 2):
            try:
                instance, cold_seconds = await self.acquire(state, decision.node)
            except CallError as exc:
                if exc.status == 503 and exc.layer == "node":  # the node did not answer the cold start
                    raise NodeLost(decision.node, str(exc), started=False) from None
                raise
            instance.inflight += 1
            instance.calls += 1
            try:
                forward[WORKER_TOKEN_HEADER] = instance.token
                status, reply_headers, payload = await self.workers.request(
                    instance.host, instance.port, forward, body, exec_timeout + BACKSTOP_MARGIN_S)
                break
            except WorkerUnreachable:
                # Never reached the worker (it exited a moment ago): safe to retry on another one.
                self.drop_instance(state, instance, stop=False)
                if not await self.nodes.probe(decision.node):
                    raise NodeLost(decision.node, "its worker refused the connection and the node does not answer", started=False) from None
                if attempt == 2:
                    raise CallError(502, f"could not reach a worker of {state.name!r} on {decision.node}", "worker") from None
            except TimeoutError:
                self.drop_instance(state, instance, stop=True)
                raise CallError(504, f"gateway: {state.name!r} gave no answer within exec_timeout={exec_timeout:g}s "
                                     f"+ {BACKSTOP_MARGIN_S:g}s; the worker on {decision.node} was stopped", "gateway") from None
            except WorkerFailed as exc:
                self.drop_instance(state, instance, stop=True)
                if not await self.nodes.probe(decision.node):
                    raise NodeLost(decision.node, f"the connection broke mid-call ({exc}) and the node does not answer", started=True) from None
                raise CallError(502, f"the worker of {state.name!r} on {decision.node} failed during the call: {exc}", "worker") from None
            finally:
                instance.inflight -= 1
                instance.last_used = time.monotonic()
                state.notify()
                if instance.draining and not instance.inflight:
                    self._retire(instance, stop=True)
        if reply_headers.get("X-Nearfaas-Error") == "exec-timeout":
            self.drop_instance(state, instance, stop=False)  # it is exiting; the node reaps it
        report = self._report(state, decision, reply_headers, time.perf_counter() - started, cold_seconds)
        if status < 400:
            moved = int(reply_headers.get("X-Nearfaas-Bytes-Local", 0) or 0) + int(reply_headers.get("X-Nearfaas-Bytes-Remote", 0) or 0)
            self._learn(state, decision.target, report["exec_s"], report["timing"]["data"], moved)
        if stage is not None and report["output"] == "local":
            self.located[stage.output] = [decision.node]
        timing = report["timing"]
        out = {k: v for k, v in reply_headers.items() if k.lower() not in _HOP_HEADERS}
        out.update({
            "X-Call-Id": call_id,
            "X-Duration-Seconds": f"{timing['total']:.6f}",
            "X-Nearfaas-Start": report["start"],
            "X-Nearfaas-Node": decision.node,
            "X-Nearfaas-Placement": f"{decision.target};{decision.reason}",
            "X-Nearfaas-Policy": headers.get("X-Nearfaas-Policy") or self.policy.name,  # validated by _invoke
            "X-Nearfaas-Timing": format_timing(timing),
        })
        if decision.predicted_s is not None:  # the prediction, next to the measured outcome above
            out["X-Nearfaas-Predicted"] = f"modelled;total={decision.predicted_s:.6f};link={self.link.name}"
        if "modelled" in report:
            out["X-Nearfaas-Modelled"] = "modelled;accelerator=unset;model=none"
        return CallResult(status, out, payload, report)

    def _report(self, state: FunctionState, decision, reply_headers, total: float, cold_seconds: float | None) -> dict:
        """One call's placement and measured breakdown, counted in metrics; the chain sums these."""
        exec_s = float(reply_headers.get("X-Nearfaas-Exec-Seconds", 0) or 0)
        data_s = float(reply_headers.get("X-Nearfaas-Data-Seconds", 0) or 0)
        cold = cold_seconds or 0.0
        # Measured on this machine: stack = everything that is neither the handler nor a cold start.
        timing = {"total": total, "cold_start": cold, "stack": max(0.0, total - exec_s - cold), "data": data_s,
                  "compute": max(0.0, exec_s - data_s)}
        parts = state.meters.parts if state.meters else {}
        for part, child in parts.items():
            child.observe(timing[part])
        link = parse_link(reply_headers.get("X-Nearfaas-Link", ""))
        for direction in ("read", "write"):
            if link[direction]:
                self.metrics.link_bytes.labels(link["profile"], direction, state.name).inc(link[direction])
        report = {"function": state.name, "node": decision.node, "target": decision.target, "reason": decision.reason,
                  "start": "cold" if cold_seconds is not None else "warm", "exec_s": exec_s, "timing": timing, "link": link,
                  "output": reply_headers.get("X-Nearfaas-Output-Written", "none")}
        if decision.target == "dscs":
            # Room for the hardware twin's modelled accelerator time; nothing here pretends to be it.
            report["modelled"] = {"accelerator_s": None, "model": None}
        return report

    # -- deployment ------------------------------------------------------------------------------
    def deploy(self, spec: dict) -> FunctionState:
        """Register or update a function; running instances of an old version are replaced."""
        old = self.functions.get(spec["name"])
        state = FunctionState(spec, desired=max(int(spec.get("scale_min", 1)), 0 if spec.get("scale_zero") else 1))
        if old is not None:
            state.created, state.invocations = old.created, old.invocations
            for inst in list(old.instances.values()):
                self.drop_instance(old, inst, stop=True)  # busy ones finish their calls first
        self.functions[spec["name"]] = state
        for key in [k for k in self.compute_s if k[0] == state.name]:
            del self.compute_s[key]  # a new version (another model, say) starts over
        profiled = self.profiled_compute_s(spec)
        if profiled is not None:
            self.compute_s[(state.name, "cpu")] = profiled
        self.metrics.service_count.labels(state.name).set(0)
        if (spec.get("x") or {}).get("target") == "fastpath":
            state.desired = 0  # the fast-path executor runs it: no workers (gateway/fastpath.py)
            return state
        asyncio.get_running_loop().create_task(self.scale(state.name, state.desired))
        return state

    async def remove(self, name: str) -> bool:
        state = self.functions.pop(name, None)
        if state is None:
            return False
        for inst in list(state.instances.values()):
            state.instances.pop(inst.id, None)
            self.workers.forget(inst.host, inst.port)
        await self.nodes.stop_function(name)
        try:
            self.metrics.service_count.remove(name)
        except KeyError:
            pass
        return True

    async def scale(self, name: str, replicas: int) -> None:
        """Start or stop instances until ``replicas`` are warm (placed as a reference-less call)."""
        state = self.functions.get(name)
        if state is None:
            return
        state.desired = replicas
        async with state.scaling:  # one reconciliation at a time per function
            try:
                while len(state.instances) < state.desired and self.functions.get(name) is state:
                    node = self.place(state, []).node
                    if node in state.starting:
                        await asyncio.shield(state.starting[node])  # someone is already starting one there
                    else:
                        await self._cold_start(state, node)
            except CallError:
                # Surfaced at the next call, with the node's message; the reaper tries again
                # later (a cold start can fail on a node that is briefly overloaded), backing
                # off so that a handler that can never load does not spawn in a loop.
                state.scale_failures += 1
                state.retry_scale_at = time.monotonic() + min(SCALE_RETRY_MAX_S, SCALE_RETRY_S * 2 ** (state.scale_failures - 1))
                return
            state.scale_failures = 0
            while len(state.instances) > state.desired:
                victim = min(state.instances.values(), key=lambda i: (i.inflight, i.calls))
                self.drop_instance(state, victim, stop=True)

    # -- idle instances --------------------------------------------------------------------------
    def reap_idle(self, now: float | None = None) -> None:
        """Stop instances idle past x-nearfaas.keep_alive above the function's floor, and scale a
        com.openfaas.scale.zero function to zero once idle for its zero-duration."""
        now = time.monotonic() if now is None else now
        for state in list(self.functions.values()):
            scale_zero = bool(state.spec.get("scale_zero"))
            idle = sorted((i for i in state.instances.values() if not i.inflight), key=lambda i: i.last_used)
            if scale_zero and state.instances and len(idle) == len(state.instances) and \
                    all(now - i.last_used >= float(state.spec.get("scale_zero_after", 300.0)) for i in idle):
                state.desired = 0
                for inst in idle:
                    self.drop_instance(state, inst, stop=True)
                continue
            floor = max(state.desired, 1) if scale_zero else state.desired
            surplus = len(state.instances) - floor
            for inst in idle:
                if surplus <= 0:
                    break
                if now - inst.last_used >= state.options.keep_alive:
                    self.drop_instance(state, inst, stop=True)
                    surplus -= 1

    async def reap_idle_forever(self, every_s: float = 0.5) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.reap_idle()
            self._retry_failed_scaling()

    def _retry_failed_scaling(self) -> None:
        """Functions below their desired replicas after a failed scale-up get another try."""
        now = time.monotonic()
        for state in list(self.functions.values()):
            if state.retry_scale_at and now >= state.retry_scale_at and not state.scaling.locked() \
                    and len(state.instances) < state.desired:
                state.retry_scale_at = 0.0
                asyncio.get_running_loop().create_task(self.scale(state.name, state.desired))
