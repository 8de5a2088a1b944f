"""The allocation shim's side in Python: where the built library is, how to run a process under
it, and its log read back as events (native/memshim/memshim.c writes them).

    events = run_logged(["python3", "-c", "import numpy; numpy.ones(10**6)"], log_dir)
    [e for e in events if e.op in ("malloc", "mmap")]   # size, addr, stack (hash)

With ``sample_ms`` the shim also samples the blocks' pages (native/memshim/sampler.c): ``touch``
events, each a run of pages written in one period, and, in a spatial sample of 64 KiB chunks,
``arm`` events (a chunk made to fault on its next access) and ``access`` events (a page read or
written since it was armed); each carries the stack of the block it lies in — the heat map
already joined with its allocations (``to_trace``).

An event's ``stack`` is a hash of the caller frames as (module, offset into it): the same call
site gives the same hash on every run, with ASLR on and whatever the sizes, which is what
Porter's hints are keyed by (``stack`` + size class → tier).

Known caveats:
* Only a process started with the library preloaded is seen, and only what goes through the
  C library's allocation calls (a raw syscall is not).
* The library is built by ``make setup`` (``make -C native/memshim``); without a C compiler it is
  absent and ``library_path`` raises ``ShimUnavailable`` naming the command that builds it.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NATIVE = Path(__file__).resolve().parents[3] / "native" / "memshim"
LIBRARY = "libnearfaas_memshim.so"
OPS = ("malloc", "calloc", "realloc", "free", "mmap", "munmap", "brk", "sbrk", "touch", "arm", "access",
       "fast", "slow", "promote", "demote", "full")
FULL = "0 full 0 0x0 0000000000000000\n"  # the shim's last line once its log reached NEARFAAS_MEMSHIM_MAX_BYTES
ALLOCATES = ("malloc", "calloc", "realloc", "mmap", "brk", "sbrk")
RELEASES = ("free", "munmap")
DEFAULT_THRESHOLD = 131072  # glibc's mmap threshold: blocks that own whole pages
PAGE = 4096


class ShimUnavailable(RuntimeError):
    """The shim library is not built here."""


class LogError(ValueError):
    """A malformed line in a shim log; the message names the line."""


@dataclass(frozen=True)
class Event:
    t_ns: int
    op: str
    size: int
    addr: int
    stack: str  # 16 hex digits, stable across runs

    @property
    def releases(self) -> bool:
        return self.op in RELEASES


def library_path() -> Path:
    lib = Path(os.environ.get("NEARFAAS_MEMSHIM_LIBRARY") or NATIVE / "build" / LIBRARY)
    if not lib.is_file():
        raise ShimUnavailable(f"the memory shim is not built ({lib} is missing): run `make setup` "
                              f"or `make -C {NATIVE}` (needs a C compiler)")
    return lib


DEFAULT_MAX_BYTES = 64 << 20  # a profiled worker's log stops here (the node's disk is shared)


DEFAULT_ACCESS_PAGES = 32  # faults per period the sampler aims at: ~10 us each here (docs/memory.md)


def shim_env(log_path: Path, threshold: int = DEFAULT_THRESHOLD, base: dict | None = None, sample_ms: int = 0,
             max_bytes: int = DEFAULT_MAX_BYTES, access_pages: int = DEFAULT_ACCESS_PAGES) -> dict:
    """``base`` (default: this process's environment) plus what preloads the shim, names its log
    (capped at ``max_bytes``) and, with ``sample_ms`` > 0, turns on sampling every that many
    milliseconds: writes, and accesses to at most ``access_pages`` armed pages a period (0: writes
    only)."""
    env = dict(os.environ if base is None else base)
    preload = " ".join(p for p in (str(library_path()), env.get("LD_PRELOAD", "")) if p)
    return env | {"LD_PRELOAD": preload, "NEARFAAS_MEMSHIM_LOG": str(log_path),
                  "NEARFAAS_MEMSHIM_THRESHOLD": str(int(threshold)), "NEARFAAS_MEMSHIM_SAMPLE_MS": str(int(sample_ms)),
                  "NEARFAAS_MEMSHIM_MAX_BYTES": str(int(max_bytes)),
                  "NEARFAAS_MEMSHIM_ACCESS_PAGES": str(int(access_pages))}


def run_logged(argv: list[str], log_path: Path, threshold: int = DEFAULT_THRESHOLD, timeout: float = 60,
               sample_ms: int = 0, access_pages: int = DEFAULT_ACCESS_PAGES,
               **kwargs) -> tuple[subprocess.CompletedProcess, list[Event]]:
    """Run ``argv`` under the shim, a fresh log at ``log_path``; (the finished process, its events)."""
    log_path = Path(log_path)
    log_path.unlink(missing_ok=True)
    proc = subprocess.run(argv, env=shim_env(log_path, threshold, kwargs.pop("env", None), sample_ms,
                                             access_pages=access_pages),
                          capture_output=True, text=True, timeout=timeout, check=False, **kwargs)
    return proc, read_log(log_path) if log_path.exists() else []


def read_log(path: Path, max_bytes: int | None = None) -> list[Event]:
    """The events of a shim log, in the order written (the first ``max_bytes``, whole lines;
    a last line cut short by a writer still running is left out, and so is the shim's "full"
    marker: ``log_full`` tells whether it stopped early)."""
    events = []
    read = 0
    with open(path, encoding="ascii", errors="replace") as f:
        for n, line in enumerate(f, 1):
            read += len(line)
            if (max_bytes is not None and read > max_bytes) or not line.endswith("\n"):
                break
            event = parse_line(line, f"{path}:{n}")
            if event.op != "full":
                events.append(event)
    return events


def log_full(path: Path) -> bool:
    """Whether the shim stopped writing ``path`` at its size cap (its last line is the marker)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - len(FULL)))
            return f.read().decode("ascii", "replace") == FULL
    except OSError:
        return False


