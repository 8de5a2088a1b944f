"""The rack-scale discrete-event simulator: modelled nodes, warm pools and queues, with every
placement decision made by a live ``nearfaas.placement.policy`` object.

Events are plain tuples ``(time, seq, kind, a, b)`` in a heap; ``seq`` breaks ties, so a run is
a pure function of its config, workload and seed. See docs/twin-sim.md.
"""

from __future__ import annotations

import heapq
import random
import time
from array import array
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from nearfaas.placement.replicas import ReplicaCatalog, StorageNode
from nearfaas.link.profiles import PROFILES
from nearfaas.placement.chain import plan
from nearfaas.placement.policy import ClusterView, Estimates, Invocation, NodeLayout, NodeView, NoNodeAvailable, make_policy
from nearfaas.placement.view import node_view
from nearfaas.twin.sim.workload import APP_KEYS, WorkloadError

INTERMEDIATES = "nearfaas-intermediates"
_ARRIVAL, _FINISH, _EXPIRE = 0, 1, 2


@dataclass(frozen=True)
class Function:
    name: str
    accelerator: str | None = None  # "dscs": acceleratable
    placement: str = "auto"  # x-nearfaas placement: "data" | "compute" | "auto"
    input_bytes: int = 0  # what the gateway would have learnt (Invocation.input_bytes)


@dataclass(frozen=True)
class App:
    key: str
    functions: tuple[Function, ...]  # a linear chain f1 -> f2 -> ...; checked with placement.chain.plan


def dscs_apps(input_bytes: int = 0) -> dict[str, App]:
    """The eight DSCS apps as chains f1 (pre, acceleratable) -> f2 (infer, acceleratable) -> f3
    (notify, on compute), with the catalog's function names (<slug>-pre, -infer, -notify)."""
    out = {}
    for key in APP_KEYS:
        slug = key.replace("_", "-")
        out[key] = App(key, (Function(f"{slug}-pre", "dscs", "auto", input_bytes), Function(f"{slug}-infer", "dscs", "auto", input_bytes),
                             Function(f"{slug}-notify", None, "compute", 0)))
    return out


def _sampler(spec, rng: random.Random):
    """A service-time spec: a number (deterministic), ("det", s), ("exp", mean) or
    ("lognormal", mean, sigma) with sigma of the underlying normal. Returns (sample(), mean)."""
    if isinstance(spec, (int, float)):
        spec = ("det", float(spec))
    kind = spec[0]
    if kind in ("det", "deterministic"):
        v = float(spec[1])
        if v < 0:
            raise ValueError(f"service time {v} must be >= 0")
        return (lambda: v), v
    if kind in ("exp", "exponential"):
        mean = float(spec[1])
        if not mean > 0:
            raise ValueError(f"exponential service mean {mean} must be > 0")
        expo, rate = rng.expovariate, 1.0 / mean
        return (lambda: expo(rate)), mean
    if kind == "lognormal":
        mean, sigma = float(spec[1]), float(spec[2])
        if not mean > 0 or sigma < 0:
            raise ValueError(f"lognormal service needs mean > 0 and sigma >= 0, got {spec!r}")
        mu = np.log(mean) - sigma * sigma / 2
        lnv = rng.lognormvariate
        return (lambda: lnv(mu, sigma)), mean
    raise ValueError(f"unknown service-time distribution {kind!r}; use det, exp or lognormal")


@dataclass
class SimConfig:
    storage_nodes: int = 100  # dscs-class storage nodes (one accelerator each)
    compute_nodes: int = 100
    standard_nodes: int = 0  # storage nodes without an accelerator
    compute_slots: int = 4  # concurrent CPU calls on a compute node
    storage_cpu_slots: int = 1  # concurrent CPU-target calls on a storage node
    policy: str = "near-data"
    apps: Mapping[str, App] | None = None  # default: dscs_apps()
    services: Mapping[tuple[str, str], object] = field(default_factory=dict)  # (function, "dscs"|"cpu") -> spec
    default_service: object = ("exp", 0.1)
    keep_alive_s: float = 600.0
    image_pull_s: float = 0.0
    model_load_s: float = 0.0
    queue_depth: int = 10_000
    replication: int = 2
    dscs_replica: bool = True
    objects_per_app: int = 64  # distinct input objects per app; each call reads one, uniformly
    intermediate_pool: int = 256  # keys for intermediates written through the cluster (hashed)
    link: str = "local"
    bin_s: float = 10.0
    seed: int = 0
    queue_in_view: bool = False  # the live gateway leaves NodeView.queue at 0; True reports waiting calls
    unhealthy: tuple = ()  # node names marked unhealthy
    accel_down: tuple = ()  # dscs node names whose accelerator an operator marked unavailable


