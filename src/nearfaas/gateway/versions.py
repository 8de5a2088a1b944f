"""S3 bucket versioning across the cluster: the gateway half (mixed into ClusterBackend).

The versioning status is a bucket option that every storage node records
(``put_bucket_versioning`` needs every node: one that missed it would keep writes the others
version). The gateway stamps each write and delete as before (replication/version.py) and tells
the replicas whether it was made while versioning was Enabled; each node then keeps the key's
entries by one order-independent rule (node/versions.py), so replicas that got the same writes
hold the same versions. A version id is the write's version: no second id to agree on.

Fallback ladder for a read that names a version: the key's replicas in read order (healthy
first), then every other storage node; a node that lacks that version (it missed the write, or
cannot be reached) passes to the next; NoSuchVersion only when no reachable node has it. A
delete marker answers 405 at once, as S3 does.

A delete that names a version removes it for good from every storage node and needs every one
of them (503 otherwise: retry; it is idempotent). Until then the node that missed it still holds
the version, and a repair copying it back elsewhere is refused there: each node remembers what
it deleted for good.

Worked example: PUT k (Enabled) -> v1, PUT k -> v2, DELETE k -> marker v3 on both replicas.
GET k: 404 with ``x-amz-delete-marker: true``; GET k?versionId=v1: the first replica's v1.
DELETE k?versionId=v3: both replicas drop the marker and promote v2: GET k answers v2 again.

Known caveats:
- The status is cached per bucket in the gateway (there is one gateway); a node added to the
  cluster later does not learn it from anti-entropy yet.
- ListObjectVersions asks every healthy node for a page and merges them; a node that is down
  leaves its versions out (as for ListObjects).
"""

from __future__ import annotations

import asyncio
import functools

from nearfaas.s3.backend import DeleteResult, ObjectInfo, ObjectStream, VersionEntry, VersionListResult
from nearfaas.s3.errors import S3Error
from nearfaas.gateway.replica_calls import unavailable

_PASS_ON = ("NoSuchVersion", "NoSuchKey", "ServiceUnavailable", "SlowDown")


