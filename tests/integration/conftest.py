"""A real local cluster for the integration tests: separate processes, real sockets and files.

One cluster serves the whole session (bringing one up costs ~1-2 s of this 2-core box); tests
that kill nodes start their own.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
import requests

from nearfaas.client import gateway_session, s3_client
from nearfaas.cluster import launcher
from nearfaas.spec.bundle import pack
from nearfaas.spec.cluster import load_cluster

FUNCTIONS = Path(__file__).parent / "functions"

# The clusters' gateways decide where an S3 Select runs with this machine's cost models when
# there are any (gateway/select_planner.py); the tests' clusters run without, so what they see
# does not depend on whether someone ran `nearfaas dataservices train` here. The engine's own
# test gives its cluster models of its own.
os.environ["NEARFAAS_DATASERVICES_MODELS"] = str(Path(tempfile.gettempdir()) / "nearfaas-tests-no-models")


def _build_test_wheel(folder: Path) -> None:
    """A minimal pure-Python wheel, so requirements.txt installs work with no network."""
    name = "nearfaas_testpkg-1.0-py3-none-any.whl"
    files = {
        "nearfaas_testpkg.py": b"def answer():\n    return 'forty-two from a requirements.txt wheel'\n",
        "nearfaas_testpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nearfaas-testpkg\nVersion: 1.0\n",
        "nearfaas_testpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: nearfaas-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("nearfaas_testpkg-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(folder / name, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr("nearfaas_testpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")


@pytest.fixture(scope="session")
def functions_dir(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("functions") / "functions"
    shutil.copytree(FUNCTIONS, target)
    _build_test_wheel(target / "usepkg")
    return target


class Cluster:
    def __init__(self, state_dir: Path, layout: dict):
        self.state_dir = state_dir
        self.layout = layout
        self.url = layout["gateway_url"]
        # The cluster admin's session (basic auth, as faas-cli sends it): auth is on by default.
        self.http = gateway_session(layout=layout)

    def s3(self, **keys):
        return s3_client(self.url, self.state_dir, **keys)

    def node(self, name: str) -> dict:
        return next(n for n in self.layout["nodes"] if n["name"] == name)

    def keys(self, url: str) -> tuple[str, str]:
        """The keys an S3 client of ``url`` signs with: the cluster's for the gateway, the
        internal secret for a storage node (nodes answer only what the gateway signs)."""
        if url.rstrip("/") == self.url:
            return self.layout["auth"]["access_key"], self.layout["auth"]["secret_key"]
        from nearfaas.auth.internal import INTERNAL_ACCESS_KEY

        return INTERNAL_ACCESS_KEY, self.layout["internal_secret"]

    def s3_at(self, url: str, **config):
        """A boto3 client for the gateway or one storage node, with the right keys."""
        import boto3
        from botocore.config import Config

        access, secret = self.keys(url)
        return boto3.client("s3", endpoint_url=url, aws_access_key_id=access, aws_secret_access_key=secret, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, **({"retries": {"max_attempts": 1}} | config)))

    def signed_headers(self, method: str, url: str, headers: dict | None = None) -> dict:
        """SigV4 headers for a raw request to the gateway's S3 API (UNSIGNED-PAYLOAD), for tests
        that send what boto3 would refuse to."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        class _Unsigned(S3SigV4Auth):
            def payload(self, request):
                return "UNSIGNED-PAYLOAD"

        request = AWSRequest(method=method, url=url, headers=dict(headers or {}))
        _Unsigned(Credentials(*self.keys(self.url)), "s3", "us-east-1").add_auth(request)
        return dict(request.headers)

    def node_health(self, url: str) -> dict:
        """A node's internal health, asked as the gateway asks: signed with the cluster secret."""
        return json.loads(launcher.signed_get(self.layout, f"{url}/_nearfaas/health", timeout=5))

    def deploy(self, name: str, handler: Path, wait: bool = True, **fields) -> requests.Response:
        """Deploy a test function, uploaded as a bundle as `nearfaas deploy` does. Its S3 key may
        use every bucket unless the test declares x-nearfaas.buckets itself."""
        x = dict(fields.pop("x-nearfaas", None) or {})
        x.setdefault("buckets", ["*"])
        body = {"service": name, "lang": "python3-http", "bundle": pack(handler), "x-nearfaas": x} | fields
        resp = self.http.post(f"{self.url}/system/functions", json=body, timeout=30)
        if wait and resp.status_code < 300:
            self.wait_warm(name)
        return resp

    def post_concurrently(self, path: str, n: int, timeout: float = 60.0, signed: bool = False) -> list[requests.Response]:
        """``n`` calls of ``POST <gateway><path>`` at once; the answers in call order. Anonymous
        calls from this host are one client, held to half the anonymous share of the gateway's
        forwarding slots (12 by default): a larger burst is ``signed`` (the admin's budget)."""
        from concurrent.futures import ThreadPoolExecutor

        post = self.http.post if signed else requests.post
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(lambda _: post(f"{self.url}{path}", timeout=timeout), range(n)))

    def wait_prewarmed(self, timeout: float = 60.0) -> None:
        """Until every node has an idle pre-warmed worker: its zygote's imports (and the CPU they
        take from a node capped at a small share of a core) are done."""
        from nearfaas.cluster.launcher import signed_get

        def idle_workers(node: dict) -> int:
            try:
                return json.loads(signed_get(self.layout, f"{node['url']}/_nearfaas/health", timeout=5))["prewarm"]["idle"]
            except OSError:  # a capped node busy importing may answer late: ask again
                return 0

        deadline = time.monotonic() + timeout
        while True:
            idle = {n["name"]: idle_workers(n) for n in self.layout["nodes"]}
            if all(idle.values()):
                return
            assert time.monotonic() < deadline, f"no idle pre-warmed worker on every node after {timeout:g}s: {idle}"
            time.sleep(0.1)

    def wait_warm(self, name: str, replicas: int = 1, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.http.get(f"{self.url}/system/function/{name}", timeout=5).json()
            if status["availableReplicas"] >= replicas:
                return status
            time.sleep(0.05)
        raise AssertionError(f"{name} did not reach {replicas} warm replicas: {status}")


def start_cluster(state_dir: Path, **overrides) -> Cluster:
    """A cluster with the defaults (auth and isolation on). Tests may also deploy handler folders
    by path from this checkout or the temp folders pytest makes (gateway.handler_roots).
    ``ray_address`` (or NEARFAAS_TEST_RAY, which test_ray_backend.py sets to run other test
    modules unchanged on its Ray cluster) starts it on Ray instead (cluster/ray_backend.py)."""
    ray_address = overrides.pop("ray_address", None) or os.environ.get("NEARFAAS_TEST_RAY") or None
    spec = load_cluster(None)
    spec.gateway.port = 0
    spec.gateway.handler_roots = [str(Path(__file__).resolve().parents[2]), tempfile.gettempdir()]
    # Tests' callback recorders listen on loopback; the cluster's own ports stay refused (egress.py).
    spec.gateway.egress_allow = ["127.0.0.1"]
    for key, value in overrides.items():
        if key == "namespaces":  # the gateway's function namespaces; the first is the default
            spec.gateway.namespaces = list(value)
        elif key == "gateway_replicas":  # many gateways behind HAProxy (gateway/peers.py)
            spec.gateway.replicas = int(value)
        else:
            setattr(spec, key, value)
    layout = launcher.up(spec, state_dir, ray_address=ray_address)
    return Cluster(state_dir, layout)


@contextlib.contextmanager
def running_cluster(state_dir: Path, **overrides):
    """A cluster (start_cluster) that is always taken down, leaving no process behind."""
    c = start_cluster(state_dir, **overrides)
    try:
        yield c
    finally:
        launcher.down(state_dir)
    assert launcher.processes_of(state_dir) == [], "nearfaas down left processes behind"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster") / "state") as c:
        yield c


@pytest.fixture
def bucket(cluster, request):
    name = "t-" + hashlib.md5(request.node.nodeid.encode()).hexdigest()[:12]
    s3 = cluster.s3()
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def scratch(cluster):
    """``cluster.deploy`` for one test: what it deploys is removed afterwards, so a test leaves no
    warm workers behind in the shared cluster (each node runs at most workers_max of them)."""
    names = []

    def deploy(name: str, handler: Path, **kwargs) -> requests.Response:
        names.append(name)
        return cluster.deploy(name, handler, **kwargs)

    yield deploy
    for name in names:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def copyset_overrides(storage: int = 4) -> dict:
    """``start_cluster`` overrides for copyset replication (issue 20): ``storage`` storage nodes
    (storage-0 the dscs one), factor 2, scatter width 2 and anti-entropy every second; with more
    storage nodes than copies the copysets differ from rendezvous hashing's replica sets."""
    from nearfaas.spec.cluster import NodeSpec, ReplicationSpec

    nodes = [NodeSpec(f"storage-{i}", "storage", "dscs" if i == 0 else "standard", prewarm=0, cpus=0.5) for i in range(storage)]
    nodes.append(NodeSpec("compute-0", "compute", "cpu", prewarm=1))
    return {"nodes": nodes, "replication": ReplicationSpec(factor=2, scheme="copyset", scatter_width=2, anti_entropy=1.0)}


@pytest.fixture(params=["rendezvous", "copyset"])
def scheme_cluster(tmp_path, request):
    """A private cluster (like fresh_cluster) under each replication scheme."""
    with running_cluster(tmp_path / "state", **(copyset_overrides() if request.param == "copyset" else {})) as c:
        yield c


@pytest.fixture
def fresh_cluster(tmp_path):
    """A private cluster for a test that breaks things (kills nodes); always torn down."""
    with running_cluster(tmp_path / "state") as c:
        yield c
