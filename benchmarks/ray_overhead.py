"""What running the cluster on Ray adds to a call (issue 24): the same warm no-op workload, side
by side, on the process backend (`nearfaas up`) and on the Ray backend (`nearfaas up --ray`),
both secured (auth and isolation on), on this machine. Ray must stay off the request path: its
actors only supervise the same node and gateway processes, and the gateway asks Ray where its
nodes are in the background, so the target is a warm p50 within 10% of the process backend's.

The Ray cluster is started here: one raylet (`ray start --head --block`, token authentication)
offering every node's resource, so both backends run the same three nodes on one host. Runs
are interleaved (each system once per round) so that drift in the shared machine's speed lands
on both alike. Measured, not modelled; the result JSON has the machine's facts.

    python benchmarks/ray_overhead.py [--duration 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before Ray is imported: the cluster below uses a token
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from invoke_overhead import _deploy_hello, warm_calls

from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.load import generator
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.cluster import launcher
from nearfaas.spec.cluster import load_cluster

TARGET_OVERHEAD = 0.10
RESOURCES = {"nearfaas_storage_dscs": 1, "nearfaas_storage": 1, "nearfaas_compute": 1}


def start_ray(logs: Path) -> tuple[subprocess.Popen, str]:
    port = launcher._free_port("127.0.0.1", floor=20_000)
    ray_bin = Path(sys.executable).with_name("ray")
    with open(logs / "ray.log", "w") as out:
        proc = subprocess.Popen([str(ray_bin), "start", "--head", f"--port={port}", "--include-dashboard=false", "--num-cpus=1",
                                 "--disable-usage-stats", f"--resources={json.dumps(RESOURCES)}", "--block"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"Ray did not start; see {logs / 'ray.log'}") from None
            time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"load generator: {generator()}")
    scratch = Path(tempfile.mkdtemp(prefix="nearfaas-ray-overhead-"))
    ray_proc, address = start_ray(scratch)
    state = scratch / "ray-state"
    spec = load_cluster(None)
    spec.gateway.port = 0
    spec.ray.data_dir = str(scratch / "ray-data")
    started = time.monotonic()
    try:
        ray_layout = launcher.up(spec, state, ray_address=address)
        ray_up_s = time.monotonic() - started
        with scratch_cluster() as (layout, _):
            admin, ray_admin = launcher.admin_headers(layout), launcher.admin_headers(ray_layout)
            systems = {"process/gateway": (f"{layout['gateway_url']}/function/hello", {}),
                       "ray/gateway": (f"{ray_layout['gateway_url']}/function/hello", {})}
            _deploy_hello(layout["gateway_url"], admin)
            _deploy_hello(ray_layout["gateway_url"], ray_admin)
            print("warm no-op calls through the gateway (measured):")
            warm = warm_calls(systems, args.duration, args.repeats)
    finally:
        launcher.down(state)
        os.killpg(ray_proc.pid, signal.SIGTERM)
        try:
            ray_proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(ray_proc.pid, signal.SIGKILL)
    overhead = {f"@{c}": {"p50": warm[f"ray/gateway@{c}"]["p50_ms"] / warm[f"process/gateway@{c}"]["p50_ms"] - 1,
                          "p99": warm[f"ray/gateway@{c}"]["p99_ms"] / warm[f"process/gateway@{c}"]["p99_ms"] - 1,
                          "rps": warm[f"ray/gateway@{c}"]["rps"] / warm[f"process/gateway@{c}"]["rps"] - 1} for c in (1, 8)}
    worst = max(overhead["@1"]["p50"], overhead["@8"]["p50"])
    target = {"target": f"<= {TARGET_OVERHEAD:.0%} on warm p50", "measured": worst, "met": worst <= TARGET_OVERHEAD}
    result = {"benchmark": "ray_overhead", "label": "measured", "load_generator": generator(), "duration_s": args.duration,
              "repeats": args.repeats, "machine": machine_facts(), "ray_backend_up_s": ray_up_s,
              "configurations": {"process": "nearfaas up (processes on this host)",
                                 "ray": "nearfaas up --ray (one raylet on this host offering every node's resource)"},
              "warm": warm, "ray_vs_process": overhead, "target": target}
    path = write_result("ray_overhead", result)
    for clients, o in overhead.items():
        print(f"Ray vs process {clients} client(s): warm p50 {o['p50']:+.1%}, p99 {o['p99']:+.1%}, req/s {o['rps']:+.1%}")
    print(f"target: Ray adds {target['target']}: measured {worst:+.1%} -> {'MET' if target['met'] else 'MISSED'}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
