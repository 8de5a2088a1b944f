"""CopyObject and UploadPartCopy: a PUT with ``x-amz-copy-source``.

The copy is a read of the source (any backend: on the gateway, from the replica holding its
newest version) streamed into a write of the destination (to the destination's replicas), so it
is exactly as durable, ordered and replicated as a PutObject, and a copy never buffers the
object. ``x-amz-metadata-directive: COPY`` (the default) keeps the source's Content-Type and user
metadata, ``REPLACE`` takes the request's. The source's ``x-amz-copy-source-if-*`` conditions
answer 412 when they fail (s3/conditions.py); the destination may carry If-None-Match / If-Match
like any write.

A source may name a version (``?versionId=``, s3/versioning.py): it is read, and reported in
``x-amz-copy-source-version-id``; copying an old version over its own key is how one restores it.

On the gateway a backend with ``copy_in_place`` (gateway/copy_in_place.py) is asked first: where
the destination's replicas already hold the source, each copies its own and no byte crosses a
link (``x-nearfaas-copy: in-place``); otherwise the copy streams (``x-nearfaas-copy: streamed``).
A storage node makes such a copy when the gateway's request carries the write's version and the
source version it must copy (``x-nearfaas-copy-source-version``: else ``CopySourceChanged``, 409).
"""

from __future__ import annotations

import contextlib
from urllib.parse import parse_qsl, unquote

from aiohttp import web

from nearfaas.s3 import checksums
from nearfaas.s3.backend import aclose
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.conditions import check_read
from nearfaas.s3.errors import S3Error
from nearfaas.s3.object_headers import exact_headers, user_metadata
from nearfaas.s3.validation import parse_range_header, validate_bucket_name, validate_key
from nearfaas.s3.versioning import check_version_id, versioned_write

SOURCE_VERSION_HEADER = "x-nearfaas-copy-source-version"
SOURCE_CHANGED = "CopySourceChanged"
COPY_PATH_HEADER = "x-nearfaas-copy"
# What a replica's copy request carries of the client's: how to build the copy. Signing, framing
# and the destination's own If-* (the gateway checks them) stay behind.
_NOT_FORWARDED = {"authorization", "host", "content-length", "content-md5", "expect", "if-match", "if-none-match",
                  "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "x-amz-decoded-content-length",
                  "x-amz-trailer", "x-amz-user-agent", "transfer-encoding", "connection"}
_FORWARDED = {"content-type", "cache-control", "content-disposition", "content-encoding", "content-language", "expires"}


def forwarded(headers) -> dict[str, str]:
    """The client's CopyObject headers each replica needs to make the same copy itself."""
    return {k: v for k, v in headers.items() if (low := k.lower()) not in _NOT_FORWARDED and not low.startswith("x-amz-sdk-")
            and (low in _FORWARDED or low.startswith("x-amz-"))}

DIRECTIVES = ("COPY", "REPLACE")


def copy_source(header: str) -> tuple[str, str, dict]:
    """(bucket, key, {"version_id": ...} or {}) of ``x-amz-copy-source: [/]bucket/key[?versionId=...]``
    (URL-encoded)."""
    path, _, query = header.partition("?")
    named = dict(parse_qsl(query, keep_blank_values=True))
    if set(named) - {"versionId"}:
        raise S3Error("InvalidArgument", f"x-amz-copy-source may carry only ?versionId=, not {query!r}.")
    bucket, sep, key = unquote(path).lstrip("/").partition("/")
    if not sep or not bucket or not key:
        raise S3Error("InvalidArgument", f"x-amz-copy-source must be bucket/key (URL-encoded), not {header!r}.")
    validate_bucket_name(bucket)
    validate_key(key)
    if "versionId" in named:
        check_version_id(named["versionId"])
        return bucket, key, {"version_id": named["versionId"]}
    return bucket, key, {}


def _source_range(request: web.Request, size: int) -> tuple[int, int] | None:
    raw = request.headers.get("x-amz-copy-source-range")
    if raw is None:
        return None
    parsed = parse_range_header(raw)
    if parsed is None or parsed[0] is None or parsed[1] is None:
        raise S3Error("InvalidArgument", f"x-amz-copy-source-range must be bytes=first-last, not {raw!r}.")
    first, last = parsed
    if last >= size or first > last:
        raise S3Error("InvalidArgument", f"Range specified is not valid for source object of size: {size} ({raw}).")
    return first, last


