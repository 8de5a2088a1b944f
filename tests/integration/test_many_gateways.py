"""Two gateways behind HAProxy serve one cluster, and either may die (issue 43).

``gateway.replicas: 2`` starts gateways ``gw`` and ``gw1``, each on a port of its own, with
HAProxy on the cluster's address (cluster/balancer.py). They share the function, namespace and
uid files and the storage nodes; each owns its clock, hint journal and async journal, and a
survivor takes over a dead one's (gateway/peers.py). Tests here talk to each gateway directly
(what one saw, the other must see) and to the balancer (what a client sees while one dies).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError
from conftest import running_cluster

from nearfaas.cluster import launcher

pytestmark = pytest.mark.integration
FUNCTIONS = Path(__file__).parent / "functions"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    from nearfaas.spec.cluster import ReplicationSpec

    # Anti-entropy every second, as the consistency tests run it; what a node that was down got
    # from a dead gateway's hints is read in the survivor's log.
    with running_cluster(tmp_path_factory.mktemp("two") / "state", gateway_replicas=2,
                         replication=ReplicationSpec(factor=2, anti_entropy=1.0, tombstone_grace=3.0)) as c:
        yield c


def _urls(cluster) -> dict[str, str]:
    return {g["id"]: g["url"] for g in launcher.read_layout(cluster.state_dir)["gateways"]}


def _s3(cluster, url: str, retries: int = 1):
    auth = cluster.layout["auth"]
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=auth["access_key"], aws_secret_access_key=auth["secret_key"],
                        region_name="us-east-1", config=Config(s3={"addressing_style": "path"},
                                                               retries={"max_attempts": retries, "mode": "standard"}))


def _node_s3(cluster, node: str):
    return cluster.s3_at(cluster.node(node)["url"])


def _pid(cluster, name: str) -> int:
    return next(p["pid"] for p in launcher.read_layout(cluster.state_dir)["processes"] if p["name"] == name)


def _kill(cluster, name: str, sig=signal.SIGKILL) -> None:
    pid = _pid(cluster, name)
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + 10
        while launcher.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


def _events(cluster, process: str) -> list[dict]:
    """The JSON events a process of the cluster logged."""
    out = []
    for line in (cluster.state_dir / "logs" / f"{process}.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def _wait_node(cluster, gateway_url: str, node: str, healthy: bool) -> None:
    _wait(lambda: next(n for n in cluster.http.get(f"{gateway_url}/system/nodes", timeout=5).json()
                       if n["name"] == node)["healthy"] is healthy, message=f"{node} healthy={healthy} not seen at {gateway_url}")


def _read_or_none(client, bucket: str, key: str) -> bytes | None:
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError:
        return None


def _wait(what, timeout: float = 30.0, message: str = ""):
    deadline = time.monotonic() + timeout
    while not (found := what()):
        assert time.monotonic() < deadline, message or f"not within {timeout:g}s"
        time.sleep(0.05)
    return found


def test_the_cluster_lists_its_gateways_and_their_health(two):
    info = launcher.status(two.state_dir)
    gateways = info["gateway"]["gateways"]
    assert [g["id"] for g in gateways] == ["gw", "gw1"] and all(g["healthy"] for g in gateways)
    assert info["gateway"]["balancer"]["healthy"] and info["gateway"]["balancer"]["url"] == two.url
    assert len({g["url"] for g in gateways} | {two.url}) == 3  # each on a port of its own
    # Every way in asks for the cluster's credentials: each gateway's own port as the balancer's.
    for url in [g["url"] for g in gateways] + [two.url]:
        resp = requests.post(f"{url}/system/functions", json={"service": "intruder", "image": "x"}, timeout=10)
        assert resp.status_code == 401, (url, resp.status_code, resp.text)
        assert requests.get(f"{url}/system/secrets", timeout=10).status_code == 401
        assert requests.put(f"{url}/intruder-bucket", timeout=10).status_code == 403
    # HAProxy reaches each over its Unix socket, where the client address it passes is believed
    config = (two.state_dir / "balancer" / "haproxy.cfg").read_text()
    for g in launcher.read_layout(two.state_dir)["gateways"]:
        assert f"unix@{g['socket']}" in config and Path(g["socket"]).is_socket()


def test_what_one_gateway_stores_or_deploys_the_other_serves_at_once(two):
    urls = _urls(two)
    gw, gw1 = _s3(two, urls["gw"]), _s3(two, urls["gw1"])
    gw.create_bucket(Bucket="shared")
    gw.put_object(Bucket="shared", Key="k", Body=b"from gw")
    assert gw1.get_object(Bucket="shared", Key="k")["Body"].read() == b"from gw"
    assert _s3(two, two.url).get_object(Bucket="shared", Key="k")["Body"].read() == b"from gw"
    # A function deployed through one gateway is called through the other right away (it follows
    # the shared function file before it routes: FunctionsAPI.sync).
    body = {"service": "echo2", "lang": "python3-http", "handler": str(FUNCTIONS / "echo"), "x-nearfaas": {"buckets": ["*"]}}
    assert two.http.post(f"{urls['gw']}/system/functions", json=body, timeout=30).status_code == 202
    resp = requests.post(f"{urls['gw1']}/function/echo2", data=b"hello", timeout=60)
    assert resp.status_code == 200 and resp.json()["body"] == "hello", resp.text
    assert "echo2" in {f["name"] for f in two.http.get(f"{urls['gw1']}/system/functions", timeout=10).json()}
    # ... and removed through the other: the first forgets it too.
    assert two.http.delete(f"{urls['gw1']}/system/functions", json={"functionName": "echo2"}, timeout=30).status_code == 202
    assert requests.post(f"{urls['gw']}/function/echo2", data=b"x", timeout=10).status_code == 404
    # Namespaces too: created on one, known to the other.
    assert two.http.post(f"{urls['gw1']}/system/namespace", json={"name": "team-x"}, timeout=10).status_code == 201
    assert two.http.get(f"{urls['gw']}/system/namespace/team-x", timeout=10).status_code == 200
    assert two.http.delete(f"{urls['gw']}/system/namespace/team-x", timeout=10).status_code == 200
    assert "team-x" not in two.http.get(f"{urls['gw1']}/system/namespaces", timeout=10).json()


def test_two_gateways_deploying_at_once_give_every_function_its_own_uid(two):
    urls = list(_urls(two).values())

    def deploy(i):
        body = {"service": f"uid{i}", "lang": "python3-http", "handler": str(FUNCTIONS / "echo"), "x-nearfaas": {"buckets": ["*"]}}
        return two.http.post(f"{urls[i % 2]}/system/functions", json=body, timeout=30).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(deploy, range(8))) == {202}
    statuses = two.http.get(f"{two.url}/system/functions", timeout=10).json()
    names = {f"uid{i}" for i in range(8)}
    assert {f["name"] for f in statuses} >= names  # none lost to the other gateway's write of the file
    specs = json.loads((two.state_dir / "gateway" / "functions.json").read_text())
    uids = [s["uid"] for s in specs if s["name"] in names]
    assert len(uids) == 8 and len(set(uids)) == 8, uids
    for i in range(8):
        two.http.delete(f"{two.url}/system/functions", json={"functionName": f"uid{i}"}, timeout=30)


def test_writes_through_different_gateways_keep_one_order(two):
    """Each write acknowledged through one gateway is what the next read through the other
    returns, and concurrent writers through both leave the replicas identical."""
    urls = _urls(two)
    clients = [_s3(two, urls["gw"]), _s3(two, urls["gw1"])]
    clients[0].create_bucket(Bucket="order")
    for i in range(40):  # alternate: write through one, read through the other
        clients[i % 2].put_object(Bucket="order", Key="seq", Body=f"v{i}".encode())
        assert clients[(i + 1) % 2].get_object(Bucket="order", Key="seq")["Body"].read() == f"v{i}".encode()
    nodes = [_node_s3(two, n) for n in ("storage-0", "storage-1")]
    for round_ in range(5):
        def write(i, round_=round_):
            clients[i % 2].put_object(Bucket="order", Key="hot", Body=f"r{round_}-w{i}".encode())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(16)))
        copies = [n.get_object(Bucket="order", Key="hot")["Body"].read() for n in nodes]
        assert copies[0] == copies[1], f"round {round_}: replicas differ: {copies}"
        last = f"r{round_}-w99".encode()
        clients[round_ % 2].put_object(Bucket="order", Key="hot", Body=last)  # the one write after every ack
        for c in clients:
            assert c.get_object(Bucket="order", Key="hot")["Body"].read() == last


def test_a_gateway_killed_under_load_costs_clients_of_the_balancer_nothing(two):
    front = _s3(two, two.url, retries=3)
    front.create_bucket(Bucket="load")
    errors: list[str] = []
    done = threading.Event()
    acked: dict[str, bytes] = {}

    def writer(w):
        client = _s3(two, two.url, retries=3)
        i = 0
        while not done.is_set():
            key, body = f"w{w}-{i}", uuid.uuid4().bytes
            try:
                client.put_object(Bucket="load", Key=key, Body=body)
                acked[key] = body
            except Exception as exc:
                errors.append(repr(exc))
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    _wait(lambda: len(acked) >= 40, message="no load through the balancer")
    _kill(two, "gateway-gw1")
    before = len(acked)
    _wait(lambda: len(acked) >= before + 80, message="clients did not get through after the kill")
    done.set()
    for t in threads:
        t.join()
    assert errors == [], errors[:5]  # retried through the balancer: every PUT succeeded
    for key, body in acked.items():  # and every acknowledged one is there
        assert front.get_object(Bucket="load", Key=key)["Body"].read() == body
    launcher.restart_gateway(two.state_dir, gateway_id="gw1")
    _wait(lambda: all(g["healthy"] for g in launcher.status(two.state_dir)["gateway"]["gateways"]))


def test_a_dead_gateways_hints_and_async_calls_are_taken_over(two):
    urls = _urls(two)
    gw1 = _s3(two, urls["gw1"])
    gw1.create_bucket(Bucket="adopt")
    assert two.deploy("recorder", FUNCTIONS / "recorder", **{"x-nearfaas": {"buckets": ["adopt"]}}).status_code == 202
    _kill(two, "storage-1")
    _wait_node(two, urls["gw1"], "storage-1", healthy=False)
    owed = {f"k{i}": os.urandom(64) for i in range(10)}
    for key, body in owed.items():  # acknowledged with storage-1 down: gw1 journals a hint each
        gw1.put_object(Bucket="adopt", Key=key, Body=body)
    ids = []
    for _ in range(20):  # 16 start at once on gw1, the rest wait in its journal
        resp = requests.post(f"{urls['gw1']}/async-function/recorder", json={"record_to": "adopt", "sleep": 0.5}, timeout=10)
        assert resp.status_code == 202, resp.text
        ids.append(resp.headers["X-Call-Id"])
    _kill(two, "gateway-gw1")
    launcher.restart_node(two.state_dir, "storage-1")
    store = _node_s3(two, "storage-1")

    def holds_all():
        try:
            return all(store.get_object(Bucket="adopt", Key=k)["Body"].read() == b for k, b in owed.items())
        except Exception:
            return False

    _wait(holds_all, timeout=30, message="storage-1 did not get what it missed")
    # gw took gw1's hints over (and replayed them) and ran its async calls
    adopted = _wait(lambda: [e for e in _events(two, "gateway") if e.get("event") == "peer-adopted" and e["peer"] == "gw1"
                             and e["hints"] >= len(owed)], message="gw did not take over gw1's hints")
    assert adopted[-1]["async_calls"] >= 1, adopted
    s3 = _s3(two, urls["gw"])

    def runs():
        found = collections.defaultdict(list)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="adopt", Prefix="runs/"):
            for obj in page.get("Contents", []):
                _, call_id, run = obj["Key"].split("/")
                found[call_id].append(run.split("-")[0])
        return found

    _wait(lambda: set(runs()) >= set(ids), timeout=40, message="async calls the dead gateway accepted did not all run")
    for call_id, attempts in runs().items():
        # once each; a call that was running when gw1 died ran again as attempt 2 (at least once,
        # as after a single gateway's SIGKILL: async_queue.py), never twice under one attempt
        assert len(attempts) == len(set(attempts)) and set(attempts) <= {"1", "2"}, (call_id, attempts)
    launcher.restart_gateway(two.state_dir, gateway_id="gw1")
    assert "gw1" in launcher.read_layout(two.state_dir)["gateways"][1]["id"]


def test_a_randomised_run_with_a_gateway_killed_and_another_stopped_loses_nothing(two):
    """The consistency harness through the balancer: writers, deleters and readers while one
    gateway is SIGKILLed (and restarted), another SIGSTOPped (and resumed), and storage nodes
    are killed and stopped too."""
    from nearfaas.bench import jepsen

    harness = jepsen.Cluster(launcher.read_layout(two.state_dir), two.state_dir)
    harness.gateway().create_bucket(Bucket=jepsen.BUCKET)
    run = jepsen.faults_run(harness, ops=600, keys=20, faults=2, seed=11, gateway_faults=True)
    assert [f["node"] for f in run["faults"] if f["node"].startswith("gateway")], run["faults"]
    assert (run["lost"], run["stale"], run["resurrected"], run["diverged"]) == (0, 0, 0, 0), \
        {"examples": run["examples"], "faults": run["faults"], "histories": run["flagged_histories"]}


def test_a_read_through_one_gateway_never_answers_older_than_a_write_another_acknowledged(two):
    """Fault injection found it: gw1 acknowledged writes with storage-1 down (its hints say
    storage-1 is behind); with storage-0 then down and storage-1 back, gw answered the old values,
    deleted keys included. A gateway reads what the others owe too (HintTail): a 503, never old."""
    urls = _urls(two)
    gw, gw1 = _s3(two, urls["gw"]), _s3(two, urls["gw1"])
    gw1.create_bucket(Bucket="behind")
    keys = [f"k{i}" for i in range(6)]
    for key in keys:
        gw1.put_object(Bucket="behind", Key=key, Body=b"old")
    _kill(two, "storage-1")
    _wait_node(two, urls["gw1"], "storage-1", healthy=False)
    for key in keys[:3]:
        gw1.put_object(Bucket="behind", Key=key, Body=b"new")
    for key in keys[3:]:
        gw1.delete_object(Bucket="behind", Key=key)
    _kill(two, "storage-0")
    launcher.restart_node(two.state_dir, "storage-1")
    _wait_node(two, urls["gw"], "storage-1", healthy=True)
    _wait_node(two, urls["gw"], "storage-0", healthy=False)
    for key in keys:
        try:
            got = gw.get_object(Bucket="behind", Key=key)["Body"].read()
        except ClientError as exc:
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 503, exc.response
            continue
        pytest.fail(f"{key}: read {got!r} through gw, older than what gw1 acknowledged")
    launcher.restart_node(two.state_dir, "storage-0")
    _wait_node(two, urls["gw"], "storage-0", healthy=True)
    for key in keys[:3]:
        assert _wait(lambda key=key: _read_or_none(gw, "behind", key) == b"new")


def test_a_gateway_waiting_on_a_stopped_peers_lock_keeps_serving_and_says_503(two):
    """Fault injection found it: a gateway SIGSTOPped while it held the function file's lock froze
    the other gateway whole (a blocking flock in its event loop), health checks included, and the
    balancer answered 503 to everything. The lock is held here by the test, as a stopped gateway
    would hold it: the deploy is refused with 503 after a few seconds, everything else answers."""
    import fcntl

    urls = _urls(two)
    fd = os.open(two.state_dir / "gateway" / "functions.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        body = {"service": "locked-out", "lang": "python3-http", "handler": str(FUNCTIONS / "echo"), "x-nearfaas": {"buckets": ["*"]}}
        with ThreadPoolExecutor(1) as pool:
            deploying = pool.submit(two.http.post, f"{urls['gw1']}/system/functions", json=body, timeout=30)
            started = time.monotonic()
            while not deploying.done():  # meanwhile the gateway answers its health checks at once
                assert requests.get(f"{urls['gw1']}/healthz", timeout=1).status_code == 200
                time.sleep(0.2)
            resp = deploying.result()
        assert resp.status_code == 503 and "locked" in resp.text and time.monotonic() - started < 15, resp.text
    finally:
        os.close(fd)
    assert two.http.post(f"{urls['gw1']}/system/functions", json=body, timeout=30).status_code == 202
    assert two.http.delete(f"{urls['gw']}/system/functions", json={"functionName": "locked-out"}, timeout=30).status_code == 202


def test_a_secret_changed_through_one_gateway_reaches_the_instances_of_the_other(two):
    """Each gateway runs instances of its own; a new value stored through one restarted only its
    instances, and calls through the other read the old value until its instances went."""
    urls = _urls(two)
    assert two.http.post(f"{urls['gw']}/system/secrets", json={"name": "shared-token", "value": "first"}, timeout=10).status_code == 201
    body = {"service": "reads-shared", "lang": "python3-http", "handler": str(FUNCTIONS / "readsecret"), "secrets": ["shared-token"],
            "x-nearfaas": {"buckets": ["*"]}}
    assert two.http.post(f"{urls['gw']}/system/functions", json=body, timeout=30).status_code == 202
    for url in urls.values():  # an instance on each gateway
        assert requests.post(f"{url}/function/reads-shared", data=b"shared-token", timeout=60).text == "first"
    for url in urls.values():  # each gateway's describe counts both (the nodes list every gateway's workers)
        _wait(lambda url=url: two.http.get(f"{url}/system/function/reads-shared", timeout=10).json()["availableReplicas"] >= 2,
              timeout=10, message=f"{url} does not count the other gateway's instance")
    assert two.http.put(f"{urls['gw']}/system/secrets", json={"name": "shared-token", "value": "second"}, timeout=10).status_code == 200
    for url in urls.values():
        _wait(lambda url=url: requests.post(f"{url}/function/reads-shared", data=b"shared-token", timeout=60).text == "second",
              timeout=20, message=f"{url} still serves the old secret")
    assert two.http.delete(f"{urls['gw']}/system/functions", json={"functionName": "reads-shared"}, timeout=30).status_code == 202


def test_a_count_set_by_hand_through_either_gateway_is_the_clusters(two):
    """faas-cli scale through the balancer reaches one gateway; it scaled only that gateway's
    instances, so the cluster ran the count plus the other's. The count is shared out now."""
    urls = _urls(two)
    body = {"service": "scaled", "lang": "python3-http", "handler": str(FUNCTIONS / "echo"), "x-nearfaas": {"buckets": ["*"]},
            "labels": {"com.openfaas.scale.max": "6"}}
    assert two.http.post(f"{urls['gw']}/system/functions", json=body, timeout=30).status_code == 202

    def mine(url: str) -> int:
        return len(two.http.get(f"{url}/system/function/scaled", timeout=10).json()["instances"])

    resp = two.http.post(f"{urls['gw1']}/system/scale-function/scaled", json={"replicas": 3}, timeout=10)
    assert resp.status_code == 202, resp.text
    _wait(lambda: (mine(urls["gw"]), mine(urls["gw1"])) == (2, 1), timeout=60,
          message=f"not shared out as 2 + 1: {(mine(urls['gw']), mine(urls['gw1']))}")
    for url in urls.values():  # each gateway says the cluster's count
        _wait(lambda url=url: (two.http.get(f"{url}/system/function/scaled", timeout=10).json()["replicas"],
                               two.http.get(f"{url}/system/function/scaled", timeout=10).json()["availableReplicas"]) == (3, 3),
              timeout=20, message=f"{url} does not say 3 of 3")
    assert two.http.post(f"{urls['gw']}/system/scale-function/scaled", json={"replicas": 1}, timeout=10).status_code == 202
    _wait(lambda: (mine(urls["gw"]), mine(urls["gw1"])) == (1, 0), timeout=60,
          message=f"not shared out as 1 + 0: {(mine(urls['gw']), mine(urls['gw1']))}")
    assert two.http.delete(f"{urls['gw']}/system/functions", json={"functionName": "scaled"}, timeout=30).status_code == 202