def parse_line(line: str, where: str = "line") -> Event:
    parts = line.split()
    if len(parts) != 5:
        raise LogError(f"{where}: expected '<t_ns> <op> <size> <addr> <stack>', got {line.strip()[:80]!r}")
    t, op, size, addr, stack = parts
    if op not in OPS:
        raise LogError(f"{where}: unknown op {op!r}; the shim writes {', '.join(OPS)}")
    try:
        event = Event(int(t), op, int(size), int(addr, 16), stack)
    except ValueError:
        raise LogError(f"{where}: a number does not parse in {line.strip()[:80]!r}") from None
    if len(stack) != 16 or any(ch not in "0123456789abcdef" for ch in stack):
        raise LogError(f"{where}: the stack hash must be 16 hex digits, got {stack!r}")
    return event


def live_objects(events: list[Event]) -> dict[int, Event]:
    """The blocks still allocated at the end of the log, by address (a release drops its block)."""
    live: dict[int, Event] = {}
    for e in events:
        if e.releases:
            live.pop(e.addr, None)
        elif e.op in ALLOCATES:
            live[e.addr] = e
    return live


def to_trace(events: list[Event], period_ms: float, base_s: float = 1.0, boundness: float = 0.5,
             start_ns: int | None = None, end_ns: int | None = None, source: str = "auto"):
    """A ``tiersim.Trace`` from a sampled log: one epoch per ``period_ms`` of the window
    [start_ns, end_ns] (default: the whole log); pages owned by the stack that allocated them.

    ``source``: ``access`` — the access sample (``arm``/``access`` lines, ``_access_epochs``):
    the footprint is the sampled pages, a stratified sample of every block, so shares over it
    stand for the whole; ``writes`` — every page written (``touch`` lines), counted once per
    epoch, over a footprint of every page of every block live in the window, written or not;
    ``auto`` (default) — the access sample if the log has one."""
    from nearfaas.memory.tiersim import Trace

    if not events:
        return Trace(epochs=[], owner={}, base_s=base_s, boundness=boundness)
    if source == "auto":
        source = "access" if any(e.op == "arm" for e in events) else "writes"
    if source not in ("access", "writes"):
        raise ValueError(f"source: access, writes or auto, got {source!r}")
    start = events[0].t_ns if start_ns is None else start_ns
    end = events[-1].t_ns if end_ns is None else end_ns
    step = max(1, int(period_ms * 1e6))
    n = max(0, end - start) // step + 1
    if source == "access":
        epochs, owner = _access_epochs(events, start, end, step, n)
        # first touch: the order blocks were first armed in, which is their allocation order (a
        # first *observed* access would put the hot pages first and flatter first-touch)
        return Trace(epochs=epochs, owner=owner, base_s=base_s, boundness=boundness, first_touch=tuple(owner))
    epochs: list[dict[int, float]] = [{} for _ in range(n)]
    owner: dict[int, str] = {}
    live: dict[int, Event] = {}
    for e in events:
        if e.t_ns > end:
            break
        if e.releases:
            block = live.pop(e.addr, None)
            if block is not None and e.t_ns < start:
                for page in _pages(block):
                    owner.pop(page, None)
        elif e.op in ALLOCATES:
            live[e.addr] = e
            owner.update(dict.fromkeys(_pages(e), e.stack))
        elif e.op == "touch" and e.t_ns >= start:
            for page in _pages(e):
                epochs[(e.t_ns - start) // step][page] = 1
                owner.setdefault(page, e.stack)
    return Trace(epochs=epochs, owner=owner, base_s=base_s, boundness=boundness)


def _access_epochs(events: list[Event], start: int, end: int, step: int, n: int):
    """Epochs from the access sample. A page is *watched* from the arming of its chunk to its
    next access (then it is home until armed again): while watched, each epoch is an
    observation — accessed (1) in the epoch of the access, not accessed (0) before it. An epoch
    in which a page was not watched is estimated at the page's observed rate (accessed
    observations / observations), or its call stack's where the page has none; nothing after
    its block is released. Pages of blocks released before the window are left out."""
    observed: dict[int, dict[int, int]] = {}
    watched: dict[int, int] = {}  # page -> first epoch it is watched in (may be before the window)
    gone: dict[int, int] = {}  # page -> the epoch its block was released in (nothing estimated after)
    owner: dict[int, str] = {}
    live: dict[int, Event] = {}
    epoch = lambda t: (t - start) // step  # noqa: E731

    def close(page: int, upto: int) -> None:  # watched until epoch `upto` (exclusive), not accessed
        since = watched.pop(page)
        marks = observed.setdefault(page, {})
        for i in range(max(0, since), min(n, upto)):
            marks.setdefault(i, 0)

    for e in events:
        if e.t_ns > end:
            break
        if e.releases:
            block = live.pop(e.addr, None)
            for page in _pages(block) if block is not None else ():
                if page in watched:
                    close(page, epoch(e.t_ns) + 1)
                gone[page] = epoch(e.t_ns)
                if e.t_ns < start:
                    owner.pop(page, None)
                    observed.pop(page, None)
        elif e.op in ALLOCATES:
            live[e.addr] = e
        elif e.op == "arm":
            for page in _pages(e):
                owner[page] = e.stack
                gone.pop(page, None)  # a new block at the same address
                watched.setdefault(page, epoch(e.t_ns))
        elif e.op == "access":
            page = e.addr // PAGE
            owner.setdefault(page, e.stack)
            i = epoch(e.t_ns)
            if page in watched:
                close(page, i)
            if 0 <= i < n:
                observed.setdefault(page, {})[i] = 1
    for page in list(watched):
        close(page, n)
    rate = {p: sum(m.values()) / len(m) for p, m in observed.items() if m}
    by_block: dict[str, list[float]] = {}
    for p, r in rate.items():
        by_block.setdefault(owner.get(p, "?"), []).append(r)
    block_rate = {k: sum(v) / len(v) for k, v in by_block.items()}
    epochs: list[dict[int, float]] = [{} for _ in range(n)]
    for page, who in owner.items():
        marks = observed.get(page, {})
        guess = rate.get(page, block_rate.get(who, 0.0))
        for i in range(min(n, gone.get(page, n - 1) + 1)):
            value = marks.get(i, guess)
            if value:
                epochs[i][page] = value
    return epochs, owner


def _pages(e: Event) -> range:
    first = e.addr // PAGE
    return range(first, (e.addr + max(1, e.size) + PAGE - 1) // PAGE)
