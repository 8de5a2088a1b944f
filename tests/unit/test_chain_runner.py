"""The chain runner against a recording stand-in for the invoker: accelerator holds, lost
intermediates and cleanup, decided without any process or socket."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from nearfaas.gateway.chains import ChainRunner
from nearfaas.gateway.errors import CallError
from nearfaas.gateway.invoker import CallResult
from nearfaas.spec.options import NearfaasOptions


@dataclass
class FakeInvoker:
    """Runs every dscs stage on storage-0 and every other stage on compute-0, recording what the
    accelerator count was, apart from the stage's own hold, when each stage was placed."""

    chains: dict[str, list[str]]
    dscs: set[str]
    fail: set[str] = field(default_factory=set)
    accel_inflight: dict = field(default_factory=dict)
    located: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict)  # stage -> (foreign accelerator calls at placement, held node)

    def __post_init__(self):
        self.functions = {n: SimpleNamespace(options=NearfaasOptions(chain=c, accelerator="dscs" if n in self.dscs else None))
                          for n, c in self.chains.items()}
        self.nodes = SimpleNamespace(nodes={"storage-0": SimpleNamespace(healthy=True), "compute-0": SimpleNamespace(healthy=True)})
        self.metrics = SimpleNamespace(chains=SimpleNamespace(labels=lambda *a: SimpleNamespace(inc=lambda: None)))
        self.policy = SimpleNamespace(name="near-data")

    async def invoke(self, name, method, path, query, headers, body, call_id=None, stage=None):
        node = "storage-0" if name in self.dscs else "compute-0"
        held = stage.held_accelerator if stage else None
        self.seen[name] = (self.accel_inflight.get("storage-0", 0) - (held == "storage-0"), held)
        if name in self.dscs:
            self.accel_inflight["storage-0"] = self.accel_inflight.get("storage-0", 0) + 1
        await asyncio.sleep(0.01)  # other stages of the wave run meanwhile
        if name in self.dscs:
            self.accel_inflight["storage-0"] -= 1
        if stage is not None and stage.output_local and node.startswith("storage"):
            self.located[stage.output] = [node]
        report = {"function": name, "node": node, "target": "dscs" if name in self.dscs else "cpu", "reason": "test",
                  "start": "warm", "exec_s": 0.01, "output": "none" if name in self.fail else "local",
                  "timing": {"total": 0.01, "cold_start": 0.0, "stack": 0.0, "data": 0.0, "compute": 0.01},
                  "link": {"profile": "local", "read": 0, "write": 0, "seconds": 0.0}}
        return CallResult(502 if name in self.fail else 200, {}, b"{}", report)


class FakeBackend:
    def __init__(self):
        self.deleted = []

    async def delete_object(self, bucket, key):
        self.deleted.append(key)


def run(invoker: FakeInvoker, app: str):
    backend = FakeBackend()

    async def go():
        runner = ChainRunner(invoker, backend)
        result = await runner.run(app, ("POST", "/", "", {}, b"{}"), "call-1")
        await asyncio.gather(*runner._cleanups)
        return result

    return asyncio.run(go()), backend


def test_the_accelerator_passes_to_the_stage_that_reads_the_output():
    inv = FakeInvoker({"f1": ["f2"], "f2": ["f3"], "f3": []}, dscs={"f1", "f2"})
    result, _ = run(inv, "f1")
    assert result.status == 200
    assert inv.seen["f2"] == (0, "storage-0")  # held for f2, and nothing else on the drive
    assert inv.seen["f3"][1] is None
    assert inv.accel_inflight == {"storage-0": 0}


def test_a_hold_never_blocks_another_stage_of_the_same_chain():
    """src -> [a, b]; a -> join; b -> mid -> join: join has two predecessors, so nobody holds the
    drive for it, and mid (fed by b alone) finds it free."""
    chains = {"src": ["a", "b"], "a": ["join"], "b": ["mid"], "mid": ["join"], "join": []}
    inv = FakeInvoker(chains, dscs=set(chains) - {"src"})
    result, _ = run(inv, "src")
    assert result.status == 200
    assert inv.seen["mid"] == (0, "storage-0")
    assert inv.seen["join"][1] is None
    assert inv.accel_inflight == {"storage-0": 0}


def test_a_failed_stage_stops_the_chain_and_every_begun_intermediate_is_deleted():
    inv = FakeInvoker({"f1": ["f2"], "f2": ["f3"], "f3": []}, dscs={"f1"}, fail={"f2"})
    result, backend = run(inv, "f1")
    assert result.status == 502 and result.headers["X-Nearfaas-Chain-Failed"] == "f2"
    assert "f3" not in inv.seen
    # f2 reported no output (it failed) but may have written it: deleted all the same.
    assert sorted(k.rsplit("/", 1)[1] for k in backend.deleted) == ["f1", "f2"]
    assert inv.located == {} and inv.accel_inflight == {"storage-0": 0}


def test_an_intermediate_lost_with_its_node_is_the_node_s_fault_not_the_function_s():
    inv = FakeInvoker({"f1": ["f2"], "f2": []}, dscs={"f1"})
    original = inv.invoke

    async def lose_storage_after_f1(name, *args, **kwargs):
        result = await original(name, *args, **kwargs)
        if name == "f1":
            inv.nodes.nodes["storage-0"].healthy = False
        return result

    inv.invoke = lose_storage_after_f1
    with pytest.raises(CallError) as caught:
        run(inv, "f1")
    assert caught.value.status == 502 and caught.value.layer == "node"
    assert "lived only on storage-0" in str(caught.value) and "'f2'" in str(caught.value)
