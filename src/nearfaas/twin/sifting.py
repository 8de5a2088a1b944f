"""The twin's sifting pipeline: a discrete-event model of the thesis's particle sifting (§5.3.2)
on N nodes, calibrated from what a Ray run measured here, projected to 100 nodes and 10 M to
1,000 M particles. Every number it prints is MODELLED; its inputs are listed with each run.

What is modelled (one event queue, time in seconds):

* **inject**: each rank samples and serializes its particles on the host (``inject_s`` per
  particle, measured), then moves them to its local PE over the host<->device link
  (``host_link``: bandwidth and latency, shared by a node's ranks; skipped when the PEs run on
  the hosts); the PE deserializes them (``absorb_s`` per particle).
* **stage k** (an impulse: stage k starts once stage k-1 is done everywhere, like the thesis's
  synchronous measurement): every PE splits its data and serializes the parts
  (``split_s + serialize_s`` per particle), then publishes each part to its pool member. A
  transfer holds the sender's egress and the receiver's ingress port for ``latency + bytes /
  bandwidth`` (``net_link``), so fan-in to one PE queues; the receiver then deserializes the
  part on its core (``absorb_s`` per particle), one part after another. A stage's
  ``publish_s`` is its time after the slowest split, waits for ports and cores included.
* **where**: PE i runs on node ``i mod nodes``; a node runs ``cores`` PEs' work at once (a PE's
  work is single-threaded, as in the measured run). Device (SmartNIC) compute is the host's
  measured per-particle cost times ``speed_factor`` (4: the BlueField-2's Arm cores vs the EPYC
  host, thesis §4.4 / §5.4 — an input, not a fit).
* **data**: IDs uniform over their low bits, so each PE holds particles / PEs at every stage
  and each part is an equal share (the Plan's ``flow`` gives the same on real IDs).

Worked example: 100 nodes, 128 PEs, split 16 → 2 stages; 100 M particles → 781,250 per PE;
stage 1 on a PE: 781,250 x (split + serialize) x speed factor, then 16 parts of ~48,828
particles each published to 16 pool members, each receiver absorbing 16 parts.

Known caveats:
- Calibration comes from a 2-core VM running all PEs at once; per-particle costs there include
  contention the twin then charges on every simulated core (conservative).
- The network is per-port FIFO with no switch contention (a non-blocking fabric).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, field

from nearfaas.dataservices.sifting import Plan


@dataclass(frozen=True)
class Link:
    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = ""

    def time(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s


# Sources: docs/hw-references (shared): BF2 2x100 Gb/s ports; host<->BF2 Faodel transfer ~2.2 GB/s
# (thesis Table 5.9, derived). Latencies are assumptions (a few microseconds per RDMA message).
NET_100G = Link(12.5e9 * 0.9, 5e-6, "100 Gb/s port, 90% usable (assumption); 5 us per message (assumption)")
HOST_TO_NIC = Link(2.2e9, 10e-6, "host->BF2 Faodel transfer ~2.2 GB/s (thesis Table 5.9, derived); 10 us (assumption)")


@dataclass(frozen=True)
class Calibration:
    """Per-particle costs measured here (seconds per particle) and bytes per serialized particle."""

    inject_s: float  # sample + serialize at a rank
    split_s: float  # split a PE's table (sort by part, take)
    serialize_s: float  # serialize the parts
    absorb_s: float  # deserialize an arriving part
    bytes_per_particle: float
    kpass_select_s: float = 0.0  # the thesis's k-pass split: one select per part, per particle per part
    source: str = "measured on this host by benchmarks/sifting.py (CPU seconds, medians over compactions)"

    def __post_init__(self):
        for name in ("inject_s", "split_s", "serialize_s", "absorb_s", "bytes_per_particle", "kpass_select_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"calibration {name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True)
class Machine:
    nodes: int = 100
    cores: int = 8  # BlueField-2: 8 Arm A72 cores (hw-references)
    speed_factor: float = 4.0  # device compute time / host compute time
    net: Link = NET_100G
    host_link: Link = HOST_TO_NIC
    pes_on_device: bool = True  # False: the PEs run on the hosts themselves (no host->device hop)


@dataclass
class Result:
    inject_s: float = 0.0
    stages: list[dict] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return self.inject_s + sum(s["wall_s"] for s in self.stages)


class _Cores:
    """A node's cores: work goes to the core that frees first."""

    def __init__(self, n: int):
        self.free = [0.0] * n

    def run(self, ready: float, work: float) -> float:
        start = max(ready, heapq.heappop(self.free))
        heapq.heappush(self.free, start + work)
        return start + work


