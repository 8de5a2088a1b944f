"""A profiled worker's memory shim (``x-nearfaas.memory.profile``): its environment and placement.

Why a module of its own: profiling reaches into memory/shim.py and memory/placement.py, which
no other start needs; the pool asks here and gets environment variables back.

The shim (memory/shim.py) is preloaded into the worker, its log in this node's state (opened by
the shim before the worker enters its jail, which hides that folder); write sampling starts once
the worker is jailed (a threaded process cannot enter a mount namespace). A profiled worker is
always spawned: a pre-warmed one started without the shim.

Known caveats: refuses (503) when the shim is not built on this node.
"""

from __future__ import annotations

from pathlib import Path

from nearfaas.node.pool_error import PoolError


def memory_log_dir(node_dir: Path, name: str) -> Path:
    """Where the allocation logs of ``name``'s profiled workers go (one file per instance)."""
    return node_dir / "memory" / name


def shim_env(spec: dict, node: str, node_dir: Path, instance: str) -> dict | None:
    """The shim's variables for a new worker of ``spec``; None when it is not profiled."""
    from nearfaas.memory import shim

    memory = (spec.get("x") or {}).get("memory") or {}
    if not memory.get("profile"):
        return None
    try:
        log_dir = memory_log_dir(node_dir, spec["name"])
        log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return dict(shim.shim_env(log_dir / f"{instance}.log", base={}, sample_ms=int(memory.get("sample_ms", 50))),
                    NEARFAAS_MEMSHIM_DEFER="1")
    except shim.ShimUnavailable as exc:
        raise PoolError(f"cannot profile {spec['name']!r} on {node}: {exc}", status=503) from None


def placement(spec: dict, node: str, node_dir: Path, live: int) -> dict:
    """The shim's placement inputs (memory/placement.py): the hint file from the function's
    newest runs on this node, and an even share of the node's DRAM budget among its ``live``
    profiled workers and this one. Reads logs: call it off the event loop."""
    from nearfaas.memory import placement as plc

    memory = (spec.get("x") or {}).get("memory") or {}
    try:
        budget = plc.node_budget()
    except ValueError as exc:
        raise PoolError(f"cannot place {spec['name']!r}'s memory on {node}: {exc}", status=503) from None
    return plc.prepare(memory_log_dir(node_dir, spec["name"]), budget // (live + 1), period_ms=float(memory.get("sample_ms") or 50))
