"""The tier model's latency experiment (nearfaas.bench.porter_latency): the table it builds from
medians, and a small real run (co-runner, chase and a native kernel, pinned)."""

from __future__ import annotations

import shutil

import pytest

from nearfaas.bench import porter_latency as L
from nearfaas.memory import tiersim


def test_the_table_prices_each_step_with_the_tier_model():
    """Worked example: fast 200 ns, a step at 260 ns (Δ 60 ns); a kernel 0.5 bound, 10 s alone, 11.6 s
    at the step: measured +16 %, predicted 0.5 × 60 / 200 = +15 %, relative error -6.25 %."""
    # catches: Δ taken from the wrong step, the prediction not tiersim's, an error relative to the
    # prediction instead of the measurement, or step 0 reported as a row
    times = {"native-pagerank": {0: [10.0, 10.2, 9.8], 30: [11.6, 11.5, 11.7]}}
    lats = {0: [200.0, 199.0, 201.0], 30: [260.0, 259.0, 261.0]}
    [row] = L.rows(times, lats, {"native-pagerank": 0.5})
    assert row["step_pct"] == 30 and row["delta_ns"] == 60.0 and row["latency_ns"] == 260.0
    assert row["measured_slowdown"] == pytest.approx(0.16)
    assert row["predicted_slowdown"] == pytest.approx(tiersim.slowdown(0.5, 1.0, 60.0, 200.0)) == pytest.approx(0.15)
    assert row["relative_error"] == pytest.approx(-0.0625) and row["within_target"] is True
    far = L.rows({"native-bfs": {0: [10.0], 30: [13.0]}}, lats, {"native-bfs": 0.5})[0]
    assert far["within_target"] is False  # +30 % measured vs +15 % predicted
    unknown = L.rows({"native-bfs": {0: [10.0], 30: [13.0]}}, lats, {"native-bfs": None})[0]
    assert unknown["predicted_slowdown"] is None and unknown["within_target"] is None  # no boundness: no verdict


def test_slowdown_is_linear_in_each_factor_and_zero_without_a_slow_tier():
    # property: the model's monotonicity and limits (what the experiment checks against)
    assert tiersim.slowdown(0.4, 0.0, 150, 100) == 0.0 and tiersim.slowdown(0.0, 1.0, 150, 100) == 0.0
    assert tiersim.slowdown(0.4, 1.0, 150, 100) == pytest.approx(2 * tiersim.slowdown(0.2, 1.0, 150, 100))
    assert tiersim.slowdown(0.4, 0.5, 300, 100) == pytest.approx(tiersim.slowdown(0.4, 1.0, 150, 100))


@pytest.mark.skipif(shutil.which("taskset") is None or shutil.which("cc") is None, reason="needs taskset and a C compiler")
def test_a_small_real_run_measures_every_step(monkeypatch):
    # catches: a co-runner left running or never started (no record), a step without its chase
    # or kernel runs, the rows missing a workload
    monkeypatch.setattr(L, "LOAD_MIB", 64)
    monkeypatch.setattr(L, "CHASE_MIB", 64)
    monkeypatch.setattr(L, "CHASE_STEPS", 200_000)
    rec = L.run(("native-pagerank",), scale=1 / 256, rounds=1, steps=(0, 100), boundness=False)
    assert rec["graph_scale"] == {"native-pagerank": 14}
    assert len(rec["latency_ns_by_step"]["0"]) == len(rec["latency_ns_by_step"]["100"]) == 1
    assert all(t > 0 for t in rec["kernel_s_by_step"]["native-pagerank"]["100"])
    co = rec["co_runner_by_step"]["100"][0]
    # busy_share > 0, not near 1: beside two test workers on 2 cores the co-runner gets what is left
    assert co["percent"] == 100 and co["gb_per_s"] > 0 and co["busy_share"] > 0
    [row] = rec["rows"]
    assert row["workload"] == "native-pagerank" and row["predicted_slowdown"] is None
    with pytest.raises(ValueError, match="must include 0"):
        L.run(("native-pagerank",), steps=(30, 60))
    with pytest.raises(ValueError, match="nt .* or rw"):
        L.run(("native-pagerank",), mode="reads")
