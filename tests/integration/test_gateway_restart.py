"""A gateway restarted (SIGKILLed, then started again) loses nothing and leaks nothing (issue 43).

With its clock behind, it must not undo acknowledged writes.

Its versions are hybrid-logical-clock stamps (replication/version.py); replicas keep the newest.
Restarted with its host clock 120 s back, the gateway used to stamp overwrites and deletes below
the versions it had already acknowledged: every replica ignored them, all agreed, and nothing ever
repaired it. It now starts from a ceiling it keeps on disk, and observes the storage nodes'
high-water marks, so its next stamps are above anything acknowledged. The clock is set back
with libfaketime (Debian's faketime), on a real gateway process.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import time

import pytest
from botocore.exceptions import ClientError
from conftest import running_cluster

from nearfaas.cluster import launcher

pytestmark = pytest.mark.integration

# libfaketime, preloaded into the gateway alone (the faketime wrapper would run it as its child)
FAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)
N = 20


@pytest.fixture(scope="module")
def restartable(tmp_path_factory):
    from nearfaas.spec.cluster import ReplicationSpec

    # anti-entropy every second: the replaced-disk test waits on a pass
    with running_cluster(tmp_path_factory.mktemp("clock") / "state", replication=ReplicationSpec(factor=2, anti_entropy=1.0)) as c:
        yield c


def _kill(cluster, name: str) -> None:
    """SIGKILL one of the cluster's processes (the gateway, a node) and wait until it is gone."""
    pid = next(p["pid"] for p in launcher.read_layout(cluster.state_dir)["processes"] if p["name"] == name)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while launcher.alive(pid) and time.monotonic() < deadline:  # the kernel reaps it: wait for that
        time.sleep(0.02)


def _replace_disk(cluster, name: str) -> None:
    """The node killed, its store emptied (a replaced disk), and the node started again."""
    _kill(cluster, name)
    store = cluster.state_dir / "nodes" / name / "store"
    shutil.rmtree(store)
    store.mkdir()
    launcher.restart_node(cluster.state_dir, name)


def _restart_behind(cluster, seconds: int, forget_ceiling: bool = False) -> None:
    _kill(cluster, "gateway")
    if forget_ceiling:  # a gateway with a state directory of its own: only the nodes can tell it
        (cluster.state_dir / "gateway" / "clock").unlink()
    # the offset for time() only: the event loop's monotonic clock runs on unfaked
    launcher.restart_gateway(cluster.state_dir, env={"LD_PRELOAD": FAKETIME, "FAKETIME": f"-{seconds}s",
                                                     "FAKETIME_DONT_FAKE_MONOTONIC": "1"})


