"""Placement policies as pure functions of a view: table-driven, no server, no socket."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nearfaas.link.profiles import PROFILES, LinkProfile, get_profile
from nearfaas.placement.policy import (Auto, ClusterView, ComputeOnly, Decision, Estimates, Invocation, NearData, NodeLayout,
                                       NodeView, NoNodeAvailable, make_policy)

REF = ("photos", "cat.jpg")
NODES = (
    NodeView("s0", "storage", "dscs"),
    NodeView("s1", "storage", "dscs"),
    NodeView("s2", "storage", "standard"),
    NodeView("c0", "compute", "cpu", inflight=3),
    NodeView("c1", "compute", "cpu", inflight=1),
)
ACCEL = Invocation("f2", accelerator="dscs", placement="auto", inputs=(REF,), input_bytes=20_000_000)


def view(*changes: tuple[str, dict], replicas=("s0", "s1"), nodes=NODES, estimates=Estimates()) -> ClusterView:
    by_name = {n.name: n for n in nodes}
    for name, fields in changes:
        by_name[name] = replace(by_name[name], **fields)
    return ClusterView(tuple(by_name.values()), {REF: list(replicas)}, estimates)


# (case, invocation, view, expected node, target, reason)
NEAR_DATA_LADDER = [
    ("home replica free", ACCEL, view(), "s0", "dscs", "home-replica"),
    ("home busy: next replica", ACCEL, view(("s0", {"accel_busy": True})), "s1", "dscs", "other-replica"),
    ("home unhealthy: next replica", ACCEL, view(("s0", {"healthy": False})), "s1", "dscs", "other-replica"),
    ("home accelerator down: next replica", ACCEL, view(("s0", {"accel_available": False})), "s1", "dscs", "other-replica"),
    ("all replicas busy: CPU", ACCEL, view(("s0", {"accel_busy": True}), ("s1", {"accel_busy": True})), "c1", "cpu", "fallback-busy"),
    ("accelerators unavailable: CPU", ACCEL, view(("s0", {"accel_available": False}), ("s1", {"accel_available": False})),
     "c1", "cpu", "fallback-accel-unavailable"),
    ("replicas unhealthy: CPU", ACCEL, view(("s0", {"healthy": False}), ("s1", {"healthy": False})), "c1", "cpu", "fallback-unhealthy"),
    ("no replica on a dscs node: CPU", ACCEL, view(replicas=("s2",)), "c1", "cpu", "fallback-no-dscs-replica"),
    ("not acceleratable: CPU", replace(ACCEL, accelerator=None), view(), "c1", "cpu", "not-acceleratable"),
    ("placement compute: CPU", replace(ACCEL, placement="compute"), view(), "c1", "cpu", "placement-compute"),
    ("no input, placement data: least-loaded dscs", replace(ACCEL, inputs=(), placement="data"),
     view(("s0", {"inflight": 2})), "s1", "dscs", "no-input"),
    ("no input, every dscs busy: CPU", replace(ACCEL, inputs=(), placement="data"),
     view(("s0", {"accel_busy": True}), ("s1", {"accel_busy": True})), "c1", "cpu", "fallback-busy"),
    ("replica order is honoured", ACCEL, view(replicas=("s1", "s0")), "s1", "dscs", "home-replica"),
    ("compute node down: the other one", replace(ACCEL, accelerator=None), view(("c1", {"healthy": False})), "c0", "cpu",
     "not-acceleratable"),
]


@pytest.mark.parametrize("case,invocation,cluster,node,target,reason", NEAR_DATA_LADDER, ids=[c[0] for c in NEAR_DATA_LADDER])
def test_near_data_ladder(case, invocation, cluster, node, target, reason):
    assert NearData().place(invocation, cluster) == Decision(node, target, reason)


COMPUTE_ONLY = [
    ("least loaded compute node", view(), "c1", "compute-node"),
    ("an idle warm instance beats a cold, less busy node", view(("c0", {"warm": 4})), "c0", "compute-node"),
    ("a busy warm instance does not: the least busy node wins", view(("c0", {"warm": 1})), "c1", "compute-node"),
    ("queued calls keep a warm instance from counting as idle", view(("c0", {"warm": 4, "queue": 1})), "c1", "compute-node"),
    ("equal load: warm before cold", view(("c0", {"warm": 1, "inflight": 1})), "c0", "compute-node"),
    ("queued calls count as load", view(("c1", {"queue": 5})), "c0", "compute-node"),
    ("no compute node left: any healthy node", view(("c0", {"healthy": False}), ("c1", {"healthy": False})), "s0", "no-compute-node"),
]


@pytest.mark.parametrize("case,cluster,node,reason", COMPUTE_ONLY, ids=[c[0] for c in COMPUTE_ONLY])
def test_compute_only(case, cluster, node, reason):
    decision = ComputeOnly().place(ACCEL, cluster)
    assert (decision.node, decision.target, decision.reason) == (node, "cpu", reason)


def test_nothing_healthy_raises():
    dead = tuple(replace(n, healthy=False) for n in NODES)
    for policy in (ComputeOnly(), NearData(), Auto()):
        with pytest.raises(NoNodeAvailable):
            policy.place(ACCEL, ClusterView(dead, {REF: ["s0"]}))


def test_auto_moves_compute_to_the_data_when_the_link_is_slow():
    slow = Estimates({("f2", "dscs"): 0.050, ("f2", "cpu"): 0.020}, PROFILES["s3-like"])
    decision = Auto().place(ACCEL, view(estimates=slow))
    # 20 MB over s3-like costs ~0.25 s, far more than the accelerator's 30 ms disadvantage.
    assert (decision.node, decision.target) == ("s0", "dscs")
    assert decision.predicted_s == pytest.approx(0.050)


def test_auto_keeps_compute_on_cpu_when_the_link_is_free_and_cpu_is_faster():
    local = Estimates({("f2", "dscs"): 0.050, ("f2", "cpu"): 0.020}, PROFILES["local"])
    decision = Auto().place(ACCEL, view(estimates=local))
    assert (decision.node, decision.target, decision.reason) == ("c1", "cpu", "predicted-fastest")
    assert decision.predicted_s == pytest.approx(0.020)


def test_auto_without_measurements_decides_on_data_movement():
    decision = Auto().place(ACCEL, view(estimates=Estimates({}, PROFILES["dc-25g"])))
    assert decision.target == "dscs" and decision.predicted_s == 0.0


def test_auto_counts_queue_wait_and_skips_busy_accelerators():
    est = Estimates({("f2", "dscs"): 0.010, ("f2", "cpu"): 0.010}, PROFILES["local"])
    busy = view(("s0", {"accel_busy": True}), ("s1", {"accel_busy": True}), estimates=est)
    assert Auto().place(ACCEL, busy).target == "cpu"
    queued = view(("c0", {"queue": 4}), ("c1", {"queue": 4}), estimates=est)
    assert Auto().place(ACCEL, queued).node == "s0"


# -- the view's node index (NodeLayout) ---------------------------------------------------------

ALL_CASES = ([(NearData(), inv, cluster) for _, inv, cluster, *_ in NEAR_DATA_LADDER]
             + [(policy, inv, cluster) for policy in (ComputeOnly(), Auto()) for _, inv, cluster, *_ in NEAR_DATA_LADDER]
             + [(ComputeOnly(), ACCEL, cluster) for _, cluster, *_ in COMPUTE_ONLY])


def test_a_given_layout_changes_no_decision():
    """The simulator hands every view a NodeLayout built once; the gateway gives none (the view
    builds its own). Both must decide alike, and the layout is not part of the view's value."""
    for policy, inv, cluster in ALL_CASES:
        indexed = replace(cluster, layout=NodeLayout.of(cluster.nodes))
        assert indexed == cluster
        assert policy.place(inv, indexed) == policy.place(inv, cluster), (policy.name, inv, cluster)


