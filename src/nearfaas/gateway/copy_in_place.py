"""CopyObject where the source already lies: each of the destination's replicas copies its own
replica of the source on its own disk (node/objectfile.py's copy_file_range), and no byte of the
object crosses a link. The S3 front end (s3/copy.py) asks here first and streams the copy
(node -> gateway -> nodes) only when this declines.

Fallback ladder: in place when every replica of the destination key holds the source's newest
version (asked of every storage node at once, as a repair does) and no replica is owed a newer
one (no pending hint) -> streamed otherwise: a replica lacks the source, the source is being
repaired, the copy names a ``versionId``, or every replica found the source changed under it.

The write is the gateway's like any other: stamped, ordered and acknowledged as a PutObject is
(cluster_backend.py), with the destination's condition checked first. Each replica is told the
source version it must copy (``x-nearfaas-copy-source-version``); one whose source changed since
the gateway looked answers ``CopySourceChanged`` and, like a replica that was down, is owed the
write (a hint: repair copies the destination from a replica that made it), so replicas never hold
different bytes under one version.

Worked example: two storage nodes, replication 2. ``aws s3 cp s3://b/big s3://b/big.bak``:
HEAD on both nodes says both hold big@v7; the gateway stamps v9 and sends both a CopyObject
carrying v9 and "source v7"; each copies 1 GiB on its own disk; 200 with ``x-nearfaas-copy:
in-place``. Link bytes: the two requests and their XML answers.

Known caveats:
- A copy that names a source ``versionId`` is always streamed.
- With more storage nodes than replicas, a destination key placed on other nodes than the source
  streams (the copy is then as expensive as a GET plus a PUT).
"""

from __future__ import annotations

import asyncio

from nearfaas.gateway.replica_calls import missed_write
from nearfaas.replication.repair import newest
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.conditions import WriteCondition
from nearfaas.s3.copy import SOURCE_CHANGED
from nearfaas.s3.errors import S3Error

async def copy_in_place(cluster, src_bucket: str, src_key: str, bucket: str, key: str, headers: dict,
                        condition: WriteCondition | None) -> tuple[ObjectInfo, str] | None:
    """(the copy's info, the source's version id) made on the destination's replicas from their
    own copies of the source; None where it must be streamed (see the ladder above)."""
    if cluster.hints.newest(src_bucket, src_key):
        return None
    targets = await cluster.replica_names(bucket, key)
    states = await cluster.repairer.states(src_bucket, src_key, [n.name for n in cluster.nodes.storage_nodes()])
    best = newest(states.values())
    if best is None or best.deleted or any(t not in states or states[t].version != best.version for t in targets):
        return None
    seen = await cluster.conditions.precheck(bucket, key, condition)
    versioned = await cluster._versioned(bucket)
    box: list[str] = []
    version = cluster._stamp(bucket, key, box, seen)
    try:
        results = await asyncio.gather(*(cluster.client_for(n).copy_object(
            bucket, key, headers, version=version, source_version=best.version, **versioned) for n in targets),
            return_exceptions=True)
    except BaseException:
        cluster.order.end(bucket, key, version)
        raise
    if all(isinstance(r, S3Error) and r.code == SOURCE_CHANGED for r in results):
        cluster.order.end(bucket, key, version)
        return None  # overwritten under every replica: stream the one that stands now
    info, source_version_id = (await cluster._ordered(bucket, key, box, targets, results, _missed))[0]
    return info, source_version_id


def _missed(exc: BaseException) -> bool:
    return missed_write(exc) or (isinstance(exc, S3Error) and exc.code == SOURCE_CHANGED)
