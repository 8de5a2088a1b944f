"""The tier simulator (memory/tiersim.py): every policy respects the DRAM cap and conserves
pages, all-DRAM costs the measured time exactly, the oracle is never beaten, slowdown grows with
the slow tier's latency, and a Porter hint learned on one input carries over to a larger one."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.memory.tiersim import POLICIES, TierConfig, Trace, hint, simulate, UNSEEN


@st.composite
def traces(draw):
    pages = draw(st.integers(1, 40))
    owners = [f"{draw(st.integers(0, 4)):016x}" for _ in range(pages)]
    epochs = draw(st.lists(st.dictionaries(st.integers(0, pages - 1), st.integers(0, 50), max_size=pages),
                           min_size=1, max_size=6))
    return Trace(epochs=epochs, owner=dict(enumerate(owners)), base_s=draw(st.floats(0.01, 10)),
                 boundness=draw(st.floats(0, 1)))


@settings(max_examples=150, deadline=None)
@given(trace=traces(), cap=st.integers(0, 50), delta=st.sampled_from([70.0, 150.0, 250.0]))
def test_caps_conservation_baseline_and_the_oracle(trace, cap, delta):
    cfg = TierConfig(dram_pages=cap, delta_ns=delta, migrate_s=0.0)
    footprint = len(trace.pages())
    results = {p: simulate(trace, p, cfg) for p in POLICIES}
    for name, r in results.items():
        if name != "all-dram":
            assert r.max_fast_pages <= min(cap, footprint), name  # the cap holds in every epoch
        assert 0.0 <= r.slow_tier_page_share <= 1.0 and 0.0 <= r.slow_share <= 1.0
        assert r.slowdown >= -1e-12
    assert results["all-dram"].time_s == pytest.approx(trace.base_s) and results["all-dram"].migrations == 0
    worst = trace.base_s * (1 + trace.boundness * delta / cfg.fast_ns)
    accesses = sum(sum(epoch.values()) for epoch in trace.epochs)
    assert results["all-cxl"].time_s == pytest.approx(worst if accesses else trace.base_s)
    oracle = results["oracle"].slow_share
    for name in ("first-touch", "interleave", "tpp", "porter", "porter+migration", "all-cxl"):
        assert oracle <= results[name].slow_share + 1e-12, name  # the oracle is never beaten


@settings(max_examples=80, deadline=None)
@given(trace=traces(), cap=st.integers(0, 50))
def test_slowdown_grows_with_the_slow_tiers_latency_and_shrinks_with_dram(trace, cap):
    for policy in POLICIES:
        by_delta = [simulate(trace, policy, TierConfig(cap, delta_ns=d)).slowdown for d in (70, 150, 250)]
        assert by_delta == sorted(by_delta), policy
    oracle = [simulate(trace, "oracle", TierConfig(c)).slowdown for c in (cap, cap + 1, cap + 10)]
    assert oracle == sorted(oracle, reverse=True)  # more DRAM never hurts the oracle


def test_migration_conserves_pages_and_is_paid_for():
    trace = Trace(epochs=[{0: 9, 1: 9}, {2: 9, 3: 9}, {2: 9, 3: 9}], base_s=1.0, boundness=1.0)
    cfg = TierConfig(dram_pages=2, migrate_s=1e-3)
    r = simulate(trace, "tpp", cfg)
    assert r.migrations == 4 and r.max_fast_pages == 2  # 2 promoted, 2 demoted: the footprint stays 4 pages
    assert r.time_s == pytest.approx(1.0 * (1 + 1.0 * r.slow_share * 0.7) + 4e-3)


def test_the_worked_example():
    trace = Trace(epochs=[{0: 90, 1: 5, 2: 5, 3: 0}], owner={0: "A", 1: "B", 2: "B", 3: "B"}, base_s=1.0, boundness=0.5)
    cfg = TierConfig(dram_pages=2, fast_ns=100, delta_ns=150)
    for policy in ("first-touch", "porter", "oracle"):
        assert simulate(trace, policy, cfg).time_s == pytest.approx(1.0375), policy


def test_a_hint_learned_on_one_input_carries_to_a_doubled_one():
    """Keyed by call stack, not address: the hot object of the small run is hot in the big run,
    at other pages. The hint from the small run puts it in DRAM first; first-touch does not."""
    def run(scale, seed):
        rng = random.Random(seed)
        cold = list(range(0, 40 * scale))  # allocated first: a big, cold buffer
        hot = list(range(40 * scale, 50 * scale))  # then a small, hot one
        owner = {p: "cold-site" for p in cold} | {p: "hot-site" for p in hot}
        epochs = [{**{p: rng.randint(0, 1) for p in cold}, **{p: rng.randint(20, 40) for p in hot}} for _ in range(4)]
        return Trace(epochs=epochs, owner=owner, base_s=2.0, boundness=0.6)

    small, big = run(1, 1), run(2, 2)
    learned = hint(small)
    assert learned[0] == "hot-site"
    cfg = TierConfig(dram_pages=25)  # a quarter of the big run's 100 pages
    porter = simulate(big, "porter", cfg, ranked_owners=learned)
    assert porter.slowdown < 0.5 * simulate(big, "all-cxl", cfg).slowdown
    assert porter.slowdown < simulate(big, "first-touch", cfg).slowdown
    assert porter.slowdown - simulate(big, "oracle", cfg).slowdown < 0.05


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="policy"):
        simulate(Trace(epochs=[{}]), "lru", TierConfig(1))
    with pytest.raises(ValueError, match="config"):
        simulate(Trace(epochs=[{}]), "tpp", TierConfig(-1))


def test_a_hint_pools_several_runs_samples():
    """One sparse sample can see a hot object barely (here: once, against a cold one's twice);
    pooled with another run's sample, the hot object ranks first — what the live tuner and the
    benchmark (three half-size runs) rely on."""
    sparse = Trace(epochs=[{1: 1, 2: 2}], owner={1: "hot-site", 2: "cold-site"})
    other = Trace(epochs=[{1: 9, 2: 0}], owner={1: "hot-site", 2: "cold-site"})
    assert hint(sparse)[0] == "cold-site"
    assert hint([sparse, other])[0] == "hot-site"
    assert hint([sparse]) == hint(sparse)


def test_owners_the_profile_never_saw_rank_between_hot_and_cold():
    """The live engine's rule: a call site with no hint goes to DRAM when it fits. A short-lived
    hot allocation the sparse profile missed must not land behind objects seen cold."""
    profile = Trace(epochs=[{1: 5, 2: 0}], owner={1: "seen-hot", 2: "seen-cold"})
    assert hint(profile) == ["seen-hot", UNSEEN, "seen-cold"]
    run = Trace(epochs=[{10: 50, 11: 50, 1: 5}], owner={1: "seen-hot", 2: "seen-cold", 3: "seen-cold", 10: "new", 11: "new"},
                first_touch=(2, 3, 1, 10, 11))
    fast = simulate(run, "porter", TierConfig(dram_pages=3), ranked_owners=hint(profile))
    assert fast.slowdown == pytest.approx(simulate(run, "oracle", TierConfig(dram_pages=3)).slowdown)
