"""Stream functions on a real cluster (issue 16): deployed through the gateway, chained into one
pipeline in the executor, called on the executor's stream port by their ID and through
POST /function/<name>; bad input is answered, and a deleted function is gone."""

from __future__ import annotations

import heapq
import os
import random
import struct

import pytest

from nearfaas.fastpath import stream as stream_client
from nearfaas.fastpath.executor import binary_path

pytestmark = pytest.mark.integration

if not binary_path().exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"the fast path is not built ({binary_path()}); `make setup` builds it")
    pytest.skip("the fast path is not built: run `make setup`", allow_module_level=True)


def _body(name, stream, chain=()):
    # A native stream function has no code: any folder serves as its handler (here, this one).
    return {"service": name, "lang": "native", "handler": os.path.dirname(__file__),
            "x-nearfaas": {"target": "stream", "stream": stream, "chain": list(chain)}}


@pytest.fixture
def streams(cluster):
    names = []

    def deploy(name, stream, chain=()):
        names.append(name)
        resp = cluster.http.post(f"{cluster.url}/system/functions", json=_body(name, stream, chain), timeout=30)
        assert resp.status_code == 202, resp.text
        return cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["stream"]

    yield deploy
    for name in reversed(names):
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def _addr(info):
    host, port = info["address"].rsplit(":", 1)
    return host, int(port)


def test_topk_on_the_stream_port_and_through_the_gateway(cluster, streams):
    info = streams("topk16", {"fn": "topk", "k": 16})
    values = [random.Random(1).getrandbits(32) for _ in range(1000)]
    payload = struct.pack(f"<{len(values)}I", *values)
    status, got = stream_client.call(_addr(info), info["id"], payload)
    assert status == "OK" and list(got) == heapq.nlargest(16, values)
    resp = cluster.http.post(f"{cluster.url}/function/topk16", data=payload, timeout=10)
    assert resp.status_code == 200 and resp.headers["X-Nearfaas-Target"] == "stream"
    assert list(struct.unpack(f"<{len(resp.content) // 4}I", resp.content)) == heapq.nlargest(16, values)
    bad = cluster.http.post(f"{cluster.url}/function/topk16", data=b"\x01\x02\x03", timeout=10)  # not a whole u32
    assert bad.status_code == 400 and bad.headers["X-Nearfaas-Stream-Status"] == "BAD_REQUEST"


def test_chained_stream_functions_run_as_one_pipeline(cluster, streams):
    streams("keep-big", {"fn": "topk", "k": 4})
    streams("over-100", {"fn": "filter", "min": 100}, ["keep-big"])
    head = streams("numbers", {"fn": "parse"}, ["over-100"])
    text = b"5 700 99 100 3000, 42 101 650 12"
    status, got = stream_client.call(_addr(head), head["id"], text)
    assert status == "OK" and list(got) == [3000, 700, 650, 101]


def test_a_bad_stream_spec_names_the_field_and_a_deleted_function_is_unknown(cluster, streams):
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=_body("bad-k", {"fn": "topk", "k": 0}), timeout=30)
    assert resp.status_code == 400 and "x-nearfaas.stream.k" in resp.text
    info = streams("short-lived", {"fn": "topk", "k": 2})
    cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "short-lived"}, timeout=30)
    status, _ = stream_client.call(_addr(info), info["id"], struct.pack("<2I", 1, 2))
    assert status == "UNKNOWN"


def test_a_webassembly_stream_function_deployed_through_the_gateway(cluster, streams):
    lambdas = os.path.join(os.path.dirname(__file__), "..", "..", "fastpath", "lambdas", "build")
    if not os.path.exists(os.path.join(lambdas, "topk_stream.wasm")):
        pytest.skip("fastpath/lambdas/build/topk_stream.wasm is not built (make setup)")
    body = {"service": "wasm-topk", "lang": "wasm", "handler": os.path.abspath(lambdas),
            "x-nearfaas": {"target": "stream", "stream": {"fn": "wasm", "module": "topk_stream.wasm", "k": 8}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30)
    assert resp.status_code == 202, resp.text
    try:
        info = cluster.http.get(f"{cluster.url}/system/function/wasm-topk", timeout=5).json()["stream"]
        values = [random.Random(7).getrandbits(32) for _ in range(5000)]
        status, got = stream_client.call(_addr(info), info["id"], struct.pack(f"<{len(values)}I", *values))
        assert status == "OK" and list(got) == heapq.nlargest(8, values)
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "wasm-topk"}, timeout=30)
