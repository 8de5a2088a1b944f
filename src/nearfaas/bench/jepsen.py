"""The Jepsen-style consistency harness (issue 13): concurrent writers, deleters and readers
against a live local cluster, with storage nodes SIGKILLed / SIGSTOPped underneath, every
operation recorded and judged by the last-writer-wins checker (bench/history.py).

Used by ``benchmarks/consistency.py`` (the full run, numbers in benchmarks/results/) and by
``tests/integration/test_consistency.py`` (the acceptance checks, smaller).

Everything it reports is measured on the cluster it is pointed at.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
from nearfaas.bench.cluster import s3_client
from nearfaas.bench.history import ABSENT, Op, check
from nearfaas.cluster import launcher
from nearfaas.placement.replicas import StorageNode, replicas_for

BUCKET = "jepsen"


class Cluster:
    """A running local cluster, as the harness drives it: gateway clients, node clients (with
    the cluster secret, to look at each replica directly) and the node processes' pids."""

    def __init__(self, layout: dict, state: Path):
        self.layout, self.state = layout, state
        keys = layout["auth"]
        # 5 s: a call to a SIGSTOPped node must end as an unknown outcome, not stall the run.
        self.gateway = lambda: s3_client(layout["gateway_url"], keys["access_key"], keys["secret_key"], timeout=5.0)
        self.storage = [n for n in layout["nodes"] if n["kind"] == "storage"]
        self.ring = [StorageNode(n["name"], n["class"]) for n in self.storage]

    def node_client(self, name: str):
        url = next(n["url"] for n in self.storage if n["name"] == name)
        return s3_client(url, INTERNAL_ACCESS_KEY, self.layout["internal_secret"], timeout=5.0)

    def pid(self, name: str) -> int:
        return next(p["pid"] for p in launcher.read_layout(self.state)["processes"] if p["name"] == name)

    def replica_values(self, key: str) -> list:
        names = [n.name for n in replicas_for(self.ring, BUCKET, key, 2, dscs_replica=True)]
        return [read(self.node_client(name), key)[1] for name in names]


def read(client, key: str) -> tuple[bool | None, str | None]:
    try:
        return True, client.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return True, ABSENT
        return False, None
    except BotoCoreError:
        return None, None


def write(client, key: str, value: str | None) -> bool | None:
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
    """Concurrent writers to one key; per round: are the replicas identical, and does a read
    return the last acknowledged write?

    "Last acknowledged" is the acknowledgement the gateway sent last. The gateway sends them in
    version order (replication/ordering.py) and returns each write's version with it
    (x-nearfaas-version), so the write acknowledged last is the acknowledged one with the
    highest version. The client's threads also note when each answer reached them; answers
    that arrive microseconds apart can be noted in either order (the GIL decides which thread
    runs first), so that order is reported separately, with how far apart such answers were."""
    key = f"hot-{size}"
    clients = [cluster.gateway() for _ in range(writers)]
    reader = cluster.gateway()
    diverged = not_last = thread_order_differs = 0
    gaps: list[float] = []

    def put(i: int, r: int, barrier: threading.Barrier, acks: list) -> None:
        value = f"r{r:03d}-w{i}-" + "x" * max(0, size - 16)
        barrier.wait()
        version = put_version(clients[i], key, value)
        if version is not None:
            acks.append((time.monotonic(), version, value[:16]))

    for r in range(rounds):
        barrier, acks = threading.Barrier(writers), []
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(lambda i, r=r, b=barrier, a=acks: put(i, r, b, a), range(writers)))
        replicas = [v[:16] if v else v for v in cluster.replica_values(key)]
        diverged += len(set(replicas)) > 1
        seen = (read(reader, key)[1] or "")[:16]
        if acks:
            last_sent = max(acks, key=lambda a: a[1])
            last_seen = max(acks)
            not_last += seen != last_sent[2]
            if last_seen is not last_sent:
                thread_order_differs += 1
                gaps.append(last_seen[0] - last_sent[0])
    return {"size": size, "rounds": rounds, "writers": writers, "replicas_diverged_rounds": diverged,
            "read_not_last_acknowledged_rounds": not_last, "client_thread_order_differs_rounds": thread_order_differs,
            "client_thread_order_gap_ms_max": round(max(gaps) * 1000, 3) if gaps else 0.0}


