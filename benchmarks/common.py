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
def scratch_cluster(src_root: Path | None = None, **overrides):
    """A fresh local cluster on free ports in a temporary state directory; always torn down.
    ``overrides`` set ClusterSpec fields (e.g. ``auth=None, isolation=False``).

    ``src_root``: run the cluster from another checkout's ``src/`` (a git worktree of an older
    commit, for a before/after comparison) instead of this one. Each call has its own state
    directory, and the launcher picks free ports while earlier clusters hold theirs, so two
    scratch clusters at once share neither."""
    sys.path.insert(0, str(ROOT / "src"))
    from nearfaas.cluster import launcher
    from nearfaas.spec.cluster import load_cluster

    with tempfile.TemporaryDirectory(prefix="nearfaas-bench-") as tmp:
        state = Path(tmp) / "state"
        spec = load_cluster(None)
        spec.gateway.port = 0
        for key, value in overrides.items():
            setattr(spec, key, value)
        if src_root is None:
            layout = launcher.up(spec, state)
            try:
                yield layout, state
            finally:
                launcher.down(state)
            return
        env = _env_for(Path(src_root))
        try:
            layout = _up_elsewhere(spec, Path(tmp), state, env)
            yield layout, state
        finally:
            # That code's own `down`; then ours, which sweeps by command line under the state dir,
            # in case the other version's `down` failed or left a process behind.
            subprocess.run([sys.executable, "-c", _CLI, "down", "--state", str(state)], env=env, cwd=tmp, capture_output=True)
            launcher.down(state)


# The CLI's entry point, called the same way in any version (older ones lack `python -m nearfaas.cli`).
_CLI = "from nearfaas.cli import main; main(prog_name='nearfaas')"


def _env_for(src_root: Path) -> dict:
    """The environment under which ``python`` imports nearfaas from ``src_root``. PYTHONPATH comes
    before site-packages, so it wins over this venv's editable install of /work/main/src; the
    launcher then hands its own src/ to every process it starts (launcher._child_env)."""
    env = {**os.environ, "PYTHONPATH": str(src_root.resolve())}
    found = subprocess.run([sys.executable, "-c", "import nearfaas; print(nearfaas.__file__)"], env=env, cwd="/",
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(src_root.resolve()):  # an import hook would beat PYTHONPATH
        raise RuntimeError(f"with PYTHONPATH={src_root}, python still imports nearfaas from {found}")
    return env


def _up_elsewhere(spec, tmp: Path, state: Path, env: dict) -> dict:
    """`nearfaas up` of the code on ``env``'s PYTHONPATH, with the fields of ``spec`` that differ from
    our defaults. Only those go in its cluster file: the other version fills in its own defaults,
    so a field added since then does not trip its strict parser."""
    from nearfaas.cluster import launcher
    from nearfaas.spec.cluster import ClusterSpec

    ours, default = spec.to_dict(), ClusterSpec().to_dict()
    changed = {}
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(default.get(key), dict):
            value = {k: v for k, v in value.items() if default[key].get(k) != v}
            if value:
                changed[key] = value
        elif value != default.get(key):
            changed[key] = value
    config = tmp / "cluster.yml"
    config.write_text(json.dumps(changed))  # JSON is YAML
    proc = subprocess.run([sys.executable, "-c", _CLI, "up", "-c", str(config), "--state", str(state)], env=env, cwd=tmp,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`nearfaas up` from {env['PYTHONPATH']} failed:\n{proc.stdout}{proc.stderr}")
    return launcher.read_layout(state)
