#!/usr/bin/env python3
"""Do the replicas behave like one object store? A Jepsen-style run (all numbers measured here).

Two phases on a fresh local cluster (2 storage nodes, replication factor 2):

  same-key   W writers PUT the same key at once, R rounds, for 1 KiB and 1 MiB bodies; after
             each round: do both replicas hold the same bytes, and does the gateway return the
             write that was acknowledged last?
  faults     writers, deleters and readers on K keys while storage nodes are SIGKILLed and
             restarted, or SIGSTOPped and resumed; every operation is recorded and the history
             is judged by a last-writer-wins checker (nearfaas.bench.history): lost, stale and
             resurrected keys, and replicas that differ after healing.

    python benchmarks/consistency.py [--ops 2000] [--faults 6] [--rounds 100] [--quick]

This is the acceptance harness of issue 13; until that issue lands it measures the gaps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.jepsen import BUCKET, Cluster, faults_run, same_key
from nearfaas.bench.results import machine_facts, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--faults", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=100, help="same-key rounds per body size")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 ops, 2 faults, 10 rounds")
    args = parser.parse_args()
    if args.quick:
        args.ops, args.faults, args.rounds = 300, 2, 10
    with scratch_cluster() as (layout, state):
        cluster = Cluster(layout, state)
        cluster.gateway().create_bucket(Bucket=BUCKET)
        print("same-key writers (measured):", flush=True)
        hot = []
        for size in (1024, 1 << 20):
            hot.append(r := same_key(cluster, 4, args.rounds, size))
            print(f"  {size:>8} B: replicas differ in {r['replicas_diverged_rounds']}/{r['rounds']} rounds, "
                  f"read != last acknowledged in {r['read_not_last_acknowledged_rounds']}/{r['rounds']} "
                  f"(client threads noted the last two answers in the other order in "
                  f"{r['client_thread_order_differs_rounds']} rounds, at most {r['client_thread_order_gap_ms_max']} ms apart)",
                  flush=True)
        print(f"faults: at least {args.ops} operations, {args.faults} faults (measured):", flush=True)
        run = faults_run(cluster, args.ops, args.keys, args.faults, args.seed)
        print(f"  lost {run['lost']}, stale {run['stale']}, resurrected {run['resurrected']}, diverged {run['diverged']} "
              f"(of {run['ops']} operations, {run['acknowledged_writes']} acknowledged writes; {run['unknown_outcomes']} unknown outcomes; "
              f"{len(run['faults'])} faults in {run['seconds']} s)", flush=True)
    path = write_result("consistency", {"benchmark": "consistency", "label": "measured", "machine": machine_facts(),
                                        "args": vars(args), "same_key": hot, "faults": run})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
