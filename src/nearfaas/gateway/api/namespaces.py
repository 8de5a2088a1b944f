"""OpenFaaS namespaces as the REST API names them: ``GET /system/namespaces``, ``?namespace=`` on
the endpoints that take it, a ``namespace`` field in deployment and secret bodies, and
``/function/NAME.NAMESPACE``.

The cluster file lists them (``gateway.namespaces``, default ``[openfaas-fn]``, what faas-cli and
the OpenFaaS gateway use); the first is the default, which a request that names none gets.
Functions, their secrets and their logs are scoped by namespace. Inside the gateway a function
of the default namespace is known by its name, one of another namespace by ``NAME.NAMESPACE``
(a function name holds no dot, so the two never meet): the invoker, chains, triggers, the fast
path and the nodes need no notion of namespaces, and a cluster with one namespace is what it
always was. A chain's stages are looked up in its function's namespace.

Worked example: namespaces [openfaas-fn, team-a]. ``POST /system/functions {"service": "resize",
"namespace": "team-a"}`` deploys ``resize.team-a``; ``GET /system/functions`` lists only
openfaas-fn's, ``?namespace=team-a`` lists ``{"name": "resize", "namespace": "team-a"}``;
``/function/resize.team-a`` calls it and ``/function/resize`` is 404 unless openfaas-fn has a
resize too. Naming a namespace the cluster does not have is 404, listing the ones it has.

Managing them (faas-cli namespace create / get / update / remove, the admin's alone, as all of
/system): ``POST /system/namespace/ {"name", "labels", "annotations"}`` adds one (201; 409 if it
exists), ``GET /system/namespace/NAME`` answers that shape, ``PUT`` replaces its labels and
annotations, ``DELETE`` removes it. Those added over the API are kept in
``<state>/gateway/namespaces.json`` (written atomically, so a gateway that restarts still has
them); the cluster file's are always there and cannot be removed over the API (409 names the
file). A namespace still holding functions or secrets is not removed (409 naming them): removing
it would strand them, and nothing here deletes a user's data as a side effect.

Known caveats: OpenFaaS Pro requires an ``openfaas=1`` annotation before it uses a namespace;
faas-cli adds it, and nearfaas neither requires nor strips it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from nearfaas import atomic
from nearfaas.gateway.api.common import error, json_body, locked_out

DEFAULT_NAMESPACE = "openfaas-fn"
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label: no dot (NAME.NAMESPACE)
MAX_NAMESPACES = 256  # the file is read whole at start; an admin script in a loop should meet a clear 400
NAME_FIX = "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"


class Namespaces:
    def __init__(self, names: list[str] | None = None, state_dir: Path | None = None):
        self.configured = list(names or [DEFAULT_NAMESPACE])  # the cluster file's (gateway.namespaces)
        self.default = self.configured[0]
        self.file = state_dir / "gateway" / "namespaces.json" if state_dir is not None else None
        # What a namespace still holds (function and secret names), set by OpenFaaSAPI.
        self.holdings: Callable[[str], list[str]] = lambda namespace: []
        self._seen: tuple | None = ()
        self.refresh()

    def refresh(self) -> None:
        """Follow the namespaces file, which every gateway of the cluster shares (and changes
        under its lock): one stat while it is unchanged."""
        signature = atomic.signature(self.file) if self.file is not None else None
        if signature == self._seen:
            return
        self._seen = signature
        self.meta: dict[str, dict] = {n: {"labels": {}, "annotations": {}} for n in self.configured}
        self.names = list(self.configured)
        if signature is not None:
            for name, meta in json.loads(self.file.read_text()).items():
                self.meta[name] = meta if name not in self.configured else self.meta[name] | meta
                if name not in self.names:
                    self.names.append(name)

    def _changing(self):
        """The lock for a change: other gateways' changes are read first, ours saved before it ends
        (TimeoutError past a few seconds: another gateway holds it and is stopped)."""
        return atomic.locked_async(self.file) if self.file is not None else contextlib.nullcontext()

    async def _change(self, apply: Callable[[], web.Response]) -> web.Response:
        """``apply()`` under the file's lock, on what every gateway has written (refreshed first);
        it saves what it changes. A 503 when a stopped gateway holds the lock."""
        try:
            async with self._changing():
                self.refresh()
                return apply()
        except TimeoutError as exc:
            return locked_out("namespaces unchanged", exc)

    def unknown(self, namespace: str) -> web.Response:
        return error(404, f"namespace {namespace!r} not found; this cluster's function namespaces are: {', '.join(self.names)} "
                     "(gateway.namespaces in the cluster file)")

    def requested(self, request: web.Request, body: dict | None = None) -> str | web.Response:
        """The namespace a request names (its query string, else its JSON body, else the
        default), or the 404 for one the cluster does not have."""
        self.refresh()
        for namespace in (request.query.get("namespace"), (body or {}).get("namespace")):
            if namespace not in (None, ""):
                return str(namespace) if namespace in self.names else self.unknown(str(namespace))
        return self.default

    def qualify(self, name: str, namespace: str) -> str:
        """The gateway's own name for function ``name`` of ``namespace``."""
        return name if namespace == self.default else f"{name}.{namespace}"

    def of(self, internal: str) -> tuple[str, str]:
        """(name, namespace) of a gateway-internal function name."""
        name, dot, namespace = internal.partition(".")
        return (name, namespace) if dot else (name, self.default)

    def resolve(self, target: str, request: web.Request | None = None, body: dict | None = None) -> str | web.Response:
        """The internal name for ``NAME`` or ``NAME.NAMESPACE`` (a URL's), the namespace taken from
        the target, else the request; or the 404 for an unknown namespace."""
        name, dot, namespace = target.partition(".")
        self.refresh()
        if dot:
            return self.qualify(name, namespace) if namespace in self.names else self.unknown(namespace)
        namespace = self.requested(request, body) if request is not None else self.default
        return namespace if isinstance(namespace, web.Response) else self.qualify(name, namespace)

    async def list_namespaces(self, request: web.Request) -> web.Response:
        self.refresh()
        return web.json_response(self.names)

    # -- managing them: /system/namespace[/NAME] -----------------------------------------------

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/system/namespaces", self.list_namespaces)
        for path in ("/system/namespace", "/system/namespace/"):
            r.add_post(path, self.create)
        r.add_get("/system/namespace/{name}", self.get)
        r.add_put("/system/namespace/{name}", self.update)
        r.add_delete("/system/namespace/{name}", self.remove)

    def _save(self) -> None:
        if self.file is None:
            return
        atomic.private_dir(self.file.parent)
        atomic.write_text(self.file, json.dumps({n: self.meta[n] for n in self.names}, sort_keys=True))
        self._seen = atomic.signature(self.file)

    @staticmethod
    def _labels(body: dict) -> dict | web.Response:
        out = {}
        for field in ("labels", "annotations"):
            value = body.get(field)
            if value is None:
                value = {}
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                return error(400, f"{field}: must be a map of strings to strings, e.g. {{\"team\": \"b\"}}")
            out[field] = dict(value)
        return out

    def _shape(self, name: str) -> dict:
        return {"name": name, **self.meta.get(name, {"labels": {}, "annotations": {}})}

    async def create(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name")
        if not isinstance(name, str) or not NAMESPACE_NAME.fullmatch(name):
            return error(400, f"name: {name!r} is not a namespace name; {NAME_FIX}")
        meta = self._labels(body)
        if isinstance(meta, web.Response):
            return meta
        return await self._change(lambda: self._create(name, meta))

    def _create(self, name: str, meta: dict) -> web.Response:
        if name in self.names:
            return error(409, f"namespace {name!r} already exists; PUT /system/namespace/{name} changes its labels and annotations")
        if len(self.names) >= MAX_NAMESPACES:
            return error(400, f"this gateway holds at most {MAX_NAMESPACES} namespaces; remove one first")
        self.meta[name] = meta
        self.names.append(name)
        self._save()
        return web.json_response(self._shape(name), status=201)

    async def get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.refresh()
        return web.json_response(self._shape(name)) if name in self.names else self.unknown(name)

    async def update(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await json_body(request)
        if body.get("name") not in (None, "", name):
            return error(400, f"name: {body['name']!r} differs from the path's {name!r}; a namespace cannot be renamed")
        meta = self._labels(body)
        if isinstance(meta, web.Response):
            return meta
        return await self._change(lambda: self._update(name, meta))

    def _update(self, name: str, meta: dict) -> web.Response:
        if name not in self.names:
            return self.unknown(name)
        self.meta[name] = meta
        self._save()
        return web.json_response(self._shape(name))

    async def remove(self, request: web.Request) -> web.Response:
        return await self._change(lambda: self._remove(request.match_info["name"]))

    def _remove(self, name: str) -> web.Response:
        if name not in self.names:
            return self.unknown(name)
        if name in self.configured:
            return error(409, f"namespace {name!r} is set in the cluster file (gateway.namespaces); remove it there, "
                              "not over the API")
        held = self.holdings(name)
        if held:
            return error(409, f"namespace {name!r} still holds {', '.join(held[:10])}{' ...' if len(held) > 10 else ''}; "
                              "remove them first (faas-cli remove NAME -n NAMESPACE, faas-cli secret remove NAME -n NAMESPACE)")
        self.names.remove(name)
        self.meta.pop(name, None)
        self._save()
        return web.json_response(self._shape(name) | {"removed": True})
