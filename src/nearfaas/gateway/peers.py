"""Many gateways over one state folder: who each is, what each owns, and taking over a dead one's.

Mechanism. A cluster runs ``gateway.replicas`` gateway processes named ``gw``, ``gw1``, ``gw2``, ...
(``gateway_ids``), every one serving the whole S3 and OpenFaaS API behind HAProxy
(cluster/balancer.py). What they share and what each owns:

- **Shared, on disk in ``<state>/gateway/``**: the function file, the namespaces file, the uid
  counter, counts set by hand (``scale.json``) and the storage nodes' store identities
  (``stores.json``): each change a locked read-modify-write that never blocks the event loop
  (``atomic.locked_async``), each file followed by every gateway (``FunctionsAPI.sync``,
  ``Namespaces.refresh``, ``OpenFaaSAPI.follow_forever``). Also the secrets folder and the keys
  file. **Shared, on the storage nodes**: objects, buckets, their options, owners and policies.
- **Owned, in ``own_dir(state, id)``**: the clock's ceiling (versions carry the gateway's id, so
  last-writer-wins stays one total order: replication/version.py), the hint journal (which the
  others read too, ``HintTail``: no read through any gateway answers older than a version some
  replica is owed), the async-call journal. A gateway holds an exclusive flock on
  ``owner.lock`` there for as long as it lives; the kernel lets go of it when the process dies,
  SIGKILL included.
- **Its own, in memory**: warm instances (each worker is tagged with the id of the gateway that
  started it, node/agent.py), autoscaling, in-flight calls.

Every ``interval_s`` each gateway tries each peer's lock without waiting (``PeerWatch``).
Getting it means that peer is dead. The survivor then, still holding it:
1. copies the peer's hints into its own journal, fsynced, and only then removes the peer's
   (a hint says "node N is owed key K at version V or newer": a second copy is harmless);
2. runs the peer's accepted async calls from the peer's own journal, with their call ids,
   until none is left (a journal is only ever run by the holder of its lock, so no call is run
   by two gateways at once, and each is marked done where it was accepted);
3. stops the workers the peer started (nobody routes calls to them any more);
and lets go. A restarted gateway waits for its own lock before it serves, so it never runs a
journal an adopter is still running.

Worked example: ``gw1`` accepts async call C (journaled in ``gateway/gw1/``) and a PUT whose
replica storage-1 is down (a hint, also there), then is SIGKILLed. HAProxy's health check takes
it out of rotation within about a second and clients that retry reach ``gw``. Within
``interval_s`` ``gw`` gets ``gw1``'s lock: the hint moves into ``gateway/hints.journal``, C runs
once (X-Call-Id unchanged), ``gw1``'s workers are stopped, and storage-1 gets the key when it is
back, from ``gw``'s replayer.

Known caveats:
- The shared state is a folder every gateway can reach: one host (``backend: local``). Gateways
  on several hosts would need it on the storage nodes or in a consensus store; the Ray backend
  runs one gateway.
- A gateway waiting on a peer's lock on the shared files (a peer stopped mid-change) gives up
  after a few seconds: that deploy, removal or namespace change is a 503 to retry
  (``atomic.locked_async``); nothing else waits.
- Each gateway keeps its own instances of a function (``scale.min`` and the autoscaler act per
  gateway), so a function may run up to N times the replicas one gateway would give it; a count
  set by hand is the cluster's, shared out (gateway/shared_scale.py). A secret's new value
  restarts the instances of the gateway that stored it at once, the others' within their next
  follow (0.2 s), when they notice the file changed (``SecretsAPI.noticed_changes``).
- A restarted gateway waits for an adopter still running its async calls (at most their
  timeouts and retries).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
from pathlib import Path

from nearfaas.gateway.async_queue import JOURNAL_NAME as ASYNC_JOURNAL, AsyncQueue
from nearfaas.replication.hints import JOURNAL_NAME as HINTS_JOURNAL, HintLog

FIRST_ID = "gw"  # a single gateway's id: its versions and files are what they were before there were many
LOCK_NAME = "owner.lock"


def gateway_ids(replicas: int) -> list[str]:
    return [FIRST_ID] + [f"gw{i}" for i in range(1, replicas)]


def own_dir(state_dir: Path, gateway_id: str) -> Path:
    """Where a gateway keeps what it owns: its clock ceiling and journals."""
    base = Path(state_dir) / "gateway"
    return base if gateway_id == FIRST_ID else base / gateway_id


def _log(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class OwnerLock:
    """The flock that says a gateway is alive and holds its journals."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = folder / LOCK_NAME
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    async def acquire(self, on_wait=lambda: None) -> None:
        """Wait for it (a peer may be running this gateway's journals after its death)."""
        if self.try_acquire():
            return
        on_wait()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


class PeerWatch:
    """Takes over the duties of any peer gateway that died (see the module's comment)."""

    def __init__(self, state_dir: Path, me: str, peers: list[str], hints: HintLog, clock, new_queue, stop_workers_of,
                 interval_s: float = 1.0):
        self.state_dir, self.me, self.peers = Path(state_dir), me, [p for p in peers if p != me]
        self.hints, self.clock = hints, clock
        self.new_queue = new_queue  # folder -> AsyncQueue running the calls journaled there
        self.stop_workers_of = stop_workers_of
        self.interval_s = interval_s

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            for peer in self.peers:
                try:
                    await self.check(peer)
                except Exception as exc:  # try again next round; a peer's files may be half written
                    _log("peer-adopt-failed", gateway=self.me, peer=peer, error=repr(exc))

    async def check(self, peer: str) -> bool:
        """Adopt ``peer``'s duties if it is dead; whether it was."""
        folder = own_dir(self.state_dir, peer)
        lock = OwnerLock(folder)
        if not lock.try_acquire():
            return False  # alive (or another survivor is adopting it)
        try:
            moved = await self._move_hints(folder)
            ran = await self._run_calls(folder)
            stopped = self.stop_workers_of(peer)
        finally:
            lock.release()
        if moved or ran or stopped:
            _log("peer-adopted", gateway=self.me, peer=peer, hints=moved, async_calls=ran, workers_stopped=stopped)
        return True

    async def _move_hints(self, folder: Path) -> int:
        journal = folder / HINTS_JOURNAL
        if not journal.exists() or journal.stat().st_size == 0:
            return 0
        theirs = HintLog(folder)
        theirs.load()
        owed = theirs.all()
        self.clock.observe(theirs.newest_version())
        for hint in owed:  # each fsynced into our journal before theirs goes
            if hint.void:
                await self.hints.void(hint.bucket, hint.object_key, hint.version)
            else:
                await self.hints.add(hint.node, hint.bucket, hint.object_key, hint.version, hint.options, upload=hint.upload)
        await theirs.close()
        journal.unlink()
        return len(owed)

    async def _run_calls(self, folder: Path) -> int:
        journal = folder / ASYNC_JOURNAL
        if not journal.exists() or journal.stat().st_size == 0:
            return 0
        queue: AsyncQueue = self.new_queue(folder)
        queue.start()
        resumed = len(queue.pending)
        try:
            while queue.pending:
                await queue.settled()
        finally:
            await queue.stop()
        return resumed
