"""The sifting twin (issue 19): conservation, linear scaling in particles, and monotonicity in
the device factor, link bandwidth and core count (property tests over the model)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.dataservices.sifting import Plan
from nearfaas.twin.sifting import Calibration, Link, Machine, project, simulate

CAL = Calibration(inject_s=2e-7, split_s=5e-8, serialize_s=3e-8, absorb_s=2e-8, bytes_per_particle=72)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 4, 16, 128]), st.sampled_from([8, 64, 100]), st.integers(10**4, 10**8))
def test_every_stage_conserves_particles(split, nodes, particles):
    pes = 1 << (nodes - 1).bit_length()
    r = simulate(Plan(pes, split, 1), particles, CAL, Machine(nodes=nodes))
    assert all(s["particles"] == pytest.approx(particles) for s in r.stages)
    assert len(r.stages) == Plan(pes, split, 1).stages


@pytest.mark.parametrize("split", [4, 16, 128])
def test_time_is_linear_in_particles_at_scale(split):
    """Fig. 5.10: sifting time is affine in particles — a fixed cost (message latencies) plus a
    per-particle slope that does not change with scale."""
    plan, m = Plan(128, split, 1), Machine()
    t = {n: simulate(plan, n, CAL, m).total_s for n in (10**7, 10**8, 10**9)}
    assert (t[10**9] - t[10**8]) / (t[10**8] - t[10**7]) == pytest.approx(10, rel=0.02)


@settings(max_examples=25, deadline=None)
@given(st.floats(1.0, 8.0), st.floats(1.0, 8.0))
def test_a_slower_device_is_never_faster(f1, f2):
    plan = Plan(128, 16, 1)
    lo, hi = sorted((f1, f2))
    assert simulate(plan, 10**7, CAL, Machine(speed_factor=lo)).total_s <= simulate(plan, 10**7, CAL, Machine(speed_factor=hi)).total_s + 1e-12


def test_more_bandwidth_and_more_cores_never_hurt():
    plan = Plan(128, 4, 1)
    base = simulate(plan, 10**7, CAL, Machine()).total_s
    fat = Machine(net=Link(100e9, 5e-6))
    assert simulate(plan, 10**7, CAL, fat).total_s <= base
    assert simulate(plan, 10**7, CAL, dataclasses.replace(Machine(), cores=16)).total_s <= base


def test_the_projection_labels_itself_and_covers_the_grid():
    out = project(CAL)
    assert out["label"].startswith("modelled") and out["pes"] == 128
    assert {(r["split"], r["particles"], r["where"]) for r in out["rows"]} == {
        (s, n, w) for s in (4, 16, 128) for n in (10**7, 10**8, 10**9) for w in ("host", "device")}
    dev = {(r["split"], r["particles"]): r["total_s"] for r in out["rows"] if r["where"] == "device"}
    host = {(r["split"], r["particles"]): r["total_s"] for r in out["rows"] if r["where"] == "host"}
    assert all(dev[k] > host[k] for k in dev)


def test_bad_calibration_names_the_field():
    with pytest.raises(ValueError, match="split_s"):
        Calibration(inject_s=1e-7, split_s=float("nan"), serialize_s=0, absorb_s=0, bytes_per_particle=72)
