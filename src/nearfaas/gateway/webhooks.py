"""A webhook sink on the gateway, so an application's notification stage has somewhere real to
POST its events on a cluster with no outside network (DSCS's f3, "Notification Service").

    POST /system/webhooks/<name>   a JSON event (at most 64 KiB) -> 202
    GET  /system/webhooks/<name>   the events received, oldest first (admin credentials)

It is a test and demo sink, kept in the gateway's memory; the notification stage also writes
each event as a durable result object, which is the record to rely on. Because the route is
open to callers without credentials (functions post to it), what it keeps is budgeted:

1. **Declared names only, for callers without credentials.** A name is declared by the cluster
   file (``gateway.webhooks: [alerts]``) or by a deployed function whose ``WEBHOOK_URL``
   environment variable points at ``/system/webhooks/<name>`` (what ``nearfaas app deploy`` sets
   for a notification stage, apps/stack.py; deploying needs the admin's credentials). A post to
   any other name needs the admin's credentials (basic auth or SigV4, as ``/system`` does), else
   403 naming the fix.
2. **A cap on names.** Names not (or no longer) declared hold at most
   ``gateway.webhook_max_names`` rings; a post that would start one more is a 429 naming the cap.
3. **A cap on bytes.** An event is at most 64 KiB; each name keeps its newest events up to
   ``gateway.webhook_keep_bytes`` (1 MiB) and 1000 events, the oldest dropped first. Events are
   kept as the bytes received (validated as JSON), so memory is what was counted.
4. **A cap on all of it.** Every name's rings together hold at most
   ``gateway.webhook_total_bytes`` (64 MiB); past it the oldest event of the whole sink goes
   first, whichever name it came to. Declared names cost a deployer nothing (any function's
   ``WEBHOOK_URL`` declares one, a fast-path lambda included), so without this cap the sink grew
   by ~1 MiB per deployed function, filled by anonymous posts (red team round 6, R4: 300 lambdas,
   +300 MiB in the gateway).

Worked example: 4,000 unauthenticated posts of 60 KB to 4,000 fresh names are 4,000 403s; with
the admin's key, the 65th new name is a 429; 300 declared names each posted 20 × 64 KiB hold
64 MiB in all (each name's newest events that fit), not 300 MiB.

Known caveats:
- A declared name is open to anyone who can reach the gateway: a flood of posts to it keeps only
  its newest ``webhook_keep_bytes`` and can push the stage's own events out of the ring.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import time
from urllib.parse import urlsplit

from aiohttp import web

MAX_EVENT_BYTES = 64 * 1024
KEEP_PER_NAME = 1000
MAX_NAMES = 64  # the default for gateway.webhook_max_names
KEEP_BYTES = 1024 * 1024  # the default for gateway.webhook_keep_bytes
TOTAL_BYTES = 64 * 1024 * 1024  # the default for gateway.webhook_total_bytes
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SINK_PATH = re.compile(r"/system/webhooks/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/?")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "layer": "gateway"}, status=status)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def declared_by(environment: dict | None) -> str | None:
    """The webhook name a function's WEBHOOK_URL declares, if it points at this sink."""
    url = (environment or {}).get("WEBHOOK_URL")
    if not isinstance(url, str):
        return None
    found = _SINK_PATH.fullmatch(urlsplit(url).path)
    return found.group(1) if found else None


class _Ring:
    """One name's newest events as received, within a count and a byte budget."""

    __slots__ = ("events", "bytes")

    def __init__(self) -> None:
        self.events: collections.deque[tuple[float, bytes]] = collections.deque()
        self.bytes = 0

    def add(self, body: bytes, keep_bytes: int) -> int:
        """Keep ``body``; the bytes this ring holds more (or less) than before."""
        before = self.bytes
        self.events.append((time.time(), body))
        self.bytes += len(body)
        while len(self.events) > KEEP_PER_NAME or (self.bytes > keep_bytes and len(self.events) > 1):
            self.drop_oldest()
        return self.bytes - before

    def drop_oldest(self) -> int:
        size = len(self.events.popleft()[1])
        self.bytes -= size
        return size

    def as_json(self) -> bytes:
        # The bodies were validated as JSON when they arrived: spliced in, never parsed again.
        return b"[" + b",".join(b'{"received": %s, "event": %s}' % (repr(t).encode(), body) for t, body in self.events) + b"]"


