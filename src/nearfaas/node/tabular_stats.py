"""Column statistics of tabular objects, kept by the storage node beside the objects.

When a write commits (a PUT, a completed multipart upload, a replica repair), the node looks at
the object: if it is a table (Parquet, Arrow IPC, CSV, JSON lines: ``dataservices.objects``),
it builds its column sketches (``dataservices.sketches``: KLL quantiles, Theta distinct counts)
and keeps them in ``<store>/.stats/<bucket>/<sha256(key)>.json``, stamped with the object's ETag
and version. The cardinality estimator and ``nearfaas stats`` read them; a prefix's statistics
are the merge of its objects'.

Why after the write, in the background, one object at a time: the write is acknowledged on its
own terms (durable bytes), and the sketches are derived data that can always be rebuilt, so a
slow or failed sketch never delays or fails a PUT. One worker bounds the CPU they take from the
node; a backlog over ``MAX_BACKLOG`` drops the oldest wishes (counted in ``dropped``): such an
object simply has no statistics until it is written again. A multipart object is sketched once
it is complete (its parts are not tables on their own: a CSV row may straddle two parts).

Worked example: PUT s3://runs/day1.parquet (1M rows) → acknowledged → ~0.3 s later
``.stats/runs/<hash>.json`` holds {"key": "day1.parquet", "etag": …, "stats": {rows: 1000000,
columns: {x: {kll: …, theta: …}, …}}}; GET /_nearfaas/stats?bucket=runs&prefix=day returns it.

Known caveats:
* Statistics whose ETag no longer matches the object (it was overwritten and the new sketch is
  not done yet, or was dropped) are not served: a reader sees "no statistics" rather than stale
  ones.
* Objects over ``MAX_BYTES`` are not sketched (reading them whole would cost the node memory).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from pathlib import Path

from nearfaas import atomic

log = logging.getLogger("nearfaas.node.stats")

MAX_BYTES = 256 << 20
MAX_BACKLOG = 1000


class StatsKeeper:
    def __init__(self, store, root: Path):
        self.store = store
        self.root = Path(root) / ".stats"
        self.pending: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.built = self.skipped = self.failed = self.dropped = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def path(self, bucket: str, key: str) -> Path:
        return self.root / bucket / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    def soon(self, bucket: str, key: str) -> None:
        """Sketch this object after its write (called from the event loop)."""
        self.pending.pop((bucket, key), None)
        self.pending[(bucket, key)] = None
        while len(self.pending) > MAX_BACKLOG:
            self.pending.popitem(last=False)
            self.dropped += 1
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._work())
        self._wake.set()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                (bucket, key), _ = self.pending.popitem(last=False)
                try:
                    await asyncio.to_thread(self._build, bucket, key)
                except Exception:  # derived data: a failure costs the statistics, never the node
                    self.failed += 1
                    log.exception("sketching s3://%s/%s failed", bucket, ascii(key))

    def _build(self, bucket: str, key: str) -> None:
        from nearfaas.dataservices import objects
        from nearfaas.dataservices.sketches import table_stats
        from nearfaas.s3.errors import S3Error

        try:
            obj = self.store.open_object(bucket, key)
        except S3Error:
            return  # deleted since
        try:
            info = obj.info
            if info.size > MAX_BYTES:
                self.skipped += 1
                return
            data = obj.read(0, info.size)  # the same inode as its info, even if overwritten since
        finally:
            obj.close()
        if objects.sniff(data[: objects.SNIFF_BYTES], key) is None:
            self.skipped += 1
            return
        try:
            stats = table_stats(objects.read_table(data, key=key))
        except objects.ObjectFormatError:
            self.skipped += 1
            return
        doc = {"bucket": bucket, "key": key, "etag": info.etag, "version": info.version, "size": info.size,
               "stats": stats.to_json()}
        path = self.path(bucket, key)
        atomic.private_dir(path.parent)
        atomic.write_text(path, json.dumps(doc), durable=False)  # a cache, rebuilt from the objects
        self.built += 1

    def read(self, bucket: str, prefix: str = "") -> list[dict]:
        """The current statistics of this node's objects under ``prefix`` (those whose ETag still
        matches the object)."""
        out = []
        folder = self.root / bucket
        if not folder.is_dir():
            return out
        for path in folder.glob("*.json"):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not doc.get("key", "").startswith(prefix):
                continue
            try:
                info = self.store.head_object(bucket, doc["key"])
            except Exception:
                continue  # deleted
            if info.etag == doc.get("etag"):
                out.append(doc)
        return sorted(out, key=lambda d: d["key"])

    def describe(self) -> dict:
        return {"built": self.built, "skipped": self.skipped, "failed": self.failed, "dropped": self.dropped,
                "pending": len(self.pending)}
