"""A function's log on one node: ``<node>/logs/<name>.log``, what its workers print and pip's words.

Why a module of its own: the node's log API, cold-start errors (the log's tail) and the pool
all read the same file the same way; one home for its path and its record format. A line is a
JSON record (``print()`` in a worker) or raw text (a write to fd 1 or 2, pip's output), which
is shown with the file's mtime.
"""

from __future__ import annotations

import json
from pathlib import Path


def log_path(node_dir: Path, name: str) -> Path:
    return node_dir / "logs" / f"{name}.log"


def tail(path: Path, lines: int) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def read(path: Path, name: str, node: str, since: float = 0.0, last: int = 0) -> list[dict]:
    """Log records of a function on this node: JSON lines from print(), raw lines from fd writes."""
    if not path.exists():
        return []
    records = []
    mtime = path.stat().st_mtime
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "text" not in record:
                raise ValueError
        except ValueError:
            record = {"timestamp": mtime, "name": name, "instance": node, "stream": "raw", "text": line}
        if record.get("timestamp", 0) >= since:
            records.append(record)
    return records[-last:] if last else records
