"""Bitar (issue 19): (de)serialization with Arrow's inner LZ4/Zstd vs Bitar's outer DEFLATE on
ISA-L, libdeflate and the modelled BlueField-2 engine, on the three synthetic particle datasets,
side by side — the shape of the thesis's Tables 5.1-5.2 and Fig. 5.4. Method and labels:
src/nearfaas/bench/bitar.py.

    python benchmarks/bitar.py                 # 64 MB tables, 5 repeats (~3 min)
    python benchmarks/bitar.py --size 8MB --repeats 3
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
from nearfaas.bench import bitar
from nearfaas.bench.results import machine_facts, publish
from nearfaas.dataservices import datasets

UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 64MB or 1GB")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=size, default=datasets.DEFAULT_BYTES, help="table size per dataset (default 64MB, max 1GB)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of each variant (default 5)")
    p.add_argument("--datasets", default=",".join(datasets.NAMES), help="comma-separated, from: " + ", ".join(datasets.NAMES))
    p.add_argument("--result-name", default="bitar", help="write benchmarks/results/NAME.json and NAME.png")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.datasets.split(",") if n.strip()]
    if any(n not in datasets.NAMES for n in names) or not names:
        p.error(f"--datasets: choose from {', '.join(datasets.NAMES)}")
    if a.repeats < 1 or not 1 <= a.size <= datasets.MAX_BYTES:
        p.error("--repeats >= 1 and --size up to 1GB")
    machine = machine_facts()
    result = bitar.run(names, a.size, a.repeats, progress=lambda m: print(f"  {m}", flush=True))
    between = json.dumps({r["dataset"]: r["deflate_between_lz4_and_zstd"] for r in result["datasets"]})
    publish(a.result_name, result, machine, bitar.table(result) + "\nDEFLATE ratio between LZ4 and Zstd: " + between, bitar.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
