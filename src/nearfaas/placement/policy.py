"""Placement: which node runs an invocation.

A policy is one object with one method, ``place(invocation, view) -> Decision``. The live gateway
calls it with a view of real nodes; the twin's simulator calls the same object with a view of
modelled nodes. Policies read only the view, so both worlds get the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str  # "storage" | "compute"
    cls: str  # "dscs" | "standard" | "cpu"
    healthy: bool = True
    inflight: int = 0
    warm: int = 0  # warm instances of the invoked function on this node


@dataclass(frozen=True)
class Invocation:
    function: str
    accelerator: str | None = None  # "dscs" when the function is marked acceleratable
    placement: str = "auto"  # "data" | "compute" | "auto" from x-nearfaas
    inputs: tuple = ()  # (bucket, key) pairs this call reads


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    replicas: dict = field(default_factory=dict)  # (bucket, key) -> [node names], preference order


@dataclass(frozen=True)
class Decision:
    node: str
    target: str  # "dscs" (in-storage) or "cpu"
    reason: str


class NoNodeAvailable(Exception):
    pass


class PlacementPolicy(Protocol):
    name: str

    def place(self, invocation: Invocation, view: ClusterView) -> Decision: ...


def _least_loaded(nodes) -> NodeView:
    # Prefer a node that already has a warm instance (no cold start), then the least busy.
    return min(nodes, key=lambda n: (n.warm == 0, n.inflight, n.name))


class ComputeOnly:
    """The traditional baseline: every function on a compute node, data fetched over the link."""

    name = "compute-only"

    def place(self, invocation: Invocation, view: ClusterView) -> Decision:
        compute = [n for n in view.nodes if n.healthy and n.kind == "compute"]
        if compute:
            return Decision(_least_loaded(compute).name, "cpu", "compute-node")
        anyone = [n for n in view.nodes if n.healthy]
        if not anyone:
            raise NoNodeAvailable("no healthy node in the cluster")
        return Decision(_least_loaded(anyone).name, "cpu", "no-compute-node")


class NearData:
    """Run an acceleratable function on a storage node that holds a replica of its input.

    The fallback ladder, in order: a dscs-class replica holder, any replica holder, then the
    compute baseline. (Busy-awareness and FCFS queueing of the accelerator come with the
    near-data issue; this is the locality core they extend.)
    """

    name = "near-data"

    def __init__(self) -> None:
        self.fallback = ComputeOnly()

    def place(self, invocation: Invocation, view: ClusterView) -> Decision:
        if invocation.accelerator == "dscs" and invocation.placement != "compute":
            by_name = {n.name: n for n in view.nodes if n.healthy and n.kind == "storage"}
            holders = [by_name[name] for ref in invocation.inputs for name in view.replicas.get(tuple(ref), []) if name in by_name]
            dscs = [n for n in holders if n.cls == "dscs"]
            if dscs:
                return Decision(dscs[0].name, "dscs", "data-local-dscs")
            if holders:
                return Decision(holders[0].name, "cpu", "data-local")
            if not invocation.inputs:
                storage = [n for n in by_name.values() if n.cls == "dscs"]
                if storage and invocation.placement == "data":
                    return Decision(_least_loaded(storage).name, "dscs", "no-input-dscs")
        return self.fallback.place(invocation, view)


POLICIES = {p.name: p for p in (ComputeOnly, NearData)}


def make_policy(name: str) -> PlacementPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
