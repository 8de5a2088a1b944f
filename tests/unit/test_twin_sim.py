"""The rack-scale discrete-event simulator (twin/sim): queueing theory, the same policy as the
live gateway, and bad input."""

from __future__ import annotations

import math

import pytest

from nearfaas.gateway.instances import FunctionState, Instance
from nearfaas.gateway.invoker import Invoker
from nearfaas.gateway.nodes import Node, NodeDirectory
from nearfaas.placement.policy import make_policy
from nearfaas.placement.view import node_view
from nearfaas.telemetry.metrics import GatewayMetrics
from nearfaas.twin.sim import (
    App,
    Function,
    SimConfig,
    Simulator,
    WorkloadError,
    azure_replay,
    poisson,
    read_azure_durations,
    read_azure_invocations,
    simulate,
)

ONE = {"a": App("a", (Function("f"),))}


def _queue(lam: float, mu: float, c: int, n: int, seed: int):
    cfg = SimConfig(storage_nodes=0, compute_nodes=1, compute_slots=c, apps=ONE, services={("f", "cpu"): ("exp", 1 / mu)},
                    keep_alive_s=math.inf, policy="compute-only", bin_s=1e4, seed=seed)
    return simulate(poisson([(0, lam)], 1e12, seed=seed, apps=["a"], max_requests=n), cfg)


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    a = lam / mu
    rho = a / c
    s = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) / (1 - rho)
    pw = top / (s + top)
    return pw / (c * mu - lam)


@pytest.fixture(scope="module")
def mm1():
    return _queue(0.7, 1.0, 1, 300_000, seed=11)


@pytest.fixture(scope="module")
def mmc():
    return _queue(3.2, 1.0, 4, 300_000, seed=11)


def test_mm1_waiting_time_and_littles_law(mm1):
    theory = 0.7 / (1.0 * (1.0 - 0.7))  # Wq = rho / (mu - lambda)
    assert mm1.completed == 300_000 and mm1.rejected == 0
    assert abs(mm1.mean_wait_s - theory) / theory < 0.05, (mm1.mean_wait_s, theory)
    lam = mm1.completed / mm1.sim_time_s
    assert abs(mm1.time_avg_in_system - lam * mm1.latency["mean"]) / mm1.time_avg_in_system < 0.02


def test_mmc_waiting_time_and_littles_law(mmc):
    theory = erlang_c_wait(3.2, 1.0, 4)
    assert abs(mmc.mean_wait_s - theory) / theory < 0.05, (mmc.mean_wait_s, theory)
    lam = mmc.completed / mmc.sim_time_s
    assert abs(mmc.time_avg_in_system - lam * mmc.latency["mean"]) / mmc.time_avg_in_system < 0.02


def test_same_seed_same_result_other_seed_differs():
    a, b, c = (_queue(0.7, 1.0, 1, 5000, seed=s) for s in (3, 3, 4))
    assert a.latency == b.latency and a.mean_wait_s == b.mean_wait_s and a.series == b.series and a.events == b.events
    assert a.latency != c.latency
    cfg = SimConfig(storage_nodes=6, compute_nodes=3, seed=5, keep_alive_s=2.0, image_pull_s=0.5)
    runs = [Simulator(cfg).run(poisson([(0, 30), (20, 80)], 40, seed=5)) for _ in range(2)]
    assert [r.summary() | {"wall_s": 0, "events_per_s": 0} for r in runs] == [runs[0].summary() | {"wall_s": 0, "events_per_s": 0}] * 2
    assert runs[0].series == runs[1].series


def test_chains_keep_data_local_and_outputs():
    cfg = SimConfig(storage_nodes=8, compute_nodes=4, seed=2, keep_alive_s=5.0, image_pull_s=0.2, model_load_s=0.3,
                    services={}, default_service=("lognormal", 0.05, 0.5), bin_s=5.0)
    r = simulate(poisson([(0, 20), (30, 100), (40, 20)], 60, seed=2), cfg)
    assert r.completed + r.rejected == r.arrivals > 0
    assert r.placements.get("cpu;not-acceleratable", 0) == r.completed  # every f3 on compute
    assert r.placements.get("dscs;home-replica", 0) > 0
    assert r.cold_starts > 0
    s = r.series
    assert len(s["t"]) == len(s["queue_len"]) == len(s["instances_busy"]) == len(s["latency_p95"]) >= 12
    assert r.latency["p50"] <= r.latency["p95"] <= r.latency["p99"]
    # keep-alive: instances expire after the trace; all idle at the end
    assert s["instances_alive"][-1] <= max(s["instances_alive"])


