"""Porter's tier model checked by experiment: DRAM latency raised by a co-runner on the other core,
measured by a pointer chase, and each graph kernel's measured slowdown beside the model's
prediction from its measured memory-boundness. Method: src/nearfaas/bench/porter_latency.py.

    python benchmarks/porter_latency.py                         # native PageRank and BFS, 2^20 vertices, 3 rounds
    python benchmarks/porter_latency.py --scale 1 --rounds 5    # 2^22 vertices
    python benchmarks/porter_latency.py --workloads native-pagerank,pagerank --no-boundness
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
from nearfaas.bench import memory_workloads as workloads
from nearfaas.bench import porter_latency
from nearfaas.bench.results import machine_facts, write_result


def table(rec: dict) -> str:
    lines = [f"{'workload':<16} {'step':>5} {'latency ns':>10} {'Δ ns':>7} {'measured':>9} {'predicted':>9} {'rel err':>8}"]
    for r in rec["rows"]:
        pred = "-" if r["predicted_slowdown"] is None else f"{r['predicted_slowdown'] * 100:+.1f}%"
        err = "-" if r["relative_error"] is None else f"{r['relative_error'] * 100:+.0f}%"
        lines.append(f"{r['workload']:<16} {r['step_pct']:>4}% {r['latency_ns']:>10.1f} {r['delta_ns']:>7.1f} "
                     f"{r['measured_slowdown'] * 100:>+8.1f}% {pred:>9} {err:>8}")
    return "\n".join(lines) + "\n(latency, slowdown: measured; predicted: modelled, tiersim.slowdown with the measured boundness)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = (*workloads.NATIVE, "pagerank", "bfs")
    p.add_argument("--workloads", default="native-pagerank,native-bfs", help="comma-separated, from: " + ", ".join(names))
    p.add_argument("--scale", type=float, default=0.25, help="input multiplier (native: 2^(22 + log2 scale) vertices; default 0.25)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over every step (default 3)")
    p.add_argument("--steps", default=",".join(map(str, porter_latency.STEPS)), help="co-runner duty cycles in %%, 0 first (default 0,30,60,100)")
    p.add_argument("--no-boundness", action="store_true", help="skip the cache simulation (no predictions)")
    p.add_argument("--co-runner", choices=("nt", "rw"), default="nt",
                   help="nt: non-temporal stores, leaves the LLC alone (default); rw: reads and writes through the caches")
    p.add_argument("--result-name", default="porter_latency", help="write benchmarks/results/NAME.json (default porter_latency)")
    a = p.parse_args(argv)
    chosen = [n.strip() for n in a.workloads.split(",") if n.strip()]
    bad = [n for n in chosen if n not in names]
    if bad:
        p.error(f"--workloads: unknown {bad[0]!r}; choose from {', '.join(names)}")
    try:
        steps = tuple(int(s) for s in a.steps.split(","))
    except ValueError:
        p.error("--steps: comma-separated integers, e.g. 0,30,60,100")
    if steps[0] != 0 or any(not 0 <= s <= 100 for s in steps) or len(set(steps)) != len(steps):
        p.error("--steps: distinct duty cycles 0..100, starting with 0 (the run without a co-runner)")
    if a.rounds < 1 or not 0 < a.scale <= 16:
        p.error("--rounds >= 1 and --scale in (0, 16]")
    if not a.result_name.replace("_", "").replace("-", "").isalnum():
        p.error("--result-name: letters, digits, - and _ only")
    machine = machine_facts()
    rec = porter_latency.run(tuple(chosen), scale=a.scale, rounds=a.rounds, steps=steps, boundness=not a.no_boundness,
                             mode=a.co_runner, progress=lambda m: print(f"  {m}", flush=True))
    rec["machine"] = machine
    print(table(rec))
    path = write_result(a.result_name, rec)
    print(f"wrote {path}")
    print(json.dumps({"within_target": [r["within_target"] for r in rec["rows"]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
