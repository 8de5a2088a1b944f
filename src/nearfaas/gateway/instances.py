"""The gateway's warm worker instances: per function, which workers run where, how busy each is,
starting them (one cold start per node at a time, shared by every call that waits on it),
queueing calls when all are full, scaling, and stopping the idle ones.

Call routing (gateway/invoker.py) asks the pool for an instance on the node placement chose
(``acquire``) and hands it back; the pool never decides where a call goes, only whether a
warm instance is there or one must be started. Scaling up places reference-less "calls"
through the same placement (the ``place`` it is given).

Known caveats:
- A node that does not answer its polls keeps its instances in the table until a call to them
  fails or it answers again (its health already keeps it out of placement).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property

from nearfaas.gateway.errors import CallError
from nearfaas.gateway.nodes import HEALTH_INTERVAL_S, NodeDirectory, NodeError
from nearfaas.gateway.worker_client import WorkerClient
from nearfaas.node import netrelay
from nearfaas.spec.options import NearfaasOptions
from nearfaas.telemetry.metrics import GatewayMetrics

METERED_PARTS = ("stack", "data", "compute", "cold_start")  # observed per call in nearfaas_call_seconds
SCALE_RETRY_S, SCALE_RETRY_MAX_S = 2.0, 60.0  # after a failed scale-up, the next try (doubling)


def serving_socket(path) -> str:
    """The serving socket a node named for a jailed instance, when the gateway may call it
    directly: a ``serve.sock`` inside the nodes' relay folder (node/netrelay.py) that this process
    may connect to (root, as the node; the socket is root's, 0600, in a folder only root and the
    function's group may traverse, so no function reaches another's). Else "" and the gateway
    calls the node's relay port, as any other local caller would."""
    if not isinstance(path, str) or not path:
        return ""
    folder, name = os.path.split(path)
    if name != "serve.sock" or os.path.realpath(folder) != folder or not folder.startswith(str(netrelay.ROOT) + "/"):
        return ""
    return path if os.access(path, os.W_OK) else ""


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
    socket: str = ""        # a jailed worker's serving socket, called directly (gateway/worker_client.py)
    born: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    cpu_seconds: float | None = None  # its CPU time so far, as its node last measured it (cgroup)

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
    failed: int = 0  # of those, answered 5xx (the handler raised, timed out, its node was lost): not load to scale on
    desired: int = 1
    meters: FunctionMeters | None = None
    scaling: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0  # calls queued for a free instance
    cpu_seconds: float = 0.0  # CPU time its instances used, summed from their nodes' reports (the autoscaler's cpu type)
    retry_scale_at: float = 0.0  # monotonic time to retry a scale-up that failed (0: none pending)
    scale_failures: int = 0  # failed scale-ups in a row
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    scaled_by_hand: float = float("-inf")  # monotonic time of the last POST /system/scale-function (gateway/autoscale.py)
    # Why its last cold start failed ("" once one succeeds): the status shows it, so `nearfaas deploy`
    # reports a broken requirements.txt or handler at once instead of waiting for a warm replica.
    start_error: str = ""

    def scaling_up(self) -> bool:
        """A scale-up not yet done: its reconciliation is running (it holds the scaling lock), or
        it failed part-way and a retry is pending with fewer instances than desired. Neither the
        idler nor the autoscaler undoes it meanwhile."""
        return self.scaling.locked() or bool(self.retry_scale_at and len(self.instances) < self.desired)

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



def calls_per_instance(spec: dict) -> int:
    """How many calls one instance takes at once; 0 for no limit. A worker runs a sync handler's
    calls one at a time on its main thread (runtime/worker.py, ``execution: main``): a busy one is
    a reason to start another, up to scale.max, and past that calls wait here, in the bounded
    queue, rather than in the worker, where the gateway's backstop clock would count the wait."""
    limit = int(spec.get("max_inflight", 0))
    if limit:
        return limit
    return 1 if (spec.get("x") or {}).get("execution", "main") == "main" else 0


def namespace_of(name: str) -> str:
    """The namespace part of a gateway-internal function name ("" for the default namespace:
    gateway/api/namespaces.py names its functions without a dot)."""
    return name.partition(".")[2]


