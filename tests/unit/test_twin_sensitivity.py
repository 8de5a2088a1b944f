"""The twin's four sensitivity studies: limits, conservation and bad input (all modelled)."""

import math

import pytest

from nearfaas.twin import e2e, sensitivity as S

APPS = ["credit_risk", "asset_damage", "chatbot"]
PLATFORMS = ["gpu", "ns_fpga", "dscs"]


def test_batch_one_matches_the_headline_and_devices_gain_from_batching():
    r = S.batch_sweep(batches=[1, 8, 64], apps=APPS, platforms=PLATFORMS)
    base = e2e.evaluate(APPS, PLATFORMS)["speedup_vs_cpu"]
    for p in PLATFORMS:
        assert math.isclose(r["speedup_vs_cpu"][p]["1"], base[p]["geomean"], rel_tol=1e-12)
    for p in ("cpu", "gpu", "dscs"):  # items/s of one instance never falls with a bigger batch
        ips = [r["items_per_s"][p][b] for b in ("1", "8", "64")]
        assert ips == sorted(ips), (p, ips)
    assert r["speedup_vs_cpu"]["dscs"]["64"] > r["speedup_vs_cpu"]["dscs"]["1"]


def test_tail_ratio_one_is_the_deterministic_model_and_absent_components_change_nothing():
    r = S.tail_sweep(ratios=[1, 8], apps=APPS, platforms=PLATFORMS, samples=500)
    base = e2e.evaluate(APPS, PLATFORMS, latency="mean")["speedup_vs_cpu"]  # the study's own tails replace the p95 sampling
    for comp in S.TAIL_COMPONENTS:
        for p in PLATFORMS:
            one = r["components"][comp][p]["1"]
            assert math.isclose(one["p50"], base[p]["geomean"], rel_tol=1e-9)
            assert math.isclose(one["p99"], base[p]["geomean"], rel_tol=1e-9)
    # Near-storage platforms make no host PCIe copies, and neither does the CPU: a PCIe tail
    # cannot move them; traditional platforms have no P2P.
    assert r["components"]["pcie"]["dscs"]["8"] == r["components"]["pcie"]["dscs"]["1"]
    assert r["components"]["p2p"]["gpu"]["8"]["p99"] == pytest.approx(base["gpu"]["geomean"])
    # DSCS still crosses the network for f3, so once the network has a tail its p99 speedup
    # parts from its p50 one.
    assert r["components"]["network"]["dscs"]["8"]["p99"] != r["components"]["network"]["dscs"]["8"]["p50"]


def test_tail_sweep_is_deterministic_under_a_seed():
    a = S.tail_sweep(ratios=[4], components=["network"], apps=APPS, platforms=["dscs"], samples=200, seed=3)
    b = S.tail_sweep(ratios=[4], components=["network"], apps=APPS, platforms=["dscs"], samples=200, seed=3)
    c = S.tail_sweep(ratios=[4], components=["network"], apps=APPS, platforms=["dscs"], samples=200, seed=4)
    assert a["components"] == b["components"] != c["components"]


def test_studies_at_one_match_the_headline_in_both_modes():
    """Batch 1, one accelerated function and the warm column are the headline's own breakdowns,
    in paper mode (p95 requests) and in measured-here mode."""
    for mode in ("paper", "measured-here"):
        base = e2e.evaluate(APPS, PLATFORMS, baseline=mode)["speedup_vs_cpu"]
        acc = S.accelerated_functions(counts=[1, 2], apps=APPS, platforms=PLATFORMS, baseline=mode)["speedup_vs_cpu"]
        warm = S.cold_start(apps=APPS, platforms=PLATFORMS, baseline=mode)["speedup_vs_cpu"]["warm"]
        for p in PLATFORMS:
            assert math.isclose(acc[p]["1"], base[p]["geomean"], rel_tol=1e-12), (mode, p)
            assert math.isclose(warm[p], base[p]["geomean"], rel_tol=1e-12), (mode, p)


def test_accelerated_functions_conserve_time():
    bd = e2e.end_to_end("asset_damage", "dscs")
    for k in (1, 2, 4):
        more = S.with_accelerated_functions(bd, k)
        assert [s.name for s in more.stages][:2] == ["f1", "f2"] and more.stages[-1].name == "f3"
        assert len(more.stages) == 2 + k
        assert math.isclose(more.total_s, bd.total_s + (k - 1) * bd.stages[1].total_s, rel_tol=1e-12)
    r = S.accelerated_functions(counts=[1, 4], apps=APPS, platforms=PLATFORMS)
    assert r["speedup_vs_cpu"]["dscs"]["4"] > r["speedup_vs_cpu"]["dscs"]["1"]
    for p in r["data_movement_share"]:
        assert all(0 <= v <= 1 for v in r["data_movement_share"][p].values())


def test_cold_start_adds_exactly_its_terms():
    runtime = S.runtime_start()
    assert runtime[0] > 0 and "prewarm-off" in runtime[1]
    for platform in ("cpu", "gpu", "ns_arm", "dscs"):
        warm = e2e.end_to_end("chatbot", platform)
        cold = S.cold(warm, runtime)
        extra = sum(t.value_s for s in cold.stages for t in s.terms if t.name.startswith("cold:"))
        assert math.isclose(cold.total_s, warm.total_s + extra, rel_tol=1e-12)
        assert extra >= 3 * runtime[0]  # every stage starts a runtime
        names = {t.name for t in cold.stages[1].terms}
        assert ("cold: build session" in names) == (platform != "dscs")  # the DSA runs a program compiled at deploy
        assert ("cold: weights (flash -> drive DRAM)" in names) == (platform in ("ns_arm", "dscs"))
    r = S.cold_start(apps=APPS, platforms=PLATFORMS)
    for p in ["cpu", *PLATFORMS]:
        assert r["latency_s"]["cold"][p] > r["latency_s"]["warm"][p]
        assert all(v > 0 for v in r["cold_penalty_s"][p].values())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: S.batch_sweep(batches=[0]), "batches"),
        (lambda: S.batch_sweep(batches=[2.5]), "batches"),
        (lambda: S.tail_sweep(ratios=[0.5]), "ratios"),
        (lambda: S.tail_sweep(components=["disk"]), "components"),
        (lambda: S.tail_sweep(samples=3), "samples"),
        (lambda: S.accelerated_functions(counts=[]), "counts"),
        (lambda: S.cold_start(platforms=["tpu"]), "tpu"),
        (lambda: S.batch_sweep(apps=["doom"]), "doom"),
        (lambda: S.cold_start(cold_start_path="/nonexistent.json"), "cold_start.py"),
    ],
)
def test_bad_input_is_a_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