def test_queue_depth_rejects():
    cfg = SimConfig(storage_nodes=0, compute_nodes=1, compute_slots=1, apps=ONE, services={("f", "cpu"): 10.0},
                    queue_depth=5, keep_alive_s=math.inf, policy="compute-only")
    r = simulate(poisson([(0, 100)], 1.0, seed=1, apps=["a"]), cfg)
    assert r.rejected == r.arrivals - 6 and r.completed == 6


# -- the same policy as the live gateway ----------------------------------------------------------

def _gateway_decisions(sim: Simulator, records: list, policy_name: str):
    """Replay each recorded step through the live Invoker's own _view and place."""
    directory = NodeDirectory([Node(name, kind, cls, f"http://{name}", healthy=sim.healthy[i])
                               for i, (name, kind, cls) in enumerate(sim.node_spec)])
    inv = Invoker(directory, make_policy(policy_name), GatewayMetrics(), sim.config.replication, sim.config.dscs_replica,
                  link=sim.estimates.link)
    inv.compute_s = dict(sim.estimates.compute_s)
    for i, name in enumerate(sim.names):
        inv.accel_available[name] = sim.accel_available[i]
    fns = {f.name: f for f in sim.functions}
    out = []
    for rec in records:
        snap = rec["state"]
        f = fns[snap["function"]]
        state = FunctionState({"name": f.name, "x": {"accelerator": f.accelerator, "placement": f.placement}})
        n = 0
        for node, (alive, busy) in snap["instances"].items():
            for k in range(alive):
                n += 1
                state.instances[str(n)] = Instance(str(n), node, "127.0.0.1", 1, inflight=1 if k < busy else 0)
        inv.accel_inflight = dict(snap["accel_inflight"])
        inv.node_inflight = dict(snap["node_load"])
        inv.located.clear()
        inv.located.update(snap["located"])
        inv.input_bytes = {f.name: f.input_bytes}
        refs = list(rec["invocation"].inputs)
        assert inv._view(state, refs, rec["held"]) == rec["view"]
        out.append(inv.place(state, refs, held=rec["held"]))
    return out


@pytest.mark.parametrize("policy", ["near-data", "auto", "compute-only"])
def test_simulator_and_gateway_make_identical_decisions(policy):
    records: list = []
    cfg = SimConfig(storage_nodes=5, standard_nodes=1, compute_nodes=3, policy=policy, seed=7, keep_alive_s=3.0,
                    services={("asset-damage-pre", "dscs"): ("exp", 0.2), ("asset-damage-pre", "cpu"): ("exp", 0.1),
                              ("asset-damage-infer", "dscs"): ("exp", 0.3)},
                    default_service=("exp", 0.2), accel_down=("storage-4",), link="dc-25g",
                    apps=None)
    sim = Simulator(cfg, recorder=records)
    assert len(sim.apps) == 8  # the eight DSCS chains
    r = sim.run(poisson([(0, 10), (10, 40)], 20, seed=7))
    assert len(records) >= 3 * r.completed > 100
    reasons = {rec["decision"].reason for rec in records}
    if policy == "near-data":
        assert {"home-replica", "fallback-busy"} <= reasons
    assert any(rec["held"] for rec in records) or policy == "compute-only"
    gateway = _gateway_decisions(sim, records, policy)
    assert gateway == [rec["decision"] for rec in records]
    assert all(rec["view"].layout is sim.layout for rec in records) and sim.layout.fits(records[0]["view"].nodes)


