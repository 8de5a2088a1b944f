"""The twin's gateway tier (SimConfig.gateways): c gateways in front of placement, each a
server of exponential service per routed stage. Checked against Erlang C, and for the
properties a projection from measured gateway capacity leans on."""

from __future__ import annotations

import math

import pytest

from nearfaas.twin.sim import App, Function, SimConfig, poisson, simulate

ONE = {"a": App("a", (Function("f"),))}
TWO_STAGES = {"a": App("a", (Function("f"), Function("g")))}


def _run(lam: float, gateways: int, service_s: float, n: int = 60_000, apps=ONE, seed: int = 7):
    # Nodes fast and plentiful: the gateways are the only queue.
    cfg = SimConfig(storage_nodes=0, compute_nodes=4, compute_slots=1000, apps=apps, services={}, default_service=1e-6,
                    keep_alive_s=math.inf, policy="compute-only", bin_s=1e4, seed=seed, gateways=gateways,
                    gateway_service_s=service_s)
    return simulate(poisson([(0, lam)], 1e12, seed=seed, apps=["a"], max_requests=n), cfg)


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    a = lam / mu
    top = a**c / math.factorial(c) / (1 - a / c)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top) / (c * mu - lam)


@pytest.mark.parametrize("c", [1, 4])
def test_the_gateway_tier_waits_as_erlang_c_says(c):
    lam, service = 0.8 * c / 0.01, 0.01  # 80% busy
    r = _run(lam, c, service, n=200_000)
    theory = erlang_c_wait(lam, 1 / service, c)
    assert abs(r.gateway["mean_wait_s"] - theory) / theory < 0.06, (r.gateway, theory)
    assert abs(r.gateway["utilisation"] - 0.8) < 0.03, r.gateway


def test_a_chain_costs_the_gateways_one_route_per_stage():
    one, two = _run(30.0, 1, 0.01, n=20_000), _run(30.0, 1, 0.01, n=20_000, apps=TWO_STAGES)
    assert two.gateway["utilisation"] == pytest.approx(2 * one.gateway["utilisation"], rel=0.06)


def test_more_gateways_never_wait_longer_and_none_is_the_model_without_a_tier():
    lam, service = 180.0, 0.01  # more than one gateway can route (100/s)
    waits = [_run(lam, c, service, n=20_000).gateway["mean_wait_s"] for c in (2, 4, 16)]
    assert waits == sorted(waits, reverse=True) and waits[-1] < 1e-3, waits
    assert _run(lam, 1, service, n=20_000).gateway["max_queue"] > 1000  # one gateway saturates: the queue grows
    plain = _run(lam, 0, 0.0, n=5_000)
    assert plain.gateway is None and plain.mean_wait_s < 1e-9


def test_a_gateway_tier_needs_a_service_time():
    with pytest.raises(ValueError, match="gateway_service_s"):
        _run(10.0, 2, 0.0, n=10)


def test_the_rack_projection_names_the_gateways_the_bottleneck_until_there_are_enough():
    from nearfaas.twin.gateway_tier import project

    table = project(900.0, requests=3000, factors=(2.8,))
    assert "modelled" in table["label"] and table["gateway_calls_per_s"] == 300.0
    by_count = {c["gateways"]: c for c in table["cases"]}
    assert "gateways" in by_count[1]["bottleneck"] and by_count[1]["gateway_offered_utilisation"] == 2.8
    assert "gateways" not in by_count[4]["bottleneck"] and "gateways" not in by_count[16]["bottleneck"]
    waits = [by_count[n]["gateway_wait_ms_mean"] for n in (1, 4, 16)]
    assert waits == sorted(waits, reverse=True)
    with pytest.raises(ValueError, match="capacity"):
        project(0.0)