class ClusterVersions:
    """Needs the ClusterBackend's ``_bucket_options``, ``head_bucket``, ``_all_nodes``,
    ``replica_names``, ``_read_order``, ``client_for``, ``clock``, ``nodes`` and
    ``_every_healthy_node``."""

    async def versioning_status(self, bucket: str) -> str:
        """"Enabled", "Suspended" or "" (never configured); cached, as the placement options are."""
        if bucket not in self._bucket_options:
            self._bucket_options[bucket] = (await self.head_bucket(bucket)).options
        return str(self._bucket_options[bucket].get("versioning", ""))

    async def get_bucket_versioning(self, bucket: str) -> str:
        return str((await self.head_bucket(bucket)).options.get("versioning", ""))

    async def put_bucket_versioning(self, bucket: str, status: str) -> None:
        await self._set_option_everywhere(bucket, "versioning", lambda c: c.put_bucket_versioning(bucket, status))

    async def put_bucket_policy(self, bucket: str, text: str | None) -> None:
        """A bucket's policy (None: none), on every storage node as its versioning is (its owner
        is set when it is made): auth/bucket_policy.py decides requests with both."""
        await self._set_option_everywhere(bucket, "policy", lambda c: c.put_bucket_policy(bucket, text))

    async def _set_option_everywhere(self, bucket: str, what: str, call) -> None:
        """``call(client)`` on every storage node (one that missed a bucket option would act on
        the old one), and the cached options dropped either way."""
        try:
            await self._all_nodes(call)
        except S3Error as exc:
            if not unavailable(exc):
                raise
            raise S3Error("ServiceUnavailable", f"Changing a bucket's {what} needs every storage node, and one cannot be "
                          f"reached ({exc.message}); retry once it is back.") from None
        finally:
            self._bucket_options.pop(bucket, None)

    async def _versioned(self, bucket: str) -> dict:
        """The keyword a write passes its replicas: made while versioning was Enabled."""
        return {"versioned": True} if await self.versioning_status(bucket) == "Enabled" else {}

    async def _from_version_holder(self, bucket: str, key: str, fetch):
        """``fetch(client)`` from the first node that holds the version (see the ladder above)."""
        last: S3Error | None = None
        for name in self._read_order(await self.replica_names(bucket, key)):
            try:
                return await fetch(self.client_for(name))
            except S3Error as exc:
                if exc.code not in _PASS_ON:
                    raise
                if last is None or last.code != "NoSuchVersion":
                    last = exc
            except (OSError, TimeoutError):
                continue
        if last is not None and last.code in ("NoSuchKey", "NoSuchVersion"):
            raise S3Error("NoSuchVersion", last.message, resource=key)
        raise last or S3Error("ServiceUnavailable", "no storage node is reachable")

    async def get_version(self, bucket: str, key: str, byte_range, version_id: str) -> ObjectStream:
        return await self._from_version_holder(bucket, key, lambda c: c.get_object(bucket, key, byte_range, version_id=version_id))

    async def head_version(self, bucket: str, key: str, version_id: str) -> ObjectInfo:
        return await self._from_version_holder(bucket, key, lambda c: c.head_object(bucket, key, version_id=version_id))

    async def delete_version(self, bucket: str, key: str, version_id: str) -> DeleteResult:
        """Remove one version for good, on every storage node (a copy may sit on any)."""
        stamp = self.clock.now()  # bounds which "null" version goes: the one written before now
        names = [n.name for n in self.nodes.storage_nodes()]
        results = await asyncio.gather(*(self.client_for(n).delete_object(bucket, key, version=stamp, version_id=version_id)
                                         for n in names), return_exceptions=True)
        for name, r in zip(names, results, strict=True):
            if isinstance(r, S3Error) and not unavailable(r):
                raise r
            if isinstance(r, BaseException):
                raise S3Error("ServiceUnavailable", f"Deleting a version for good needs every storage node, and {name} "
                              "did not answer; retry (the delete is idempotent).")
        marker = any(isinstance(r, DeleteResult) and r.delete_marker for r in results)
        return DeleteResult(version_id=version_id, delete_marker=marker)

    async def list_object_versions(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                                   key_marker: str = "", version_id_marker: str = "") -> VersionListResult:
        good = await self._every_healthy_node(lambda c: c.list_object_versions(
            bucket, prefix, delimiter, max_keys, key_marker, version_id_marker), VersionListResult)
        # Each node answers its first max_keys entries after the marker in one total order
        # (key, newest version first); the merged first max_keys are therefore exact. Replicas
        # of one version share its version: shown once.
        entries: dict[tuple[str, str], VersionEntry | None] = {}
        latest: dict[str, str] = {}  # key -> newest version some node calls its latest
        for page in good:
            for e in page.versions:
                entries.setdefault((e.key, e.version), e)
                if e.is_latest:
                    latest[e.key] = max(latest.get(e.key, ""), e.version)
            for cp in page.common_prefixes:
                entries.setdefault((cp, ""), None)
        ordered = sorted(entries, key=functools.cmp_to_key(_listing_order))
        newest = {}
        for key, version in ordered:
            newest.setdefault(key, version)
        chosen = ordered[:max_keys]
        truncated = len(ordered) > max_keys or any(p.is_truncated for p in good)
        out = []
        for key, version in chosen:
            e = entries[(key, version)]
            if e is not None:
                is_latest = latest.get(key) == version and newest[key] == version
                out.append(VersionEntry(e.key, e.version_id, is_latest, e.last_modified, e.delete_marker, e.info, e.version))
        last = chosen[-1] if truncated and chosen else None
        last_entry = entries[last] if last is not None else None
        return VersionListResult(
            versions=out, common_prefixes=[k for k, v in chosen if entries[(k, v)] is None], is_truncated=truncated,
            next_key_marker=last[0] if last else None,
            next_version_id_marker=(last_entry.version_id if last_entry is not None else "") if last else None)


def _listing_order(a: tuple[str, str], b: tuple[str, str]) -> int:
    """Keys ascending; within a key, the newest version first."""
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    return (a[1] < b[1]) - (a[1] > b[1])
