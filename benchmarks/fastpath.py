#!/usr/bin/env python3
"""The fast path (a software λ-NIC) against λ-NIC's baselines, side by side in one run
(all numbers measured here): the executor with wasm and native lambdas, B1 forking and B2
threading Python UDP servers, B3 the nearfaas gateway to a warm Python worker.

    python benchmarks/fastpath.py [--quick]     -> benchmarks/results/fastpath.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.fastpath import run
from nearfaas.bench.results import machine_facts, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat (< 60 s)")
    args = parser.parse_args()
    machine = machine_facts()
    result = run(args.quick, progress=lambda msg: print(f"  {msg}", flush=True))
    result["machine"] = machine
    print("targets (not asserted; measured on this machine):")
    for name, t in result["targets"].items():
        m = t["measured"]
        verdict = "n/a" if t["met"] is None else ("MET" if t["met"] else "MISSED")
        print(f"  {name:<52} target {t['target']:>8}  measured {m if m is None else round(m, 2)!s:>10}  {verdict}")
    print(f"wrote {write_result('fastpath', result)}  ({result['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
