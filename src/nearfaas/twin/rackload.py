"""The offered load of a workload against the simulated rack, before simulating it: per placement
policy and resource (accelerators, compute slots, memory), the mean demand (sum over call
classes of rate x mean service time, and x mean footprint for memory: Little's law) and the
busiest minute's, against the rack's capacity. ``warnings`` says where the rack is undersized,
with the numbers; ``size`` picks the smallest rack that holds the load with headroom.

First-order and modelled: steady state, no cold starts, no queueing, and a policy's calls take
the target it prefers (near-data and auto: an acceleratable stage on an accelerator; compute-only:
every stage on a compute node's CPU) without the fallbacks a busy accelerator causes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

HEADROOM = 0.3  # --size-rack auto: the mean offered load uses at most 70% of every resource...
PEAK_LIMIT = 1.0  # ...and the busiest minute's at most 100%
MAX_NODES = 1_000_000
SIZING_RULE = (f"the smallest rack whose every resource (accelerators, compute slots, memory) carries the mean offered load at "
               f"<= {1 - HEADROOM:.0%} utilisation ({HEADROOM:.0%} headroom) and the busiest minute's at <= {PEAK_LIMIT:.0%}, "
               "under every simulated policy")
LABEL = ("modelled (first-order offered load: per call class rate x mean service time, and x mean footprint for memory; "
         "steady state, no cold starts, no fallbacks)")
POOLS = {  # resource -> (what, unit)
    "accelerators": ("dscs accelerators busy", "accelerators"),
    "compute_slots": ("compute CPU slots busy", "slots"),
    "storage_memory_mb": ("storage nodes' memory in use", "MB"),
    "compute_memory_mb": ("compute nodes' memory in use", "MB"),
}


@dataclass
class CallClass:
    """Calls of one app with one service and memory profile (a trace function, or one app's
    share of a Poisson workload)."""

    app: str  # the twin's app key (its chain of functions)
    per_minute: Sequence[float]  # calls in each minute of the window (expected, for a Poisson workload)
    duration_s: float | None = None  # the calls' own mean duration (a trace's), None: the model's stage times
    memory_mb: float = 0.0  # mean footprint of a running call


@dataclass
class Rack:
    storage_nodes: int
    compute_nodes: int
    compute_slots: int
    storage_memory_mb: float | None = None  # per node; None: not modelled
    compute_memory_mb: float | None = None

    def capacity(self) -> dict[str, float | None]:
        def mem(n: int, per_node: float | None) -> float | None:
            return None if per_node is None else n * per_node

        return {"accelerators": float(self.storage_nodes), "compute_slots": float(self.compute_nodes * self.compute_slots),
                "storage_memory_mb": mem(self.storage_nodes, self.storage_memory_mb),
                "compute_memory_mb": mem(self.compute_nodes, self.compute_memory_mb)}

    def describe(self, pool: str) -> str:
        return {"accelerators": f"{self.storage_nodes} dscs nodes x 1 accelerator",
                "compute_slots": f"{self.compute_nodes} compute nodes x {self.compute_slots} slots",
                "storage_memory_mb": f"{self.storage_nodes} dscs nodes x {self.storage_memory_mb or 0:,.0f} MB",
                "compute_memory_mb": f"{self.compute_nodes} compute nodes x {self.compute_memory_mb or 0:,.0f} MB"}[pool]


def poisson_classes(schedule: Sequence[tuple[float, float]], duration_s: float, apps: Sequence[str]) -> list[CallClass]:
    """A piecewise-constant Poisson schedule's expected calls per minute, shared equally by ``apps``."""
    n_min = max(1, math.ceil(duration_s / 60.0))
    per_minute = []
    for m in range(n_min):
        lo, hi = m * 60.0, min((m + 1) * 60.0, duration_s)
        total = 0.0
        for i, (start, rate) in enumerate(schedule):
            end = schedule[i + 1][0] if i + 1 < len(schedule) else math.inf
            total += rate * max(0.0, min(hi, end) - max(lo, start))
        per_minute.append(total / len(apps))
    return [CallClass(a, per_minute) for a in apps]


def trace_classes(trace) -> list[CallClass]:
    """One class per function of an ``AzureTrace``: its counts, mean duration and footprint."""
    return [CallClass(f.app_key, f.counts, None if f.duration_ms is None else f.duration_ms.mean / 1e3,
                      0.0 if f.memory_mb is None else f.memory_mb.mean) for f in trace.functions]


def stage_work(app, means: Mapping[tuple[str, str], float], policy: str, duration_s: float | None) -> list[tuple[str, float]]:
    """Per stage of ``app``'s chain under ``policy``: (target, mean seconds), as the engine times
    a stage (a call's own duration D split as D x mean_i(target) / sum_j mean_j(cpu))."""
    def mean(fn, t):
        return means.get((fn, t), means.get((fn, "cpu" if t == "dscs" else "dscs"), 0.0))

    out = []
    total_cpu = sum(mean(f.name, "cpu") for f in app.functions)
    for f in app.functions:
        accel = policy != "compute-only" and f.accelerator == "dscs" and f.placement != "compute"
        t = "dscs" if accel else "cpu"
        m = mean(f.name, t)
        if duration_s is not None:
            m = duration_s * (m / total_cpu if total_cpu > 0 else 1.0 / len(app.functions))
        out.append((t, m))
    return out