def test_a_layout_of_other_nodes_is_refused_not_trusted():
    cluster = view()
    with pytest.raises(ValueError, match="layout of 4 nodes given for a view of 5"):
        NearData().place(ACCEL, replace(cluster, layout=NodeLayout.of(NODES[:4])))
    swapped = replace(cluster, layout=NodeLayout.of((NODES[1], NODES[0]) + NODES[2:]))
    with pytest.raises(ValueError, match="puts 's0' at 1, where 's1' is"):
        NearData().place(ACCEL, swapped)
    assert NodeLayout.of(NODES).fits(NODES) and not swapped.layout.fits(NODES)
    assert cluster.node("nope") is None and cluster.node("c1") is NODES[4]


def test_make_policy_names_the_choices():
    assert {make_policy(n).name for n in ("near-data", "compute-only", "auto")} == {"near-data", "compute-only", "auto"}
    with pytest.raises(ValueError, match="choose one of"):
        make_policy("random")


# -- link profiles: properties --------------------------------------------------------------------

@given(st.integers(0, 10**10), st.integers(0, 10**10))
def test_transfer_time_is_monotonic_in_bytes(a, b):
    for profile in PROFILES.values():
        lo, hi = sorted((a, b))
        assert profile.expected_transfer_s(lo) <= profile.expected_transfer_s(hi)