async def copy_object(frontend, request: web.Request, bucket: str, key: str, may_read) -> web.Response:
    """CopyObject. ``may_read(bucket, key)`` raises AccessDenied when the caller may not read the source."""
    src_bucket, src_key, version = copy_source(request.headers["x-amz-copy-source"])
    may_read(src_bucket, src_key, **version)
    directive = request.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in DIRECTIVES:
        raise S3Error("InvalidArgument", f"x-amz-metadata-directive must be COPY or REPLACE, not {directive!r}.")
    if (src_bucket, src_key) == (bucket, key) and directive == "COPY" and not version:
        raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to copy an object to itself "
                      "without changing the object's metadata; send x-amz-metadata-directive: REPLACE.")
    backend = frontend.backend
    stamp = frontend._version(request)  # a replica's copy, ordered by the gateway (gateway/copy_in_place.py)
    if stamp is not None:
        write_condition = {"version": stamp, **versioned_write(frontend, request)}
    else:
        write_condition = await frontend._condition(request, bucket, key)
    in_place = getattr(backend, "copy_in_place", None)
    if in_place is not None and not version:
        done = await in_place(src_bucket, src_key, bucket, key, forwarded(request.headers), write_condition.get("condition"))
        if done is not None:
            info, source_version_id = done
            frontend._notify_created(request, bucket, key, info)
            return _copy_answer(frontend, request, info, source_version_id, "in-place")
    stream = await _read_source(backend, src_bucket, src_key, version)
    try:
        if stamp is not None and frontend._may_version(request, SOURCE_VERSION_HEADER) and \
                stream.info.version != request.headers[SOURCE_VERSION_HEADER]:
            raise S3Error(SOURCE_CHANGED, f"The source is at version {stream.info.version}, not the "
                          f"{request.headers[SOURCE_VERSION_HEADER]} the gateway asked to copy.", status=409)
        check_read(request.headers, stream.info, prefix="x-amz-copy-source-")
        if directive == "COPY":
            content_type, metadata = stream.info.content_type, dict(stream.info.metadata)
            stored, kinds = _copied_headers(request, stream.info.headers)
        else:
            content_type = request.headers.get("Content-Type")
            metadata = user_metadata(request)
            stored, kinds = checksums.write_headers(request.headers), checksums.compute_kinds(request.headers)
        chunks = checksums.recorded(stream.body, _NothingVerified(), stored, kinds)  # the copy's own checksums
        info = await backend.put_object(bucket, key, chunks, content_type=content_type, metadata=metadata,
                                        **write_condition, **checksums.as_argument(stored, kinds))
    finally:
        with contextlib.suppress(Exception):  # a source stream that already ended or broke
            await aclose(stream.body)
    frontend._notify_created(request, bucket, key, info)
    return _copy_answer(frontend, request, info, stream.info.version_id, "streamed" if in_place is not None else "local")


def _copy_answer(frontend, request: web.Request, info, source_version_id: str, path: str) -> web.Response:
    body = (f'{s3xml._DECL}<CopyObjectResult xmlns="{s3xml.S3_NS}"><LastModified>{s3xml.iso8601(info.last_modified)}'
            f'</LastModified><ETag>"{info.etag}"</ETag></CopyObjectResult>').encode()
    headers = {**exact_headers(info), **checksums.checksum_response(info.headers), COPY_PATH_HEADER: path}
    if source_version_id:
        headers["x-amz-copy-source-version-id"] = source_version_id
    return frontend._xml(request, body, headers)


async def _read_source(backend, bucket: str, key: str, version: dict, span=None):
    try:
        return await backend.get_object(bucket, key, span, **version)
    except S3Error as exc:
        raise _marker_source(exc) from None


def _marker_source(exc: S3Error) -> S3Error:
    if exc.code == "MethodNotAllowed" and exc.headers.get("x-amz-delete-marker") == "true":  # S3's own answer
        return S3Error("InvalidRequest", "The source of a copy request may not specifically refer to a delete marker by "
                       "version id; name an object version (ListObjectVersions shows them).")
    return exc


def _source_version(source) -> dict[str, str]:
    return {"x-amz-copy-source-version-id": source.version_id} if source.version_id else {}


def _copied_headers(request: web.Request, source: dict) -> tuple[dict, list[str]]:
    """COPY: the source's standard headers (a storage class the request names wins), and its
    checksum kinds (plus any the request asks for) computed again over the copy's bytes."""
    checksums.check_acl(request.headers)
    stored = {k: v for k, v in source.items() if not k.startswith((checksums.CHECKSUM_PREFIX, "x-nearfaas-")) and k != checksums.CHECKSUM_TYPE}
    stored |= {k: v for k, v in checksums.stored_request_headers(request.headers).items() if k == "x-amz-storage-class"}
    kinds = [k for k in checksums.KINDS if checksums.CHECKSUM_PREFIX + k in source]
    kinds += [k for k in checksums.compute_kinds(request.headers) if k not in kinds]
    return stored, kinds


class _NothingVerified:
    """A copy has no request body whose checksums were verified: the copy computes its own."""

    verified: dict = {}

    @staticmethod
    def verified_kinds() -> set:
        return set()


async def upload_part_copy(frontend, request: web.Request, bucket: str, key: str, upload_id: str, part_number: int,
                           may_read) -> web.Response:
    """UploadPartCopy: a part made of the source's bytes (all of them, or x-amz-copy-source-range)."""
    src_bucket, src_key, version = copy_source(request.headers["x-amz-copy-source"])
    may_read(src_bucket, src_key, **version)
    backend = frontend.backend
    try:
        info = await backend.head_object(src_bucket, src_key, **version)
    except S3Error as exc:
        raise _marker_source(exc) from None
    check_read(request.headers, info, prefix="x-amz-copy-source-")
    span = _source_range(request, info.size)
    stream = await _read_source(backend, src_bucket, src_key, version, span)
    try:
        if stream.info.etag != info.etag:  # replaced between the check and the read: check the one read
            check_read(request.headers, stream.info, prefix="x-amz-copy-source-")
        etag = await backend.upload_part(bucket, key, upload_id, part_number, stream.body)
    finally:
        with contextlib.suppress(Exception):  # a source stream that already ended or broke
            await aclose(stream.body)
    body = (f'{s3xml._DECL}<CopyPartResult xmlns="{s3xml.S3_NS}"><LastModified>{s3xml.iso8601(stream.info.last_modified)}'
            f'</LastModified><ETag>"{etag}"</ETag></CopyPartResult>').encode()
    return frontend._xml(request, body, _source_version(stream.info))