def simulate(plan: Plan, particles: int, cal: Calibration, machine: Machine, ranks: int | None = None,
             method: str = "single") -> Result:
    """One impulse: inject ``particles`` from ``ranks`` (default: one per node), then every stage.
    ``method`` is how a PE splits: ``single`` (one sort-based pass, what our PEs run) or ``kpass``
    (the thesis's one select per part: its cost grows with the parts)."""
    if particles < 1:
        raise ValueError("particles must be >= 1")
    if method not in ("single", "kpass"):
        raise ValueError(f"method must be single or kpass, got {method!r}")
    nodes, f = machine.nodes, machine.speed_factor
    ranks = ranks or nodes
    node_of = [pe % nodes for pe in range(plan.pes)]
    cores = [_Cores(machine.cores) for _ in range(nodes)]
    res = Result()
    # --- inject: rank r on node r % nodes feeds PE r % pes --------------------------------
    per_rank = particles / ranks
    held = [0.0] * plan.pes
    done = 0.0
    host_link_free = [0.0] * nodes  # a node's ranks share its host->device link
    for r in range(ranks):
        pe = r % plan.pes
        ready = per_rank * cal.inject_s  # the rank's own sample + serialize, on its host core
        if machine.pes_on_device:
            node = node_of[pe]
            start = max(ready, host_link_free[node])
            ready = host_link_free[node] = start + machine.host_link.time(per_rank * cal.bytes_per_particle)
        done = max(done, cores[node_of[pe]].run(ready, per_rank * cal.absorb_s * f))
        held[pe] += per_rank
    res.inject_s = done
    # --- stages ----------------------------------------------------------------------------
    t0 = 0.0
    for stage in range(1, plan.stages + 1):
        parts = plan.parts(stage)
        cores = [_Cores(machine.cores) for _ in range(nodes)]
        egress = [t0] * nodes
        ingress = [t0] * nodes
        sends = []  # (ready, src_pe, dest_pe, particles)
        split_work = []
        nxt = [0.0] * plan.pes
        for pe in range(plan.pes):
            n = held[pe]
            if n <= 0:
                continue
            split = cal.split_s if method == "single" else parts * cal.kpass_select_s
            work = n * (split + cal.serialize_s) * f
            ready = cores[node_of[pe]].run(t0, work)
            split_work.append(work)
            prefix = pe & ((1 << plan.matched_after(stage - 1)) - 1)
            for p in range(parts):
                dest = plan.destination(stage, pe, plan.matched_bits(stage, prefix, p))
                sends.append((ready, pe, dest, n / parts))
                nxt[dest] += n / parts
        heapq.heapify(sends)
        arrivals = []
        publish_busy = 0.0
        while sends:
            ready, src, dest, n = heapq.heappop(sends)
            a, b = node_of[src], node_of[dest]
            nbytes = n * cal.bytes_per_particle
            if a == b:  # same node: a memory copy, no port
                end = ready
            else:
                start = max(ready, egress[a], ingress[b])
                end = start + machine.net.time(nbytes)
                egress[a] = ingress[b] = end
                publish_busy += end - start
            arrivals.append((end, dest, n))
        arrivals.sort()
        end_all = t0
        pe_free = [t0] * plan.pes  # a PE absorbs its parts one after another (single-threaded)
        for end, dest, n in arrivals:
            pe_free[dest] = cores[node_of[dest]].run(max(end, pe_free[dest]), n * cal.absorb_s * f)
            end_all = max(end_all, pe_free[dest])
        res.stages.append({"stage": stage, "parts": parts, "wall_s": end_all - t0, "particles": sum(nxt),
                           "split_s": max(split_work, default=0.0), "publish_s": end_all - t0 - max(split_work, default=0.0),
                           "network_busy_s": publish_busy})
        held, t0 = nxt, end_all
    return res


def project(cal: Calibration, nodes: int = 100, splits=(4, 16, 128), particles=(10**7, 10**8, 10**9),
            speed_factors=(1.0, 4.0)) -> dict:
    """The thesis's Figs. 5.8-5.10 (modelled): per split and particle count, host (factor 1) and
    device (the factor) sifting times on ``nodes`` nodes with PEs = nodes rounded up to a power of two."""
    pes = 1 << math.ceil(math.log2(nodes))
    rows = []
    methods = ("single", "kpass") if cal.kpass_select_s > 0 else ("single",)
    for split in splits:
        plan = Plan(pes, split, 1)
        for n in particles:
            for factor in speed_factors:
                for method in methods:
                    m = Machine(nodes=nodes, speed_factor=factor, pes_on_device=factor != 1.0)
                    r = simulate(plan, n, cal, m, method=method)
                    rows.append({"split": split, "stages": plan.stages, "particles": n, "speed_factor": factor,
                                 "where": "host" if factor == 1.0 else "device", "method": method, "inject_s": r.inject_s,
                                 "sift_s": r.total_s - r.inject_s, "total_s": r.total_s, "per_stage": r.stages})
    return {"label": "modelled (discrete-event twin over measured per-particle costs)", "nodes": nodes, "pes": pes,
            "calibration": asdict(cal), "machine": asdict(Machine(nodes=nodes)), "rows": rows}
