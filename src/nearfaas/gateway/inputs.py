"""What a call will read, for placing it next to its data: named objects, prefixes, or learned.

The placement policies (placement/) take a call's input objects and the nodes holding each one's
replicas. ``InputResolver.resolve`` finds those objects, down a ladder:

1. **Named objects.** The function's ``x-nearfaas.inputs`` paths find ``{bucket, key}`` in the
   request body: those are the inputs (``source: named``).
2. **Named prefixes.** A ``{bucket, prefix}`` there names every object under the prefix, a
   "directory". The resolver lists it (at most ``PREFIX_OBJECTS`` objects, cached for
   ``PREFIX_TTL_S``), adds up the bytes each node holds replicas of, and hands the policy the
   prefix's largest objects with every replica list ordered by those bytes: the node holding
   the bulk of the prefix comes first (``source: prefix``).
3. **Learned.** A call that names nothing gets the objects this function's earlier calls
   actually read (the worker reports them, ``X-Nearfaas-Read``; boto3 reads included, see
   runtime/s3proxy.py), each weighted by an exponentially decayed byte count: the objects with at
   least ``LEARNED_SHARE`` of the heaviest one's weight (``source: learned``).
4. Otherwise no inputs: the policy's own no-input rule.

Worked example: ``stats`` is called with ``{"input": {"bucket": "logs", "prefix": "2026/11/"}}``.
The prefix holds 40 objects, 30 MB of them with a replica on storage-1 and 12 MB on storage-0;
the policy sees storage-1 first in every replica list and runs the call there. A later
``thumbnail`` call with an empty body goes where ``photos/cat.jpg`` lives, because its last
calls read that object through boto3.

Known caveats:
- A prefix is listed at most once per ``PREFIX_TTL_S`` per (bucket, prefix): objects added in
  between count from the next listing.
- Learning follows what calls read, not what they will read: a function whose input changes on
  every call learns nothing useful, and its weights decay within a few calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

PREFIX_OBJECTS = 1000   # objects of a prefix looked at to find where its bytes are
PREFIX_REFS = 64        # of those, the largest given to the policy
PREFIX_TTL_S = 2.0      # a listing is reused this long
LEARNED_DECAY = 0.3     # weight of the newest call in the decayed byte counts
LEARNED_SHARE = 0.05    # learned objects below this share of the heaviest are not inputs
LEARNED_KEEP = 32       # objects remembered per function

Lister = Callable[[str, str, int], Awaitable[list[tuple[str, int]]]]  # (bucket, prefix, max) -> [(key, size)]


class InputResolver:
    def __init__(self, replicas_of: Callable[[tuple], list[str]], lister: Lister | None = None, clock=time.monotonic):
        self.replicas_of = replicas_of
        self.lister = lister  # set by the gateway once its S3 backend exists
        self._clock = clock
        self._listings: dict[tuple[str, str], tuple[float, list[tuple[str, int]]]] = {}
        self.learned: dict[str, dict[tuple[str, str], float]] = {}  # function -> (bucket, key) -> decayed bytes

    async def resolve(self, function: str, named: list[dict]) -> tuple[list[tuple[str, str]], dict, str]:
        """(input refs, replica lists ordered for placement, source) for one call."""
        keys = [(r["bucket"], r["key"]) for r in named if isinstance(r.get("key"), str)]
        prefixes = [(r["bucket"], r["prefix"]) for r in named if not isinstance(r.get("key"), str)]
        if prefixes and self.lister is not None:
            objects = [(b, k, size) for b, p in prefixes for k, size in await self._list(b, p)]
            if objects:
                refs, replicas = self._by_bulk(objects)
                return keys + [r for r in refs if r not in keys], replicas, "prefix"
        if keys:
            return keys, {}, "named"
        if not named:
            learned = self.learned_refs(function)
            if learned:
                return learned, {}, "learned"
        return [], {}, "none"

    async def _list(self, bucket: str, prefix: str) -> list[tuple[str, int]]:
        now = self._clock()
        cached = self._listings.get((bucket, prefix))
        if cached and now - cached[0] < PREFIX_TTL_S:
            return cached[1]
        try:
            found = await self.lister(bucket, prefix, PREFIX_OBJECTS)
        except Exception:  # an unlistable prefix only costs the call its data-local placement
            found = []
        if len(self._listings) > 4096:
            self._listings.clear()
        self._listings[(bucket, prefix)] = (now, found)
        return found

    def _by_bulk(self, objects: list[tuple[str, str, int]]) -> tuple[list[tuple[str, str]], dict]:
        held: dict[str, int] = {}
        for bucket, key, size in objects:
            for node in self.replicas_of((bucket, key)):
                held[node] = held.get(node, 0) + size
        largest = sorted(objects, key=lambda o: -o[2])[:PREFIX_REFS]
        refs = [(b, k) for b, k, _ in largest]
        replicas = {ref: sorted(self.replicas_of(ref), key=lambda n: -held.get(n, 0)) for ref in refs}
        return refs, replicas

    # -- learning ----------------------------------------------------------------------------------
    def learn(self, function: str, header: str | None) -> None:
        """Fold one call's ``X-Nearfaas-Read`` (``[[bucket, key, bytes], ...]``) into the weights."""
        try:
            read = json.loads(header) if header else []
            entries = {(str(b), str(k)): float(n) for b, k, n in read}
        except (ValueError, TypeError):
            return  # a worker answer we do not understand teaches nothing
        weights = self.learned.setdefault(function, {})
        for ref in list(weights):
            weights[ref] *= 1 - LEARNED_DECAY
        for ref, nbytes in entries.items():
            weights[ref] = weights.get(ref, 0.0) + LEARNED_DECAY * nbytes
        if len(weights) > LEARNED_KEEP:
            for ref in sorted(weights, key=weights.get)[: len(weights) - LEARNED_KEEP]:
                del weights[ref]

    def learned_refs(self, function: str) -> list[tuple[str, str]]:
        weights = self.learned.get(function) or {}
        if not weights:
            return []
        top = max(weights.values())
        if top <= 0:
            return []
        return [ref for ref, w in sorted(weights.items(), key=lambda item: -item[1]) if w >= LEARNED_SHARE * top]

    def forget(self, function: str) -> None:
        self.learned.pop(function, None)
