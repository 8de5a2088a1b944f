"""Hinted handoff: what a replica missed while it was down, remembered until it has it.

When a write, delete or CreateBucket is acknowledged without one of its replicas (the node was
down, hung past the patience, or missed the bucket), the gateway first appends a *hint* to
``<state>/gateway/hints.journal`` (nearfaas/journal.py, fsynced before the client's answer):
"node N is owed key K of bucket B at version V or newer" (or "bucket B with these options", or
"upload U of key K is over": a multipart upload completed or aborted while N was down, which N
still holds with its parts, aborted there once it is back).
The replayer (``replay_forever``) looks every ``interval_s`` for nodes that are healthy again and
repairs each hinted key there from a replica that has it (replication/repair.py); a hint is done
once the node holds version V or newer. Hints for one (node, bucket, key) collapse into the
newest.

A *void* (``HintLog.void``) is kept for a write or delete answered 5xx after it was stamped: it
may sit on some replica, so no read answers that version and the replayer, once every storage
node answers, puts back what the key held before it (replication/repair.py, ``resolve_void``).

Reads use hints too: a key with a pending hint has a known newest version, and a read that can
only reach replicas older than it answers 503 rather than stale data (gateway/cluster_backend.py).

Worked example: storage-1 is SIGKILLed; PUT k (v7) lands on storage-0 only and a hint
(storage-1, k, v7) is written; storage-1 restarts and answers its health poll; within
``interval_s`` the replayer copies k@v7 from storage-0 to storage-1 and marks the hint done.

Known caveats:
- The data itself is not in the hint, only where it is owed: if every replica that holds the
  hinted version is lost for good, the hint cannot be honoured (and reads of that key answer
  503 until an operator removes the hint file).
- Bucket deletion is not hinted: DeleteBucket needs every storage node up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from nearfaas.journal import Journal, decode

log = logging.getLogger("nearfaas.replication.hints")
JOURNAL_NAME = "hints.journal"


@dataclass
class Hint:
    key: int  # the journal's id
    node: str
    bucket: str
    object_key: str | None  # None: the bucket itself is owed (CreateBucket)
    version: str = ""
    options: dict = field(default_factory=dict)  # the bucket's options, for a bucket hint
    created: float = 0.0
    upload: str | None = None  # a multipart upload id the node is to abort (its upload is over)
    # A void: the write or delete of ``version`` was answered 5xx and may have landed on some
    # replica; repair puts back what the key held before it (Repairer.resolve_void). Node "".
    void: bool = False

    def record(self) -> dict:
        return {"t": "a", "k": self.key, "n": self.node, "b": self.bucket, "o": self.object_key, "v": self.version,
                "opt": self.options, "ts": self.created, **({"u": self.upload} if self.upload else {}),
                **({"void": 1} if self.void else {})}

    @classmethod
    def from_records(cls, records: list[dict]) -> Hint | None:
        r = next((r for r in records if r["t"] == "a"), None)
        if r is None:
            return None
        return cls(int(r["k"]), str(r["n"]), str(r["b"]), None if r["o"] is None else str(r["o"]), str(r.get("v", "")),
                   dict(r.get("opt") or {}), float(r.get("ts", 0.0)), str(r["u"]) if r.get("u") else None, bool(r.get("void")))

    @property
    def slot(self) -> tuple[str, str, str | None, str | None]:
        # A void is one per failed write: its version takes the place an upload id has.
        return self.node, self.bucket, self.object_key, f"void {self.version}" if self.void else self.upload


class HintLog:
    """The hints not yet honoured; durable under ``state_dir`` (None: in memory, for tests)."""

    def __init__(self, state_dir: Path | None):
        self.journal = Journal(Path(state_dir) / JOURNAL_NAME, name="hints-journal") if state_dir is not None else None
        if self.journal is not None:
            self.journal.snapshot = lambda: [h.record() for h in self._hints.values()]
        self._next = 1
        self._hints: dict[tuple[str, str, str | None], Hint] = {}
        self._by_key: dict[tuple[str, str], dict[str, str]] = {}  # (bucket, key) -> node -> version owed
        self._voids: dict[tuple[str, str], set[str]] = {}  # (bucket, key) -> versions of writes answered 5xx
        self.handed_off = 0  # hints replayed since start-up
        self.peers: list[HintTail] = []  # other gateways' journals, read for reads (gateway/peers.py)

    def load(self) -> None:
        if self.journal is None:
            return
        for hint in self.journal.load(Hint.from_records, Hint.record):
            old = self._hints.get(hint.slot)
            if old is None or old.version <= hint.version:
                self._put(hint)

    async def add(self, node: str, bucket: str, object_key: str | None, version: str = "", options: dict | None = None,
                  upload: str | None = None) -> None:
        """Remember (durably: fsynced on return) that ``node`` is owed this key or bucket, or the
        abort of ``upload`` (of this key)."""
        slot = (node, bucket, object_key, upload)
        old = self._hints.get(slot)
        if old is not None and old.version >= version:
            return
        hint = Hint(self._new_key(), node, bucket, object_key, version, dict(options or {}), time.time(), upload)
        self._put(hint)
        if self.journal is not None:
            await self.journal.append(hint.record())
            if old is not None:
                self.journal.append_nowait({"t": "d", "k": old.key}, sync=False)

    def _new_key(self) -> int:
        if self.journal is not None:
            return self.journal.new_key()
        self._next += 1
        return self._next - 1

    async def void(self, bucket: str, object_key: str, version: str) -> None:
        """Remember (fsynced on return) that the write of ``version`` failed: no read answers it,
        and repair puts back what the key held before it (replication/repair.py)."""
        hint = Hint(self._new_key(), "", bucket, object_key, version, {}, time.time(), None, True)
        self._put(hint)
        if self.journal is not None:
            await self.journal.append(hint.record())

    def voided(self, bucket: str, object_key: str) -> set[str]:
        """Versions of the key whose writes failed and are not yet undone (every gateway's)."""
        mine = self._voids.get((bucket, object_key), set())
        return mine.union(*(p.voided(bucket, object_key) for p in self.peers)) if self.peers else mine

    def voids(self) -> list[Hint]:
        return [h for h in self._hints.values() if h.void]

    def _put(self, hint: Hint) -> None:
        self._hints[hint.slot] = hint
        if hint.void:
            self._voids.setdefault((hint.bucket, hint.object_key), set()).add(hint.version)
        elif hint.object_key is not None and hint.upload is None:
            self._by_key.setdefault((hint.bucket, hint.object_key), {})[hint.node] = hint.version

    async def done(self, hint: Hint) -> None:
        if self._hints.get(hint.slot) is hint and hint.void:
            del self._hints[hint.slot]
            versions = self._voids.get((hint.bucket, hint.object_key), set())
            versions.discard(hint.version)
            if not versions:
                self._voids.pop((hint.bucket, hint.object_key), None)
        elif self._hints.get(hint.slot) is hint:
            del self._hints[hint.slot]
            owed = self._by_key.get((hint.bucket, hint.object_key), {})
            owed.pop(hint.node, None)
            if not owed:
                self._by_key.pop((hint.bucket, hint.object_key), None)
        self.handed_off += 1
        if self.journal is not None:
            await self.journal.append({"t": "d", "k": hint.key}, sync=False)

    def all(self) -> list[Hint]:
        return list(self._hints.values())

    def for_node(self, node: str) -> list[Hint]:
        return sorted((h for h in self._hints.values() if h.node == node), key=lambda h: (h.object_key is not None, h.key))

    def owes_bucket(self, node: str, bucket: str) -> bool:
        """``node`` missed the bucket's creation and has not been given it yet: its NoSuchBucket
        is not an answer about the bucket."""
        return (node, bucket, None, None) in self._hints or any(p.owes_bucket(node, bucket) for p in self.peers)

    def newest(self, bucket: str, object_key: str) -> str:
        """The newest version some replica is owed for this key ("" when none): no read may
        answer anything older. With many gateways, what the others owe counts too (``peers``)."""
        mine = max(self._by_key.get((bucket, object_key), {}).values(), default="")
        return max([mine, *(p.newest(bucket, object_key) for p in self.peers)]) if self.peers else mine

    def newest_version(self) -> str:
        """The newest version any hint owes ("" when none): a restarted gateway's clock goes past
        it, even when the nodes that hold it are down (replication/version.py)."""
        return max((h.version for h in self._hints.values()), default="")

    def pending(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for hint in self._hints.values():
            node = hint.node or "(void)"  # failed writes to undo belong to no one node
            counts[node] = counts.get(node, 0) + 1
        return counts

    def oldest(self) -> float | None:
        return min((h.created for h in self._hints.values()), default=None)

    async def close(self) -> None:
        if self.journal is not None:
            await self.journal.close()


class HintTail:
    """Another gateway's hint journal, followed read-only: what it owes, so that a read through
    this gateway never answers older than a write acknowledged through that one (with the node
    holding it down). Brought up to date at each question by reading what was appended since
    (one stat when nothing was); a compacted or removed file is read again from the start."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / JOURNAL_NAME
        self._inode: int | None = None
        self._offset = 0
        self._hints: dict[int, Hint] = {}
        self._by_key: dict[tuple[str, str], dict[int, str]] = {}
        self._voids: dict[tuple[str, str], dict[int, str]] = {}

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            st = None
        if st is None or st.st_ino != self._inode or st.st_size < self._offset:
            self._inode, self._offset = (st.st_ino if st else None), 0
            self._hints.clear()
            self._by_key.clear()
            self._voids.clear()
        if st is None or st.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        whole = data.rfind(b"\n") + 1  # a line being appended now is read next time
        self._offset += whole
        for line in data[:whole].splitlines():
            record = decode(line)
            if record is None or "k" not in record:
                continue
            if record["t"] == "a":
                hint = Hint.from_records([record])
                self._hints[hint.key] = hint
                table = self._voids if hint.void else self._by_key
                if hint.object_key is not None and hint.upload is None:
                    table.setdefault((hint.bucket, hint.object_key), {})[hint.key] = hint.version
            elif record["t"] == "d" and (gone := self._hints.pop(int(record["k"]), None)) is not None:
                table = self._voids if gone.void else self._by_key
                owed = table.get((gone.bucket, gone.object_key), {})
                owed.pop(gone.key, None)
                if not owed:
                    table.pop((gone.bucket, gone.object_key), None)

    def newest(self, bucket: str, object_key: str) -> str:
        self._refresh()
        return max(self._by_key.get((bucket, object_key), {}).values(), default="")

    def voided(self, bucket: str, object_key: str) -> set[str]:
        self._refresh()
        return set(self._voids.get((bucket, object_key), {}).values())

    def owes_bucket(self, node: str, bucket: str) -> bool:
        self._refresh()
        return any(h.node == node and h.bucket == bucket and h.object_key is None for h in self._hints.values())


async def replay_forever(hints: HintLog, nodes, repairer, interval_s: float = 0.5, concurrency: int = 8) -> None:
    """Hand every healthy node what it is owed; hints whose source is unreachable wait."""
    gate = asyncio.Semaphore(concurrency)

    async def one(hint: Hint) -> None:
        async with gate:
            try:
                if hint.void:  # a failed write: put back what the key held before it, where it landed
                    ok = await repairer.resolve_void(hint.bucket, hint.object_key, hint.version)
                elif hint.object_key is None:
                    ok = await repairer.ensure_bucket(hint.node, hint.bucket, hint.options)
                elif hint.upload is not None:
                    ok = await repairer.abort_upload(hint.node, hint.bucket, hint.object_key, hint.upload)
                else:
                    ok = await repairer.repair(hint.bucket, hint.object_key, via="hint", at_least=hint.version,
                                               targets=[hint.node])
            except Exception as exc:  # a node that fails mid-replay: try again next round
                log.warning("hint replay of %s (%s) failed: %r", (hint.bucket, hint.object_key),
                            f"void {hint.version}" if hint.void else f"to {hint.node}", exc)
                return
            if ok:
                await hints.done(hint)

    while True:
        await asyncio.sleep(interval_s)
        if (voids := hints.voids()) and all(n.healthy for n in nodes.storage_nodes()):
            await asyncio.gather(*(one(h) for h in voids))
        for node in nodes.storage_nodes(healthy_only=True):
            owed = hints.for_node(node.name)
            # Buckets first: an object can only land in a bucket the node has.
            await asyncio.gather(*(one(h) for h in owed if h.object_key is None))
            await asyncio.gather(*(one(h) for h in owed if h.object_key is not None))
