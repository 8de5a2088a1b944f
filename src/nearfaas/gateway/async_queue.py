"""Async calls that survive a gateway restart: a write-ahead journal under a bounded queue.

Mechanism. ``POST /async-function/<name>`` and object-PUT triggers hand the gateway a call to run
later. Before the 202 goes out, the call is appended to ``<state>/gateway/async-queue.journal``
(nearfaas/journal.py) and the file is ``fsync``ed. Its records:

    {"t": "h", "next": 18}                         header of a compacted file: the next key
    {"t": "a", "k": 17, "c": "<call id>", ...}     accepted: everything needed to run the call
    {"t": "s", "k": 17, "at": 2}                   attempt 2 started (written before it runs)
    {"t": "d", "k": 17, "at": 2, "st": 200, ...}   done: it ran and its callback was delivered
                                                   (or finally failed)

Writers do not fsync one by one: records wait in a buffer and one flush task writes and fsyncs
whatever has gathered, in a thread, so 100 concurrent 202s cost a few fsyncs, not 100 (group
commit). Attempt and done records are written without an fsync of their own: a killed gateway
keeps them (they are in the page cache), the next accept's fsync or the one at close makes them
durable. At start-up (``start()``) the journal is replayed: every call with no done record is
queued again with its call id and attempt count, the file is rewritten with only those calls
(compaction, which also drops a torn tail) and consumers start. Compaction runs again whenever
the file passes ``compact_bytes`` and is more than half dead records.

Delivery is at least once: a call is marked done only after it ran and its callback was
delivered or finally failed. A call that was running when the gateway died runs again after the
restart with the SAME ``X-Call-Id`` and the next ``X-Call-Attempt`` (sent to the function and to
the callback), so either can deduplicate. On a clean stop (SIGTERM, what ``nearfaas down``
sends) consumers take no new call and running ones get ``grace_s`` to finish and be marked done;
queued calls simply stay in the journal.

Worked example::

    q = AsyncQueue(chains, metrics, state_dir / "gateway", depth=2)
    q.start()                               # replays the journal, resumes what was not done
    await q.submit({"name": "thumb", "path": "/", "query": "", "headers": {}, "body": b"{}",
                    "call_id": "abc-1", "callback": None})   # durable on return -> 202
    await q.submit(...); await q.submit(...)                  # third: asyncio.QueueFull -> 429
    # kill -9 the gateway here; after `nearfaas up` "abc-1" runs as attempt 1, or as attempt 2
    # (same X-Call-Id) if it had started

Known caveats:
- A call that outlives ``grace_s`` at shutdown is cancelled and runs again after the restart
  (the function may have run to completion in its worker meanwhile): exactly once holds only for
  calls that finish within the grace. A call still waiting for an instance when the drain begins
  (a cold start, a free slot) is never handed to a worker (``errors.MAY_START``): it stays
  pending, so the grace is spent only on calls that had started. Seen in CI under load: one
  such call started late in the grace, was cut off after it had written, and ran twice.
- The gateway stops listening before its cleanup runs, so a function that calls back into the
  gateway (S3) during the grace fails. A call that ends in a 5xx (or a 429) during the drain is
  therefore not marked done and runs again after the restart (a second run if it had written
  something before failing). Calling ``queue.drain()`` in app.py's ``serve()`` before the server
  is closed lets such calls finish instead.
- A machine crash (not a process kill) can lose attempt and done records written since the last
  fsync: a done call then runs again, and a rerun may repeat an attempt number.
- Trigger calls (``submit_nowait``) are made durable just after the PUT that caused them is
  answered (the S3 front end's hook is synchronous): a crash in that window loses the trigger.
- The request headers are kept (they are forwarded to the function) except ``Authorization``
  and ``Cookie``: credentials are checked at accept time and never written to disk.
- Bodies are held in memory as well as in the journal, so the queue has a byte budget
  (``gateway.async_max_bytes``, 256 MiB by default) and each client a quarter of it (a client is
  a verified identity or, without credentials, a peer address: gateway/api/invoke.py); past
  either the call is a 429 naming the setting. Without it 500 calls of 7.5 MB from anyone took
  the gateway from 0.3 to 3.7 GB, and to 11 GB while draining (a compaction copies every queued
  body, base64'd, at once): both are now a small multiple of the budget. Calls resumed from the
  journal at start-up count against the global budget (they may exceed it, if it was lowered).
- A journal write that fails (disk full) answers the client 503 and is rolled back (truncated),
  so the file stays well formed; calls already accepted are unaffected.
- Callbacks go out through the egress client (nearfaas/egress.py): no signing middleware, no
  credentials, no default headers, no redirects followed, and only to destinations its policy
  allows. The callback URL is the caller's input: on the session that calls the nodes (which
  signs every request to a node's ``/_nearfaas/`` API, auth/internal.py) an X-Callback-Url naming
  a node's internal API made the node obey, and even unsigned, loopback and private addresses
  reach ports no caller should. A callback to loopback, a private or link-local range or the
  cluster's own ports is refused unless the cluster file names it in ``gateway.egress_allow``:
  it is never sent, the call's outcome is ``refused: <why>`` (journal and ``async-done`` log).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from multidict import CIMultiDict

from nearfaas.egress import EgressClient, EgressRefused
from nearfaas.gateway.errors import MAY_START, CallError
from nearfaas.journal import Journal

JOURNAL_NAME = "async-queue.journal"
# Credentials are checked when a call is accepted; they must not sit in a file for later.
_UNPERSISTED_HEADERS = {"authorization", "cookie"}
# The invoker answers these itself when it could not run the call at all (no node, function at
# its limit): safe to try again, since the function never ran.
_NOT_RUN = {429, 503}
RUN_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
CALLBACK_RETRY_DELAYS_S = (1.0, 3.0)
# Bytes of queued bodies held in memory (gateway.async_max_bytes), and the share one client may hold.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
CLIENT_SHARE = 4


def _log(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


class BudgetSpent(CallError):
    """The queued bodies' byte budget (all clients', or this client's share) is spent: 429."""

    def __init__(self, message: str):
        super().__init__(429, message, "gateway", {"Retry-After": "1"})


