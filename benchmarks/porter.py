"""Porter (issue 18): the allocation shim's and the access sampler's overhead on six workloads,
the tier simulator's calibration, each workload's memory-boundness, and every tier policy over
each workload's own trace. Method and which numbers are measured or modelled:
src/nearfaas/bench/porter.py.

    python benchmarks/porter.py              # all workloads, 5 repeats, cachegrind (~10 min)
    python benchmarks/porter.py --quick      # 2 workloads, 3 repeats
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
from nearfaas.bench import porter, porter_plots
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.bench import memory_workloads as workloads


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="pagerank and html, 3 repeats")
    p.add_argument("--workloads", default=",".join(workloads.NAMES),
                   help="comma-separated, from: " + ", ".join((*workloads.NAMES, *workloads.NATIVE)) + " (the native GAP-style kernels "
                        "are not in the default: at --scale 4 their graphs take 2.4 GB)")
    p.add_argument("--scale", type=float, default=1.0, help="input multiplier (default 1)")
    p.add_argument("--repeats", type=int, default=None, help="runs of each variant (default 5; 3 with --quick)")
    p.add_argument("--sample-ms", type=int, default=50, help="access-sampling period (default 50)")
    p.add_argument("--dram-share", type=float, default=0.5, help="DRAM cap as a share of the footprint (default 0.5)")
    p.add_argument("--no-cachegrind", action="store_true", help="skip the memory-boundness measurement (and the simulation)")
    p.add_argument("--result-name", default="porter",
                   help="write benchmarks/results/NAME.json and its figures (default porter; a partial run "
                        "under another name keeps the full one)")
    a = p.parse_args(argv)
    names = ["pagerank", "html"] if a.quick else [n.strip() for n in a.workloads.split(",") if n.strip()]
    bad = [n for n in names if n not in workloads.NAMES and n not in workloads.NATIVE]
    if bad:
        p.error(f"unknown workload {bad[0]!r}; choose from {', '.join((*workloads.NAMES, *workloads.NATIVE))}")
    if not 0 < a.scale <= 16:
        p.error("--scale in (0, 16]")
    if not a.result_name.replace("_", "").replace("-", "").isalnum():
        p.error("--result-name: letters, digits, - and _ only")
    repeats = a.repeats or (3 if a.quick else 5)
    if repeats < 1 or not 1 <= a.sample_ms <= 1000 or not 0 < a.dram_share < 1:
        p.error("--repeats >= 1, --sample-ms in 1..1000 and --dram-share in (0, 1)")
    machine = machine_facts()
    result = porter.run(names, scale=a.scale, repeats=repeats, sample_ms=a.sample_ms, dram_share=a.dram_share,
                        cachegrind=not a.no_cachegrind, progress=lambda m: print(f"  {m}", flush=True))
    result["machine"] = machine
    print(porter.table(result))
    print(json.dumps(result["summary"], indent=1))
    path = write_result(a.result_name, result)
    pngs = [png for png in (porter_plots.slowdowns(result, path.with_suffix(".png")),
                            porter_plots.heat_maps(result, path.with_name(path.stem + "_heat.png")),
                            porter_plots.colocation(result, path.with_name(path.stem + "_colocation.png"))) if png]
    print(f"wrote {path}" + "".join(f" and {png}" for png in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
