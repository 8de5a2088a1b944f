"""OpenFaaS namespaces as the REST API names them: ``GET /system/namespaces``, ``?namespace=`` on
the endpoints that take it, a ``namespace`` field in deployment and secret bodies, and
``/function/NAME.NAMESPACE``.

nearfaas has one function namespace, ``openfaas-fn`` (what faas-cli and the OpenFaaS gateway use
by default), so every client that names it, or names none, works unchanged; naming another
answers 404 with the namespaces that exist, as an OpenFaaS provider does for an unknown one,
rather than silently acting on the default.

Known caveats:
- Functions, secrets and logs are not yet scoped by namespace: there is only the one.
"""

from __future__ import annotations

from aiohttp import web

from nearfaas.gateway.api.common import error

DEFAULT_NAMESPACE = "openfaas-fn"
NAMESPACES = (DEFAULT_NAMESPACE,)


def unknown(namespace: str) -> web.Response:
    return error(404, f"namespace {namespace!r} not found; this cluster's function namespaces are: {', '.join(NAMESPACES)}")


def requested(request: web.Request, body: dict | None = None) -> web.Response | None:
    """The 404 for a request that names a namespace other than the cluster's (in its query
    string or its JSON body), else None."""
    for namespace in (request.query.get("namespace"), (body or {}).get("namespace")):
        if namespace not in (None, "") and namespace not in NAMESPACES:
            return unknown(str(namespace))
    return None


def split(target: str) -> tuple[str, str | None]:
    """``name.namespace`` (what faas-cli invokes) as (name, namespace); a function name has no dot."""
    name, dot, namespace = target.partition(".")
    return name, (namespace if dot else None)


async def list_namespaces(request: web.Request) -> web.Response:
    return web.json_response(list(NAMESPACES))
