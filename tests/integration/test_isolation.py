"""A hostile function on a real cluster (node/jail.py): it runs as its own uid and cannot read
another function's secret, the object store's files or cluster.json, cannot signal the node,
the gateway or another function's worker, and holds none of the cluster's keys."""

from __future__ import annotations

import json
import os

import pytest
import requests
from conftest import start_cluster

from nearfaas.cluster import launcher

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root")]

ALLOWED_ENV = {"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
               "NEARFAAS_NODE", "NEARFAAS_NODE_URL", "NEARFAAS_FUNCTION", "NEARFAAS_ACCESS_KEY", "NEARFAAS_SECRET_KEY",
               "HOSTILE_SETTING",
               # the instance's private /tmp, the gateway and namespace (issue 21)
               "TMPDIR", "TMP", "TEMP", "OPENFAAS_URL", "NEARFAAS_GATEWAY_URL", "NEARFAAS_NAMESPACE",
               # the worker's own S3 endpoint for the AWS SDKs (runtime/s3proxy.py): the function's own key
               "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
               "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED", "NEARFAAS_S3_ENDPOINT", "NEARFAAS_REGION"}


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """A cluster of its own with isolation on whatever the shared one runs with (the default
    cluster file turns it on; this says so explicitly)."""
    state = tmp_path_factory.mktemp("isolated") / "state"
    cluster = start_cluster(state, isolation=True)
    yield cluster
    launcher.down(state)
    assert launcher.processes_of(state) == []


def _worker_pids(cluster, function: str) -> list[int]:
    pids = []
    for node in cluster.layout["nodes"]:
        pids += [w["pid"] for w in cluster.node_health(node["url"])["workers"] if w["function"] == function]
    return pids


def test_a_hostile_function_is_confined(isolated, functions_dir):
    cluster = isolated
    state = cluster.state_dir.resolve()
    assert json.loads((state / "cluster.json").read_text())["isolation"] is True
    for name, value in (("isolation-victim", "the victim's secret"), ("isolation-own", "hostile's own secret")):
        resp = cluster.http.post(f"{cluster.url}/system/secrets", json={"name": name, "value": value}, timeout=10)
        assert resp.status_code < 300, resp.text
    assert cluster.deploy("victim", functions_dir / "echo", secrets=["isolation-victim"]).status_code < 300
    assert cluster.deploy("hostile", functions_dir / "hostile", secrets=["isolation-own"],
                          envVars={"HOSTILE_SETTING": "mine"}).status_code < 300
    bucket = "isolation-objects"
    cluster.s3().create_bucket(Bucket=bucket)
    cluster.s3().put_object(Bucket=bucket, Key="private.txt", Body=b"object bytes")

    # Everything worth stealing, found as root the way an attacker would guess it.
    victim_secrets = [str(p) for p in state.rglob("isolation-victim") if p.is_file()]
    store_files = [str(p) for p in state.glob("nodes/*/store/buckets/*/objects/*/*") if p.is_file()]
    assert victim_secrets and store_files
    layout = json.loads((state / "cluster.json").read_text())
    cluster_keys = {layout["internal_secret"], layout["auth"]["secret_key"]}
    platform = [p["pid"] for p in layout["processes"]]  # the gateway and the node agents
    victims = _worker_pids(cluster, "victim")
    hostile_pids = _worker_pids(cluster, "hostile")
    assert platform and victims and hostile_pids

    body = {"paths": [str(state / "cluster.json"), *victim_secrets, *store_files],
            "dirs": [str(state), str(state / "secrets")],
            "writes": [os.path.join(str(functions_dir / "hostile"), "planted.py")],
            "pids": [*platform, *victims],
            "own_secrets": ["isolation-own"],
            "object": {"bucket": bucket, "key": "private.txt"}}
    resp = requests.post(f"{cluster.url}/function/hostile", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    report = resp.json()

    # Its own identity, for good: no root, no groups, no way back.
    assert report["uid"] == report["euid"] == report["gid"] and report["uid"] >= 200000
    assert report["groups"] == [] and report["no_new_privs"] == "1"
    assert report["setuid_root"].startswith("PermissionError")
    # Nothing of the state directory but the way to its own bundle and secrets.
    for path, result in report["read"].items():
        assert not result.startswith("read"), f"the function could read {path}"
    listing = report["list"][str(state)]
    assert "cluster.json" not in listing and "secrets" not in listing, listing
    assert report["list"][str(state / "secrets")].startswith("FileNotFoundError")
    # Its own things still work: its bundle (read-only), its secret, objects through the platform.
    assert report["bundle"].startswith("read")
    assert report["own_secrets"] == {"isolation-own": "hostile's own secret"}
    assert report["object"] == "object bytes"
    # No signal reaches the gateway, a node agent or another function's worker.
    for pid, result in report["signal"].items():
        assert result.startswith("PermissionError"), f"the function could signal pid {pid}: {result}"
    # Nor does it see them: its /proc shows its own uid's processes only (red team round 7 read
    # other workers' mount tables and socket paths there).
    assert not any(report["proc_seen"].values()), report["proc_seen"]
    assert report["proc_uids"] == [report["uid"]], report["proc_uids"]
    # An allow-listed environment: its own variables and keys, none of the cluster's.
    env = report["env"]
    assert set(env) - ALLOWED_ENV == {k for k in env if k.startswith("LC_")}, sorted(env)
    assert env["HOSTILE_SETTING"] == "mine" and env["HOME"] == "/tmp"
    assert not cluster_keys & set(env.values()), "a cluster key reached the function's environment"
    assert env.get("NEARFAAS_SECRET_KEY") not in cluster_keys
    assert env.get("NEARFAAS_ACCESS_KEY") != layout["auth"]["access_key"]
    # And it runs inside cgroups of its own.
    assert "nearfaas-" in report["cgroup"]


def test_nearfaas_down_still_finds_jailed_workers(isolated, functions_dir):
    """Runs last in this module: it stops the cluster."""
    state = isolated.state_dir
    assert isolated.deploy("hostile", functions_dir / "hostile").status_code < 300
    pids = _worker_pids(isolated, "hostile")
    assert pids and all(p in launcher.processes_of(state) for p in pids)
    assert all(os.stat(f"/proc/{p}").st_uid >= 200000 for p in pids)  # jailed, and still found
    launcher.down(state)
    assert launcher.processes_of(state) == []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "Z", f"jailed worker {pid} outlived nearfaas down"
        except FileNotFoundError:
            pass
