#!/usr/bin/env python3
"""Wall time of the full DSA design-space sweep vs one SCALE-Sim run (our model is modelled; the times are measured).

One run of `nearfaas.hw.dse.sweep` over the default space (690 distinct configurations: arrays
4..1024 x 4..1024 in powers of two, 64/256/1024 B of SRAM per PE capped at 32 MiB, DDR4/DDR5/HBM2)
x the eight zoo models (`shapes_only(key, "full")`, batch 1, 14 nm, 1 GHz, int8), timed with
`time.perf_counter` in three parts: importing the eight graphs once, the sweep itself, and writing
the CSVs and Pareto PNGs to benchmarks/results/dse/. Next to it: the wall time of ONE SCALE-Sim
3.0.0 run of one layer set (the first 10 ResNet-50 layers, 128x128 OS), read from
tests/data/scalesim/reference.json "timing" (measured on this machine kind; SCALE-Sim is not
rerun here), and the speed ratios. Result: benchmarks/results/dse.json with machine facts.

    python benchmarks/dse.py [--budget-w 25]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.results import ROOT, machine_facts, results_dir, write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-w", type=float, default=25.0)
    args = ap.parse_args()
    facts = machine_facts()

    from nearfaas.hw import dse

    configs = dse.default_space()
    t0 = time.perf_counter()
    sks = dse.load_skeletons(dse.ZOO)
    t1 = time.perf_counter()
    res = dse.sweep(configs, dse.ZOO, args.budget_w, skeletons=sks)
    t2 = time.perf_counter()
    files = dse.write_outputs(res, results_dir() / "dse")
    t3 = time.perf_counter()

    ref = json.loads((ROOT / "tests/data/scalesim/reference.json").read_text())["timing"]["resnet50_first10"]
    sweep_s, total_s = t2 - t1, t3 - t0
    layers = sum(len(sk.groups) for sk in sks.values())
    gemms = sum(len(g.gemms) for sk in sks.values() for g in sk.groups)
    keep = ("config_id", "name", "power_w", "peak_accel_w", "max_accel_w", "max_dram_w", "area_mm2", "geomean_inferences_per_s")
    result = {
        "label": "sweep wall times measured on this machine; every DSE number (latency, power, area) is modelled",
        "machine": facts,
        "sweep": {
            "configs": len(configs),
            "models": list(dse.ZOO),
            "points": len(res.points),
            "fused_layers_per_config": layers,
            "gemms_per_config": gemms,
            "budget_w": args.budget_w,
            "power_metric": res.power,
            "import_s": round(t1 - t0, 3),
            "sweep_s": round(sweep_s, 3),
            "outputs_s": round(t3 - t2, 3),
            "total_wall_s": round(total_s, 3),
            "per_point_ms": round(1e3 * sweep_s / len(res.points), 4),
            "target_s": 60,
            "meets_target": total_s < 60,
        },
        "scalesim": {
            "source": "tests/data/scalesim/reference.json timing.resnet50_first10 (measured here earlier, not rerun)",
            "what": f"one SCALE-Sim {json.loads((ROOT / 'tests/data/scalesim/reference.json').read_text())['scalesim_version']} run: "
            f"{ref['layers']} ResNet-50 layers, {ref['array'][0]}x{ref['array'][1]} {ref['dataflow']}",
            "wall_s": ref["wall_s"],
            "scalesim_run_s": ref["scalesim_run_s"],
        },
        "ratio": {
            "scalesim_one_run_over_full_sweep": round(ref["wall_s"] / total_s, 2),
            "scalesim_one_run_over_one_point": round(ref["wall_s"] / (sweep_s / len(res.points)), 0),
            "note": "one SCALE-Sim run times 10 layers on one config; one sweep point times a whole model (57-545 fused layers) on one config",
        },
        "optimum": {k: res.optimum[k] for k in keep} if res.optimum else None,
        "reason": res.reason,
        "optimum_per_budget": {b: ({k: o[k] for k in keep} if o else None) for b, o in res.budgets.items()},
        "power_frontier": [{k: r[k] for k in keep} for r in res.power_frontier],
        "area_frontier": [{k: r[k] for k in keep} for r in res.area_frontier],
        # Relative to the checkout, unless $NEARFAAS_BENCH_RESULTS put them elsewhere.
        "files": {k: str(Path(v).relative_to(ROOT) if Path(v).is_relative_to(ROOT) else v) for k, v in files.items()},
    }
    path = write_result("dse", result)
    print(json.dumps({k: result[k] for k in ("sweep", "scalesim", "ratio")}, indent=2))
    print(f"optimum: {res.optimum['name'] if res.optimum else None} — {res.reason}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
