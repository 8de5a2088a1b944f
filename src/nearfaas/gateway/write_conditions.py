"""Conditional writes made atomic at the gateway, and retried multipart completions answered.

S3's ``If-None-Match: *`` and ``If-Match`` on a write (s3/conditions.py) promise that the check
and the write are one step: of two writers racing to create a key, exactly one wins. Every write
of the cluster goes through this one gateway and gets its version there (``ClusterBackend._stamp``),
so the gateway can keep that promise without a lock held across a body upload:

1. ``precheck``, when the request arrives: a write of the key already stamped and not yet
   acknowledged is a 409 ConditionalRequestConflict (its outcome is unknown). Otherwise note the
   key's last stamped version, read the key's newest object (the replicas' newest, hints
   included) and check the condition: 412 PreconditionFailed or 404 NoSuchKey when it fails.
2. ``check_at_stamp``, when the body has ended and the write is to be stamped: if any other
   write of the key was stamped since step 1, 409. Else the write is stamped with no await in
   between, so nothing can slip in: check and write are one step in the order of versions.

Worked example: A and B both PUT ``k`` with ``If-None-Match: *``. Both prechecks find no object.
A's body ends first: A is stamped v7. B's body ends: the key's last stamp is v7, not what B
noted, so B gets 409 and nothing of B is written. A retry of B gets 412.

Known caveats:
- The last stamp is remembered for ``STAMPS_KEPT`` keys; a key forgotten between a precheck and
  its stamp gets a 409 (safe: retry), never a lost condition.
- Writes that bypass the gateway (a function's chain intermediate written on its own node) are
  not ordered here; they live in the platform's own bucket.
- A retried completion is recognised for ``COMPLETIONS_KEPT`` uploads, in memory: after a gateway
  restart it answers NoSuchUpload, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nearfaas.replication.ordering import AckOrder
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.conditions import WriteCondition, conflict
from nearfaas.s3.errors import S3Error

STAMPS_KEPT = 100_000  # keys whose last stamped version is remembered
COMPLETIONS_KEPT = 10_000  # completed multipart uploads remembered, so a retried completion answers 200
_NEVER = object()  # a key with no write stamped since the gateway started (or forgotten)


class WriteConditions:
    def __init__(self, order: AckOrder, head: Callable[[str, str], Awaitable[ObjectInfo]]):
        self.order = order
        self.head = head  # the key's newest object across the replicas (NoSuchKey when none)
        self._last: dict[tuple[str, str], str] = {}  # oldest first
        self._completed: dict[tuple[str, str, str], tuple] = {}  # (bucket, key, upload id) -> (parts, ObjectInfo)

    async def precheck(self, bucket: str, key: str, condition: WriteCondition | None) -> object:
        """Step 1; what ``check_at_stamp`` must find unchanged (None without a condition)."""
        if condition is None:
            return None
        if self.order.busy(bucket, key):
            raise conflict()
        seen = self._last.get((bucket, key), _NEVER)
        try:
            current = await self.head(bucket, key)
        except S3Error as exc:
            if exc.code != "NoSuchKey":
                raise
            current = None
        if self.order.busy(bucket, key) or self._last.get((bucket, key), _NEVER) is not seen:
            raise conflict()
        condition.check(current, key)
        return seen

    def check_at_stamp(self, bucket: str, key: str, seen: object) -> None:
        """Step 2: raises 409 when another write of the key was stamped since ``precheck``."""
        if seen is not None and self._last.get((bucket, key), _NEVER) is not seen:
            raise conflict()

    def stamped(self, bucket: str, key: str, version: str) -> None:
        self._last.pop((bucket, key), None)
        self._last[(bucket, key)] = version
        if len(self._last) > STAMPS_KEPT:
            self._last.pop(next(iter(self._last)))

    def completion(self, bucket: str, key: str, upload_id: str, parts) -> ObjectInfo | None:
        """The answer a completion of these parts already got, for a client retrying it."""
        done = self._completed.get((bucket, key, upload_id))
        return done[1] if done is not None and done[0] == tuple(parts) else None

    def completed(self, bucket: str, key: str, upload_id: str, parts, info: ObjectInfo) -> None:
        self._completed[(bucket, key, upload_id)] = (tuple(parts), info)
        if len(self._completed) > COMPLETIONS_KEPT:
            self._completed.pop(next(iter(self._completed)))
