"""Replicas that behave like one object store (issue 13): ordered writes, deletes that stick,
repair after faults. Each test drives a private cluster with boto3 and kills or stops its
storage nodes; replicas are inspected directly on each node's S3 port."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import running_cluster
from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
from nearfaas.bench import jepsen
from nearfaas.cluster import launcher
from nearfaas.replication.repair import with_trailer
from nearfaas.replication.version import HybridClock
from nearfaas.s3.node_client import NodeClient
from nearfaas.spec.cluster import ReplicationSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def converging(tmp_path):
    """A cluster whose anti-entropy runs every second and forgets tombstones after 3 s."""
    state = tmp_path / "state"
    with running_cluster(state, replication=ReplicationSpec(factor=2, dscs_replica=True, anti_entropy=1.0, tombstone_grace=3.0)) as c:
        harness = jepsen.Cluster(c.layout, state)
        harness.gateway().create_bucket(Bucket=jepsen.BUCKET)
        yield c, harness


def _metric(cluster, name: str, labels: str = "") -> float:
    text = requests.get(f"{cluster.url}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _until(check, seconds: float, what: str) -> float:
    """Poll ``check`` until it holds; returns how long that took."""
    started = time.monotonic()
    while True:
        try:
            if check():
                return time.monotonic() - started
        except ClientError:
            pass
        if time.monotonic() - started > seconds:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.1)


def test_concurrent_writers_leave_identical_replicas_holding_the_last_acknowledged_write(converging):
    _, harness = converging
    for size in (1024, 1 << 20):
        result = jepsen.same_key(harness, writers=4, rounds=100, size=size)
        print(result)
        assert result["replicas_diverged_rounds"] == 0, result
        assert result["read_not_last_acknowledged_rounds"] == 0, result


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_degraded_overwrite_and_delete_read_correctly_and_converge_within_10s(converging, fault):
    cluster, harness = converging
    s3 = harness.gateway()
    for key in ("over", "gone"):
        s3.put_object(Bucket=jepsen.BUCKET, Key=key, Body=b"old")
    pid = harness.pid("storage-1")
    os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    try:
        s3.put_object(Bucket=jepsen.BUCKET, Key="over", Body=b"new")
        s3.delete_object(Bucket=jepsen.BUCKET, Key="gone")
        assert _metric(cluster, "nearfaas_replica_hints_pending", '{node="storage-1"}') >= 2
    finally:
        if fault == "kill":
            launcher.restart_node(harness.state, "storage-1")
        else:
            os.kill(pid, signal.SIGCONT)
    back = time.monotonic()
    # Right away, before any repair: reads compare versions across replicas.
    assert jepsen.read(s3, "over") == (True, "new")
    assert jepsen.read(s3, "gone") == (True, None)
    node = harness.node_client("storage-1")
    _until(lambda: jepsen.read(node, "over") == (True, "new") and jepsen.read(node, "gone") == (True, None), 10,
           "storage-1 catching up")
    print(f"storage-1 converged {time.monotonic() - back:.2f} s after it was back ({fault})")
    assert harness.replica_values("over") == ["new", "new"] and harness.replica_values("gone") == [None, None]
    assert _until(lambda: _metric(cluster, "nearfaas_replica_hints_pending", '{node="storage-1"}') == 0, 5, "hints done") >= 0


def test_anti_entropy_repairs_what_no_hint_recorded_and_then_forgets_the_tombstones(converging):
    cluster, harness = converging
    layout = cluster.layout
    storage0 = cluster.node("storage-0")["url"]
    version = HybridClock("test").now()

    async def write_behind_the_gateways_back():
        async def body():
            yield b"only on storage-0"

        async with NodeClient("storage-0", storage0, credentials=(INTERNAL_ACCESS_KEY, layout["internal_secret"])) as node:
            await node.put_object(jepsen.BUCKET, "stray", with_trailer(body(), version), version_trailer=len(version))

    asyncio.run(write_behind_the_gateways_back())
    took = _until(lambda: harness.replica_values("stray") == ["only on storage-0"] * 2, 10, "anti-entropy copy")
    print(f"anti-entropy copied the stray write in {took:.2f} s")
    assert _metric(cluster, "nearfaas_replica_keys_repaired_total", '{via="anti_entropy"}') >= 1
    harness.gateway().delete_object(Bucket=jepsen.BUCKET, Key="stray")
    _until(lambda: _metric(cluster, "nearfaas_replica_tombstones_purged_total") >= 1, 15, "tombstone purge")
    assert harness.replica_values("stray") == [None, None]


def test_a_randomised_run_with_kills_and_stops_loses_nothing(converging):
    _, harness = converging
    run = jepsen.faults_run(harness, ops=600, keys=20, faults=3, seed=5)
    print({k: run[k] for k in ("ops", "acknowledged_writes", "lost", "stale", "resurrected", "diverged", "unknown_outcomes",
                               "refused_writes")})
    assert len(run["faults"]) == 3 and run["ops"] >= 600
    assert (run["lost"], run["stale"], run["resurrected"], run["diverged"]) == (0, 0, 0, 0), \
        {"examples": run["examples"], "faults": run["faults"], "histories": run["flagged_histories"]}


def test_every_version_reaches_a_replica_that_was_stopped_while_it_was_written(converging):
    """Bucket versioning under a fault: the hint brings the stopped replica the key's newest
    entry; anti-entropy brings it the noncurrent versions it missed (Repairer.sync_versions)."""
    cluster, harness = converging
    s3 = harness.gateway()
    bucket = "versioned-under-faults"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    pid = harness.pid("storage-1")
    os.kill(pid, signal.SIGSTOP)
    try:
        made = [s3.put_object(Bucket=bucket, Key="k", Body=f"v{n}".encode())["VersionId"] for n in range(3)]
        made.append(s3.delete_object(Bucket=bucket, Key="k")["VersionId"])
    finally:
        os.kill(pid, signal.SIGCONT)

    def held(node: str) -> list[str]:
        return [v["VersionId"] for v in harness.node_client(node).list_object_versions(Bucket=bucket).get("Versions", [])] + \
               [m["VersionId"] for m in harness.node_client(node).list_object_versions(Bucket=bucket).get("DeleteMarkers", [])]

    took = _until(lambda: sorted(held("storage-1")) == sorted(made), 15, "storage-1 holding every version")
    print(f"storage-1 held all {len(made)} versions {took:.2f} s after it was back")
    assert sorted(held("storage-0")) == sorted(made)
    for n, version_id in enumerate(made[:3]):
        assert harness.node_client("storage-1").get_object(Bucket=bucket, Key="k", VersionId=version_id)["Body"].read() == f"v{n}".encode()
    with pytest.raises(ClientError) as marker:
        s3.get_object(Bucket=bucket, Key="k")
    assert marker.value.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
