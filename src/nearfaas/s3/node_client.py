"""An async client for a storage node's S3 API, used by the gateway.

It implements the StorageBackend protocol itself: the same dataclasses come back, and errors
are the node's own S3Error (code, status, message) parsed from its XML error body. A node that
cannot be reached raises S3Error("ServiceUnavailable") naming the node.

Connections are kept alive and pooled, with TCP_NODELAY set on every socket (small requests
otherwise wait ~40 ms on delayed ACKs). Bodies stream both ways in chunks.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
import time
from email.utils import parsedate_to_datetime
from collections.abc import AsyncIterator
from urllib.parse import quote
from xml.sax.saxutils import escape

import aiohttp
import yarl
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from nearfaas.s3.versions import DELETED_HEADER, VERSION_HEADER, VERSION_TRAILER_HEADER
from nearfaas.s3 import versioning_xml
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.backend import (BucketInfo, DeleteResult, ListResult, ObjectInfo, ObjectStream, SelectResult, UploadListResult,
                                 VersionListResult)
from nearfaas.s3.copy import SOURCE_VERSION_HEADER
from nearfaas.s3.versioning import VERSIONED_HEADER
from nearfaas.s3.errors import S3Error
from nearfaas.s3.bucket_policy_api import OPTIONS_HEADER
from nearfaas.s3.frontend import DSCS_REPLICA_HEADER, UPLOAD_ID_HEADER
from nearfaas.s3.checksums import CHECKSUM_MODE, CHECKSUM_PREFIX, COMPUTE_HEADER, STORED_HEADERS, WHOLE_OBJECT, part_checksums_xml
from nearfaas.s3.parts import PART_SIZES
from nearfaas.s3.object_headers import COPY_CHECKSUMS_HEADER, COPY_ETAG_HEADER, COPY_LAST_MODIFIED_HEADER
from nearfaas.s3.validation import format_range

READ_CHUNK = 256 * 1024
DEFAULT_CONTENT_TYPE = "binary/octet-stream"


def nodelay_socket(addr_info) -> socket.socket:
    """Socket factory for aiohttp's TCPConnector: every connection gets TCP_NODELAY."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def make_session(*, limit: int = 256, timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=60, socket_factory=nodelay_socket)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                 timeout=timeout or aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60))


class _UnsignedPayloadSigner(S3SigV4Auth):
    # Bodies stream, so they cannot be hashed before sending: sign UNSIGNED-PAYLOAD.
    def payload(self, request):
        return "UNSIGNED-PAYLOAD"


class _BodyErrorTrap:
    """Wraps a request body so that an error raised by the caller's iterator (e.g. a bad
    checksum at the end) is re-raised as itself, not as an aiohttp connection error."""

    def __init__(self, body: AsyncIterator[bytes]):
        self._body = body
        self.error: BaseException | None = None
        self.sent = 0

    async def __aiter__(self):
        try:
            async for chunk in self._body:
                self.sent += len(chunk)
                yield chunk
        except BaseException as exc:
            self.error = exc
            raise


class _ResponseBody:
    """A node's response body as an async iterator of chunks. ``aclose()`` releases the
    connection even when no chunk was ever read (a read that chose another replica)."""

    def __init__(self, node: str, response: aiohttp.ClientResponse, chunk: int):
        self._node, self._response, self._chunk = node, response, chunk

    def __aiter__(self) -> _ResponseBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._response.content.read(self._chunk)
        except (TimeoutError, aiohttp.ClientError) as exc:
            self._response.release()
            raise S3Error("ServiceUnavailable", f"Storage node {self._node} broke off the object stream: {exc!r}.") from None
        except BaseException:
            self._response.release()
            raise
        if not chunk:
            self._response.release()
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self._response.release()


