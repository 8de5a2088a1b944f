"""The gateway's side of the fast path (docs/fastpath.md): lambda IDs, the match table, misses.

* **IDs.** Every deployed function gets a lambda ID drawn from a CSPRNG at its first deploy
  (``secrets.randbits(64)``, redrawn while below 2**32 or taken by a live function), so an ID
  cannot be found by sweeping small numbers, and a deleted function's ID is not handed out again
  (short of a 2**-64 coincidence): a client holding it gets UNKNOWN, never someone else's
  function. With a state dir (``layout["ids_file"]``) the name->ID map is written there at every
  change (atomically, fsync'ed), so a restarted gateway gives every function the ID it had.
  ``GET /system/function/<name>`` reports it as ``lambdaId``. Example: the first deploy of
  ``echo`` gives it, say, 0x9f3c71d2a4e8b605; the wire carries it as 8 bytes, ``pack(">Q", id)``.
  Known caveats: an ID is a name, not a credential (it shows in ``/system/function/<name>``,
  which needs the cluster's keys, and in every request on the wire); protected functions are
  kept off the fast path whatever their ID (below). An ids file from before 64-bit IDs (its IDs
  below 2**32) is migrated at load: each function gets a fresh random ID, logged as
  ``fastpath-id-migrated``; clients holding the old IDs must fetch the new ones.
* **The match table.** A function with ``x-nearfaas.target: fastpath`` is pushed to the
  executor over its control port (authenticated by challenge-response with the key in
  ``layout["control_key_file"]``, ``nearfaas.fastpath.auth``) at deploy (a hot swap when it was there already) and removed
  with it. Calls to it over HTTP (``/function/<name>``) are relayed over the executor's TCP
  framing, so every client gets the same lambda.
* **Misses** ("send to host" in λ-NIC): the executor forwards a datagram whose ID has no lambda
  to the gateway's host UDP port as ``token | id | payload``; the function of that ID runs on
  its normal worker path and the answer goes back as ``token | status | payload``.
* **Protected functions stay off the fast path** (issue 39). The fast path's ports take a bare
  lambda ID and carry no caller credential, and an ID is not a secret (it is in every request),
  so anything a client can reach by ID there is public. A function with ``x-nearfaas.auth: true`` (or in a
  namespace that requires auth: ``protected(name)`` is the HTTP front door's own check) is
  therefore never installed in the executor (deploying one with ``target: fastpath`` or as a
  stream function is refused, 400, naming the fix), and a miss for its ID, whether the executor
  forwarded it or someone forged it straight to the host port, is answered ``UNAUTHORIZED``
  (HTTP 401) without running it. Its callers use ``/function/<name>`` with credentials.
  Example: ``sendto(pack(">Q", id_of_secret_fn) + b"x")`` to the UDP port gets back
  ``id | 10 | "... requires credentials ..."``, never the function's output.
  Known caveats: a per-call MAC on the wire (so authorized clients keep the fast path for
  protected lambdas) is not built yet; until then the protection is "not reachable at all".

The wire format itself (status codes, frame layouts, packing) is ``nearfaas.fastpath.wire``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

from nearfaas import atomic
from nearfaas.egress import EgressPolicy, EgressRefused
from nearfaas.fastpath import auth, wire
from nearfaas.spec.fastpath import FastpathSpec
from nearfaas.fastpath.wire import HOST_ERROR, HOST_OK, MAX_ID, UNAUTHORIZED, UNKNOWN

from . import stream
from .errors import CallError

# The wire format (status codes, frames) is nearfaas.fastpath.wire's; what the gateway adds is the
# HTTP status a call over /function/<name> answers for each fast-path status (others: 502).
STATUS_HTTP = {wire.OK: 200, wire.UNAUTHORIZED: 401, wire.UNKNOWN: 404, wire.TRAP: 500, wire.TIMEOUT: 504, wire.TOO_LARGE: 413, wire.OVERLOADED: 429,
               wire.EXTERNAL_ERROR: 502, wire.BAD_REQUEST: 400}
STATUS_NAMES = wire.STATUS
CALL_TIMEOUT_S = 65.0  # the longest lambda timeout_ms (60 s) and a margin
MISSES_IN_FLIGHT = 1024  # misses the gateway runs at once; the executor answers later ones HOST_ERROR after 5 s
MISS_TIMEOUT_S = 5.0  # the executor gives up on a miss after 5 s (HOST_TIMEOUT): so does the gateway
DEFAULT_MAX_FRAME = 2 << 20  # the executor's --max-frame default: a longer frame closes the connection
# TCP connections the gateway opens to the executor at most (it caps them at --max-connections,
# 256 by default, closing the rest at once); calls beyond these wait for a free one.
GATEWAY_CONNECTIONS = 64
# Lambda IDs are drawn from [MIN_ID, MAX_ID]: 64 random bits less the 2**-32 below MIN_ID, kept
# out so that no ID is one a sweep of small numbers (or an old 4-byte ID) could name.
MIN_ID = 1 << 32
IDS_FORMAT = 2  # the ids file's "format": 2 = random 64-bit IDs; none = the old counter (migrated)


def group_of(name: str) -> str:
    """The executor's group of a function: its namespace (a deployer owns all of it). A group
    holds at most half of the executor's instance slots (fastpath/src/quota.rs) and its wasm
    stream stages take turns with other groups' (fastpath/src/stream/offload.rs), so one
    tenant's lambdas or slow modules never hold another's."""
    return name.partition(".")[2] or "(default namespace)"


def new_id(taken) -> int:
    """A fresh lambda ID: 64 random bits from the OS CSPRNG, at least MIN_ID, not in ``taken``."""
    while True:
        lambda_id = secrets.randbits(64)
        if lambda_id >= MIN_ID and lambda_id not in taken:
            return lambda_id


class FastPath:
    def __init__(self, layout: dict | None, invoke, protected=None):
        """``layout``: the cluster layout's ``fastpath`` block (None: no executor runs);
        ``invoke(name, body) -> (status, body)`` runs a function on its normal path;
        ``protected(name) -> bool``: whether calls of it need credentials (the HTTP front door's
        check). Without one every function counts as protected: misses fail closed."""
        self.layout = layout
        self.invoke = invoke
        self.protected = protected or (lambda name: True)
        # Where a lambda's external calls may go (the gateway sets the cluster's policy: its
        # egress_allow and its own ports); without one, the strictest.
        self.egress = EgressPolicy()
        self.ids: dict[str, int] = {}
        self.names: dict[int, str] = {}
        self.versions: dict[str, int] = {}  # name -> version, for each function installed in the executor
        self._installing: set[str] = set()  # deploys to the executor under way (counted by the quota)
        self.ids_file = Path(layout["ids_file"]) if layout and layout.get("ids_file") else None
        self._key: bytes | None = None
        self._pool: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._conns = asyncio.Semaphore(GATEWAY_CONNECTIONS)
        self._transport = None
        if self.ids_file is not None:
            self._load_ids()

    # -- IDs and the match table ---------------------------------------------------------------
    def _load_ids(self) -> None:
        try:
            data = json.loads(self.ids_file.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # Starting over would change every ID under its clients: refuse, naming the way out.
            raise RuntimeError(f"cannot read the lambda ID table {self.ids_file}: {exc}; restore it from a backup, "
                               "or delete it to give every function a new ID (clients holding old IDs must be updated)") from None
        ids = data.get("ids") if isinstance(data, dict) else None
        if not isinstance(ids, dict) or not all(isinstance(n, str) and isinstance(i, int) and not isinstance(i, bool)
                                                and 1 <= i <= MAX_ID for n, i in ids.items()) or len(set(ids.values())) != len(ids):
            raise RuntimeError(f"the lambda ID table {self.ids_file} is malformed (want {{\"format\": {IDS_FORMAT}, \"ids\": "
                               "{name: id}}, IDs unique integers in 1..2**64-1); restore it, or delete it to give every function a new ID")
        self.ids = dict(ids)
        self.names = {i: n for n, i in ids.items()}
        old = sorted(n for n, i in ids.items() if i < MIN_ID)
        if old or data.get("format") != IDS_FORMAT:
            self._migrate(old)

    def _migrate(self, names: list[str]) -> None:
        """A table from before random IDs (``{"next": n, "ids": ...}``, 4-byte sequential IDs):
        give each such function a fresh random ID and record it, so no small ID stays valid."""
        for name in names:
            old_id = self.ids[name]
            lambda_id = new_id(self.names)
            del self.names[old_id]
            self.ids[name], self.names[lambda_id] = lambda_id, name
            print(json.dumps({"event": "fastpath-id-migrated", "function": name, "old_id": old_id, "id": lambda_id,
                              "file": str(self.ids_file), "why": "lambda IDs are now 64 random bits; clients must use the new ID"}),
                  flush=True)
        self._save_ids()

    def _save_ids(self) -> None:
        """Write the table atomically and durably (0600: IDs name the functions)."""
        if self.ids_file is None:
            return
        atomic.private_dir(self.ids_file.parent)
        atomic.write_text(self.ids_file, json.dumps({"format": IDS_FORMAT, "ids": self.ids}, sort_keys=True))

    def assign(self, name: str) -> int:
        if name in self.ids:
            return self.ids[name]
        lambda_id = new_id(self.names)
        self.ids[name], self.names[lambda_id] = lambda_id, name
        try:
            self._save_ids()
        except OSError as exc:
            self.ids.pop(name)
            self.names.pop(lambda_id)
            raise CallError(500, f"cannot record lambda ID {lambda_id} for {name!r} in {self.ids_file}: {exc}", "fastpath") from None
        return lambda_id

    def release(self, name: str) -> None:
        lambda_id = self.ids.pop(name, None)
        self.names.pop(lambda_id, None)
        self.versions.pop(name, None)
        if lambda_id is not None:
            try:
                self._save_ids()
            except OSError as exc:  # the function is gone either way; its ID stays reserved in the old file
                print(json.dumps({"event": "fastpath-ids-save-failed", "file": str(self.ids_file), "error": str(exc)}), flush=True)

    async def deploy(self, spec: dict, lookup=lambda name: None) -> int:
        """Assign the function's ID and, for a fast-path lambda or a stream function, install it
        (or hot-swap it). ``lookup(name)``: a deployed function's spec (stream chains)."""
        fp = (spec.get("x") or {}).get("fastpath")
        if (spec.get("x") or {}).get("auth") and (stream.is_stream(spec) or ((spec.get("x") or {}).get("target") == "fastpath" and fp)):
            # The executor's ports take a bare ID and no credential: installing it there would make it public.
            raise CallError(400, f"function {spec['name']!r} has x-nearfaas.auth: true, but the fast path's ports carry no caller "
                                 "credential, so a protected function cannot be installed there; remove auth (and protect "
                                 "nothing secret in it) or deploy it with target: worker (docs/fastpath.md, Security)", "fastpath")
        if not stream.is_stream(spec) and ((spec.get("x") or {}).get("target") != "fastpath" or not fp):
            return self.assign(spec["name"])
        if self.layout is not None:
            self._admit(spec["name"])
        try:
            if stream.is_stream(spec):
                return await self._deploy_stream(spec, lookup)
            return await self._deploy_lambda(spec, fp)
        finally:
            self._installing.discard(spec["name"])

    def _admit(self, name: str) -> None:
        """Count ``name`` against its namespace's quota of functions on the executor
        (``fastpath.max_functions_per_namespace``: lambdas and stream functions together; a
        redeploy of one installed already counts once; a removal frees its place), or refuse
        it, 400 naming the namespace, the count and the setting. Each lambda keeps instances of
        up to 16 MiB in the executor's shared pools (red team round 5, N2: one tenant's 120
        lambdas took 1.9 GiB), so no namespace may fill them with its own.
        Example: max 64, namespace team-a has 64 installed: deploying a 65th ``x.team-a`` is
        refused; redeploying one of the 64 is not."""
        if name in self.versions or name in self._installing:
            return
        namespace = name.partition(".")[2]
        limit = self._ceiling("functions_per_namespace")
        count = sum(1 for n in self.versions.keys() | self._installing if n.partition(".")[2] == namespace)
        if count >= limit:
            where = f"namespace {namespace!r}" if namespace else "the default namespace"
            raise CallError(400, f"function {name!r}: {where} already has {count} functions on the fast path (lambdas and "
                                 f"stream functions), this cluster's fastpath.max_functions_per_namespace of {limit}; remove "
                                 "one, deploy this one with target: worker, or ask the operator to raise the setting in "
                                 "the cluster file", "fastpath")
        self._installing.add(name)

    async def _deploy_lambda(self, spec: dict, fp: dict) -> int:
        """Install (or hot-swap) a fast-path lambda."""
        if self.layout is None:
            raise CallError(503, f"function {spec['name']!r} targets the fast path, but this cluster runs no fast-path executor; "
                                 "build it with `make setup` and restart the cluster (fastpath.enabled: auto starts it when built)", "fastpath")
        for key in ("weight", "timeout_ms"):  # the operator's ceiling (fastpath.max_*), not the deployer's wish
            ceiling = self._ceiling(key)
            if fp[key] > ceiling:
                raise CallError(400, f"function {spec['name']!r}: x-nearfaas.fastpath.{key} is {fp[key]}, over this cluster's "
                                     f"fastpath.max_{key} of {ceiling}; ask for at most {ceiling} (the operator sets the "
                                     f"ceiling in the cluster file)", "fastpath")
        external = await self._checked_external(spec["name"], fp["external"]) if fp["external"] else None
        new_id = spec["name"] not in self.ids
        lambda_id = self.assign(spec["name"])
        version = self.versions.get(spec["name"], 0) + 1
        body = {"op": "deploy", "id": lambda_id, "name": spec["name"], "group": group_of(spec["name"]), "weight": fp["weight"], "version": version,
                "timeout_ms": fp["timeout_ms"], "external": external}
        if fp["native"]:
            body.update(kind="native", native=fp["native"])
        else:
            body.update(kind="wasm", path=f"{spec['handler_dir']}/{fp['module']}")
            if fp.get("entry"):
                body["entry"] = fp["entry"]
        reply = await self.control(body)
        if not reply.get("ok"):
            if new_id:  # a function that had an ID (say, as a worker) keeps it
                self.release(spec["name"])
            raise CallError(400, f"the fast path refused {spec['name']!r}: {reply.get('error')}", "fastpath")
        self.versions[spec["name"]] = version
        return lambda_id

    def _ceiling(self, key: str) -> int:
        """The operator's ``fastpath.max_<key>`` (cluster file), or its default."""
        return int(self.layout.get(f"max_{key}", getattr(FastpathSpec, f"max_{key}")))

    async def _checked_external(self, name: str, external: str) -> str:
        """The lambda's ``external`` host:port as the address the executor may connect to. The
        executor runs on the host network with the platform's privileges, so the address is the
        deployer's input to judge like any URL (nearfaas/egress.py: loopback, private ranges and
        the cluster's own ports only where gateway.egress_allow names them); the executor gets
        the checked address, never the name (no rebinding between check and connect)."""
        host, _, port = external.rpartition(":")
        try:
            addresses = await asyncio.to_thread(self.egress.checked_addresses, host, int(port))
        except EgressRefused as exc:
            raise CallError(400, f"function {name!r}: x-nearfaas.fastpath.external is refused: {exc}", "fastpath") from None
        except (OSError, UnicodeError) as exc:
            raise CallError(400, f"function {name!r}: x-nearfaas.fastpath.external {external!r} does not resolve ({exc}); "
                                 "name a reachable host:port", "fastpath") from None
        address = addresses[0]
        return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"

    async def _deploy_stream(self, spec: dict, lookup) -> int:
        if self.layout is None or not self.layout.get("stream"):
            raise CallError(503, f"function {spec['name']!r} is a stream function, but this cluster runs no fast-path executor "
                                 "with a stream port; build it with `make setup` and restart the cluster", "fastpath")
        stages = stream.stages_of(spec, lookup)
        ceiling = self._ceiling("timeout_ms")
        for stage in stages:  # a wasm stage's time is the request's budget on the one stream event loop
            if stage.get("fn") == "wasm":
                stage.setdefault("timeout_ms", ceiling)
                if stage["timeout_ms"] > ceiling:
                    raise CallError(400, f"function {spec['name']!r}: x-nearfaas.stream.timeout_ms is {stage['timeout_ms']}, over this "
                                         f"cluster's fastpath.max_timeout_ms of {ceiling}; ask for at most {ceiling} (the operator "
                                         "sets the ceiling in the cluster file)", "fastpath")
        new_id = spec["name"] not in self.ids
        lambda_id = self.assign(spec["name"])
        version = self.versions.get(spec["name"], 0) + 1
        reply = await self.control({"op": "deploy", "id": lambda_id, "name": spec["name"], "kind": "stream", "version": version,
                                    "group": group_of(spec["name"]), "stream": {"chain": stages}})
        if not reply.get("ok"):
            if new_id:
                self.release(spec["name"])
            raise CallError(400, f"the executor refused stream function {spec['name']!r}: {reply.get('error')}", "fastpath")
        self.versions[spec["name"]] = version
        return lambda_id

    @property
    def stream_addr(self) -> tuple[str, int] | None:
        if not self.layout or not self.layout.get("stream"):
            return None
        return self.layout.get("host", "127.0.0.1"), int(self.layout["stream"])

    async def call_stream(self, name: str, payload: bytes) -> tuple[int, bytes]:
        """``payload`` through the stream pipeline installed under ``name``'s ID."""
        lambda_id = self.ids.get(name)
        if lambda_id is None or self.stream_addr is None:
            raise CallError(404, f"stream function {name!r} is not installed on the executor", "fastpath")
        return await stream.call(self.layout.get("stream_unix") or self.stream_addr, lambda_id, payload)

    async def remove(self, name: str, fastpath: bool) -> None:
        if fastpath and self.layout is not None and name in self.ids:
            await self.control({"op": "remove", "id": self.ids[name]})
        self.release(name)

    def _control_key(self) -> bytes:
        if self._key is None:
            path = self.layout.get("control_key_file")
            if not path:
                raise CallError(503, "the cluster layout names no fast-path control key (control_key_file); "
                                     "restart the cluster (nearfaas down; nearfaas up)", "fastpath")
            try:
                self._key = auth.read_key(path)
            except auth.ControlAuthError as exc:
                raise CallError(503, str(exc), "fastpath") from None
        return self._key

    async def control(self, body: dict) -> dict:
        key = self._control_key()
        try:
            # The gateway's own socket where the executor has one (red team round 7: 16 connections
            # to the TCP control port from loopback addresses stopped every deploy and removal).
            opening = asyncio.open_unix_connection(self.layout["control_unix"]) if self.layout.get("control_unix") else \
                asyncio.open_connection(self.layout.get("host", "127.0.0.1"), self.layout["control"])
            reader, writer = await asyncio.wait_for(opening, 5)
            try:
                # Challenge-response first (nearfaas.fastpath.auth): the executor runs no op before it.
                writer.write(auth.answer(key, await asyncio.wait_for(reader.readline(), 5)))
                await writer.drain()
                auth.check_reply(await asyncio.wait_for(reader.readline(), 5))
                writer.write(json.dumps(body).encode() + b"\n")
                await writer.drain()
                return json.loads(await asyncio.wait_for(reader.readline(), 60))
            finally:
                writer.close()
        except auth.ControlAuthError as exc:
            raise CallError(503, str(exc), "fastpath") from None
        except (TimeoutError, OSError, ValueError) as exc:
            raise CallError(503, f"the fast-path executor did not answer on its control port: {exc!r}", "fastpath") from None

    async def stats(self) -> dict:
        if self.layout is None:
            return {"running": False}
        return {"running": True, **(await self.control({"op": "stats"}))}

    # -- calls over HTTP -----------------------------------------------------------------------
    async def call(self, name: str, payload: bytes) -> tuple[int, bytes]:
        """Run a fast-path lambda through the executor's TCP framing: (status, reply payload)."""
        if self.layout is None:
            raise CallError(503, "this cluster runs no fast-path executor", "fastpath")
        lambda_id = self.ids.get(name)
        if lambda_id is None:
            raise CallError(404, f"function {name!r} is not in the fast path's table (removed?)", "fastpath")
        message = wire.encode_request(lambda_id, payload)
        limit = self.layout.get("max_frame", DEFAULT_MAX_FRAME)
        if len(message) > limit:  # the executor would close the connection on it
            raise CallError(413, f"the payload of {len(payload)} bytes is over the fast path's limit of {limit - wire.REQUEST_HEAD.size} bytes "
                                 "(its --max-frame); send large inputs through a memfd (docs/fastpath.md)", "fastpath")
        async with self._conns:
            return await self._call(lambda_id, message)

    async def _call(self, lambda_id: int, message: bytes) -> tuple[int, bytes]:
        while self._pool:  # a pooled connection may have died with an executor restart: drop it, try the next
            try:
                return self._exchange(lambda_id, *(await self._roundtrip(self._pool.pop(), message)))
            except (OSError, asyncio.IncompleteReadError):
                continue
            except TimeoutError:
                raise CallError(504, f"the fast-path executor did not answer within {CALL_TIMEOUT_S:g}s", "fastpath") from None
        try:
            # The gateway's own socket where the executor has one: no other local client can take
            # its connections (on loopback one client is many peer IPs: red team round 7).
            opening = asyncio.open_unix_connection(self.layout["tcp_unix"]) if self.layout.get("tcp_unix") else \
                asyncio.open_connection(self.layout.get("host", "127.0.0.1"), self.layout["tcp"])
            conn = await asyncio.wait_for(opening, 5)
        except (OSError, TimeoutError) as exc:
            raise CallError(503, f"the fast-path executor is not accepting calls: {exc!r}", "fastpath") from None
        try:
            return self._exchange(lambda_id, *(await self._roundtrip(conn, message)))
        except TimeoutError:
            raise CallError(504, f"the fast-path executor did not answer within {CALL_TIMEOUT_S:g}s", "fastpath") from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            raise CallError(502, f"the fast-path executor dropped the call: {exc!r}", "fastpath") from None

    async def _roundtrip(self, conn, message: bytes) -> tuple[tuple, bytes]:
        reader, writer = conn
        try:
            writer.write(wire.frame(message))
            await writer.drain()
            # A lambda is interrupted after its timeout_ms (60 s at most); an executor that
            # never answers must not hold the HTTP call forever.
            length = wire.frame_length(await asyncio.wait_for(reader.readexactly(wire.FRAME_HEAD.size), CALL_TIMEOUT_S))
            return conn, await asyncio.wait_for(reader.readexactly(length), CALL_TIMEOUT_S)
        except BaseException:
            writer.close()  # whatever went wrong, this connection is out of step now
            raise

    def _exchange(self, lambda_id: int, conn: tuple, reply: bytes) -> tuple[int, bytes]:
        try:
            reply_id, status, body = wire.decode_reply(reply)
        except ValueError:
            reply_id = None
        if reply_id != lambda_id:
            conn[1].close()  # out of step with the executor: never reuse it
            raise CallError(502, "the fast-path executor sent a malformed reply", "fastpath")
        self._pool.append(conn)
        return status, body

    # -- misses from the executor ----------------------------------------------------------------
    async def start(self) -> None:
        if self.layout is None:
            return
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _HostProtocol(self), local_addr=(self.layout.get("host", "127.0.0.1"),
                                                                                                          self.layout["host_port"]))

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()
        for _, writer in self._pool:
            writer.close()
        self._pool.clear()

    async def miss(self, datagram: bytes) -> bytes:
        """One forwarded miss → the host's reply datagram (token | status | payload)."""
        token, lambda_id, payload = wire.decode_miss(datagram)
        name = self.names.get(lambda_id)
        if name is None:
            return wire.encode_host_reply(token, UNKNOWN, f"no function has lambda ID {lambda_id}".encode())
        if self.protected(name):  # a miss carries no credential: never run a protected function for it
            return wire.encode_host_reply(token, UNAUTHORIZED, f"lambda ID {lambda_id} requires credentials: call "
                                          "/function/<name> with the cluster's keys (docs/fastpath.md, Security)".encode())
        try:
            status, body = await self.invoke(name, payload)
        except CallError as exc:
            return wire.encode_host_reply(token, HOST_ERROR, str(exc).encode()[:60_000])
        if status >= 400:
            return wire.encode_host_reply(token, HOST_ERROR, f"{name}: HTTP {status}: ".encode() + body[:60_000])
        return wire.encode_host_reply(token, HOST_OK, body[:65_000])


class _HostProtocol(asyncio.DatagramProtocol):
    """The host port: misses from the executor, which runs on the cluster's own host. Datagrams
    from elsewhere are dropped (they would run functions by ID past the HTTP front door), and
    at most MISSES_IN_FLIGHT run at once."""

    def __init__(self, fastpath: FastPath):
        self.fastpath = fastpath
        self.transport = None
        self.tasks: set[asyncio.Task] = set()  # referenced until done, or they may be collected mid-call

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if len(data) < wire.MISS_HEAD.size or addr[0] != self.fastpath.layout.get("host", "127.0.0.1") or len(self.tasks) >= MISSES_IN_FLIGHT:
            return
        task = asyncio.get_running_loop().create_task(self._answer(data, addr))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, data, addr):
        token, _, _ = wire.decode_miss(data)
        try:
            reply = await asyncio.wait_for(self.fastpath.miss(data), MISS_TIMEOUT_S)
        except TimeoutError:
            return  # the executor has already answered HOST_ERROR
        except Exception as exc:  # a bug must still answer, not leave the client to time out
            reply = wire.encode_host_reply(token, HOST_ERROR, f"the gateway failed: {exc!r}".encode()[:1000])
        self.transport.sendto(reply, addr)
