"""/system/secrets: named secrets a function's spec can mount (files under the state dir, 0600).

The OpenFaaS contract: ``{"name", "value"}`` (text) or ``{"name", "rawValue"}`` (base64 of the
bytes, how Go encodes ``[]byte``); POST creates (201), PUT creates or updates (200), DELETE answers 200 (what
faas-cli accepts). Secrets belong to a namespace (gateway/api/namespaces.py): the default one's
live in ``<state>/secrets/``, another's in ``<state>/secrets-ns/<namespace>/``, where the nodes
mount them from for that namespace's functions (node/pool.py); an unknown namespace is 404.

A deployment may list only secrets its namespace has (``unknown_listed``, which the deploy and
update of gateway/api/functions.py call): a missing one is the deploy's 400, naming
``secrets[i]`` and how to create it, not a failure at the first call; another namespace's secret
of that name does not count.

Changing a secret's value (PUT, faas-cli secret update, or a POST over an existing one) restarts
the functions of its namespace that list it: each instance holds a copy made when it started
(node/worker_secrets.py), so its old instances are replaced as a redeploy replaces them (busy
ones finish their calls first) and the next call reads the new value. The answer names them.

Known caveats: deleting a secret a deployed function lists is allowed (as in OpenFaaS); its next
cold start fails naming it."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from nearfaas import atomic
from nearfaas.gateway.api.common import error, json_body
from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.spec.options import secrets_folder

SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$")


class SecretsAPI:
    def __init__(self, state_dir: Path, namespaces: Namespaces | None = None):
        self.state_dir = state_dir
        self.namespaces = namespaces or Namespaces()
        self.secrets_dir = state_dir / "secrets"
        atomic.private_dir(self.secrets_dir)
        # Called with (namespace, name) when a secret's value changes; answers the functions it
        # restarted (OpenFaaSAPI sets it: running instances hold a copy made when they started).
        self.changed: Callable[[str, str], list[str]] = lambda namespace, name: []
        # Each mounted secret's file as this gateway last saw it: another gateway of the cluster
        # that stores a new value restarts only its own instances (noticed_changes).
        self._seen: dict[tuple[str, str], tuple | None] = {}

    def folder(self, namespace: str) -> Path:
        if namespace == self.namespaces.default:
            return self.secrets_dir
        folder = secrets_folder(self.state_dir, namespace)
        atomic.private_dir(folder)
        return folder

    def folder_if_any(self, namespace: str) -> Path | None:
        """``namespace``'s secrets folder when it exists (creates none)."""
        folder = self.secrets_dir if namespace == self.namespaces.default else secrets_folder(self.state_dir, namespace)
        return folder if folder.is_dir() else None

    def stored(self, namespace: str, name: str) -> bool:
        """Whether ``namespace`` has a secret called ``name`` (creates no folder)."""
        folder = self.secrets_dir if namespace == self.namespaces.default else secrets_folder(self.state_dir, namespace)
        return bool(SECRET_NAME.match(name)) and (folder / name).is_file()

    def unknown_listed(self, namespace: str, names: list[str]) -> str | None:
        """Why a deployment in ``namespace`` listing ``names`` cannot get its secrets, or None."""
        for i, name in enumerate(names):
            if not self.stored(namespace, name):
                how = (f"`nearfaas secret create {name} --from-literal VALUE`, or " if namespace == self.namespaces.default else "")
                return (f"secrets[{i}]: namespace {namespace!r} has no secret {name!r}; create it first: {how}"
                        f"POST /system/secrets {{\"name\": {json.dumps(name)}, \"value\": ..., \"namespace\": \"{namespace}\"}} "
                        "(secrets belong to a namespace: another namespace's secret of that name does not count)")
        return None

    def noticed_changes(self, mounted: set[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (namespace, name) of ``mounted`` whose file was rewritten (by another gateway)
        since this gateway last looked; the first look only notes each file."""
        changed = []
        for namespace, name in mounted:
            folder = self.secrets_dir if namespace == self.namespaces.default else secrets_folder(self.state_dir, namespace)
            signature = atomic.signature(folder / name) if SECRET_NAME.match(name) else None
            if (namespace, name) in self._seen and signature is not None and self._seen[(namespace, name)] != signature:
                changed.append((namespace, name))
            self._seen[(namespace, name)] = signature
        return changed

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/system/secrets", self.list_secrets)
        r.add_post("/system/secrets", self.put_secret)
        r.add_put("/system/secrets", self.put_secret)
        r.add_delete("/system/secrets", self.delete_secret)

    async def list_secrets(self, request):
        namespace = self.namespaces.requested(request)
        if isinstance(namespace, web.Response):
            return namespace
        return web.json_response([{"name": p.name, "namespace": namespace}
                                  for p in sorted(self.folder(namespace).iterdir()) if p.is_file() and not p.name.startswith(".")])

    async def put_secret(self, request):
        body = await json_body(request)
        namespace = self.namespaces.requested(request, body)
        if isinstance(namespace, web.Response):
            return namespace
        folder = self.folder(namespace)
        name = body.get("name")
        if not isinstance(name, str) or not SECRET_NAME.match(name):
            return error(400, "name: required, lower-case letters, digits, '-', '_' or '.', at most 63 characters")
        if body.get("rawValue") not in (None, ""):
            try:
                value = base64.b64decode(str(body["rawValue"]), validate=True)
            except (binascii.Error, ValueError):
                return error(400, "rawValue: must be base64 of the secret's bytes (or send the text as value)")
        elif isinstance(body.get("value"), str):
            value = body["value"].encode()
        else:
            return error(400, "value: required, the secret as a string (or rawValue: base64 of its bytes)")
        changed = (folder / name).is_file() and (folder / name).read_bytes() != value
        atomic.write_bytes(folder / name, value, 0o600)
        self._seen[(namespace, name)] = atomic.signature(folder / name)  # restarted here, below
        restarted = self.changed(namespace, name) if changed else []
        note = f"; restarted {len(restarted)} function(s) that mount it: {', '.join(restarted)}" if restarted else ""
        return web.Response(status=201 if request.method == "POST" else 200, text=f"stored secret {name}{note}\n")

    async def delete_secret(self, request):
        body = await json_body(request)
        namespace = self.namespaces.requested(request, body)
        if isinstance(namespace, web.Response):
            return namespace
        folder = self.folder(namespace)
        name = body.get("name")
        if not isinstance(name, str) or not SECRET_NAME.match(name) or not (folder / name).is_file():
            return error(404, f"secret {name!r} not found in namespace {namespace!r}")
        (folder / name).unlink()
        return web.Response(status=200, text=f"removed secret {name}\n")