class NodeClient:
    def __init__(self, node: str, base_url: str, *, session: aiohttp.ClientSession | None = None,
                 credentials: tuple[str, str] | None = None, region: str = "us-east-1",
                 read_chunk: int = READ_CHUNK):
        self.node = node
        self.base_url = base_url.rstrip("/")
        self._session = session
        self._own_session = session is None
        self._credentials = Credentials(*credentials) if credentials else None
        self._region = region
        self._read_chunk = read_chunk

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = make_session()
            self._own_session = True
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    # -- plumbing --------------------------------------------------------------------------------

    def _url(self, bucket: str | None = None, key: str | None = None) -> str:
        path = "/"
        if bucket:
            path += bucket
            if key is not None:
                path += "/" + quote(key, safe="/~")
        return self.base_url + path

    def _sign(self, method: str, full_url: str, headers: dict[str, str]) -> dict[str, str]:
        if self._credentials is None:
            return headers
        request = AWSRequest(method=method, url=full_url, headers=headers)
        _UnsignedPayloadSigner(self._credentials, "s3", self._region).add_auth(request)
        return dict(request.headers.items())

    async def _request(self, method: str, bucket: str | None = None, key: str | None = None, *,
                       params: list[tuple[str, str]] | None = None, headers: dict[str, str] | None = None,
                       data=None, ok: tuple[int, ...] = (200,), stream: bool = False) -> aiohttp.ClientResponse:
        """Send one request; returns the response (to be released by the caller when streaming),
        or raises the node's S3Error / ServiceUnavailable."""
        if not self.base_url:  # not located yet (a node the gateway learns of from Ray): down, for now
            raise S3Error("ServiceUnavailable", f"Storage node {self.node} has no known address yet.")
        # The URL is encoded here, in SigV4's canonical form, and sent exactly so (encoded=True):
        # what is signed is what goes on the wire.
        url = self._url(bucket, key)
        if params:
            url += "?" + "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in params)
        headers = self._sign(method, url, dict(headers or {}))
        skip = ("Content-Type",) if "Content-Type" not in headers else ()
        trap = _BodyErrorTrap(data) if data is not None and not isinstance(data, (bytes, bytearray)) else None
        try:
            response = await self.session.request(
                method, yarl.URL(url, encoded=True), headers=headers, data=trap if trap is not None else data,
                skip_auto_headers=skip)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if trap is not None and trap.error is not None:
                raise trap.error from None
            raise S3Error("ServiceUnavailable", f"Storage node {self.node} ({self.base_url}) could not be reached: "
                          f"{exc!r}.") from None
        if trap is not None and trap.error is not None:
            response.release()
            raise trap.error
        if response.status not in ok:
            try:
                raise await self._error_from(response, method)
            finally:
                response.release()
        if not stream:
            try:
                await response.read()
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise S3Error("ServiceUnavailable", f"Storage node {self.node} broke off its response: {exc!r}.") from None
        return response

    async def _error_from(self, response: aiohttp.ClientResponse, method: str) -> S3Error:
        body = b""
        if method != "HEAD":
            try:
                body = await response.read()
            except (TimeoutError, aiohttp.ClientError):
                body = b""
        parsed = s3xml.parse_error(body) if body else None
        if parsed is not None:
            code, message, resource = parsed
        else:
            code = response.headers.get("x-nearfaas-error-code") or _code_for_status(response.status)
            message, resource = "", ""
        # A 404 from a replica that holds the key's tombstone names the delete's version.
        versioned = {h: response.headers[h] for h in (VERSION_HEADER, DELETED_HEADER, *_DELETE_MARKER_HEADERS)
                     if h in response.headers}
        return S3Error(code, message or None, resource=resource, status=response.status, headers=versioned)

    # -- buckets ---------------------------------------------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        response = await self._request("GET")
        return s3xml.parse_list_buckets(await response.read())

    async def create_bucket(self, name: str, options: dict | None = None) -> BucketInfo:
        headers = {DSCS_REPLICA_HEADER: "true"} if (options or {}).get("dscs_replica") else {}
        if options:  # all of them (its owner too): a node takes them from the gateway only (s3/bucket_policy_api.py)
            headers[OPTIONS_HEADER] = json.dumps(options, separators=(",", ":"))
        response = await self._request("PUT", name, headers=headers)
        return _bucket_from_headers(name, response.headers)

    async def head_bucket(self, name: str) -> BucketInfo:
        response = await self._request("HEAD", name)
        return _bucket_from_headers(name, response.headers)

    async def delete_bucket(self, name: str) -> None:
        await self._request("DELETE", name, ok=(204, 200))

    async def get_bucket_versioning(self, name: str) -> str:
        response = await self._request("GET", name, params=[("versioning", "")])
        root = s3xml.parse_xml(await response.read(), "VersioningConfiguration")
        return (s3xml._child_text(root, "Status") or "").strip()

    async def put_bucket_policy(self, name: str, text: str | None) -> None:
        if text is None:
            await self._request("DELETE", name, params=[("policy", "")], ok=(204, 200))
        else:
            await self._request("PUT", name, params=[("policy", "")], data=text.encode(), headers={"Content-Type": "application/json"},
                                ok=(204, 200))

    async def put_bucket_versioning(self, name: str, status: str) -> None:
        body = versioning_xml.versioning_configuration_xml(status)
        await self._request("PUT", name, params=[("versioning", "")], data=body, headers={"Content-Type": "application/xml"})

    # -- objects ---------------------------------------------------------------------------------

    async def put_object(self, bucket: str, key: str, body: AsyncIterator[bytes], *,
                         content_md5: bytes | None = None, content_type: str | None = None,
                         metadata: dict | None = None, options: dict | None = None,
                         content_length: int | None = None, version_trailer: int | None = None,
                         copy_of: ObjectInfo | None = None, headers: dict | None = None, versioned: bool = False) -> ObjectInfo:
        """Stream `body` to the node. With `content_length` the request carries Content-Length;
        without it, chunked transfer encoding. `version_trailer`: the body's last that many
        bytes are the write's version (the gateway's; s3/frontend.py). `copy_of`: a repair
        copy keeps that replica's ETag and Last-Modified (and checksums). `headers`: the stored
        system headers (s3/checksums.py); the checksums the node is to compute are named in them.
        `versioned`: made while the bucket's versioning was Enabled (s3/versioning.py)."""
        stored = headers or {}
        headers = {**_object_write_headers(content_type, metadata), **_stored_out(stored, copy=copy_of is not None)}
        if versioned:
            headers[VERSIONED_HEADER] = "true"
        if version_trailer is not None:
            headers[VERSION_TRAILER_HEADER] = str(version_trailer)
        if copy_of is not None:
            headers[COPY_ETAG_HEADER] = copy_of.etag
            headers[COPY_LAST_MODIFIED_HEADER] = repr(copy_of.last_modified)
        if content_md5 is not None:
            headers["Content-MD5"] = base64.b64encode(content_md5).decode()
        if (options or {}).get("dscs_replica"):
            headers[DSCS_REPLICA_HEADER] = "true"
        if content_length is not None:
            headers["Content-Length"] = str(content_length)
        response = await self._request("PUT", bucket, key, headers=headers, data=body)
        return _info_from_headers(bucket, key, response.headers, content_type=content_type, metadata=metadata,
                                  stored=stored)

    async def get_object(self, bucket: str, key: str,
                         byte_range: tuple[int | None, int | None] | None = None, *,
                         version_id: str | None = None) -> ObjectStream:
        headers = {"Range": format_range(byte_range)} if byte_range is not None else {}
        headers[CHECKSUM_MODE] = headers[PART_SIZES] = "ENABLED"  # the object's checksum (and part sizes) are part of its info
        response = await self._request("GET", bucket, key, headers=headers, ok=(200, 206), stream=True,
                                       params=_version_params(version_id))
        info = _info_from_headers(bucket, key, response.headers)
        length = int(response.headers.get("Content-Length", "0"))
        start = 0
        content_range = response.headers.get("Content-Range")
        if response.status == 206 and content_range:  # "bytes a-b/size"
            span, _, size = content_range.removeprefix("bytes ").partition("/")
            start = int(span.split("-")[0])
            info = dataclasses.replace(info, size=int(size))
        return ObjectStream(info=info, start=start, end=start + length - 1,
                            body=self._stream_body(response))

    async def copy_object(self, bucket: str, key: str, headers: dict, *, version: str, source_version: str,
                          versioned: bool = False) -> tuple[ObjectInfo, str]:
        """CopyObject made by this node from its own copy of the source (gateway/copy_in_place.py):
        ``headers`` are the client's copy headers; the copy is the write ``version`` and must read
        the source at ``source_version``. Returns (the copy's info, the source's version id)."""
        headers = {**headers, VERSION_HEADER: version, SOURCE_VERSION_HEADER: source_version}
        if versioned:
            headers[VERSIONED_HEADER] = "true"
        response = await self._request("PUT", bucket, key, headers=headers)
        root = s3xml.parse_xml(await response.read(), "CopyObjectResult")
        info = dataclasses.replace(_info_from_headers(bucket, key, response.headers),
                                   etag=(s3xml._child_text(root, "ETag") or "").strip('"'))
        return info, response.headers.get("x-amz-copy-source-version-id", "")

    async def select_object(self, bucket: str, key: str, request_xml: bytes) -> SelectResult:
        """SelectObjectContent on this node, next to its copy of the object: the node's event
        stream, relayed as it arrives."""
        response = await self._request("POST", bucket, key, params=[("select", ""), ("select-type", "2")],
                                       headers={"Content-Type": "application/xml"}, data=bytes(request_xml), stream=True)
        headers = {h: v for h, v in response.headers.items() if h.lower().startswith("x-nearfaas-")}
        return SelectResult(headers=headers, body=self._stream_body(response))

    def _stream_body(self, response: aiohttp.ClientResponse) -> _ResponseBody:
        return _ResponseBody(self.node, response, self._read_chunk)

    async def head_object(self, bucket: str, key: str, *, version_id: str | None = None) -> ObjectInfo:
        response = await self._request("HEAD", bucket, key, headers={CHECKSUM_MODE: "ENABLED", PART_SIZES: "ENABLED"},
                                       params=_version_params(version_id))
        return _info_from_headers(bucket, key, response.headers)

    async def delete_object(self, bucket: str, key: str, version: str | None = None, *, versioned: bool = False,
                            version_id: str | None = None) -> DeleteResult | None:
        headers = {VERSION_HEADER: version} if version is not None else {}
        if versioned:
            headers[VERSIONED_HEADER] = "true"
        response = await self._request("DELETE", bucket, key, headers=headers, ok=(204, 200), params=_version_params(version_id))
        if "x-amz-version-id" not in response.headers and "x-amz-delete-marker" not in response.headers:
            return None
        return DeleteResult(version_id=response.headers.get("x-amz-version-id"),
                            delete_marker=response.headers.get("x-amz-delete-marker") == "true")

    async def list_object_versions(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                                   key_marker: str = "", version_id_marker: str = "") -> VersionListResult:
        # url encoding, and the node's exact versions (it answers the gateway with them).
        params = [("versions", ""), ("encoding-type", "url"), ("max-keys", str(max_keys))]
        for name, value in (("prefix", prefix), ("delimiter", delimiter), ("key-marker", key_marker),
                            ("version-id-marker", version_id_marker)):
            if value:
                params.append((name, value))
        response = await self._request("GET", bucket, params=params)
        return versioning_xml.parse_list_versions(bucket, await response.read())

    async def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                           start_after: str = "") -> ListResult:
        # ListObjects v1: its marker / NextMarker are the raw last entry, as ListResult wants.
        params = [("encoding-type", "url"), ("max-keys", str(max_keys))]
        for name, value in (("prefix", prefix), ("delimiter", delimiter), ("marker", start_after)):
            if value:
                params.append((name, value))
        response = await self._request("GET", bucket, params=params)
        return s3xml.parse_list_objects(bucket, await response.read())

    # -- multipart -------------------------------------------------------------------------------

    async def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None,
                                      metadata: dict | None = None, upload_id: str | None = None,
                                      headers: dict | None = None) -> str:
        headers = {**_object_write_headers(content_type, metadata), **(headers or {})}  # with its checksum algorithm
        if upload_id is not None:
            headers[UPLOAD_ID_HEADER] = upload_id
        response = await self._request("POST", bucket, key, params=[("uploads", "")], headers=headers)
        return s3xml.parse_initiate_multipart(await response.read())

    async def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int,
                          body: AsyncIterator[bytes], *, content_md5: bytes | None = None,
                          content_length: int | None = None, headers: dict | None = None) -> str:
        headers = _stored_out(headers or {}, copy=False)
        if content_md5 is not None:
            headers["Content-MD5"] = base64.b64encode(content_md5).decode()
        if content_length is not None:
            headers["Content-Length"] = str(content_length)
        response = await self._request("PUT", bucket, key, headers=headers, data=body,
                                       params=[("partNumber", str(part_number)), ("uploadId", upload_id)])
        return response.headers.get("ETag", "").strip('"')

    async def complete_multipart_upload(self, bucket: str, key: str, upload_id: str,
                                        parts: list[tuple[int, str]], version: str | None = None,
                                        part_checksums: dict | None = None, versioned: bool = False) -> ObjectInfo:
        sums = part_checksums or {}
        document = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>\"{escape(etag.strip(chr(34)))}\"</ETag>"
                           f"{part_checksums_xml(sums.get(n, {}))}</Part>" for n, etag in parts)
        body = f'<CompleteMultipartUpload xmlns="{s3xml.S3_NS}">{document}</CompleteMultipartUpload>'.encode()
        headers = {"Content-Type": "application/xml", **sums.get(WHOLE_OBJECT, {})}  # the object's own checksum, if named
        if version is not None:
            headers[VERSION_HEADER] = version
        if versioned:
            headers[VERSIONED_HEADER] = "true"
        response = await self._request("POST", bucket, key, params=[("uploadId", upload_id)], data=body, headers=headers)
        etag = s3xml.parse_complete_result(await response.read())
        return dataclasses.replace(_info_from_headers(bucket, key, response.headers), etag=etag)

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._request("DELETE", bucket, key, params=[("uploadId", upload_id)], ok=(204, 200))

    async def list_parts(self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0):
        params = [("uploadId", upload_id), ("max-parts", str(max_parts)), ("part-number-marker", str(part_number_marker))]
        response = await self._request("GET", bucket, key, params=params)
        return s3xml.parse_list_parts(await response.read())

    async def list_multipart_uploads(self, bucket: str, prefix: str = "", delimiter: str = "", max_uploads: int = 1000,
                                     key_marker: str = "", upload_id_marker: str = "") -> UploadListResult:
        # url encoding: any key that is valid Unicode comes back exactly, whatever XML can carry.
        params = [("uploads", ""), ("encoding-type", "url"), ("max-uploads", str(max_uploads))]
        for name, value in (("prefix", prefix), ("delimiter", delimiter), ("key-marker", key_marker),
                            ("upload-id-marker", upload_id_marker)):
            if value:
                params.append((name, value))
        response = await self._request("GET", bucket, params=params)
        return s3xml.parse_list_multipart_uploads(bucket, await response.read())


