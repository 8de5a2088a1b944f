"""Whether a process is alive, as every part that sweeps up after processes needs to know."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while ``pid`` runs (another user's process counts); a zombie is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
