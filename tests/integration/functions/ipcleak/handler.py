"""Creates a System V shared-memory segment under a key the caller names (red team, round 2:
workers shared the host's IPC namespace, so a segment outlived its worker, uncharged, and any
local user could attach it)."""

import ctypes
import json

IPC_CREAT = 0o1000


def handle(event, context):
    key = int(json.loads(event.body)["key"])
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(ctypes.c_int(key), ctypes.c_size_t(1 << 20), IPC_CREAT | 0o666)
    return {"shmid": shmid, "errno": ctypes.get_errno() if shmid < 0 else 0}