class WebhookSink:
    """``declared``: names from the cluster file; ``deployed()``: the deployed functions' specs
    (for WEBHOOK_URL); ``authenticate(request)``: None when the request carries the admin's
    credentials, else why not (None as a whole: no credentials exist, auth is off)."""

    def __init__(self, declared=(), max_names: int = MAX_NAMES, keep_bytes: int = KEEP_BYTES, deployed=lambda: (),
                 authenticate=None, read_timeout: float = 60.0, total_bytes: int = TOTAL_BYTES) -> None:
        self.events: dict[str, _Ring] = {}
        self.declared = frozenset(declared)
        self.max_names = max_names
        self.keep_bytes = keep_bytes
        self.total_bytes = total_bytes
        self.held = 0  # bytes of every ring together
        self.deployed = deployed
        self.authenticate = authenticate
        self.read_timeout = read_timeout

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/system/webhooks/{name}", self.receive)
        app.router.add_get("/system/webhooks/{name}", self.list)

    @staticmethod
    def _name(request: web.Request) -> str | None:
        name = request.match_info["name"]
        return name if _NAME.fullmatch(name) else None

    def declared_names(self) -> set[str]:
        names = set(self.declared)
        for spec in self.deployed():
            name = declared_by(spec.get("environment"))
            if name:
                names.add(name)
        return names

    async def receive(self, request: web.Request) -> web.Response:
        name = self._name(request)
        if name is None:
            return _error(400, "webhook name must be a DNS-1123 label (lowercase letters, digits and '-')")
        body = await self._body(request)  # bounded in size and time, so reading it first costs little
        if isinstance(body, web.Response):
            return body
        declared = self.declared_names()
        if name not in declared:
            request._read_bytes = body  # a SigV4 check hashes the body: give it what was read (aiohttp's cache)
            why = "the cluster has no credentials (auth: off)" if self.authenticate is None else await self.authenticate(request)
            if why:
                return _error(403, f"webhook {name!r} is not declared, and posts to undeclared webhooks need the admin's "
                                   f"credentials ({why}); declare it in the cluster file (gateway.webhooks: [{name}]) or set "
                                   f"a deployed function's WEBHOOK_URL to /system/webhooks/{name}")
            undeclared = sum(1 for n in self.events if n not in declared)
            if name not in self.events and undeclared >= self.max_names:
                return _error(429, f"the webhook sink already holds {undeclared} undeclared names, its limit "
                                   f"(gateway.webhook_max_names={self.max_names}); declare {name!r} in gateway.webhooks "
                                   "or reuse a name")
        try:
            json.loads(body, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            return _error(400, "the event must be a JSON document (Content-Type: application/json)")
        ring = self.events.setdefault(name, _Ring())
        self.held += ring.add(body.strip(), self.keep_bytes)
        self._within_total()
        return web.json_response({"accepted": True, "count": len(ring.events)}, status=202)

    def _within_total(self) -> None:
        """Drop the sink's oldest events, whichever names hold them, until all fit the total.
        A scan of the rings' first events per drop: names are bounded by the deployed functions
        and webhook_max_names, and drops happen only past the budget."""
        while self.held > self.total_bytes:
            oldest = min((r for r in self.events.values() if r.events), key=lambda r: r.events[0][0], default=None)
            if oldest is None:
                return
            self.held -= oldest.drop_oldest()

    async def _body(self, request: web.Request) -> bytes | web.Response:
        too_big = _error(413, f"an event may be at most {MAX_EVENT_BYTES} bytes; send a reference to a result object instead")
        if request.content_length is not None and request.content_length > MAX_EVENT_BYTES:
            return too_big
        body = bytearray()
        try:
            async with asyncio.timeout(self.read_timeout):  # a body that trickles is cut, as a call's is
                async for chunk in request.content.iter_any():
                    body += chunk
                    if len(body) > MAX_EVENT_BYTES:
                        return too_big
        except TimeoutError:
            return _error(408, f"the event did not arrive within read_timeout={self.read_timeout:g}s")
        return bytes(body)

    async def list(self, request: web.Request) -> web.Response:
        name = self._name(request)
        if name is None:
            return _error(400, "webhook name must be a DNS-1123 label (lowercase letters, digits and '-')")
        ring = self.events.get(name)
        return web.Response(body=ring.as_json() if ring else b"[]", content_type="application/json")
