"""Signed internal calls: the gateway -> node API answers only the gateway.

Every cluster has one random secret, made by ``nearfaas up`` and kept in ``cluster.json``
(mode 0600, inside the state directory that no function can see). The gateway signs each call to
a node's ``/_nearfaas/*`` API with an HMAC over the method, the path with its query and a
timestamp; a node refuses any call without a valid signature made within ``MAX_SKEW_S``. The
node's S3 port checks the same secret as a SigV4 key (``INTERNAL_ACCESS_KEY``).

Worked example: ``GET /_nearfaas/health`` at t=1764000000 is sent with
``X-Nearfaas-Signature: t=1764000000,s=<hex HMAC-SHA256(secret, "GET\\n/_nearfaas/health\\n1764000000")>``.

Known caveats:
- The body is not covered (hashing every body costs on the hot path). Changing a body in
  flight needs a position on the loopback path, which only root has, and root owns the cluster.
- A captured signature can be replayed within the skew window for the same method and path.
  Capturing loopback traffic needs root as well.
- A node whose clock is more than ``MAX_SKEW_S`` off is unreachable (health and S3 alike): it
  is down to the gateway, which owes it what it misses, until its clock is fixed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from aiohttp import web

HEADER = "X-Nearfaas-Signature"
# A worker listens on loopback, where other functions run too: it answers only calls that carry
# its instance's random token, which the node tells the gateway alone (node/pool.py).
WORKER_TOKEN_HEADER = "X-Nearfaas-Worker-Token"
INTERNAL_ACCESS_KEY = "nearfaas-internal"
# The same window as the nodes' S3 port allows a SigV4 signature (s3/sigv4.py): a node whose
# clock is off by less than it is reachable on both or, past it, on neither. With 300 s here, a
# node 400 s ahead took S3 writes but failed every health poll, so anti-entropy stopped for good
# (issue 43).
MAX_SKEW_S = 900.0


def new_secret() -> str:
    return secrets.token_hex(32)


def _mac(secret: str, method: str, target: str, ts: str) -> str:
    return hmac.new(secret.encode(), f"{method.upper()}\n{target}\n{ts}".encode(), hashlib.sha256).hexdigest()


def sign(secret: str, method: str, target: str, now: float | None = None) -> dict[str, str]:
    """The header that signs one call; ``target`` is the path with its query (as sent)."""
    ts = str(int(time.time() if now is None else now))
    return {HEADER: f"t={ts},s={_mac(secret, method, target, ts)}"}


def verify(secret: str, method: str, target: str, header: str | None, now: float | None = None) -> str | None:
    """None when the signature is good, else why it is not (for the 401's body)."""
    if not header:
        return f"this is a node's internal API: calls must be signed by the gateway ({HEADER} is missing)"
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    ts, mac = fields.get("t", ""), fields.get("s", "")
    if not ts.isdigit() or not mac:
        return f"{HEADER} is malformed; expected t=<unix seconds>,s=<hex HMAC>"
    if abs((time.time() if now is None else now) - int(ts)) > MAX_SKEW_S:
        return f"{HEADER} is older than {MAX_SKEW_S:g}s or from the future"
    if not hmac.compare_digest(mac, _mac(secret, method, target, ts)):
        return f"{HEADER} does not match; this call was not made by this cluster's gateway"
    return None


def server_middleware(secret: str, prefix: str):
    """aiohttp middleware: requests under ``prefix`` need a valid gateway signature (401)."""

    @web.middleware
    async def check(request: web.Request, handler):
        if request.path.startswith(prefix):
            why = verify(secret, request.method, request.raw_path, request.headers.get(HEADER))
            if why is not None:
                return web.Response(status=401, text=why + "\n", headers={"X-Nearfaas-Layer": "node"})
        return await handler(request)

    return check


def client_middleware(secret: str, prefix: str, origins: set[str]):
    """aiohttp client middleware: sign every request to one of ``origins`` (``http://host:port``
    of the nodes) whose path starts with ``prefix``. Signing by path alone would hand a
    signature to any URL a client names (an async call's X-Callback-Url, say)."""

    async def add_signature(request, handler):
        if request.url.raw_path.startswith(prefix) and str(request.url.origin()) in origins:
            request.headers.update(sign(secret, request.method, request.url.raw_path_qs))
        return await handler(request)

    return add_signature
