"""Who a call is from, for the gateway's per-client budgets: a verified identity when the
request's headers carry valid credentials, else its peer address.

Mechanism. ``gateway.max_inflight_per_client`` and the async queue's per-client byte share
(gateway/api/invoke.py, gateway/async_queue.py) were counted per peer address, so any local user
holding 24 slow bodies from 127.0.0.1 locked every authorized loopback caller (the operator
calling an ``auth: true`` function) out with 429. Before a body is read, ``identify`` checks
what the headers alone can prove, with the admin guard's own checks (auth/admin.py):

- HTTP basic as the admin (``AdminGuard.check``; it reads no body for basic auth) -> ``"admin"``;
- a SigV4 signature by a known key (the cluster's, the keys file's, a function's), when the
  request sends ``x-amz-content-sha256`` (the signature then covers only headers) ->
  ``"key:<access key>"``.

Anything else, wrong credentials included, is anonymous and counts against its peer address.

Worked example: 24 slow anonymous bodies from 127.0.0.1 hold "127.0.0.1"'s 24 slots; the
operator's ``curl -u admin:$SECRET`` from 127.0.0.1 counts against "admin" and is served.

Known caveats:
- A SigV4 request without ``x-amz-content-sha256`` (a non-S3 client signing the body's hash)
  cannot be verified before its body is read: it counts as anonymous for its budget (the admin
  guard still checks it in full for a protected function).
- The body's hash is not compared here: a captured signed request replayed within SigV4's
  15-minute window gets its key's budget (not its authority: the guard checks protected calls).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from nearfaas.s3.errors import S3Error

# Set by the balancer (HAProxy replaces whatever a client sent) to the client's address; believed
# only on a request that came over the balancer's Unix socket, which no one else can reach.
CLIENT_HEADER = "X-Nearfaas-Client"


def peer_address(request) -> str | None:
    """The caller's address: the TCP peer's, or behind the balancer (its Unix socket: no TCP
    peer) the address HAProxy saw. Behind it every caller came from one address, so an anonymous
    flood spent every other anonymous caller's budget (gateway/api/invoke.py)."""
    transport = getattr(request, "transport", None)
    if transport is not None and isinstance(transport.get_extra_info("sockname"), str):  # AF_UNIX
        return request.headers.get(CLIENT_HEADER) or None
    return request.remote


async def identify(guard, request) -> str | None:
    """The verified identity the request's headers prove, or None (anonymous). ``guard`` is the
    gateway's AdminGuard; in unsigned mode (no keys) every caller is anonymous."""
    if guard is None or not guard.keys:
        return None
    scheme = request.headers.get("Authorization", "").partition(" ")[0]
    if scheme.lower() == "basic":
        return "admin" if await guard.check(request) is None else None
    if scheme == "AWS4-HMAC-SHA256" and guard.s3_auth is not None and "x-amz-content-sha256" in request.headers:
        raw_path, _, raw_query = request.raw_path.partition("?")
        try:
            ctx = guard.s3_auth.authenticate(request.method, raw_path, parse_qsl(raw_query, keep_blank_values=True),
                                             request.headers)
        except S3Error:
            return None
        # The cluster's own key is the operator, like basic auth as the admin; any other key
        # (a keys-file key limited to some buckets, a function's key) is a caller with a budget
        # of its own but no claim on the operator's reserve (red team round 9: a tenant's
        # bucket-only key took the reserve and, with anonymous calls, every forwarding slot).
        return "admin" if ctx.access_key == guard.keys["access_key"] else f"key:{ctx.access_key}"
    return None
