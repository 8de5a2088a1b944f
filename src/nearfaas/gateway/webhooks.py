"""A webhook sink on the gateway, so an application's notification stage has somewhere real to
POST its events on a cluster with no outside network (DSCS's f3, "Notification Service").

    POST /system/webhooks/<name>   a JSON event (at most 64 KiB) -> 202
    GET  /system/webhooks/<name>   the events received, oldest first (the last 1000 per name)

It is a test and demo sink, kept in the gateway's memory; the notification stage also writes
each event as a durable result object, which is the record to rely on.
"""

from __future__ import annotations

import collections
import json
import re
import time

from aiohttp import web

MAX_EVENT_BYTES = 64 * 1024
KEEP_PER_NAME = 1000
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "layer": "gateway"}, status=status)


class WebhookSink:
    def __init__(self) -> None:
        self.events: dict[str, collections.deque] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/system/webhooks/{name}", self.receive)
        app.router.add_get("/system/webhooks/{name}", self.list)

    @staticmethod
    def _name(request: web.Request) -> str | None:
        name = request.match_info["name"]
        return name if _NAME.fullmatch(name) else None

    async def receive(self, request: web.Request) -> web.Response:
        name = self._name(request)
        if name is None:
            return _error(400, "webhook name must be a DNS-1123 label (lowercase letters, digits and '-')")
        if request.content_length is not None and request.content_length > MAX_EVENT_BYTES:
            return _error(413, f"an event may be at most {MAX_EVENT_BYTES} bytes; send a reference to a result object instead")
        body = await request.content.read(MAX_EVENT_BYTES + 1)
        if len(body) > MAX_EVENT_BYTES:
            return _error(413, f"an event may be at most {MAX_EVENT_BYTES} bytes; send a reference to a result object instead")
        try:
            event = json.loads(body)
        except ValueError:
            return _error(400, "the event must be a JSON document (Content-Type: application/json)")
        ring = self.events.setdefault(name, collections.deque(maxlen=KEEP_PER_NAME))
        ring.append({"received": time.time(), "event": event})
        return web.json_response({"accepted": True, "count": len(ring)}, status=202)

    async def list(self, request: web.Request) -> web.Response:
        name = self._name(request)
        if name is None:
            return _error(400, "webhook name must be a DNS-1123 label (lowercase letters, digits and '-')")
        return web.json_response(list(self.events.get(name, ())))
