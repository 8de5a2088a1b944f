"""A worker's secrets: copied into a folder of its instance's own, readable only by its uid.

Why a module of its own: secrets are the data a function must see and no other may; the copy,
its modes and its owner are the whole promise (docs/security.md, "Secrets"), kept in one place.
Starting a new instance never touches the files running ones read. Python workers and image
functions (node/oci/launch.py) both mount them through the pool.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nearfaas import atomic
from nearfaas.node.pool_error import PoolError


def mount(spec: dict, source: Path, folder: Path, uid: int | None = None) -> Path | None:
    """Copy ``spec``'s secrets from ``source`` (its namespace's folder) into ``folder`` (0500,
    files 0400, owned by ``uid`` when isolated); None when it lists none."""
    names = spec.get("secrets") or []
    if not names:
        return None
    missing = [s for s in names if not (source / s).is_file()]
    if missing:
        raise PoolError(f"function {spec['name']!r} lists secret {missing[0]!r}, which does not exist; "
                        f"create it with: nearfaas secret create {missing[0]} --from-literal VALUE", status=400)
    atomic.private_dir(folder.parent)  # nodes/<n>/secrets: the node's alone
    folder.mkdir(mode=0o700)
    for secret in names:
        shutil.copyfile(source / secret, folder / secret)
        os.chmod(folder / secret, 0o400)
        if uid is not None:
            os.chown(folder / secret, uid, uid)
    if uid is not None:
        os.chown(folder, uid, uid)
        os.chmod(folder, 0o500)
    return folder