class InstancePool:
    def __init__(self, nodes: NodeDirectory, metrics: GatewayMetrics, place):
        self.nodes, self.metrics = nodes, metrics
        self.place = place  # place(state, refs) -> a placement decision; used to scale up
        self.functions: dict[str, FunctionState] = {}
        self.workers = WorkerClient()
        # Instances (running and starting) the functions of one tenant namespace may have on one
        # node (gateway.max_instances_per_namespace; 0: no cap). max_scale bounds one function,
        # and two functions at scale.min 16 took every worker slot of the compute node (red team
        # round 7), so no other tenant's new function or replacement instance could start there.
        # The default namespace is the operator's own and is not capped.
        self.max_per_namespace = 0
        # Instances of an old version (or scaled down) still finishing their calls, by id, with
        # their function's name: they hold worker slots until then, so they count too (red team
        # round 8 redeployed a function while its old instances were busy and went past its share).
        self.draining: dict[str, tuple[str, Instance]] = {}
        # Nodes whose workers this gateway has looked over since it started (_sweep_orphans).
        self._swept: set[str] = set()
        nodes.on_poll.append(self._reconcile_node)

    def namespace_instances(self, namespace: str, node: str) -> int:
        """Instances the namespace's functions have on ``node``: running, starting, or draining
        (an old version's, still busy)."""
        live = sum(sum(1 for i in st.instances.values() if i.node == node) + (1 if node in st.starting else 0)
                   for st in self.functions.values() if namespace_of(st.name) == namespace)
        return live + sum(1 for name, inst in self.draining.values()
                          if inst.node == node and inst.inflight and namespace_of(name) == namespace)

    def check_namespace_room(self, state: FunctionState, node: str) -> None:
        """CallError 429 when ``state``'s namespace has all the instances it may have on ``node``."""
        namespace = namespace_of(state.name)
        if not self.max_per_namespace or not namespace:
            return
        held = self.namespace_instances(namespace, node)
        if held >= self.max_per_namespace:
            raise CallError(429, f"namespace {namespace!r} already runs {held} instances on node {node}, its share "
                                 f"(gateway.max_instances_per_namespace={self.max_per_namespace}); scale its functions "
                                 "down or remove some, or ask the operator to raise the share", "gateway", {"Retry-After": "1"})

    # -- instances -------------------------------------------------------------------------------
    async def acquire(self, state: FunctionState, node: str) -> tuple[Instance, float | None]:
        """A warm instance on ``node`` with room for one more call; cold-starts one if needed.

        Returns the instance and the cold-start seconds (None when it was warm)."""
        limit = calls_per_instance(state.spec)
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
            each = f"max_inflight={limit}" if state.spec.get("max_inflight") else "one call at a time (execution: main)"
            raise CallError(429, f"function {state.name!r} runs {each} on all {instances} instance(s), at its "
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
        self.check_namespace_room(state, node)
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.exception())  # an error nobody awaited is not "never retrieved"
        state.starting[node] = future
        try:
            timeout = 60.0 + 600.0  # handler import + a first-time requirements install
            try:
                info = await self.nodes.start_worker(node, state.spec, timeout)
            except NodeError as exc:
                raise CallError(exc.status if exc.status != 500 else 502, str(exc), exc.layer) from None
            instance = Instance(info["id"], node, info.get("host", "127.0.0.1"), int(info["port"]), token=info.get("token", ""),
                                socket=serving_socket(info.get("socket")))
            if self.functions.get(state.name) is not state:  # removed or replaced while it started
                await self.nodes.stop_worker(node, instance.id)
                raise CallError(404, f"function {state.name!r} was updated or removed while it started; retry", "gateway",
                                {"Retry-After": "1"})
            state.instances[instance.id] = instance
            state.start_error = ""
            state.notify()
            seconds = float(info["cold_start_seconds"])
            self.metrics.cold_starts.labels(state.name, node).inc()
            self.metrics.cold_start_seconds.labels(state.name).observe(seconds)
            self.metrics.service_count.labels(state.name).set(len(state.instances))
            future.set_result(instance)
            return instance, seconds
        except BaseException as exc:
            if isinstance(exc, CallError) and exc.status != 404:  # 404: replaced or removed while starting
                state.start_error = f"{exc.status}: {exc}"
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
            self.draining[instance.id] = (state.name, instance)
            return
        self.retire(instance, stop)

    def retire(self, instance: Instance, stop: bool) -> None:
        self.draining.pop(instance.id, None)
        self.workers.forget(instance.host, instance.port, instance.socket)
        if stop:
            asyncio.get_running_loop().create_task(self.nodes.stop_worker(instance.node, instance.id))

    def _reconcile_node(self, node) -> None:
        """Forget instances that their node no longer runs (they exited or were killed).

        Only a node that answered says which workers run: an unhealthy one is out of placement
        anyway, and its instances are dropped when a call to them fails or when it answers again."""
        if not node.healthy:
            return
        if node.name not in self._swept:
            self._sweep_orphans(node)
        workers = {w["id"]: w for w in node.status.get("workers", [])}
        settled = time.monotonic() - 2 * HEALTH_INTERVAL_S  # a poll sent before a worker registered says nothing of it
        for state in self.functions.values():
            for inst in [i for i in state.instances.values() if i.node == node.name]:
                if inst.id not in workers:
                    if inst.born < settled:
                        self.drop_instance(state, inst, stop=False)
                    continue
                used = workers[inst.id].get("cpu_seconds")
                if isinstance(used, int | float):
                    # increments only: an instance's whole past must not land in one window
                    if inst.cpu_seconds is not None and used > inst.cpu_seconds:
                        state.cpu_seconds += used - inst.cpu_seconds
                    inst.cpu_seconds = used

    def _sweep_orphans(self, node) -> None:
        """At this gateway's first answer from ``node``, stop the workers it runs for nobody: an
        earlier process of this gateway started them and died (a restart leaked one worker per
        function each time, issue 43). None of this gateway's own can be among them yet, bar one
        it is starting there right now, whose function is left alone. Workers another gateway
        started are that gateway's (``stop_workers_of`` when it is dead)."""
        self._swept.add(node.name)
        known = {i.id for st in self.functions.values() for i in st.instances.values()}
        starting = {st.name for st in self.functions.values() if node.name in st.starting}
        for worker in node.status.get("workers", []):
            if worker.get("owner", "") in ("", self.nodes.owner) and worker.get("id") not in known \
                    and worker.get("function") not in starting:
                self._stop_leftover(node.name, worker, self.nodes.owner)

    def stop_workers_of(self, owner: str) -> int:
        """Stop every worker a dead gateway ``owner`` left on the nodes (as their last polls list
        them): nobody routes calls to them any more. Returns how many were asked to stop."""
        stopped = 0
        for node in self.nodes.nodes.values():
            for worker in (node.status or {}).get("workers", []) if node.healthy else ():
                if worker.get("owner") == owner:
                    self._stop_leftover(node.name, worker, owner)
                    stopped += 1
        return stopped

    def _stop_leftover(self, node: str, worker: dict, owner: str) -> None:
        print(json.dumps({"event": "orphan-worker-stopped", "node": node, "worker": worker.get("id"), "owner": owner,
                          "function": worker.get("function")}), flush=True)
        asyncio.get_running_loop().create_task(self.nodes.stop_worker(node, worker["id"]))

    # -- deployment ------------------------------------------------------------------------------
    def deploy(self, spec: dict) -> FunctionState:
        """Register or update a function; running instances of an old version are replaced."""
        old = self.functions.get(spec["name"])
        state = FunctionState(spec, desired=max(int(spec.get("scale_min", 1)), 0 if spec.get("scale_zero") else 1))
        if old is not None:
            state.created, state.invocations, state.failed = old.created, old.invocations, old.failed
            for inst in list(old.instances.values()):
                self.drop_instance(old, inst, stop=True)  # busy ones finish their calls first
        self.functions[spec["name"]] = state
        self.metrics.service_count.labels(state.name).set(0)
        if (spec.get("x") or {}).get("target") in ("fastpath", "stream"):
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
            self.workers.forget(inst.host, inst.port, inst.socket)
        for key in [k for k, (fn, _) in self.draining.items() if fn == name]:  # stopped with the function below
            del self.draining[key]
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

    def reap_idle(self, now: float | None = None) -> None:
        """Stop instances idle past x-nearfaas.keep_alive above the function's floor, and scale a
        com.openfaas.scale.zero function to zero once idle for its zero-duration."""
        now = time.monotonic() if now is None else now
        for state in list(self.functions.values()):
            scale_zero = bool(state.spec.get("scale_zero"))
            idle = sorted((i for i in state.instances.values() if not i.inflight), key=lambda i: i.last_used)
            # Not while a scale-up is still bringing instances up (running, or failed part-way
            # with a retry pending): on a loaded host three cold starts took longer than a 5 s
            # zero-duration, and the first replica's idle time scaled away a function the
            # operator had just asked to have three of.
            # An operator's scale request is activity too: the idler counts zero-duration from it,
            # so a function just scaled up by hand is not scaled to zero by instances idle before.
            scaling_up = state.scaling_up()
            zero_after = float(state.spec.get("scale_zero_after", 300.0))
            if scale_zero and state.instances and not scaling_up and len(idle) == len(state.instances) and \
                    now - state.scaled_by_hand >= zero_after and all(now - i.last_used >= zero_after for i in idle):
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
