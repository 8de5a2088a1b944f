"""An append-only, checksummed, group-committed journal: what the gateway must not forget.

Used for accepted async calls (gateway/async_queue.py) and for hinted handoff
(replication/hints.py). The file is a sequence of lines, each ``<crc32 hex> <json>``::

    {"t": "h", "next": 18}           header of a compacted file: the next key
    {"t": "a", "k": 17, ...}         an entry is added (its owner decides the other fields)
    {"t": <other>, "k": 17, ...}     more about entry 17 (e.g. an attempt started)
    {"t": "d", "k": 17}              entry 17 is done: replay forgets it

Appends wait in a buffer and one flush task writes (and, when any of them asked, fsyncs)
whatever has gathered, in a thread: 100 concurrent appends cost a few fsyncs, not 100 (group
commit). At start-up ``load`` replays the file: the records of every entry not done are handed
to the owner's ``build``, and the file is rewritten with only what the owner keeps (compaction,
which also drops a torn tail). Compaction runs again whenever the file passes ``compact_bytes``
and is more than half dead records.

Known caveats:
- Records appended with ``sync=False`` survive a killed process (the page cache does) but not a
  machine crash before the next fsync.
- A write that fails (disk full) is rolled back (truncated) and raises the owner's ``error``
  type; the file stays well formed.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

from nearfaas import atomic


def _log(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def encode(record: dict) -> bytes:
    payload = json.dumps(record, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode(line: bytes) -> dict | None:
    """The record of one journal line, or None when it is torn or corrupt."""
    crc, _, payload = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("t"), str) else None


class Journal:
    """The append-only file: replay, group-committed appends, compaction."""

    def __init__(self, path: Path, compact_bytes: int = 4 * 1024 * 1024, *, error: type[Exception] = OSError,
                 name: str = "journal"):
        self.path = path
        self.compact_bytes = compact_bytes
        self.error = error  # raised (with a message) when the file cannot be written
        self.name = name  # in log events: "<name>-torn-tail", ...
        self.next_key = 1
        self.size = 0  # bytes in the file
        self.live: dict[int, int] = {}  # key of an entry not done -> bytes of its records
        self.live_bytes = 0
        self.snapshot = lambda: []  # the records compaction keeps (set by the owner)
        self._fd: int | None = None
        self._buffer: list[bytes] = []
        self._keys: list[tuple[int, int, bool]] = []  # (key, bytes, done) of buffered records
        self._waiters: list[asyncio.Future] = []
        self._sync = False  # whether a buffered record needs an fsync or only a write
        self._flusher: asyncio.Task | None = None

    # -- start-up --------------------------------------------------------------------------------
    def load(self, build: Callable[[list[dict]], object | None], keep: Callable[[object], dict]) -> list:
        """Replay the file. ``build(records)`` gets the records of each entry not done, in file
        order, and returns the owner's object for it (None: drop it); ``keep(obj)`` is the one
        record that compaction writes for it. Returns the objects in key order. Torn or corrupt
        records are skipped and logged; the file is then rewritten with the kept records and
        opened for appending (so a torn tail never has a record glued to it)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()  # the file ends with a newline, as it should
        entries: dict[int, list[dict]] = {}
        done: set[int] = set()
        next_key = 1
        for number, line in enumerate(lines, 1):
            record = decode(line)
            try:
                if record is None:
                    raise ValueError("bad checksum or not JSON")
                if record["t"] == "h":
                    next_key = max(next_key, int(record["next"]))
                    continue
                key = int(record["k"])
            except (KeyError, ValueError, TypeError) as exc:
                torn = record is None and number == len(lines)
                _log(f"{self.name}-torn-tail" if torn else f"{self.name}-corrupt-record", journal=str(self.path),
                     line=number, bytes=len(line), error=str(exc), action="skipped")
                continue
            next_key = max(next_key, key + 1)
            if record["t"] == "d":
                done.add(key)
                entries.pop(key, None)
            elif key not in done:
                entries.setdefault(key, []).append(record)
        self.next_key = next_key
        kept = []
        for key in sorted(entries):
            try:
                obj = build(entries[key])
            except (KeyError, ValueError, TypeError) as exc:  # well-formed lines of the wrong shape
                _log(f"{self.name}-corrupt-record", journal=str(self.path), key=key, error=repr(exc), action="skipped")
                continue
            if obj is not None:
                kept.append(obj)
        self.rewrite([keep(o) for o in kept])
        return kept

    def rewrite(self, records: list[dict]) -> None:
        """Compaction: a new file holding ``records``, made durable, then renamed over the old one."""
        atomic.private_dir(self.path.parent)
        lines = [encode(r) for r in records]
        # 0600: it may hold request bodies; write_bytes fsyncs the folder, so the rename survives a crash
        atomic.write_bytes(self.path, encode({"t": "h", "next": self.next_key}) + b"".join(lines), 0o600)
        old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if old is not None:
            os.close(old)
        self.size = os.fstat(self._fd).st_size
        self.live = {int(r["k"]): len(line) for r, line in zip(records, lines, strict=True)}
        self.live_bytes = sum(self.live.values())

    # -- appends ---------------------------------------------------------------------------------
    def new_key(self) -> int:
        self.next_key += 1
        return self.next_key - 1

    def append_nowait(self, record: dict, sync: bool = True) -> asyncio.Future:
        """Queue ``record`` for the next group commit; the future is done once it is on disk
        (``sync``: fsynced; else written to the file, which a crash of this process does not
        undo, and fsynced with the next synced append or at close)."""
        if self._fd is None:
            raise self.error(f"the {self.name} {self.path} is closed")
        line = encode(record)
        future = asyncio.get_running_loop().create_future()
        self._buffer.append(line)
        self._keys.append((int(record["k"]), len(line), record["t"] == "d"))
        self._waiters.append(future)
        self._sync = self._sync or sync
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return future

    async def append(self, record: dict, sync: bool = True) -> None:
        await self.append_nowait(record, sync)

    async def _flush(self) -> None:
        while self._buffer:
            data, keys, waiters, sync = b"".join(self._buffer), self._keys, self._waiters, self._sync
            self._buffer, self._keys, self._waiters, self._sync = [], [], [], False
            try:
                await asyncio.to_thread(self._write, data, sync)
            except OSError as exc:
                error = self.error(f"could not write the {self.name} {self.path}: {exc}")
                for w in waiters:
                    if not w.done():
                        w.set_exception(error)
                continue
            for key, size, is_done in keys:
                if is_done:
                    self.live_bytes -= self.live.pop(key, 0)
                else:
                    self.live[key] = self.live.get(key, 0) + size
                    self.live_bytes += size
            for w in waiters:
                if not w.done():
                    w.set_result(None)
            if self.size >= self.compact_bytes and self.size > 2 * self.live_bytes:
                records = self.snapshot()  # taken here, in the loop, between two writes
                try:
                    await asyncio.to_thread(self.rewrite, records)
                except OSError as exc:  # the old file is intact: keep appending to it
                    _log(f"{self.name}-compaction-failed", journal=str(self.path), error=str(exc))

    def _write(self, data: bytes, sync: bool = True) -> None:
        try:
            _write_all(self._fd, data)
            if sync:
                os.fsync(self._fd)
        except OSError:
            # Cut off whatever part got in, so the next record starts on a line of its own.
            try:
                os.ftruncate(self._fd, self.size)
            except OSError:
                pass
            raise
        self.size += len(data)

    async def close(self) -> None:
        """Wait for buffered records to reach the disk, then close the file."""
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._fd is not None:
            try:
                os.fsync(self._fd)  # the records written without one
            finally:
                os.close(self._fd)
                self._fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
