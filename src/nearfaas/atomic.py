"""Writing files so that a reader (or a crash) never sees half of one, with the mode set from the
start: the one home for "temp file, fsync, rename, fsync the folder" (issue 39, build item 7).

Every record, log index, spec and key file the platform keeps under its state directory goes
through here, and so gets a mode chosen by its writer (0600 unless it says otherwise): a file
is created with its final mode, never made 0644 by the umask and narrowed afterwards, so there
is no window in which another local user may open it.

``write_bytes(path, data)``:
1. ``mkstemp`` in ``path``'s own folder (a rename is atomic only within one filesystem), named
   ``.<name>.<random>`` so that no reader looking for ``<name>`` ever sees it, created 0600
   (O_EXCL), then ``fchmod`` to ``mode`` if that differs;
2. write everything, ``fsync``;
3. ``os.replace`` over ``path``: a reader opening ``path`` gets the old file or the new one;
4. ``fsync`` the folder, so the rename itself survives a power cut.
A failure at any step removes the temporary file and leaves ``path`` as it was.

``publish(staging, target)`` is steps 3-4 for something the caller built itself (a bucket's
folder, an unpacked bundle, an object file written in pieces); ``move(src, dst)`` is a rename
that is not a write (into a graveyard, onto a version shelf) and says so. ``private_dir``
makes folders 0700 (parents too), whatever the process umask.

Worked example::

    atomic.write_text(state / "functions.json", json.dumps(specs))          # 0600
    atomic.write_bytes(bundle / "handler.py", code, mode=0o644)              # read by the function's uid
    with atomic.writer(state / "journal.log") as f:                          # streamed, same guarantees
        for line in lines: f.write(line)

Known caveats:
- The mode applies to the new file only; ownership is the writing process's (root for the
  gateway and nodes). A caller that hands a file to a function's uid chowns it itself.
- ``durable=False`` skips both fsyncs: for caches that may be rebuilt after a crash (the
  replace is still atomic).
- A process killed between steps 1 and 3 leaves a ``.<name>.*`` file behind; it is invisible
  under ``<name>`` and its mode is the final one, so it leaks nothing. Callers that sweep their
  folders at start-up may remove such files.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: Path | str, mode: int = PRIVATE_DIR) -> Path:
    """``mkdir -p path`` where every folder it creates gets ``mode`` (0700), whatever the umask.
    Folders that exist keep their mode."""
    path = Path(path)
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            continue
        os.chmod(folder, mode)  # mkdir's mode passes through the umask
    return path


@contextlib.contextmanager
def writer(path: Path | str, mode: int = PRIVATE_FILE, *, text: bool = True, durable: bool = True) -> Iterator[IO]:
    """A file object whose contents replace ``path`` when the block ends without an exception
    (steps 1-4 of the module docstring); on an exception ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode != PRIVATE_FILE:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w" if text else "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def write_bytes(path: Path | str, data: bytes, mode: int = PRIVATE_FILE, *, durable: bool = True) -> None:
    with writer(path, mode, text=False, durable=durable) as f:
        f.write(data)


def write_text(path: Path | str, text: str, mode: int = PRIVATE_FILE, *, durable: bool = True) -> None:
    with writer(path, mode, text=True, durable=durable) as f:
        f.write(text)


def publish(staging: Path | str, target: Path | str, *, durable: bool = True) -> None:
    """Put a file or folder the caller wrote (and fsynced) in full under its final name, in one
    step (a file replaces one there; a folder may replace only an empty one), then fsync the
    folder it is in."""
    os.replace(staging, target)
    if durable:
        fsync_dir(Path(target).parent)


def append(path: Path | str, mode: int = PRIVATE_FILE) -> IO:
    """A log opened for binary appends, created with ``mode`` (0600) whatever the umask: not an
    atomic write, but the one place a log's mode is set, so no log starts world-readable."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # a file made earlier, with the umask's mode, is narrowed too
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def move(src: Path | str, dst: Path | str) -> None:
    """A rename that is not a write: a file or folder moved aside (into a graveyard, onto a
    version shelf). The caller fsyncs what it needs."""
    os.rename(src, dst)


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive flock on ``<path>.lock`` for a read-modify-write of ``path`` that other
    processes (another gateway, a CLI) may make at the same time; the kernel drops it if the
    holder dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def signature(path: Path | str) -> tuple | None:
    """What changes whenever a file written by ``write_text`` (replaced, never edited) is written
    again, by this process or another; None while there is none. One stat: cheap enough to ask
    on every request."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@contextlib.asynccontextmanager
async def locked_async(path: Path | str, timeout: float = 5.0) -> AsyncIterator[None]:
    """``locked`` for an event loop: it never blocks the loop while another process holds the
    lock, and gives up after ``timeout`` seconds with TimeoutError. A holder that is stopped
    (SIGSTOP) keeps its lock; waiting on it in the loop froze a second gateway whole, health
    checks included (fault injection, issue 43)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + timeout, 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if loop.time() >= deadline:
                    raise TimeoutError(f"{path.name} is locked by another process (a gateway that is stopped or slow) "
                                       f"for more than {timeout:g}s") from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.05)
        yield
    finally:
        os.close(fd)


class SharedJson:
    """A JSON value in one file that several processes (the gateways) change, each change a
    locked read-modify-write (``update``), and that each follows: ``read`` parses it again only
    when its signature changed. Missing or unreadable, it is ``empty()``."""

    def __init__(self, path: Path | str, empty: Callable[[], object] = dict):
        self.path, self._empty = Path(path), empty
        self._seen: tuple | None = ()  # the signature last read (() before any read)
        self._value = empty()

    def read(self):
        signature_now = signature(self.path)
        if signature_now != self._seen:
            self._seen = signature_now
            try:
                self._value = json.loads(self.path.read_text()) if signature_now is not None else self._empty()
            except (OSError, ValueError):
                self._value = self._empty()
        return self._value

    async def update(self, change: Callable[[object], object]):
        """``change(current)`` written back under the file's lock; returns what was written.
        TimeoutError when another process holds the lock for long (it is stopped)."""
        async with locked_async(self.path):
            self._seen = ()  # read what the others wrote, under the lock
            value = change(self.read())
            write_text(self.path, json.dumps(value, sort_keys=True))
            self._value, self._seen = value, signature(self.path)
        return value
