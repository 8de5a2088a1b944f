"""Where benchmark results go and what every result file says about the machine it came from.

Results are only comparable with the machine facts beside them (a shared 2-core VM one day, a
quiet one the next), so every benchmark writes ``machine_facts()`` into its JSON.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The checkout this package was imported from: benchmarks/ scripts put their own src/ first on
# sys.path, so a run from a second worktree writes into that worktree's results.
ROOT = Path(__file__).resolve().parents[3]


def results_dir() -> Path:
    """``$NEARFAAS_BENCH_RESULTS`` (a smoke run that must not touch the committed numbers), else
    benchmarks/results/ of this checkout."""
    return Path(os.environ.get("NEARFAAS_BENCH_RESULTS") or ROOT / "benchmarks" / "results")


def _first(path: str, prefix: str, pick) -> str:
    try:
        with open(path) as f:
            return next(pick(line) for line in f if line.startswith(prefix))
    except (OSError, StopIteration):
        return ""


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def machine_facts() -> dict:
    cpu = _first("/proc/cpuinfo", "model name", lambda line: line.split(":", 1)[1].strip())
    mem_kib = int(_first("/proc/meminfo", "MemTotal", lambda line: line.split()[1]) or 0)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu_model": cpu, "cpu_count": os.cpu_count(), "memory_gib": round(mem_kib / 1024**2, 1),
        "kernel": platform.release(), "python": platform.python_version(), "machine": platform.machine(),
        "aiohttp": _version("aiohttp"), "boto3": _version("boto3"), "git_commit": commit,
        "loadavg_at_start": os.getloadavg(), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_result(name: str, result: dict) -> Path:
    """``result`` as ``<results>/<name>.json``; its path."""
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def publish(name: str, result: dict, machine: dict, text: str, plot=None) -> Path:
    """The end of every benchmark script: machine facts in, the table printed, the JSON written,
    the PNG drawn beside it (``plot(result, path)``, when given), and where they went."""
    result["machine"] = machine
    print(text)
    path = write_result(name, result)
    png = plot(result, path.with_suffix(".png")) if plot else None
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return path
