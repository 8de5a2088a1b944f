"""Call routing: from a request for a function to an answer from a warm worker.

The gateway proxies straight to a worker (as OpenFaaS's gateway proxies to a watchdog), so a
warm call costs one hop. For each call the router finds its input objects, places it (the
policy over a view of the cluster, placement/), gets a warm instance on the chosen node from
the instance pool (gateway/instances.py, which cold-starts one if needed), forwards the call
with a backstop clock in case the worker cannot keep its own, and learns the measured compute
and bytes for the next placement. A node lost before the call reached it is placed again once.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from multidict import CIMultiDict

from nearfaas.auth.function_keys import RUN_KEY_HEADER
from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.gateway.errors import MAY_START, CallError, NodeLost
from nearfaas.gateway.inputs import InputResolver
from nearfaas.gateway.instances import FunctionState, InstancePool
from nearfaas.gateway.nodes import NodeDirectory
from nearfaas.gateway.worker_client import ResponseTooLarge, WorkerFailed, WorkerUnreachable
from nearfaas.link.profiles import PROFILES, LinkProfile
from nearfaas.placement.policy import POLICIES, ClusterView, Estimates, Invocation, NoNodeAvailable, make_policy
from nearfaas.placement.replicas import RENDEZVOUS, ReplicaCatalog, Scheme
from nearfaas.placement.view import build_view
from nearfaas.spec.options import NearfaasOptions
from nearfaas.telemetry.headers import format_timing, parse_link
from nearfaas.telemetry.metrics import GatewayMetrics

__all__ = ["CallError", "CallResult", "Invoker", "StageIO", "find_inputs"]

BACKSTOP_MARGIN_S = 1.0  # the gateway waits this much longer than the worker's own exec_timeout
_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer"}


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
    # The chain call's own S3 key (auth/function_keys.py): the only key that reaches its intermediates.
    run_key: dict | None = field(default=None, repr=False)


def find_inputs(options: NearfaasOptions, body: bytes) -> list[dict]:
    """The ``{bucket, key}`` and ``{bucket, prefix}`` references named by the function's
    ``x-nearfaas.inputs`` paths in a JSON body."""
    if not body or body[:1] not in (b"{", b"["):
        return []
    try:
        document = json.loads(body)
    except ValueError:
        return []
    return options.object_refs(document)



class Invoker:
    def __init__(self, nodes: NodeDirectory, policy, metrics: GatewayMetrics, replication: int, dscs_replica: bool,
                 link: LinkProfile = PROFILES["local"], profiled_compute_s=lambda spec: None, scheme: Scheme = RENDEZVOUS):
        self.nodes = nodes
        self.policy = policy
        self.policies = {name: make_policy(name) for name in POLICIES} | {policy.name: policy}
        self.link = link
        self.accel_inflight: dict[str, int] = {}  # node -> dscs-target calls running there
        self.accel_available: dict[str, bool] = {}  # node -> False once an operator marks it down
        self.node_inflight: dict[str, int] = {}  # node -> calls running there, every function's
        # Measured per (function, target): compute seconds and bytes read, smoothed (EWMA), for auto.
        self.compute_s: dict[tuple[str, str], float] = {}
        self.input_bytes: dict[str, float] = {}
        # Before a function's first call, auto predicts with its measured stage profile
        # (benchmarks/apps.py, CPU seconds at batch 1), when one exists; calls refine it.
        self.profiled_compute_s = profiled_compute_s
        self.metrics = metrics
        self.replication = replication
        self.dscs_replica = dscs_replica
        self.pool = InstancePool(nodes, metrics, self.place)
        # Where objects are (placement/replicas.py, the simulator's rule too); ``located`` is its
        # catalog of chain intermediates -> the node holding their one copy.
        self.catalog = ReplicaCatalog(nodes.storage_ring(), replication, dscs_replica, scheme=scheme)
        self.located = self.catalog.located
        # What a call will read: named objects, prefixes, or what the function's calls read before.
        self.inputs = InputResolver(self.catalog.replicas)

    @property
    def functions(self) -> dict[str, FunctionState]:
        return self.pool.functions

    # -- placement -------------------------------------------------------------------------------
    def _view(self, state: FunctionState, refs, held: str | None = None, ordered: dict | None = None) -> ClusterView:
        # The rule itself is placement.view.build_view, shared with the twin's simulator.
        replicas = self.catalog.replicas if not ordered else (lambda ref: ordered.get(tuple(ref)) or self.catalog.replicas(ref))
        return build_view(self.nodes.nodes.values(), ((i.node, i.inflight) for i in state.instances.values()), self.accel_inflight,
                          self.accel_available, refs, replicas, Estimates(self.compute_s, self.link), held,
                          self.node_inflight)

    def place(self, state: FunctionState, refs, policy=None, held: str | None = None, ordered: dict | None = None):
        invocation = Invocation(state.name, state.options.accelerator, state.options.placement, tuple(refs),
                                int(self.input_bytes.get(state.name, 0)))
        try:
            decision = (policy or self.policy).place(invocation, self._view(state, refs, held, ordered))
        except NoNodeAvailable as exc:
            raise CallError(503, f"no node can run {state.name!r}: {exc}", "placement", {"Retry-After": "1"}) from None
        self.metrics.placements.labels(state.name, decision.target, decision.reason).inc()
        return decision

    # -- calls -----------------------------------------------------------------------------------
    async def invoke(self, name: str, method: str, path: str, query: str, headers, body: bytes, call_id: str | None = None,
                     stage: StageIO | None = None) -> CallResult:
        call_id = call_id or f"internal-{uuid.uuid4().hex}"
        started = time.perf_counter()
        state = self.functions.get(name)
        if state is None:
            raise CallError(404, f"function {name!r} not found; deploy it first (nearfaas deploy -f stack.yml)", "gateway")
        if (state.spec.get("x") or {}).get("target") in ("fastpath", "stream"):
            kind = "stream function" if state.spec["x"]["target"] == "stream" else "fast-path lambda"
            raise CallError(400, f"function {name!r} is a {kind}: call it with POST /function/{name} or directly on the executor by "
                                 "its ID (docs/fastpath.md); it cannot be a worker chain's stage, a trigger or an async call", "fastpath")
        state.invocations += 1
        meters = state.meters or state.bind_meters(self.metrics)
        meters.inflight.inc()
        try:
            result = await self._invoke(state, method, path, query, headers, body, call_id, started, stage)
        except CallError as exc:
            meters.count(exc.status).inc()
            state.failed += exc.status >= 500
            raise
        finally:
            meters.inflight.dec()
        meters.count(result.status).inc()
        state.failed += result.status >= 500
        meters.seconds.observe(time.perf_counter() - started)
        return result

    def policy_named(self, name: str | None):
        if not name:
            return None
        if name not in self.policies:
            raise CallError(400, f"X-Nearfaas-Policy: unknown placement policy {name!r}; choose one of: {', '.join(self.policies)}", "placement")
        return self.policies[name]

    async def _invoke(self, state, method, path, query, headers, body, call_id, started, stage=None) -> CallResult:
        if stage is not None and stage.inputs is not None:
            refs, ordered, source = list(stage.inputs), {}, "named"
        else:
            refs, ordered, source = await self.inputs.resolve(state.name, find_inputs(state.options, body))
        # Placing and marking the accelerator busy happen with no await in between: decisions
        # are taken one at a time in arrival order (first come, first served).
        policy = self.policy_named(headers.get("X-Nearfaas-Policy"))
        idempotent = state.options.idempotent
        for attempt in (1, 2):
            decision = self.place(state, refs, policy, stage and stage.held_accelerator, ordered)
            offload = decision.target == "dscs"
            if offload:
                self.accel_inflight[decision.node] = self.accel_inflight.get(decision.node, 0) + 1
            try:
                return await self._call(state, decision, refs, method, path, query, headers, body, call_id, started, stage,
                                        source)
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

    async def _call(self, state, decision, refs, method, path, query, headers, body, call_id, started, stage=None,
                    source: str = "named") -> CallResult:
        forward = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS and not k.lower().startswith("x-nearfaas-")}
        forward.update({"X-Nearfaas-Call-Id": call_id, "X-Nearfaas-Method": method, "X-Nearfaas-Path": path, "X-Nearfaas-Query": query})
        if refs and source == "named":  # the call's own input object (context.input)
            forward["X-Nearfaas-Input"] = json.dumps({"bucket": refs[0][0], "key": refs[0][1]})
        if stage is not None:
            forward["X-Nearfaas-Output"] = json.dumps({"bucket": stage.output[0], "key": stage.output[1]})
            forward["X-Nearfaas-Output-Mode"] = "local" if stage.output_local else "cluster"
            forward["X-Nearfaas-App"] = stage.app
            if stage.run_key:  # read by the worker only (runtime/worker.py drops x-nearfaas-* from the event)
                forward[RUN_KEY_HEADER] = f"{stage.run_key['access_key']}:{stage.run_key['secret_key']}"
        exec_timeout = float(state.spec.get("exec_timeout", 10.0))
        for attempt in (1, 2):
            try:
                instance, cold_seconds = await self.pool.acquire(state, decision.node)
            except CallError as exc:
                if exc.status == 503 and exc.layer == "node":  # the node did not answer the cold start
                    raise NodeLost(decision.node, str(exc), started=False) from None
                raise
            if not MAY_START.get()():  # its caller is draining: never started, it runs after the restart
                raise CallError(503, f"the gateway is shutting down; the call of {state.name!r} was not started", "gateway",
                                {"Retry-After": "1"})
            instance.inflight += 1
            instance.calls += 1
            self.node_inflight[instance.node] = self.node_inflight.get(instance.node, 0) + 1
            try:
                forward[WORKER_TOKEN_HEADER] = instance.token
                status, reply_headers, payload = await self.pool.workers.request(
                    instance.host, instance.port, forward, body, exec_timeout + BACKSTOP_MARGIN_S, instance.socket)
                break
            except WorkerUnreachable:
                # Never reached the worker (it exited a moment ago): safe to retry on another one.
                self.pool.drop_instance(state, instance, stop=False)
                if not await self.nodes.probe(decision.node):
                    raise NodeLost(decision.node, "its worker refused the connection and the node does not answer", started=False) from None
                if attempt == 2:
                    raise CallError(502, f"could not reach a worker of {state.name!r} on {decision.node}", "worker") from None
            except TimeoutError:
                self.pool.drop_instance(state, instance, stop=True)
                raise CallError(504, f"gateway: {state.name!r} gave no answer within exec_timeout={exec_timeout:g}s "
                                     f"+ {BACKSTOP_MARGIN_S:g}s; the worker on {decision.node} was stopped", "gateway") from None
            except ResponseTooLarge as exc:
                # Its connection is closed unread; the worker itself is fine (a call answered too much).
                raise CallError(502, f"the worker of {state.name!r} on {decision.node}: {exc}", "worker") from None
            except WorkerFailed as exc:
                self.pool.drop_instance(state, instance, stop=True)
                if not await self.nodes.probe(decision.node):
                    raise NodeLost(decision.node, f"the connection broke mid-call ({exc}) and the node does not answer", started=True) from None
                raise CallError(502, f"the worker of {state.name!r} on {decision.node} failed during the call: {exc}", "worker") from None
            finally:
                instance.inflight -= 1
                self.node_inflight[instance.node] -= 1
                instance.last_used = time.monotonic()
                state.notify()
                if instance.draining and not instance.inflight:
                    self.pool.retire(instance, stop=True)
        if reply_headers.get("X-Nearfaas-Error") in ("exec-timeout", "instance-fault") or "X-Nearfaas-Retiring" in reply_headers:
            self.pool.drop_instance(state, instance, stop=False)  # it is exiting (runtime/worker.py); the node reaps it
        report = self._report(state, decision, reply_headers, time.perf_counter() - started, cold_seconds)
        if status < 400:
            moved = int(reply_headers.get("X-Nearfaas-Bytes-Local", 0) or 0) + int(reply_headers.get("X-Nearfaas-Bytes-Remote", 0) or 0)
            self._learn(state, decision.target, report["exec_s"], report["timing"]["data"], moved)
            self.inputs.learn(state.name, reply_headers.get("X-Nearfaas-Read"))
        if stage is not None and report["output"] == "local":
            self.located[stage.output] = [decision.node]
        timing = report["timing"]
        # What the function read stays with the gateway: a caller need not learn other objects' names.
        out = CIMultiDict((k, v) for k, v in reply_headers.items() if k.lower() not in _HOP_HEADERS and k.lower() != "x-nearfaas-read")
        out.update({
            "X-Call-Id": call_id,
            "X-Duration-Seconds": f"{timing['total']:.6f}",
            "X-Nearfaas-Start": report["start"],
            "X-Nearfaas-Node": decision.node,
            "X-Nearfaas-Placement": f"{decision.target};{decision.reason}",
            "X-Nearfaas-Inputs": f"{source};objects={len(refs)}",
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

    # -- deployment (the pool runs the instances; the estimates start over) ----------------------
    def deploy(self, spec: dict) -> FunctionState:
        """Register or update a function; running instances of an old version are replaced."""
        name = spec["name"]
        for key in [k for k in self.compute_s if k[0] == name]:
            del self.compute_s[key]  # a new version (another model, say) starts over
        profiled = self.profiled_compute_s(spec)
        if profiled is not None:
            self.compute_s[(name, "cpu")] = profiled
        return self.pool.deploy(spec)

    async def remove(self, name: str) -> bool:
        return await self.pool.remove(name)

    async def scale(self, name: str, replicas: int) -> None:
        await self.pool.scale(name, replicas)

    async def reap_idle_forever(self, every_s: float = 0.5) -> None:
        await self.pool.reap_idle_forever(every_s)
