"""The free space a storage node leaves on its disk, and the check every write makes against it.

The filesystem under a node's store is shared: this node's replicas of every tenant's objects,
other nodes' stores on the same host, the gateway's journal and hint log, every log. A store that
filled it would fail every write of everyone, the gateway's included (red team round 6, R5: two
replicas on one disk doubled each PUT; ~36 GiB of PUTs would have filled this VM's 72 GiB free).
So a write (an object, a server-side copy, a multipart part) that would leave less than the
floor free is refused before a byte of it lands: ``InsufficientStorage`` (507), nothing stored.
A replica that refuses while another stores the write has missed it, like one that is down, and
is owed it (gateway/replica_calls.missed_write: a hint).

Worked example: a 258 GiB filesystem has a floor of 2 GiB (5 % is 12.9 GiB, capped); with
2.5 GiB free a 400 MiB PUT is stored, the next 200 MiB one is refused with 507 and the disk
keeps its 2.1 GiB.

Known caveats:
- The check is a ``statvfs`` before each chunk, not a reservation: writes running at once on a
  nearly full disk may together go below the floor by up to one chunk each.
- It keeps the host writable, it is not a per-tenant quota: one tenant may still take all the
  space above the floor.
"""

from __future__ import annotations

import os
from pathlib import Path

from nearfaas.s3.errors import S3Error


def default_min_free(root: str | Path) -> int:
    """5 % of the filesystem under ``root``, at least 256 MiB, at most 2 GiB (room for the
    journals and logs, without refusing writes on a small disk that is merely busy)."""
    st = os.statvfs(root)
    return max(256 << 20, min(st.f_blocks * st.f_frsize // 20, 2 << 30))


def reserve(path: str | Path, min_free: int, size: int) -> None:
    """Raise InsufficientStorage when writing ``size`` bytes under ``path`` would leave less
    than ``min_free`` free."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    if free - size < min_free:
        raise S3Error("InsufficientStorage", f"This storage node's disk has {free >> 20} MiB free, and a write may not take it "
                      f"below {min_free >> 20} MiB (5 % of it, at least 256 MiB, at most 2 GiB): the write was refused "
                      "and nothing stored. Delete objects or add a node, then retry.")
