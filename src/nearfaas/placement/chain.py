"""Chains: an application is a DAG of functions, named by its first function.

Each function's ``x-nearfaas.chain`` lists the functions that receive its output. Calling the
first function runs the whole DAG: a stage runs once every stage before it has finished, and
stages with nothing between them run side by side. This module only plans (no I/O), so the live
gateway and the twin's simulator walk a chain the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class ChainError(ValueError):
    pass


class StageMissing(ChainError):
    """A chain names a function that is not deployed."""


class ChainCycle(ChainError):
    """Following the chain never ends."""


@dataclass(frozen=True)
class Stage:
    function: str
    after: tuple[str, ...]  # stages whose outputs this one receives, in declaration order
    successors: tuple[str, ...]

    @property
    def is_sink(self) -> bool:
        return not self.successors


def plan(head: str, successors: Mapping[str, list[str]]) -> list[list[Stage]]:
    """The stages reachable from ``head``, in waves: every stage of a wave depends only on
    stages of earlier waves. Raises ChainError on a cycle or a stage that is not declared."""
    reachable, order, stack = set(), [], [head]
    while stack:  # every stage reachable from head, in first-seen order
        name = stack.pop()
        if name in reachable:
            continue
        if name not in successors:
            raise StageMissing(f"chain stage {name!r} is not deployed; deploy it, or remove it from the chain")
        reachable.add(name)
        order.append(name)
        stack.extend(reversed(successors[name]))
    after: dict[str, list[str]] = {name: [] for name in order}
    for name in order:
        for nxt in successors[name]:
            if name not in after[nxt]:
                after[nxt].append(name)
    waves, done = [], set()
    pending = list(order)
    while pending:
        wave = [n for n in pending if all(p in done for p in after[n])]
        if not wave:
            raise ChainCycle(f"the chain from {head!r} has a cycle through {', '.join(pending)}; remove one link")
        waves.append([Stage(n, tuple(after[n]), tuple(dict.fromkeys(successors[n]))) for n in wave])
        done.update(wave)
        pending = [n for n in pending if n not in done]
    return waves


def intermediate_key(app: str, run_id: str, stage: str) -> str:
    """Where a stage's output goes: one prefix per chain call. ``run_id`` is made by the gateway
    for each call, never taken from a client, so no two calls share an intermediate."""
    return f"{app}/{run_id}/{stage}"
