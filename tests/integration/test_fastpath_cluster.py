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
        resp = cluster.http.post(f"{cluster.url}/system/functions", json=body(name, **kw), timeout=30)
        assert resp.status_code == 202, resp.text
        return cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["lambdaId"]

    yield deploy
    for name in names:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


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
        assert c.http.get(f"{c.url}/system/fastpath", timeout=5).json()["executor"]["running"] is True
        group = c.layout["fastpath"]["cgroup"]  # its memory cgroup (N2, test_fastpath_memory.py)
        assert str(pid) in Path(group, "cgroup.procs").read_text().split()
    finally:
        launcher.down(state)
    assert launcher.processes_of(state) == []
    assert not os.path.exists(group), "nearfaas down left the executor's memory cgroup"


def test_match_over_udp_and_http(cluster, lambdas):
    lambda_id = lambdas("fp-web", module="web.wasm")
    with udp(cluster) as client:
        status, reply = client.call(lambda_id, b"udp")
    assert (status, reply) == (OK, b"Hello from nearfaas fastpath v1: udp")
    resp = requests.post(f"{cluster.url}/function/fp-web", data=b"http", timeout=5)
    assert resp.status_code == 200 and resp.content == b"Hello from nearfaas fastpath v1: http"
    assert resp.headers["X-Nearfaas-Target"] == "fastpath" and resp.headers["X-Nearfaas-Lambda-Id"] == str(lambda_id)
    status = cluster.http.get(f"{cluster.url}/system/function/fp-web", timeout=5).json()
    assert status["availableReplicas"] == 1 and status["instances"] == []  # served by the executor, no workers
    table = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()
    assert {"name": "fp-web", "lambdaId": lambda_id, "target": "fastpath"} in table["table"]


def test_native_lambda_matches_too(cluster, lambdas):
    lambda_id = lambdas("fp-native", native="web")
    with udp(cluster) as client:
        status, reply = client.call(lambda_id, b"n")
    assert status == OK and reply.endswith(b": n")


def test_a_miss_runs_on_the_worker_path(cluster, scratch):
    assert scratch("fp-hello", ROOT / "examples" / "hello").status_code == 202
    lambda_id = cluster.http.get(f"{cluster.url}/system/function/fp-hello", timeout=5).json()["lambdaId"]
    assert isinstance(lambda_id, int)
    with udp(cluster) as client:
        assert client.call(lambda_id, b"{}") == (HOST_OK, b"ok")
        status, reply = client.call(65_000, b"x")
    assert status == UNKNOWN and b"65000" in reply
    stats = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
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
        resp = cluster.http.put(f"{cluster.url}/system/functions", json=body("fp-swap", module="web_v2.wasm"), timeout=30)
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


def test_functions_from_one_coalesced_module_run_their_own_entries(cluster, lambdas):
    """λ-NIC's lambda coalescing through the gateway: two functions name entries of one module
    (fastpath: {module: coalesced.wasm, entry: ...}); each answers as its own lambda."""
    web2 = lambdas("fp-co-web2", module="coalesced.wasm", entry="web2")
    web3 = lambdas("fp-co-web3", module="coalesced.wasm", entry="web3")
    with udp(cluster) as client:
        assert client.call(web2, b"x") == (OK, b"Hello from nearfaas fastpath lambda 2 v1: x")
        assert client.call(web3, b"y") == (OK, b"Hello from nearfaas fastpath lambda 3 v1: y")
    bad = cluster.http.post(f"{cluster.url}/system/functions", json=body("fp-co-bad", module="coalesced.wasm", entry="nope"), timeout=30)
    assert bad.status_code == 400 and "entry" in bad.text


def test_removed_lambda_is_unknown(cluster):
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body("fp-gone", module="web.wasm"), timeout=30)
    assert resp.status_code == 202
    lambda_id = cluster.http.get(f"{cluster.url}/system/function/fp-gone", timeout=5).json()["lambdaId"]
    cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "fp-gone"}, timeout=30)
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
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=spec, timeout=30)
    assert resp.status_code == 400 and needle in resp.text, resp.text