def put_version(client, key: str, value: str) -> str | None:
    """PUT; the version the gateway acknowledged it with, or None when it was not acknowledged."""
    try:
        answer = client.put_object(Bucket=BUCKET, Key=key, Body=value.encode())
    except (ClientError, BotoCoreError):
        return None
    return answer["ResponseMetadata"]["HTTPHeaders"].get("x-nearfaas-version", "")


def faults_run(cluster: Cluster, ops: int, keys: int, faults: int, seed: int, gateway_faults: bool = False) -> dict:
    """``faults`` storage-node faults (SIGKILL and restart, or SIGSTOP and SIGCONT) during the run;
    with ``gateway_faults`` and a cluster of several gateways (behind its balancer, which every
    client uses), also one gateway SIGKILLed and restarted and one SIGSTOPped and resumed."""
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
                ok, value = read(client, key)
                op = Op("get", key, start, time.monotonic(), ok, value)
            else:
                value = None if role == "deleter" else f"{role[0]}{wid}-{n}"
                n += 1
                op = Op("put" if value else "delete", key, start, 0.0, None, value)
                op.ok = write(client, key, value)
                op.end = time.monotonic()
            with lock:
                history.append(op)

    gateways = [g["id"] for g in cluster.layout.get("gateways") or ()] if gateway_faults else []
    # (fault, process name, gateway id or None for a storage node)
    plan = [(rng.choice(["kill", "stop"]), rng.choice(cluster.storage)["name"], None) for _ in range(faults)]
    if len(gateways) > 1:  # one gateway killed, another stopped
        killed, stopped = rng.sample(gateways, 2)
        plan[1:1] = [("kill", launcher.gateway_process_name(killed), killed)]
        plan.append(("stop", launcher.gateway_process_name(stopped), stopped))

    def nemesis():
        for kind, node, gateway in plan:
            time.sleep(rng.uniform(0.8, 1.6))
            pid = cluster.pid(node)
            t0 = time.monotonic()
            began = round(t0 - started, 3)
            if kind == "kill":
                os.kill(pid, signal.SIGKILL)
                time.sleep(rng.uniform(0.5, 1.5))
                if gateway is not None:
                    launcher.restart_gateway(cluster.state, gateway_id=gateway)
                else:
                    launcher.restart_node(cluster.state, node)
            else:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 3.0))
                os.kill(pid, signal.SIGCONT)
            injected.append({"fault": kind, "node": node, "began": began, "seconds": round(time.monotonic() - t0, 2)})

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
    final = {k: read(gateway, k)[1] for k in names}
    replicas = {k: cluster.replica_values(k) for k in names}
    verdict = check(history, final, replicas)
    flagged = {e[0] for e in verdict.lost + verdict.resurrected + verdict.stale + verdict.diverged}
    return {"ops": len(history), "keys": keys, "seconds": round(elapsed, 1), "faults": injected,
            "unknown_outcomes": sum(1 for o in history if o.ok is None),
            "refused_writes": sum(1 for o in history if o.kind != "get" and o.ok is False), **verdict.counts(),
            "examples": {"lost": verdict.lost[:5], "resurrected": verdict.resurrected[:5], "stale": verdict.stale[:5],
                         "diverged": verdict.diverged[:5]},
            # What a failure needs to be understood: every operation on a flagged key, in seconds
            # from the run's start, beside when each fault began and ended.
            "flagged_histories": {k: [(o.kind, round(o.start - started, 3), round(o.end - started, 3), o.ok, o.value)
                                      for o in sorted(history, key=lambda o: o.start) if o.key == k]
                                  for k in sorted(flagged)[:3]}}
