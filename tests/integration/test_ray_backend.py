"""The cluster on a real multi-node Ray cluster (issue 24; cluster/ray_backend.py, docs/ray.md):
`ray start --head` plus two more raylets standing in for three hosts, each offering other
custom resources and keeping its "disk" apart (NEARFAAS_RAY_DATA). `nearfaas up --ray` places
storage-0 (dscs), storage-1 and compute-0 on the three Ray nodes; the boto3 S3 suite and the
chain tests run unchanged against it (in a pytest of their own, NEARFAAS_TEST_RAY); a storage
node's actor process is SIGKILLed mid-PUT, Ray restarts it and every acknowledged object reads
back, from that node too; `nearfaas down` leaves no actor and no process; and the errors name
their cause: Ray unreachable, a resource nobody offers, names another cluster holds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from ray_helpers import add_raylet, kill_raylet, ray_cluster, set_token

set_token()  # before Ray is imported: the test cluster uses token authentication
ray = pytest.importorskip("ray")

from conftest import Cluster, start_cluster  # noqa: E402

from nearfaas.cluster import launcher  # noqa: E402
from nearfaas.cluster.launcher import ClusterError  # noqa: E402
from nearfaas.spec.cluster import load_cluster, parse_cluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("host-a", "host-b", "host-c")


@pytest.fixture(scope="module")
def raycluster(tmp_path_factory):
    """Host A (the head: compute and the gateway), B (dscs storage), C (standard storage)."""
    disks = tmp_path_factory.mktemp("hosts")
    raylets = [{"resources": {"nearfaas_compute": 4}, "env": {"NEARFAAS_RAY_DATA": str(disks / "host-a")}},
               {"resources": {"nearfaas_storage_dscs": 4}, "env": {"NEARFAAS_RAY_DATA": str(disks / "host-b")}},
               {"resources": {"nearfaas_storage": 4}, "env": {"NEARFAAS_RAY_DATA": str(disks / "host-c")}}]
    with ray_cluster(tmp_path_factory.mktemp("ray"), raylets) as c:
        c["disks"] = disks
        yield c


@pytest.fixture(scope="module")
def rcluster(raycluster, tmp_path_factory):
    state = tmp_path_factory.mktemp("raystate") / "state"
    c = start_cluster(state, ray_address=raycluster["address"])
    try:
        yield c
    finally:
        launcher.down(state)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nearfaas.cli", *args], capture_output=True, text=True, timeout=300,
                          env=(env or os.environ) | {"COLUMNS": "160"})


def _status(state: Path) -> dict:
    done = _cli("status", "--state", str(state), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_node_runs_on_the_ray_node_offering_its_resource(raycluster, rcluster):
    status = _status(rcluster.state_dir)
    assert status["backend"] == "ray" and status["running"], status
    where = {n["name"]: n["ray_node_id"] for n in status["nodes"]}
    compute, dscs, standard = raycluster["node_ids"]
    assert where == {"compute-0": compute, "storage-0": dscs, "storage-1": standard}, (where, raycluster["node_ids"])
    assert all(n["healthy"] for n in status["nodes"]) and status["gateway"]["ray_node_id"] == compute
    # each node keeps its objects on its own host's disk
    for name, host in (("storage-0", "host-b"), ("storage-1", "host-c"), ("compute-0", "host-a")):
        assert list((raycluster["disks"] / host).glob(f"*/{name}/nodes/{name}")), (name, host)


def test_nodes_on_other_hosts_fetch_the_code_and_secrets_they_run(raycluster, rcluster):
    """No node reads the gateway's disk: each fetches the deployed code and the function's
    secrets from the gateway (signed with the cluster secret), into its own host's folder."""
    assert rcluster.http.post(f"{rcluster.url}/system/secrets", json={"name": "api-key", "value": "over-the-wire"}).status_code == 201
    assert rcluster.deploy("ray-secret", ROOT / "tests/integration/functions/ofsecret", secrets=["api-key"]).status_code == 202
    call = requests.post(f"{rcluster.url}/function/ray-secret", timeout=120)
    assert call.status_code == 200 and call.text == "over-the-wire" and call.headers["X-Nearfaas-Node"] == "compute-0", call.text
    assert list((raycluster["disks"] / "host-a").glob("*/compute-0/nodes/compute-0/code/ray-secret/*/handler.py"))
    # near the data: the storage node holding the object (its dscs replica, on host B) runs it
    s3 = rcluster.s3()
    s3.create_bucket(Bucket="ray-docs")
    s3.put_object(Bucket="ray-docs", Key="a.txt", Body=b"near data on ray " * 100)
    x = {"accelerator": "dscs", "placement": "data", "inputs": ["input"]}
    assert rcluster.deploy("ray-wordcount", ROOT / "examples/wordcount", **{"x-nearfaas": x}).status_code == 202
    call = requests.post(f"{rcluster.url}/function/ray-wordcount", json={"input": {"bucket": "ray-docs", "key": "a.txt"}}, timeout=120)
    assert call.status_code == 200 and call.json()["words"] == 400, call.text
    assert call.headers["X-Nearfaas-Node"] == "storage-0" and int(call.headers["X-Nearfaas-Bytes-Local"]) == 1700, call.headers
    assert list((raycluster["disks"] / "host-b").glob("*/storage-0/nodes/storage-0/code/ray-wordcount/*/handler.py"))
    # the gateway hands code and secrets to its nodes only
    assert requests.get(f"{rcluster.url}/_nearfaas/secrets/ray-secret", timeout=10).status_code == 401
    assert "over-the-wire" not in requests.get(f"{rcluster.url}/_nearfaas/secrets/ray-secret", timeout=10).text
    digest = rcluster.http.get(f"{rcluster.url}/system/function/ray-secret").json()["handler"].rsplit("/", 1)[-1]
    assert requests.get(f"{rcluster.url}/_nearfaas/code/ray-secret/{digest}", timeout=10).status_code == 401


