"""Bring replicas of a key up to its newest version: the one repair step that read-repair,
hinted handoff and anti-entropy all use.

``repair(bucket, key)`` asks every storage node what it holds for the key (a HEAD: the live
version, or the tombstone's version on a 404), takes the newest, and brings every replica that
should hold the key (its replica set, plus any node holding an older copy) up to it: a newer
tombstone is written as a versioned DELETE, a newer object is copied from a node that has it
(streamed, never buffered) as a versioned PUT that keeps its ETag and Last-Modified. Replicas
apply last-writer-wins, so a repair racing a client's write can never undo it.

Worked example: storage-1 missed PUT k@v9 (it was down). A read finds storage-0 at v9 and
storage-1 at v4, answers from storage-0 and calls ``repair(b, k, via="read")``, which GETs
k@v9 from storage-0 and PUTs it to storage-1 with version v9.

Known caveats:
- One key at a time; anti-entropy limits how many run at once.
- A node that holds a key outside its replica set (placement changed) is brought up to date,
  not emptied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nearfaas.s3.versions import DELETED_HEADER, VERSION_HEADER
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error

log = logging.getLogger("nearfaas.replication.repair")


@dataclass(frozen=True)
class ReplicaState:
    """What one node holds for a key: ``version`` "" when it holds nothing (nor a tombstone)."""

    node: str
    version: str
    deleted: bool  # a tombstone, or nothing at all
    info: ObjectInfo | None = None
    bucket_missing: bool = False
    versioned: bool = False  # a delete marker made while versioning was Enabled (node/versions.py)


def state_from(node: str, answer) -> ReplicaState | None:
    """The ReplicaState a HEAD's answer (ObjectInfo or exception) says; None when unreachable."""
    if isinstance(answer, ObjectInfo):
        return ReplicaState(node, answer.version, False, answer)
    if isinstance(answer, S3Error) and answer.code == "NoSuchKey":
        deleted = answer.headers.get(DELETED_HEADER) == "true"
        version = answer.headers.get(VERSION_HEADER, "") if deleted else ""
        return ReplicaState(node, version, True, versioned=bool(version) and answer.headers.get("x-amz-version-id") == version)
    if isinstance(answer, S3Error) and answer.code == "NoSuchBucket":
        return ReplicaState(node, "", True, bucket_missing=True)
    return None


def newest(states) -> ReplicaState | None:
    return max(states, key=lambda s: (s.version, not s.deleted), default=None)


async def with_trailer(body: AsyncIterator[bytes], version: str) -> AsyncIterator[bytes]:
    """The body followed by its version (s3/frontend.py's version trailer)."""
    async for chunk in body:
        yield chunk
    yield version.encode("ascii")


