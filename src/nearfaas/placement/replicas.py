"""Where an object's replicas live: rendezvous (highest-random-weight) hashing, or copysets.

Rendezvous (the default): every node scores every key; the top ``factor`` scores hold the
replicas. Adding or removing a node moves only the keys that node wins or loses, and every
gateway computes the same answer without a shared table. DSCS-Serverless (section 5.2) maps one
replica of an acceleratable object to a DSCS drive: with ``dscs_replica`` the best-scoring dscs
node is guaranteed a copy.

Copyset (``Scheme("copyset", w)``): replicas only ever share one of a few fixed node sets
(placement/copysets.py), so simultaneous failures lose data far less often (issue 20).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from nearfaas.placement import copysets

SCHEMES = ("rendezvous", "copyset")


@dataclass(frozen=True)
class StorageNode:
    name: str
    cls: str  # "dscs" or "standard"


def score(node: str, bucket: str, key: str) -> int:
    digest = hashlib.blake2b(f"{node}\0{bucket}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Scheme:
    """How replica sets are chosen: ``rendezvous``, or ``copyset`` with a scatter width."""
    name: str = "rendezvous"
    scatter_width: int = 0


RENDEZVOUS = Scheme()


def replicas_for(nodes: list[StorageNode], bucket: str, key: str, factor: int, dscs_replica: bool = False,
                 scheme: Scheme = RENDEZVOUS) -> list[StorageNode]:
    """The replica set in preference order (the first is the primary)."""
    if not nodes:
        return []
    if scheme.name == "copyset" and 2 <= factor < len(nodes):
        by_name = {n.name: n for n in nodes}
        anchors = tuple(n.name for n in nodes if n.cls == "dscs") if dscs_replica else ()
        sets = copysets.cached(tuple(sorted(by_name)), factor, scheme.scatter_width, anchors)
        return [by_name[name] for name in copysets.pick(sets, bucket, key, score)]
    ranked = sorted(nodes, key=lambda n: score(n.name, bucket, key), reverse=True)
    chosen = ranked[: max(1, min(factor, len(ranked)))]
    if dscs_replica and not any(n.cls == "dscs" for n in chosen):
        best_dscs = next((n for n in ranked if n.cls == "dscs"), None)
        if best_dscs is not None:
            chosen = chosen[:-1] + [best_dscs]
    return chosen


class ReplicaCatalog:
    """Where an object's copies are, for placement: the location catalog first (a chain
    intermediate has one copy, on the node that wrote it), else the replication scheme
    (rendezvous or copyset) over the storage ring. The one rule the gateway's invoker and the twin's simulator both use.

    Worked example: ``catalog.located[("nearfaas-intermediates", "app/run/f1")] = ["storage-1"]``
    after f1 wrote there; ``catalog.replicas(that ref)`` is ``["storage-1"]``, and any other
    ref gets its top-``factor`` rendezvous nodes (a dscs one among them with ``dscs_replica``).

    Known caveats:
    - ``cache=True`` memoises hashing per ref without bound: for the simulator's fixed object
      set, not for the gateway's open-ended keys.
    """

    def __init__(self, ring: list[StorageNode], factor: int, dscs_replica: bool, *, cache: bool = False,
                 scheme: Scheme = RENDEZVOUS):
        self.ring, self.factor, self.dscs_replica, self.scheme = ring, factor, dscs_replica, scheme
        self.located: dict[tuple[str, str], list[str]] = {}
        self._cache: dict[tuple[str, str], list[str]] | None = {} if cache else None

    def replicas(self, ref: tuple[str, str]) -> list[str]:
        found = self.located.get(ref)
        if found:
            return found
        if self._cache is not None and ref in self._cache:
            return self._cache[ref]
        names = [s.name for s in replicas_for(self.ring, ref[0], ref[1], self.factor, self.dscs_replica, self.scheme)]
        if self._cache is not None:
            self._cache[ref] = names
        return names
