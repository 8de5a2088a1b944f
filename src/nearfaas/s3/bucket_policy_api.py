"""PutBucketPolicy, GetBucketPolicy, DeleteBucketPolicy and GetBucketPolicyStatus, and the owner a
new bucket records: the S3 side of auth/bucket_policy.py (which decides requests with them).

Both are bucket options (``owner``, ``policy``: the policy's JSON text as put), which the gateway
puts on every storage node as it does versioning (gateway/versions.py) and reads back with HEAD
bucket. A node takes them only from the gateway (``internal``: its signature), in
``OPTIONS_HEADER`` on CreateBucket and as the body of ``PUT ?policy``; a client's HEAD bucket never
sees them (``public_options``), and a client's headers never set them.

At the gateway: a keys-file key creating a bucket becomes its owner (creating one another key owns
is 409 BucketAlreadyExists); only the owner or the admin may put or delete the policy (403
otherwise, whatever the policy says); a policy is checked before it is stored (400
MalformedPolicy naming the statement and field); GET answers the JSON as put (404
NoSuchBucketPolicy when there is none); PolicyStatus says IsPublic when some statement allows
``"*"`` (every key of the cluster: nearfaas has no anonymous access).
"""

from __future__ import annotations

import json

from aiohttp import web

from nearfaas.s3.errors import S3Error

OWNER_OPTION = "owner"
POLICY_OPTION = "policy"
PRIVATE_OPTIONS = (OWNER_OPTION, POLICY_OPTION)
OPTIONS_HEADER = "x-nearfaas-bucket-options"  # CreateBucket, gateway -> node: the bucket's options
MAX_POLICY_BODY = 20 * 1024


def public_options(options: dict) -> dict:
    """A bucket's options as a client may see them (HEAD bucket): no owner, no policy."""
    return {k: v for k, v in options.items() if k not in PRIVATE_OPTIONS}


def creation_options(frontend, request: web.Request, bucket: str, options: dict | None, principal) -> dict | None:
    """The options a CreateBucket stores: on a node, the gateway's (OPTIONS_HEADER); at the
    gateway, the creating key as owner (or BucketAlreadyExists if another key owns it)."""
    if frontend.version_writer(principal):
        raw = request.headers.get(OPTIONS_HEADER)
        try:
            given = json.loads(raw) if raw else {}
        except ValueError:
            given = {}
        return {**(options or {}), **given} if isinstance(given, dict) and given else options
    if frontend.buckets is None or principal is None or principal.account is None:
        return options
    access = frontend.buckets.get(bucket)
    owner = getattr(access, "owner", None)
    if owner is not None and owner != principal.account:
        raise S3Error("BucketAlreadyExists", f"The bucket {bucket!r} is owned by another key; choose another name.")
    frontend.buckets.forget(bucket)
    if access is None:  # a new bucket: this key's own
        return {**(options or {}), OWNER_OPTION: principal.account}
    return options


def check_created(principal, bucket: str, info) -> None:
    """After a CreateBucket: a bucket another key made first (a concurrent create) is theirs."""
    owner = info.options.get(OWNER_OPTION)
    if principal is not None and principal.account is not None and owner not in (None, principal.account):
        raise S3Error("BucketAlreadyExists", f"The bucket {bucket!r} is owned by another key; choose another name.")


def _may_administer(frontend, bucket: str, principal, internal: bool) -> None:
    if internal:
        return
    if frontend.buckets is None:
        raise S3Error("AccessDenied", "A bucket's policy is set through the gateway.")
    if principal is not None and principal.account is not None:
        owner = getattr(frontend.buckets.get(bucket), "owner", None)
        if owner != principal.account:
            raise S3Error("AccessDenied", f"Access Denied: only the owner of bucket {bucket!r} (or the cluster's admin key) may "
                          "change its policy.", resource=f"/{bucket}")


async def bucket_policy(frontend, request: web.Request, method: str, bucket: str, q: dict, principal) -> web.StreamResponse:
    internal = frontend.version_writer(principal)
    if "policyStatus" in q or method == "GET":
        if method != "GET":
            raise S3Error("MethodNotAllowed", f"{method} is not allowed on ?policyStatus; GET it.")
        text = (await frontend.backend.head_bucket(bucket)).options.get(POLICY_OPTION)
        if not text:
            raise S3Error("NoSuchBucketPolicy", f"The bucket {bucket!r} has no policy.", resource=f"/{bucket}")
        if "policyStatus" not in q:
            return web.Response(status=200, body=text.encode(), content_type="application/json",
                                headers=frontend._common(request))
        public = "true" if frontend.buckets is not None and frontend.buckets.is_public(bucket, text) else "false"
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<PolicyStatus xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<IsPublic>{public}</IsPublic></PolicyStatus>").encode()
        return frontend._xml(request, body)
    if method not in ("PUT", "DELETE"):
        raise S3Error("MethodNotAllowed", f"{method} is not allowed on ?policy; GET, PUT or DELETE it.")
    await frontend.backend.head_bucket(bucket)  # NoSuchBucket first
    _may_administer(frontend, bucket, principal, internal)
    text = None
    if method == "PUT":
        body = await frontend._body(request, require_length=False).read_all(MAX_POLICY_BODY + 1)
        if internal:
            text = body.decode()
        else:
            try:
                text = frontend.buckets.validate(bucket, body)
            except ValueError as exc:
                raise S3Error("MalformedPolicy", str(exc)) from None
    await frontend.backend.put_bucket_policy(bucket, text)
    if frontend.buckets is not None:
        frontend.buckets.forget(bucket)
    return frontend._empty(request, 204)
