"""Warm pools: bounded queueing at the scale limit, bursts on a cold function, keep-alive and
scale to zero."""

from __future__ import annotations

import time

import pytest
import requests

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _available(cluster, name) -> int:
    return cluster.http.get(f"{cluster.url}/system/function/{name}").json()["availableReplicas"]


def test_calls_wait_in_a_bounded_queue_then_get_429(cluster, functions_dir):
    cluster.deploy("queued1", functions_dir / "slow", envVars={"max_inflight": "1"},
                   labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}, **{"x-nearfaas": {"queue_depth": 2}})
    results = cluster.post_concurrently("/function/queued1?sleep=1.0", 4, timeout=30)
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 200, 200, 429], codes  # one running, two queued, one over the depth
    assert "queue_depth=2" in next(r.text for r in results if r.status_code == 429)


def test_burst_on_a_cold_function_starts_at_most_max_replicas(cluster, functions_dir):
    resp = cluster.deploy("bursty", functions_dir / "slow", wait=False, envVars={"max_inflight": "1"},
                          labels={"com.openfaas.scale.min": "0", "com.openfaas.scale.max": "3", "com.openfaas.scale.zero": "true"},
                          **{"x-nearfaas": {"keep_alive": "1s"}})
    assert resp.status_code == 202
    results = cluster.post_concurrently("/function/bursty?sleep=0.2", 20, timeout=60, signed=True)
    assert [r.status_code for r in results] == [200] * 20, [r.text for r in results if r.status_code != 200]
    metrics = requests.get(f"{cluster.url}/metrics").text
    started = sum(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith('nearfaas_cold_starts_total{function_name="bursty"'))
    assert 1 <= started <= 3, started
    assert _available(cluster, "bursty") <= 3
    # Instances the burst added are idle past keep_alive: back down to one warm instance
    # (scale-to-zero's zero-duration, 5 minutes by default, has not passed).
    deadline = time.monotonic() + 10
    while _available(cluster, "bursty") > 1:
        assert time.monotonic() < deadline, "idle instances were never reaped"
        time.sleep(0.1)
    assert _available(cluster, "bursty") == 1


def test_keep_alive_and_scale_to_zero(cluster, functions_dir):
    cluster.deploy("idler", functions_dir / "echo", wait=False,
                   labels={"com.openfaas.scale.min": "0", "com.openfaas.scale.max": "3", "com.openfaas.scale.zero": "true",
                           "com.openfaas.scale.zero-duration": "5s"}, **{"x-nearfaas": {"keep_alive": "1s"}})
    # zero-duration is longer than three cold starts take on a loaded two-core machine: with 2 s
    # the idler scaled the function back to zero before its third replica was up.
    assert cluster.http.post(f"{cluster.url}/system/scale-function/idler", json={"replicas": 3}).status_code == 202
    cluster.wait_warm("idler", replicas=3)
    assert cluster.http.post(f"{cluster.url}/system/scale-function/idler", json={"replicas": 0}).status_code == 202
    first = requests.post(f"{cluster.url}/function/idler")
    assert first.status_code == 200
    # Idle past zero-duration: scaled to zero, and the next call is a cold start.
    deadline = time.monotonic() + 20
    while _available(cluster, "idler"):
        assert time.monotonic() < deadline, "never scaled to zero"
        time.sleep(0.1)
    assert requests.post(f"{cluster.url}/function/idler").headers["X-Nearfaas-Start"] == "cold"
