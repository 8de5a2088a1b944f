"""Anti-entropy: a background pass that converges replicas after any outage, whatever was missed.

Hints (hints.py) repair what the gateway knows a node missed. Anti-entropy repairs the rest: a
write abandoned on a hung node that applied it later, a gateway that died between a write and
its hint, a bucket created while a node was down. Every ``interval_s``, when every storage node
is healthy, it asks each node for each bucket's digest (an order-independent hash of its
(key, version, live|deleted) entries, node/objectstore.py) and, only where the digests differ,
pages through every node's entries, finds each key's newest version and repairs the nodes
behind (repair.py). Then it garbage-collects tombstones that every node holds and that are
older than ``tombstone_grace_s``: a delete is forgotten only once nobody can miss it.

Worked example: storage-1 was SIGSTOPped during PUT k@v5 (the gateway gave up on it and wrote a
hint) and, on SIGCONT, applied an older queued PUT k@v3. The hint brings it to v5; had the
gateway crashed before the hint, the next pass would find digests differing, see v5 on
storage-0 and v3 on storage-1, and copy v5 across.

In a bucket with versioning the digest covers every version and delete marker, and a pass that
finds digests differing also copies each noncurrent version to the replicas of its key that lack
it (``Repairer.sync_versions``).

Buckets named in ``local_buckets`` hold node-local data by design (chain intermediates, written
next to the worker that reads them next): they are never repaired, only their tombstones are
collected.

Known caveats:
- A pass needs every storage node healthy (a tombstone is purged only when all hold it).
- Digests are per bucket, not per key range: with more storage nodes than replicas the digests
  always differ and every pass lists every entry (a Merkle tree over key ranges is the next step).
- Tombstones purged while a request older than them is still in flight to some node (held more
  than ``tombstone_grace_s``) could let that older write back in: the grace is minutes for that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import quote

from nearfaas.replication.repair import ReplicaState, newest
from nearfaas.replication.version import wall_seconds

log = logging.getLogger("nearfaas.replication.antientropy")
DEFAULT_INTERVAL_S = 30.0
DEFAULT_TOMBSTONE_GRACE_S = 600.0
_REPAIR_CONCURRENCY = 8


class AntiEntropy:
    def __init__(self, cluster, repairer, nodes, *, interval_s: float = DEFAULT_INTERVAL_S,
                 tombstone_grace_s: float = DEFAULT_TOMBSTONE_GRACE_S, local_buckets: frozenset[str] = frozenset()):
        self.cluster, self.repairer, self.nodes = cluster, repairer, nodes
        self.local_buckets = local_buckets
        self.interval_s, self.tombstone_grace_s = interval_s, tombstone_grace_s
        self.passes = 0
        self.skipped = 0  # passes skipped because a storage node was down
        self.tombstones_purged = 0
        self.skipped_last = False
        self.diverged_since: float | None = None  # when a pass first found replicas differing
        self.last_converged: float | None = None
        # Nodes on a replaced disk (replication/replaced.py): told when a pass found every node
        # identical; while any is refilling, passes follow each other without the interval.
        self.replaced = None
        self._woken = asyncio.Event()

    def wake(self) -> None:
        """Start the next pass now (a node came back on an empty disk)."""
        self._woken.set()

    async def run_forever(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._woken.wait(), self.interval_s)
            except TimeoutError:
                pass
            self._woken.clear()
            try:
                converged = await self.run_once()
            except Exception as exc:  # a node dying mid-pass: the next pass starts over
                log.warning("anti-entropy pass failed: %r", exc)
                continue
            if self.replaced is not None and self.replaced.refilling:
                if converged:
                    self.replaced.refilled(self.nodes.storage_nodes())
                elif not self.skipped_last:
                    self._woken.set()  # it repaired: check again at once, so the node is trusted soon

    async def run_once(self) -> bool:
        """One pass; True when every bucket was found (or made) identical on every node."""
        storage = self.nodes.storage_nodes()
        self.skipped_last = not storage or any(not n.healthy for n in storage)
        if self.skipped_last:
            self.skipped += 1
            return False
        names = [n.name for n in storage]
        self.passes += 1
        converged = await self._buckets(names)
        for bucket in sorted({b.name for b in await self.cluster.list_buckets()}):
            converged &= await self._bucket(bucket, names)
        now = time.time()
        if converged:
            self.diverged_since, self.last_converged = None, now
        elif self.diverged_since is None:
            self.diverged_since = now
        return converged

    async def _buckets(self, names: list[str]) -> bool:
        """Create on every node the buckets some node lacks (one created while it was down)."""
        listings = await asyncio.gather(*(self.cluster.client_for(n).list_buckets() for n in names))
        holder = {b.name: node for node, listing in zip(names, listings, strict=True) for b in listing}
        missing = [(node, name) for node, listing in zip(names, listings, strict=True)
                   for name in sorted(set(holder) - {b.name for b in listing})]
        for node, name in missing:
            # Its options from a node that has it (a HEAD: a listing carries none): made with the
            # listing's, a replaced disk got its buckets back without versioning, owner or policy,
            # and then kept a versioned key's delete marker as a plain delete (issue 43).
            info = await self.cluster.client_for(holder[name]).head_bucket(name)
            await self.repairer.ensure_bucket(node, name, info.options)
        return not missing

    async def _digests(self, bucket: str, names: list[str]) -> list[dict]:
        return await asyncio.gather(*(self.nodes.call(n, "GET", f"/_nearfaas/replica/{bucket}/digest") for n in names))

    async def _bucket(self, bucket: str, names: list[str]) -> bool:
        digests = await self._digests(bucket, names)
        same = len({d["digest"] for d in digests}) == 1 or bucket in self.local_buckets
        old = time.time() - self.tombstone_grace_s
        if same and not any(d["tombstones"] and d["oldest_tombstone"] < old for d in digests):
            return True
        entries = await self._entries(bucket, names)
        if not same:
            await self._repair_all(bucket, names, entries)
            if await self.cluster.versioning_status(bucket):  # noncurrent versions too (repair.py)
                await self.repairer.sync_versions(bucket, names)
        await self._purge(bucket, names, entries, old)
        return same

    async def _entries(self, bucket: str, names: list[str]) -> dict[str, dict[str, ReplicaState]]:
        """key -> node -> what the node holds, over every node's whole entry list."""
        table: dict[str, dict[str, ReplicaState]] = {}
        for name in names:
            after = ""
            while True:
                page = await self.nodes.call(name, "GET", f"/_nearfaas/replica/{bucket}/entries?after={_q(after)}")
                for key, version, deleted in page["entries"]:
                    table.setdefault(key, {})[name] = ReplicaState(name, version, deleted)
                if not page["truncated"] or not page["entries"]:
                    break
                after = page["entries"][-1][0]
        return table

    async def _repair_all(self, bucket: str, names: list[str], table: dict) -> None:
        gate = asyncio.Semaphore(_REPAIR_CONCURRENCY)

        async def one(key: str) -> None:
            async with gate:
                await self.repairer.repair(bucket, key, via="anti_entropy")

        behind = []
        for key, held in table.items():
            best = newest(held.values())
            replicas = set(await self.cluster.replica_names(bucket, key))
            if any(held.get(n) is None or held[n].version < best.version for n in replicas | set(held)):
                behind.append(key)
        await asyncio.gather(*(one(k) for k in behind))

    async def _purge(self, bucket: str, names: list[str], table: dict, older_than: float) -> None:
        """Forget tombstones every node holds (same version) that are past the grace."""
        doomed = [(key, held[names[0]].version) for key, held in table.items()
                  if len(held) == len(names) and all(s.deleted for s in held.values())
                  and len({s.version for s in held.values()}) == 1 and wall_seconds(held[names[0]].version) < older_than]
        if not doomed:
            return
        answers = await asyncio.gather(*(self.nodes.call(n, "POST", f"/_nearfaas/replica/{bucket}/purge",
                                                          json={"tombstones": doomed}) for n in names))
        self.tombstones_purged += max(a["purged"] for a in answers)


def _q(text: str) -> str:
    return quote(text, safe="")
