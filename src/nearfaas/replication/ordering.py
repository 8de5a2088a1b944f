"""Acknowledge the writes of one key in the order of their versions.

Versions order the writes of a key (version.py), and every replica keeps the newest. That alone
would let a client see its write acknowledged *after* a newer one that overwrote it: the
acknowledgements of concurrent writes race. ``AckOrder`` closes that race at the gateway: a
write (or delete) is acknowledged only once every write of the same key with a lower version
that the gateway is still carrying has been acknowledged or has failed. So the last
acknowledgement a client sees is always of the write that stands.

Worked example: PUT A is stamped v1 and PUT B v2 (B's body ended later). B's replicas finish
first; B waits in ``settle`` until A is done; A is acknowledged, then B. A read after both
returns B, the last acknowledged write.

Known caveats:
- Only writes carried by this gateway are ordered: there is one gateway today.
- A write waits at most for the replica calls of the lower versions, which are bounded by the
  hung-node patience (gateway/cluster_backend.py): a version is stamped when a body has ended,
  so a slow uploader never holds anyone up.
"""

from __future__ import annotations

import asyncio


class AckOrder:
    def __init__(self) -> None:
        self._inflight: dict[tuple[str, str], dict[str, asyncio.Event]] = {}

    def begin(self, bucket: str, key: str, version: str) -> None:
        """Register a write the moment its version is stamped (no await in between)."""
        self._inflight.setdefault((bucket, key), {})[version] = asyncio.Event()

    async def settle(self, bucket: str, key: str, version: str) -> None:
        """Wait until every lower version of the key registered here has ended."""
        waiting = self._inflight.get((bucket, key), {})
        for event in [e for v, e in waiting.items() if v < version]:
            await event.wait()

    def end(self, bucket: str, key: str, version: str) -> None:
        """The write is acknowledged or failed: writes waiting on it may go."""
        waiting = self._inflight.get((bucket, key))
        if waiting is None or version not in waiting:
            return
        waiting.pop(version).set()
        if not waiting:
            del self._inflight[(bucket, key)]

    def busy(self, bucket: str, key: str) -> bool:
        """A write of the key has been stamped and is not yet acknowledged or failed."""
        return bool(self._inflight.get((bucket, key)))

    def pending(self) -> int:
        return sum(len(v) for v in self._inflight.values())