def demand(classes: Sequence[CallClass], apps: Mapping, means: Mapping[tuple[str, str], float], policies: Sequence[str]) -> dict:
    """{policy: {pool: {"mean", "peak_minute"}}}: the offered load per resource over the
    window, and in its busiest minute (resource-seconds per second: busy accelerators or slots;
    MB in use for memory). It does not depend on the rack."""
    n_min = max((len(c.per_minute) for c in classes), default=0)
    window_s = 60.0 * n_min
    out = {}
    for policy in policies:
        mean_d = dict.fromkeys(POOLS, 0.0)
        minute_d = {p: np.zeros(n_min) for p in POOLS}
        for c in classes:
            work = dict.fromkeys(POOLS, 0.0)  # per call: resource-seconds (MB-seconds for memory)
            for target, s in stage_work(apps[c.app], means, policy, c.duration_s):
                work["accelerators" if target == "dscs" else "compute_slots"] += s
                work["storage_memory_mb" if target == "dscs" else "compute_memory_mb"] += s * c.memory_mb
            counts = np.zeros(n_min)
            counts[:len(c.per_minute)] = c.per_minute
            calls = float(counts.sum())
            for p, w in work.items():
                if w and calls:
                    mean_d[p] += calls * w / window_s
                    minute_d[p] += counts * (w / 60.0)
        out[policy] = {p: {"mean": mean_d[p], "peak_minute": float(minute_d[p].max()) if n_min else 0.0} for p in POOLS}
    return out


def against(dem: dict, rack: Rack) -> dict:
    """{policy: {pool: {demand, peak_minute_demand, capacity, utilisation, peak_minute_utilisation,
    unit}}} of ``demand``'s result on ``rack`` (memory pools only where the rack models memory)."""
    cap = rack.capacity()
    out = {}
    for policy, pools in dem.items():
        block = {}
        for p, d in pools.items():
            if cap[p] is None:
                continue
            block[p] = {"demand": d["mean"], "peak_minute_demand": d["peak_minute"], "capacity": cap[p], "unit": POOLS[p][1],
                        "utilisation": _util(d["mean"], cap[p]), "peak_minute_utilisation": _util(d["peak_minute"], cap[p])}
        out[policy] = block
    return out


def _util(demand: float, capacity: float) -> float:
    if capacity > 0:
        return demand / capacity
    return math.inf if demand > 0 else 0.0


def fits(load: dict, mean_limit: float = 1.0 - HEADROOM, peak_limit: float = PEAK_LIMIT) -> bool:
    return all(b["utilisation"] <= mean_limit and b["peak_minute_utilisation"] <= peak_limit
               for pools in load.values() for b in pools.values())


def size(dem: dict, rack_for: Callable[[int], Rack]) -> int:
    """The smallest node count ``n`` >= 2 whose rack ``rack_for(n)`` holds ``demand``'s result
    (SIZING_RULE); a ValueError if even MAX_NODES do not."""
    def ok(n: int) -> bool:
        return fits(against(dem, rack_for(n)))

    if ok(2):
        return 2
    hi = 4
    while not ok(hi):
        if hi >= MAX_NODES:
            raise ValueError(f"--size-rack auto: the trace's offered load needs more than {MAX_NODES:,} nodes; replay fewer "
                             "minutes (--minutes) or a sample of its functions")
        hi = min(hi * 2, MAX_NODES)
    lo = hi // 2  # not ok
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def warnings(load: dict, rack: Rack, suggest: int | None, where: str) -> list[str]:
    """A sentence per (policy, resource) whose mean, or busiest minute's, offered load exceeds
    the rack's capacity, with the numbers and the fix."""
    out = []
    fix = ("; --size-rack auto sizes the rack to the load" + (f" ({suggest:,} nodes)" if suggest else "")
           + (f", or pass --nodes {suggest}" if suggest else ""))
    for policy, pools in load.items():
        for p, b in pools.items():
            what, unit = POOLS[p]
            mean_over, peak_over = b["utilisation"] > 1.0, b["peak_minute_utilisation"] > 1.0
            if not (mean_over or peak_over):
                continue
            nums = (f"{what}: {b['demand']:,.1f} {unit} on average, {b['peak_minute_demand']:,.1f} in the busiest minute, vs "
                    f"{b['capacity']:,.0f} ({rack.describe(p)}): utilisation {b['utilisation']:.0%} (busiest minute "
                    f"{b['peak_minute_utilisation']:.0%})")
            if mean_over:
                out.append(f"the offered load exceeds the simulated rack ({where}) under {policy}: {nums}; expect queues that "
                           f"grow for the whole run, and rejections once they fill{fix}")
            else:
                out.append(f"the busiest minute's offered load exceeds the simulated rack ({where}) under {policy}: {nums}; expect "
                           f"queueing and possibly rejections in the bursts{fix}")
    return out
