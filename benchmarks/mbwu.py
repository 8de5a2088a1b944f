"""MBWU (issue 20; thesis section 3.1): RocksDB as a nearfaas function under YCSB-A, on a
storage node and on the compute node, in the integrated, network and disaggregated landscapes,
normalised to the disk's own MBWU. Method and caveats: src/nearfaas/bench/mbwu.py.

    python benchmarks/mbwu.py               # 500k records, 10 s x 3 repeats (~8 min)
    python benchmarks/mbwu.py --quick       # 50k records, 3 s x 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
from nearfaas.bench import mbwu
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.econ.mbwu import load_profile

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "econ" / "platforms.yml"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--link", default="dc-25g")
    p.add_argument("--profile", type=Path, default=PROFILE, help="platform cost/power/volume inputs (YAML)")
    a = p.parse_args(argv)
    records = a.records or (50_000 if a.quick else 500_000)
    seconds = a.seconds or (3.0 if a.quick else 10.0)
    repeats = a.repeats or (1 if a.quick else 3)
    try:
        platforms = load_profile(a.profile)
    except ValueError as exc:
        p.error(str(exc))
    machine = machine_facts()
    result = mbwu.run(records=records, seconds=seconds, repeats=repeats, link=a.link, platforms=platforms,
                      progress=lambda m: print(f"  {m}", flush=True))
    result["machine"], result["profile"] = machine, {"path": str(a.profile), "label": "inputs, not measured"}
    print(mbwu.table(result))
    path = write_result("mbwu", result)
    png = mbwu.plot(result, path.with_suffix(".png"))
    print(json.dumps({k: {"mbwus": v["mbwus"], "usd_cut": v.get("usd_per_mbwu_reduction_pct")} for k, v in result["landscapes"].items()}))
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
