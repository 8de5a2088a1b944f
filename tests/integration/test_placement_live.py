"""The near-data ladder on the live cluster: busy accelerator, accelerator marked down, per-call policy."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

pytestmark = pytest.mark.integration


@pytest.fixture
def accelerated(cluster, bucket, functions_dir):
    cluster.s3().put_object(Bucket=bucket, Key="input.bin", Body=b"x" * 1000)
    name = "accel-" + bucket[-6:]
    resp = cluster.deploy(name, functions_dir / "slow", labels={"com.openfaas.scale.max": "4"},
                          **{"x-nearfaas": {"accelerator": "dscs", "placement": "data"}})
    assert resp.status_code == 202, resp.text
    body = {"input": {"bucket": bucket, "key": "input.bin"}}
    return name, body


def test_busy_accelerator_falls_back_to_cpu(cluster, accelerated):
    name, body = accelerated
    url = f"{cluster.url}/function/{name}"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(requests.post, f"{url}?sleep=1.0", json=body, timeout=30)
        time.sleep(0.3)  # the first call is running to completion on storage-0's accelerator
        nodes = {n["name"]: n for n in cluster.http.get(f"{cluster.url}/system/nodes").json()}
        assert nodes["storage-0"]["accelerator"] == {"available": True, "busy": True}
        second = requests.post(f"{url}?sleep=0", json=body, timeout=30)
        assert first.result().headers["X-Nearfaas-Placement"] == "dscs;home-replica"
    assert second.status_code == 200
    assert second.headers["X-Nearfaas-Placement"] == "cpu;fallback-busy"
    assert cluster.node(second.headers["X-Nearfaas-Node"])["kind"] == "compute"
    # Free again: back on the accelerator.
    assert requests.post(f"{url}?sleep=0", json=body).headers["X-Nearfaas-Placement"] == "dscs;home-replica"
    metrics = requests.get(f"{cluster.url}/metrics").text
    assert f'nearfaas_placement_total{{function="{name}",reason="fallback-busy",target="cpu"}}' in metrics


def test_accelerator_marked_unavailable_falls_back_to_cpu(cluster, accelerated):
    name, body = accelerated
    url = f"{cluster.url}/function/{name}?sleep=0"
    off = cluster.http.post(f"{cluster.url}/system/nodes/storage-0/accelerator", json={"available": False})
    try:
        assert off.status_code == 200 and off.json()["accelerator"]["available"] is False
        resp = requests.post(url, json=body)
        assert resp.status_code == 200 and resp.headers["X-Nearfaas-Placement"] == "cpu;fallback-accel-unavailable"
    finally:
        cluster.http.post(f"{cluster.url}/system/nodes/storage-0/accelerator", json={"available": True})
    assert requests.post(url, json=body).headers["X-Nearfaas-Placement"] == "dscs;home-replica"
    assert cluster.http.post(f"{cluster.url}/system/nodes/compute-0/accelerator", json={"available": False}).status_code == 400
    assert cluster.http.post(f"{cluster.url}/system/nodes/nope/accelerator", json={"available": False}).status_code == 404
    assert cluster.http.post(f"{cluster.url}/system/nodes/storage-0/accelerator", json={"available": "no"}).status_code == 400


def test_policy_can_be_chosen_per_call(cluster, accelerated):
    name, body = accelerated
    url = f"{cluster.url}/function/{name}?sleep=0"
    forced = requests.post(url, json=body, headers={"X-Nearfaas-Policy": "compute-only"})
    assert forced.headers["X-Nearfaas-Placement"] == "cpu;compute-node" and forced.headers["X-Nearfaas-Policy"] == "compute-only"
    auto = requests.post(url, json=body, headers={"X-Nearfaas-Policy": "auto"})
    assert auto.status_code == 200 and auto.headers["X-Nearfaas-Placement"].endswith(";predicted-fastest")
    assert auto.headers["X-Nearfaas-Predicted"].startswith("modelled;total=")
    bad = requests.post(url, json=body, headers={"X-Nearfaas-Policy": "random"})
    assert bad.status_code == 400 and "choose one of" in bad.text
