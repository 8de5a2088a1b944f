"""The decision engine (dataservices/decision.py): the CFS quota model's limits, and decisions
that follow the predicted sides, flip under a queue, and fall back without models."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.dataservices import decision, sql
from nearfaas.dataservices.decision import CFS_PERIOD_S, OffloadPolicy, quota_time
from nearfaas.dataservices.particles import particles
from nearfaas.dataservices.sketches import table_stats


@settings(max_examples=200, deadline=None)
@given(cpu=st.floats(0, 5), cpus=st.floats(0.05, 0.99), more=st.floats(0, 1))
def test_quota_time_limits(cpu, cpus, more):
    t = quota_time(cpu, cpus)
    assert t >= cpu - 1e-12  # never faster than the work
    assert t <= cpu / cpus + CFS_PERIOD_S + 1e-9  # never slower than 1/cpus, give or take one period
    assert quota_time(cpu + more, cpus) >= t - 1e-12  # more work never takes less time
    if cpu <= cpus * CFS_PERIOD_S:
        assert t == pytest.approx(cpu)  # fits in one period's quota: full speed
    assert quota_time(cpu, None) == quota_time(cpu, 1.0) == cpu


class _Models:
    """Linear stand-ins for the forests, so the test checks the engine, not a fit."""

    config = {"max_rows": 10**9, "max_bytes": 10**12}

    def predict_query_time(self, ops):  # power costs ~25x a multiply per element (operations.py)
        return 2e-9 * sum(v * (25 if k == "power" else 1) for k, v in ops.items() if k not in ("table_rows", "output_rows"))

    def predict_size(self, rows, cols, row_bytes):
        return rows * row_bytes + 512

    def predict_serialization_time(self, rows, cols, row_bytes):
        return rows * row_bytes / 2e9

    def predict_transfer_time(self, nbytes):
        return 50e-6 + nbytes / 3e9


@pytest.fixture(scope="module")
def view_for():
    stats = {"particles": table_stats(particles(200_000, seed=4))}

    def make(q, **kw):
        return decision.query_view(sql.parse(q), stats, 200_000 * 72, **kw)

    return make


def test_the_choice_is_the_smaller_predicted_side(view_for):
    policy = OffloadPolicy(_Models())
    for q in ("select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1", "select * from particles",
              "select id, power(vx, 2) + power(vy, 2) from particles where z < 0.5"):
        for link in ("local", "dc-25g", "s3-like"):
            for cpus in (None, 0.5, 0.05):
                p = policy.decide(view_for(q, link=link, node_cpus=cpus))
                sides = {"offload": p.offload_s, "partial": p.partial_s, "push-back": p.pushback_s}
                assert sides[p.choice] == min(v for v in sides.values() if v is not None)
                assert p.header().startswith("modelled; choice=")
                assert (p.partial_s is None) == (q.startswith("select *"))  # select * has no cut


def test_a_slow_link_offloads_a_selective_query_and_a_queue_pushes_it_back(view_for):
    policy = OffloadPolicy(_Models())
    q = "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1"
    assert policy.decide(view_for(q, link="s3-like", node_cpus=0.5)).choice == "offload"
    choices = [policy.decide(view_for(q, link="local", node_cpus=0.05, node_queue=k)) for k in (0, 1000)]
    assert choices[-1].choice == "push-back" and choices[-1].reason == "queue"
    assert choices[-1].offload_s > choices[0].offload_s  # the queue only adds


def test_without_models_it_offloads_and_says_why(view_for):
    p = OffloadPolicy(None).decide(view_for("select * from particles"))
    assert (p.choice, p.reason, p.offload_s, p.partial_s) == ("offload", "no-models", None, None)
    assert "reason=no-models" in p.header()


def test_partial_push_back_wins_when_the_filter_is_cheap_and_the_rest_is_not(view_for):
    """A busy node and a slow link: filtering there and computing the powers here beats both
    doing it all behind the node's queue and moving the whole table; an idle node offloads."""
    policy = OffloadPolicy(_Models())
    q = "select particle_id, power(vx, 2) + power(vy, 2) + power(vz, 2) from particles where x >= 0.9"
    assert policy.decide(view_for(q, link="s3-like", node_queue=0)).choice == "offload"
    p = policy.decide(view_for(q, link="s3-like", node_queue=4))
    assert p.choice == "partial" and p.partial_s < min(p.offload_s, p.pushback_s) and p.reason == "queue"
    assert "partial_ms=" in p.header()
    assert p.parts["intermediate_bytes"] < p.parts["result_bytes"] * 2  # 4 of 9 columns of 10% of rows


def test_an_aggregate_over_many_objects_never_offloads_whole(view_for):
    import dataclasses

    policy = OffloadPolicy(_Models())
    view = dataclasses.replace(view_for("select count(*) from particles where x < 0.01", link="s3-like"),
                               offload_whole=False)
    p = policy.decide(view)
    assert p.offload_s is None and p.choice == "partial"  # the filter on the node, the count here
    assert OffloadPolicy(None).decide(view).choice == "partial"
