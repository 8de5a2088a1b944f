"""Scoped S3 credentials for functions: never the cluster's keys.

Each function's workers get an access key naming the function, and a secret that is an HMAC of
that key under the cluster secret (``auth/internal.py``). Whoever holds the cluster secret (the
gateway, the nodes) can check such a key without a table, and learns from it which function is
calling; what that function may touch comes from its deployed spec:

- at the gateway: the buckets its ``x-nearfaas.buckets`` declares, the buckets of its
  ``triggers``, and the chain intermediate bucket when it is a chain stage;
- at a storage node: the chain intermediate bucket only (a stage's local output).

Worked example: function ``resize`` deployed with uid 200001 gets the access key
``nff.resize.200001`` and ``HMAC-SHA256(cluster_secret, "function-key\\nnff.resize.200001")``.
Redeploying it keeps the key; deleting it makes the key unknown at once (the gateway finds no
spec for it), and a new function of the same name gets a new uid, so a new key.

Known caveats:
- A key stays valid while its function is deployed; there is no expiry within a deployment.
- Within the intermediate bucket a function could write any key; intermediates are named by
  call ID (not guessable in advance), and the bucket holds nothing but intermediates.
"""

from __future__ import annotations

import hashlib
import hmac
import re

PREFIX = "nff."
_KEY = re.compile(r"^nff\.(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<uid>\d+)$")


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
