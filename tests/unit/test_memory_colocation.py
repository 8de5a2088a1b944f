"""The LLC filter and the shared-bandwidth colocation model (memory/colocation.py): the filter
only removes accesses, more so with a larger cache; the queue is continuous and increasing; a
neighbour never speeds a function up, more neighbours hurt more, and the slow tier hurts at
least as much as DRAM (Figure 7's shape)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.memory.colocation import KNEE, Function, Tiers, colocate, llc_filter, queue
from nearfaas.memory.tiersim import Trace

epochs = st.lists(st.dictionaries(st.integers(0, 30), st.integers(1, 9), max_size=20), min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(epochs=epochs, small=st.integers(0, 20), more=st.integers(0, 20), footprint=st.integers(1, 64))
def test_the_llc_filter_only_removes_and_more_cache_removes_more(epochs, small, more, footprint):
    trace = Trace(epochs=epochs)
    a = llc_filter(trace, small * 4096, footprint * 4096)
    b = llc_filter(trace, (small + more) * 4096, footprint * 4096)
    total = lambda t: sum(sum(e.values()) for e in t.epochs)  # noqa: E731
    assert total(b) <= total(a) <= total(trace)
    for before, after in zip(trace.epochs, a.epochs, strict=True):
        assert all(before[p] == n for p, n in after.items())  # kept accesses are untouched
    assert llc_filter(trace, 0).epochs == trace.epochs
    assert total(llc_filter(trace, 10**9)) == 0  # a cache larger than the footprint serves everything


def test_the_llc_keeps_the_hottest_pages_for_its_share_of_the_footprint():
    trace = Trace(epochs=[{1: 1, 2: 1}, {1: 1, 3: 1}, {1: 1, 4: 1}])
    assert llc_filter(trace, 4096).epochs == [{2: 1}, {3: 1}, {4: 1}]  # page 1, the hottest, is cached
    # the same four pages standing for a 16x larger footprint: a quarter-page of LLC share, nothing cached
    assert llc_filter(trace, 4096, footprint_bytes=16 * 4 * 4096).epochs == trace.epochs


def test_the_queue_is_continuous_and_increasing():
    xs = [i / 100 for i in range(0, 300)]
    qs = [queue(x) for x in xs]
    assert qs[0] == 1.0 and qs == sorted(qs)
    assert queue(KNEE) == pytest.approx(queue(KNEE + 1e-9), rel=1e-6)
    with pytest.raises(ValueError):
        queue(-0.1)


@settings(max_examples=100, deadline=None)
@given(bound=st.floats(0, 1), demand=st.floats(0.1, 20), others=st.lists(st.floats(0.1, 20), max_size=4),
       ratio=st.floats(0.1, 1.0), delta=st.sampled_from([70.0, 150.0, 250.0]))
def test_neighbours_never_help_and_the_slow_tier_hurts_more(bound, demand, others, ratio, delta):
    t = Tiers(dram_gbps=13.9, fast_ns=200.0, delta_ns=delta, slow_bw_ratio=ratio)
    f = Function("f", bound, demand)
    neighbours = [Function(f"n{i}", 0.5, d) for i, d in enumerate(others)]
    results = {tier: colocate(f, neighbours, tier, t) for tier in ("dram", "slow")}
    for r in results.values():
        assert r["colocation_slowdown"] >= -1e-12
    assert results["slow"]["slowdown"] >= results["dram"]["slowdown"] - 1e-12
    if neighbours:
        fewer = colocate(f, neighbours[:-1], "dram", t)
        assert fewer["slowdown"] <= results["dram"]["slowdown"] + 1e-12


def test_the_worked_example():
    t = Tiers(dram_gbps=13.9, fast_ns=200.0, delta_ns=70.0, slow_bw_ratio=0.5)
    f = Function("f", 0.5, 4.0)
    assert colocate(f, [f], "dram", t)["slowdown"] == pytest.approx(0.22, abs=0.01)
    assert colocate(f, [f], "slow", t)["slowdown"] + 1 == pytest.approx(4.77, abs=0.02)
    with pytest.raises(ValueError, match="tier"):
        colocate(f, [], "cxl", t)


def test_the_llc_size_is_read_from_sysfs_or_zero(tmp_path):
    from nearfaas.memory.colocation import llc_bytes

    (tmp_path / "size").write_text("32768K\n")
    assert llc_bytes(tmp_path / "size") == 32 << 20
    (tmp_path / "size").write_text("2M")
    assert llc_bytes(tmp_path / "size") == 2 << 20
    (tmp_path / "size").write_text("")
    assert llc_bytes(tmp_path / "size") == 0 and llc_bytes(tmp_path / "missing") == 0