class _FreshViewCheck(list):
    """A recorder that checks, at each decision, the simulator's incrementally maintained view
    (dirty rows, shared NodeView objects) against one built from scratch from its raw state."""

    def __init__(self):
        super().__init__()
        self.sim = None

    def append(self, rec):
        sim = self.sim
        fi = next(i for i, f in enumerate(sim.functions) if f.name == rec["invocation"].function)
        fresh = tuple(node_view(name, kind, cls, sim.healthy[ni], sim.busy[fi][ni], sim.alive[fi][ni], sim.accel_inflight[ni],
                                sim.accel_available[ni], name == rec["held"], len(sim.waitq[ni]) if sim.config.queue_in_view else 0,
                                sum(busy[ni] for busy in sim.busy))
                      for ni, (name, kind, cls) in enumerate(sim.node_spec))
        assert rec["view"].nodes == fresh
        super().append(rec)


@pytest.mark.parametrize("queue_in_view", [False, True])
def test_incremental_views_equal_views_built_from_scratch(queue_in_view):
    check = _FreshViewCheck()
    cfg = SimConfig(storage_nodes=4, compute_nodes=2, compute_slots=1, policy="near-data", seed=3, keep_alive_s=2.0,
                    queue_in_view=queue_in_view, default_service=("exp", 0.3), unhealthy=("compute-1",), accel_down=("storage-3",))
    sim = check.sim = Simulator(cfg, recorder=check)
    r = sim.run(poisson([(0, 20), (10, 60)], 20, seed=3))
    assert len(check) >= 3 * r.completed > 100 and any(rec["held"] for rec in check)
    assert any(n.queue for rec in check for n in rec["view"].nodes) == queue_in_view


# -- bad input ------------------------------------------------------------------------------------

def test_unknown_app_and_negative_rate():
    with pytest.raises(WorkloadError, match="unknown app 'nope'"):
        poisson([(0, 1)], 10, weights={"nope": 1.0})
    with pytest.raises(WorkloadError, match="unknown app 'zzz'"):
        simulate([(0.0, "zzz")], SimConfig(storage_nodes=1, compute_nodes=1))
    with pytest.raises(WorkloadError, match="negative rate -2"):
        poisson([(0, 1), (5, -2)], 10)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_replay(tmp_path):
    p = _write(tmp_path, "inv.csv", "HashOwner,HashApp,HashFunction,Trigger,1,2,3\n"
                                    "o1,a1,f1,http,3,0,2\no2,a2,f2,timer,1,4,0\n")
    rows = read_azure_invocations(p)
    assert [r.counts for r in rows] == [[3, 0, 2], [1, 4, 0]]
    arrivals = list(azure_replay(p, seed=1))
    assert len(arrivals) == 10
    times = [t for t, _ in arrivals]
    assert times == sorted(times) and sum(1 for t in times if t < 60) == 4 and max(times) < 180
    assert arrivals == list(azure_replay(p, seed=1)) != list(azure_replay(p, seed=2))
    r = simulate(azure_replay(p, seed=1), SimConfig(storage_nodes=3, compute_nodes=2))
    assert r.completed == 10
    d = _write(tmp_path, "dur.csv", "HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum,percentile_Average_0,"
                                    "percentile_Average_50\no1,a1,f1,120.5,10,3,900,3,100\n")
    assert read_azure_durations(d)[("o1", "a1", "f1")].percentiles_ms["percentile_Average_50"] == 100


@pytest.mark.parametrize("text, where", [
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,x\n", "line 2, column 6 (2): invocation count 'x' is not an integer"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,-1\n", "line 2, column 6 (2): negative invocation count -1"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,1\no,a,g,http,3\n", "line 3, column 6 (2): missing column"),
    ("HashOwner,HashApp,Trigger,1,2\no,a,http,3,1\n", "line 1: missing column 'HashFunction' (the header has: HashOwner, HashApp"),
    ("HashOwner,HashApp,HashFunction,Trigger,1,3\no,a,f,http,3,1\n", "line 1, column 6 (3): expected minute column '2'"),
])
def test_malformed_azure_invocations(tmp_path, text, where):
    p = _write(tmp_path, "bad.csv", text)
    with pytest.raises(WorkloadError) as err:
        read_azure_invocations(p)
    assert str(err.value).startswith(f"{p}: {where}")


def test_malformed_azure_durations(tmp_path):
    p = _write(tmp_path, "dur.csv", "HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum\no,a,f,1.5,two,1,2\n")
    with pytest.raises(WorkloadError, match=r"line 2, column 5 \(Count\): 'two' is not an integer"):
        read_azure_durations(p)
