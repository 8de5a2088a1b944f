"""What a node on another host needs to start a function's worker: its deployed code and its
secrets (backend: ray, where nodes do not share the gateway's disk; node/function_files.py is
the node's side).

- ``GET /_nearfaas/code/{function}/{digest}``: the function's deployed handler folder
  (``<state>/functions/<name>/<digest>``, spec/bundle.py) as a gzipped tar, when ``digest`` is
  still its folder's (a node asks for the code of the spec it was sent);
- ``GET /_nearfaas/secrets/{function}``: the secrets the deployed function lists, from its
  namespace, as ``{"name": base64}`` (or 400 naming one that does not exist).

Both answer only requests signed with the cluster's internal secret (auth/internal.py), the
signature the gateway itself puts on its calls to nodes: a client, a function or anyone else
on the network gets 401. Nothing is served by a path a caller names: the function must be
deployed and the digest one of its code folders.

Known caveat: the secrets cross the cluster's network in the clear (HTTP, as every internal
call does); run a multi-host cluster on a private network (docs/ray.md).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

from aiohttp import web

from nearfaas.auth import internal
from nearfaas.spec.bundle import BundleError, pack_bytes
from nearfaas.spec.options import secrets_folder, secrets_namespace

_DIGEST = re.compile(r"[0-9a-f]{20}$")


class NodeFiles:
    def __init__(self, functions, state_dir, secret: str | None):
        self.functions = functions  # name -> FunctionState (the invoker's table)
        self.state_dir, self.secret = state_dir, secret

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/_nearfaas/code/{function}/{digest}", self.code)
        r.add_get("/_nearfaas/secrets/{function}", self.secrets)

    def _refused(self, request: web.Request) -> web.Response | None:
        why = "this gateway runs without a cluster secret" if not self.secret else \
            internal.verify(self.secret, request.method, request.raw_path, request.headers.get(internal.HEADER))
        return web.json_response({"error": why}, status=401) if why else None

    async def code(self, request: web.Request) -> web.StreamResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        name, digest = request.match_info["function"], request.match_info["digest"]
        state = self.functions.get(name)
        folder = Path(str(state.spec.get("handler_dir"))) if state is not None else None
        if folder is None or not _DIGEST.match(digest) or folder.name != digest or not folder.is_dir():
            return web.json_response({"error": f"function {name!r} is not deployed with code {digest} (redeployed meanwhile?)"},
                                     status=404)
        try:
            blob = pack_bytes(folder)
        except BundleError as exc:
            return web.json_response({"error": str(exc)}, status=409)
        return web.Response(body=blob, content_type="application/gzip")

    async def secrets(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        state = self.functions.get(request.match_info["function"])
        if state is None:
            return web.json_response({"error": f"no function {request.match_info['function']!r} is deployed"}, status=404)
        folder = secrets_folder(self.state_dir, secrets_namespace(state.spec))
        out = {}
        for secret in state.spec.get("secrets") or []:
            path = folder / secret
            if not path.is_file():
                return web.json_response({"error": f"function {state.name!r} lists secret {secret!r}, which does not exist; create "
                                                   f"it with: nearfaas secret create {secret} --from-literal VALUE"}, status=400)
            out[secret] = base64.b64encode(path.read_bytes()).decode()
        return web.json_response(out)
