"""Placement: which node runs an invocation.

A policy is one object with one method, ``place(invocation, view) -> Decision``. The live gateway
calls it with a view of real nodes; the twin's simulator calls the same object with a view of
modelled nodes. Policies read only the view (no clock, no I/O, no sockets), so both worlds get
the same decisions, and a table of views is enough to test them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Protocol

from nearfaas.link.profiles import PROFILES, LinkProfile


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str  # "storage" | "compute"
    cls: str  # "dscs" | "standard" | "cpu"
    healthy: bool = True
    inflight: int = 0  # calls of the invoked function running on the node
    warm: int = 0  # warm instances of the invoked function on this node
    queue: int = 0  # calls waiting for this node
    accel_busy: bool = False  # a dscs function is running to completion on its accelerator
    accel_available: bool = True  # False when an operator marked the accelerator down
    load: int = 0  # calls running on the node, every function's together (its CPUs are shared)

    @property
    def has_accelerator(self) -> bool:
        return self.cls == "dscs"

    @cached_property
    def load_order(self) -> tuple:
        """How _least_loaded ranks the node: one with an idle warm instance first (no cold start,
        no wait), then the least busy, warm before cold on a tie, then by name. A warm instance
        that is busy, or that waiting calls will take, is no reason to queue behind it: ranking
        any warm node first piled every call of a function onto the node it first ran on while
        the others sat idle (twin-sim.md). "Busy" counts every function's calls on the node: ranking
        by the invoked function's own calls made a node saturated by other functions look idle
        under mixed load. Computed once per NodeView: the simulator reuses
        NodeView objects across decisions, so ranking 50 compute nodes is then an attribute fetch."""
        own = self.inflight + self.queue  # an idle warm instance of this function?
        busy = max(self.load, self.inflight) + self.queue  # how busy the node is, whoever's calls
        return (self.warm <= own, busy, self.warm == 0, self.name)


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
class NodeLayout:
    """Where the nodes sit in a view's ``nodes`` tuple: by name, and which are compute or dscs.

    It depends only on the names, kinds and classes in order, not on health or load, so a caller
    that builds many views over the same nodes (the simulator: one per decision) builds it once
    and hands it to each view; the policies then look a node up in O(1) and scan only the
    compute (or dscs) nodes instead of every node. Without one, a view builds its own on first use.
    """

    names: tuple[str, ...]
    position: Mapping[str, int]  # name -> index in nodes (names are unique in every real view)
    compute: tuple[int, ...]  # indices of the compute nodes, in view order
    accelerated: tuple[int, ...]  # indices of the dscs-class nodes, in view order

    @classmethod
    def of(cls, nodes) -> NodeLayout:
        position: dict[str, int] = {}
        for i, n in enumerate(nodes):
            position.setdefault(n.name, i)
        return cls(tuple(n.name for n in nodes), position, tuple(i for i, n in enumerate(nodes) if n.kind == "compute"),
                   tuple(i for i, n in enumerate(nodes) if n.has_accelerator))

    def fits(self, nodes) -> bool:
        """Whether this layout describes ``nodes`` (O(n): for tests and assertions, not per call)."""
        return self == NodeLayout.of(nodes)


@dataclass(frozen=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    replicas: Mapping = field(default_factory=dict)  # (bucket, key) -> [node names], preference order
    estimates: Estimates = field(default_factory=Estimates)
    # An index of ``nodes`` the caller already has (see NodeLayout); not part of the view's value.
    layout: NodeLayout | None = field(default=None, compare=False, repr=False)

    # What the policies ask of a view, answered from the layout rather than by scanning every
    # node on every decision (that scan was ~60 µs at 250 nodes). A layout the view builds itself
    # is kept in the instance __dict__ (a view is immutable), by hand: functools.cached_property
    # takes a lock on each first access on Python 3.11, a cost paid on every simulated decision.
    def _index(self) -> NodeLayout:
        layout = self.layout
        if layout is None:
            layout = self.__dict__.get("_own_layout")
            if layout is None:
                layout = self.__dict__["_own_layout"] = NodeLayout.of(self.nodes)
        elif len(layout.names) != len(self.nodes):
            raise ValueError(f"a layout of {len(layout.names)} nodes given for a view of {len(self.nodes)}")
        return layout

    def node(self, name: str) -> NodeView | None:
        """The node called ``name`` (None when the view has none)."""
        i = self._index().position.get(name)
        if i is None:
            return None
        node = self.nodes[i]
        if node.name != name:  # a layout that does not describe these nodes: never guess
            raise ValueError(f"the view's layout puts {name!r} at {i}, where {node.name!r} is")
        return node

    def healthy_compute(self) -> list[NodeView]:
        """The healthy compute nodes, in view order."""
        nodes = self.nodes
        return [n for i in self._index().compute if (n := nodes[i]).healthy and n.kind == "compute"]

    def healthy_nodes(self) -> list[NodeView]:
        """Every healthy node, in view order (the last resort when no compute node is healthy)."""
        return [n for n in self.nodes if n.healthy]

    def accelerated(self) -> list[NodeView]:
        """The dscs-class nodes, in view order."""
        nodes = self.nodes
        return [n for i in self._index().accelerated if (n := nodes[i]).has_accelerator]


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


_LOAD_ORDER = attrgetter("load_order")


def _least_loaded(nodes) -> NodeView:
    # An idle warm instance first, then the least busy (NodeView.load_order).
    return min(nodes, key=_LOAD_ORDER)


def _holders(invocation: Invocation, view: ClusterView) -> list[NodeView]:
    """dscs-class nodes holding a replica of the inputs, in replica preference order."""
    seen, holders = set(), []
    for ref in invocation.inputs:
        for name in view.replicas.get(tuple(ref), []):
            node = view.node(name)
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
        compute = view.healthy_compute()
        if compute:
            return Decision(_least_loaded(compute).name, "cpu", reason)
        anyone = view.healthy_nodes()
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
            free = [n for n in view.accelerated() if _skip_reason(n) is None]
            if free:
                return Decision(_least_loaded(free).name, "dscs", "no-input")
            why_not += [_skip_reason(n) for n in view.accelerated()]
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
        node = view.node(node_name)
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
