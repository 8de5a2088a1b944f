"""Scoped S3 credentials for functions: never the cluster's keys.

Each function's workers get an access key naming the function, and a secret that is an HMAC of
that key under the cluster secret (``auth/internal.py``). Whoever holds the cluster secret (the
gateway, the nodes) can check such a key without a table, and learns from it which function is
calling; what that function may touch comes from its deployed spec:

- at the gateway: the buckets its ``x-nearfaas.buckets`` declares, the buckets of its
  ``triggers``, and the chain intermediate bucket when it is a chain stage;
- at a storage node: nothing (a storage node's S3 port serves chain-call keys only).

A function key never reaches the chain intermediate bucket. Each stage of a chain call gets a
**chain-call key** instead, made by the gateway for that call alone (``run_credentials``): its
access key names the application, the call's run id (``uuid4``, made by the gateway) and an
expiry, and its secret is an HMAC of it under the cluster secret, so the gateway's S3 front end,
a storage node's S3 port and its fd hand-off (node/objectfds.py) all check it without a table.
It may read and write only keys under ``<app>/<run id>/`` of ``nearfaas-intermediates``, and
list nothing there (a listing would reveal other calls' run ids).

Worked example (chain-call key): call ``3f2a…`` of application ``pipeline`` in namespace
``team-b`` made at t=1700000000 gets ``nfr.1700003600.3f2a….pipeline.team-b`` (expires one hour
later); its stages may GET and PUT ``nearfaas-intermediates/pipeline.team-b/3f2a…/*`` and get
AccessDenied for any other key, for ListObjectsV2, and for any bucket but that one.

Worked example: function ``resize`` deployed with uid 200001 gets the access key
``nff.resize.200001`` and ``HMAC-SHA256(cluster_secret, "function-key\\nnff.resize.200001")``.
Redeploying it keeps the key; deleting it makes the key unknown at once (the gateway finds no
spec for it), and a new function of the same name gets a new uid, so a new key.

Known caveats:
- A key stays valid while its function is deployed; there is no expiry within a deployment.
- A chain-call key stays valid until its expiry (``RUN_TTL_S`` after the call began), not only
  until the call ends: a stage that kept it could still read and write that call's prefix (its
  own call's data, deleted when the chain ends unless ``keep_intermediates``).
- A namespaced function's key names it as ``NAME.NAMESPACE`` (its internal name).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

PREFIX = "nff."
RUN_PREFIX = "nfr."
RUN_KEY_HEADER = "X-Nearfaas-Run-Key"  # "ACCESS:SECRET", gateway -> worker with each chain stage's call
RUN_TTL_S = 3600  # a chain call's key outlives any chain that finishes (stage timeouts are shorter)
_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
# NAME or NAME.NAMESPACE: a namespaced function's internal name (gateway/api/namespaces.py)
_KEY = re.compile(rf"^nff\.(?P<name>{_NAME}(\.{_NAME})?)\.(?P<uid>\d+)$")
_RUN = re.compile(rf"^nfr\.(?P<expires>\d{{1,12}})\.(?P<run>[0-9a-f]{{32}})\.(?P<app>{_NAME}(\.{_NAME})?)$")


def access_key(function: str, uid: int) -> str:
    return f"{PREFIX}{function}.{uid}"


def secret_key(cluster_secret: str, access: str) -> str:
    return hmac.new(cluster_secret.encode(), f"function-key\n{access}".encode(), hashlib.sha256).hexdigest()


def credentials(cluster_secret: str, function: str, uid: int) -> dict[str, str]:
    access = access_key(function, uid)
    return {"access_key": access, "secret_key": secret_key(cluster_secret, access)}


def parse(access: str) -> tuple[str, int] | None:
    """(function, uid) of a function key, or None when ``access`` is not one."""
    match = _KEY.match(access)
    return (match["name"], int(match["uid"])) if match else None


def run_credentials(cluster_secret: str, app: str, run_id: str, now: float | None = None) -> dict[str, str]:
    """The chain-call key for call ``run_id`` of ``app`` (see the module's comment)."""
    expires = int(time.time() if now is None else now) + RUN_TTL_S
    access = f"{RUN_PREFIX}{expires}.{run_id}.{app}"
    if not _RUN.match(access):
        raise ValueError(f"cannot make a chain-call key for app {app!r} run {run_id!r}")
    return {"access_key": access, "secret_key": secret_key(cluster_secret, access)}


def run_prefix(access: str, now: float | None = None) -> str | None:
    """``<app>/<run id>/`` that a chain-call key may use, or None when ``access`` is not one or
    has expired. Its secret is checked by whoever verifies the signature (``secret_key``)."""
    match = _RUN.match(access)
    if match is None or int(match["expires"]) < (time.time() if now is None else now):
        return None
    return f"{match['app']}/{match['run']}/"


def run_authorizer(prefix: str):
    """A Principal's authorizer for a chain-call key: object actions under its prefix only. A
    listing (no key) is refused: it would name other calls' run ids."""
    def authorize(action: str, bucket: str | None, key: str | None) -> bool:
        return key is not None and key.startswith(prefix)

    return authorize


def run_proof_ok(cluster_secret: str, access: str, proof: str, bucket: str, key: str, intermediate_bucket: str) -> bool:
    """For a channel that carries the secret itself (node/objectfds.py): is ``proof`` the secret of
    an unexpired chain-call key whose prefix holds bucket/key?"""
    prefix = run_prefix(access)
    return (prefix is not None and bucket == intermediate_bucket and key.startswith(prefix)
            and hmac.compare_digest(proof.encode(), secret_key(cluster_secret, access).encode()))
