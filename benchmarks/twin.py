#!/usr/bin/env python3
"""The rack-scale DES (twin/sim) at scale: >= 1,000,000 requests on 200 instances, every
placement through the live policy object. Reports wall time and events/s, and the wall time
of the whole ``nearfaas twin report``.

    python benchmarks/twin.py [--requests N] [--policy near-data] [--chains] [--quick]

Default cluster: 200 dscs storage nodes (one accelerator each: the 200 instances) and 50
compute nodes x 4 slots for fallbacks; single-stage acceleratable functions (one per app,
64 input objects each, replication 2) with exponential service (dscs 20 ms, cpu 40 ms); Poisson
arrivals at 20% of the accelerators' capacity with a 30 s burst at 1.5x.
``--chains`` runs the eight 3-stage DSCS chains instead (3 decisions per request).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.twin.sim import APP_KEYS, App, Function, SimConfig, Simulator, dscs_apps, poisson


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--policy", default="near-data")
    parser.add_argument("--storage", type=int, default=200)
    parser.add_argument("--compute", type=int, default=50)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--chains", action="store_true")
    parser.add_argument("--load", type=float, default=0.2, help="arrival rate / accelerator capacity")
    parser.add_argument("--quick", action="store_true", help="100,000 requests; the report at --quick size")
    parser.add_argument("--no-report", action="store_true", help="skip timing the full `nearfaas twin report`")
    args = parser.parse_args()
    n = 100_000 if args.quick else args.requests
    if args.chains:
        apps = dscs_apps()
    else:
        apps = {k: App(k, (Function(k.replace("_", "-"), "dscs", "auto"),)) for k in APP_KEYS}
    services = {}
    for app in apps.values():
        for f in app.functions:
            services[(f.name, "dscs")] = ("exp", 0.020)
            services[(f.name, "cpu")] = ("exp", 0.040)
    instances = args.storage  # one accelerator per dscs node: the 200 instances
    # Each request holds an accelerator once per acceleratable stage (f3 runs on compute nodes).
    capacity = instances / 0.020 / sum(f.accelerator == "dscs" for f in next(iter(apps.values())).functions)
    rate = args.load * capacity
    schedule = [(0.0, rate), (60.0, 1.5 * rate), (90.0, rate)]  # a 30 s burst at 1.5x
    cfg = SimConfig(storage_nodes=args.storage, compute_nodes=args.compute, compute_slots=args.slots, policy=args.policy,
                    apps=apps, services=services, keep_alive_s=60.0, objects_per_app=256, image_pull_s=0.5, model_load_s=1.0, bin_s=1.0, seed=1,
                    queue_in_view=True)  # a node's waiting calls count as its load, as in the report
    sim = Simulator(cfg)
    t0 = time.perf_counter()
    r = sim.run(poisson(schedule, 1e9, seed=1, max_requests=n))
    total = time.perf_counter() - t0
    out = {
        "requests": r.arrivals, "completed": r.completed, "rejected": r.rejected, "events": r.events,
        "wall_s": round(r.wall_s, 3), "wall_s_incl_summary": round(total, 3), "events_per_s": round(r.events_per_s),
        "requests_per_s_wall": round(r.arrivals / r.wall_s), "sim_time_s": round(r.sim_time_s, 3),
        "latency_s": r.latency, "cold_starts": r.cold_starts, "placements": r.placements,
        "cluster": {"dscs_storage_nodes": args.storage, "compute_nodes": args.compute, "slots": args.slots,
                    "accelerator_instances": instances, "cpu_slots": args.compute * args.slots, "load": args.load, "policy": args.policy, "chains": args.chains},
        "max_queue_len_binned": max(r.series["queue_len"], default=0.0),
        "labels": "simulated (modelled) latencies; wall time and events/s measured on this machine",
        "machine": machine_facts(),
    }
    if not args.no_report:
        out["twin_report"] = time_report(args.quick)
    # One result file per shape, so a --chains or --quick run never overwrites the default one.
    path = write_result("twin" + ("-chains" if args.chains else "") + ("-quick" if args.quick else ""), out)
    print(f"{r.arrivals:,} requests, {r.events:,} events in {r.wall_s:.2f} s wall ({r.events_per_s:,.0f} events/s); "
          f"simulated {r.sim_time_s:.1f} s, p50/p95/p99 {r.latency['p50']*1e3:.1f}/{r.latency['p95']*1e3:.1f}/"
          f"{r.latency['p99']*1e3:.1f} ms, rejected {r.rejected} -> {path}")
    if "twin_report" in out:
        rep = out["twin_report"]
        print(f"twin report ({rep['nodes']} nodes): {rep['wall_s']:.1f} s wall ({rep['build_s']:.1f} s building, {rep['render_s']:.1f} s "
              f"figures + HTML); rack simulation {rep['simulation_wall_s']}")
    return 0


def time_report(quick: bool) -> dict:
    """Wall time of the whole `nearfaas twin report` (build + render), measured."""
    import tempfile

    from nearfaas.twin import render, report

    t0 = time.perf_counter()
    results = report.build(quick=quick)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        render.write(results, d)
    t2 = time.perf_counter()
    return {"quick": quick, "nodes": results["inputs"]["nodes"], "wall_s": round(t2 - t0, 2), "build_s": round(t1 - t0, 2),
            "render_s": round(t2 - t1, 2),
            "simulation_wall_s": {p: round(r["wall_s"], 2) for p, r in results["simulation"]["runs"].items()},
            "simulation_requests": {p: r["arrivals"] for p, r in results["simulation"]["runs"].items()}}


if __name__ == "__main__":
    raise SystemExit(main())
