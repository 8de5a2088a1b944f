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
"""

from __future__ import annotations

from aiohttp import web

from nearfaas.gateway.api.common import error

DEFAULT_NAMESPACE = "openfaas-fn"


class Namespaces:
    def __init__(self, names: list[str] | None = None):
        self.names = list(names or [DEFAULT_NAMESPACE])
        self.default = self.names[0]

    def unknown(self, namespace: str) -> web.Response:
        return error(404, f"namespace {namespace!r} not found; this cluster's function namespaces are: {', '.join(self.names)} "
                     "(gateway.namespaces in the cluster file)")

    def requested(self, request: web.Request, body: dict | None = None) -> str | web.Response:
        """The namespace a request names (its query string, else its JSON body, else the
        default), or the 404 for one the cluster does not have."""
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
        if dot:
            return self.qualify(name, namespace) if namespace in self.names else self.unknown(namespace)
        namespace = self.requested(request, body) if request is not None else self.default
        return namespace if isinstance(namespace, web.Response) else self.qualify(name, namespace)

    async def list_namespaces(self, request: web.Request) -> web.Response:
        return web.json_response(self.names)
