"""Pre-warmed generic workers of one node (the worker side is runtime/prewarm.py).

Most of a cold start (~280 ms here) is starting an interpreter and importing aiohttp, uvloop
and the runtime, none of which depends on the function. So the node keeps ``target``
interpreters that have done that already, idle, each blocked on its stdin; a cold start hands
one a specialisation message instead of spawning (node/pool.py), and the pool is refilled in
the background.

A generic worker runs as root, unconfined, until it is specialised: it runs only our code until
then, and enters the function's jail (node/jail.py) before it imports any of the function's.
Its end of the object socket (node/objectfds.py) is made when it is spawned; the node lets it
read buckets only once it knows the function. It also joins cgroups of its own when it starts
(default limits until it is specialised, then the function's): a cgroup v1 memory join waits
for an RCU grace period (5-20 ms here), which would otherwise land on the cold start.

Idle generic workers do not count against ``workers_max``: they run no function, hold ~40 MB
RSS each and ``target`` is small (default 1). One that is taken becomes an ordinary worker and
counts from then on.

A function gets a freshly spawned interpreter instead when its environment sets a variable that
only takes effect at interpreter start (``fresh_interpreter_reason``), when its requirements
(requirements.txt or ``x-nearfaas.requirements``) provide a module the generic worker has
already imported (``shadowed_modules``: the function must get its own copy, as a spawned
worker would, never the runtime's already in memory), or when no generic worker is idle (a
burst beyond ``target``). A specialised worker enters the function's jail with a fresh /tmp of
its own (node/jail.py); a generic worker has written nothing there.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from nearfaas import atomic
from nearfaas.cgroups import join as join_cgroup
from nearfaas.node import jail
from nearfaas.node.objectfds import Channel, ObjectFdServer
from nearfaas.node.procs import kill_group, spawn_with_ready_pipe

WARM_TIMEOUT_S = 60.0
# An idle generic worker is blocked reading its stdin, so it acknowledges a message at once;
# the limit only matters for one that is stopped (SIGSTOP) or hopelessly starved of CPU.
TAKEN_TIMEOUT_S = 10.0
# Generic workers that keep failing (a broken environment, a handler that kills its process
# group...) are retried after a growing delay, so a fault cannot make the node spawn in a loop.
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 30.0

# Read once, when an interpreter (or the C library, or a C extension the runtime has already
# imported) starts: setting them after start-up would not do what the function asked for.
START_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_")
START_NAMES = frozenset({"LANG", "GLIBC_TUNABLES"})
START_SUFFIXES = ("_NO_EXTENSIONS",)  # aiohttp, yarl, multidict, frozenlist, propcache: read at import


def fresh_interpreter_reason(function_env: dict, base_env: dict) -> str | None:
    """Why a function must get a freshly spawned interpreter, or None when a generic one will do.

    Only variables the function sets to a value other than the generic workers' own matter.
    """
    for key, value in function_env.items():
        key = str(key)
        if base_env.get(key) == str(value):
            continue
        if key.startswith(START_PREFIXES) or key in START_NAMES or key.endswith(START_SUFFIXES):
            return f"its environment sets {key}, which takes effect only when an interpreter starts"
    return None


def shadowed_modules(extra_path: str, imported: frozenset[str]) -> list[str]:
    """Top-level modules a requirements install provides that a generic worker has already
    imported (a spawned worker would have found the install's copy first on PYTHONPATH): a
    package folder, a single-file module or an extension (``name.cpython-311-....so``)."""
    try:
        entries = os.listdir(extra_path)
    except OSError:
        return []
    provided = {e.partition(".")[0] for e in entries
                if not e.endswith((".dist-info", ".egg-info", ".pth")) and e not in ("bin", "__pycache__")}
    return sorted(provided & imported)


@dataclass
class GenericWorker:
    process: asyncio.subprocess.Process
    ready: asyncio.StreamReader       # the ready pipe: WARM now, READY/FAILED once specialised
    transport: asyncio.BaseTransport  # closing it closes the pipe
    channel: Channel | None = None    # its object socket, on a storage node
    cgroups: list = field(default_factory=list)  # joined at spawn; handed to the worker it becomes
    modules: frozenset[str] = frozenset()
    warm_since: float = field(default_factory=time.time)

    def discard(self) -> None:
        kill_group(self.process)
        self.transport.close()
        if self.channel is not None:
            self.channel.close()
        if self.process.stdin is not None:
            self.process.stdin.close()


class PrewarmPool:
    def __init__(self, target: int, node_dir: Path, env: dict, log_path: Path, fds: ObjectFdServer | None = None,
                 cgroups: jail.Cgroups | None = None):
        self.target = max(0, target)
        self.node_dir = node_dir
        self.env = env            # the generic workers' environment; a function's is this plus its own
        self.log_path = log_path  # their output until they are specialised (start-up errors land here)
        self.fds = fds            # the node's object fd server, on a storage node
        self.cgroups = cgroups    # when isolated
        self._cleanups: set[asyncio.Task] = set()  # cgroup removals waiting for their process to exit
        self.idle: list[GenericWorker] = []
        self.starting = 0
        self.replaced = 0         # idle generic workers that died and were replaced
        self._failures = 0
        self._retry: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    def describe(self) -> dict:
        return {"target": self.target, "idle": len(self.idle), "starting": self.starting, "replaced": self.replaced,
                "idle_pids": [w.process.pid for w in self.idle]}

    def fill(self) -> None:
        """Start generic workers until ``target`` are idle or on their way (from the event loop)."""
        if self._closed or self._retry is not None:
            return
        loop = asyncio.get_running_loop()
        for _ in range(self.target - len(self.idle) - self.starting):
            self.starting += 1
            task = loop.create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def take(self, function_env: dict, extra_path: str | None,
             requirements: str = "requirements.txt") -> tuple[GenericWorker | None, str | None]:
        """An idle generic worker for a function, or None and why it must be spawned instead.
        ``extra_path`` is the function's requirements env, installed from ``requirements``."""
        if not self.target:
            return None, "prewarm is 0 on this node"
        reason = fresh_interpreter_reason(function_env, self.env)
        if reason:
            return None, reason
        while self.idle:
            generic = self.idle[0]
            if generic.process.returncode is not None:  # died a moment ago; its watcher replaces it
                self.idle.pop(0)
                continue
            clash = shadowed_modules(extra_path, generic.modules) if extra_path else []
            if clash:
                return None, f"its {requirements} provides {clash[0]!r}, which a generic worker has already imported"
            self.idle.pop(0)
            self._failures = 0  # a worker that was good enough to use: failures are not piling up
            return generic, None
        return None, "no pre-warmed worker was idle"

    async def hand_over(self, generic: GenericWorker, message: dict) -> bool:
        """Send the specialisation message and wait for the worker's ``TAKEN``. False when it
        never took it (it died a moment before, say): the caller spawns instead, since the loss
        is the pool's, not the function's. Whatever happens after ``TAKEN`` is the function's."""
        if message.get("log"):  # from now on its output is the function's (it never holds the file: worker_logs.LogPipe)
            generic.process.log_pipe.retarget(message["log"])
        try:
            generic.process.stdin.write(json.dumps(message).encode() + b"\n")
            await generic.process.stdin.drain()
            generic.process.stdin.close()
            line = await asyncio.wait_for(generic.ready.readline(), TAKEN_TIMEOUT_S)
        except (BrokenPipeError, ConnectionResetError, RuntimeError, TimeoutError):
            line = b""
        if line != b"TAKEN\n":
            if line:
                self._note(f"generic worker {generic.process.pid} refused its message: {line[:300]!r}")
            generic.discard()
            return False
        return True

    async def shutdown(self) -> None:
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        idle, self.idle = self.idle, []
        for generic in idle:
            generic.discard()  # SIGKILL: an idle generic worker holds nothing worth a clean exit
        await asyncio.gather(*(g.process.wait() for g in idle))
        await asyncio.gather(*self._cleanups, return_exceptions=True)

    # -- internals -------------------------------------------------------------------------------
    async def _start_one(self) -> None:
        generic = None
        ok = False
        try:
            generic = await self._launch()
            line = await asyncio.wait_for(generic.ready.readline(), WARM_TIMEOUT_S)
            if not line.startswith(b"WARM "):
                raise RuntimeError(f"a generic worker did not warm up (said {line[:200]!r}); see {self.log_path}")
            generic.modules = frozenset(json.loads(line[5:]))
            generic.warm_since = time.time()
            ok = True
        except (OSError, ValueError, RuntimeError, TimeoutError) as exc:
            self._note(f"generic worker failed to start: {type(exc).__name__}: {exc}")
        finally:
            self.starting -= 1
            if generic is not None and (not ok or self._closed):
                generic.discard()
        if not ok:
            self._failed()
        elif not self._closed:
            self.idle.append(generic)
            task = asyncio.get_running_loop().create_task(self._watch(generic))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _launch(self) -> GenericWorker:
        channel = self.fds.open_channel() if self.fds is not None else None
        cgroups = self.cgroups.create(f"prewarm-{uuid.uuid4().hex[:8]}", jail.limits_of({})) if self.cgroups else []
        process = None
        try:
            process, reader, transport = await spawn_with_ready_pipe(
                [sys.executable, "-P", "-m", "nearfaas.runtime.prewarm", "--node-dir", str(self.node_dir),
                 *(part for folder in cgroups for part in ("--cgroup", folder))],
                log_path=self.log_path, env=self.env, cwd=str(self.node_dir), stdin=asyncio.subprocess.PIPE,
                extra_fds=(channel.child_fd,) if channel else ())
            # Its CPU groups now, before its imports (~0.4 s of CPU): the agent's group has the
            # priority inside a capped node (node/capacity.py), and the imports must not share it.
            # A join of cpu / cpuacct costs no RCU wait; the child still joins every group itself.
            for folder in self.cgroups.cpu_groups(cgroups) if self.cgroups else ():
                join_cgroup(folder, process.pid)
        except BaseException:
            if process is not None:
                transport.close()
                process.kill()
                await process.wait()
            if channel is not None:
                self.fds.close_channel(channel)
            jail.remove_cgroups(cgroups)
            raise
        if channel is not None:
            channel.release_child()
        generic = GenericWorker(process, reader, transport, channel, cgroups)
        task = asyncio.get_running_loop().create_task(self._remove_cgroups_after_exit(generic))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return generic

    async def _remove_cgroups_after_exit(self, generic: GenericWorker) -> None:
        await generic.process.wait()
        for _ in range(50):  # a taken generic worker's groups were handed on (its list emptied)
            generic.cgroups = jail.remove_cgroups(generic.cgroups)
            if not generic.cgroups:
                return
            await asyncio.sleep(0.02)

    async def _watch(self, generic: GenericWorker) -> None:
        code = await generic.process.wait()
        if generic in self.idle:  # died while idle (killed, out of memory): replace it
            self.idle.remove(generic)
            generic.discard()
            self.replaced += 1
            self._note(f"idle generic worker {generic.process.pid} exited with code {code}; replacing it")
            self._failed()

    def _failed(self) -> None:
        if self._closed:
            return
        self._failures += 1
        delay = 0.0 if self._failures == 1 else min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (self._failures - 2))
        if self._retry is not None:
            self._retry.cancel()
        self._retry = asyncio.get_running_loop().call_later(delay, self._retry_fill)

    def _retry_fill(self) -> None:
        self._retry = None
        self.fill()

    def _note(self, text: str) -> None:
        try:
            with atomic.append(self.log_path) as log:
                log.write((json.dumps({"timestamp": time.time(), "event": "prewarm", "text": text}) + "\n").encode())
        except OSError:
            pass
