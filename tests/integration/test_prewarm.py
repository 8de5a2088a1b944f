"""Pre-warmed generic workers: a cold start that takes one serves exactly like a spawned worker
(environment, working directory, logs), the pool refills and replaces, and nothing outlives
shutdown. Real processes throughout: a WorkerPools in this process, then a whole cluster."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import requests

from nearfaas.auth.internal import WORKER_TOKEN_HEADER

from nearfaas.cluster import launcher
from nearfaas.node.pool import PoolError, WorkerPools
from nearfaas.spec.cluster import NodeSpec, ReplicationSpec

from conftest import FUNCTIONS, start_cluster

pytestmark = pytest.mark.timeout(120)

NODE_URL = "http://127.0.0.1:65001"  # only handed to workers in the environment; nothing listens there


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


async def _until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _call(worker) -> dict:
    url = f"http://127.0.0.1:{worker.port}/"
    stranger = await asyncio.to_thread(requests.post, url, data=b"x", timeout=10)
    assert stranger.status_code == 401, "a worker answers only callers that hold its instance's token"
    resp = await asyncio.to_thread(requests.post, url, data=b"x", timeout=10, headers={WORKER_TOKEN_HEADER: worker.token})
    assert resp.status_code == 200, resp.text
    return resp.json()


def _spec(name: str = "whereami", folder: str = "whereami", **environment) -> dict:
    return {"name": name, "lang": "python3-http", "handler_dir": str(FUNCTIONS / folder),
            "environment": {"GREETING": "hello from the spec", **environment}}


def _run_with_pool(state: Path, prewarm: int, body) -> list[int]:
    """Run ``body(pools)`` against a live pool; returns every pid it saw, all checked dead after shutdown."""
    seen: list[int] = []

    async def main():
        pools = WorkerPools("node-a", state, "http://127.0.0.1:9", None, workers_max=4, prewarm=prewarm, node_url=NODE_URL)
        pools.start_prewarming()
        try:
            await body(pools, seen)
        finally:
            seen.extend(g.process.pid for g in pools.prewarm.idle)
            seen.extend(w.process.pid for w in pools.workers.values())
            await pools.shutdown()

    asyncio.run(main())
    assert [pid for pid in seen if _alive(pid)] == [], "shutdown left processes behind"
    assert launcher.processes_of(state) == []
    return seen


def _assert_served_like_a_worker(answer: dict, pools: WorkerPools, name: str = "whereami") -> None:
    assert answer["greeting"] == "hello from the spec"
    assert answer["cwd"] == str(FUNCTIONS / "whereami") == answer["sys_path_0"]
    assert (answer["function"], answer["node"], answer["node_url"]) == (name, "node-a", NODE_URL)
    assert answer["stdin_is_devnull"]
    texts = [r["text"] for r in pools.read_logs(name)]
    assert f"whereami called in {FUNCTIONS / 'whereami'}" in texts  # print() reached the function's log


def test_prewarmed_start_serves_refills_and_replaces(tmp_path):
    async def body(pools: WorkerPools, seen: list[int]):
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        generic_pid = pools.prewarm.idle[0].process.pid
        seen.append(generic_pid)
        worker = await pools.start(_spec())
        assert worker.prewarmed and worker.spawn_reason is None
        assert worker.describe()["prewarmed"] is True
        assert worker.process.pid == generic_pid  # the very process that was waiting
        assert worker.cold_start_seconds < 5
        answer = await _call(worker)
        assert answer["pid"] == generic_pid and answer["hash_randomization"] == 1
        _assert_served_like_a_worker(answer, pools)
        assert (pools.stats.cold_starts, pools.stats.prewarmed_starts) == (1, 1)
        # The pool refills in the background with a new process, never beyond its target.
        await _until(lambda: len(pools.prewarm.idle) == 1, what="the pool to refill")
        refill = pools.prewarm.idle[0].process.pid
        assert refill != generic_pid
        assert pools.prewarm.starting == 0 and len(pools.prewarm.idle) == 1
        # A generic worker that dies while idle is replaced.
        os.kill(refill, 9)
        await _until(lambda: pools.prewarm.replaced == 1 and len(pools.prewarm.idle) == 1, what="a replacement")
        assert pools.prewarm.idle[0].process.pid != refill
        seen.append(pools.prewarm.idle[0].process.pid)

    _run_with_pool(tmp_path / "state", 1, body)


def test_prewarm_zero_spawns_and_still_works(tmp_path):
    async def body(pools: WorkerPools, seen: list[int]):
        worker = await pools.start(_spec())
        seen.append(worker.process.pid)
        assert not worker.prewarmed and "prewarm is 0" in worker.spawn_reason
        assert worker.describe()["prewarmed"] is False
        _assert_served_like_a_worker(await _call(worker), pools)
        await asyncio.sleep(0.3)
        assert pools.prewarm.idle == [] and pools.prewarm.starting == 0  # none is ever started
        assert (pools.stats.cold_starts, pools.stats.prewarmed_starts) == (1, 0)

    _run_with_pool(tmp_path / "state", 0, body)
    assert not (tmp_path / "state" / "nodes" / "node-a" / "logs" / "_prewarm.log").exists()


def test_a_python_variable_forces_a_fresh_interpreter(tmp_path):
    async def body(pools: WorkerPools, seen: list[int]):
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        generic_pid = pools.prewarm.idle[0].process.pid
        worker = await pools.start(_spec(PYTHONHASHSEED="0"))
        seen.append(worker.process.pid)
        assert not worker.prewarmed and "PYTHONHASHSEED" in worker.spawn_reason
        answer = await _call(worker)
        assert answer["hash_randomization"] == 0  # it took effect, as only a fresh interpreter can do
        _assert_served_like_a_worker(answer, pools)
        assert [g.process.pid for g in pools.prewarm.idle] == [generic_pid]  # left for the next function

    _run_with_pool(tmp_path / "state", 1, body)


def test_a_generic_worker_that_died_unnoticed_is_not_the_functions_failure(tmp_path):
    async def body(pools: WorkerPools, seen: list[int]):
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        generic_pid = pools.prewarm.idle[0].process.pid
        os.kill(generic_pid, 9)
        time.sleep(0.2)  # dead, and the event loop (blocked here) cannot have noticed: it is still "idle"
        worker = await pools.start(_spec())
        seen.append(worker.process.pid)
        assert not worker.prewarmed and worker.spawn_reason == "the pre-warmed worker exited before it could be used"
        _assert_served_like_a_worker(await _call(worker), pools)

    _run_with_pool(tmp_path / "state", 1, body)


def test_a_handler_that_cannot_load_fails_the_same_way_prewarmed(tmp_path):
    async def body(pools: WorkerPools, seen: list[int]):
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        with pytest.raises(PoolError, match="module_that_does_not_exist"):
            await pools.start(_spec("badimport", "badimport"))
        assert pools.workers == {} and pools.stats.cold_starts == 0
        await _until(lambda: len(pools.prewarm.idle) == 1, what="the pool to refill after a failed start")

    _run_with_pool(tmp_path / "state", 1, body)


@pytest.mark.integration
def test_cluster_nodes_prewarm_report_it_and_leave_nothing_behind(tmp_path):
    state = tmp_path / "state"
    cluster = start_cluster(state, placement="compute-only", replication=ReplicationSpec(factor=1),
                            nodes=[NodeSpec("storage-0", "storage", "dscs", prewarm=0), NodeSpec("compute-0", "compute", "cpu", prewarm=2)])
    try:
        node = cluster.node("compute-0")["url"]
        deadline = time.monotonic() + 30
        while cluster.node_health(node)["prewarm"]["idle"] < 2:
            assert time.monotonic() < deadline, "compute-0 never warmed its generic workers"
            time.sleep(0.05)
        storage = cluster.node_health(cluster.node('storage-0')['url'])["prewarm"]
        assert storage["target"] == 0 and storage["idle"] == 0
        assert cluster.deploy("whereami", FUNCTIONS / "whereami", envVars={"GREETING": "hello from the spec"}).status_code < 300
        answer = requests.post(f"{cluster.url}/function/whereami", timeout=30).json()
        assert answer["greeting"] == "hello from the spec" and Path(answer["cwd"]).parent == state.resolve() / "functions" / "whereami"  # its deployed bundle
        assert answer["node_url"] == node
        health = cluster.node_health(node)
        assert [w["prewarmed"] for w in health["workers"]] == [True]
        assert health["prewarm"]["prewarmed_starts"] == 1 and health["prewarm"]["target"] == 2
        deadline = time.monotonic() + 30
        while "nearfaas_node_prewarm_idle{class=\"cpu\",node=\"compute-0\"} 2.0" not in (
                metrics := requests.get(f"{node}/metrics", timeout=5).text):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.05)
        assert 'nearfaas_node_prewarmed_starts_total{class="cpu",node="compute-0"} 1.0' in metrics
    finally:
        launcher.down(state)
    assert launcher.processes_of(state) == [], "nearfaas down left processes behind"
