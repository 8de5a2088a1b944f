"""A function's memory profile and Porter's offline tuner: the shim's logs (memory/shim.py)
folded per call stack, and a hint per stack: which tier its allocations belong on.

``summarize(events)`` → per stack: allocations, bytes, the pages its blocks span and how many
of them were accessed (or written, without an access sample) per sampling period (the heat). ``hints(profiles, dram_share)`` ranks stacks
by heat per page (writes per page per period) and puts the hottest on DRAM until they fill
``dram_share`` of the footprint; each hint carries the share of profiled runs that agree with it
(its confidence), and the size classes seen. Hints are keyed by stack alone: a doubled input
moves a block to another size class but not to another call site (Porter's "resistance to
payload changing").

Worked example: one run, stack A's 100 pages written in every one of 10 periods (heat 1.0),
stack B's 300 pages written in 1 period (heat 0.1); dram_share 0.5 of 400 pages → A (100
pages) on DRAM, B does not fit in the remaining 100 → slow; confidence 1.0 for both.

Known caveats:
* Heat is from the access sample (reads and writes of a spatial sample of pages, re-armed a
  budget at a time) where the log has one, else from writes alone (every page written, reads
  unseen: a log from a shim with access sampling off).
* A stack allocating many small blocks and one that allocates one big block weigh by pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pathlib import Path

from nearfaas.memory.shim import ALLOCATES, DEFAULT_MAX_BYTES, PAGE, Event, LogError, log_full, read_log


MAX_LOG_BYTES = DEFAULT_MAX_BYTES  # what the shim writes at most; a larger file is read that far


@dataclass
class StackProfile:
    stack: str
    allocations: int = 0
    bytes: int = 0
    pages: int = 0
    written_page_periods: int = 0  # sum over periods of this stack's pages written in it
    sampled_pages: set = field(default_factory=set)  # its pages in the access sample (armed)
    accessed_page_periods: int = 0  # sampled pages seen read or written, summed over periods
    size_classes: tuple = ()

    @property
    def heat(self) -> float:
        """Accesses per sampled page where the log has an access sample, else writes per page."""
        if self.sampled_pages:
            return self.accessed_page_periods / len(self.sampled_pages)
        return self.written_page_periods / self.pages if self.pages else 0.0

    def to_dict(self, periods: int) -> dict:
        return {"stack": self.stack, "allocations": self.allocations, "bytes": self.bytes, "pages": self.pages,
                "written_page_periods": self.written_page_periods, "sampled_pages": len(self.sampled_pages),
                "accessed_page_periods": self.accessed_page_periods,
                "heat": self.heat / periods if periods else 0.0, "size_classes": list(self.size_classes)}


def size_class(nbytes: int) -> int:
    """log2 bucket: 2^k <= nbytes < 2^(k+1)."""
    return max(0, int(nbytes).bit_length() - 1)


def summarize(events: list[Event], period_ms: float) -> dict:
    """One run's profile: {stacks: [...], periods, footprint_pages, label}."""
    stacks: dict[str, StackProfile] = {}
    for e in events:
        if e.op in ALLOCATES:
            s = stacks.setdefault(e.stack, StackProfile(e.stack))
            s.allocations += 1
            s.bytes += e.size
            s.pages += max(1, -(-e.size // PAGE))
            s.size_classes = tuple(sorted(set(s.size_classes) | {size_class(e.size)}))
        elif e.op == "touch":
            stacks.setdefault(e.stack, StackProfile(e.stack)).written_page_periods += max(1, e.size // PAGE)
        elif e.op == "arm":
            stacks.setdefault(e.stack, StackProfile(e.stack)).sampled_pages.update(range(e.addr // PAGE, (e.addr + e.size) // PAGE))
        elif e.op == "access":
            s = stacks.setdefault(e.stack, StackProfile(e.stack))
            s.accessed_page_periods += 1
            s.sampled_pages.add(e.addr // PAGE)
    seen = [e.t_ns for e in events if e.op in ("touch", "access")]
    periods = int((max(seen) - min(seen)) / (period_ms * 1e6)) + 1 if seen else 0
    sampled = any(s.sampled_pages for s in stacks.values())
    return {"stacks": [s.to_dict(periods) for s in sorted(stacks.values(), key=lambda s: -s.heat)],
            "periods": periods, "footprint_pages": sum(s.pages for s in stacks.values()),
            "heat_from": "accesses (reads and writes), a sample of pages" if sampled else "writes, every page",
            "label": "measured: allocations logged by the shim; heat = pages "
                     + ("accessed per sampled page" if sampled else "written per page") + " per sampling period"}


def decisions(events: list[Event]) -> dict:
    """A run's placement (native/memshim/placement.c's lines): bytes placed on each tier at
    allocation, and the moves after."""
    out = {"fast_bytes": 0, "slow_bytes": 0, "promotions": 0, "demotions": 0, "promoted_bytes": 0, "demoted_bytes": 0}
    for e in events:
        if e.op in ("fast", "slow"):
            out[f"{e.op}_bytes"] += e.size
        elif e.op in ("promote", "demote"):
            out[f"{e.op}d_bytes"] += e.size
            out["promotions" if e.op == "promote" else "demotions"] += 1
    out["placed"] = bool(out["fast_bytes"] or out["slow_bytes"])
    return out


def hints(profiles: list[dict], dram_share: float = 0.5) -> list[dict]:
    """Porter's hint per stack from one or more runs' profiles (``summarize``): tier ``dram`` or
    ``slow`` and the share of runs that agree (confidence), hottest stacks first."""
    if not 0.0 <= dram_share <= 1.0:
        raise ValueError(f"dram_share: a share of the footprint between 0 and 1, got {dram_share}")
    votes: dict[str, list[str]] = {}
    seen: dict[str, dict] = {}
    for prof in profiles:
        budget = dram_share * prof["footprint_pages"]
        for s in sorted(prof["stacks"], key=lambda s: (-s["heat"], s["stack"])):
            fits = s["heat"] > 0 and s["pages"] <= budget
            if fits:
                budget -= s["pages"]
            votes.setdefault(s["stack"], []).append("dram" if fits else "slow")
            agg = seen.setdefault(s["stack"], {"heat": 0.0, "pages": 0, "size_classes": set()})
            agg["heat"] = max(agg["heat"], s["heat"])
            agg["pages"] = max(agg["pages"], s["pages"])
            agg["size_classes"] |= set(s["size_classes"])
    out = []
    for stack, v in votes.items():
        tier = max(("dram", "slow"), key=v.count)
        out.append({"stack": stack, "tier": tier, "confidence": v.count(tier) / len(v), "runs": len(v),
                    "heat": seen[stack]["heat"], "pages": seen[stack]["pages"],
                    "size_classes": sorted(seen[stack]["size_classes"])})
    return sorted(out, key=lambda h: (-h["heat"], h["stack"]))


def read_profiles(folder: Path, period_ms: float, only: list[Path] | None = None) -> list[dict]:
    """Each ``<instance>.log`` in ``folder`` (or just ``only``) summarized: [{instance, bytes,
    profile | error}]."""
    out = []
    logs = only if only is not None else sorted(Path(folder).glob("*.log")) if Path(folder).is_dir() else []
    for log in logs:
        entry = {"instance": log.stem, "bytes": log.stat().st_size}
        try:
            events = read_log(log, MAX_LOG_BYTES)
            entry["profile"] = summarize(events, period_ms)
            entry["placement"] = decisions(events)
            entry["truncated"] = entry["bytes"] > MAX_LOG_BYTES or log_full(log)
        except (LogError, OSError) as exc:
            entry["error"] = str(exc)
        out.append(entry)
    return out


def simulate_runs(folder: Path, period_ms: float, delta_ns: float, dram_share: float, boundness: float,
                  fast_ns: float = 200.0) -> list[dict]:
    """Every tier policy over each ``<instance>.log`` in ``folder`` (memory/tiersim.py): the
    run's access sample (or sampled writes) as the trace, its logged
    span as the all-DRAM time, Porter's hint learned from the *other* runs when there are any
    (from this run alone otherwise, and said)."""
    from nearfaas.memory import tiersim
    from nearfaas.memory.shim import to_trace

    traces = {}
    for log in sorted(Path(folder).glob("*.log")) if Path(folder).is_dir() else []:
        try:
            events = read_log(log, MAX_LOG_BYTES)
        except (LogError, OSError):
            continue
        if events:
            span = max(1e-9, (events[-1].t_ns - events[0].t_ns) / 1e9)
            traces[log.stem] = to_trace(events, period_ms, base_s=span, boundness=boundness)
    out = []
    for name, trace in traces.items():
        others = [t for n, t in traces.items() if n != name]
        learned = tiersim.hint(_union(others)) if others else tiersim.hint(trace)
        cfg = tiersim.TierConfig(dram_pages=int(dram_share * len(trace.pages())), delta_ns=delta_ns, fast_ns=fast_ns)
        results = {p: tiersim.simulate(trace, p, cfg, learned if p.startswith("porter") else None) for p in tiersim.POLICIES}
        out.append({"instance": name, "footprint_pages": len(trace.pages()), "epochs": len(trace.epochs),
                    "hint_from": "other runs" if others else "this run (only one profiled)",
                    "policies": {p: {"slowdown": r.slowdown, "slow_tier_bytes_share": r.slow_tier_page_share}
                                 for p, r in results.items()}})
    return out


def _union(traces: list):
    """One trace holding every run's owners and epochs (for a hint learned from several runs)."""
    from nearfaas.memory.tiersim import Trace

    owner, epochs = {}, []
    for i, t in enumerate(traces):
        shift = i << 40  # runs' pages never collide: each run's addresses are its own
        owner |= {p + shift: o for p, o in t.owner.items()}
        epochs += [{p + shift: n for p, n in e.items()} for e in t.epochs]
    return Trace(epochs=epochs, owner=owner)
