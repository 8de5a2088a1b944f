"""The cluster's S3 endpoint: one StorageBackend over every storage node.

Writes go to the object's replica set (rendezvous hashing) at once, streamed to all replicas in
parallel; a write is acknowledged once every reachable replica has made it durable (and at
least one has). Reads go to the first replica that has the object. Listings merge every node's
sorted listing. The gateway never buffers an object body.

Multipart uploads live on the object's replicas, under one upload id the gateway picks. Each
node expires an upload it still holds after its expiry age (node/multipart.py); the replicas
created it at the same moment, but each sweeps on its own clock, so for up to one sweep interval
one replica may have dropped an upload the other still has. Every multipart call therefore
counts a replica's NoSuchUpload as "this replica missed the upload" when another replica
succeeded (a degraded write, logged), exactly as for a replica that was down when the upload
was created: a completion still valid on one replica succeeds there, and one that no replica
can honour fails with NoSuchUpload. ListMultipartUploads merges every node's listing; an upload
held by several replicas appears once, with its earliest initiation time.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from nearfaas.gateway.nodes import HEALTH_INTERVAL_S, Node, NodeDirectory
from nearfaas.gateway.replicas import replicas_for
from nearfaas.s3.backend import BucketInfo, ListResult, ObjectInfo, ObjectStream, StorageBackend, UploadInfo, UploadListResult
from nearfaas.s3.errors import S3Error

log = logging.getLogger("nearfaas.gateway.s3")

# The gateway's own routes live under these path prefixes, so no bucket may take their names.
RESERVED_BUCKETS = {"system", "function", "async-function", "healthz", "metrics", "_nearfaas"}
_TEE_DEPTH = 8  # chunks buffered per replica: bounds gateway memory per upload
_DOWN_CHECK_S = HEALTH_INTERVAL_S / 2  # how often a slow node call looks at the node's health
_PATIENCE_S = 1.0  # how long a call waits on a node the poll calls down before giving up on it


class _Tee:
    """Feeds one async byte stream to several consumers; a consumer that fails is dropped."""

    def __init__(self, source: AsyncIterator[bytes], n: int):
        self.source = source
        self.queues = [asyncio.Queue(maxsize=_TEE_DEPTH) for _ in range(n)]
        self.dead = [False] * n
        self.error: BaseException | None = None

    async def pump(self) -> None:
        try:
            async for chunk in self.source:
                for i, q in enumerate(self.queues):
                    if not self.dead[i]:
                        await q.put(chunk)
        except BaseException as exc:  # the client's body broke off: every replica must abort
            self.error = exc
        for i, q in enumerate(self.queues):
            if not self.dead[i]:
                await q.put(None)

    async def stream(self, i: int) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.queues[i].get()
            if chunk is None:
                if self.error is not None:
                    raise self.error
                return
            yield chunk

    def drop(self, i: int) -> None:
        self.dead[i] = True
        q = self.queues[i]
        while not q.empty():  # unblock a pump waiting on this queue
            q.get_nowait()


def _unavailable(exc: BaseException) -> bool:
    return isinstance(exc, S3Error) and exc.code == "ServiceUnavailable"


def _settle(targets: list[str], results: list, missed, what: str) -> list:
    """The successes of a call made on every replica. A replica whose error satisfies ``missed``
    is skipped (logged) when another one succeeded; any other error, or every replica failing,
    raises the most telling error: a real one, then "unavailable", then a missed upload."""
    ok = [r for r in results if not isinstance(r, BaseException)]
    failed = [(n, r) for n, r in zip(targets, results, strict=True) if isinstance(r, BaseException)]
    if not ok:
        failed.sort(key=lambda f: 0 if not missed(f[1]) else 1 if _unavailable(f[1]) else 2)
    for name, exc in failed:
        if not ok or not missed(exc):
            raise exc if isinstance(exc, S3Error) else S3Error("InternalError", f"replica {name} failed: {exc!r}")
        log.warning("degraded %s: replica %s missed it (%s); done by %d other(s)", what, name, exc, len(ok))
    return ok


def _missed_upload(exc: BaseException) -> bool:
    """A replica that was down when a multipart upload was created (or a part was sent) answers
    NoSuchUpload (or InvalidPart) once it is back; like a replica that is down, it just misses
    this object. Only where another replica succeeded: if every one fails, the error is real."""
    return _unavailable(exc) or (isinstance(exc, S3Error) and exc.code in ("NoSuchUpload", "InvalidPart"))


def _down(node: Node) -> bool:
    """Known to be down: it answered a health poll once and has failed one since (a node never
    yet seen, whose first poll raced its start, is not judged)."""
    return not node.healthy and node.last_seen > 0


async def _unless_down(node: Node, call: Awaitable):
    """Await a call to storage node ``node``, abandoning it (ServiceUnavailable) once it has
    waited ``_PATIENCE_S`` while the health poll says the node is down: a node that hangs
    (SIGSTOP, a stuck disk) costs a request about the health-check bound (1.5 s), not a socket
    timeout of minutes. A node that is merely slow to answer one poll (load) still serves every
    call that it answers within the patience, so one slow poll does not make writes degraded."""
    task = asyncio.ensure_future(call)
    started = asyncio.get_running_loop().time()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_DOWN_CHECK_S)
            if done:
                return task.result()
            if _down(node) and asyncio.get_running_loop().time() - started >= _PATIENCE_S:
                raise S3Error("ServiceUnavailable", f"storage node {node.name} is not answering its health checks "
                              f"({node.last_error or 'no answer'}); this call waited {_PATIENCE_S:g}s for it")
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class _HealthBound:
    """A node's StorageBackend client whose every call is bounded by the node's health."""

    def __init__(self, client: StorageBackend, node: Node):
        self._client, self._node = client, node

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args, **kwargs):
            return await _unless_down(self._node, attr(*args, **kwargs))

        return call


class ClusterBackend:
    def __init__(self, nodes: NodeDirectory, client_for: Callable[[str], StorageBackend], replication: int, dscs_replica: bool):
        self.nodes = nodes
        self._client_for = client_for
        self.replication = replication
        self.dscs_replica = dscs_replica
        self._bucket_options: dict[str, dict] = {}

    def client_for(self, name: str) -> _HealthBound:
        return _HealthBound(self._client_for(name), self.nodes.nodes[name])

    # -- placement ---------------------------------------------------------------------------------
    async def _wants_dscs(self, bucket: str, options: dict | None = None) -> bool:
        if options and "dscs_replica" in options:
            return bool(options["dscs_replica"])
        if bucket not in self._bucket_options:
            self._bucket_options[bucket] = (await self.head_bucket(bucket)).options
        return self.dscs_replica or bool(self._bucket_options[bucket].get("dscs_replica"))

    async def replica_names(self, bucket: str, key: str, options: dict | None = None) -> list[str]:
        ring = self.nodes.storage_ring()
        return [n.name for n in replicas_for(ring, bucket, key, self.replication, await self._wants_dscs(bucket, options))]

    def _read_order(self, preferred: list[str]) -> list[str]:
        """The replica set first (healthy ones first), then every other storage node: an object
        written while one of its replicas was down, or with another replica option, is still found.

        Known gap: after a degraded *overwrite* the replica that was down still holds the old
        version, and nothing repairs it, so a read that lands there returns stale data."""
        others = [n.name for n in self.nodes.storage_nodes() if n.name not in preferred]
        healthy = {n.name for n in self.nodes.storage_nodes(healthy_only=True)}
        return sorted(preferred, key=lambda n: n not in healthy) + others

    # -- writes fanned out to replicas -------------------------------------------------------------
    async def _fan_out(self, targets: list[str], body: AsyncIterator[bytes], write, missed=_unavailable) -> list:
        """Run ``write(client, stream)`` on every target with a tee of ``body``; returns successes.

        A replica whose error satisfies ``missed`` is skipped (a degraded write) when another succeeded."""
        tee = _Tee(body, len(targets))

        async def one(i: int, name: str):
            try:
                return await write(self.client_for(name), tee.stream(i))
            except BaseException:
                tee.drop(i)
                raise

        pump = asyncio.ensure_future(tee.pump())
        results = await asyncio.gather(*(one(i, n) for i, n in enumerate(targets)), return_exceptions=True)
        await pump
        return _settle(targets, results, missed, "write")

    async def put_object(self, bucket, key, body, *, content_md5=None, content_type=None, metadata=None, options=None) -> ObjectInfo:
        targets = await self.replica_names(bucket, key, options)
        results = await self._fan_out(targets, body, lambda c, s: c.put_object(
            bucket, key, s, content_md5=content_md5, content_type=content_type, metadata=metadata))
        return results[0]

    async def create_multipart_upload(self, bucket, key, *, content_type=None, metadata=None, upload_id=None) -> str:
        upload_id = upload_id or uuid.uuid4().hex
        targets = await self.replica_names(bucket, key)
        results = await asyncio.gather(*(self.client_for(n).create_multipart_upload(
            bucket, key, content_type=content_type, metadata=metadata, upload_id=upload_id) for n in targets), return_exceptions=True)
        self._check(targets, results)
        return upload_id

    async def upload_part(self, bucket, key, upload_id, part_number, body, *, content_md5=None) -> str:
        targets = await self.replica_names(bucket, key)
        results = await self._fan_out(targets, body, lambda c, s: c.upload_part(bucket, key, upload_id, part_number, s, content_md5=content_md5),
                                      missed=_missed_upload)
        return results[0]

    async def complete_multipart_upload(self, bucket, key, upload_id, parts) -> ObjectInfo:
        targets = await self.replica_names(bucket, key)
        results = await asyncio.gather(*(self.client_for(n).complete_multipart_upload(bucket, key, upload_id, parts) for n in targets),
                                       return_exceptions=True)
        info = self._check(targets, results, missed=_missed_upload)[0]
        # A replica that missed a part keeps its half of the upload: drop it (best effort).
        stale = [n for n, r in zip(targets, results, strict=True) if isinstance(r, S3Error) and r.code == "InvalidPart"]
        await asyncio.gather(*(self.client_for(n).abort_multipart_upload(bucket, key, upload_id) for n in stale), return_exceptions=True)
        return info

    async def abort_multipart_upload(self, bucket, key, upload_id) -> None:
        targets = await self.replica_names(bucket, key)
        results = await asyncio.gather(*(self.client_for(n).abort_multipart_upload(bucket, key, upload_id) for n in targets),
                                       return_exceptions=True)
        self._check(targets, results, missed=_missed_upload)

    def _check(self, targets, results, missed=_unavailable) -> list:
        return _settle(targets, results, missed, "multipart call")

    # -- reads -------------------------------------------------------------------------------------
    async def _first(self, bucket: str, key: str, op):
        order = self._read_order(await self.replica_names(bucket, key))
        missing = None
        for name in order:
            try:
                return await op(self.client_for(name))
            except S3Error as exc:
                if exc.code == "NoSuchKey":
                    missing = exc
                elif not _unavailable(exc):
                    raise
        if missing is not None:
            raise missing
        raise S3Error("ServiceUnavailable", f"no storage node holding s3://{bucket}/{key} is reachable; retry shortly")

    async def get_object(self, bucket, key, byte_range=None) -> ObjectStream:
        return await self._first(bucket, key, lambda c: c.get_object(bucket, key, byte_range))

    async def head_object(self, bucket, key) -> ObjectInfo:
        return await self._first(bucket, key, lambda c: c.head_object(bucket, key))

    async def delete_object(self, bucket, key) -> None:
        """Delete on every storage node (a copy may sit on any). A node's refusal (an invalid key,
        AccessDenied, its own failure) is the answer, so that DeleteObjects reports the key as
        an error, never as deleted; a node that is down is skipped, as in a degraded write
        (logged), unless every node is."""
        names = [n.name for n in self.nodes.storage_nodes()]
        results = await asyncio.gather(*(self.client_for(n).delete_object(bucket, key) for n in names), return_exceptions=True)
        failed = [(n, r) for n, r in zip(names, results, strict=True) if isinstance(r, BaseException)]
        refused = [(n, r) for n, r in failed if not _unavailable(r)]
        if refused:
            refused.sort(key=lambda f: not (isinstance(f[1], S3Error) and f[1].code == "NoSuchBucket"))
            name, exc = refused[0]
            raise exc if isinstance(exc, S3Error) else S3Error(
                "InternalError", f"storage node {name} failed to delete the key: {exc!r}")
        if failed and len(failed) == len(names):
            raise S3Error("ServiceUnavailable", "no storage node is reachable")
        if failed:
            log.warning("degraded delete of s3://%s/%s: node(s) %s unreachable", bucket, ascii(key),
                        ", ".join(n for n, _ in failed))

    async def _every_healthy_node(self, op, kind) -> list:
        """``op(client)`` on every healthy storage node: the answers of type ``kind``. A node's
        error is raised unless it is merely unreachable (its entries are then missing)."""
        names = [n.name for n in self.nodes.storage_nodes(healthy_only=True)]
        if not names:
            raise S3Error("ServiceUnavailable", "no storage node is reachable")
        pages = await asyncio.gather(*(op(self.client_for(n)) for n in names), return_exceptions=True)
        for name, p in zip(names, pages, strict=True):
            if isinstance(p, S3Error) and not _unavailable(p):
                raise p
            if isinstance(p, BaseException) and not isinstance(p, S3Error):
                log.warning("listing on storage node %s failed, its entries are missing: %r", name, p)
        good = [p for p in pages if isinstance(p, kind)]
        if not good:
            raise S3Error("ServiceUnavailable", "no storage node answered the listing")
        return good

    async def list_objects(self, bucket, prefix="", delimiter="", max_keys=1000, start_after="") -> ListResult:
        good = await self._every_healthy_node(
            lambda c: c.list_objects(bucket, prefix, delimiter, max_keys, start_after), ListResult)
        # Each node returns its first max_keys entries after the marker; the merged first max_keys
        # are therefore exact. Duplicates are replicas of the same object.
        entries: dict[str, ObjectInfo | None] = {}
        for page in good:
            for info in page.contents:
                entries.setdefault(info.key, info)
            for cp in page.common_prefixes:
                entries.setdefault(cp, None)
        ordered = sorted(entries)
        chosen = ordered[:max_keys]
        truncated = len(ordered) > max_keys or any(p.is_truncated for p in good)
        return ListResult(
            contents=[entries[k] for k in chosen if entries[k] is not None],
            common_prefixes=[k for k in chosen if entries[k] is None],
            is_truncated=truncated,
            next_marker=chosen[-1] if truncated and chosen else None,
        )

    async def list_multipart_uploads(self, bucket, prefix="", delimiter="", max_uploads=1000, key_marker="",
                                     upload_id_marker="") -> UploadListResult:
        good = await self._every_healthy_node(lambda c: c.list_multipart_uploads(
            bucket, prefix, delimiter, max_uploads, key_marker, upload_id_marker), UploadListResult)
        # As for objects: each node's first max_uploads entries in (key, upload id) order make
        # the merged first max_uploads exact. Replicas of one upload share its id: shown once.
        entries: dict[tuple[str, str], UploadInfo | None] = {}
        for page in good:
            for upload in page.uploads:
                seen = entries.get((upload.key, upload.upload_id))
                if seen is None or upload.initiated < seen.initiated:
                    entries[(upload.key, upload.upload_id)] = upload
            for cp in page.common_prefixes:
                entries.setdefault((cp, ""), None)
        ordered = sorted(entries)
        chosen = ordered[:max_uploads]
        truncated = len(ordered) > max_uploads or any(p.is_truncated for p in good)
        last = chosen[-1] if truncated and chosen else None
        return UploadListResult(
            uploads=[entries[e] for e in chosen if entries[e] is not None],
            common_prefixes=[e[0] for e in chosen if entries[e] is None],
            is_truncated=truncated,
            next_key_marker=last[0] if last else None,
            next_upload_id_marker=last[1] if last else None,
        )

    # -- buckets -----------------------------------------------------------------------------------
    async def _all_nodes(self, op) -> list:
        names = [n.name for n in self.nodes.storage_nodes()]
        results = await asyncio.gather(*(op(self.client_for(n)) for n in names), return_exceptions=True)
        for name, r in zip(names, results, strict=True):
            if isinstance(r, BaseException):
                raise r if isinstance(r, S3Error) else S3Error("InternalError", f"node {name} failed: {r!r}")
        return results

    async def list_buckets(self) -> list[BucketInfo]:
        names = [n.name for n in self.nodes.storage_nodes(healthy_only=True)] or [n.name for n in self.nodes.storage_nodes()]
        results = await asyncio.gather(*(self.client_for(n).list_buckets() for n in names), return_exceptions=True)
        merged: dict[str, BucketInfo] = {}
        for r in results:
            if isinstance(r, list):
                for b in r:
                    merged.setdefault(b.name, b)
        if not merged and all(isinstance(r, BaseException) for r in results):
            raise S3Error("ServiceUnavailable", "no storage node is reachable")
        return sorted(merged.values(), key=lambda b: b.name)

    async def create_bucket(self, name, options=None) -> BucketInfo:
        if name in RESERVED_BUCKETS:
            raise S3Error("InvalidBucketName", f"bucket name {name!r} is reserved by the gateway's API; choose another name")
        results = await self._all_nodes(lambda c: c.create_bucket(name, options))
        self._bucket_options.pop(name, None)
        return results[0]

    async def head_bucket(self, name) -> BucketInfo:
        last = None
        for node in self._read_order([]):
            try:
                return await self.client_for(node).head_bucket(name)
            except S3Error as exc:
                if not _unavailable(exc):
                    raise
                last = exc
        raise last or S3Error("ServiceUnavailable", "no storage node is reachable")

    async def delete_bucket(self, name) -> None:
        if (await self.list_objects(name, max_keys=1)).contents:
            raise S3Error("BucketNotEmpty", resource=name)
        await self._all_nodes(lambda c: c.delete_bucket(name))
        self._bucket_options.pop(name, None)
