"""The OpenFaaS-style autoscaler (gateway/autoscale.py): what replicas it wants for a load, when
it scales up and down, and the labels it refuses."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from nearfaas.gateway.autoscale import Autoscaler, check_labels, wanted
from nearfaas.gateway.instances import FunctionState, Instance


@given(load=st.floats(0, 1e4), more=st.floats(0, 1e4), low=st.integers(1, 5), extra=st.integers(0, 20))
def test_wanted_replicas_grow_with_load_and_stay_within_min_and_max(load, more, low, extra):
    high = low + extra
    a, b = wanted(load, {}, low, high), wanted(load + more, {}, low, high)
    assert low <= a <= b <= high


def test_the_target_and_type_labels_set_the_load_one_replica_carries():
    assert wanted(10, {}, 1, 10) == 3  # rps: 10 / (5 * 0.9)
    assert wanted(10, {"com.openfaas.scale.target": "10", "com.openfaas.scale.target-proportion": "1"}, 1, 10) == 1
    assert wanted(3, {"com.openfaas.scale.type": "capacity", "com.openfaas.scale.target-proportion": "1"}, 1, 10) == 3


def test_labels_it_cannot_honour_are_named():
    assert check_labels({}) is None
    assert check_labels({"com.openfaas.scale.type": "cpu"}) is None
    assert "rps, capacity or cpu" in check_labels({"com.openfaas.scale.type": "memory"})
    assert "target" in check_labels({"com.openfaas.scale.target": "zero"})
    assert "target-proportion" in check_labels({"com.openfaas.scale.target-proportion": "1.5"})


class _Pool:
    def __init__(self, state):
        self.functions = {state.name: state}
        self.scaled: list[int] = []

    async def scale(self, name, replicas):
        self.scaled.append(replicas)


def test_scales_up_at_once_and_down_only_after_the_load_stayed_low():
    async def run():
        state = FunctionState({"name": "f", "scale_min": 1, "scale_max": 2, "labels": {}}, desired=1)
        state.instances["i"] = Instance("i", "n", "127.0.0.1", 1)
        pool = _Pool(state)
        scaler = Autoscaler(pool, CollectorRegistry(), window_s=5.0, down_after_s=10.0)
        t = 0.0
        for _ in range(6):  # 10 calls/s for 5 s
            scaler.tick(t)
            state.invocations += 10
            t += 1.0
        scaler.tick(t)
        await asyncio.sleep(0)
        assert state.desired == 2 and pool.scaled[-1] == 2
        for _ in range(9):  # idle, but not for down_after_s yet
            t += 1.0
            scaler.tick(t)
        assert state.desired == 2
        for _ in range(8):
            t += 1.0
            scaler.tick(t)
        await asyncio.sleep(0)
        assert state.desired == 1 and pool.scaled[-1] == 1
        state.desired = 0  # the idler scaled it to zero: the autoscaler leaves it there
        for _ in range(5):
            t += 1.0
            scaler.tick(t)
        assert state.desired == 0

    asyncio.run(run())


def test_a_scale_by_hand_stands_until_new_load_says_otherwise():
    async def run():
        state = FunctionState({"name": "f", "scale_min": 1, "scale_max": 4, "labels": {}}, desired=1)
        pool = _Pool(state)
        scaler = Autoscaler(pool, CollectorRegistry(), window_s=5.0, down_after_s=10.0)
        for t in range(4):  # busy
            scaler.tick(float(t))
            state.invocations += 20
        state.desired, state.scaled_by_hand = 0, 3.5  # POST /system/scale-function {"replicas": 0}
        for t in (4.0, 5.0, 6.0):
            scaler.tick(t)
        assert state.desired == 0
        state.invocations += 30  # calls again
        scaler.tick(7.0)
        await asyncio.sleep(0)
        assert state.desired >= 1

    asyncio.run(run())


def test_cpu_type_scales_on_millicores_its_instances_used():
    """cpu: load = CPU seconds its instances' cgroups reported, per second, in millicores."""
    async def run():
        labels = {"com.openfaas.scale.type": "cpu", "com.openfaas.scale.target": "400", "com.openfaas.scale.target-proportion": "1"}
        state = FunctionState({"name": "f", "scale_min": 1, "scale_max": 4, "labels": labels}, desired=1)
        pool = _Pool(state)
        scaler = Autoscaler(pool, CollectorRegistry(), window_s=5.0, down_after_s=10.0)
        for t in range(6):  # one core busy (1000 m) and a stream of calls that would not matter to rps
            scaler.tick(float(t))
            state.cpu_seconds += 1.0
            state.invocations += 1
        scaler.tick(6.0)
        await asyncio.sleep(0)
        assert state.desired == 3 and pool.scaled[-1] == 3  # ceil(1000 / 400)
        idle = FunctionState({"name": "g", "scale_min": 1, "scale_max": 4, "labels": labels}, desired=1)
        pool.functions["g"] = idle
        for t in range(7, 14):  # many calls, little CPU: a cpu-scaled function stays put
            idle.invocations += 100
            idle.cpu_seconds += 0.05
            scaler.tick(float(t))
        assert idle.desired == 1

    asyncio.run(run())


