"""Sifting on a real two-node Ray cluster (issue 19): `ray start --head` plus a second raylet,
both on this machine, with token authentication. PEs land on both nodes; no particle is lost or
duplicated; every PE ends with exactly its bit prefix; fan-out stays within the pools; labels
are unique; a PE SIGKILLed mid-run is restarted by Ray and the run still conserves every
particle. The CLI's --json and its errors are checked against the same cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ray_helpers import ray_cluster, set_token

set_token()  # before Ray is imported: the test cluster uses token authentication
ray = pytest.importorskip("ray")

from nearfaas.dataservices import sift_ray  # noqa: E402
from nearfaas.dataservices.sifting import Plan, SiftError  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Head + one more raylet (ray_helpers.py)."""
    with ray_cluster(tmp_path_factory.mktemp("ray"), [{}, {}]) as c:
        yield c


def _check(out: dict, particles: int) -> None:
    assert out["particles_out"] == particles == out["particles_in"]
    assert out["duplicates"] == 0 and out["misplaced"] == 0
    assert out["unique_labels"] == out["labels"]
    assert out["max_fanout"] <= out["split"]


def test_pes_on_both_nodes_sort_every_particle(cluster):
    out = sift_ray.run(Plan(8, 4, 10**12), ranks=4, particles=120_000, ray_address=cluster["address"])
    _check(out, 120_000)
    assert len(out["nodes"]) == 2  # PEs were placed on both raylets
    assert out["stages"] == 2 and sum(out["per_pe"].values()) == 120_000


def test_thresholds_compact_early_and_still_conserve(cluster):
    out = sift_ray.run(Plan(16, 4, 7_000), ranks=5, particles=100_003, ray_address=cluster["address"], seed=4)
    _check(out, 100_003)
    assert out["stages"] == 2


def test_fan_out_stays_in_the_pool(cluster):
    plan = Plan(8, 2, 10**12)
    sifter = sift_ray.Sifter(plan, cluster["address"])
    try:
        sifter.inject(3, 30_000)
        sifter.drain()
        for stage, pe, dests in sifter.fanout:
            prefix = pe & ((1 << plan.matched_after(stage - 1)) - 1)
            allowed = {j for p in range(plan.parts(stage)) for j in plan.pool(stage, plan.matched_bits(stage, prefix, p))}
            assert set(dests) <= allowed and len(set(dests)) <= plan.split
        assert len(sifter.labels) == len(set(sifter.labels))
        assert sifter.verify()["misplaced"] == 0
    finally:
        sifter.close()


def test_a_pe_killed_mid_run_is_restarted_and_nothing_is_lost(cluster):
    killed = []

    def kill_a_loaded_pe(stage, sifter):
        # after stage 1: a PE holding stage-2 data; after the last stage: one holding final data
        target = next(pe for pe in range(sifter.plan.pes) if sifter.ledger[pe].get(stage + 1))
        pid = sifter.endpoints()[target]["pid"]
        os.kill(pid, signal.SIGKILL)
        killed.append((stage, target, pid))

    out = sift_ray.run(Plan(8, 4, 10**12), ranks=4, particles=80_000, ray_address=cluster["address"],
                       after_stage=kill_a_loaded_pe)
    _check(out, 80_000)
    assert len(killed) == 2 and out["recoveries"] >= 2


def test_an_unreachable_ray_address_is_a_quick_clear_error():
    t0 = time.monotonic()
    with pytest.raises(SiftError, match="cannot reach a Ray cluster at 127.0.0.1:1"):
        sift_ray.connect("127.0.0.1:1")
    assert time.monotonic() - t0 < 10


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "nearfaas.cli", *args], capture_output=True, text=True, timeout=240,
                          env=(env or os.environ) | {"COLUMNS": "120"})


def test_the_cli_prints_the_json_the_issue_asks_for(cluster):
    r = _cli("sift", "run", "--pes", "8", "--split", "4", "--particles", "50K", "--ray-address", cluster["address"],
             "--json", env=cluster["env"])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("particles_in", "particles_out", "duplicates", "misplaced", "stages", "per_stage_s"):
        assert key in out
    _check(out, 50_000)
    assert len(out["per_stage_s"]) == out["stages"] == 2


@pytest.mark.parametrize("args, message", [
    (["--pes", "6"], "pes must be a power of two"),
    (["--split", "3"], "split must be a power of two"),
    (["--threshold", "0"], "threshold must be a positive"),
    (["--ray-address", "127.0.0.1:1"], "cannot reach a Ray cluster"),
    (["--ray-address", "nonsense"], "must be host:port"),
    (["--particles", "900G"], "GB is available"),
])
def test_the_cli_refuses_bad_inputs_clearly(args, message):
    r = _cli("sift", "run", "--particles", "1000", *args)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
