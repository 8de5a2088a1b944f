"""Accepted async calls survive `nearfaas down`/`up` (issue 13, item 5: 144 of 200 were lost).

Each test accepts 200 async calls of a slow function that records every run it gets as an object
``runs/<call id>/<attempt>-<random>`` (tests/integration/functions/recorder), stops the cluster
while most calls are still queued, starts it again from the same state dir and waits for the
queue to empty. A clean `down` (SIGTERM) must lose nothing and run nothing twice; a SIGKILLed
gateway may run the calls that were in flight again, with the same call id and a higher attempt.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import time

import requests

from nearfaas.cluster import launcher

from conftest import Cluster, start_cluster

N = 200
SLEEP_S = 0.5  # 16 consumers x 0.5 s: ~32 calls/s, so most of the 200 are still queued at `down`
BUCKET = "async-durable"


def _runs(cluster: Cluster) -> dict[str, list[int]]:
    """call id -> the attempt numbers of its recorded runs (0: the run saw no X-Call-Attempt)."""
    runs: dict[str, list[int]] = collections.defaultdict(list)
    for page in cluster.s3().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="runs/"):
        for obj in page.get("Contents", []):
            _, call_id, run = obj["Key"].split("/")
            attempt = run.split("-")[0]
            runs[call_id].append(int(attempt) if attempt.isdigit() else 0)
    return runs


def _metric(cluster: Cluster, name: str) -> float | None:
    text = cluster.http.get(f"{cluster.url}/metrics", timeout=10).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def _wait_nodes_healthy(cluster: Cluster, timeout: float = 10.0) -> None:
    """On a loaded box the gateway's first health poll may miss a node that just started; the
    next poll finds it."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = cluster.http.get(f"{cluster.url}/system/nodes", timeout=5).json()
        if all(n["healthy"] for n in nodes):
            return
        assert time.monotonic() < deadline, f"nodes not healthy after {timeout:g}s: {nodes}"
        time.sleep(0.1)


def _accept_calls(cluster: Cluster, recorder_dir) -> list[str]:
    _wait_nodes_healthy(cluster)
    cluster.s3().create_bucket(Bucket=BUCKET)
    assert cluster.deploy("recorder", recorder_dir, **{"x-nearfaas": {"buckets": [BUCKET]}}).status_code == 202
    session = requests.Session()
    ids = []
    for _ in range(N):
        resp = session.post(f"{cluster.url}/async-function/recorder", json={"record_to": BUCKET, "sleep": SLEEP_S}, timeout=10)
        assert resp.status_code == 202, resp.text
        ids.append(resp.headers["X-Call-Id"])
    assert len(set(ids)) == N
    return ids


def _restart_and_drain(state, timeout: float = 40.0) -> tuple[Cluster, dict[str, list[int]], float]:
    """Start the cluster again from ``state``; wait until its async queue is empty."""
    cluster = start_cluster(state)
    _wait_nodes_healthy(cluster)
    resumed = _metric(cluster, "nearfaas_async_resumed_total")
    deadline = time.monotonic() + timeout
    while (depth := _metric(cluster, "nearfaas_async_queue_depth")) != 0:
        assert time.monotonic() < deadline, f"the async queue still holds {depth} calls after {timeout:g}s"
        time.sleep(0.25)
    return cluster, _runs(cluster), resumed


def test_a_clean_down_loses_no_async_call_and_runs_none_twice(fresh_cluster, functions_dir):
    ids = _accept_calls(fresh_cluster, functions_dir / "recorder")
    launcher.down(fresh_cluster.state_dir)  # SIGTERM: in-flight calls finish, queued ones stay in the journal

    cluster, runs, resumed = _restart_and_drain(fresh_cluster.state_dir)
    missing = set(ids) - set(runs)
    assert not missing, f"{len(missing)} of {N} accepted calls never ran across down/up"
    assert resumed is not None and resumed >= N // 2, f"only {resumed} calls were resumed: the test did not stop a busy queue"
    twice = {call_id: attempts for call_id, attempts in runs.items() if len(attempts) != 1}
    assert not twice, f"{len(twice)} calls ran more than once after a clean down: {dict(list(twice.items())[:5])}"
    # A call cut short by the shutdown before it recorded anything ran again as attempt 2; no
    # call was started three times.
    retried = sum(1 for attempts in runs.values() if attempts != [1])
    assert all(attempts in ([1], [2]) for attempts in runs.values()), runs
    print(f"{len(runs)}/{N} ran, {len(twice)} duplicates, {resumed:g} resumed after the restart, {retried} on attempt 2")


def test_a_killed_gateway_reruns_in_flight_calls_with_the_same_call_id(fresh_cluster, functions_dir):
    ids = _accept_calls(fresh_cluster, functions_dir / "recorder")
    time.sleep(SLEEP_S)  # let the first calls get under way: they are the ones a crash interrupts
    gateway = next(p["pid"] for p in fresh_cluster.layout["processes"] if p["name"] == "gateway")
    os.kill(gateway, signal.SIGKILL)
    launcher.down(fresh_cluster.state_dir)

    cluster, runs, resumed = _restart_and_drain(fresh_cluster.state_dir)
    missing = set(ids) - set(runs)
    assert not missing, f"{len(missing)} of {N} accepted calls never ran after the gateway was killed"
    assert resumed is not None and resumed >= N // 2
    # A rerun carries the call id of the first run (so a client can deduplicate) and a higher
    # attempt number: no two runs of one call claim the same attempt. Only calls in flight at the
    # kill (at most one per consumer) may run again.
    assert all(len(set(attempts)) == len(attempts) for attempts in runs.values()), runs
    twice = {call_id: sorted(attempts) for call_id, attempts in runs.items() if len(attempts) > 1}
    assert len(twice) <= 16, twice
    print(f"{len(runs)}/{N} ran, {len(twice)} ran again after SIGKILL, {resumed:g} resumed")
