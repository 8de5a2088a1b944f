"""The sifting plan (issue 19), without Ray: stages, pools, fan-out bounds, unique labels, and
the in-memory reference flow ends with every PE holding exactly its bit prefix."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.dataservices.sifting import Label, Plan, SiftError, flow

POW2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])
SPLITS = st.sampled_from([2, 4, 8, 16, 128])


def test_worked_example_from_the_docstring():
    plan = Plan(8, 4, 100)
    assert (plan.stages, plan.matched_after(1), plan.matched_after(2)) == (2, 2, 3)
    assert plan.parts(1) == 4 and plan.parts(2) == 2
    assert plan.pool(1, 0b10) == [2, 6] and plan.destination(1, 5, 0b10) == 6
    assert plan.pool(2, 0b110) == [6]


@pytest.mark.parametrize("pes, split, stages", [(128, 4, 4), (128, 16, 2), (128, 128, 1), (1, 4, 1)])
def test_stage_counts_follow_the_thesis(pes, split, stages):
    """Fig. 5.8's configurations: 4-way splits take 4 stages to cover 128 PEs, 16-way 2, 128-way 1."""
    assert Plan(pes, split, 1).stages == stages


@settings(max_examples=60, deadline=None)
@given(POW2, SPLITS)
def test_pools_partition_the_pes_and_bound_fan_out(pes, split):
    plan = Plan(pes, split, 1)
    for stage in range(1, plan.stages + 1):
        c = plan.matched_after(stage)
        pools = [plan.pool(stage, m) for m in range(1 << c)]
        assert sorted(j for p in pools for j in p) == list(range(pes))  # every PE in exactly one pool
        assert all(len(p) == pes >> c for p in pools)
        for pe in range(pes):
            prefix = pe & ((1 << plan.matched_after(stage - 1)) - 1)
            dests = {plan.destination(stage, pe, plan.matched_bits(stage, prefix, part)) for part in range(plan.parts(stage))}
            assert len(dests) <= split and len(dests) == plan.parts(stage)
    assert plan.matched_after(plan.stages) == plan.bits


@settings(max_examples=40, deadline=None)
@given(POW2, SPLITS, st.integers(1, 6), st.integers(0, 2**32))
def test_the_reference_flow_conserves_and_sorts(pes, split, ranks, seed):
    plan = Plan(pes, split, 1)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.arange(500 * ranks, dtype=np.uint64) * np.uint64(2654435761) % np.uint64(2**40))
    by_rank = np.array_split(ids, ranks)
    final = flow(plan, by_rank)[-1]
    out = np.concatenate(list(final.values()))
    assert len(out) == len(ids) and len(np.unique(out)) == len(ids)
    assert all((plan.home(v) == pe).all() for pe, v in final.items())


def test_labels_are_unique_by_construction():
    a = Label(2, 3, 5, 1, 1, 0)
    assert str(a) != str(Label(2, 3, 5, 1, 2, 0)) != str(Label(2, 3, 5, 1, 1, 1))


@pytest.mark.parametrize("kwargs, message", [
    ({"pes": 6, "split": 4, "threshold": 1}, "pes must be a power of two"),
    ({"pes": 8, "split": 3, "threshold": 1}, "split must be a power of two >= 2"),
    ({"pes": 8, "split": 1, "threshold": 1}, "split must be a power of two >= 2"),
    ({"pes": 8, "split": 4, "threshold": 0}, "threshold must be a positive"),
    ({"pes": 0, "split": 4, "threshold": 1}, "pes must be 1..4096"),
])
def test_bad_plans_name_the_field(kwargs, message):
    with pytest.raises(SiftError, match=message):
        Plan(**kwargs)
