#!/usr/bin/env python3
"""Near-data vs compute-only placement over emulated links, side by side in one run.

    python benchmarks/placement.py [--quick]     (also: nearfaas bench placement [--quick] [--json])
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.placement import run
from nearfaas.bench.results import machine_facts, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two sizes, one link profile")
    args = parser.parse_args()
    result = run(args.quick, progress=lambda msg: print(f"  {msg}", flush=True))
    result["machine"] = machine_facts()
    for profile, sizes in result["results"].items():
        for size, policies in sizes.items():
            nd, co = policies["near-data"], policies["compute-only"]
            print(f"{profile:>8} {int(size) // 1024:>7} KiB  near-data p50 {nd['p50_ms']:8.1f} ms (link {nd['link_bytes'] / 1e6:7.2f} MB)"
                  f"  compute-only p50 {co['p50_ms']:8.1f} ms (link {co['link_bytes'] / 1e6:7.2f} MB, data share {co['data_share']:.0%})"
                  f"  speedup {co['p50_ms'] / nd['p50_ms']:.2f}x")
    print(f"wrote {write_result('placement', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