class Repairer:
    def __init__(self, cluster):
        # cluster: the gateway's ClusterBackend (client_for, replica_names, nodes)
        self.cluster = cluster
        # replica copies made, by cause; "void": failed writes undone where they had landed
        self.repaired: dict[str, int] = {"read": 0, "hint": 0, "anti_entropy": 0, "void": 0}
        self._running: dict[tuple[str, str], asyncio.Future] = {}

    async def abort_upload(self, node: str, bucket: str, key: str, upload_id: str) -> bool:
        """Abort on ``node`` an upload that was completed or aborted while it was down (a hint):
        its parts go. Done when it is gone, whoever removed it."""
        try:
            await self.cluster.client_for(node).abort_multipart_upload(bucket, key, upload_id)
        except S3Error as exc:
            if exc.code not in ("NoSuchUpload", "NoSuchBucket"):
                raise
        return True

    async def states(self, bucket: str, key: str, names: list[str]) -> dict[str, ReplicaState]:
        answers = await asyncio.gather(*(self.cluster.client_for(n).head_object(bucket, key) for n in names),
                                       return_exceptions=True)
        found = {n: state_from(n, a) for n, a in zip(names, answers, strict=True)}
        for name, answer in zip(names, answers, strict=True):
            if found[name] is None and not (isinstance(answer, S3Error) and answer.code == "ServiceUnavailable"):
                log.warning("repair: %s answered HEAD of s3://%s/%s with %r", name, bucket, ascii(key), answer)
        return {n: s for n, s in found.items() if s is not None}

    def soon(self, bucket: str, key: str, via: str = "read") -> None:
        """Repair in the background (read-repair); one repair per key at a time."""
        if (bucket, key) in self._running:
            return
        task = asyncio.ensure_future(self.repair(bucket, key, via=via))
        self._running[(bucket, key)] = task
        task.add_done_callback(lambda t: self._finished(bucket, key, t))

    def _finished(self, bucket: str, key: str, task: asyncio.Future) -> None:
        self._running.pop((bucket, key), None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background repair of s3://%s/%s failed: %r", bucket, ascii(key), task.exception())

    async def repair(self, bucket: str, key: str, *, via: str, targets: list[str] | None = None, at_least: str = "") -> bool:
        """Bring ``targets`` (default: the key's replicas and any node holding a copy) up to the
        newest version any reachable node holds. True when every target now holds a version at
        least as new as that and as ``at_least``."""
        names = [n.name for n in self.cluster.nodes.storage_nodes()]
        states = await self.states(bucket, key, names)
        best = newest(states.values())
        if best is None or best.version < at_least:
            return False  # the version owed is on no reachable node (yet)
        if best.version in self.cluster.hints.voided(bucket, key):
            return False  # a failed write, to be undone (resolve_void), not spread
        if targets is None:
            targets = sorted(set(await self.cluster.replica_names(bucket, key)) | {n for n, s in states.items() if s.version})
        if any(t not in states for t in targets):
            return False
        stale = [states[t] for t in targets if states[t].version < best.version]
        results = await asyncio.gather(*(self._bring(bucket, key, s, best) for s in stale), return_exceptions=True)
        done = sum(1 for r in results if r is True)
        self.repaired[via] = self.repaired.get(via, 0) + done
        for state, r in zip(stale, results, strict=True):
            if r is not True:
                log.warning("repair of s3://%s/%s on %s failed: %r", bucket, ascii(key), state.node, r)
        if done != len(stale):
            return False
        if via == "hint" and await self.cluster.versioning_status(bucket):
            # A node that missed writes of a versioned key missed versions, not only the newest:
            # a hint brings them all (GET ?versionId= of an acknowledged one answered
            # NoSuchVersion once the other replica died, until an anti-entropy pass; issue 43).
            return await self._bring_versions(bucket, key, [s for s in states if s not in targets and states[s].version], targets)
        return True

    async def _bring_versions(self, bucket: str, key: str, sources: list[str], targets: list[str]) -> bool:
        """Copy every version and delete marker of ``key`` that a source holds to the targets that lack it."""
        held: dict[str, dict[str, object]] = {}  # version -> node -> entry
        for name in [*sources, *targets]:
            client, key_marker, id_marker = self.cluster.client_for(name), "", ""
            while True:
                page = await client.list_object_versions(bucket, prefix=key, max_keys=1000, key_marker=key_marker,
                                                         version_id_marker=id_marker)
                for entry in page.versions:
                    if entry.key == key:
                        held.setdefault(entry.version, {})[name] = entry
                if not page.is_truncated or not page.versions:
                    break
                key_marker, id_marker = page.next_key_marker or "", page.next_version_id_marker or ""
        for version, where in held.items():
            source = next((n for n in where if n in sources), None)
            if source is None:
                continue
            entry = where[source]
            for node in (t for t in targets if t not in where):
                if entry.delete_marker:
                    await self._mark(bucket, key, node, version, entry.version_id == version)
                else:
                    await self._copy(bucket, key, source, node, entry.version_id)
                self.repaired["hint"] += 1
        return True

    async def _bring(self, bucket: str, key: str, stale: ReplicaState, best: ReplicaState) -> bool:
        if stale.bucket_missing:
            info = await self.cluster.client_for(best.node).head_bucket(bucket)
            if not await self.ensure_bucket(stale.node, bucket, info.options):
                return False
        if best.deleted:
            await self._mark(bucket, key, stale.node, best.version, best.versioned)
            return True
        await self._copy(bucket, key, best.node, stale.node)
        return True

    async def resolve_void(self, bucket: str, key: str, void: str) -> bool:
        """Undo the write (or delete) of version ``void``, answered 5xx, where it landed: every
        replica that holds it gets back what the key held before it, as version ``void + "-"``,
        which sorts right above ``void`` and below every other version (the origin alphabet's
        smallest character, and no gateway's id is another's with "-" after it), so it can
        replace nothing but the failed write. True when that is done, or nothing is to undo.

        Needs every storage node (the value before it may be on any): False until they answer.
        Nothing to undo when no node holds ``void`` (it never landed, or was undone), or a later
        write superseded it somewhere (repair brings the rest up to that), or every copy holds it
        and nothing older is left to go back to (it stands, the same everywhere)."""
        names = [n.name for n in self.cluster.nodes.storage_nodes()]
        states = await self.states(bucket, key, names)
        if len(states) < len(names):
            return False
        holders = [s for s in states.values() if s.version == void]
        if not holders:
            return True
        if any(s.version > void for s in states.values()):
            return await self.repair(bucket, key, via="void")
        replicas = set(await self.cluster.replica_names(bucket, key))
        # What the key held before: a replica's answer, or any node's older copy (a node outside
        # the replica set that lacks the key says nothing about it).
        before = newest([s for s in states.values() if s.version < void and (s.node in replicas or s.version)])
        if before is None:
            return True
        restored = void + "-"
        targets = sorted(replicas | {s.node for s in holders})
        for node in targets:
            if before.deleted:  # it had no value (never written, or deleted): a tombstone above the failed write
                await self._mark(bucket, key, node, restored, False)
            else:
                await self._copy(bucket, key, before.node, node, as_version=restored)
            self.repaired["void"] += 1
        log.warning("undid the failed write %s of s3://%s/%s on %s: the key holds what it held before (%s)", void, bucket,
                    ascii(key), ", ".join(s.node for s in holders), before.version or "nothing")
        return True

    async def _mark(self, bucket: str, key: str, node: str, version: str, versioned: bool) -> None:
        """A tombstone (or a delete marker) of ``version`` on ``node``."""
        await self.cluster.client_for(node).delete_object(bucket, key, version=version, **({"versioned": True} if versioned else {}))

    async def _copy(self, bucket: str, key: str, source_node: str, target_node: str, version_id: str | None = None,
                    as_version: str | None = None) -> None:
        """Copy the key's current object (or the version named) from one node to another, as it is
        (``as_version``: as a write of that version, undoing a failed one: resolve_void)."""
        stream = await self.cluster.client_for(source_node).get_object(bucket, key, **({"version_id": version_id} if version_id else {}))
        source = stream.info  # may be newer than the HEAD said: copy what is read, with its version
        version = as_version or source.version
        try:
            await self.cluster.client_for(target_node).put_object(
                bucket, key, with_trailer(stream.body, version), content_type=source.content_type,
                metadata=source.metadata, version_trailer=len(version), copy_of=source,
                headers=source.headers,  # Cache-Control ... and the checksums, as they are
                **({"versioned": True} if source.version_id == source.version else {}))
        finally:
            aclose = getattr(stream.body, "aclose", None)
            if aclose is not None:
                await aclose()

    async def sync_versions(self, bucket: str, names: list[str]) -> int:
        """Anti-entropy for a bucket with versioning: copy every noncurrent version and delete
        marker that some node holds to the replicas of its key that lack it (each node files it by
        its version: node/versions.py). Returns how many copies were made."""
        held: dict[tuple[str, str], dict[str, object]] = {}
        for name in names:
            client, key_marker, id_marker = self.cluster.client_for(name), "", ""
            while True:
                page = await client.list_object_versions(bucket, max_keys=1000, key_marker=key_marker, version_id_marker=id_marker)
                for entry in page.versions:
                    held.setdefault((entry.key, entry.version), {})[name] = entry
                if not page.is_truncated or not page.versions:
                    break
                key_marker, id_marker = page.next_key_marker or "", page.next_version_id_marker or ""
        copies = 0
        for (key, version), where in held.items():
            missing = [n for n in await self.cluster.replica_names(bucket, key) if n not in where]
            source, entry = next(iter(where.items()))
            for node in missing:
                try:
                    if entry.delete_marker:
                        await self._mark(bucket, key, node, version, entry.version_id == version)
                    else:
                        await self._copy(bucket, key, source, node, entry.version_id)
                    copies += 1
                except S3Error as exc:
                    log.warning("copying version %s of s3://%s/%s to %s failed: %r", version, bucket, ascii(key), node, exc)
        self.repaired["anti_entropy"] += copies
        return copies

    async def ensure_bucket(self, node: str, bucket: str, options: dict) -> bool:
        await self.cluster.client_for(node).create_bucket(bucket, options or None)
        return True