@pytest.mark.parametrize("forget_ceiling", [False, True], ids=["its-ceiling", "the-nodes-high-water"])
def test_overwrites_and_deletes_after_a_restart_with_the_clock_behind_take_effect(restartable, forget_ceiling):
    if FAKETIME is None:
        pytest.skip("libfaketime is not installed (make setup installs it: apt-get install faketime)")
    bucket = f"clock-{int(forget_ceiling)}"
    s3 = restartable.s3()
    s3.create_bucket(Bucket=bucket)
    for i in range(N):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"before")
    _restart_behind(restartable, 120, forget_ceiling)
    s3 = restartable.s3()
    for i in range(N // 2):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"after")
    for i in range(N // 2, N):
        s3.delete_object(Bucket=bucket, Key=f"k{i}")
    stale = [i for i in range(N // 2) if s3.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read() != b"after"]
    resurrected = []
    for i in range(N // 2, N):
        try:
            s3.head_object(Bucket=bucket, Key=f"k{i}")
            resurrected.append(i)
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert not stale and not resurrected, f"acknowledged overwrites undone: {stale}; acknowledged deletes undone: {resurrected}"
    # and on every replica, not only the one a read happens to reach
    for node in (n for n in restartable.layout["nodes"] if n["kind"] == "storage"):
        direct = restartable.s3_at(node["url"])
        for i in range(N // 2):
            try:
                assert direct.get_object(Bucket=bucket, Key=f"k{i}")["Body"].read() == b"after", (node["name"], i)
            except ClientError as exc:
                assert exc.response["Error"]["Code"] == "NoSuchKey"  # not a replica of this key


def _workers(cluster) -> list[dict]:
    return [w for n in cluster.layout["nodes"] for w in cluster.node_health(n["url"])["workers"]]


def test_a_restarted_gateway_leaves_no_worker_of_the_last_one_running(restartable, functions_dir):
    """Each restart left one more worker on the compute node (25 processes after 12 restarts,
    while the API said 1 replica): the new gateway stops those nobody owns."""
    assert restartable.deploy("restart-echo", functions_dir / "echo").status_code == 202
    for _ in range(3):
        _kill(restartable, "gateway")
        launcher.restart_gateway(restartable.state_dir)
        restartable.wait_warm("restart-echo")
        deadline = time.monotonic() + 20
        while len(ours := [w for w in _workers(restartable) if w["function"] == "restart-echo"]) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ours) == 1, json.dumps(ours)[:500]
    assert restartable.http.post(f"{restartable.url}/function/restart-echo", data=b"x", timeout=30).status_code == 200


def test_a_storage_node_with_its_clock_ahead_stays_healthy_and_in_repair(restartable):
    """A node 400 s ahead took S3 writes (SigV4 allows 900 s) but failed every signed health
    poll (300 s), so the gateway marked it down for good and anti-entropy stopped."""
    if FAKETIME is None:
        pytest.skip("libfaketime is not installed (make setup installs it: apt-get install faketime)")
    node = next(n for n in restartable.layout["nodes"] if n["kind"] == "storage" and n["class"] != "dscs")

    def restart(env: dict | None) -> None:
        _kill(restartable, node["name"])
        launcher.restart_node(restartable.state_dir, node["name"], env=env)

    def healthy() -> bool:
        nodes = restartable.http.get(f"{restartable.url}/system/nodes", timeout=10).json()
        return next(n for n in nodes if n["name"] == node["name"])["healthy"]

    try:
        restart({"LD_PRELOAD": FAKETIME, "FAKETIME": "+400s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        deadline = time.monotonic() + 15  # a few health polls
        while not healthy() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert healthy(), "a node 400 s ahead is marked down"
        s3 = restartable.s3()
        s3.create_bucket(Bucket="clock-ahead")
        s3.put_object(Bucket="clock-ahead", Key="k", Body=b"v")
        assert restartable.s3_at(node["url"]).get_object(Bucket="clock-ahead", Key="k")["Body"].read() == b"v"
    finally:
        restart(None)


def test_an_upload_completed_or_aborted_while_a_replica_was_down_is_aborted_there_when_it_returns(restartable):
    """It kept the upload and its parts (24 h, and ListMultipartUploads listed it): 36 stale
    uploads after one fault run (issue 43). Now the node is owed the abort, as a hint."""
    s3 = restartable.s3()
    s3.create_bucket(Bucket="uploads-down")
    node = next(n for n in restartable.layout["nodes"] if n["kind"] == "storage" and n["class"] != "dscs")
    uploads = {}
    for key in ("done", "dropped"):
        uploads[key] = s3.create_multipart_upload(Bucket="uploads-down", Key=key)["UploadId"]
    part = s3.upload_part(Bucket="uploads-down", Key="done", UploadId=uploads["done"], PartNumber=1, Body=b"p" * 100)
    _kill(restartable, node["name"])
    s3.complete_multipart_upload(Bucket="uploads-down", Key="done", UploadId=uploads["done"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    s3.abort_multipart_upload(Bucket="uploads-down", Key="dropped", UploadId=uploads["dropped"])
    launcher.restart_node(restartable.state_dir, node["name"])
    direct = restartable.s3_at(node["url"])
    deadline = time.monotonic() + 20  # the hint replayer runs every 0.5 s once the node is healthy
    while (left := direct.list_multipart_uploads(Bucket="uploads-down").get("Uploads", [])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], [u["UploadId"] for u in left]
    assert s3.list_multipart_uploads(Bucket="uploads-down").get("Uploads", []) == []
    assert s3.get_object(Bucket="uploads-down", Key="done")["Body"].read() == b"p" * 100


def test_a_hint_brings_every_version_a_node_missed_not_only_the_newest(restartable):
    """Replayed hints copied only a versioned key's current version: with the other replica
    then killed, GET ?versionId= of an acknowledged older version answered NoSuchVersion."""
    s3 = restartable.s3()
    s3.create_bucket(Bucket="versions-owed")
    s3.put_bucket_versioning(Bucket="versions-owed", VersioningConfiguration={"Status": "Enabled"})
    storage = [n for n in restartable.layout["nodes"] if n["kind"] == "storage"]
    away, stays = storage[1]["name"], storage[0]["name"]
    _kill(restartable, away)
    ids = [s3.put_object(Bucket="versions-owed", Key="k", Body=f"v{i}".encode())["VersionId"] for i in range(3)]
    launcher.restart_node(restartable.state_dir, away)
    direct = restartable.s3_at(storage[1]["url"])
    deadline = time.monotonic() + 20  # the replayer runs every 0.5 s once the node answers
    while time.monotonic() < deadline:
        held = {v["VersionId"] for v in direct.list_object_versions(Bucket="versions-owed").get("Versions", [])}
        if set(ids) <= held:
            break
        time.sleep(0.2)
    _kill(restartable, stays)
    try:
        for i, version in enumerate(ids):
            body = s3.get_object(Bucket="versions-owed", Key="k", VersionId=version)["Body"].read()
            assert body == f"v{i}".encode(), (i, body)
    finally:
        launcher.restart_node(restartable.state_dir, stays)


def test_a_replica_back_with_an_empty_disk_does_not_answer_for_the_keys_it_lost(restartable):
    """A node restarted on a replaced (empty) disk answered NoSuchBucket for acknowledged keys
    (about 8 s, until repair refilled it): its NoSuchBucket is not the last word while another
    replica holds the bucket, and reading through it refills it."""
    s3 = restartable.s3()
    s3.create_bucket(Bucket="disk-replaced")
    for i in range(10):
        s3.put_object(Bucket="disk-replaced", Key=f"k{i}", Body=f"v{i}".encode())
    node = next(n for n in restartable.layout["nodes"] if n["kind"] == "storage" and n["class"] != "dscs")
    _replace_disk(restartable, node["name"])
    deadline = time.monotonic() + 15  # until the gateway polls it healthy: then it is asked first for half the keys
    while time.monotonic() < deadline and not next(n for n in restartable.http.get(f"{restartable.url}/system/nodes", timeout=10).json()
                                                  if n["name"] == node["name"])["healthy"]:
        time.sleep(0.1)
    for i in range(10):
        assert s3.get_object(Bucket="disk-replaced", Key=f"k{i}")["Body"].read() == f"v{i}".encode()
        assert s3.head_object(Bucket="disk-replaced", Key=f"k{i}")["ContentLength"] == 2


def test_a_replaced_disk_is_not_the_last_word_until_it_is_refilled(restartable):
    """With the other replica down, a node back on an empty disk was the only one asked, and
    answered 404 for acknowledged keys (issue 43: "an empty store is refilled before it answers
    reads as authoritative"). Its store's identity changed, so its absent answers count for
    nothing until anti-entropy has refilled it: a 503 to retry, then the values."""
    s3 = restartable.s3()
    s3.create_bucket(Bucket="refill")
    for i in range(20):
        s3.put_object(Bucket="refill", Key=f"k{i}", Body=f"v{i}".encode())
    storage = [n for n in restartable.layout["nodes"] if n["kind"] == "storage"]
    other, replaced = storage[0]["name"], storage[1]["name"]
    _kill(restartable, other)  # no anti-entropy pass while a node is down: nothing refills it yet
    _replace_disk(restartable, replaced)
    _wait_healthy(restartable, replaced)
    try:
        for i in range(20):
            with pytest.raises(ClientError) as caught:
                s3.get_object(Bucket="refill", Key=f"k{i}")
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503, caught.value.response
        # A gateway started now knows the store is new from the shared record, and the bucket's
        # own lookups (its options, a listing) are not the empty node's to answer either: fault
        # injection found a restarted gateway answering NoSuchBucket for every key.
        _kill(restartable, "gateway")
        launcher.restart_gateway(restartable.state_dir)
        for call in (lambda: s3.get_object(Bucket="refill", Key="k0"), lambda: s3.head_object(Bucket="refill", Key="k1"),
                     lambda: s3.list_objects_v2(Bucket="refill"), lambda: s3.head_bucket(Bucket="refill")):
            with pytest.raises(ClientError) as caught:
                call()
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503, caught.value.response
    finally:
        launcher.restart_node(restartable.state_dir, other)
    _wait_healthy(restartable, other)
    direct = restartable.s3_at(next(n["url"] for n in storage if n["name"] == replaced))
    deadline = time.monotonic() + 10  # a pass starts as soon as the replaced store is seen, not an interval later
    while time.monotonic() < deadline:
        try:
            if all(direct.get_object(Bucket="refill", Key=f"k{i}")["Body"].read() == f"v{i}".encode() for i in range(20)):
                break
        except ClientError:
            pass
        time.sleep(0.1)
    for i in range(20):
        assert s3.get_object(Bucket="refill", Key=f"k{i}")["Body"].read() == f"v{i}".encode()
    events = [json.loads(line) for line in (restartable.state_dir / "logs" / "gateway.log").read_text().splitlines()
              if line.startswith('{"event": "store-replaced"')]
    assert events and events[-1]["node"] == replaced, events


def _wait_healthy(cluster, name: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not next(n for n in cluster.http.get(f"{cluster.url}/system/nodes", timeout=10).json() if n["name"] == name)["healthy"]:
        assert time.monotonic() < deadline, f"{name} not healthy after {timeout:g}s"
        time.sleep(0.1)


def test_a_gateway_that_lost_its_ceiling_stamps_past_the_versions_its_hints_owe(restartable):
    """Fault injector: with the ceiling file gone and the only node holding the newest versions
    down, the restarted gateway (clock 120 s behind) reused their stamps: two writes with one
    version, replicas that never converged. The hint journal knows those versions."""
    if FAKETIME is None:
        pytest.skip("libfaketime is not installed (make setup installs it: apt-get install faketime)")
    s3 = restartable.s3()
    s3.create_bucket(Bucket="hinted-clock")
    storage = [n["name"] for n in restartable.layout["nodes"] if n["kind"] == "storage"]
    s3.put_object(Bucket="hinted-clock", Key="k", Body=b"v0")
    _kill(restartable, storage[0])
    s3.put_object(Bucket="hinted-clock", Key="k", Body=b"v1")  # on storage[1] only: storage[0] is owed it
    _kill(restartable, "gateway")
    _kill(restartable, storage[1])
    (restartable.state_dir / "gateway" / "clock").unlink()
    launcher.restart_node(restartable.state_dir, storage[0])
    launcher.restart_gateway(restartable.state_dir, env={"LD_PRELOAD": FAKETIME, "FAKETIME": "-120s",
                                                         "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    s3 = restartable.s3()
    s3.put_object(Bucket="hinted-clock", Key="k", Body=b"v2")
    launcher.restart_node(restartable.state_dir, storage[1])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        held = {n["name"]: restartable.s3_at(n["url"]).get_object(Bucket="hinted-clock", Key="k")["Body"].read()
                for n in restartable.layout["nodes"] if n["kind"] == "storage"}
        if set(held.values()) == {b"v2"}:
            break
        time.sleep(0.2)
    assert held == {name: b"v2" for name in storage}, held
    assert s3.get_object(Bucket="hinted-clock", Key="k")["Body"].read() == b"v2"


def test_a_replaced_disk_gets_its_buckets_back_with_their_options(restartable):
    """Fault injector: anti-entropy made the missing buckets from a listing, which carries no
    options: a versioned bucket came back unversioned (and without owner or policy), and a key's
    delete marker never returned."""
    s3 = restartable.s3()
    s3.create_bucket(Bucket="options-back")
    s3.put_bucket_versioning(Bucket="options-back", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="options-back", Key="c", Body=b"old")
    s3.delete_object(Bucket="options-back", Key="c")
    node = next(n for n in restartable.layout["nodes"] if n["kind"] == "storage" and n["class"] != "dscs")
    _replace_disk(restartable, node["name"])
    direct = restartable.s3_at(node["url"])
    deadline = time.monotonic() + 30  # a few anti-entropy passes (one a second here)
    markers = []
    while time.monotonic() < deadline:
        try:
            markers = direct.list_object_versions(Bucket="options-back").get("DeleteMarkers", [])
        except ClientError:  # the bucket is not back yet
            markers = []
        if markers:
            break
        time.sleep(0.2)
    options = json.loads(direct.head_bucket(Bucket="options-back")["ResponseMetadata"]["HTTPHeaders"]["x-nearfaas-bucket-options"])
    assert options.get("versioning") == "Enabled", options
    assert [m["IsLatest"] for m in markers] == [True], markers
