"""The rack-scale discrete-event simulator: modelled nodes, warm pools and queues, with every
placement decision made by a live ``nearfaas.placement.policy`` object.

Events are plain tuples ``(time, seq, kind, a, b)`` in a heap; ``seq`` breaks ties, so a run is
a pure function of its config, workload and seed. See docs/twin-sim.md.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from nearfaas.link.profiles import PROFILES
from nearfaas.placement.chain import plan
from nearfaas.placement.policy import ClusterView, Estimates, NodeLayout, NodeView, make_policy
from nearfaas.placement.replicas import RENDEZVOUS, ReplicaCatalog, Scheme, StorageNode
from nearfaas.placement.view import node_view
from nearfaas.twin.sim.loop import INTERMEDIATES, EventLoop, SimResult
from nearfaas.twin.sim.workload import APP_KEYS

__all__ = ["INTERMEDIATES", "App", "Function", "SimConfig", "SimResult", "Simulator", "dscs_apps", "simulate"]


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
    replication_scheme: Scheme = RENDEZVOUS  # or Scheme("copyset", w): the gateway's rule, same object
    objects_per_app: int = 64  # distinct input objects per app; each call reads one, uniformly
    intermediate_pool: int = 256  # keys for intermediates written through the cluster (hashed)
    link: str = "local"
    bin_s: float = 10.0
    seed: int = 0
    queue_in_view: bool = False  # the live gateway leaves NodeView.queue at 0; True reports waiting calls
    unhealthy: tuple = ()  # node names marked unhealthy
    accel_down: tuple = ()  # dscs node names whose accelerator an operator marked unavailable
    storage_memory_mb: float | None = None  # memory per storage node for calls' footprints (None: unlimited)
    compute_memory_mb: float | None = None  # memory per compute node (None: unlimited)
    # The gateway tier (0: not modelled, every call reaches placement at once): that many gateway
    # processes, each serving one request at a time for an exponential time of mean
    # gateway_service_s per stage (one over a gateway's measured capacity: benchmarks/gateways.py).
    gateways: int = 0
    gateway_service_s: float = 0.0


class Simulator:
    def __init__(self, config: SimConfig | None = None, recorder: list | None = None):
        c = self.config = config or SimConfig()
        for name in ("storage_nodes", "compute_nodes", "standard_nodes"):
            if getattr(c, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if c.compute_slots < 1 or c.storage_cpu_slots < 1:
            raise ValueError("compute_slots and storage_cpu_slots must be >= 1")
        if c.gateways < 0 or c.gateway_service_s < 0 or (c.gateways and not c.gateway_service_s > 0):
            raise ValueError("gateways must be >= 0, and with gateways a gateway_service_s > 0 (one over a gateway's capacity)")
        if c.queue_depth < 0 or c.keep_alive_s < 0 or c.bin_s <= 0:
            raise ValueError("queue_depth and keep_alive_s must be >= 0, bin_s > 0")
        for name in ("storage_memory_mb", "compute_memory_mb"):
            if getattr(c, name) is not None and not getattr(c, name) > 0:
                raise ValueError(f"{name} must be > 0 (or None: unlimited)")
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
        self.samplers, self.means, compute_s = [], [], {}
        for f in self.functions:
            row, means = {}, {}
            for target, other in (("dscs", "cpu"), ("cpu", "dscs")):
                s = c.services.get((f.name, target), c.services.get((f.name, other), c.default_service))
                row[target], means[target] = _sampler(s, self.rng)
                if (f.name, target) in c.services:
                    compute_s[(f.name, target)] = means[target]
            self.samplers.append(row)
            self.means.append(means)
        self.estimates = Estimates(compute_s, PROFILES[c.link])
        # A call with its own duration D (a trace's, taken as its time on a CPU): stage i on
        # target T takes D x mean_i(T) / sum_j mean_j(cpu), the model's split of the chain and
        # its accelerator's speedup (equal shares where the model's CPU means sum to 0).
        self.shares = {}
        for key, chain in self.chains.items():
            total = sum(self.means[fi]["cpu"] for fi in chain)
            self.shares[key] = tuple({t: (self.means[fi][t] / total if total > 0 else 1.0 / len(chain)) for t in ("dscs", "cpu")}
                                     for fi in chain)
        # Memory per node for calls' footprints (inf: unlimited).
        inf = float("inf")
        self.mem_cap = [(c.storage_memory_mb if st else c.compute_memory_mb) or inf for st in self.is_storage]
        # Input objects per app and their replica sets (the gateway's rendezvous hashing).
        self.objects = {key: [("inputs", f"{key}/obj-{i}") for i in range(max(1, c.objects_per_app))] for key in self.apps}
        # Where objects are: the gateway's own rule (placement/replicas.py), catalog then hashing.
        self.catalog = ReplicaCatalog(self.ring, self.config.replication, self.config.dscs_replica, cache=True,
                                      scheme=self.config.replication_scheme)
        self.located = self.catalog.located  # chain intermediates written locally -> [node]

    # -- views -----------------------------------------------------------------------------------
    def replicas(self, ref) -> list[str]:
        return self.catalog.replicas(ref)

    def _nodeview(self, fi: int, ni: int, held: bool = False) -> NodeView:
        # Built by the gateway's own rule (placement.view.node_view). A NodeView is immutable and a
        # node's state takes few distinct values (health and the accelerator's availability are
        # fixed per run), so one object per raw state is built once and shared by every
        # function's view: a change costs a dict lookup, not a construction.
        key = (ni, self.busy[fi][ni], self.alive[fi][ni], len(self.waitq[ni]) if self.queue_in_view else 0, self.accel_inflight[ni], held,
               self.node_busy[ni])
        nv = self.interned.get(key)
        if nv is None:
            name, kind, cls = self.node_spec[ni]
            nv = self.interned[key] = node_view(name, kind, cls, self.healthy[ni], key[1], key[2], key[4], self.accel_available[ni],
                                                held, key[3], key[6])
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
            qv, load = self.queue_in_view, self.node_busy
            for ni in dirty:
                nv = interned.get((ni, busy[ni], alive[ni], len(waitq[ni]) if qv else 0, accel[ni], False, load[ni]))
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
    def reset_state(self) -> None:
        """Fresh per-node state for a run (what the views are built from): per function and node
        the instances busy and alive, per node the accelerator's calls and the CPU queue; every
        view row dirty."""
        nN, nF = len(self.names), len(self.functions)
        self.busy = [[0] * nN for _ in range(nF)]
        self.alive = [[0] * nN for _ in range(nF)]
        self.accel_inflight = [0] * nN
        self.node_busy = [0] * nN  # calls running per node, every function's (the view's load)
        self.waitq = [deque() for _ in range(nN)]
        self.dirty = [set(range(nN)) for _ in range(nF)]
        self.nv = [[None] * nN for _ in range(nF)]
        self.nv_tuple = [() for _ in range(nF)]
        self.interned: dict = {}
        self.queue_in_view = self.config.queue_in_view

    def run(self, workload: Iterable[tuple[float, str]]) -> SimResult:
        """Simulate ``workload`` (``(time, app)`` pairs in time order) to the end: every call
        placed, run or rejected, the instances left idle expired (twin/sim/loop.py)."""
        return EventLoop(self, workload).run()

    def _snapshot(self, fi: int, refs) -> dict:
        """The raw state a gateway would hold at this decision (for the same-policy test)."""
        return {"function": self.functions[fi].name,
                "instances": {self.names[ni]: (self.alive[fi][ni], self.busy[fi][ni]) for ni in range(len(self.names))
                              if self.alive[fi][ni]},
                "accel_inflight": {self.names[ni]: v for ni, v in enumerate(self.accel_inflight) if v},
                "node_load": {self.names[ni]: v for ni, v in enumerate(self.node_busy) if v},
                "located": {ref: list(self.located[ref]) for ref in refs if ref in self.located}}


def simulate(workload: Iterable[tuple[float, str]], config: SimConfig | None = None, **overrides) -> SimResult:
    """Run one simulation: ``simulate(poisson([(0, 50)], 1200), SimConfig(policy="auto"))``."""
    cfg = config or SimConfig()
    if overrides:
        cfg = SimConfig(**(cfg.__dict__ | overrides))
    return Simulator(cfg).run(workload)
