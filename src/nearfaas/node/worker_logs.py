"""A function's log on one node: ``<node>/logs/<name>.log``, what its workers print and pip's words.

Why a module of its own: the node's log API, cold-start errors (the log's tail) and the pool
all read the same file the same way; one home for its path and its record format. Every line is
a JSON record: a worker's ``print()`` writes one; any other output (a write to fd 1 or 2, pip's,
an image's process's) is wrapped into one by the node as it arrives, with its arrival time (a
file written before that, or by hand, has its raw lines shown with the file's mtime).

Bounds (red team round 3: one function wrote 1 GB of log in five calls, and reading it took the
node to 4 GB and stalled another tenant's calls): a read looks only at the last ``READ_BYTES``
of the file, and ``trim`` (the pool runs it every ``TRIM_EVERY_S``) cuts a log past ``MAX_BYTES``
down to its last ``KEEP_BYTES``, with a line saying so; a removed function's log is deleted.

A worker never holds its log file (red team round 5: with the file as its fds 1 and 2, a
jailed function ``posix_fallocate``d 100 MiB of the host's disk in one call, could take all of it,
``ftruncate``d its own record away, and a pre-warmed worker still held the node's
``_prewarm.log``). Its stdout and stderr are the write end of a pipe (``LogPipe``); the node
drains the pipe and appends what comes into the file, at most ``RATE_BYTES_S`` a second per
worker (past it the node stops reading for a moment and the writer blocks on the full pipe), so
the disk grows no faster than the trim cuts it and the node's loop spends bounded time on it. A
pre-warmed worker's pipe points at ``_prewarm.log`` until it is specialised, then at the
function's log (``retarget``).

Known caveats: between two trims a function can write up to ``RATE_BYTES_S``; lines written
while a trim copies the tail may be lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

READ_BYTES = 4 * 1024 * 1024    # what a log read or a cold-start error looks at: the newest part
RATE_BYTES_S = 8 * 1024 * 1024  # what one worker's output may add to its log a second
MAX_BYTES = 64 * 1024 * 1024    # a function's log on one node, at most (plus one trim period's writes)
KEEP_BYTES = 1024 * 1024        # what a trim keeps
TRIM_EVERY_S = 1.0
PART_MAX = 64 * 1024            # a line longer than this is cut into lines of this size
RECORD_START = b'{"timestamp": '  # how a worker's print() record begins (runtime/worker.py)


class LogPipe(asyncio.Protocol):
    """A worker's stdout and stderr (``child_fd``, for the spawn), drained into ``path``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        read_fd, self.child_fd = os.pipe()
        self._read = os.fdopen(read_fd, "rb", buffering=0)
        self.transport: asyncio.ReadTransport | None = None
        self._fd: int | None = None  # the log file, while output comes
        self._window_start, self._window_bytes = 0.0, 0
        self._part = b""  # the start of a line whose end has not come yet
        self.done = asyncio.get_running_loop().create_future()  # set at EOF: the worker and its children are gone

    async def start(self) -> LogPipe:
        await asyncio.get_running_loop().connect_read_pipe(lambda: self, self._read)
        return self

    def release_child(self) -> None:
        """Close the node's copy of the write end, once the worker has inherited it."""
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None

    def retarget(self, path: Path) -> None:
        self._flush_part()  # a pre-warmed worker's last part line stays in its old log
        self.path = Path(path)
        self._close_file()  # the next output opens the new file

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._append(self._stamped(data))
        self._count(len(data))

    def _stamped(self, data: bytes) -> bytes:
        """Whole lines of ``data`` as records: a worker's print() record as it came, any other
        line (a write to fd 1 or 2, pip, a binary's output) wrapped with the time it arrived, so
        each line of a read carries its own time rather than the file's mtime. A part line waits
        for the rest (up to PART_MAX bytes, then it is a line of its own)."""
        lines = (self._part + data).split(b"\n")
        self._part = lines.pop()
        if len(self._part) >= PART_MAX:
            lines.append(self._part)
            self._part = b""
        now = time.time()
        return b"".join(line + b"\n" if line.startswith(RECORD_START) else
                        json.dumps({"timestamp": now, "stream": "raw", "text": line.decode(errors="replace")}).encode() + b"\n"
                        for line in lines)

    def _append(self, data: bytes) -> None:
        if not data:
            return
        try:  # opened once per target, O_APPEND: a trim (in place) moves the end, and writes follow it
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.write(self._fd, data)
        except OSError:
            pass  # a removed function's log folder, a full disk: the output is dropped, the worker goes on

    def _count(self, size: int) -> None:
        now = time.monotonic()
        if now - self._window_start >= 1.0:
            self._window_start, self._window_bytes = now, 0
        self._window_bytes += size
        if self._window_bytes >= RATE_BYTES_S and self.transport is not None:
            self.transport.pause_reading()  # the pipe fills and the worker's writes wait
            asyncio.get_running_loop().call_later(self._window_start + 1.0 - now, self._resume)

    def _resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _flush_part(self) -> None:
        if self._part:
            part, self._part = self._part, b""
            self._append(self._stamped(part + b"\n"))

    def connection_lost(self, exc) -> None:
        self._flush_part()
        self._close_file()
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        self.release_child()
        if self.transport is not None:
            self.transport.close()


def log_path(node_dir: Path, name: str) -> Path:
    return node_dir / "logs" / f"{name}.log"


def previous(path: Path) -> Path:
    """Where a function's log goes when a new deployment starts one (node/pool.py): kept, trimmed,
    not read by /system/logs, deleted with the function."""
    return path.with_name(path.name + ".previous")


def _newest(path: Path, limit: int | None = None) -> str:
    """The last ``limit`` (READ_BYTES) bytes of the file as text, starting at a whole line."""
    limit = READ_BYTES if limit is None else limit
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        data = f.read(limit)
    if size > limit:
        data = data.partition(b"\n")[2]  # the first line was cut by the seek
    return data.decode(errors="replace")


def tail(path: Path, lines: int) -> str:
    if not path.exists():
        return ""
    return "\n".join(_newest(path).splitlines()[-lines:])


def trim(logs_dir: Path, max_bytes: int = MAX_BYTES, keep: int = KEEP_BYTES) -> list[str]:
    """Cut every log in ``logs_dir`` larger than ``max_bytes`` to its last ``keep`` bytes, in
    place (its writers hold it open with O_APPEND, so they go on at the new end); the names cut."""
    cut = []
    for path in [*logs_dir.glob("*.log"), *logs_dir.glob("*.log.previous")]:
        try:
            if path.stat().st_size <= max_bytes:
                continue
            kept = _newest(path, keep).encode()
            note = json.dumps({"timestamp": time.time(), "stream": "nearfaas",
                               "text": f"log cut: it passed {max_bytes} bytes; the newest {keep} kept"}) + "\n"
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(note.encode() + kept)
            cut.append(path.name)
        except OSError:
            continue
    return cut


def read(path: Path, name: str, node: str, since: float = 0.0, last: int = 0) -> list[dict]:
    """Log records of a function on this node: JSON lines from print(), raw lines from fd writes."""
    if not path.exists():
        return []
    records = []
    mtime = path.stat().st_mtime
    for line in _newest(path).splitlines():
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "text" not in record:
                raise ValueError
        except ValueError:
            record = {"timestamp": mtime, "name": name, "instance": node, "stream": "raw", "text": line}
        if record.get("timestamp", 0) >= since:
            records.append(record)
    return records[-last:] if last else records
