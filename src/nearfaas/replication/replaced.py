"""Storage nodes back on an empty (replaced) disk: not the last word until they are refilled.

Mechanism. Every store has an identity, made with it (``store_id``, node/objectstore.py) and shown
in its node's health answer. The gateways keep, in ``<state>/gateway/stores.json`` (shared by every
gateway, changed under its lock), the identity each storage node had when an anti-entropy pass
last found every node identical. A node that answers its health poll with another identity is on
a new disk: it joins ``refilling``, and an anti-entropy pass is started at once rather than at the
next interval. While a node is refilling, its "no such key" and "no such bucket" answers say
nothing (gateway/cluster_backend.py treats them as no answer, for keys and for the bucket's own
lookups: its options, HeadBucket, listings): a read that can reach no other replica is a 503
to retry, not a 404 for a key or bucket that was acknowledged. A gateway started meanwhile
knows it from the shared record at its first poll, before it serves. A pass that finds every
node identical records the new identities, and the node is authoritative again. A node first
seen (a new cluster, a node added) is recorded as it is: an empty store there is the truth.

Worked example: storage-0 is down; storage-1's disk is replaced and the node restarted. Its
health says store ``b41c…``, the file says ``9e07…``: refilling. GET k (acknowledged on both
before) reaches only storage-1, which says NoSuchKey: 503, not 404. storage-0 returns, the pass
that starts at once copies every key to storage-1, the next finds them identical, the file is
updated, and reads may be answered by storage-1 alone again.

Known caveats:
- A listing merges the healthy nodes' listings: with the only other replica down, a refilling
  node's listing lacks what it has not got back yet.
- A gateway whose state folder was lost records whatever identities it first sees: a node
  replaced while that gateway was down is taken as complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from nearfaas import atomic

log = logging.getLogger("nearfaas.replication.replaced")


class ReplacedStores:
    def __init__(self, path: Path | None, wake=lambda: None):
        self.file = atomic.SharedJson(path) if path is not None else None  # None: in memory (tests)
        self.wake = wake  # starts an anti-entropy pass now
        self.refilling: set[str] = set()
        self._known: dict[str, str] = {}
        self._tasks: set[asyncio.Task] = set()

    def _load(self) -> dict[str, str]:
        if self.file is not None:
            data = self.file.read()
            self._known = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        return self._known

    def on_poll(self, node) -> None:
        """A storage node answered its health poll (NodeDirectory.on_poll)."""
        if node.kind != "storage" or not node.healthy:
            return
        current = str((node.status or {}).get("store_id") or "")
        if not current:
            return  # an older node: no identity to compare
        known = self._load().get(node.name)
        if known is None:
            self._record({node.name: current})
        elif known == current:
            self.refilling.discard(node.name)
        elif node.name not in self.refilling:
            self.refilling.add(node.name)
            print(json.dumps({"event": "store-replaced", "node": node.name, "store_id": current, "was": known,
                              "action": "its absent answers are not trusted until anti-entropy has refilled it"}), flush=True)
            self.wake()

    def refilled(self, nodes) -> None:
        """An anti-entropy pass found every storage node identical: each one's store is complete."""
        done = {n.name: str((n.status or {}).get("store_id") or "") for n in nodes if n.name in self.refilling}
        if done:
            self.refilling -= set(done)
            self._record({k: v for k, v in done.items() if v})

    def _record(self, identities: dict[str, str]) -> None:
        self._known = {**self._known, **identities}
        if self.file is None:
            return
        task = asyncio.get_running_loop().create_task(self._write(identities))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, identities: dict[str, str]) -> None:
        try:
            await self.file.update(lambda known: {**(known if isinstance(known, dict) else {}), **identities})
        except (OSError, TimeoutError) as exc:  # written at the next pass or poll
            log.warning("cannot record store identities %s: %r", identities, exc)