def test_a_module_the_executor_refuses_is_a_400(cluster, tmp_path):
    (tmp_path / "junk.wasm").write_bytes(b"\0asm\1\0\0\0garbage")
    spec = {"service": "fp-junk", "lang": "wasm", "handler": str(tmp_path),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "junk.wasm"}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=spec, timeout=30)
    assert resp.status_code == 400 and "refused" in resp.text, resp.text
    assert cluster.http.get(f"{cluster.url}/system/function/fp-junk", timeout=5).status_code == 404


def _restart_gateway(c) -> None:
    """Kill the gateway and start it again the way `nearfaas up` does; cluster.json keeps
    naming it so `nearfaas down` still stops it."""
    import json
    import signal
    import subprocess
    import sys

    state = c.state_dir.resolve()
    layout = json.loads((state / "cluster.json").read_text())
    entry = next(p for p in layout["processes"] if p["name"] == "gateway")
    os.killpg(entry["pid"], signal.SIGKILL)  # its own session (start_new_session), as launched
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            requests.get(f"{c.url}/healthz", timeout=0.5)
        except requests.ConnectionError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the killed gateway still answers")
    with open(state / "logs" / "gateway.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "nearfaas.gateway.app", "--state", str(state)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=launcher._child_env(layout),
                                start_new_session=True, cwd=state)
    entry["pid"] = proc.pid
    (state / "cluster.json").write_text(json.dumps(layout, indent=2))
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (state / "logs" / "gateway.log").read_text()[-3000:]
        try:
            if requests.get(f"{c.url}/healthz", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, "the restarted gateway did not become healthy"
        time.sleep(0.1)


def test_lambda_ids_survive_a_gateway_restart(fresh_cluster):
    c = fresh_cluster
    http = getattr(c, "http", requests)

    def deploy(name, spec):
        resp = http.post(f"{c.url}/system/functions", json=spec, timeout=30)
        assert resp.status_code == 202, resp.text
        return http.get(f"{c.url}/system/function/{name}", timeout=5).json()["lambdaId"]

    ids = {"r-a": deploy("r-a", body("r-a", module="web.wasm")), "r-gone": deploy("r-gone", body("r-gone", module="web.wasm"))}
    hello = ROOT / "examples" / "hello"
    assert c.deploy("r-hello", hello).status_code == 202
    ids["r-hello"] = http.get(f"{c.url}/system/function/r-hello", timeout=5).json()["lambdaId"]
    ids["r-b"] = deploy("r-b", body("r-b", module="web_v2.wasm"))
    assert http.delete(f"{c.url}/system/functions", json={"functionName": "r-gone"}, timeout=30).status_code in (200, 202)
    gone = ids.pop("r-gone")
    assert (c.state_dir / "gateway" / "lambda_ids.json").exists()

    _restart_gateway(c)

    for name, lambda_id in ids.items():  # the same IDs as before the restart
        assert http.get(f"{c.url}/system/function/{name}", timeout=5).json()["lambdaId"] == lambda_id, name
    with udp(c) as client:
        assert client.call(ids["r-b"], b"x") == (OK, b"Hello from nearfaas fastpath v2: x")
        assert client.call(ids["r-a"], b"y") == (OK, b"Hello from nearfaas fastpath v1: y")
        assert client.call(ids["r-hello"], b"{}") == (HOST_OK, b"ok")  # a miss, run by the restarted gateway
        assert client.call(gone, b"z")[0] == UNKNOWN  # the deleted function's ID reaches nobody
    # A function deployed after the restart gets a new ID, never the deleted one's.
    new_id = deploy("r-new", body("r-new", native="web"))
    assert new_id not in (gone, *ids.values()) and new_id >= 2**32  # random 64-bit (issue 39), not a counter
    with udp(c) as client:
        assert client.call(gone, b"z")[0] == UNKNOWN