def test_the_s3_and_chain_suites_pass_unchanged_on_ray(raycluster):
    """The existing boto3 S3 tests and the chain tests (near-data and compute-only), run by
    pytest against clusters it starts on this Ray cluster (conftest.start_cluster honours
    NEARFAAS_TEST_RAY)."""
    env = raycluster["env"] | {"NEARFAAS_TEST_RAY": raycluster["address"]}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                           "tests/integration/test_s3_cluster.py", "tests/integration/test_chains.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)
    tail = "\n".join(done.stdout.strip().splitlines()[-15:])
    print(f"\nthe S3 and chain suites on Ray: {tail.splitlines()[-1] if tail else ''} ({time.monotonic() - started:.0f} s)")
    assert done.returncode == 0, tail + done.stderr[-2000:]
    assert " passed" in tail and "failed" not in tail


def test_a_storage_actor_killed_mid_put_is_restarted_and_keeps_every_acknowledged_object(rcluster):
    s3 = rcluster.s3()
    bucket = "ray-durable"
    s3.create_bucket(Bucket=bucket)
    before = next(n for n in _status(rcluster.state_dir)["nodes"] if n["name"] == "storage-0")
    acknowledged: dict[str, bytes] = {}
    stop = threading.Event()

    def writer(worker: int) -> None:
        i = 0
        while not stop.is_set():
            key, body = f"w{worker}/{i}", uuid.uuid4().bytes * 4096
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body)
                acknowledged[key] = body
            except Exception:  # refused while the node is away: never acknowledged, never promised
                pass
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    os.kill(before["actor_pid"], signal.SIGKILL)  # the actor's process, mid-PUT
    killed = time.monotonic()
    time.sleep(1.0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        after = next(n for n in _status(rcluster.state_dir)["nodes"] if n["name"] == "storage-0")
        if after.get("actor_pid") not in (None, before["actor_pid"]) and after["healthy"]:
            break
        time.sleep(0.5)
    back = time.monotonic() - killed
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    print(f"\nstorage-0's actor SIGKILLed; Ray restarted it and the node answered {back:.1f} s later; "
          f"{len(acknowledged)} PUTs acknowledged")
    assert after["healthy"] and after["actor_pid"] != before["actor_pid"] and after["ray_node_id"] == before["ray_node_id"]
    assert len(acknowledged) > 10
    for key, body in acknowledged.items():
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    # and on storage-0 itself, once hinted handoff has replayed what it missed while away
    node = rcluster.s3_at(after["url"])
    deadline = time.monotonic() + 60
    missing = list(acknowledged)
    while missing and time.monotonic() < deadline:
        missing = [k for k in missing if not _on_node(node, bucket, k, acknowledged[k])]
        time.sleep(1.0)
    assert not missing, f"{len(missing)} acknowledged objects never reached storage-0: {missing[:5]}"


def _on_node(node, bucket: str, key: str, body: bytes) -> bool:
    try:
        return node.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    except Exception:
        return False


def test_a_host_leaving_fails_over_and_its_node_returns_with_its_objects(raycluster, tmp_path):
    """Host D (storage-1's only host) leaves the Ray cluster: the gateway takes storage-1 out of
    placement, reads and writes go on (writes leave hints); host D comes back, Ray restarts the
    actor there, and storage-1 serves its old objects and receives what it missed."""
    host_d = {"resources": {"nearfaas_storage_d": 1}, "env": {"NEARFAAS_RAY_DATA": str(raycluster["disks"] / "host-d")}}
    raylet = add_raylet(raycluster, host_d, "host-d")
    state = tmp_path / "state"
    spec = load_cluster(None)
    spec.gateway.port = 0
    spec.nodes[1].ray_resource = "nearfaas_storage_d"  # storage-1 lives on host D only
    layout = launcher.up(spec, state, ray_address=raycluster["address"])
    try:
        c = Cluster(state, layout)
        s3 = c.s3()
        s3.create_bucket(Bucket="leaving")
        old = {f"old/{i}": os.urandom(1000) for i in range(20)}
        for key, body in old.items():
            s3.put_object(Bucket="leaving", Key=key, Body=body)
        kill_raylet(raylet)
        gone = time.monotonic()
        while _node(c, "storage-1")["healthy"]:
            assert time.monotonic() - gone < 30, "the gateway still places on storage-1"
            time.sleep(0.2)
        out_after = time.monotonic() - gone
        assert all(s3.get_object(Bucket="leaving", Key=k)["Body"].read() == v for k, v in old.items())
        new = {f"new/{i}": os.urandom(1000) for i in range(10)}
        for key, body in new.items():
            s3.put_object(Bucket="leaving", Key=key, Body=body)
        raylet = add_raylet(raycluster, host_d, "host-d-again")
        back = time.monotonic()
        while not _node(c, "storage-1")["healthy"]:
            assert time.monotonic() - back < 180, "storage-1 never came back on the returning host"
            time.sleep(0.5)
        back_after = time.monotonic() - back
        node = c.s3_at(_node(c, "storage-1")["url"])
        assert all(_on_node(node, "leaving", k, v) for k, v in old.items())  # its disk came back with it
        deadline = time.monotonic() + 60
        while not all(_on_node(node, "leaving", k, v) for k, v in new.items()):  # hinted handoff
            assert time.monotonic() < deadline, "storage-1 never received the writes it missed"
            time.sleep(1.0)
        print(f"\nhost D left: storage-1 out of placement after {out_after:.1f} s; host D back: storage-1 serving "
              f"after {back_after:.1f} s, with its objects and the {len(new)} writes it missed")
    finally:
        launcher.down(state)
        kill_raylet(raylet)


def _node(cluster, name: str) -> dict:
    return next(n for n in cluster.http.get(f"{cluster.url}/system/nodes", timeout=10).json() if n["name"] == name)


def test_errors_name_their_cause(raycluster, rcluster, tmp_path):
    spec = load_cluster(None)
    spec.gateway.port = 0
    t0 = time.monotonic()
    with pytest.raises(ClusterError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:1"):
        launcher.up(spec, tmp_path / "unreachable", ray_address="127.0.0.1:1")
    assert time.monotonic() - t0 < 15
    lonely = parse_cluster({"nodes": [{"name": "storage-0", "kind": "storage", "class": "dscs", "ray_resource": "nearfaas_nowhere"}],
                            "replication": {"factor": 1}, "gateway": {"port": 0}})
    with pytest.raises(ClusterError, match=r"no Ray node offers enough of the resource 'nearfaas_nowhere'.*ray start"):
        launcher.up(lonely, tmp_path / "lonely", ray_address=raycluster["address"])
    # a second cluster in the first one's namespace: refused, naming the state dir that owns the names
    clash = load_cluster(None)
    clash.gateway.port = 0
    clash.ray.namespace = json.loads((rcluster.state_dir / "cluster.json").read_text())["ray"]["namespace"]
    with pytest.raises(ClusterError, match=rf"already has an actor named 'gateway'.*{rcluster.state_dir}"):
        launcher.up(clash, tmp_path / "clash", ray_address=raycluster["address"])
    done = _cli("up", "--state", str(tmp_path / "cli"), "--port", "0", "--ray", "127.0.0.1:1")
    assert done.returncode != 0 and "cannot reach a Ray cluster" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_down_leaves_no_actor_and_no_process(raycluster, tmp_path):
    state = tmp_path / "state"
    c = start_cluster(state, ray_address=raycluster["address"])
    layout = json.loads((state / "cluster.json").read_text())
    namespace = layout["ray"]["namespace"]
    dirs = [d for host in HOSTS for d in (raycluster["disks"] / host / namespace).glob("*")]
    assert len(dirs) == 4, dirs  # the gateway and three nodes, each in its host's folder
    assert requests.get(f"{c.url}/healthz", timeout=10).status_code == 200
    done = _cli("down", "--state", str(state))
    assert done.returncode == 0, done.stderr
    for name in ("gateway", "storage-0", "storage-1", "compute-0"):
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=namespace)
    assert [pid for d in dirs for pid in launcher.processes_of(d)] == []
