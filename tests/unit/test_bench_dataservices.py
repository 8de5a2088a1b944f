"""The offload/push-back benchmark's library (nearfaas.bench.dataservices) on tiny tables, with
tiny injected cost models so nothing big is trained: every query is measured both ways and
decided by the engine, the oracle is never beaten, Table 5.9 and the storm are there, and the
storage node's cgroup (when one could be made) is gone afterwards. The real run is
``python benchmarks/dataservices.py``."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from nearfaas.bench import dataservices as ds
from nearfaas.bench import dataservices_report as report
from nearfaas.dataservices import costmodels as cm


@pytest.fixture(scope="module")
def result():
    models = cm.train(samples=16, seed=0, min_rows=500, max_rows=5000, tables=12, transfers=6, repeats=1, trees=8)
    return ds.run(quick=True, queries=12, sizes=[1000, 5000], storage_cpus=0.5, seed=3, models=models)


def test_every_query_is_measured_both_ways_and_decided(result):
    assert len(result["records"]) == 12 and result["sizes"] == [1000, 5000]
    for r in result["records"]:
        assert r["template"] in ds.IDS and r["table_rows"] in (1000, 5000)
        assert all(v > 0 for v in r["offload"].values()) and all(v > 0 for v in r["pushback"].values())
        for prof in ds.PROFILES:
            p = r["profiles"][prof]
            assert p["offload_s"] > 0 and p["pushback_s"] > 0
            assert p["engine"] in ds.SIDES and p["oracle"] in ds.SIDES
            assert p["predicted_offload_s"] > 0 and p["predicted_pushback_s"] > 0
            has_cut = not r["sql"].startswith("select *")  # select * has no partial side
            assert ("partial" in r) == has_cut and (p["partial_s"] is not None) == has_cut
            assert (p["predicted_partial_s"] is not None) == has_cut
            if has_cut:
                assert all(v > 0 for k, v in r["partial"].items() if k not in ("node_sql", "intermediate_rows"))
    assert result["results_agree"] == 12  # the node and the host computed the same result
    json.dumps(result)  # the result file is plain JSON


def test_oracle_is_never_beaten_and_shares_add_up(result):
    for prof in ds.PROFILES:
        s = result["profiles"][prof]
        t = s["totals_s"]
        assert set(t) == set(ds.POLICIES)
        assert all(t["oracle"] <= t[p] + 1e-12 for p in ds.POLICIES)
        assert 0 <= s["correct"] <= 12 and s["correct_pct"] == pytest.approx(100 * s["correct"] / 12)
        assert sum(s["oracle_wins"].values()) == sum(s["engine_picks"].values()) == 12
        assert set(s["targets_met"]) == set(ds.TARGETS)
        two = s["two_sides"]  # offload vs push-back alone: never better than the oracle over three sides
        assert set(two["oracle_wins"]) == {"offload", "push-back"} and two["totals_s"]["oracle"] >= t["oracle"] - 1e-12
        assert s["within_5pct_of_fastest"] >= s["correct"]
    head = report.headline(result)
    assert set(ds.PROFILES) <= set(head) and set(head["storm_flip_k"]) == set(ds.CASES)


def test_table59_storm_and_printout(result):
    assert result["case_rows"] == 5000
    for cid in ds.CASES:
        c = result["cases"][cid]
        assert [r["row"] for r in c["table59"]] == ["Raw Data Deserialization", "Query Execution", "Result Serialization",
                                                    "Network Transfer", "Result Deserialization", "Sum"]
        sums = c["table59"][-1]
        assert sums["offloaded"]["actual_us"] > 0 and sums["pushed_back"]["estimated_us"] > 0
        assert c["table59"][2]["pushed_back"]["actual_us"] is None  # nothing to serialize on a push-back
        ks = [r["k"] for r in c["storm"]["rows"]]
        assert ks == list(ds.STORM_K)
        offs = [r["predicted_offload_s"] for r in c["storm"]["rows"]]
        assert offs == sorted(offs)  # a longer queue never makes offloading look cheaper
        assert all(r["partial_s"] is None for r in c["storm"]["rows"])  # the cases are select *: no cut
    text = report.table(result)
    for needle in ("Table 5.9", "always-push-back", "oracle", "push-back storm", "measured loopback + modelled link",
                   "partial"):
        assert needle in text


def test_storage_cap_is_reported_and_its_cgroup_removed(result):
    storage = result["storage"]
    assert storage["group_removed"] is True
    if storage["group"]:
        assert not os.path.exists(storage["group"])
    assert result["storage_cap"].startswith(("cgroup", "none: "))


def test_pool_sizes_span_the_range_and_hold_the_case_table():
    sizes = ds.pool_sizes(10**7)
    assert sizes[0] == 10**4 and sizes[-1] == 10**7 and ds.CASE_ROWS in sizes and len(sizes) == 10
    quick = ds.pool_sizes(10**7, quick=True)
    assert quick[-1] == 10**6 and ds.CASE_ROWS not in quick


def test_the_cgroup_and_worker_go_away_on_error(monkeypatch):
    """A run that fails half way still stops its worker and removes the worker's group."""
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    made = []
    real_join = ds.StorageCap.join

    def join(self, pid):
        made.append((self.group, pid))
        real_join(self, pid)

    monkeypatch.setattr(ds, "build_pool", broken)
    monkeypatch.setattr(ds.StorageCap, "join", join)
    with pytest.raises(RuntimeError, match="boom"):
        ds.run(quick=True, queries=1, sizes=[1000], models=SimpleNamespace(config={}))
    for group, pid in made:
        assert not os.path.exists(group)
        assert not os.path.exists(f"/proc/{pid}")  # stopped and reaped
