"""Shared pieces of the benchmarks: machine facts, percentiles, result files, a scratch cluster."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def machine_facts() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    from importlib.metadata import version

    return {
        "cpu_model": cpu, "cpu_count": os.cpu_count(), "memory_gib": round(mem_kib / 1024**2, 1),
        "kernel": platform.release(), "python": platform.python_version(), "machine": platform.machine(),
        "aiohttp": version("aiohttp"), "boto3": version("boto3"), "git_commit": commit,
        "loadavg_at_start": os.getloadavg(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


@contextlib.contextmanager
def scratch_cluster(**overrides):
    """A fresh local cluster on free ports in a temporary state directory; always torn down.
    ``overrides`` set ClusterSpec fields (e.g. ``auth=None, isolation=False``)."""
    sys.path.insert(0, str(ROOT / "src"))
    from nearfaas.cluster import launcher
    from nearfaas.spec.cluster import load_cluster

    with tempfile.TemporaryDirectory(prefix="nearfaas-bench-") as tmp:
        state = Path(tmp) / "state"
        spec = load_cluster(None)
        spec.gateway.port = 0
        for key, value in overrides.items():
            setattr(spec, key, value)
        layout = launcher.up(spec, state)
        try:
            yield layout, state
        finally:
            launcher.down(state)
