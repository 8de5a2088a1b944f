"""Two filters between a measured trace and the tier simulator (issue 18): the last-level cache,
which serves a function's hottest lines before any tier sees them, and a tier's bandwidth, which
colocated functions share (the paper's Figure 7: a function slowed by its neighbours, more on
CXL than on DRAM).

``llc_filter(trace, llc_bytes, footprint_bytes)`` — the hottest pages of the trace (most
accesses over all of it), as many as the LLC's share of the footprint, stay in the LLC: their
accesses hit and leave the trace. A sampled trace keeps that share of its sampled pages.

``colocate(functions, tier)`` — each function streams ``demand_gbps`` (its LLC misses × 64 B /
its time, measured by cachegrind) from the tier it sits on. The tier's load ρ = Σ demand /
bandwidth stretches every access to it by q(ρ) = 1 + ρ / (2(1 − ρ)) (an M/D/1 queue: a 64-byte
line is a fixed service time) up to ρ = 0.9, and linearly in ρ past it (a saturated tier is
shared: twice the demand, twice the wait), continuous at 0.9. A function's time is
``base × (1 + boundness × (latency × queue / fast − 1))`` with latency = fast on DRAM and
fast + Δ on the slow tier; its slowdown is against running alone on DRAM.

Worked example: two copies of a function with boundness 0.5 and demand 4 GB/s, DRAM 13.9 GB/s
(triad here), slow tier at half of it, fast 200 ns, Δ 70 ns. Alone on DRAM: ρ 0.29, q 1.20.
Together on DRAM: ρ 0.58, q 1.69 → (1 + 0.5 × 0.69) / (1 + 0.5 × 0.20) = 1.22, 22% slower.
Together on the slow tier: ρ 1.15, past the knee, q 7.03, latency 270 ns → 4.8× the time alone
on DRAM: the shape of Figure 7 (a neighbour hurts more on CXL) from bandwidth alone.

Known caveats:
* The queue is a textbook M/M/1 on one shared resource: no per-channel striping, no prefetch,
  no write/read asymmetry. It ranks neighbours; it does not predict a given CPU's numbers.
* The slow tier's bandwidth is an input (``slow_bw_ratio`` of DRAM's): no CXL device here, and
  ``shared/hw-references.md`` gives CXL latency, not bandwidth; the benchmark sweeps it.
* The LLC filter is per page and static, and treats the whole LLC as this function's: a streamed
  array touched every epoch ranks as hot as a reused vector, which an LRU cache would not keep.
  It is for complete traces: the benchmark and the twin price the shim's sparse access sample
  without it (boundness already counts only LLC misses; filtering a sample whose every seen
  page fits in the cache's share emptied it and priced the slow tier at 0%).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from nearfaas.memory.tiersim import Trace

PAGE = 4096
KNEE = 0.9


def llc_bytes(path: Path = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")) -> int:
    """This machine's last-level cache (sysfs: "32768K"), 0 where it does not say."""
    try:
        text = path.read_text().strip()
        return int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text)
    except (OSError, ValueError, IndexError):
        return 0


def llc_filter(trace: Trace, llc_bytes: int, footprint_bytes: int | None = None) -> Trace:
    """``trace`` without the accesses the LLC serves: its hottest pages (most accesses over the
    whole trace), as many as the LLC's share of the footprint, leave every epoch. A sampled
    trace's pages stand for ``footprint_bytes`` (default: its own pages, 4 KiB each)."""
    pages = trace.pages()
    footprint = footprint_bytes if footprint_bytes is not None else len(pages) * PAGE
    if llc_bytes < 0 or footprint < 0:
        raise ValueError("llc_bytes >= 0 and footprint_bytes >= 0")
    share = min(1.0, llc_bytes / footprint) if footprint else 1.0
    heat: dict[int, float] = {}
    for epoch in trace.epochs:
        for page, count in epoch.items():
            heat[page] = heat.get(page, 0) + count
    resident = set(sorted(heat, key=lambda p: (-heat[p], p))[:int(share * len(pages))])
    epochs = [{p: c for p, c in epoch.items() if p not in resident} for epoch in trace.epochs]
    return dataclasses.replace(trace, epochs=epochs)


@dataclass(frozen=True)
class Function:
    name: str
    boundness: float  # measured share of its time stalled on memory
    demand_gbps: float  # measured LLC-missing traffic when alone
    base_s: float = 1.0  # measured time alone on DRAM


@dataclass(frozen=True)
class Tiers:
    dram_gbps: float  # measured (STREAM triad)
    fast_ns: float  # measured (pointer chase)
    delta_ns: float = 70.0  # slow tier = fast + delta
    slow_bw_ratio: float = 0.5  # slow tier's bandwidth / DRAM's (an input: see caveats)


def queue(rho: float) -> float:
    """How much a load of ``rho`` stretches an access: 1 when idle, M/D/1 up to the knee,
    linear past it (continuous, and increasing everywhere)."""
    if rho < 0:
        raise ValueError("rho >= 0")
    at_knee = 1 + KNEE / (2 * (1 - KNEE))
    return 1 + rho / (2 * (1 - rho)) if rho <= KNEE else at_knee * rho / KNEE


def time_on(f: Function, tier: str, others_gbps: float, t: Tiers) -> float:
    if tier not in ("dram", "slow"):
        raise ValueError(f"tier: dram or slow, got {tier!r}")
    bandwidth = t.dram_gbps if tier == "dram" else t.dram_gbps * t.slow_bw_ratio
    latency = t.fast_ns if tier == "dram" else t.fast_ns + t.delta_ns
    stretch = latency * queue((f.demand_gbps + others_gbps) / bandwidth) / t.fast_ns
    return f.base_s * (1 + f.boundness * (stretch - 1))


def colocate(target: Function, neighbours: list[Function], tier: str, t: Tiers) -> dict:
    """``target``'s slowdown with ``neighbours`` on the same tier, against running alone on
    DRAM; ``alone`` is the same tier without neighbours."""
    reference = time_on(target, "dram", 0.0, t)
    alone = time_on(target, tier, 0.0, t)
    together = time_on(target, tier, sum(n.demand_gbps for n in neighbours), t)
    return {"tier": tier, "alone_slowdown": alone / reference - 1, "slowdown": together / reference - 1,
            "colocation_slowdown": together / alone - 1}
