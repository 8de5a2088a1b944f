"""Calls from the gateway to storage nodes, one node at a time and fanned out to a replica set:
the tee that streams one body to several replicas, the health-bound call that gives up on a node
the poll calls down, the per-node gate that answers overload with 503 SlowDown, and how a
fan-out's results are settled. The ladder and its worked example are in gateway/cluster_backend.py.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from nearfaas.gateway.nodes import HEALTH_INTERVAL_S, Node
from nearfaas.s3.backend import StorageBackend
from nearfaas.s3.errors import S3Error

log = logging.getLogger("nearfaas.gateway.s3")
_TEE_DEPTH = 8  # chunks buffered per replica: bounds gateway memory per upload
_DOWN_CHECK_S = HEALTH_INTERVAL_S / 2  # how often a slow node call looks at the node's health
_PATIENCE_S = 1.0  # how long a call waits on a node the poll calls down before giving up on it
# ... unless the node answered another call within the patience: then it is busy (a burst: its
# health poll timed out behind the queue), not down, and the call waits up to this long for it.
_BUSY_PATIENCE_S = 30.0
NODE_CALLS = 64  # calls in flight to one storage node at once
NODE_QUEUE = 2048  # calls waiting for one of those; beyond: 503 SlowDown (backpressure)
SLOWDOWN_RETRY_AFTER_S = 1


class Tee:
    """Feeds one async byte stream to several consumers; a consumer that fails is dropped."""

    def __init__(self, source: AsyncIterator[bytes], n: int, trailer: Callable[[], bytes] | None = None):
        self.source = source
        self.queues = [asyncio.Queue(maxsize=_TEE_DEPTH) for _ in range(n)]
        self.dead = [False] * n
        self.error: BaseException | None = None
        self.trailer = trailer  # called once the body has ended: its bytes go last to every consumer

    async def pump(self) -> None:
        try:
            async for chunk in self.source:
                for i, q in enumerate(self.queues):
                    if not self.dead[i]:
                        await q.put(chunk)
            if self.trailer is not None:
                last = self.trailer()
                for i, q in enumerate(self.queues):
                    if not self.dead[i]:
                        await q.put(last)
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


def unavailable(exc: BaseException) -> bool:
    return isinstance(exc, S3Error) and exc.code == "ServiceUnavailable"


def settle(targets: list[str], results: list, missed, what: str) -> list:
    """The successes of a call made on every replica. A replica whose error satisfies ``missed``
    is skipped (logged) when another one succeeded; any other error, or every replica failing,
    raises the most telling error: a real one, then "unavailable", then a missed upload."""
    ok = [r for r in results if not isinstance(r, BaseException)]
    failed = [(n, r) for n, r in zip(targets, results, strict=True) if isinstance(r, BaseException)]
    if not ok:
        failed.sort(key=lambda f: 0 if not missed(f[1]) else 1 if unavailable(f[1]) else 2)
    for name, exc in failed:
        if not ok or not missed(exc):
            raise exc if isinstance(exc, S3Error) else S3Error("InternalError", f"replica {name} failed: {exc!r}")
        log.warning("degraded %s: replica %s missed it (%s); done by %d other(s)", what, name, exc, len(ok))
    return ok


def missed_upload(exc: BaseException) -> bool:
    """A replica that was down when a multipart upload was created (or a part was sent) answers
    NoSuchUpload (or InvalidPart) once it is back; like a replica that is down, it just misses
    this object. Only where another replica succeeded: if every one fails, the error is real."""
    return unavailable(exc) or (isinstance(exc, S3Error) and exc.code in ("NoSuchUpload", "InvalidPart", "InsufficientStorage"))


def missed_write(exc: BaseException) -> bool:
    """A replica that was unreachable, that lacks the bucket (it was down when the bucket was
    created; it is owed the bucket too), or whose disk is at its free-space floor
    (InsufficientStorage: it stored nothing): it missed this write, if another replica made it,
    and is owed it (a hint)."""
    return unavailable(exc) or (isinstance(exc, S3Error) and exc.code in ("NoSuchBucket", "InsufficientStorage"))


async def close_answer(answer) -> None:
    """Release a fetched object stream that will not be sent (another replica is newer)."""
    aclose = getattr(getattr(answer, "body", None), "aclose", None)
    if aclose is not None:
        await aclose()


def is_down(node: Node) -> bool:
    """Known to be down: it answered a health poll once and has failed one since (a node never
    yet seen, whose first poll raced its start, is not judged)."""
    return not node.healthy and node.last_seen > 0


async def unless_down(node: Node, call: Awaitable):
    """Await a call to storage node ``node``, abandoning it (ServiceUnavailable) once it has
    waited ``_PATIENCE_S`` while the health poll says the node is down: a node that hangs
    (SIGSTOP, a stuck disk) costs a request about the health-check bound (1.5 s), not a socket
    timeout of minutes. A node that is merely slow to answer one poll (load) still serves every
    call that it answers within the patience, so one slow poll does not make writes degraded; and
    a node whose polls time out while it keeps answering other calls (a burst queued behind it) is
    busy, not down: the call waits for it up to ``_BUSY_PATIENCE_S`` (a stopped node answers
    nothing, so it is still given up on after the patience)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(call)
    started = loop.time()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_DOWN_CHECK_S)
            now = loop.time()
            if done:
                if not unavailable(task.exception()):  # the node answered (the client maps "unreachable" to ServiceUnavailable)
                    node.last_answer = now
                return task.result()
            waited = now - started
            busy = now - node.last_answer < _PATIENCE_S
            if is_down(node) and waited >= _PATIENCE_S and (not busy or waited >= _BUSY_PATIENCE_S):
                raise S3Error("ServiceUnavailable", f"storage node {node.name} is not answering its health checks "
                              f"({node.last_error or 'no answer'}); this call waited {waited:.1f}s for it")
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


