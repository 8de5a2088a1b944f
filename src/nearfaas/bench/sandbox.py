"""What the confinement of issue 39 costs a Python function (the default seccomp profile,
node/seccomp.py, then each worker's own network namespace, node/netns.py, with the node's relays,
node/netrelay.py): warm invoke p50 and cold start, before (the commit before the change measured,
``BEFORE``, run from a ``git archive`` of it through ``scratch_cluster(src_root=...)``) and after
(this checkout), on two private clusters
with the defaults (auth on, isolation on) side by side, measured alternately so that the load of
a shared machine falls on both alike.

- warm: ``ROUNDS`` rounds of ``WARM_CALLS`` sequential ``POST /function/<echo>`` per cluster;
  p50 of all calls (wall time at the client, through the gateway);
- cold: ``COLD`` times per cluster, a fresh function name is deployed and called until its
  first 200 (deploy -> first answer: spawn or pre-warmed specialisation, jail, profile, import);
  reported apart for the two ways a worker starts (a pre-warmed one answers within
  ``PREWARMED_BELOW_S``; a spawned one imports the runtime first), whose mix varies by run;
- spawned: ``COLD`` more per cluster with a start-up variable set (``SPAWN_ENV``), so every one
  spawns a fresh interpreter: the spawned path's cost on its own, not a mix.

Usage: ``python -m nearfaas.bench.sandbox [BEFORE_COMMIT]`` -> benchmarks/results/sandbox_cost.json.

Known caveats: on a shared 2-core VM the spread between runs is larger than the cost measured
here; read the difference together with the micro measurements of ``seccomp.apply()`` itself
(``apply_ms``) and of ``netns.enter`` (``netns_enter_ms``: unshare, ``lo`` up, the serving socket
and one forward listener), which are the whole of what they add to a cold start in the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.results import ROOT, machine_facts, publish

BEFORE = "70bfb07"  # the last commit before issue 39's confinement (seccomp was 75ee1f8^, the netns 1efd68a^)
PROFILES = {"70bfb07": "all of issue 39's worker confinement: jailed_start (-P), seccomp profile, own network and IPC "
                       "namespaces with the node's relays, private /var/tmp",
            "1efd68a^": "node/netns.py + node/netrelay.py (loopback-only network namespace, node relays; after the seccomp profile)"}
ROUNDS, WARM_CALLS, COLD = 6, 100, 16
PREWARMED_BELOW_S = 0.3  # a cold start this fast took a pre-warmed worker; slower ones spawned one
SPAWN_ENV = {"LC_ALL": "C"}  # a variable read at interpreter start: the node spawns (node/prewarm.py, both versions)
HANDLER = "def handle(event, context):\n    return event.body\n"


def _deploy(layout: dict, folder: Path, name: str, env: dict | None = None) -> float:
    import requests

    from nearfaas.client import gateway_session
    from nearfaas.spec.bundle import pack

    gw = layout["gateway_url"]
    started = time.perf_counter()
    gateway_session(layout=layout).post(f"{gw}/system/functions", timeout=30, json={
        "service": name, "lang": "python3-http", "bundle": pack(folder), **({"envVars": env} if env else {})}).raise_for_status()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = requests.post(f"{gw}/function/{name}", data=b"x", timeout=30)
        if r.status_code == 200:
            return time.perf_counter() - started
        time.sleep(0.002)
    raise RuntimeError(f"{name} never answered")


def _remove(layout: dict, name: str) -> None:
    from nearfaas.client import gateway_session

    gateway_session(layout=layout).delete(f"{layout['gateway_url']}/system/functions", json={"functionName": name}, timeout=30)


def _warm(session, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = session.post(url, data=b"x", timeout=30)
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, r.text
    return out


def _in_child_ms(step, n: int, prepare=lambda: None) -> list[float]:
    """Milliseconds ``step()`` takes, each time in a fresh forked child after ``prepare()`` (what
    they change — a seccomp filter, a network namespace — must not stay on this process)."""
    out = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            prepare()
            t = time.perf_counter()
            step()
            os.write(w, str((time.perf_counter() - t) * 1000).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        out.append(float(os.read(r, 64)))
        os.close(r)
    return out


def _apply_ms(n: int = 30) -> list[float]:
    """``seccomp.apply()`` alone, after NNP (as in the jail)."""
    from nearfaas.node import seccomp

    return _in_child_ms(seccomp.apply, n, prepare=lambda: ctypes.CDLL(None).prctl(38, 1, 0, 0, 0))  # 38: PR_SET_NO_NEW_PRIVS


def _netns_ms(n: int = 30) -> list[float]:
    """``netns.enter`` alone (root), with one forward listener."""
    from nearfaas.node import netns

    with tempfile.TemporaryDirectory(prefix="nf-netns-") as folder:
        plan = {"serve": f"{folder}/serve.sock", "forward": [{"host": "127.0.0.1", "port": 8080, "socket": f"{folder}/x"}]}
        return _in_child_ms(lambda: netns.enter(plan), n)


def main(before: str = BEFORE) -> Path:
    import requests

    with tempfile.TemporaryDirectory(prefix="nf-before-") as tmp, contextlib.ExitStack() as stack:
        src = Path(tmp) / "src"
        archive = subprocess.run(["git", "archive", before, "src"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", before], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        clusters = {"before": stack.enter_context(scratch_cluster(src_root=src)), "after": stack.enter_context(scratch_cluster())}
        folder = Path(tmp) / "echo"
        folder.mkdir()
        (folder / "handler.py").write_text(HANDLER)
        warm = {k: [] for k in clusters}
        cold = {k: [] for k in clusters}
        spawned = {k: [] for k in clusters}
        for k, (layout, _) in clusters.items():
            cold[k].append(_deploy(layout, folder, "sbx-warm"))  # not counted below: first deploy warms caches
        sessions = {k: requests.Session() for k in clusters}
        for i in range(ROUNDS):
            for k, (layout, _) in (clusters.items() if i % 2 == 0 else reversed(clusters.items())):
                url = f"{layout['gateway_url']}/function/sbx-warm"
                _warm(sessions[k], url, 10)  # settle
                warm[k] += _warm(sessions[k], url, WARM_CALLS)
        for k in clusters:
            cold[k] = []
        for i in range(COLD):
            for k, (layout, _) in (clusters.items() if i % 2 == 0 else reversed(clusters.items())):
                name = f"sbx-cold-{i}"
                cold[k].append(_deploy(layout, folder, name))
                _remove(layout, name)
        for i in range(COLD):  # forced spawns: a start-up variable makes the node start a fresh interpreter
            for k, (layout, _) in (clusters.items() if i % 2 == 0 else reversed(clusters.items())):
                name = f"sbx-spawn-{i}"
                spawned[k].append(_deploy(layout, folder, name, SPAWN_ENV))
                _remove(layout, name)
        apply_ms = _apply_ms()
        netns_ms = _netns_ms()
    p50 = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    result = {
        "label": "measured", "before_commit": commit, "profile": PROFILES.get(before, f"everything between {commit} and this checkout"),
        "warm_p50_ms": {k: round(p50(v), 3) for k, v in warm.items()},
        "warm_p90_ms": {k: round(statistics.quantiles(v, n=10)[8] * 1000, 3) for k, v in warm.items()},
        "warm_calls": {k: len(v) for k, v in warm.items()},
        "cold_start_p50_ms": {k: round(p50(v), 1) for k, v in cold.items()},
        # the two ways a worker starts, apart: their mix differs from run to run (pre-warm refill)
        "cold_prewarmed_p50_ms": {k: round(p50([x for x in v if x < PREWARMED_BELOW_S] or [0]), 1) for k, v in cold.items()},
        "cold_spawned_p50_ms": {k: round(p50([x for x in v if x >= PREWARMED_BELOW_S] or [0]), 1) for k, v in cold.items()},
        "cold_start_all_ms": {k: [round(x * 1000, 1) for x in v] for k, v in cold.items()},
        # every one of these spawned a fresh interpreter (SPAWN_ENV), so none is a pre-warmed start
        "cold_forced_spawn_p50_ms": {k: round(p50(v), 1) for k, v in spawned.items()},
        "cold_forced_spawn_all_ms": {k: [round(x * 1000, 1) for x in v] for k, v in spawned.items()},
        "apply_ms": {"p50": round(statistics.median(apply_ms), 3), "max": round(max(apply_ms), 3), "n": len(apply_ms)},
        "netns_enter_ms": {"p50": round(statistics.median(netns_ms), 3), "max": round(max(netns_ms), 3), "n": len(netns_ms)},
    }
    result["warm_p50_change_pct"] = round((result["warm_p50_ms"]["after"] / result["warm_p50_ms"]["before"] - 1) * 100, 1)
    for kind in ("prewarmed", "spawned", "forced_spawn"):
        got = result[f"cold_{kind}_p50_ms"]
        result[f"cold_{kind}_added_ms"] = round(got["after"] - got["before"], 1)
    text = "\n".join(f"{k}: {v}" for k, v in result.items())
    return publish("sandbox_cost", result, machine_facts(), text)


if __name__ == "__main__":
    main(*sys.argv[1:2])
