"""The cluster's S3 endpoint: one StorageBackend over every storage node, behaving as one store.

Writes go to the object's replica set (rendezvous hashing) at once, streamed to all replicas in
parallel. Each write and delete carries a version (replication/version.py) that the gateway
stamps when the client's body has ended (a PUT: it travels as the body's last bytes) or when the
request arrives (DELETE, CompleteMultipartUpload); every replica keeps the newest version of a
key (a delete leaves a tombstone), so replicas converge whatever order writes reach them in.
A write is acknowledged once every reachable replica has made it durable (at least one must),
and only after every older write of the same key (replication/ordering.py): the last write
acknowledged is the one that stands. A replica that missed it (down, or hung past the patience
below) is owed it: a hint is made durable before the answer (replication/hints.py) and replayed
when the node is back; anti-entropy (replication/antientropy.py) repairs whatever else differs.

Reads ask every replica for its version at once (a GET on the first healthy replica, a HEAD on
the others) and answer from the newest one; a replica found behind is repaired in the
background (read-repair). A read never answers older than a version some replica is owed (a
pending hint): if only older replicas are reachable it answers 503, never stale data.
Listings merge every node's sorted listing. The gateway never buffers an object body.

Fallback ladder for a call to one node: answered -> waited ``_PATIENCE_S`` (gateway/replica_calls.py) on a node the health
poll calls down (then given up: a degraded write with a hint, or the next replica for a read)
-> refused at once with 503 SlowDown + Retry-After when ``NODE_CALLS`` calls to that node are
already in flight and ``NODE_QUEUE`` more are waiting (overload is backpressure, never a
"node down" that would degrade writes).

Worked example: storage-1 is SIGSTOPped. PUT k: storage-0 commits k@v8 at once; the call to
storage-1 waits until the poll marks it down (<= 1.5 s) plus the patience (1 s), is given up,
a hint (storage-1, k, v8) is fsynced, the client gets 200. GET k: storage-0 answers v8 (the
HEAD on storage-1 is given up the same way, or skipped once the node is known down). SIGCONT:
the next poll sees storage-1, the hint replayer copies k@v8 to it within half a second.

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
import logging
import uuid
from collections.abc import Callable

from nearfaas.gateway.copy_in_place import copy_in_place
from nearfaas.gateway.nodes import NodeDirectory
from nearfaas.gateway.replica_calls import Gate, HealthBound, Tee, close_answer, is_down, missed_upload, missed_write, settle, unavailable
from nearfaas.placement.replicas import RENDEZVOUS, Scheme, replicas_for
from nearfaas.replication.hints import HintLog
from nearfaas.replication.ordering import AckOrder
from nearfaas.replication.repair import Repairer, newest, state_from
from nearfaas.replication.version import HybridClock
from nearfaas.gateway.versions import ClusterVersions
from nearfaas.gateway.write_conditions import WriteConditions
from nearfaas.s3.conditions import WriteCondition
from nearfaas.s3.versions import DELETED_HEADER
from nearfaas.s3.backend import (BucketInfo, DeleteResult, ListResult, ObjectInfo, ObjectStream, SelectResult, StorageBackend, UploadInfo,
                                 UploadListResult)
from nearfaas.s3.errors import S3Error

log = logging.getLogger("nearfaas.gateway.s3")

# The gateway's own routes live under these path prefixes, so no bucket may take their names.
RESERVED_BUCKETS = {"system", "function", "async-function", "healthz", "metrics", "_nearfaas"}
def _predicted(pred) -> dict:
    return {"X-Nearfaas-Predicted": pred.header()} if pred is not None else {}


class ClusterBackend(ClusterVersions):  # bucket versioning: gateway/versions.py
    # Conditional writes (s3/conditions.py) are checked and stamped as one step here: every write
    # of the cluster goes through this one gateway (gateway/write_conditions.py).
    atomic_conditions = True

    def __init__(self, nodes: NodeDirectory, client_for: Callable[[str], StorageBackend], replication: int, dscs_replica: bool,
                 *, hints: HintLog | None = None, scheme: Scheme = RENDEZVOUS, clock: HybridClock | None = None):
        self.nodes = nodes
        self.scheme = scheme
        self._client_for = client_for
        self.replication = replication
        self.dscs_replica = dscs_replica
        self._bucket_options: dict[str, dict] = {}
        self._creating: dict[str, asyncio.Lock] = {}  # bucket names being created (create_bucket)
        self._gates: dict[str, Gate] = {}
        self.clock = clock or HybridClock("gw")  # the gateway's persists its ceiling (replication/version.py)
        # Every storage node's high-water mark, as its health answers say it: stamps go past them.
        nodes.on_poll.append(lambda node: self.clock.observe(node.status.get("clock") or "") if node.healthy else None)
        self.order = AckOrder()
        self.conditions = WriteConditions(self.order, self.head_object)  # gateway/write_conditions.py
        self.hints = hints if hints is not None else HintLog(None)
        self.replaced = None  # storage nodes on a replaced disk, not refilled yet (replication/replaced.py)
        self.repairer = Repairer(self)
        self.stale_reads_refused = 0  # reads answered 503 because only replicas behind a hint were reachable
        self.planner = None  # where S3 Selects run (gateway/select_planner.py); None: always offload

    def client_for(self, name: str) -> HealthBound:
        gate = self._gates.get(name) or self._gates.setdefault(name, Gate(name))
        return HealthBound(self._client_for(name), self.nodes.nodes[name], gate,
                           owes_bucket=lambda bucket: self.hints.owes_bucket(name, bucket))

    def slowdowns(self) -> dict[str, int]:
        return {name: gate.refused for name, gate in self._gates.items()}

    # -- placement ---------------------------------------------------------------------------------
    async def _wants_dscs(self, bucket: str, options: dict | None = None) -> bool:
        if options and "dscs_replica" in options:
            return bool(options["dscs_replica"])
        if bucket not in self._bucket_options:
            self._bucket_options[bucket] = (await self.head_bucket(bucket)).options
        return self.dscs_replica or bool(self._bucket_options[bucket].get("dscs_replica"))

    async def replica_names(self, bucket: str, key: str, options: dict | None = None) -> list[str]:
        ring = self.nodes.storage_ring()
        return [n.name for n in replicas_for(ring, bucket, key, self.replication, await self._wants_dscs(bucket, options),
                                                 self.scheme)]

    def _read_order(self, preferred: list[str]) -> list[str]:
        """The replica set first (healthy ones first), then every other storage node: an object
        written with another replica option, or before the ring changed, is still found."""
        others = [n.name for n in self.nodes.storage_nodes() if n.name not in preferred]
        healthy = {n.name for n in self.nodes.storage_nodes(healthy_only=True)}
        return sorted(preferred, key=lambda n: n not in healthy) + others

    # -- writes fanned out to replicas -------------------------------------------------------------
    async def _ordered(self, bucket: str, key: str, version_box: list, targets: list[str], results: list, missed):
        """Settle a versioned write: hints for the replicas that missed it, then wait for older
        writes of the key to be acknowledged first. Returns the successes."""
        try:
            ok = settle(targets, results, missed, "write")
            if version_box:
                lagging = [n for n, r in zip(targets, results, strict=True) if isinstance(r, BaseException)]
                for name in lagging:  # durable before the client hears "done"
                    await self.hints.add(name, bucket, key, version_box[0])
                await self.order.settle(bucket, key, version_box[0])
            return ok
        finally:
            if version_box:
                self.order.end(bucket, key, version_box[0])

    def _stamp(self, bucket: str, key: str, box: list, seen: object = None) -> str:
        """A new version for a write of the key, registered for ordered acknowledgement. With
        ``seen`` (a conditional write's precheck), refused with 409 when another write of the key
        was stamped since its condition was checked (gateway/write_conditions.py)."""
        self.conditions.check_at_stamp(bucket, key, seen)
        version = self.clock.now()
        self.order.begin(bucket, key, version)
        box.append(version)
        self.conditions.stamped(bucket, key, version)
        return version

    async def put_object(self, bucket, key, body, *, content_md5=None, content_type=None, metadata=None, options=None,
                         condition: WriteCondition | None = None, headers=None) -> ObjectInfo:
        seen = await self.conditions.precheck(bucket, key, condition)
        targets = await self.replica_names(bucket, key, options)
        versioned = await self._versioned(bucket)
        box: list[str] = []  # the version, once the body has ended
        tee = Tee(body, len(targets), trailer=lambda: self._stamp(bucket, key, box, seen).encode("ascii"))

        async def one(i: int, name: str):
            try:
                return await self.client_for(name).put_object(
                    bucket, key, tee.stream(i), content_md5=content_md5, content_type=content_type, metadata=metadata,
                    version_trailer=self.clock.width, **({"headers": headers} if headers else {}), **versioned)
            except BaseException:
                tee.drop(i)
                raise

        pump = asyncio.ensure_future(tee.pump())
        try:
            results = await asyncio.gather(*(one(i, n) for i, n in enumerate(targets)), return_exceptions=True)
            await pump
        except BaseException:
            if box:
                self.order.end(bucket, key, box[0])
            raise
        if not box and isinstance(tee.error, S3Error):  # refused when stamped (a lost condition): nothing was written
            raise tee.error
        try:
            return (await self._ordered(bucket, key, box, targets, results, missed_write))[0]
        except S3Error as exc:
            await self._void_failed(bucket, key, box, exc)
            raise

    async def _void_failed(self, bucket: str, key: str, box: list, exc: S3Error) -> None:
        """A stamped write or delete answered 5xx may have landed on some replica: a void hint,
        fsynced before the answer, keeps every read from answering it and has repair put back
        what the key held before (Repairer.resolve_void), so it cannot replace, later, a value
        reads were given after it failed. Buckets that have had versioning keep such a write as
        S3 does (indeterminate: docs/replication.md)."""
        if box and exc.status >= 500 and await self.versioning_status(bucket) == "":
            try:
                await self.hints.void(bucket, key, box[0])
            except Exception as failed:  # the client gets the 5xx either way
                log.warning("could not record the failed write %s of s3://%s/%s: %r", box[0], bucket, ascii(key), failed)

    async def create_multipart_upload(self, bucket, key, *, content_type=None, metadata=None, upload_id=None, headers=None) -> str:
        upload_id = upload_id or uuid.uuid4().hex
        targets = await self.replica_names(bucket, key)
        results = await asyncio.gather(*(self.client_for(n).create_multipart_upload(
            bucket, key, content_type=content_type, metadata=metadata, upload_id=upload_id, **({"headers": headers} if headers else {}))
            for n in targets), return_exceptions=True)
        self._check(targets, results)
        return upload_id

    async def upload_part(self, bucket, key, upload_id, part_number, body, *, content_md5=None, headers=None) -> str:
        targets = await self.replica_names(bucket, key)
        tee = Tee(body, len(targets))

        async def one(i: int, name: str):
            try:
                return await self.client_for(name).upload_part(bucket, key, upload_id, part_number, tee.stream(i),
                                                               content_md5=content_md5, **({"headers": headers} if headers else {}))
            except BaseException:
                tee.drop(i)
                raise

        pump = asyncio.ensure_future(tee.pump())
        results = await asyncio.gather(*(one(i, n) for i, n in enumerate(targets)), return_exceptions=True)
        await pump
        return settle(targets, results, missed_upload, "write")[0]

    async def complete_multipart_upload(self, bucket, key, upload_id, parts, condition: WriteCondition | None = None,
                                        part_checksums: dict | None = None) -> ObjectInfo:
        done = self.conditions.completion(bucket, key, upload_id, parts)
        if done is not None:  # a client retrying a completion whose answer it lost: 200 again, same ETag
            return done
        info = await self._complete(bucket, key, upload_id, parts, condition, {"part_checksums": part_checksums} if part_checksums else {})
        self.conditions.completed(bucket, key, upload_id, parts, info)
        return info

    async def _complete(self, bucket, key, upload_id, parts, condition: WriteCondition | None, extra: dict) -> ObjectInfo:
        seen = await self.conditions.precheck(bucket, key, condition)
        targets = await self.replica_names(bucket, key)
        extra = {**extra, **await self._versioned(bucket)}
        box: list[str] = []
        version = self._stamp(bucket, key, box, seen)
        results = await asyncio.gather(*(self.client_for(n).complete_multipart_upload(bucket, key, upload_id, parts, version=version, **extra)
                                         for n in targets), return_exceptions=True)
        try:
            info = (await self._ordered(bucket, key, box, targets, results, missed_upload))[0]
        except S3Error as exc:
            await self._void_failed(bucket, key, box, exc)
            raise
        # A replica that missed a part keeps its half of the upload: drop it (best effort).
        stale = [n for n, r in zip(targets, results, strict=True) if isinstance(r, S3Error) and r.code == "InvalidPart"]
        await asyncio.gather(*(self.client_for(n).abort_multipart_upload(bucket, key, upload_id) for n in stale), return_exceptions=True)
        await self._owe_abort(bucket, key, upload_id, targets, results)
        return info

    async def _owe_abort(self, bucket, key, upload_id, targets, results) -> None:
        """A replica that was down while an upload ended still holds it and its parts (for 24 h,
        and listed by ListMultipartUploads): it is owed the abort, as a hint (issue 43)."""
        for node, result in zip(targets, results, strict=True):
            if isinstance(result, BaseException) and unavailable(result):
                await self.hints.add(node, bucket, key, upload=upload_id)

    async def list_parts(self, bucket, key, upload_id, max_parts=1000, part_number_marker=0):
        """From the first replica that holds the upload (every replica got every acknowledged part)."""
        last: BaseException | None = None
        for name in self._read_order(await self.replica_names(bucket, key)):
            try:
                return await self.client_for(name).list_parts(bucket, key, upload_id, max_parts, part_number_marker)
            except S3Error as exc:
                if exc.code not in ("NoSuchUpload", "ServiceUnavailable", "SlowDown"):
                    raise
                last = exc
            except (OSError, TimeoutError) as exc:
                last = exc
        raise last if isinstance(last, S3Error) else S3Error("NoSuchUpload", f"The upload {upload_id} does not exist.")

    async def abort_multipart_upload(self, bucket, key, upload_id) -> None:
        targets = await self.replica_names(bucket, key)
        results = await asyncio.gather(*(self.client_for(n).abort_multipart_upload(bucket, key, upload_id) for n in targets),
                                       return_exceptions=True)
        self._check(targets, results, missed=missed_upload)
        await self._owe_abort(bucket, key, upload_id, targets, results)

    def _check(self, targets, results, missed=unavailable) -> list:
        return settle(targets, results, missed, "multipart call")

    async def delete_object(self, bucket, key, condition: WriteCondition | None = None, *,
                            version_id: str | None = None) -> DeleteResult | None:
        """Delete on every storage node (a copy may sit on any), as a versioned tombstone (a
        delete marker where the bucket has versioning). A node's refusal (an invalid key,
        AccessDenied, its own failure) is the answer, so that DeleteObjects reports the key as an
        error, never as deleted; a node that is down is owed the delete (a hint), unless every
        node is down. ``version_id``: remove that one version for good (gateway/versions.py)."""
        if version_id is not None:
            return await self.delete_version(bucket, key, version_id)
        seen = await self.conditions.precheck(bucket, key, condition)
        names = [n.name for n in self.nodes.storage_nodes()]
        status = await self.versioning_status(bucket)
        versioned = {"versioned": True} if status == "Enabled" else {}
        box: list[str] = []
        version = self._stamp(bucket, key, box, seen)
        try:
            results = await asyncio.gather(*(self.client_for(n).delete_object(bucket, key, version=version, **versioned)
                                             for n in names), return_exceptions=True)
            refused = [(n, r) for n, r in zip(names, results, strict=True)
                       if isinstance(r, BaseException) and not missed_write(r)]
            if refused:
                refused.sort(key=lambda f: not (isinstance(f[1], S3Error) and f[1].code == "NoSuchBucket"))
                name, exc = refused[0]
                raise exc if isinstance(exc, S3Error) else S3Error(
                    "InternalError", f"storage node {name} failed to delete the key: {exc!r}")
        except BaseException as exc:
            self.order.end(bucket, key, version)
            if isinstance(exc, S3Error):
                await self._void_failed(bucket, key, box, exc)
            raise
        try:
            await self._ordered(bucket, key, box, names, results, missed_write)
        except S3Error as exc:
            await self._void_failed(bucket, key, box, exc)
            raise
        return DeleteResult(version_id=version if versioned else "null", delete_marker=True) if status else None

    # -- reads -------------------------------------------------------------------------------------
    async def _newest(self, bucket: str, key: str, fetch):
        """``fetch(client)`` (a GET or HEAD) from a replica holding the key's newest version.

        When no replica is owed a version of the key (no pending hint), every acknowledged
        write reached every replica that answered it, so the first healthy replica's answer is
        at least as new as any acknowledged one: it is served as is, unless it lacks the key
        without a tombstone (a replica that lost it) or cannot be reached. Otherwise the first
        replica is fetched from while every other storage node not known to be down is asked
        its version (HEAD); if one is newer, the fetch is redone there, and replicas found
        behind are repaired in the background."""
        order = self._read_order(await self.replica_names(bucket, key))
        asked = [n for n in order if not is_down(self.nodes.nodes[n])] or order
        voided = self.hints.voided(bucket, key)  # failed writes not undone yet: never an answer
        if not self.hints.newest(bucket, key) and not voided:
            try:
                return await fetch(self.client_for(asked[0]))
            except S3Error as exc:
                if exc.code == "NoSuchKey" and exc.headers.get(DELETED_HEADER) == "true":
                    raise
                # NoSuchBucket too: a replica whose disk was replaced (empty) is not the last word on
                # a bucket the others hold (it answered NoSuchBucket for acknowledged keys; issue 43).
                if exc.code not in ("NoSuchKey", "NoSuchBucket", "ServiceUnavailable"):
                    raise
                if exc.code == "ServiceUnavailable":  # ask it again last, if at all
                    asked = asked[1:] + asked[:1] if len(asked) > 1 else asked
        first, others = asked[0], asked[1:]
        answers = await asyncio.gather(fetch(self.client_for(first)),
                                       *(self.client_for(n).head_object(bucket, key) for n in others), return_exceptions=True)
        got = answers[0]
        got_info = got.info if hasattr(got, "info") and not isinstance(got, BaseException) else got
        states = {n: state_from(n, a) for n, a in zip(asked, [got_info, *answers[1:]], strict=True)}
        for name, answer in zip(asked, answers, strict=True):
            if states[name] is None and not unavailable(answer):
                await close_answer(got)
                raise answer if isinstance(answer, S3Error) else S3Error("InternalError", f"storage node {name} failed: {answer!r}")
        # A node on a replaced disk that has not been refilled yet knows nothing of what it lacks:
        # its "no such key" is no answer (replication/replaced.py).
        refilling = self.replaced.refilling if self.replaced is not None else ()
        reachable = {n: s for n, s in states.items() if s is not None and not (n in refilling and s.deleted and not s.version)
                     and s.version not in voided}
        best = newest(reachable.values())
        owed = self.hints.newest(bucket, key)
        if best is None or best.version < owed:
            await close_answer(got)
            self.stale_reads_refused += best is not None
            raise S3Error("ServiceUnavailable", f"no storage node holding the newest s3://{bucket}/{key} is reachable; retry shortly")
        if any(s.version < best.version for s in reachable.values()):
            self.repairer.soon(bucket, key)
        if best.deleted:
            await close_answer(got)
            said = answers[asked.index(best.node)]  # its 404, with a delete marker's x-amz-* headers
            raise said if isinstance(said, S3Error) else S3Error("NoSuchKey", f"The key {key!r} does not exist in bucket "
                                                                 f"{bucket!r}.", resource=key)
        if first in reachable and reachable[first].version >= best.version:  # (a failed write it holds is not)
            return got
        await close_answer(got)
        return await fetch(self.client_for(best.node))

    async def get_object(self, bucket, key, byte_range=None, *, version_id: str | None = None) -> ObjectStream:
        if version_id is not None:
            return await self.get_version(bucket, key, byte_range, version_id)
        return await self._newest(bucket, key, lambda c: c.get_object(bucket, key, byte_range))

    async def head_object(self, bucket, key, *, version_id: str | None = None) -> ObjectInfo:
        if version_id is not None:
            return await self.head_version(bucket, key, version_id)
        return await self._newest(bucket, key, lambda c: c.head_object(bucket, key))

    async def copy_in_place(self, src_bucket: str, src_key: str, bucket: str, key: str, headers: dict,
                            condition: WriteCondition | None = None):
        """CopyObject made by the replicas from their own copies of the source, or None to
        stream it (gateway/copy_in_place.py)."""
        return await copy_in_place(self, src_bucket, src_key, bucket, key, headers, condition)

    async def query_node(self, bucket: str, key: str) -> str | None:
        """The storage node a query on the object would run on: the first healthy replica, or
        None while a replica may be behind (a pending hint: the newest copy is fetched instead)."""
        if self.hints.newest(bucket, key):
            return None
        order = self._read_order(await self.replica_names(bucket, key))
        return next((n for n in order if not is_down(self.nodes.nodes[n])), None)

    async def select_object(self, bucket, key, request_xml: bytes) -> SelectResult:
        """S3 Select, near the data when it pays: the decision engine (``self.planner``,
        gateway/select_planner.py) compares running it on the first healthy replica (only the
        result crosses the link) with fetching the object and running it here (push-back). A
        replica that may be behind (a pending hint), or one that cannot answer, means push-back
        too. ``X-Nearfaas-Placement`` says what ran; ``X-Nearfaas-Predicted`` what was predicted."""
        from nearfaas.gateway.select_planner import load_engine

        await load_engine()  # off the event loop, once
        from nearfaas.dataservices.select import parse_request, select_object_stream

        req = parse_request(request_xml)  # a bad request is refused before any node is asked
        pred, fallback = None, {}
        first = await self.query_node(bucket, key)
        if first is not None:
            pred = await self.planner.plan(bucket, key, first, req) if self.planner is not None else None
            if pred is None or pred.choice == "offload":
                try:
                    result = await self.client_for(first).select_object(bucket, key, request_xml)
                    body = self.planner.track(first, result.body) if self.planner is not None else result.body
                    return SelectResult({**result.headers, **_predicted(pred), "X-Nearfaas-Placement": f"offload:{first}"},
                                        body)
                except S3Error as exc:
                    deleted = exc.headers.get(DELETED_HEADER) == "true"
                    if exc.code not in ("NoSuchKey", "ServiceUnavailable") or deleted:
                        raise
                    # Said, not hidden: the pick was offload, what ran is push-back, and why.
                    fallback = {"X-Nearfaas-Fallback": f"offload:{first} failed ({exc.code}: {str(exc)[:160]})"}
        result = await select_object_stream(await self.get_object(bucket, key), request_xml, key, "push-back:gateway")
        return SelectResult({**result.headers, **_predicted(pred), **fallback}, result.body)

    async def _every_healthy_node(self, op, kind) -> list:
        """``op(client)`` on every healthy storage node: the answers of type ``kind``. A node's
        error is raised unless it is merely unreachable (its entries are then missing)."""
        names = [n.name for n in self.nodes.storage_nodes(healthy_only=True)]
        if not names:
            raise S3Error("ServiceUnavailable", "no storage node is reachable")
        pages = await asyncio.gather(*(op(self.client_for(n)) for n in names), return_exceptions=True)
        for name, p in zip(names, pages, strict=True):
            if isinstance(p, S3Error) and not unavailable(p) and not self._says_nothing(name, p):
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
        # One creation of a name at a time: two at once could leave the nodes disagreeing on its
        # options (its owner: s3/bucket_policy_api.py); the later one finds the bucket made.
        lock = self._creating.setdefault(name, asyncio.Lock())
        try:
            async with lock:
                return await self._create_bucket(name, options)
        finally:
            if not lock.locked() and self._creating.get(name) is lock:
                del self._creating[name]

    async def _create_bucket(self, name, options=None) -> BucketInfo:
        names = [n.name for n in self.nodes.storage_nodes()]
        results = await asyncio.gather(*(self.client_for(n).create_bucket(name, options) for n in names), return_exceptions=True)
        made = settle(names, results, unavailable, "CreateBucket")
        for node, r in zip(names, results, strict=True):
            if isinstance(r, BaseException):  # down: it gets the bucket when it is back
                await self.hints.add(node, name, None, options=made[0].options)
        self._bucket_options.pop(name, None)
        return made[0]

    async def head_bucket(self, name) -> BucketInfo:
        last = None
        healthy = {n.name for n in self.nodes.storage_nodes(healthy_only=True)}
        for node in sorted(self._read_order([]), key=lambda n: n not in healthy):
            try:
                return await self.client_for(node).head_bucket(name)
            except S3Error as exc:
                if not unavailable(exc) and not self._says_nothing(node, exc):
                    raise
                last = exc if unavailable(exc) else S3Error("ServiceUnavailable", f"storage node {node} is being refilled "
                                                            "(a replaced disk) and no other answered; retry shortly")
        raise last or S3Error("ServiceUnavailable", "no storage node is reachable")

    def _says_nothing(self, node: str, exc: BaseException) -> bool:
        """A node on a replaced disk, not refilled yet, that says a bucket does not exist: it may
        just not have it back yet (replication/replaced.py)."""
        return (isinstance(exc, S3Error) and exc.code == "NoSuchBucket" and self.replaced is not None
                and node in self.replaced.refilling)

    async def delete_bucket(self, name) -> None:
        """Needs every storage node: a node that is down would keep the bucket (and its objects)."""
        if (await self.list_objects(name, max_keys=1)).contents:
            raise S3Error("BucketNotEmpty", resource=name)
        if await self.versioning_status(name) and (await self.list_object_versions(name, max_keys=1)).versions:
            raise S3Error("BucketNotEmpty", "The bucket still holds object versions or delete markers; delete them "
                          "first (ListObjectVersions shows them).", resource=name)
        await self._all_nodes(lambda c: c.delete_bucket(name))
        self._bucket_options.pop(name, None)
