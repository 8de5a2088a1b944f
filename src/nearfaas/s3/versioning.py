"""S3 bucket versioning in the protocol layer: PutBucketVersioning / GetBucketVersioning,
ListObjectVersions, ``?versionId=`` on GET / HEAD / DELETE (and on a copy's source), and the
``x-amz-version-id`` / ``x-amz-delete-marker`` answers. The S3 front end routes here; the
backend keeps the versions (node/versions.py on a storage node, gateway/versions.py across them).

Backend calls made here: ``get_bucket_versioning(bucket) -> str`` ("" never configured,
"Enabled", "Suspended"), ``put_bucket_versioning(bucket, status)``, ``list_object_versions(...)
-> VersionListResult``, and ``get_object`` / ``head_object`` / ``delete_object`` with a
``version_id`` keyword (only passed when the request names one).

Between the gateway and a node (``version_writer`` principals only, like the write versions of
s3/versions.py): ``x-nearfaas-versioned: true`` on a write or delete says it was made while the
bucket's versioning was Enabled (so its version id is its version and the entry it replaces is
kept); a DELETE ``?versionId=`` carries the gateway's clock in ``x-nearfaas-version``, which
bounds which "null" version it removes; a ListObjectVersions answer carries exact versions.
"""

from __future__ import annotations

from aiohttp import web

from nearfaas.s3 import versioning_xml
from nearfaas.s3.backend import DeleteResult, ObjectInfo
from nearfaas.s3.conditions import WriteCondition, refuse_unsupported
from nearfaas.s3.errors import S3Error
from nearfaas.s3.listing import list_params
from nearfaas.s3.object_headers import is_true
from nearfaas.s3.versions import is_version

VERSIONED_HEADER = "x-nearfaas-versioned"


def check_version_id(version_id: str) -> None:
    if version_id != "null" and not is_version(version_id):
        raise S3Error("InvalidArgument", f"Invalid version id specified: {version_id!r}; use a VersionId that "
                      "ListObjectVersions or a write returned, or \"null\".", status=400)


def version_arg(q: dict) -> dict:
    """``{"version_id": ...}`` for a request naming ``?versionId=``, else {} (backends that know no
    versions are never asked)."""
    if "versionId" not in q:
        return {}
    check_version_id(q["versionId"])
    return {"version_id": q["versionId"]}


def version_headers(info: ObjectInfo) -> dict[str, str]:
    return {"x-amz-version-id": info.version_id} if info.version_id else {}


def delete_headers(result: DeleteResult | None) -> dict[str, str]:
    if result is None:
        return {}
    headers = {"x-amz-version-id": result.version_id} if result.version_id else {}
    if result.delete_marker:
        headers["x-amz-delete-marker"] = "true"
    return headers


def versioned_write(frontend, request: web.Request) -> dict:
    """``{"versioned": True}`` when the gateway says this write or delete was made while the
    bucket's versioning was Enabled."""
    if frontend._may_version(request, VERSIONED_HEADER) and is_true(request.headers[VERSIONED_HEADER]):
        return {"versioned": True}
    return {}


async def bucket_versioning(frontend, request: web.Request, method: str, bucket: str) -> web.StreamResponse:
    backend = frontend.backend
    if method == "GET":
        status = await backend.get_bucket_versioning(bucket)
        return frontend._xml(request, versioning_xml.versioning_configuration_xml(status))
    if method == "PUT":
        body = await frontend._body(request, require_length=False).read_all(64 << 10)
        status = versioning_xml.parse_versioning_configuration(body)
        await backend.put_bucket_versioning(bucket, status)
        return frontend._empty(request, 200)
    raise S3Error("MethodNotAllowed", f"{method} is not allowed on ?versioning; use GET or PUT.")


async def list_versions(frontend, request: web.Request, bucket: str, q: dict, internal: bool) -> web.StreamResponse:
    """ListObjectVersions (GET /bucket?versions): prefix, delimiter, key-marker /
    version-id-marker, max-keys, encoding-type. ``internal``: the gateway asking a node."""
    encoding, max_keys, prefix, delimiter = list_params(q, "max-keys")
    key_marker, version_id_marker = q.get("key-marker", ""), q.get("version-id-marker", "")
    if version_id_marker:
        if not key_marker:
            raise S3Error("InvalidArgument", "A version-id marker cannot be specified without a key marker; send "
                          "key-marker too (the NextKeyMarker of the previous page).")
        check_version_id(version_id_marker)
    result = await frontend.backend.list_object_versions(bucket, prefix, delimiter, max_keys, key_marker, version_id_marker)
    return frontend._xml(request, versioning_xml.list_versions_xml(
        bucket, result, prefix=prefix, delimiter=delimiter, max_keys=max_keys, key_marker=key_marker,
        version_id_marker=version_id_marker, encoding_type=encoding, internal=internal))


async def delete_object(frontend, request: web.Request, bucket: str, key: str, q: dict) -> dict[str, str]:
    """DeleteObject, versioned or not; returns the answer's version headers."""
    backend = frontend.backend
    refuse_unsupported(request.headers, "DeleteObject")
    named = version_arg(q)
    stamp = frontend._version(request)  # the gateway's: a replica's delete, or the clock for ?versionId=
    if named:
        condition = WriteCondition.from_headers(request.headers)
        if condition is not None and named["version_id"] == "null":
            # the null version is replaced in place by a write to an unversioned or suspended bucket,
            # so a check of it could be stale by the delete: refused, never raced
            raise S3Error("NotImplemented", "DeleteObject with versionId=null and a condition is not supported (a write can "
                          "replace the null version between the check and the delete); send the condition without "
                          "versionId, which is checked atomically with the delete.", status=501)
        if condition is not None:
            # A version id other than null names content that never changes, so checking it and then
            # deleting it is exact: no write can slip between the two and make the check stale.
            try:
                current = await backend.head_object(bucket, key, **named)
            except S3Error as exc:
                if exc.code not in ("NoSuchKey", "NoSuchVersion", "MethodNotAllowed"):  # none, or a delete marker
                    raise
                current = None
            condition.check(current, key)
        result = await backend.delete_object(bucket, key, **named, **({"version": stamp} if stamp is not None else {}))
    elif stamp is not None:
        result = await backend.delete_object(bucket, key, version=stamp, **versioned_write(frontend, request))
    else:
        result = await backend.delete_object(bucket, key, **await frontend._condition(request, bucket, key))
    return delete_headers(result if isinstance(result, DeleteResult) else None)