def _idler(desired: int):
    """An instance pool holding one scale-to-zero function (zero-duration 5 s, ``desired``
    replicas) with one instance "a" last used at t = 0; the ids its idler drops are listed."""
    from nearfaas.gateway.instances import InstancePool

    pool = InstancePool.__new__(InstancePool)
    state = FunctionState({"name": "idler", "scale_zero": True, "scale_zero_after": 5.0, "labels": {}}, desired=desired)
    first = Instance("a", "n", "127.0.0.1", 1)
    first.last_used = 0.0
    state.instances["a"] = first
    pool.functions = {"idler": state}
    dropped: list[str] = []
    pool.drop_instance = lambda st, inst, stop=False: (dropped.append(inst.id), st.instances.pop(inst.id))
    return pool, state, dropped


def test_scale_to_zero_waits_for_a_scale_up_in_progress():
    # A function scaled to 3 by hand whose starts are slow (a loaded host) is not scaled to zero
    # by its first replica's idle time while the others are still starting; once all are up and
    # idle for zero-duration it is.
    pool, state, dropped = _idler(desired=3)

    async def run():
        await state.scaling.acquire()  # the pool's reconciliation, starting the other two
        pool.reap_idle(now=8.0)  # 8 s idle, but two of three replicas are still starting
        assert state.desired == 3 and not dropped
        for name in ("b", "c"):
            inst = Instance(name, "n", "127.0.0.1", 1)
            inst.last_used = 9.0
            state.instances[name] = inst
        state.scaling.release()
        pool.reap_idle(now=10.0)  # all up, the newest idle 1 s
        assert state.desired == 3 and not dropped
        pool.reap_idle(now=14.5)  # every replica idle for zero-duration
        assert state.desired == 0 and sorted(dropped) == ["a", "b", "c"]

    asyncio.run(run())


def test_a_scale_up_still_starting_is_not_scaled_down():
    # A function scaled to 3 by hand, with no load and keep_alive 1 s, whose second and third
    # instances are slow to start: the autoscaler waits for them before it may scale down.
    async def run():
        state = FunctionState({"name": "f", "scale_min": 0, "scale_max": 3, "labels": {}, "x": {"keep_alive": "1s"}}, desired=3)
        state.instances["i"] = Instance("i", "n", "127.0.0.1", 1)
        pool = _Pool(state)
        scaler = Autoscaler(pool, CollectorRegistry(), window_s=5.0, down_after_s=10.0)
        await state.scaling.acquire()  # the pool's reconciliation, starting the other two
        for t in range(6):
            scaler.tick(float(t))
        await asyncio.sleep(0)
        assert state.desired == 3 and pool.scaled == []  # one of three up: nothing taken back
        for name in ("j", "k"):
            state.instances[name] = Instance(name, "n", "127.0.0.1", 1)
        state.scaling.release()  # all three up
        for t in range(6, 9):
            scaler.tick(float(t))
        await asyncio.sleep(0)
        assert state.desired == 1 and pool.scaled[-1] == 1  # all up and idle past keep_alive: down

    asyncio.run(run())


def test_a_scale_up_that_failed_part_way_is_not_undone_while_its_retry_is_pending():
    # The first of three instances is up, the second's start failed (a full node, say) and a
    # retry is pending: the idler does not scale the function to zero meanwhile (a full run's
    # test_keep_alive_and_scale_to_zero ended at desired 0 with no instance).
    pool, state, _dropped = _idler(desired=3)
    state.retry_scale_at = 9.0  # set by the failed reconciliation
    pool.reap_idle(now=8.0)
    assert state.desired == 3 and "a" in state.instances
    state.retry_scale_at = 0.0  # its retry ran and gave up the target (desired lowered)
    state.desired = 1
    pool.reap_idle(now=8.5)
    assert state.desired == 0  # idle past zero-duration, nothing pending: scaled to zero


def test_a_scale_by_hand_counts_as_activity_for_the_idler():
    # One replica idle for 6 s, past a 5 s zero-duration, when the operator asks for three: before
    # the pool's reconciliation even takes its lock, the idler must not scale the function to zero
    # (a full run's test_keep_alive_and_scale_to_zero ended at desired 0 with no start logged).
    pool, state, _dropped = _idler(desired=3)
    state.scaled_by_hand = 6.0  # POST /system/scale-function {"replicas": 3}
    pool.reap_idle(now=6.5)
    assert state.desired == 3 and "a" in state.instances
    state.desired = 1  # nothing came of it; zero-duration after the request, the idler may act
    pool.reap_idle(now=11.0)
    assert state.desired == 0 and not state.instances


def test_calls_that_fail_are_not_load():
    """A function answering 502 to 10 calls a second stays at its minimum; the same calls
    succeeding scale it up (OpenFaaS CE's rule counts code 200 only)."""
    # catches: failing calls counted as load (a fast-failing function was scaled up)
    async def run(fail: bool) -> int:
        state = FunctionState({"name": "f", "scale_min": 1, "scale_max": 3, "labels": {}}, desired=1)
        state.instances["i"] = Instance("i", "n", "127.0.0.1", 1)
        scaler = Autoscaler(_Pool(state), CollectorRegistry(), window_s=5.0, down_after_s=10.0)
        for t in range(7):
            scaler.tick(float(t))
            state.invocations += 10
            state.failed += 10 if fail else 0
        await asyncio.sleep(0)
        return state.desired

    assert asyncio.run(run(fail=True)) == 1
    assert asyncio.run(run(fail=False)) == 3
