"""The HTTP headers the S3 front end reads and writes about objects and buckets: user metadata,
exact timestamps and sizes for the gateway, conditional requests (If-Match / If-None-Match), a
replica repair's copy headers, and the write version carried at the end of a body."""

from __future__ import annotations

import json

from aiohttp import web

from nearfaas.s3 import checksums
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.backend import BucketInfo, ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import validate_metadata
from nearfaas.s3.parts import PART_SIZES
from nearfaas.s3.versions import VERSION_HEADER, VERSION_TRAILER_HEADER, is_version

# A repair copy (gateway only) keeps the source replica's ETag and Last-Modified.
COPY_ETAG_HEADER = "x-nearfaas-copy-etag"
COPY_LAST_MODIFIED_HEADER = "x-nearfaas-copy-last-modified"
COPY_CHECKSUMS_HEADER = "x-nearfaas-copy-checksums"


def is_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1", "yes")


def user_metadata(request: web.Request) -> dict[str, str]:
    """The request's x-amz-meta-* headers, checked here (names, size, sendable values) before any
    replica is asked to store them: a value the gateway could not sign for a node answered 500."""
    return validate_metadata({name[11:].lower(): value for name, value in request.headers.items()
                              if name.lower().startswith("x-amz-meta-")})


def exact_headers(info: ObjectInfo) -> dict[str, str]:
    headers = {"x-nearfaas-last-modified": repr(info.last_modified), "x-nearfaas-object-size": str(info.size),
               "x-nearfaas-content-type": info.content_type, "Last-Modified": s3xml.rfc1123(info.last_modified)}
    if info.version:
        headers[VERSION_HEADER] = info.version
    if info.version_id:  # S3's own, in a bucket that has had versioning (s3/versioning.py)
        headers["x-amz-version-id"] = info.version_id
    return headers


def copy_of(request: web.Request) -> tuple[str, float]:
    etag, raw = request.headers[COPY_ETAG_HEADER], request.headers.get(COPY_LAST_MODIFIED_HEADER, "")
    try:
        last_modified = float(raw)
    except ValueError:
        raise S3Error("InvalidArgument", f"{COPY_LAST_MODIFIED_HEADER} must be unix seconds, not {raw!r}.") from None
    if not etag or len(etag) > 64 or not all(c in "0123456789abcdef-" for c in etag):
        raise S3Error("InvalidArgument", f"{COPY_ETAG_HEADER} must be an ETag (hex, optionally -<parts>), not {etag!r}.")
    return etag, last_modified


class VersionTrailer:
    """Splits the version off the end of a body: ``strip`` yields the object's bytes (holding
    back the last ``length`` bytes as they stream), after which ``version()`` is the version."""

    def __init__(self, length: int):
        self.length = length
        self._version: str | None = None

    async def strip(self, chunks):
        tail = b""
        async for chunk in chunks:
            tail += chunk
            if len(tail) > self.length:
                yield tail[: -self.length]
                tail = tail[-self.length:]
        text = tail.decode("ascii", "replace")
        if len(tail) != self.length or not is_version(text):
            raise S3Error("InvalidArgument", f"The body does not end with a {self.length}-byte version "
                          f"({VERSION_TRAILER_HEADER}); got {text[-40:]!r}.")
        self._version = text

    def version(self) -> str:
        if self._version is None:
            raise RuntimeError("the version is known only once the body has been read to its end")
        return self._version


def bucket_headers(info: BucketInfo) -> dict[str, str]:
    return {"x-nearfaas-bucket-created": repr(info.created),
            "x-nearfaas-bucket-options": json.dumps(info.options, separators=(",", ":"))}


def object_headers(info: ObjectInfo, request_headers=None) -> dict[str, str]:
    """A GET's or HEAD's headers for the object: its stored system headers always, its checksum
    only when the request asks (x-amz-checksum-mode: ENABLED, s3/checksums.py) for the whole
    object: as S3 does, a range gets none (it is the whole object's, not the range's)."""
    request_headers = request_headers or {}
    wanted = checksums.checksum_mode(request_headers) and request_headers.get("Range") is None
    headers = {"ETag": f'"{info.etag}"', "Accept-Ranges": "bytes", **exact_headers(info),
               "Content-Type": info.content_type, **checksums.response_headers(info.headers, wanted)}
    for name, value in info.metadata.items():
        headers[f"x-amz-meta-{name}"] = value
    return headers


def copied_checksums(request: web.Request) -> dict[str, str]:
    """A repair copy's checksum headers (x-nearfaas-copy-checksums: JSON), kept as the source
    replica has them: a multipart object's composite checksum cannot be computed from its bytes."""
    raw = request.headers.get(COPY_CHECKSUMS_HEADER)
    try:
        found = json.loads(raw) if raw else {}
    except ValueError:
        found = None
    if not isinstance(found, dict) or not all(isinstance(v, str) and (k.startswith(checksums.CHECKSUM_PREFIX) or k == PART_SIZES)
                                              for k, v in found.items()):
        raise S3Error("InvalidArgument", f"{COPY_CHECKSUMS_HEADER} must be a JSON object of x-amz-checksum-* values.")
    return found
