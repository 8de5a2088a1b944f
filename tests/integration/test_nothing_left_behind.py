"""A test run stopped mid-way leaves nothing behind (tests/conftest.py, tests/helpers/reaper.py).

A real integration module runs under its own pytest; once its cluster (or its Ray cluster) is
up, the run gets SIGTERM, as a CI time-out sends, or SIGKILL, which no handler sees. Before the
signal the test records what the run has: the processes in its cgroups, its cgroups, the mounts
under its folders, the network namespaces, its Ray sessions. After it, none may be left, and
the run's watchdog must have written its report.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import reaper

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
# What a mid-run snapshot must show before the signal: the module's cluster is up.
LOCAL = ("tests/integration/test_prewarm.py", lambda cmds: any("nearfaas.gateway.app" in c for c in cmds)
         and sum("nearfaas.runtime.prewarm" in c for c in cmds) >= 2)
# Both raylets joined: the run is past ray.init (interrupting Ray's C++ client mid-connect can
# abort the driver, which the watchdog then cleans up after).
RAY = ("tests/integration/test_sift_ray.py", lambda cmds: sum("raylet/raylet " in c for c in cmds) >= 2)


def _groups_of(pid: int) -> list[str]:
    """The run's group in every hierarchy reaper.py uses, with everything below it."""
    found = []
    for hierarchy, own in reaper._own_groups().items():
        top = os.path.join(hierarchy, own.lstrip("/"), f"{reaper.PREFIX}{pid}")
        if os.path.isdir(top):
            found.extend(reaper._tree(top))
    return found


def _snapshot(pid: int, folders: list[str], ray_glob: str) -> dict:
    groups = _groups_of(pid)
    pids = set().union(*(reaper._pids_in(g) for g in groups)) if groups else set()
    pids = {p for p in pids if reaper._alive(p)}
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split() if os.geteuid() == 0 else []
    return {"processes": {p: " ".join(reaper._cmdline(p)) for p in pids},
            "cgroups": groups,
            "mounts": reaper._mounts_under(folders),
            "netns": sorted(n for n in netns if n.startswith("nearfaas")),
            "ray_sessions": sorted(glob.glob(ray_glob))}


def _wait_for(predicate, what: str, timeout: float, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            raise AssertionError(f"the run ended before {what}: rc {proc.returncode}\n{out[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout:g}s")


@pytest.mark.skipif(os.geteuid() != 0, reason="the run's cgroups need root; without them only the command-line sweep runs")
@pytest.mark.parametrize("module,ready,signum", [(*LOCAL, signal.SIGTERM), (*LOCAL, signal.SIGKILL), (*RAY, signal.SIGTERM)],
                         ids=["cluster-sigterm", "cluster-sigkill", "ray-sigterm"])
def test_a_run_stopped_mid_way_leaves_nothing_behind(module, ready, signum):
    with tempfile.TemporaryDirectory(prefix="nflb-", dir="/tmp") as short:  # the fast path's socket path must fit 107 bytes
        _stop_and_check(Path(short) / "bt", module, ready, signum)


def _stop_and_check(basetemp: Path, module: str, ready, signum: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_TMPDIR", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", module,
                             f"--basetemp={basetemp}"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    ray_glob = f"/tmp/nfray-{proc.pid}-*/ray/session_2*"
    try:
        def mid_run():
            snap = _snapshot(proc.pid, [str(basetemp)], ray_glob)
            return snap if ready(list(snap["processes"].values())) else None

        before = _wait_for(mid_run, f"{module}'s cluster", 150, proc)
        os.kill(proc.pid, signum)
        out, _ = proc.communicate(timeout=120)
        report_path = basetemp / "reaper.json"
        deadline = time.monotonic() + 90  # the watchdog writes it once the run is gone and its sweep is done
        while not report_path.exists():
            assert time.monotonic() < deadline, "the watchdog wrote no report"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = _snapshot(proc.pid, [str(basetemp)], ray_glob)
    report = json.loads(report_path.read_text())
    print(json.dumps({"signal": signal.Signals(signum).name, "module": module, "rc": proc.returncode, "report": reaper.summary(report),
                      "before": {k: len(v) for k, v in before.items()}, "after": {k: len(v) for k, v in after.items()}}))
    assert before["processes"] and before["cgroups"]
    if module == RAY[0]:
        assert before["ray_sessions"], "Ray kept no session in the run's RAY_TMPDIR"
    still = {p: c for p, c in before["processes"].items() if reaper._alive(p)}
    assert not still, f"left running: {still}"
    assert after == {"processes": {}, "cgroups": [], "mounts": [], "netns": before["netns"], "ray_sessions": []}, after
    assert not glob.glob(f"/tmp/nfray-{proc.pid}-*"), "the run's Ray temp folder (and its ray_current_cluster) was left"
    if signum == signal.SIGTERM and module == LOCAL[0]:  # an orderly stop: the fixtures took the cluster down themselves
        assert proc.returncode == 2, out.decode(errors="replace")[-20000:]
        assert report["killed"] == [] and report["killed_by_command_line"] == [], report
    else:  # nothing in the run saw the signal: the watchdog stopped what was running
        assert report["killed"], report