class Gate:
    """At most ``NODE_CALLS`` calls in flight to one node and ``NODE_QUEUE`` waiting; a call
    beyond both is refused at once with SlowDown, which the client retries after Retry-After."""

    def __init__(self, node: str):
        self.node = node
        self.slots = asyncio.Semaphore(NODE_CALLS)
        self.waiting = 0
        self.refused = 0

    async def __aenter__(self) -> None:
        if self.slots.locked():
            if self.waiting >= NODE_QUEUE:
                self.refused += 1
                raise S3Error("SlowDown", f"storage node {self.node} has {NODE_CALLS} calls in flight and {NODE_QUEUE} "
                              f"waiting; retry after {SLOWDOWN_RETRY_AFTER_S}s",
                              headers={"Retry-After": str(SLOWDOWN_RETRY_AFTER_S)})
            self.waiting += 1
            try:
                await self.slots.acquire()
            finally:
                self.waiting -= 1
        else:
            await self.slots.acquire()

    async def __aexit__(self, *exc_info) -> None:
        self.slots.release()


class HealthBound:
    """A node's StorageBackend client whose every call is bounded by the node's health and
    passes through the node's gate.

    ``owes_bucket(bucket)``: the node missed that bucket's creation (it was down or slow) and a
    hint still owes it the bucket. Its NoSuchBucket then says nothing about the bucket, so it is
    answered as ServiceUnavailable: readers move on to another replica, writers count the node
    as having missed the write (a hint), and a client that reaches no other replica retries
    instead of hearing that a bucket it was told exists does not. Every StorageBackend call
    that names a bucket names it first."""

    def __init__(self, client: StorageBackend, node: Node, gate: Gate, owes_bucket=None):
        self._client, self._node, self._gate = client, node, gate
        self._owes_bucket = owes_bucket

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args, **kwargs):
            async with self._gate:
                try:
                    return await unless_down(self._node, attr(*args, **kwargs))
                except S3Error as exc:
                    bucket = args[0] if args and isinstance(args[0], str) else None
                    if exc.code == "NoSuchBucket" and bucket and self._owes_bucket and self._owes_bucket(bucket):
                        raise S3Error("ServiceUnavailable", f"storage node {self._node.name} has not yet been given "
                                      f"bucket {bucket} (it missed its creation; a hint will bring it)") from None
                    raise

        return call