@dataclass
class SimResult:
    arrivals: int
    completed: int
    rejected: int
    events: int
    sim_time_s: float  # simulated time at which the last call finished (the trace drained)
    wall_s: float
    latency: dict  # mean, p50, p95, p99 (seconds, end to end)
    mean_wait_s: float  # time in queues per completed call (summed over its stages)
    time_avg_in_system: float  # L: calls in the system, time-averaged over [0, sim_time_s]
    cold_starts: int
    placements: dict  # "target;reason" -> count
    series: dict  # t, queue_len, instances_busy, instances_alive, latency_mean, latency_p95 per bin

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def throughput(self) -> float:
        return self.completed / self.sim_time_s if self.sim_time_s > 0 else 0.0

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "series"} | {"events_per_s": self.events_per_s}


class Simulator:
    def __init__(self, config: SimConfig | None = None, recorder: list | None = None):
        c = self.config = config or SimConfig()
        for name in ("storage_nodes", "compute_nodes", "standard_nodes"):
            if getattr(c, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if c.compute_slots < 1 or c.storage_cpu_slots < 1:
            raise ValueError("compute_slots and storage_cpu_slots must be >= 1")
        if c.queue_depth < 0 or c.keep_alive_s < 0 or c.bin_s <= 0:
            raise ValueError("queue_depth and keep_alive_s must be >= 0, bin_s > 0")
        self.policy = make_policy(c.policy)
        self.recorder = recorder
        self.rng = random.Random(c.seed)
        # Nodes, in the order the gateway's NodeDirectory would list them.
        spec = ([(f"storage-{i}", "storage", "dscs") for i in range(c.storage_nodes)]
                + [(f"standard-{i}", "storage", "standard") for i in range(c.standard_nodes)]
                + [(f"compute-{i}", "compute", "cpu") for i in range(c.compute_nodes)])
        if not spec:
            raise ValueError("the simulated cluster has no node")
        self.node_spec = spec
        self.names = [s[0] for s in spec]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.is_storage = [s[1] == "storage" for s in spec]
        self.healthy = [s[0] not in c.unhealthy for s in spec]
        self.accel_available = [s[0] not in c.accel_down for s in spec]
        self.ring = [StorageNode(s[0], s[2]) for s in spec if s[1] == "storage"]
        # Names, kinds and classes never change during a run, so every view shares one index of
        # its nodes (the policies then find a node by name, or the compute nodes, without a scan).
        self.layout = NodeLayout.of([NodeView(*s) for s in spec])
        # Functions and chains.
        self.apps = dict(c.apps) if c.apps is not None else dscs_apps()
        self.functions: list[Function] = []
        fidx = {}
        self.chains: dict[str, tuple[int, ...]] = {}
        for key, app in self.apps.items():
            succ = {f.name: ([app.functions[i + 1].name] if i + 1 < len(app.functions) else []) for i, f in enumerate(app.functions)}
            waves = plan(app.functions[0].name, succ)
            if any(len(w) != 1 for w in waves):
                raise ValueError(f"app {key!r}: only linear chains are simulated")
            by_name = {f.name: f for f in app.functions}
            chain = []
            for w in waves:
                f = by_name[w[0].function]
                if f.name not in fidx:
                    fidx[f.name] = len(self.functions)
                    self.functions.append(f)
                chain.append(fidx[f.name])
            self.chains[key] = tuple(chain)
        self.app_keys = list(self.apps)
        # Service samplers per (function, target); a missing pair takes the other target's spec,
        # then default_service. Means feed the auto policy's Estimates (the gateway learns them).
        self.samplers, compute_s = [], {}
        for f in self.functions:
            row = {}
            for target, other in (("dscs", "cpu"), ("cpu", "dscs")):
                s = c.services.get((f.name, target), c.services.get((f.name, other), c.default_service))
                row[target], mean = _sampler(s, self.rng)
                if (f.name, target) in c.services:
                    compute_s[(f.name, target)] = mean
            self.samplers.append(row)
        self.estimates = Estimates(compute_s, PROFILES[c.link])
        # Input objects per app and their replica sets (the gateway's rendezvous hashing).
        self.objects = {key: [("inputs", f"{key}/obj-{i}") for i in range(max(1, c.objects_per_app))] for key in self.apps}
        # Where objects are: the gateway's own rule (placement/replicas.py), catalog then hashing.
        self.catalog = ReplicaCatalog(self.ring, self.config.replication, self.config.dscs_replica, cache=True)
        self.located = self.catalog.located  # chain intermediates written locally -> [node]

    # -- views -----------------------------------------------------------------------------------
    def replicas(self, ref) -> list[str]:
        return self.catalog.replicas(ref)

    def _nodeview(self, fi: int, ni: int, held: bool = False) -> NodeView:
        # Built by the gateway's own rule (placement.view.node_view). A NodeView is immutable and a
        # node's state takes few distinct values (health and the accelerator's availability are
        # fixed per run), so one object per raw state is built once and shared by every
        # function's view: a change costs a dict lookup, not a construction.
        key = (ni, self.busy[fi][ni], self.alive[fi][ni], len(self.waitq[ni]) if self.queue_in_view else 0, self.accel_inflight[ni], held)
        nv = self.interned.get(key)
        if nv is None:
            name, kind, cls = self.node_spec[ni]
            nv = self.interned[key] = node_view(name, kind, cls, self.healthy[ni], key[1], key[2], key[4], self.accel_available[ni],
                                                held, key[3])
        return nv

    def view(self, fi: int, refs, held: str | None = None, replicas: Mapping | None = None) -> ClusterView:
        """The ClusterView for function ``fi``, built as Invoker._view builds it: per node the
        function's instances (warm) and their in-flight calls, the accelerator busy unless only
        the chain's own hold keeps it, its availability; replicas from the location catalog,
        else rendezvous hashing (or ``replicas``, when the caller has that map already); the
        estimates. Rebuilt only where the state changed; every view shares one NodeLayout."""
        dirty = self.dirty[fi]
        if dirty:
            # _nodeview, inlined for the common case (the state's NodeView already exists).
            row, busy, alive, accel, waitq, interned = self.nv[fi], self.busy[fi], self.alive[fi], self.accel_inflight, self.waitq, self.interned
            qv = self.queue_in_view
            for ni in dirty:
                nv = interned.get((ni, busy[ni], alive[ni], len(waitq[ni]) if qv else 0, accel[ni], False))
                row[ni] = nv if nv is not None else self._nodeview(fi, ni)
            dirty.clear()
            self.nv_tuple[fi] = tuple(row)
        nodes = self.nv_tuple[fi]
        if held is not None:
            hi = self.index[held]
            nodes = nodes[:hi] + (self._nodeview(fi, hi, True),) + nodes[hi + 1:]
        if replicas is None:
            replicas = {ref: self.replicas(ref) for ref in refs}
        return ClusterView(nodes, replicas, self.estimates, self.layout)

    def _touch_node(self, ni: int) -> None:
        for d in self.dirty:
            d.add(ni)

    # -- the run ---------------------------------------------------------------------------------
    def run(self, workload: Iterable[tuple[float, str]]) -> SimResult:
        c = self.config
        nN, nF = len(self.names), len(self.functions)
        self.busy = [[0] * nN for _ in range(nF)]
        self.alive = [[0] * nN for _ in range(nF)]
        idle = [[deque() for _ in range(nN)] for _ in range(nF)]
        expiring = [[False] * nN for _ in range(nF)]
        self.accel_inflight = [0] * nN
        self.waitq = waitq = [deque() for _ in range(nN)]
        free = [c.storage_cpu_slots if st else c.compute_slots for st in self.is_storage]
        self.dirty = [set(range(nN)) for _ in range(nF)]
        self.nv = [[None] * nN for _ in range(nF)]
        self.nv_tuple = [() for _ in range(nF)]
        self.interned: dict = {}
        self.queue_in_view = c.queue_in_view
        busy, alive, dirty, accel = self.busy, self.alive, self.dirty, self.accel_inflight
        names, is_storage, functions, samplers = self.names, self.is_storage, self.functions, self.samplers
        chains, objects, index = self.chains, self.objects, self.index
        policy_place, view, located, rec = self.policy.place, self.view, self.located, self.recorder
        first_stage: dict = {}
        touch = self._touch_node

        def accel_step(ni, delta):
            """Take (+1) or give back (-1) a node's accelerator. A row's NodeView shows it only as
            busy or not (node_view: accel_inflight > 0 when not held), so every function's row goes
            stale only when that flips (a chain's hold passing to its next stage on the same node
            goes 1 -> 2 -> 1: nothing to rebuild). test_incremental_views_equal_views_built_from_scratch
            checks this against views built from scratch."""
            was = accel[ni] > 0
            accel[ni] += delta
            if (accel[ni] > 0) is not was:
                for d in dirty:
                    d.add(ni)

        keep_alive, cold_s, depth, bin_s = c.keep_alive_s, c.image_pull_s + c.model_load_s, c.queue_depth, c.bin_s
        expire_on = keep_alive != float("inf")
        pool_n = max(1, c.intermediate_pool)
        rand = self.rng.random
        heap: list = []
        push, pop = heapq.heappush, heapq.heappop
        seq = 0
        placements: Counter = Counter()
        lat_t, lat_v = array("d"), array("d")
        bq, bb, ba = [], [], []  # per-bin areas: queued, busy instances, alive instances
        st = {"queued": 0, "busy": 0, "alive": 0, "system": 0, "rejected": 0, "cold": 0, "wait": 0.0}
        area_sys = 0.0
        last = 0.0
        run_id = 0
        arrivals = completed = events = 0
        it = iter(workload)

        def next_arrival(seq):
            try:
                t, app = next(it)
            except StopIteration:
                return seq
            if app not in chains:
                raise WorkloadError(f"unknown app {app!r} in the workload; known: {', '.join(self.app_keys)}")
            push(heap, (t, seq, _ARRIVAL, app, None))
            return seq + 1

        def start(job, now):
            nonlocal seq
            fi, ni = job[1][job[2]], job[4]
            pool = idle[fi][ni]
            warm = False
            while pool:
                if pool.pop() + keep_alive > now:
                    warm = True
                    break
                alive[fi][ni] -= 1 + len(pool)  # the rest are older: expired too
                st["alive"] -= 1 + len(pool)
                pool.clear()
            extra = 0.0
            if not warm:
                alive[fi][ni] += 1
                st["alive"] += 1
                st["cold"] += 1
                extra = cold_s
            busy[fi][ni] += 1
            st["busy"] += 1
            dirty[fi].add(ni)
            push(heap, (now + extra + samplers[fi][job[5]](), seq, _FINISH, job, None))
            seq += 1

        def place(job, now, held):
            """One decision through the policy, then the gateway's bookkeeping: mark the
            accelerator busy in the same step, take a slot or queue (bounded) or reject."""
            fi = job[1][job[2]]
            refs = job[3]
            if job[2] == 0:
                # A first stage reads an object of the app's bounded input catalog, never a
                # located intermediate: its Invocation and replica map are the same every time,
                # so they are built once per (function, object) and shared (both are read-only).
                hit = first_stage.get((fi, refs))
                if hit is None:
                    f = functions[fi]
                    hit = first_stage[(fi, refs)] = (Invocation(f.name, f.accelerator, f.placement, refs, f.input_bytes),
                                                     {ref: self.replicas(ref) for ref in refs})
                inv, replicas = hit
            else:
                f = functions[fi]
                inv, replicas = Invocation(f.name, f.accelerator, f.placement, refs, f.input_bytes), None
            v = view(fi, refs, held, replicas)
            try:
                d = policy_place(inv, v)
            except NoNodeAvailable:
                d = None
            if rec is not None:
                rec.append({"t": now, "invocation": inv, "view": v, "decision": d, "held": held, "state": self._snapshot(fi, refs)})
            if d is None:
                st["rejected"] += 1
                st["system"] -= 1
                for ref in refs:
                    located.pop(ref, None)
                return
            placements[d.target + ";" + d.reason] += 1
            ni = index[d.node]
            job[4], job[5] = ni, d.target
            if d.target == "dscs":
                accel_step(ni, 1)
                start(job, now)  # the policy hands an accelerator out only when free (or held by this chain)
            elif free[ni] > 0:
                free[ni] -= 1
                start(job, now)
            elif st["queued"] < depth:
                job[6] = now
                waitq[ni].append(job)
                st["queued"] += 1
                if self.config.queue_in_view:
                    touch(ni)
            else:
                st["rejected"] += 1
                st["system"] -= 1
                for ref in refs:
                    located.pop(ref, None)

        seq = next_arrival(seq)
        wall0 = time.perf_counter()
        while heap:
            now, _, kind, a, b = pop(heap)
            events += 1
            # Time-weighted areas, split at bin edges.
            if now > last:
                dt = now - last
                area_sys += st["system"] * dt
                q, bz, al = st["queued"], st["busy"], st["alive"]
                k = int(last / bin_s)
                if now < (k + 1) * bin_s and int(now / bin_s) < len(bq):
                    # The common case: the same bin as the last event, and it exists already
                    # (the general loop below would do exactly this in one turn).
                    bq[k] += q * dt
                    bb[k] += bz * dt
                    ba[k] += al * dt
                else:
                    while len(bq) <= int(now / bin_s):
                        bq.append(0.0)
                        bb.append(0.0)
                        ba.append(0.0)
                    t0 = last
                    while True:
                        edge = (k + 1) * bin_s
                        t1 = now if now < edge else edge
                        span = t1 - t0
                        bq[k] += q * span
                        bb[k] += bz * span
                        ba[k] += al * span
                        if t1 >= now:
                            break
                        t0, k = t1, k + 1
                last = now
            if kind == _FINISH:
                job = a
                chain, stage, ni, target = job[1], job[2], job[4], job[5]
                fi = chain[stage]
                busy[fi][ni] -= 1
                st["busy"] -= 1
                idle[fi][ni].append(now)
                dirty[fi].add(ni)
                if expire_on and not expiring[fi][ni]:
                    expiring[fi][ni] = True
                    push(heap, (now + keep_alive, seq, _EXPIRE, fi, ni))
                    seq += 1
                if target == "cpu":
                    wq = waitq[ni]
                    if wq:
                        nxt = wq.popleft()
                        st["queued"] -= 1
                        st["wait"] += now - nxt[6]
                        nxt[7] += now - nxt[6]
                        if self.config.queue_in_view:
                            touch(ni)
                        start(nxt, now)  # the freed slot passes straight to the next call
                    else:
                        free[ni] += 1
                for ref in job[3]:
                    located.pop(ref, None)  # consumed (the gateway deletes intermediates after the chain)
                if stage + 1 < len(chain):
                    nf = functions[chain[stage + 1]]
                    sname = functions[fi].name
                    if is_storage[ni]:  # a local intermediate: one copy where it was made
                        run_id += 1
                        ref = (INTERMEDIATES, f"{job[8]}/{run_id}/{sname}")
                        located[ref] = [names[ni]]
                    else:  # written through the cluster: where hashing puts it
                        ref = (INTERMEDIATES, f"{job[8]}/pool-{int(rand() * pool_n)}/{sname}")
                    held = names[ni] if target == "dscs" and nf.accelerator == "dscs" else None
                    if target == "dscs" and held is None:
                        accel_step(ni, -1)
                    job[2] = stage + 1
                    job[3] = (ref,)
                    place(job, now, held)
                    if held is not None:  # the hold passes to the next stage (or ends) in the same step
                        accel_step(ni, -1)
                else:
                    if target == "dscs":
                        accel_step(ni, -1)
                    completed += 1
                    st["system"] -= 1
                    lat_t.append(now)
                    lat_v.append(now - job[0])
            elif kind == _ARRIVAL:
                arrivals += 1
                st["system"] += 1
                objs = objects[a]
                ref = objs[int(rand() * len(objs))]
                # job: arrival, chain, stage, refs, node, target, queued-at, waited, app
                job = [now, chains[a], 0, (ref,), -1, "", 0.0, 0.0, a]
                seq = next_arrival(seq)
                place(job, now, None)
            else:  # _EXPIRE: drop instances idle past keep_alive; re-arm for the next oldest
                fi, ni = a, b
                pool = idle[fi][ni]
                expiring[fi][ni] = False
                n0 = len(pool)
                while pool and pool[0] + keep_alive <= now:
                    pool.popleft()
                if len(pool) != n0:
                    alive[fi][ni] -= n0 - len(pool)
                    st["alive"] -= n0 - len(pool)
                    dirty[fi].add(ni)
                if pool:
                    expiring[fi][ni] = True
                    push(heap, (pool[0] + keep_alive, seq, _EXPIRE, fi, ni))
                    seq += 1
        wall = time.perf_counter() - wall0
        end = max((lat_t[-1] if lat_t else 0.0), 0.0)
        lv = np.frombuffer(lat_v, dtype=np.float64) if lat_v else np.zeros(0)
        lt = np.frombuffer(lat_t, dtype=np.float64) if lat_t else np.zeros(0)
        pct = np.percentile(lv, [50, 95, 99]) if lv.size else [float("nan")] * 3
        n_bins = len(bq)
        lat_mean, lat_p95 = [float("nan")] * n_bins, [float("nan")] * n_bins
        if lv.size and n_bins:
            order = np.argsort(lt, kind="stable")
            lt_s, lv_s = lt[order], lv[order]
            edges = np.searchsorted(lt_s, np.arange(n_bins + 1) * bin_s, side="left")
            for k in range(n_bins):
                seg = lv_s[edges[k]:edges[k + 1]]
                if seg.size:
                    lat_mean[k] = float(seg.mean())
                    lat_p95[k] = float(np.percentile(seg, 95))
        series = {"bin_s": bin_s, "t": [k * bin_s for k in range(n_bins)],
                  "queue_len": [x / bin_s for x in bq], "instances_busy": [x / bin_s for x in bb],
                  "instances_alive": [x / bin_s for x in ba], "latency_mean": lat_mean, "latency_p95": lat_p95}
        return SimResult(
            arrivals=arrivals, completed=completed, rejected=st["rejected"], events=events, sim_time_s=end, wall_s=wall,
            latency={"mean": float(lv.mean()) if lv.size else float("nan"), "p50": float(pct[0]), "p95": float(pct[1]),
                     "p99": float(pct[2])},
            mean_wait_s=st["wait"] / completed if completed else float("nan"),
            time_avg_in_system=area_sys / end if end > 0 else 0.0, cold_starts=st["cold"],
            placements=dict(placements), series=series)

    def _snapshot(self, fi: int, refs) -> dict:
        """The raw state a gateway would hold at this decision (for the same-policy test)."""
        return {"function": self.functions[fi].name,
                "instances": {self.names[ni]: (self.alive[fi][ni], self.busy[fi][ni]) for ni in range(len(self.names))
                              if self.alive[fi][ni]},
                "accel_inflight": {self.names[ni]: v for ni, v in enumerate(self.accel_inflight) if v},
                "located": {ref: list(self.located[ref]) for ref in refs if ref in self.located}}


def simulate(workload: Iterable[tuple[float, str]], config: SimConfig | None = None, **overrides) -> SimResult:
    """Run one simulation: ``simulate(poisson([(0, 50)], 1200), SimConfig(policy="auto"))``."""
    cfg = config or SimConfig()
    if overrides:
        cfg = SimConfig(**(cfg.__dict__ | overrides))
    return Simulator(cfg).run(workload)
