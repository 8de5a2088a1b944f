#!/usr/bin/env python3
"""Cold starts with and without pre-warmed generic workers, side by side in one run (measured).

Two clusters run at once, identical but for `nodes[].prewarm` (1 vs 0). Each sample scales the
no-op `examples/hello` to zero, waits for the node to settle (with prewarm on: until its
generic worker is idle again, the steady state being measured), then calls it: the call pays
a cold start. Samples alternate between the two clusters, round after round, so drift in this
shared machine's speed lands on both alike.

Reported per system: the node-measured cold start (from the start request to the worker's
READY: spawn or specialise, handler import, init(), bind) and the whole cold call seen by the
client, p50 and p95 over every sample, plus each round's p50.

    python benchmarks/cold_start.py [--rounds 5] [--per-round 6]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.results import ROOT, machine_facts, write_result
from nearfaas.stats import median, percentile
from nearfaas.cluster import launcher
from nearfaas.spec.bundle import pack
from nearfaas.spec.cluster import NodeSpec, ReplicationSpec

SYSTEMS = {"prewarm-on": 1, "prewarm-off": 0}


def _get(url: str, headers: dict):
    return json.loads(urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10).read())


def _post(url: str, body: dict, headers: dict) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    urllib.request.urlopen(req, timeout=30).read()


def cluster(prewarm: int):
    """A small cluster (one dscs storage node, one compute node) on free ports, always torn down."""
    nodes = [NodeSpec("storage-0", "storage", "dscs", prewarm=prewarm), NodeSpec("compute-0", "compute", "cpu", prewarm=prewarm)]
    return scratch_cluster(nodes=nodes, replication=ReplicationSpec(factor=1))


class System:
    def __init__(self, name: str, layout: dict):
        self.name, self.gw, self.nodes = name, layout["gateway_url"], [n["url"] for n in layout["nodes"]]
        self.layout, self.admin = layout, launcher.admin_headers(layout)
        self.cold_ms: list[float] = []
        self.call_ms: list[float] = []
        self.prewarmed: list[bool] = []
        self.rounds: list[dict] = []

    def deploy(self) -> None:
        _post(f"{self.gw}/system/functions", {"service": "hello", "lang": "python3-http", "bundle": pack(ROOT / "examples" / "hello"),
                                              "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}}, self.admin)
        self._wait(lambda: _get(f"{self.gw}/system/function/hello", self.admin)["availableReplicas"] >= 1, "hello to warm up")

    def _wait(self, done, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: timed out waiting for {what}")
            time.sleep(0.02)

    def _settled(self) -> bool:
        for url in self.nodes:
            health = self._health(url)
            if any(w["function"] == "hello" for w in health["workers"]):
                return False
            pool = health.get("prewarm") or {}
            if pool.get("idle", 0) < pool.get("target", 0) or pool.get("starting", 0):
                return False
        return True

    def _health(self, url: str) -> dict:
        return json.loads(launcher.signed_get(self.layout, f"{url}/_nearfaas/health", timeout=10))  # signed, as the gateway asks

    def sample(self) -> None:
        _post(f"{self.gw}/system/scale-function/hello", {"replicas": 0}, self.admin)
        self._wait(lambda: _get(f"{self.gw}/system/function/hello", self.admin)["availableReplicas"] == 0, "scale to zero")
        self._wait(self._settled, "the nodes to settle")
        time.sleep(0.1)  # let the exited worker's clean-up finish before the clock starts
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{self.gw}/function/hello", timeout=60) as resp:
            resp.read()
            self.call_ms.append((time.perf_counter() - t0) * 1e3)
            assert resp.headers["X-Nearfaas-Start"] == "cold", dict(resp.headers)
        worker = next(w for url in self.nodes for w in self._health(url)["workers"] if w["function"] == "hello")
        self.cold_ms.append(worker["cold_start_seconds"] * 1e3)
        self.prewarmed.append(bool(worker.get("prewarmed")))

    def end_round(self, first: int) -> None:
        self.rounds.append({"cold_start_p50_ms": median(self.cold_ms[first:]), "cold_call_p50_ms": median(self.call_ms[first:])})

    def summary(self) -> dict:
        return {"samples": len(self.cold_ms), "prewarmed_samples": sum(self.prewarmed),
                "cold_start_p50_ms": percentile(self.cold_ms, 50), "cold_start_p95_ms": percentile(self.cold_ms, 95),
                "cold_call_p50_ms": percentile(self.call_ms, 50), "cold_call_p95_ms": percentile(self.call_ms, 95),
                "rounds": self.rounds, "cold_start_samples_ms": [round(x, 2) for x in self.cold_ms],
                "cold_call_samples_ms": [round(x, 2) for x in self.call_ms]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=6, help="cold starts per system in each round")
    args = parser.parse_args()
    machine = machine_facts()
    with contextlib.ExitStack() as stack:
        systems = [System(name, stack.enter_context(cluster(prewarm))[0]) for name, prewarm in SYSTEMS.items()]
        for system in systems:
            system.deploy()
        for r in range(args.rounds):
            first = len(systems[0].cold_ms)
            for _ in range(args.per_round):
                for system in systems:
                    system.sample()
            for system in systems:
                system.end_round(first)
            print(f"round {r + 1}: " + ", ".join(f"{s.name} cold start p50 {s.rounds[-1]['cold_start_p50_ms']:.1f} ms" for s in systems),
                  flush=True)
    results = {s.name: s.summary() for s in systems}
    on, off = results["prewarm-on"], results["prewarm-off"]
    for name, r in results.items():
        print(f"{name:<12} cold start p50 {r['cold_start_p50_ms']:.1f} ms, p95 {r['cold_start_p95_ms']:.1f} ms; "
              f"cold call p50 {r['cold_call_p50_ms']:.1f} ms, p95 {r['cold_call_p95_ms']:.1f} ms "
              f"({r['prewarmed_samples']}/{r['samples']} prewarmed)")
    ratios = {"cold_start_p50_off_over_on": off["cold_start_p50_ms"] / on["cold_start_p50_ms"],
              "cold_call_p50_off_over_on": off["cold_call_p50_ms"] / on["cold_call_p50_ms"]}
    print(f"prewarm cuts the cold start p50 {ratios['cold_start_p50_off_over_on']:.1f}x and the cold call p50 "
          f"{ratios['cold_call_p50_off_over_on']:.1f}x")
    path = write_result("cold_start", {"benchmark": "cold_start", "label": "measured", "function": "examples/hello",
                                       "rounds": args.rounds, "per_round": args.per_round, "machine": machine,
                                       "systems": results, "ratios": ratios})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
