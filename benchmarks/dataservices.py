#!/usr/bin/env python3
"""Offload or push back, side by side (the thesis's Ch. 5.4, Table 5.9): always-offload,
always-push-back, the decision engine and the oracle (each query measured both ways) over random
template queries T1-T10 on particle tables of 10^4-10^7 rows, under the dc-25g and s3-like link
profiles; the storage node is a worker process capped at --storage-cpus cores by a cgroup.
Method, and which numbers are measured or modelled: src/nearfaas/bench/dataservices.py.

    python benchmarks/dataservices.py [--quick] [--queries N] [--max-rows R] [--storage-cpus C] [--seed S]
                                      [--samples N] [--cfs-period-us P]
        -> benchmarks/results/dataservices.json (+ dataservices.png); $NEARFAAS_BENCH_RESULTS redirects
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench import dataservices, dataservices_report
from nearfaas.bench.results import machine_facts, write_result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tables up to 10^6 rows, 100 queries unless --queries")
    parser.add_argument("--queries", type=int, help="random template queries (default 300; 100 with --quick)")
    parser.add_argument("--max-rows", type=float, default=10**7, help="largest table (default 1e7)")
    parser.add_argument("--storage-cpus", type=float, default=0.5, help="the storage node's CPU cap in cores (default 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cfs-period-us", type=int, default=dataservices.PERIOD_US,
                        help=f"the cap's CFS period (default {dataservices.PERIOD_US}, the nodes' own: node/capacity.py)")
    parser.add_argument("--samples", type=int, default=300, help="cost-model training samples, when models must be trained")
    args = parser.parse_args(argv)
    if args.queries is not None and args.queries < 1:
        parser.error("--queries must be at least 1")
    if args.max_rows < 10**4:
        parser.error("--max-rows must be at least 10000")
    if args.storage_cpus * args.cfs_period_us < 1000 or not 1000 <= args.cfs_period_us <= 1_000_000:
        parser.error("the CFS quota (--storage-cpus x --cfs-period-us) and the period must be 1 ms at least (period <= 1 s)")
    machine = machine_facts()
    result = dataservices.run(args.quick, queries=args.queries, max_rows=int(args.max_rows), storage_cpus=args.storage_cpus,
                              seed=args.seed, samples=args.samples, period_us=args.cfs_period_us,
                              progress=lambda msg: print(f"  {msg}", flush=True))
    result["machine"] = machine
    print(dataservices_report.table(result))
    print(json.dumps(dataservices_report.headline(result), indent=1))
    path = write_result("dataservices", result)
    png = dataservices_report.plot(result, path.with_suffix(".png"))
    print(f"wrote {path}" + (f" and {png}" if png else " (no plot: matplotlib is not installed)")
          + f"  ({result['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
