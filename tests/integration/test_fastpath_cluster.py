"""The fast path inside a real cluster: `nearfaas up` starts the executor, the gateway assigns
lambda IDs at deploy and installs fast-path lambdas in the executor's match table, misses are
run by the gateway on the normal worker path, and a redeploy hot-swaps a lambda under load."""

import os
import threading
import time
from pathlib import Path

import pytest
import requests

from nearfaas.cluster import launcher
from nearfaas.fastpath.client import UdpClient
from nearfaas.fastpath.executor import binary_path

ROOT = Path(__file__).resolve().parents[2]
LAMBDAS = ROOT / "fastpath" / "lambdas" / "build"
OK, HOST_OK, UNKNOWN, HOST_ERROR = 0, 1, 2, 7

if not (binary_path().exists() and (LAMBDAS / "web.wasm").exists()):
    if os.environ.get("CI"):
        raise RuntimeError(f"the fast path is not built ({binary_path()}, {LAMBDAS}); `make setup` builds it")
    pytest.skip("the fast path is not built: run `make setup`", allow_module_level=True)


def body(name, module=None, native=None, **fast):
    spec = {"module": module} if module else {"native": native}
    return {"service": name, "lang": "wasm" if module else "native", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "fastpath": spec | fast}}


@pytest.fixture
def lambdas(cluster):
    names = []

    def deploy(name, **kw):
        names.append(name)
        resp = requests.post(f"{cluster.url}/system/functions", json=body(name, **kw), timeout=30)
        assert resp.status_code == 202, resp.text
        return requests.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["lambdaId"]

    yield deploy
    for name in names:
        requests.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def udp(cluster):
    fp = cluster.layout["fastpath"]
    return UdpClient((cluster.layout["host"], fp["udp"]), timeout=5)


def test_the_cluster_runs_the_executor_and_down_stops_it(tmp_path):
    from conftest import start_cluster

    state = tmp_path / "state"
    c = start_cluster(state)
    try:
        pid = next(p["pid"] for p in c.layout["processes"] if p["name"] == "fastpath")
        assert pid in launcher.processes_of(state)
        assert requests.get(f"{c.url}/system/fastpath", timeout=5).json()["executor"]["running"] is True
    finally:
        launcher.down(state)
    assert launcher.processes_of(state) == []


def test_match_over_udp_and_http(cluster, lambdas):
    lambda_id = lambdas("fp-web", module="web.wasm")
    with udp(cluster) as client:
        status, reply = client.call(lambda_id, b"udp")
    assert (status, reply) == (OK, b"Hello from nearfaas fastpath v1: udp")
    resp = requests.post(f"{cluster.url}/function/fp-web", data=b"http", timeout=5)
    assert resp.status_code == 200 and resp.content == b"Hello from nearfaas fastpath v1: http"
    assert resp.headers["X-Nearfaas-Target"] == "fastpath" and resp.headers["X-Nearfaas-Lambda-Id"] == str(lambda_id)
    status = requests.get(f"{cluster.url}/system/function/fp-web", timeout=5).json()
    assert status["availableReplicas"] == 1 and status["instances"] == []  # served by the executor, no workers
    table = requests.get(f"{cluster.url}/system/fastpath", timeout=5).json()
    assert {"name": "fp-web", "lambdaId": lambda_id, "target": "fastpath"} in table["table"]


def test_native_lambda_matches_too(cluster, lambdas):
    lambda_id = lambdas("fp-native", native="web")
    with udp(cluster) as client:
        status, reply = client.call(lambda_id, b"n")
    assert status == OK and reply.endswith(b": n")


def test_a_miss_runs_on_the_worker_path(cluster, scratch):
    assert scratch("fp-hello", ROOT / "examples" / "hello").status_code == 202
    lambda_id = requests.get(f"{cluster.url}/system/function/fp-hello", timeout=5).json()["lambdaId"]
    assert isinstance(lambda_id, int)
    with udp(cluster) as client:
        assert client.call(lambda_id, b"{}") == (HOST_OK, b"ok")
        status, reply = client.call(65_000, b"x")
    assert status == UNKNOWN and b"65000" in reply
    stats = requests.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
    assert stats["host_forwarded"] >= 2


def test_redeploy_hot_swaps_under_load_without_a_failed_call(cluster, lambdas):
    lambda_id = lambdas("fp-swap", module="web.wasm")
    seen, failures, stop = [], [], threading.Event()

    def hammer():
        with udp(cluster) as client:
            while not stop.is_set():
                status, reply = client.call(lambda_id, b"x")
                (seen if status == OK else failures).append(reply[:32] if status == OK else (status, reply))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    def wait_for(pred, timeout=20.0):
        deadline = time.monotonic() + timeout
        while not pred() and time.monotonic() < deadline and not failures:
            time.sleep(0.01)

    try:
        wait_for(lambda: len(seen) >= 200)  # under load before the swap...
        resp = requests.put(f"{cluster.url}/system/functions", json=body("fp-swap", module="web_v2.wasm"), timeout=30)
        assert resp.status_code == 200, resp.text
        with udp(cluster) as client:
            assert client.call(lambda_id, b"after")[1] == b"Hello from nearfaas fastpath v2: after"
        wait_for(lambda: sum(s.startswith(b"Hello from nearfaas fastpath v2") for s in seen[-200:]) >= 200)  # ...and after it
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert failures == [] and len(seen) >= 400
    assert {s[:31] for s in seen} == {b"Hello from nearfaas fastpath v1", b"Hello from nearfaas fastpath v2"}


def test_removed_lambda_is_unknown(cluster):
    resp = requests.post(f"{cluster.url}/system/functions", json=body("fp-gone", module="web.wasm"), timeout=30)
    assert resp.status_code == 202
    lambda_id = requests.get(f"{cluster.url}/system/function/fp-gone", timeout=5).json()["lambdaId"]
    requests.delete(f"{cluster.url}/system/functions", json={"functionName": "fp-gone"}, timeout=30)
    with udp(cluster) as client:
        assert client.call(lambda_id, b"x")[0] == UNKNOWN


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"x-nearfaas": {"target": "fastpath"}}, "x-nearfaas.fastpath"),
        ({"x-nearfaas": {"target": "fastpath", "fastpath": {"module": "nope.wasm"}}}, "has no nope.wasm"),
        ({"x-nearfaas": {"target": "fastpath", "fastpath": {"native": "doom"}}}, "unknown native lambda"),
        ({"x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "weight": 0}}}, "weight"),
        ({"x-nearfaas": {"target": "gpu"}}, "x-nearfaas.target"),
    ],
)
def test_bad_fastpath_specs_are_400_naming_the_field(cluster, fields, needle):
    spec = {"service": "fp-bad", "lang": "wasm", "handler": str(LAMBDAS)} | fields
    resp = requests.post(f"{cluster.url}/system/functions", json=spec, timeout=30)
    assert resp.status_code == 400 and needle in resp.text, resp.text


def test_a_module_the_executor_refuses_is_a_400(cluster, tmp_path):
    (tmp_path / "junk.wasm").write_bytes(b"\0asm\1\0\0\0garbage")
    spec = {"service": "fp-junk", "lang": "wasm", "handler": str(tmp_path),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "junk.wasm"}}}
    resp = requests.post(f"{cluster.url}/system/functions", json=spec, timeout=30)
    assert resp.status_code == 400 and "refused" in resp.text, resp.text
    assert requests.get(f"{cluster.url}/system/function/fp-junk", timeout=5).status_code == 404