_DELETE_MARKER_HEADERS = ("x-amz-delete-marker", "x-amz-version-id", "Last-Modified")


def _version_params(version_id: str | None) -> list[tuple[str, str]] | None:
    return [("versionId", version_id)] if version_id is not None else None


def _code_for_status(status: int) -> str:
    return {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey", 405: "MethodNotAllowed",
            409: "BucketNotEmpty", 412: "PreconditionFailed", 416: "InvalidRange", 501: "NotImplemented",
            503: "ServiceUnavailable"}.get(status, "InternalError")


def _object_write_headers(content_type: str | None, metadata: dict | None) -> dict[str, str]:
    headers = {f"x-amz-meta-{name}": str(value) for name, value in (metadata or {}).items()}
    if content_type:
        headers["Content-Type"] = content_type
    return headers


def _stored_out(stored: dict, *, copy: bool) -> dict[str, str]:
    """A write's stored headers as a request to a node: the standard ones as they are, the kinds
    the node is to checksum (COMPUTE_HEADER); a repair copy's checksums as they are, in JSON."""
    out = {k: v for k, v in stored.items() if not k.startswith(CHECKSUM_PREFIX) and k != PART_SIZES}
    sums = {k: v for k, v in stored.items() if k.startswith(CHECKSUM_PREFIX) or k == PART_SIZES}
    if copy and sums:
        out[COPY_CHECKSUMS_HEADER] = json.dumps(sums, separators=(",", ":"))
    return out


