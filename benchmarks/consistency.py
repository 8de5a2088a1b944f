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
import os
import random
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_facts, scratch_cluster, write_result

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
from nearfaas.bench.history import ABSENT, Op, check
from nearfaas.cluster import launcher
from nearfaas.gateway.replicas import StorageNode, replicas_for

BUCKET = "jepsen"


def _client(url: str, access: str, secret: str, timeout: float = 5.0):
    import boto3

    return boto3.client("s3", endpoint_url=url, aws_access_key_id=access, aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                      connect_timeout=timeout, read_timeout=timeout))


class Cluster:
    def __init__(self, layout: dict, state: Path):
        self.layout, self.state = layout, state
        keys = layout["auth"]
        self.gateway = lambda: _client(layout["gateway_url"], keys["access_key"], keys["secret_key"])
        self.storage = [n for n in layout["nodes"] if n["kind"] == "storage"]
        self.ring = [StorageNode(n["name"], n["class"]) for n in self.storage]

    def node_client(self, name: str):
        url = next(n["url"] for n in self.storage if n["name"] == name)
        return _client(url, INTERNAL_ACCESS_KEY, self.layout["internal_secret"])

    def pid(self, name: str) -> int:
        return next(p["pid"] for p in launcher.read_layout(self.state)["processes"] if p["name"] == name)

    def replica_values(self, key: str) -> list:
        names = [n.name for n in replicas_for(self.ring, BUCKET, key, 2, dscs_replica=True)]
        return [_read(self.node_client(name), key)[1] for name in names]


def _read(client, key: str) -> tuple[bool | None, str | None]:
    try:
        return True, client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return True, ABSENT
        return False, None
    except BotoCoreError:
        return None, None


def _write(client, key: str, value: str | None) -> bool | None:
    """True acknowledged, False refused with an answer (no effect promised), None unknown."""
    try:
        if value is None:
            client.delete_object(Bucket=BUCKET, Key=key)
        else:
            client.put_object(Bucket=BUCKET, Key=key, Body=value.encode())
        return True
    except ClientError as exc:
        return None if exc.response["ResponseMetadata"].get("HTTPStatusCode", 500) >= 500 else False
    except BotoCoreError:
        return None


def same_key(cluster: Cluster, writers: int, rounds: int, size: int) -> dict:
    """Concurrent writers to one key; per round: replicas identical? read == last acknowledged?"""
    key = f"hot-{size}"
    clients = [cluster.gateway() for _ in range(writers)]
    reader = cluster.gateway()
    diverged = not_last = 0
    def put(i: int, r: int, barrier: threading.Barrier, acks: list) -> None:
        value = f"r{r:03d}-w{i}-" + "x" * max(0, size - 16)
        barrier.wait()
        if _write(clients[i], key, value):
            acks.append((time.monotonic(), value[:16]))

    for r in range(rounds):
        barrier, acks = threading.Barrier(writers), []
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(lambda i, r=r, b=barrier, a=acks: put(i, r, b, a), range(writers)))
        replicas = [v[:16] if v else v for v in cluster.replica_values(key)]
        diverged += len(set(replicas)) > 1
        read = _read(reader, key)[1]
        not_last += bool(acks) and (read or "")[:16] != max(acks)[1]
    return {"size": size, "rounds": rounds, "writers": writers, "replicas_diverged_rounds": diverged,
            "read_not_last_acknowledged_rounds": not_last}


def faults_run(cluster: Cluster, ops: int, keys: int, faults: int, seed: int) -> dict:
    rng = random.Random(seed)
    names = [f"k{i:03d}" for i in range(keys)]
    history: list[Op] = []
    lock = threading.Lock()
    done = threading.Event()  # set once `ops` operations ran and the nemesis is through
    issued = [0]
    injected: list[dict] = []

    def worker(role: str, wid: int):
        client = cluster.gateway()
        local = random.Random(seed * 100 + wid)
        n = 0
        while not done.is_set():
            with lock:
                issued[0] += 1
            key = local.choice(names)
            start = time.monotonic()
            if role == "reader":
                ok, value = _read(client, key)
                op = Op("get", key, start, time.monotonic(), ok, value)
            else:
                value = None if role == "deleter" else f"{role[0]}{wid}-{n}"
                n += 1
                op = Op("put" if value else "delete", key, start, 0.0, None, value)
                op.ok = _write(client, key, value)
                op.end = time.monotonic()
            with lock:
                history.append(op)

    def nemesis():
        for _ in range(faults):
            time.sleep(rng.uniform(0.8, 1.6))
            node = rng.choice(cluster.storage)["name"]
            kind = rng.choice(["kill", "stop"])
            pid = cluster.pid(node)
            t0 = time.monotonic()
            if kind == "kill":
                os.kill(pid, signal.SIGKILL)
                time.sleep(rng.uniform(0.5, 1.5))
                launcher.restart_node(cluster.state, node)
            else:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 3.0))
                os.kill(pid, signal.SIGCONT)
            injected.append({"fault": kind, "node": node, "seconds": round(time.monotonic() - t0, 2)})

    roles = ["writer"] * 4 + ["deleter"] + ["reader"] * 2
    started = time.monotonic()
    with ThreadPoolExecutor(len(roles) + 1) as pool:
        chaos = pool.submit(nemesis)
        workers = [pool.submit(worker, role, i) for i, role in enumerate(roles)]
        chaos.result()
        while issued[0] < ops:
            time.sleep(0.05)
        done.set()
        for f in workers:
            f.result()
    elapsed = time.monotonic() - started
    time.sleep(2.0)  # every node is back: let the gateway's health polls see it
    gateway = cluster.gateway()
    final = {k: _read(gateway, k)[1] for k in names}
    replicas = {k: cluster.replica_values(k) for k in names}
    verdict = check(history, final, replicas)
    return {"ops": len(history), "keys": keys, "seconds": round(elapsed, 1), "faults": injected,
            "unknown_outcomes": sum(1 for o in history if o.ok is None), **verdict.counts(),
            "examples": {"lost": verdict.lost[:5], "resurrected": verdict.resurrected[:5], "stale": verdict.stale[:5],
                         "diverged": verdict.diverged[:5]}}


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
                  f"read != last acknowledged in {r['read_not_last_acknowledged_rounds']}/{r['rounds']}", flush=True)
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
