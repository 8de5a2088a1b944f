"""CopyObject and UploadPartCopy: a PUT with ``x-amz-copy-source``.

The copy is a read of the source (any backend: on the gateway, from the replica holding its
newest version) streamed into a write of the destination (to the destination's replicas), so it
is exactly as durable, ordered and replicated as a PutObject, and a copy never buffers the
object. ``x-amz-metadata-directive: COPY`` (the default) keeps the source's Content-Type and user
metadata, ``REPLACE`` takes the request's. The source's ``x-amz-copy-source-if-*`` conditions
answer 412 when they fail (s3/conditions.py); the destination may carry If-None-Match / If-Match
like any write.

Known caveats:
- Versioned sources (``?versionId=``) are refused with 501: buckets have no versions yet.
- Bytes move node -> gateway -> nodes even when the destination's replicas already hold the
  source (no node-local copy yet).
"""

from __future__ import annotations

import contextlib
from urllib.parse import unquote

from aiohttp import web

from nearfaas.s3 import checksums
from nearfaas.s3.backend import aclose
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.conditions import check_read
from nearfaas.s3.errors import S3Error
from nearfaas.s3.object_headers import user_metadata
from nearfaas.s3.validation import parse_range_header, validate_bucket_name, validate_key

DIRECTIVES = ("COPY", "REPLACE")


def copy_source(header: str) -> tuple[str, str]:
    """(bucket, key) of ``x-amz-copy-source: [/]bucket/key[?versionId=...]`` (URL-encoded)."""
    path, _, query = header.partition("?")
    if query:
        raise S3Error("NotImplemented", "x-amz-copy-source with ?versionId= needs bucket versioning, which nearfaas does "
                      "not implement yet; copy the current object (drop ?versionId).", status=501)
    bucket, sep, key = unquote(path).lstrip("/").partition("/")
    if not sep or not bucket or not key:
        raise S3Error("InvalidArgument", f"x-amz-copy-source must be bucket/key (URL-encoded), not {header!r}.")
    validate_bucket_name(bucket)
    validate_key(key)
    return bucket, key


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
    src_bucket, src_key = copy_source(request.headers["x-amz-copy-source"])
    may_read(src_bucket, src_key)
    directive = request.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in DIRECTIVES:
        raise S3Error("InvalidArgument", f"x-amz-metadata-directive must be COPY or REPLACE, not {directive!r}.")
    if (src_bucket, src_key) == (bucket, key) and directive == "COPY":
        raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to copy an object to itself "
                      "without changing the object's metadata; send x-amz-metadata-directive: REPLACE.")
    backend = frontend.backend
    write_condition = await frontend._condition(request, bucket, key)
    stream = await backend.get_object(src_bucket, src_key)
    try:
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
    body = (f'{s3xml._DECL}<CopyObjectResult xmlns="{s3xml.S3_NS}"><LastModified>{s3xml.iso8601(info.last_modified)}'
            f'</LastModified><ETag>"{info.etag}"</ETag></CopyObjectResult>').encode()
    return frontend._xml(request, body)


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
    src_bucket, src_key = copy_source(request.headers["x-amz-copy-source"])
    may_read(src_bucket, src_key)
    backend = frontend.backend
    info = await backend.head_object(src_bucket, src_key)
    check_read(request.headers, info, prefix="x-amz-copy-source-")
    span = _source_range(request, info.size)
    stream = await backend.get_object(src_bucket, src_key, span)
    try:
        if stream.info.etag != info.etag:  # replaced between the check and the read: check the one read
            check_read(request.headers, stream.info, prefix="x-amz-copy-source-")
        etag = await backend.upload_part(bucket, key, upload_id, part_number, stream.body)
    finally:
        with contextlib.suppress(Exception):  # a source stream that already ended or broke
            await aclose(stream.body)
    body = (f'{s3xml._DECL}<CopyPartResult xmlns="{s3xml.S3_NS}"><LastModified>{s3xml.iso8601(stream.info.last_modified)}'
            f'</LastModified><ETag>"{etag}"</ETag></CopyPartResult>').encode()
    return frontend._xml(request, body)