def _stored_in(headers) -> dict[str, str]:
    """The stored system headers a node's GET / HEAD / write answer carries."""
    return {name: headers[name] for name in (*STORED_HEADERS, PART_SIZES,
                                             *(h.lower() for h in headers if h.lower().startswith(CHECKSUM_PREFIX)))
            if name in headers}


def _last_modified(headers) -> float:
    exact = headers.get("x-nearfaas-last-modified")
    if exact:
        try:
            return float(exact)
        except ValueError:
            pass
    http_date = headers.get("Last-Modified")
    if http_date:
        try:
            return parsedate_to_datetime(http_date).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


def _info_from_headers(bucket: str, key: str, headers, *, content_type: str | None = None,
                       metadata: dict | None = None, stored: dict | None = None) -> ObjectInfo:
    """ObjectInfo from a nearfaas node's response headers. The x-nearfaas-* headers are exact;
    the standard ones are the fallback (a PUT response's own Content-Type is not the object's,
    so `content_type` / `metadata` given by the caller win over absent exact headers)."""
    size = headers.get("x-nearfaas-object-size") or headers.get("Content-Length") or "0"
    found_metadata = {name[11:].lower(): value for name, value in headers.items()
                      if name.lower().startswith("x-amz-meta-")}
    found_type = headers.get("x-nearfaas-content-type")
    if found_type is None:
        found_type = content_type if content_type is not None or metadata is not None else headers.get("Content-Type")
    return ObjectInfo(
        bucket=bucket, key=key, size=int(size), etag=headers.get("ETag", "").strip('"'),
        last_modified=_last_modified(headers),
        content_type=found_type or DEFAULT_CONTENT_TYPE,
        metadata=found_metadata or {k.lower(): str(v) for k, v in (metadata or {}).items()},
        version=headers.get(VERSION_HEADER, ""),
        version_id=headers.get("x-amz-version-id", ""),
        headers={**{k: v for k, v in (stored or {}).items() if k != COMPUTE_HEADER}, **_stored_in(headers)},
    )


def _bucket_from_headers(name: str, headers) -> BucketInfo:
    try:
        created = float(headers.get("x-nearfaas-bucket-created", ""))
    except ValueError:
        created = time.time()
    try:
        options = json.loads(headers.get("x-nearfaas-bucket-options", "{}"))
    except ValueError:
        options = {}
    return BucketInfo(name=name, created=created, options=options if isinstance(options, dict) else {})