def test_profile_numbers_and_tail():
    s3 = get_profile("s3-like")
    assert s3.first_byte_p99_s == pytest.approx(2.1 * s3.first_byte_median_s)  # DSCS Fig. 3
    assert PROFILES["local"].expected_transfer_s(10**9) == 0.0
    import random

    rng = random.Random(1)
    samples = sorted(s3.sample_first_byte_s(rng) for _ in range(20000))
    assert samples[len(samples) // 2] == pytest.approx(s3.first_byte_median_s, rel=0.05)
    assert samples[int(len(samples) * 0.99)] == pytest.approx(s3.first_byte_p99_s, rel=0.1)
    with pytest.raises(ValueError):
        LinkProfile("bad", 2.0, 1.0)
    with pytest.raises(ValueError, match="choose one of"):
        get_profile("carrier-pigeon")


def test_policies_need_no_server_process_or_socket():
    """Import and call every policy (and the chain planner) in a fresh interpreter where opening a socket or starting a
    process raises: the simulator must be able to do exactly this."""
    code = textwrap.dedent("""
        import socket, subprocess, os, sys
        def forbidden(*a, **k):
            raise AssertionError("placement touched a socket or a process")
        socket.socket = forbidden
        socket.create_connection = forbidden
        subprocess.Popen = forbidden
        os.fork = forbidden
        from nearfaas.placement.policy import POLICIES, ClusterView, Invocation, NodeView
        view = ClusterView((NodeView("s0", "storage", "dscs"), NodeView("c0", "compute", "cpu")), {("b", "k"): ["s0"]})
        inv = Invocation("f", accelerator="dscs", inputs=(("b", "k"),))
        print(sorted((name, cls().place(inv, view).node) for name, cls in POLICIES.items()))
        from nearfaas.placement.chain import plan
        print([[s.function for s in wave] for wave in plan("f1", {"f1": ["f2"], "f2": []})])
        assert "aiohttp" not in sys.modules, "placement pulled in the HTTP stack"
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "('auto', 's0'), ('compute-only', 'c0'), ('near-data', 's0')" in out.stdout
    assert "[['f1'], ['f2']]" in out.stdout  # chains are planned without a server too


def test_emulated_link_paces_bytes_and_samples_first_byte():
    from nearfaas.link.profiles import EmulatedLink

    clock = [0.0]
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        clock[0] += seconds

    link = EmulatedLink(LinkProfile("t", 0.010, 0.010, 1_000_000), sleep=sleep, clock=lambda: clock[0])
    assert link.first_byte() == pytest.approx(0.010)  # constant latency when median == p99
    link.transfer(64 * 1024)  # within the initial burst credit: no wait
    assert link.transfer(1_000_000) == pytest.approx(1.0)  # one second at 1 MB/s
    assert sum(waits) == pytest.approx(1.010)
    assert not EmulatedLink(PROFILES["local"]).active


def test_a_node_busy_with_other_functions_does_not_look_idle():
    """Mixed load: compute-a runs three calls of other functions, compute-b none, and the
    invoked function is warm on neither. The view counts every function's calls on a node, so
    the call goes to compute-b (before, both looked idle and the name decided: compute-a)."""
    from types import SimpleNamespace

    from nearfaas.placement.view import build_view

    nodes = [SimpleNamespace(name=n, kind="compute", cls="cpu", healthy=True) for n in ("compute-a", "compute-b")]
    estimates = Estimates({}, PROFILES["local"])
    mixed = build_view(nodes, [], {}, {}, [], lambda ref: [], estimates, node_load={"compute-a": 3})
    assert ComputeOnly().place(Invocation("f"), mixed).node == "compute-b"
    idle = build_view(nodes, [], {}, {}, [], lambda ref: [], estimates)
    assert ComputeOnly().place(Invocation("f"), idle).node == "compute-a"  # a tie: the name decides
    # An idle warm instance of the function itself still wins over a quieter node.
    warm_busy = build_view(nodes, [("compute-a", 0)], {}, {}, [], lambda ref: [], estimates, node_load={"compute-a": 3})
    assert ComputeOnly().place(Invocation("f"), warm_busy).node == "compute-a"
