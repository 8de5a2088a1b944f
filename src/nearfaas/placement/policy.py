"""Placement: which node runs an invocation.

A policy is one object with one method, ``place(invocation, view) -> Decision``. The live gateway
calls it with a view of real nodes; the twin's simulator calls the same object with a view of
modelled nodes. Policies read only the view (no clock, no I/O, no sockets), so both worlds get
the same decisions, and a table of views is enough to test them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from nearfaas.link.profiles import PROFILES, LinkProfile


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str  # "storage" | "compute"
    cls: str  # "dscs" | "standard" | "cpu"
    healthy: bool = True
    inflight: int = 0  # calls running on the node
    warm: int = 0  # warm instances of the invoked function on this node
    queue: int = 0  # calls waiting for this node
    accel_busy: bool = False  # a dscs function is running to completion on its accelerator
    accel_available: bool = True  # False when an operator marked the accelerator down

    @property
    def has_accelerator(self) -> bool:
        return self.cls == "dscs"


@dataclass(frozen=True)
class Invocation:
    function: str
    accelerator: str | None = None  # "dscs" when the function is marked acceleratable
    placement: str = "auto"  # "data" | "compute" | "auto" from x-nearfaas
    inputs: tuple = ()  # (bucket, key) pairs this call reads
    input_bytes: int = 0  # expected bytes read (0 when unknown)


@dataclass(frozen=True)
class Estimates:
    """What `auto` predicts with: measured compute seconds per (function, target) and the link."""

    compute_s: Mapping[tuple[str, str], float] = field(default_factory=dict)
    link: LinkProfile = PROFILES["local"]


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    replicas: Mapping = field(default_factory=dict)  # (bucket, key) -> [node names], preference order
    estimates: Estimates = field(default_factory=Estimates)


@dataclass(frozen=True)
class Decision:
    node: str
    target: str  # "dscs" (in-storage accelerator) or "cpu"
    reason: str
    predicted_s: float | None = None  # set by policies that predict (auto)


class NoNodeAvailable(Exception):
    pass


class PlacementPolicy(Protocol):
    name: str

    def place(self, invocation: Invocation, view: ClusterView) -> Decision: ...


def _least_loaded(nodes) -> NodeView:
    # Prefer a node that already has a warm instance (no cold start), then the least busy.
    return min(nodes, key=lambda n: (n.warm == 0, n.inflight + n.queue, n.name))


def _wants_accelerator(invocation: Invocation) -> bool:
    return invocation.accelerator == "dscs" and invocation.placement != "compute"


def _holders(invocation: Invocation, view: ClusterView) -> list[NodeView]:
    """dscs-class nodes holding a replica of the inputs, in replica preference order."""
    by_name = {n.name: n for n in view.nodes}
    seen, holders = set(), []
    for ref in invocation.inputs:
        for name in view.replicas.get(tuple(ref), []):
            node = by_name.get(name)
            if node is not None and node.has_accelerator and name not in seen:
                seen.add(name)
                holders.append(node)
    return holders


def _skip_reason(node: NodeView) -> str | None:
    """Why a dscs node cannot take an offload now (None when it can)."""
    if not node.healthy:
        return "unhealthy"
    if not node.accel_available:
        return "accel-unavailable"
    if node.accel_busy:
        return "busy"
    return None


class ComputeOnly:
    """The traditional baseline: every function on a compute node, data fetched over the link."""

    name = "compute-only"

    def place(self, invocation: Invocation, view: ClusterView) -> Decision:
        return self.place_with_reason(view, "compute-node")

    @staticmethod
    def place_with_reason(view: ClusterView, reason: str) -> Decision:
        compute = [n for n in view.nodes if n.healthy and n.kind == "compute"]
        if compute:
            return Decision(_least_loaded(compute).name, "cpu", reason)
        anyone = [n for n in view.nodes if n.healthy]
        if not anyone:
            raise NoNodeAvailable("no healthy node in the cluster")
        return Decision(_least_loaded(anyone).name, "cpu", "no-compute-node")


class NearData:
    """DSCS-Serverless placement (section 5.3), a ladder in the manner of OpenWhisk's balancer:

    1. A function not marked ``accelerator: dscs`` (or with ``placement: compute``) goes to the
       compute baseline: reason ``not-acceleratable`` / ``placement-compute``.
    2. Each dscs node holding a replica of the input, in replica order (the home replica first):
       skipped when unhealthy, when its accelerator is marked unavailable, or when busy (a
       function runs to completion there; no preemption, no second offload until it is free).
       The first one left runs the call on its accelerator: ``home-replica`` or ``other-replica``.
    3. A call with no input reference and ``placement: data`` goes to the least-loaded free
       dscs node: ``no-input``.
    4. Otherwise the compute baseline, with the reason of the fallback:
       ``fallback-busy``, ``fallback-accel-unavailable``, ``fallback-unhealthy`` or
       ``fallback-no-dscs-replica``.
    Decisions are made one at a time in arrival order by the caller: first come, first served.
    """

    name = "near-data"

    def place(self, invocation: Invocation, view: ClusterView) -> Decision:
        if invocation.accelerator != "dscs":
            return ComputeOnly.place_with_reason(view, "not-acceleratable")
        if invocation.placement == "compute":
            return ComputeOnly.place_with_reason(view, "placement-compute")
        holders = _holders(invocation, view)
        why_not = []
        for rank, node in enumerate(holders):
            reason = _skip_reason(node)
            if reason is None:
                return Decision(node.name, "dscs", "home-replica" if rank == 0 else "other-replica")
            why_not.append(reason)
        if not invocation.inputs and invocation.placement == "data":
            free = [n for n in view.nodes if n.has_accelerator and _skip_reason(n) is None]
            if free:
                return Decision(_least_loaded(free).name, "dscs", "no-input")
            why_not += [_skip_reason(n) for n in view.nodes if n.has_accelerator]
        return ComputeOnly.place_with_reason(view, "fallback-" + (why_not[0] if why_not else "no-dscs-replica"))


class Auto:
    """Pick the lowest predicted latency: the free dscs replica holders (no data moved) against
    the compute baseline (input moved over the link), each with its measured compute time and
    queue wait. The prediction is returned with the decision so it can sit next to the outcome.

    With no measurement yet for a target, the other target's measurement stands in (no evidence
    of a difference); with none at all, compute is taken as 0 and only data movement decides.
    Ties go to the data-local node.
    """

    name = "auto"

    def place(self, invocation: Invocation, view: ClusterView) -> Decision:
        if invocation.placement == "compute" or invocation.accelerator != "dscs":
            base = ComputeOnly.place_with_reason(view, "not-acceleratable" if invocation.accelerator != "dscs" else "placement-compute")
            return Decision(base.node, base.target, base.reason, self._predict(invocation, view, base.node, "cpu"))
        candidates = [(self._predict(invocation, view, n.name, "dscs"), 0, n.name, "dscs")
                      for n in _holders(invocation, view) if _skip_reason(n) is None]
        base = ComputeOnly.place_with_reason(view, "predicted-fastest")
        candidates.append((self._predict(invocation, view, base.node, "cpu"), 1, base.node, "cpu"))
        predicted, _, node, target = min(candidates)
        return Decision(node, target, "predicted-fastest", predicted)

    @staticmethod
    def _predict(invocation: Invocation, view: ClusterView, node_name: str, target: str) -> float:
        est = view.estimates
        other = "cpu" if target == "dscs" else "dscs"
        compute = est.compute_s.get((invocation.function, target), est.compute_s.get((invocation.function, other), 0.0))
        node = next(n for n in view.nodes if n.name == node_name)
        wait = node.queue * compute
        local = target == "dscs" or node_name in {name for ref in invocation.inputs for name in view.replicas.get(tuple(ref), [])}
        transfer = 0.0 if local else est.link.expected_transfer_s(invocation.input_bytes, max(1, len(invocation.inputs)))
        return wait + transfer + compute


POLICIES = {p.name: p for p in (ComputeOnly, NearData, Auto)}


def make_policy(name: str) -> PlacementPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown placement policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
