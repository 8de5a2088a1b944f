"""Porter's placement engine, the node's side (issue 18): before a profiled function's worker
starts, the node turns that function's earlier runs on this node into a hint file and gives the
worker its share of the node's DRAM budget; the shim inside the worker places each allocation
by it and migrates during the call (native/memshim/placement.c has the ladder). With a slow
NUMA node (``slow_node``) the pages really move; here, with one node, the decisions are
recorded (docs/memory.md).

    env |= prepare(log_dir, dram_bytes=node_budget() // (live_profiled_workers + 1), period_ms=50)

``prepare`` reads the newest ``RUNS`` logs (``profile.read_profiles``), ranks their call stacks
(``profile.hints``, the same tuner ``nearfaas memory hints`` shows) and writes
``<log_dir>/hints.txt``: one line per stack, ``<stack> <dram|slow> <confidence>``. A function
with no earlier run gets no hint file: every allocation starts on DRAM (the paper's default for
a new function), within the budget.

``profile.decisions(events)`` folds a run's placement lines (bytes placed fast and slow,
promotions, demotions): what ``/system/memory/{name}`` reports per run.

Known caveats:
* The budget is shared evenly among the node's live profiled workers at each start; a worker
  keeps the share it started with.
* Hints are per node: a function's runs on another node teach this node nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from nearfaas import atomic
from nearfaas.memory.profile import hints, read_profiles

HINT_FILE = "hints.txt"
RUNS = 4  # the newest runs a hint is learned from: recent behaviour, bounded work at each start


def node_budget() -> int:
    """The DRAM this node lends to placed functions: ``NEARFAAS_NODE_DRAM_BYTES``, else half of
    the machine's memory (the other half for everything unplaced: the OS, the store, the gateway)."""
    configured = os.environ.get("NEARFAAS_NODE_DRAM_BYTES")
    if configured:
        try:
            return max(0, int(configured))
        except ValueError:
            raise ValueError(f"NEARFAAS_NODE_DRAM_BYTES: a number of bytes, got {configured!r}") from None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 // 2
    return 0


def slow_node(root: Path = Path("/sys/devices/system/node")) -> int | None:
    """The NUMA node that is the slow tier: a memory-only node (no CPUs: how CXL memory shows
    up), else the highest-numbered of several; None with one node (here), when placements are
    only recorded."""
    try:
        nodes = sorted(int(d.name[4:]) for d in root.iterdir() if d.name.startswith("node") and d.name[4:].isdigit())
    except OSError:
        return None
    if len(nodes) < 2:
        return None
    memory_only = [n for n in nodes if not (root / f"node{n}" / "cpulist").read_text().strip()]
    return (memory_only or nodes)[-1]


def hint_lines(ranked: list[dict]) -> str:
    """The shim's hint file for ``profile.hints`` output."""
    return "".join(f"{h['stack']} {h['tier']} {h['confidence']:.2f}\n" for h in ranked)


def prepare(log_dir: Path, dram_bytes: int | None, period_ms: float, dram_share: float = 0.5) -> dict:
    """The environment that makes the shim place this worker's allocations: the hint file from
    the newest earlier runs in ``log_dir`` (none yet: no file) and the DRAM budget."""
    log_dir = Path(log_dir)
    logs = sorted(log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)[-RUNS:] if log_dir.is_dir() else []
    profiles = [r["profile"] for r in read_profiles(log_dir, period_ms, only=logs) if "profile" in r]
    env = {} if dram_bytes is None else {"NEARFAAS_MEMSHIM_DRAM_BYTES": str(max(0, int(dram_bytes)))}
    node = slow_node()
    if node is not None:  # two tiers for real: the shim binds and moves pages (mbind)
        env["NEARFAAS_MEMSHIM_SLOW_NODE"] = str(node)
    ranked = hints(profiles, dram_share) if profiles else []
    path = log_dir / HINT_FILE
    if ranked:
        # A worker starting meanwhile reads the old file or the new, never half. 0644 as before:
        # the shim in the worker reads it, possibly after the switch to the function's uid; the
        # node's 0700 log folder keeps other users from reaching it.
        atomic.write_text(path, hint_lines(ranked), 0o644, durable=False)
        env["NEARFAAS_MEMSHIM_HINTS"] = str(path)
    return env
