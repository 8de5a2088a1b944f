"""``/system/keys``: the keys file (auth/keys.py) over the admin API, for a client off the host.

- ``GET /system/keys`` → ``[{name, access_key, policy}]`` (never a secret)
- ``POST /system/keys`` ``{"name": ..., "policy": {...}}`` (optionally ``access_key``) → 201
  ``{name, access_key, secret_key}``: the only time the secret is shown
- ``DELETE /system/keys/{name}`` (name or access key) → 204

Like all of ``/system``, it needs the cluster admin's credentials (auth/admin.py); a key of the
keys file cannot use it. The file is edited as ``nearfaas keys`` edits it (locked, atomic).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from nearfaas.auth import keys as access_keys
from nearfaas.auth.policy import PolicyError


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class KeysAPI:
    def __init__(self, path: Path, reserved: set[str]):
        self.path = path
        self.reserved = reserved

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/system/keys", self.list)
        app.router.add_post("/system/keys", self.add)
        app.router.add_delete("/system/keys/{name}", self.revoke)

    async def list(self, request: web.Request) -> web.Response:
        try:
            entries = await asyncio.to_thread(access_keys.list_keys, self.path)
        except access_keys.KeysFileError as e:
            return _error(500, str(e))
        return web.json_response([{"name": e.name, "access_key": e.access_key, "policy": e.document} for e in entries])

    async def add(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (ValueError, json.JSONDecodeError):
            return _error(400, "the body must be JSON: {\"name\": ..., \"policy\": {...}}")
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or "policy" not in body:
            return _error(400, "give name (a string) and policy (an S3 bucket policy document)")
        access = body.get("access_key")
        if access is not None and not isinstance(access, str):
            return _error(400, "access_key must be a string")
        try:
            entry = await asyncio.to_thread(access_keys.add_key, self.path, body["name"], body["policy"],
                                            access_key=access, reserved=self.reserved)
        except (access_keys.KeysFileError, PolicyError) as e:
            return _error(400, str(e))
        return web.json_response({"name": entry.name, "access_key": entry.access_key, "secret_key": entry.secret_key},
                                 status=201)

    async def revoke(self, request: web.Request) -> web.Response:
        try:
            await asyncio.to_thread(access_keys.revoke_key, self.path, request.match_info["name"])
        except access_keys.KeysFileError as e:
            return _error(404, str(e))
        return web.Response(status=204)
