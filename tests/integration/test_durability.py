"""An acknowledged write survives a crash of the writer.

A client PUTs 100 objects while a storage node is killed with SIGKILL part-way; after the node
restarts, every PUT that returned 200 reads back byte-identical and no partial object is ever
listed or readable. Run twice: through the gateway (replicated), and straight at the node that
is killed (the storage engine alone, no replica to hide behind). Each under both replication
schemes, rendezvous and copyset (issue 20).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from nearfaas.cluster import launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _client(cluster, url: str):
    return cluster.s3_at(url, connect_timeout=2, read_timeout=10)


def _bodies(n: int) -> dict[str, bytes]:
    rng = random.Random(7)
    # Sizes from 1 byte to 2 MiB so some writes are in flight for a while when the kill lands.
    return {f"obj/{i:03d}": rng.randbytes(rng.choice([1, 100, 4096, 65536, 1 << 20, 2 << 20])) for i in range(n)}


def _put_while_killing(client, bucket: str, bodies: dict[str, bytes], node_pid: int, kill_after: int) -> dict[str, bytes]:
    acknowledged: dict[str, bytes] = {}
    killed = threading.Event()
    for i, (key, body) in enumerate(bodies.items()):
        if i == kill_after:
            # Kill from another thread mid-request, so the crash can land inside a write.
            threading.Timer(0.002, lambda: (os.kill(node_pid, signal.SIGKILL), killed.set())).start()
        try:
            client.put_object(Bucket=bucket, Key=key, Body=body)
            acknowledged[key] = body
        except (ClientError, BotoCoreError):
            pass  # not acknowledged: may or may not exist, but must never be partial
    assert killed.wait(5)
    return acknowledged


def _check(client, bucket: str, bodies: dict[str, bytes], acknowledged: dict[str, bytes]) -> None:
    for key, body in acknowledged.items():
        got = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert got == body, f"{key}: acknowledged write lost or corrupted"
    listed = [o for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])]
    for obj in listed:
        data = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        assert data == bodies[obj["Key"]], f"{obj['Key']} is listed but partial"
        assert obj["Size"] == len(data) and obj["ETag"].strip('"') == hashlib.md5(data).hexdigest()
    assert set(acknowledged) <= {o["Key"] for o in listed}


def _pid_of(state_dir, name: str) -> int:
    return next(p["pid"] for p in launcher.read_layout(state_dir)["processes"] if p["name"] == name)


@pytest.mark.parametrize("path", ["gateway", "direct"])
def test_kill_9_storage_node_during_puts(scheme_cluster, path):
    cluster = scheme_cluster
    state = cluster.state_dir
    if True:
        victim = "storage-0"
        url = cluster.url if path == "gateway" else cluster.node(victim)["url"]
        client = _client(cluster, url)
        client.create_bucket(Bucket="durable") if path == "direct" else _client(cluster, cluster.url).create_bucket(Bucket="durable")
        bodies = _bodies(100)
        acknowledged = _put_while_killing(client, "durable", bodies, _pid_of(state, victim), kill_after=40)
        assert len(acknowledged) >= 40
        print(f"[{path}] {len(acknowledged)}/100 PUTs acknowledged around a SIGKILL of {victim} after PUT #40")
        launcher.restart_node(state, victim)
        time.sleep(1.2)  # one gateway health poll, so it routes to the node again
        _check(client, "durable", bodies, acknowledged)
        if path == "gateway":
            # Every acknowledged object is also intact on the restarted node, if it holds a copy.
            _check(_client(cluster, cluster.node(victim)["url"]), "durable", bodies,
                   {k: v for k, v in acknowledged.items() if _exists(_client(cluster, cluster.node(victim)["url"]), "durable", k)})
        leftovers = list((state / "nodes" / victim / "store" / "tmp").glob("*")) if (state / "nodes" / victim / "store" / "tmp").exists() else []
        assert leftovers == [], "temp files survived the restart"


def _exists(client, bucket, key) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError:
        return False
