"""Particle sifting (issue 19): measured on a Ray cluster for 4-, 16- and 128-way splits, then
projected by the twin to 100 nodes and 10 M / 100 M / 1,000 M particles (modelled), the shape of
the thesis's Figs. 5.8-5.10. Method and labels: src/nearfaas/bench/sifting.py.

    python benchmarks/sifting.py                          # local Ray, 32 PEs, 2 M particles, 3 repeats (~10 min)
    python benchmarks/sifting.py --pes 128 --particles 4M # 128 PE actors (memory: ~100 MB each)
    python benchmarks/sifting.py --ray-address HOST:PORT  # a multi-node cluster
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
from nearfaas.bench import sifting
from nearfaas.bench.results import machine_facts, publish
from nearfaas.dataservices.sifting import Plan, SiftError


def count(text: str) -> int:
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    t = text.strip().upper()
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count; write e.g. 2M or 500K") from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--splits", default="4,16,128", help="comma-separated powers of two (default 4,16,128)")
    p.add_argument("--pes", type=int, default=32, help="PE actors (a power of two; default 32: 4-way takes 3 stages, 16-way 2, 128-way 1)")
    p.add_argument("--particles", type=count, default=2_000_000, help="particles per run (default 2M)")
    p.add_argument("--ranks", type=int, default=4, help="injecting ranks (default 4)")
    p.add_argument("--repeats", type=int, default=3, help="runs per split (default 3)")
    p.add_argument("--nodes", type=int, default=100, help="nodes the twin projects to (default 100)")
    p.add_argument("--ray-address", help="host:port of a running Ray cluster (default: a local one)")
    p.add_argument("--result-name", default="sifting")
    a = p.parse_args(argv)
    try:
        splits = [int(s) for s in a.splits.split(",") if s.strip()]
        for s in splits:
            Plan(a.pes, s, 1)
    except (ValueError, SiftError) as e:
        p.error(f"--splits/--pes: {e}")
    if a.repeats < 1 or a.ranks < 1 or a.nodes < 1 or a.particles < a.ranks:
        p.error("--repeats, --ranks, --nodes >= 1 and --particles >= --ranks")
    machine = machine_facts()
    try:
        result = sifting.run(splits, a.pes, a.particles, a.ranks, a.repeats, a.ray_address, a.nodes,
                             progress=lambda m: print(f"  {m}", flush=True))
    except SiftError as e:
        p.error(str(e))
    publish(a.result_name, result, machine, sifting.table(result), sifting.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
