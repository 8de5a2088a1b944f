"""Memory profiling on a live cluster (issue 18): a function deployed with
x-nearfaas.memory.profile runs with the allocation shim preloaded inside its jail; after a few
calls its profile names its allocations by call stack with sampled writes, the hints put the
hot buffer on DRAM; an unprofiled function is a 409, an unsigned caller a 401."""

from __future__ import annotations

import time

import pytest
import requests
from click.testing import CliRunner

from conftest import FUNCTIONS
from nearfaas.memory import shim

pytestmark = pytest.mark.skipif(not (shim.NATIVE / "build" / shim.LIBRARY).is_file(),
                                reason="the memory shim is not built here (make setup builds it with a C compiler)")


def test_a_profiled_function_reports_its_allocations_and_hints(cluster, scratch):
    resp = scratch("memhog", FUNCTIONS / "memhog", **{"x-nearfaas": {"memory": {"profile": True, "sample_ms": 5}}})
    assert resp.status_code < 300, resp.text
    for _ in range(5):
        call = cluster.http.post(f"{cluster.url}/function/memhog", data=b"", timeout=60)
        assert call.status_code == 200 and call.text == "41", call.text  # 40 passes over the hot buffer + 1 cold
    deadline = time.monotonic() + 30
    while True:  # the sampler writes its periods as they pass
        doc = cluster.http.get(f"{cluster.url}/system/memory/memhog", timeout=30).json()
        runs = [r for r in doc["runs"] if "profile" in r]
        touched = [s for r in runs for s in r["profile"]["stacks"] if s["accessed_page_periods"]]
        if runs and touched or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert runs and touched, doc
    stacks = runs[0]["profile"]["stacks"]
    big = [s for s in stacks if s["bytes"] >= 32 << 20]
    assert big, stacks  # the 32 MiB array at import, by the call that made it
    assert max(s["heat"] for s in stacks) > big[0]["heat"]  # touched once vs on every call
    assert doc["hints"] and {h["tier"] for h in doc["hints"]} <= {"dram", "slow"}
    assert doc["hints"][0]["tier"] == "dram" and doc["hints"][0]["heat"] > 0  # the hottest stack gets DRAM
    assert doc["label"].startswith("measured")
    result = CliRunner().invoke(__import__("nearfaas.cli", fromlist=["main"]).main,
                                ["memory", "hints", "memhog", "--json", "--state", str(cluster.state_dir)])
    assert result.exit_code == 0, result.output
    assert '"tier"' in result.stdout
    result = CliRunner().invoke(__import__("nearfaas.cli", fromlist=["main"]).main,
                                ["twin", "tiers", "memhog", "--json", "--state", str(cluster.state_dir)])
    assert result.exit_code == 0, result.output
    policies = __import__("json").loads(result.stdout)
    from nearfaas.memory.tiersim import POLICIES

    assert set(policies) == set(POLICIES)
    assert policies["all-dram"]["slowdown"] == pytest.approx(0.0) and policies["all-cxl"]["slow_tier_bytes_share"] == 1.0
    assert policies["oracle"]["slowdown"] <= policies["all-cxl"]["slowdown"]
    bad = cluster.http.get(f"{cluster.url}/system/memory/memhog/tiers?dram_share=7", timeout=30)
    assert bad.status_code == 400 and "dram_share" in bad.text


def test_refusals(cluster, scratch):
    assert scratch("plain-echo", FUNCTIONS / "echo").status_code < 300
    resp = cluster.http.get(f"{cluster.url}/system/memory/plain-echo", timeout=30)
    assert resp.status_code == 409 and "profile: true" in resp.text
    assert cluster.http.get(f"{cluster.url}/system/memory/nope", timeout=30).status_code == 404
    assert requests.get(f"{cluster.url}/system/memory/plain-echo", timeout=30).status_code == 401
    node = next(n for n in cluster.layout["nodes"] if n["kind"] == "compute")
    assert requests.get(f"{node['url']}/_nearfaas/memory/plain-echo", timeout=10).status_code == 401


def test_another_function_cannot_read_a_profiled_functions_logs(cluster, scratch):
    """Second tenant: the logs sit in the node's state, which every worker's jail hides; a
    hostile function handed their exact paths can neither read nor list them."""
    assert scratch("memhog2", FUNCTIONS / "memhog", **{"x-nearfaas": {"memory": {"profile": True}}}).status_code < 300
    assert cluster.http.post(f"{cluster.url}/function/memhog2", data=b"", timeout=60).status_code == 200
    logs = sorted(cluster.state_dir.glob("nodes/*/memory/memhog2/*.log"))
    assert logs, "the profiled worker wrote no log"
    assert scratch("snooper", FUNCTIONS / "hostile").status_code < 300
    resp = cluster.http.post(f"{cluster.url}/function/snooper", json={"paths": [str(p) for p in logs],
                                                                        "dirs": [str(logs[0].parent)]}, timeout=60)
    assert resp.status_code == 200, resp.text
    seen = resp.json()
    assert all(not v.startswith("read") for v in seen["read"].values()), seen["read"]
    assert all(isinstance(v, str) and "Error" in v for v in seen["list"].values()), seen["list"]


def test_the_next_worker_places_by_what_the_last_one_learned(cluster, scratch):
    """Porter's loop on a live node: the first worker has no hint (everything on DRAM, within
    its share of the node's budget); once it is gone, the next worker of the function starts
    with the hint file its runs taught, and the cold 32 MiB array goes to the slow tier."""
    spec = {"x-nearfaas": {"memory": {"profile": True, "sample_ms": 5}}}
    assert scratch("memhog3", FUNCTIONS / "memhog", **spec).status_code < 300
    for _ in range(3):
        assert cluster.http.post(f"{cluster.url}/function/memhog3", data=b"", timeout=60).status_code == 200
    first = cluster.http.get(f"{cluster.url}/system/memory/memhog3", timeout=30).json()["runs"]
    assert len(first) == 1 and first[0]["placement"]["placed"], first
    assert first[0]["placement"]["slow_bytes"] == 0 and first[0]["placement"]["fast_bytes"] >= 32 << 20  # no hint yet
    cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "memhog3"}, timeout=30)
    assert scratch("memhog3", FUNCTIONS / "memhog", **spec).status_code < 300
    assert cluster.http.post(f"{cluster.url}/function/memhog3", data=b"", timeout=60).status_code == 200
    hints = list(cluster.state_dir.glob("nodes/*/memory/memhog3/hints.txt"))
    assert hints and " slow " in hints[0].read_text(), hints
    runs = cluster.http.get(f"{cluster.url}/system/memory/memhog3", timeout=30).json()["runs"]
    second = [r for r in runs if r["instance"] != first[0]["instance"]]
    assert second and second[0]["placement"]["slow_bytes"] >= 32 << 20, runs  # the cold array, by its call stack