class JournalError(CallError):
    """The journal could not be written: the call was not accepted (503 to the client)."""

    def __init__(self, message: str):
        super().__init__(503, message, "gateway", {"Retry-After": "1"})


@dataclass
class Call:
    key: int  # the journal's own id: a client may send the same X-Call-Id twice
    call_id: str
    name: str
    path: str
    query: str
    headers: dict
    body: bytes
    callback: str | None
    accepted: float
    attempts: int = 0
    client: str = ""  # whose byte budget it counts against (not persisted: resumed calls count globally)

    @classmethod
    def from_item(cls, key: int, item: dict) -> Call:
        headers = {k: v for k, v in dict(item.get("headers") or {}).items() if k.lower() not in _UNPERSISTED_HEADERS}
        return cls(key, item["call_id"], item["name"], item.get("path", "/"), item.get("query", ""), headers,
                   bytes(item.get("body") or b""), item.get("callback"), time.time(), client=str(item.get("client") or ""))

    def record(self) -> dict:
        return {"t": "a", "k": self.key, "c": self.call_id, "n": self.name, "p": self.path, "q": self.query, "h": self.headers,
                "b": base64.b64encode(self.body).decode(), "cb": self.callback, "ts": self.accepted, "at": self.attempts}

    @classmethod
    def from_record(cls, r: dict) -> Call:
        return cls(int(r["k"]), str(r["c"]), str(r["n"]), str(r["p"]), str(r["q"]), dict(r["h"]), base64.b64decode(r["b"]),
                   r.get("cb"), float(r.get("ts", 0.0)), int(r.get("at", 0)))

    @classmethod
    def from_records(cls, records: list[dict]) -> Call | None:
        """The call a journal entry's records describe: its accept record (the last one, if a
        compaction wrote it twice), with the highest attempt any record started."""
        accepts = [r for r in records if r["t"] == "a"]
        if not accepts:
            return None  # its accept record was torn: nothing to run
        call = cls.from_record(accepts[-1])
        call.attempts = max([call.attempts] + [int(r["at"]) for r in records if r["t"] in ("a", "s")])
        return call


