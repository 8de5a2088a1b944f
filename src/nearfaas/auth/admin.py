"""Who may use the gateway's OpenFaaS ``/system`` API, and why a web page cannot.

Mechanism, in the order the middleware applies it to each request:

1. **Cross-site checks (always, signed mode or not).** Every request to ``/system/*`` (reads
   too: a secret's name is the operator's to see), every state-changing request (POST, PUT,
   PATCH, DELETE) to the S3 API, and every call of a function declared with
   ``x-nearfaas: {auth: true}`` (``/function/<name>``, ``/async-function/<name>``) must not come
   from another page: an ``Origin`` header whose host is not the request's ``Host``, or a
   ``Sec-Fetch-Site`` other than ``same-origin``/``none`` (``cross-site``, and ``same-site``: a
   page on another port of this host), is a 403 — before credentials are looked at, since a
   browser attaches cached Basic credentials to a form post. No setting opens ``/system`` to
   another origin (the gateway serves no CORS). A ``/system`` body must be sent as
   ``application/json``: a browser sends ``text/plain`` or form bodies cross-site without
   asking, never JSON. Open functions are exempt, as in OpenFaaS: they may serve web pages,
   and their callers are their business.
2. **Credentials (when the cluster has keys).** ``/system/*`` needs either HTTP basic auth as
   the admin (user ``admin`` or the access key, password the secret key — what ``faas-cli
   login`` sends) or a SigV4 signature by the cluster's key. A function declared with
   ``x-nearfaas: {auth: true}`` needs the same on ``/function/<name>`` and
   ``/async-function/<name>``. Anything else is a 401 with ``WWW-Authenticate: Basic``.
   ``/healthz``, ``/metrics`` and ``POST /system/webhooks/<name>`` (the notification sink that
   functions post to) stay open.

Worked example: ``curl -X POST localhost:8080/system/functions -d '{...}'`` → 401;
``curl -u admin:$SECRET -H 'Content-Type: application/json' ...`` → 202; the same with
``-H 'Origin: https://evil.example'`` → 403 even with the password; so is
``GET /system/secrets`` with that header, and a ``text/plain`` form post to a protected function.

Known caveats:
- Basic auth sends the secret on every call: keep the gateway on loopback or behind TLS.
- ``/metrics`` is open, as Prometheus scrapers expect; it names functions and nodes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from urllib.parse import parse_qsl, urlsplit

from aiohttp import web
from multidict import CIMultiDict

from nearfaas.s3.errors import S3Error

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN = ("/healthz", "/metrics")


def _deny(status: int, message: str, basic: bool = False) -> web.Response:
    headers = {"X-Nearfaas-Layer": "gateway"}
    if basic:
        headers["WWW-Authenticate"] = 'Basic realm="nearfaas"'
    return web.Response(status=status, text=message + "\n", headers=headers)


def cross_site(request: web.Request) -> str | None:
    """Why this request looks like it came from another site's page, or None."""
    fetch_site = request.headers.get("Sec-Fetch-Site", "").lower()
    if fetch_site not in ("", "same-origin", "none"):  # none: typed or bookmarked by the user
        return f"requests from another page are refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    if origin == "null" or urlsplit(origin).netloc.lower() != request.host.lower():
        return f"requests from origin {origin!r} are refused: this API answers only its own origin ({request.host})"
    return None


class AdminGuard:
    """The gateway's request guard; ``keys`` is the layout's auth block, None in unsigned mode.
    ``protected(name)`` says whether function ``name`` requires credentials."""

    def __init__(self, keys: dict | None, s3_auth=None, protected=lambda name: False):
        self.keys = keys
        self.s3_auth = s3_auth  # the gateway's S3Auth, to check SigV4 signatures with the cluster key
        self.protected = protected

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        path = request.path
        is_system = path == "/system" or path.startswith("/system/")
        is_function = path.startswith(("/function/", "/async-function/"))
        webhook_post = path.startswith("/system/webhooks/") and request.method == "POST"
        protected = is_function and self.protected(path.split("/")[2])
        if is_system or protected or (request.method in MUTATING and not is_function):
            why = cross_site(request)
            if why:
                return _deny(403, why)
        if request.method in MUTATING and is_system and not webhook_post:
            if request.content_type != "application/json" and request.can_read_body:
                return _deny(415, f"{request.method} {path} needs Content-Type: application/json "
                                  f"(got {request.content_type or 'none'})")
        if self.keys and path not in _OPEN and not webhook_post:
            if is_system or protected:
                why = await self.check(request)
                if why:
                    return _deny(401, why, basic=True)
        return await handler(request)

    async def check(self, request: web.Request) -> str | None:
        """None when the request carries the admin's credentials, else why not."""
        authorization = request.headers.get("Authorization", "")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return "the basic auth header is malformed"
            good_user = user in ("admin", self.keys["access_key"])
            good_password = hmac.compare_digest(password.encode(), self.keys["secret_key"].encode())
            return None if good_user and good_password else "wrong user or password (user admin, password the cluster's secret key)"
        if scheme == "AWS4-HMAC-SHA256" and self.s3_auth is not None:
            raw_path, _, raw_query = request.raw_path.partition("?")
            headers = request.headers
            if "x-amz-content-sha256" not in headers:
                # A SigV4 client for a non-S3 service signs the body's hash without sending it.
                headers = CIMultiDict(headers)
                headers["x-amz-content-sha256"] = hashlib.sha256(await request.read()).hexdigest()
            try:
                ctx = self.s3_auth.authenticate(request.method, raw_path, parse_qsl(raw_query, keep_blank_values=True), headers)
            except S3Error as exc:
                return f"SigV4: {exc.code}: {exc.message}"
            if ctx.access_key != self.keys["access_key"]:
                return "only the cluster's own key may use the /system API (not a function's key, nor a key of the keys file)"
            signed = ctx.payload_hash
            if signed and signed != "UNSIGNED-PAYLOAD" and signed != hashlib.sha256(await request.read()).hexdigest():
                return "SigV4: the body does not match x-amz-content-sha256"
            return None
        return ("this API needs credentials: HTTP basic auth as admin with the cluster's secret key "
                "(`nearfaas` reads it from the state dir; faas-cli: `faas-cli login -u admin`), or a SigV4 signature")
