"""The S3 front end's listings: ListObjects (v1 and v2), ListMultipartUploads and ListParts.

A mixin of ``S3Frontend`` (s3/frontend.py), which routes to these handlers; they read only the
query string and answer XML (s3/xml.py), so they are kept apart from the object data paths.
"""

from __future__ import annotations

from aiohttp import web

from nearfaas.s3 import xml as s3xml
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import decimal

MAX_LIST_KEYS = 1000


class ListingHandlers:
    async def _list_objects(self, request, bucket: str, q: dict) -> web.StreamResponse:
        list_type = q.get("list-type", "1")
        if list_type not in ("1", "2"):
            raise S3Error("InvalidArgument", f"list-type must be 1 or 2, not {list_type!r}.")
        encoding, max_keys, prefix, delimiter = list_params(q, "max-keys")
        if list_type == "2":
            token = q.get("continuation-token")  # an empty one asks for the first page and is echoed, as in S3
            start_after = q.get("start-after", "")
            start = s3xml.decode_token(token) if token else start_after
            result = await self.backend.list_objects(bucket, prefix, delimiter, max_keys, start)
            body = s3xml.list_objects_v2_xml(
                bucket, result, prefix=prefix, delimiter=delimiter, max_keys=max_keys, start_after=start_after,
                continuation_token=token, encoding_type=encoding, fetch_owner=q.get("fetch-owner") == "true")
        else:
            marker = q.get("marker", "")
            result = await self.backend.list_objects(bucket, prefix, delimiter, max_keys, marker)
            body = s3xml.list_objects_v1_xml(bucket, result, prefix=prefix, delimiter=delimiter,
                                             max_keys=max_keys, marker=marker, encoding_type=encoding)
        return self._xml(request, body)

    async def _list_uploads(self, request, bucket: str, q: dict) -> web.StreamResponse:
        """ListMultipartUploads: prefix, delimiter, key-marker / upload-id-marker, max-uploads."""
        encoding, max_uploads, prefix, delimiter = list_params(q, "max-uploads")
        key_marker = q.get("key-marker", "")
        # S3 ignores upload-id-marker without a key-marker.
        upload_id_marker = q.get("upload-id-marker", "") if key_marker else ""
        result = await self.backend.list_multipart_uploads(bucket, prefix, delimiter, max_uploads, key_marker,
                                                           upload_id_marker)
        return self._xml(request, s3xml.list_multipart_uploads_xml(
            bucket, result, prefix=prefix, delimiter=delimiter, max_uploads=max_uploads, key_marker=key_marker,
            upload_id_marker=upload_id_marker, encoding_type=encoding))

    # -- objects ---------------------------------------------------------------------------------

    async def _list_parts(self, request, bucket: str, key: str, q: dict) -> web.StreamResponse:
        max_parts, marker = (_bounded(q, name, default, 0, 10000) for name, default in (("max-parts", 1000), ("part-number-marker", 0)))
        result = await self.backend.list_parts(bucket, key, q["uploadId"], max_parts, marker)
        return self._xml(request, s3xml.list_parts_xml(bucket, key, q["uploadId"], result, max_parts=max_parts, marker=marker))


def list_params(q: dict, max_name: str) -> tuple[str, int, str, str]:
    """(encoding-type, the page size named ``max_name``, prefix, delimiter) of a listing."""
    encoding = q.get("encoding-type", "")
    if encoding not in ("", "url"):
        raise S3Error("InvalidArgument", f"Invalid Encoding Method {encoding!r} specified in Request; use url.")
    raw_max = q.get(max_name, str(MAX_LIST_KEYS))
    if (most := decimal(raw_max.strip())) is None:
        raise S3Error("InvalidArgument", f"{max_name} must be a non-negative integer, not {raw_max!r}.")
    return encoding, min(most, MAX_LIST_KEYS), q.get("prefix", ""), q.get("delimiter", "")


def _bounded(q: dict, name: str, default: int, lo: int, hi: int) -> int:
    raw = q.get(name, str(default))
    value = decimal(raw.strip())
    if value is None or not lo <= value <= hi:
        raise S3Error("InvalidArgument", f"{name} must be an integer from {lo} to {hi}, not {raw!r}.")
    return min(value, hi)
