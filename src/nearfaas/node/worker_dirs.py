"""A worker's folders on the node's disk: an unjailed instance's private /tmp, a function's volume.

Why a module of its own: both are places a function writes on the host, with an owner and a
lifetime that the isolation promises rest on (docs/isolation.md, "/tmp" and "Volumes"):

- ``private_tmp``: ``<node>/tmp/<instance>``, 0700, empty at start, removed when the worker is
  reaped (``remove_tmp``) and swept when the node starts. Only for unjailed workers: a jailed
  one gets a tmpfs of its own (node/jail.py);
- ``volume``: ``<node>/volumes/<name>`` with ``x-nearfaas.volume``, kept across calls, instances
  and redeploys, 0700 and owned by the function's uid. A folder some other uid owns is a deleted
  function's of the same name: its data is wiped first (unless it is a mount point).

Known caveats: nothing bounds an unjailed /tmp's size, and the host's /tmp stays reachable.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path


def private_tmp(node_dir: Path, instance: str) -> Path:
    path = node_dir / "tmp" / instance
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.mkdir(mode=0o700)
    return path


async def remove_tmp(path: Path | None) -> None:
    """Remove an unjailed instance's /tmp (off the event loop: a function may leave many files)."""
    if path is not None:
        await asyncio.to_thread(shutil.rmtree, path, True)


def volume(node_dir: Path, spec: dict, uid: int | None) -> Path | None:
    if not (spec.get("x") or {}).get("volume"):
        return None
    path = node_dir / "volumes" / spec["name"]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    owner = uid if uid is not None else os.getuid()
    try:
        # Something an operator mounted there (a disk, a link file system) is used as it is.
        if path.stat().st_uid != owner and not os.path.ismount(path):
            shutil.rmtree(path)
    except FileNotFoundError:
        pass
    path.mkdir(mode=0o700, exist_ok=True)
    if uid is not None:
        os.chown(path, uid, uid)
    return path
