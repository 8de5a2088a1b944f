"""The ClusterView a policy decides on, built from raw cluster state.

The live gateway (``Invoker._view``) calls ``build_view`` with its node directory, a function's
instances and its accelerator bookkeeping. The twin's simulator keeps the same state in arrays
and rebuilds only the nodes that changed, each through ``node_view``: the one rule for what a
node looks like to a policy lives here, so the two worlds cannot drift apart
(tests/unit/test_twin_sim.py checks that both build equal views, decision by decision).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from nearfaas.placement.policy import ClusterView, Estimates, NodeView


def node_view(name: str, kind: str, cls: str, healthy: bool, inflight: int, warm: int, accel_inflight: int,
              accel_available: bool, held: bool = False, queue: int = 0, load: int = 0) -> NodeView:
    """One node as a policy sees it for one function: its instances there (``warm``) and their
    calls in flight; the accelerator busy while a dscs call runs on it (``accel_inflight``), except
    when the only one is the chain's own hold (``held``: the chain being placed holds this node's
    accelerator, so its next stage may run there); ``queue``: calls waiting (the gateway has none);
    ``load``: calls of every function running on the node."""
    return NodeView(name, kind, cls, healthy, inflight, warm, queue, accel_busy=accel_inflight - held > 0,
                    accel_available=accel_available, load=load)


def build_view(nodes: Iterable, instances: Iterable[tuple[str, int]], accel_inflight: Mapping[str, int],
               accel_available: Mapping[str, bool], refs: Iterable, replicas_of: Callable[[tuple], list[str]],
               estimates: Estimates, held: str | None = None, node_load: Mapping[str, int] | None = None) -> ClusterView:
    """The view for placing one call of a function.

    ``nodes``: the cluster's nodes in directory order (``name``, ``kind``, ``cls``, ``healthy``);
    ``instances``: (node name, calls in flight) for each instance of the function;
    ``accel_inflight`` / ``accel_available``: per node name (absent: 0 / True);
    ``refs``: the call's input objects, each mapped to ``replicas_of(ref)`` (node names,
    preference order); ``held``: the node whose accelerator the calling chain holds, if any;
    ``node_load``: calls of every function running on each node (absent: 0).
    """
    node_load = node_load or {}
    warm: dict[str, int] = {}
    inflight: dict[str, int] = {}
    for node, calls in instances:
        warm[node] = warm.get(node, 0) + 1
        inflight[node] = inflight.get(node, 0) + calls
    view_nodes = tuple(node_view(n.name, n.kind, n.cls, n.healthy, inflight.get(n.name, 0), warm.get(n.name, 0),
                                 accel_inflight.get(n.name, 0), accel_available.get(n.name, True), n.name == held,
                                 load=node_load.get(n.name, 0))
                       for n in nodes)
    return ClusterView(view_nodes, {ref: replicas_of(ref) for ref in refs}, estimates)
