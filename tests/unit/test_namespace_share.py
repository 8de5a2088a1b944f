"""A tenant namespace's share of a node's worker slots (gateway.max_instances_per_namespace,
gateway/instances.py): red team round 7 (F3) deployed two functions at scale.min 16 (each under
gateway.max_scale) and took every worker slot of the compute node, so no other tenant's new
function or replacement instance could start there. Checked without a cluster."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nearfaas.gateway.api.functions import FunctionsAPI
from nearfaas.gateway.errors import CallError
from nearfaas.gateway.instances import FunctionState, Instance, InstancePool


def _pool(cap: int) -> InstancePool:
    pool = InstancePool.__new__(InstancePool)
    pool.functions, pool.max_per_namespace, pool.draining = {}, cap, {}
    return pool


def _function(pool, name: str, instances: int, node: str = "compute-0", scale_min: int = 0) -> FunctionState:
    state = FunctionState({"name": name, "scale_min": scale_min, "labels": {}}, desired=instances)
    for i in range(instances):
        state.instances[f"{name}-{i}"] = Instance(f"{name}-{i}", node, "127.0.0.1", 1)
    pool.functions[name] = state
    return state


def test_a_tenant_namespace_gets_its_share_of_a_node_and_no_more():
    pool = _pool(4)
    hog = _function(pool, "hog1.tenant-b", 3)
    _function(pool, "hog2.tenant-b", 1)
    with pytest.raises(CallError) as full:
        asyncio.run(pool._cold_start(hog, "compute-0"))  # the 5th of tenant-b on compute-0
    assert full.value.status == 429 and "gateway.max_instances_per_namespace=4" in str(full.value)
    assert "tenant-b" in str(full.value) and "compute-0" in str(full.value)
    pool.check_namespace_room(hog, "storage-0")  # another node: room there
    other = _function(pool, "late.tenant-a", 0)
    pool.check_namespace_room(other, "compute-0")  # another tenant: room on the same node
    operator = _function(pool, "admin-fn", 9)
    pool.check_namespace_room(operator, "compute-0")  # the default namespace is the operator's: not capped
    pool.max_per_namespace = 0
    pool.check_namespace_room(hog, "compute-0")  # 0: no cap


def test_scale_min_floors_over_the_share_are_refused_at_deploy(tmp_path):
    pool = _pool(16)
    _function(pool, "hog1.tenant-b", 16, scale_min=16)
    api = FunctionsAPI(SimpleNamespace(functions=pool.functions, pool=pool), None, tmp_path)
    refused = api._namespace_floor_refused({"name": "hog2.tenant-b", "scale_min": 16})
    assert refused.status == 400 and "gateway.max_instances_per_namespace of 16" in refused.text and "32" in refused.text
    assert api._namespace_floor_refused({"name": "hog1.tenant-b", "scale_min": 8}) is None  # a redeploy replaces its own floor
    assert api._namespace_floor_refused({"name": "fn.tenant-a", "scale_min": 16}) is None  # another tenant's share
    assert api._namespace_floor_refused({"name": "admin", "scale_min": 16}) is None  # the default namespace


def test_an_old_versions_busy_instances_count_until_they_finish():
    # Red team round 8 (G1): redeploying a function while its old instances served long calls
    # left those running beside the new set, uncounted, and the namespace went past its share
    # to 30 of the node's 32 slots. Draining instances count while they are busy.
    pool = _pool(4)
    pool.workers = SimpleNamespace(forget=lambda *a: None)
    pool.metrics = SimpleNamespace(service_count=SimpleNamespace(labels=lambda *a: SimpleNamespace(set=lambda v: None)))
    old = _function(pool, "hog.tenant-b", 3)
    for inst in old.instances.values():
        inst.inflight = 1  # a long call each
    for inst in list(old.instances.values()):
        pool.drop_instance(old, inst, stop=True)  # what a redeploy does to the old version's
    new = _function(pool, "hog.tenant-b", 1)
    assert pool.namespace_instances("tenant-b", "compute-0") == 4
    with pytest.raises(CallError):
        pool.check_namespace_room(new, "compute-0")
    busy = next(iter(pool.draining.values()))[1]
    busy.inflight = 0
    pool.retire(busy, stop=False)  # its call ended: the last one out stops it
    pool.check_namespace_room(new, "compute-0")