class AsyncQueue:
    """Async invocations: persisted, answered 202, run by a bounded set of consumers."""

    def __init__(self, calls, metrics, journal_dir: Path, depth: int = 10_000, consumers: int = 16,
                 grace_s: float = 3.0, compact_bytes: int = 4 * 1024 * 1024, egress: EgressClient | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        # Callbacks never go out on a session of the caller's (the gateway's node session signs
        # internal calls), only through the egress client; the gateway gives it the cluster's
        # policy (gateway.egress_allow, its own ports). Without one: the strictest policy.
        self.calls, self.metrics = calls, metrics
        self.egress = egress or EgressClient()
        self.journal = Journal(Path(journal_dir) / JOURNAL_NAME, compact_bytes, error=JournalError, name="async-journal")
        # What a compaction keeps: calls whose accept record is on disk and whose done record is
        # not (journal.live). ``pending`` alone would not do: a call stays in it until its
        # consumer resumes, a moment after its done record was written.
        self.journal.snapshot = lambda: [c.record() for c in self.pending.values() if c.key in self.journal.live]
        self.depth, self.consumers, self.grace_s = depth, consumers, grace_s
        self.pending: dict[int, Call] = {}  # accepted and not done: waiting, running, or being persisted
        self.ready: asyncio.Queue[int] = asyncio.Queue()
        self.tasks: list[asyncio.Task] = []
        self._busy: set[asyncio.Task] = set()
        self._closing = False
        # Bodies of the calls in ``pending`` (the memory they hold): all together and per client.
        self.max_bytes = max_bytes  # gateway.async_max_bytes; a client may hold a quarter of it
        self.bytes = 0
        self.client_bytes: dict[str, int] = {}
        self._left: asyncio.Event | None = None  # set when a call leaves ``pending`` (settled)

    @property
    def max_client_bytes(self) -> int:
        return self.max_bytes // CLIENT_SHARE

    def start(self) -> None:
        """Replay the journal, queue what was not done, start the consumers."""
        resumed = self.journal.load(Call.from_records, Call.record)
        for call in resumed:
            self.pending[call.key] = call
            self.bytes += len(call.body)
            self.ready.put_nowait(call.key)
        self.metrics.async_queue.set(len(self.pending))
        if resumed:
            self.metrics.async_resumed.inc(len(resumed))
            _log("async-resumed", calls=len(resumed), journal=str(self.journal.path))
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._consume()) for _ in range(self.consumers)]

    def _admit(self, item: dict) -> Call:
        if self._closing:
            raise JournalError("the gateway is shutting down; retry")
        if len(self.pending) >= self.depth:  # persisted calls count: a restart cannot overfill it
            raise asyncio.QueueFull
        size, client = len(item.get("body") or b""), str(item.get("client") or "")
        if self.max_bytes and self.bytes + size > self.max_bytes:
            raise BudgetSpent(f"the async queue holds {self.bytes} bytes of bodies; this {size}-byte call would pass its limit "
                              f"(gateway.async_max_bytes={self.max_bytes}); retry when queued calls have run")
        held = self.client_bytes.get(client, 0)
        if self.max_bytes and client and held + size > self.max_client_bytes:
            raise BudgetSpent(f"this client ({client}) has {held} bytes of async calls queued; this {size}-byte call would pass "
                              f"its share, {self.max_client_bytes} bytes (a 1/{CLIENT_SHARE} of gateway.async_max_bytes="
                              f"{self.max_bytes}); retry when its queued calls have run")
        call = Call.from_item(self.journal.new_key(), item)
        self.pending[call.key] = call
        self.bytes += size
        if client:
            self.client_bytes[client] = held + size
        self.metrics.async_queue.inc()
        return call

    def _settle(self, call: Call, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            self._forget(call)
            if not future.cancelled():
                _log("async-not-persisted", call_id=call.call_id, function=call.name, error=str(future.exception()))
        else:
            self.ready.put_nowait(call.key)  # only a durable call may run

    async def settled(self) -> None:
        """Wait until some pending call is done (or dropped): how a gateway that runs a dead
        peer's journal knows when it has run dry (gateway/peers.py)."""
        self._left = asyncio.Event()
        await self._left.wait()

    def _forget(self, call: Call) -> None:
        if self._left is not None:
            self._left.set()
        if self.pending.pop(call.key, None) is not None:
            self.metrics.async_queue.dec()
            self.bytes -= len(call.body)
            if call.client:
                left = self.client_bytes.get(call.client, 0) - len(call.body)
                if left > 0:
                    self.client_bytes[call.client] = left
                else:  # the table does not grow with clients gone
                    self.client_bytes.pop(call.client, None)

    def _accept(self, item: dict) -> tuple[Call, asyncio.Future]:
        """Admit a call and queue its record for the journal; the future settles once it is on disk."""
        call = self._admit(item)
        try:
            return call, self.journal.append_nowait(call.record())
        except JournalError:
            self._forget(call)
            raise

    async def submit(self, item: dict) -> None:
        """Accept a call; on return it is on disk. Raises QueueFull (429), BudgetSpent (429) or
        JournalError (503)."""
        call, future = self._accept(item)
        try:
            await asyncio.shield(future)  # a client that hangs up does not undo the write
        finally:
            if future.done():
                self._settle(call, future)
            else:
                future.add_done_callback(lambda f: self._settle(call, f))
        # _settle has put it on the ready queue, or forgotten it and the exception propagates.

    def submit_nowait(self, item: dict) -> None:
        """Accept a call from synchronous code (object triggers); it is durable moments later."""
        call, future = self._accept(item)
        future.add_done_callback(lambda f: self._settle(call, f))

    # -- running ---------------------------------------------------------------------------------
    async def _consume(self) -> None:
        task = asyncio.current_task()
        MAY_START.set(lambda: not self._closing)  # this task's context only: its calls start only until the drain
        while not self._closing:
            key = await self.ready.get()
            call = self.pending.get(key)
            if call is None:
                continue
            self._busy.add(task)
            try:
                await self._run(call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a callback target that misbehaves must not kill the consumer
                _log("async-error", call_id=call.call_id, function=call.name, error=repr(exc))
            finally:
                self._busy.discard(task)

    async def _mark(self, record: dict, call: Call) -> None:
        # Written, not fsynced: a killed gateway keeps what it wrote (the page cache survives the
        # process); only a machine crash before the next fsync (the next accept's, or the one at
        # close) could lose it, and then the call runs again (at least once) under a repeated
        # attempt number. An fsync here would cost every 202 about one more fsync of waiting.
        try:
            await self.journal.append(record, sync=False)
        except JournalError as exc:  # run it anyway: at worst it runs again after a restart
            _log("async-journal-write-failed", call_id=call.call_id, record=record["t"], error=str(exc))

    async def _run(self, call: Call) -> None:
        started = time.perf_counter()
        for delay in (*RUN_RETRY_DELAYS_S, None):
            call.attempts += 1
            await self._mark({"t": "s", "k": call.key, "at": call.attempts}, call)
            headers = {**call.headers, "X-Call-Attempt": str(call.attempts)}
            try:
                result = await self.calls.invoke(call.name, "POST", call.path, call.query, headers, call.body, call.call_id)
                status, headers, body = result.status, result.headers, result.body
                break
            except CallError as exc:
                status, headers, body = exc.status, {"X-Nearfaas-Layer": exc.layer}, (str(exc) + "\n").encode()
                if exc.status not in _NOT_RUN or delay is None or self._closing:
                    break
                await asyncio.sleep(delay)
        if self._closing and (status >= 500 or status in _NOT_RUN):
            # The gateway stops listening before its cleanup drains this queue (aiohttp closes
            # its sites first), so a function that reached back into the cluster (S3) during
            # the drain failed because of the shutdown, not on its own; and a call the invoker
            # refused (429) never ran: run it after the restart.
            _log("async-left-pending", call_id=call.call_id, function=call.name, attempts=call.attempts, status=status,
                 reason="failed while the gateway was shutting down")
            return
        outcome = "none"
        if call.callback:
            outcome = await self._deliver(call, status, headers, body, time.perf_counter() - started)
        await self._mark({"t": "d", "k": call.key, "at": call.attempts, "st": status, "cb": outcome}, call)
        self._forget(call)
        if call.attempts > 1 or status >= 400 or outcome.startswith(("failed", "refused")):  # no client is waiting to see it
            _log("async-done", call_id=call.call_id, function=call.name, attempts=call.attempts, status=status, callback=outcome)

    async def _deliver(self, call: Call, status: int, headers, body: bytes, seconds: float) -> str:
        """POST the result to the callback URL; "delivered", "refused: <why>" (never sent) or
        "failed: <why>" after the retries."""
        headers = CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding"))
        headers.update({"X-Call-Id": call.call_id, "X-Call-Attempt": str(call.attempts), "X-Function-Status": str(status),
                        "X-Function-Name": call.name, "X-Duration-Seconds": f"{seconds:.6f}"})
        why = ""
        for delay in (*CALLBACK_RETRY_DELAYS_S, None):
            try:
                answered = await self.egress.post(call.callback, data=body, headers=headers, timeout=30)
                if answered < 500:  # a 4xx will not change on a retry
                    return "delivered" if answered < 400 else f"failed: callback answered {answered}"
                why = f"callback answered {answered}"
            except EgressRefused as exc:  # the destination will not change on a retry either
                _log("async-callback-refused", call_id=call.call_id, function=call.name, callback=call.callback, reason=str(exc))
                return f"refused: {exc}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                why = repr(exc)
            if delay is not None:
                await asyncio.sleep(delay)
        return f"failed: {why}"

    # -- stopping --------------------------------------------------------------------------------
    async def drain(self) -> None:
        """Take no new call; give running ones ``grace_s`` to finish and be marked done."""
        if self._closing:
            return
        self._closing = True
        for task in self.tasks:
            if task not in self._busy:
                task.cancel()  # idle: waiting for a call (what it would have taken stays pending)
        busy = set(self._busy)
        if busy:
            _, late = await asyncio.wait(busy, timeout=self.grace_s)
            if late:
                _log("async-drain-timeout", running=len(late), grace_s=self.grace_s, action="cancelled; they run again after the restart")
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def stop(self) -> None:
        await self.drain()
        await self.egress.close()
        await self.journal.close()
        _log("async-queue-stopped", pending=len(self.pending), journal=str(self.journal.path))
