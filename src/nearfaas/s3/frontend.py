"""The S3 REST protocol as one aiohttp handler over any StorageBackend.

Mount it after the host's own routes; it answers everything else::

    frontend = S3Frontend(backend, auth=S3Auth({...}), max_body=5 << 30)
    frontend.mount(app)          # one catch-all route: every method, every path

Bucket addressing: path style (``/bucket/key``) and virtual-host style (``Host:
bucket.localhost[:port]``, or any suffix given in ``virtual_host_suffixes``).

Every error is an S3 XML error body with the standard status; HEAD errors have no body. An
unexpected exception becomes InternalError (500) and is logged: bad input never should.
Custom headers: ``x-nearfaas-dscs-replica: true`` (CreateBucket/PutObject options),
``x-nearfaas-upload-id`` (CreateMultipartUpload: use this upload id), and on responses
``x-nearfaas-last-modified`` / ``x-nearfaas-object-size`` / ``x-nearfaas-bucket-*`` (exact
values for the node client), ``x-nearfaas-version`` (the object's version) and
``x-nearfaas-error-code`` on errors (HEAD has no body).

Versioned writes (a storage node, for the gateway only: ``version_writer`` says who may): a
PutObject whose request carries ``x-nearfaas-version-trailer: <n>`` ends its body with the n
bytes of the write's version (the gateway stamps it when the client's body has ended, so the
order of versions is the order in which writes completed); DeleteObject and
CompleteMultipartUpload carry it in ``x-nearfaas-version``. Anyone else's version headers are
refused (403), so no client can order its write ahead of everyone else's.

Multipart uploads are listed (ListMultipartUploads, ``GET /bucket?uploads``) in (key, upload
id) order, which is what S3's upload-id-marker ("uploads whose id sorts after it") describes;
ListParts (``GET /bucket/key?uploadId=``) pages by part number. CopyObject and UploadPartCopy
(a PUT with ``x-amz-copy-source``) live in s3/copy.py; conditional requests (If-*) in
s3/conditions.py, checked by the backend atomically with the write where it can.
DeleteObjects reports every key it could not delete as an ``<Error>``, in Quiet mode too.

Authorization: a principal limited to some buckets (``Principal.buckets``, s3/sigv4.py) gets
AccessDenied for any request addressing another bucket (checked on the bucket the request
resolves to, path or virtual-host style, before any backend sees it), and ListBuckets shows it
only its own. A principal with a policy (``Principal.authorizer``) must be allowed the action
the request needs (s3/actions.py; DeleteObjects: s3:DeleteObject on each key), and ListBuckets
shows it only the buckets it may list (s3:ListBucket). Signed streaming bodies are verified chunk by chunk (s3/body.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable
from urllib.parse import parse_qsl, quote, unquote

from aiohttp import web
from multidict import CIMultiDict

from nearfaas.bitar import transfer
from nearfaas.s3 import actions as s3actions
from nearfaas.s3 import checksums
from nearfaas.s3 import attributes as s3attributes, parts as s3parts, post_object as s3post  # issue 22's last three
from nearfaas.s3 import bucket_policy_api as s3policy
from nearfaas.s3 import copy as s3copy
from nearfaas.s3 import versioning as s3versioning
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.backend import ObjectInfo, StorageBackend, aclose
from nearfaas.s3.body import RequestBody, decode_content_md5
from nearfaas.s3.conditions import WriteCondition, check_read, refuse_unsupported
from nearfaas.s3.errors import S3Error
from nearfaas.s3.listing import ListingHandlers
from nearfaas.s3.parts import part_of as _part_of
from nearfaas.s3.object_headers import (COPY_ETAG_HEADER, VersionTrailer, bucket_headers, copied_checksums, copy_of,
                                         exact_headers, is_true, object_headers, user_metadata)
from nearfaas.s3.sigv4 import AuthContext, Principal, S3Auth
from nearfaas.s3.versions import DELETED_HEADER, VERSION_HEADER, VERSION_TRAILER_HEADER, is_version
from nearfaas.s3.validation import (decimal, resolve_range, validate_bucket_name, validate_header_value,
                                     validate_key, validate_new_key)

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 5 << 30
MAX_XML_BODY = 4 << 20  # CompleteMultipartUpload of 10,000 parts with checksums fits
DELETE_CONCURRENCY = 8  # DeleteObjects: keys deleted at once (each may fan out to every node)
DSCS_REPLICA_HEADER = "x-nearfaas-dscs-replica"
UPLOAD_ID_HEADER = "x-nearfaas-upload-id"

# Sub-resources nearfaas does not implement: 501 rather than a silently wrong answer.
UNSUPPORTED_SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering",
    "inventory", "legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock",
    "ownershipControls", "publicAccessBlock", "replication", "requestPayment",
    "restore", "retention", "tagging", "torrent", "website",
})
_RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type", "response-content-language": "Content-Language",
    "response-expires": "Expires", "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition", "response-content-encoding": "Content-Encoding",
}


class S3Frontend(ListingHandlers):
    def __init__(self, backend: StorageBackend | Callable[[], StorageBackend], *, auth: S3Auth | None = None,
                 max_body: int = DEFAULT_MAX_BODY, virtual_host_suffixes: Iterable[str] = ("localhost",),
                 on_created: Callable[[web.Request, str, str, ObjectInfo], None] | None = None,
                 version_writer: Callable[[Principal | None], bool] | None = None, hidden_buckets: Iterable[str] = (),
                 buckets=None):
        # A backend, or a zero-argument callable returning one (for hosts that build it late).
        self._backend_getter = (lambda: backend) if hasattr(backend, "put_object") else backend
        self.auth = auth or S3Auth()
        self.max_body = max_body
        self.virtual_host_suffixes = tuple(s.lower().strip(".") for s in virtual_host_suffixes)
        # Called once a new object is durable (PUT, completed multipart upload): object triggers.
        self.on_created = on_created or (lambda request, bucket, key, info: None)
        # Who may order writes by sending versions: only the gateway, on a storage node.
        self.version_writer = version_writer or (lambda principal: False)
        # Bitar transfers (bitar/transfer.py): a GET that opted in is sent as gzip members.
        self.transfer = None
        # The platform's own buckets (chain intermediates): reachable by name, never listed.
        self.hidden_buckets = frozenset(hidden_buckets)
        # Bucket owners and policies (auth/bucket_policy.BucketAccessCache, the gateway's; None on a
        # node): filled before a keys-file key's request is decided (s3/bucket_policy_api.py).
        self.buckets = buckets

    @property
    def backend(self) -> StorageBackend:
        return self._backend_getter()

    def mount(self, app: web.Application) -> None:
        """Add the catch-all S3 route. Call after the host's own routes. Serve the app with
        ``web.AppRunner(app, auto_decompress=False)``: a body sent with Content-Encoding is stored as sent."""
        # [\s\S] rather than ".": a decoded path may hold a newline, which "." would not match.
        app.router.add_route("*", r"/{s3_path:[\s\S]*}", self.handle, expect_handler=self.expect_handler)

    async def expect_handler(self, request: web.Request) -> web.StreamResponse | None:
        """Refuse an oversized body before the client sends it (Expect: 100-continue)."""
        try:
            self._check_declared_length(request)
        except S3Error as error:
            response = self._error_response(request, error, _request_id(request))
            # The client holds the body back until we say continue; it never will, so the
            # connection cannot be reused (and must not linger waiting for that body).
            response.force_close()
            return response
        expect = request.headers.get("Expect", "").lower()
        if expect != "100-continue":  # aiohttp's own answer would be a plain-text 417
            response = self._error_response(request, S3Error(
                "InvalidArgument", f"Expect: {expect!r} is not supported; send Expect: 100-continue or no Expect header.",
                status=417), _request_id(request))
            response.force_close()
            return response
        from aiohttp.web_urldispatcher import _default_expect_handler

        return await _default_expect_handler(request)

    def _check_declared_length(self, request: web.Request) -> None:
        for header in ("x-amz-decoded-content-length", "content-length"):
            value = request.headers.get(header, "")
            if (size := decimal(value)) is not None and size > self.max_body:
                raise S3Error("EntityTooLarge", f"The body of {value} bytes exceeds the maximum of {self.max_body} "
                              "bytes; use a multipart upload for large objects.")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        request_id = _request_id(request)
        try:
            return await self._dispatch(request)
        except S3Error as error:
            return self._error_response(request, error, request_id)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                log.exception("S3 %s %s failed (request %s)", request.method, request.raw_path, request_id)
                return self._error_response(request, S3Error("InternalError"), request_id)
            # The disk filled past the floor check (writes at once, another writer): a write that
            # stored nothing, as the floor's refusal says (507), so the gateway owes it to this node
            # (a hint) rather than counting a 500 that may have landed elsewhere (issue 43).
            return self._error_response(request, S3Error("InsufficientStorage", "This storage node's disk is full: the write "
                                                         "was refused and nothing stored. Free space or add a node, then retry."),
                                        request_id)
        except Exception:
            log.exception("S3 %s %s failed (request %s)", request.method, request.raw_path, request_id)
            return self._error_response(request, S3Error("InternalError"), request_id)

    def _error_response(self, request: web.Request, error: S3Error, request_id: str) -> web.Response:
        context = request.get(_AUTH_CONTEXT)
        internal = context is not None and self.version_writer(context.principal)  # the gateway asking a node
        headers = {**{k: v for k, v in error.headers.items() if internal or k not in (VERSION_HEADER, DELETED_HEADER)},
                   "x-amz-request-id": request_id, "x-nearfaas-error-code": error.code, "Server": "nearfaas"}
        if not error.resource:
            error.resource = request.raw_path.partition("?")[0]
        error.message, error.resource = s3xml.xml_safe(error.message), s3xml.xml_safe(error.resource)
        if request.method == "HEAD":
            return web.Response(status=error.status, headers=headers)
        return web.Response(status=error.status, body=error.to_xml(request_id), headers=headers,
                            content_type="application/xml")

    # -- routing ---------------------------------------------------------------------------------

    def _target(self, request: web.Request) -> tuple[str, str | None, str, list[tuple[str, str]]]:
        """(raw path, bucket, key, query) of the request; bucket None for the service root."""
        raw_path, _, raw_query = request.raw_path.partition("?")
        try:
            path = unquote(raw_path, errors="strict")
            query = parse_qsl(raw_query, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise S3Error("InvalidURI", "The request path or query string is not valid percent-encoded UTF-8.") from None
        if not path.startswith("/"):
            raise S3Error("InvalidURI", "Couldn't parse the specified URI.")
        host = (request.headers.get("Host") or "").lower()
        host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        for suffix in self.virtual_host_suffixes:
            if host.endswith("." + suffix) and len(host) > len(suffix) + 1:
                return raw_path, host[: -len(suffix) - 1], path[1:], query
        if path == "/":
            return raw_path, None, "", query
        bucket, _, key = path[1:].partition("/")
        return raw_path, bucket, key, query

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        raw_path, bucket, key, query = self._target(request)
        if s3post.is_form_post(request.method, bucket, key, dict(query), request.headers.get("Content-Type", "")):
            return await s3post.post_object(self, request, bucket)  # authenticated by its signed policy
        # Raises unless the request may proceed; the body's payload hash is checked as it streams.
        context = request[_AUTH_CONTEXT] = self.auth.authenticate(request.method, raw_path, query, request.headers)
        principal = context.principal
        # The bucket checked is the one _target resolved, the same name every operation below uses.
        if bucket is not None and principal is not None and not principal.may_use(bucket):
            raise _outside_scope(principal, bucket)
        q = dict(query)
        method = request.method
        if bucket is not None:  # its owner and policy, for a key they apply to (and a copy's source's)
            source = request.headers.get("x-amz-copy-source")
            await self.prepare_buckets(principal, bucket, *([s3copy.copy_source(source)[0]] if source and key else []))
        # The key's policy (s3/actions.py names the action each request needs; auth/policy.py decides).
        action = s3actions.action_for(method, bucket, key, q)
        if action is not None:
            s3actions.require(principal, action, bucket, key)
        # Checked here, before any backend sees the names: the gateway routes and fans out by
        # them, so a '..' segment or a NUL must never get that far.
        if bucket is not None:
            validate_bucket_name(bucket)
            if key:
                validate_key(key)
        if bucket is None:
            if method in ("GET", "HEAD"):
                buckets = [b for b in await self.backend.list_buckets() if b.name not in self.hidden_buckets]
                await self.prepare_buckets(principal, *(b.name for b in buckets))  # whose each is, for the filter below
                if principal is not None and (principal.buckets is not None or principal.authorizer is not None):
                    buckets = [b for b in buckets if principal.authorize(s3actions.LIST_BUCKET, b.name)]
                return self._xml(request, s3xml.list_buckets_page(buckets, q))
            raise S3Error("MethodNotAllowed", f"{method} is not allowed on the service root; name a bucket.")
        unsupported = sorted(UNSUPPORTED_SUBRESOURCES.intersection(q))
        if unsupported:
            raise S3Error("NotImplemented", f"The ?{unsupported[0]} sub-resource is not implemented by nearfaas.")
        if key == "":
            return await self._bucket_operation(request, method, bucket, q)
        return await self._object_operation(request, method, bucket, key, q)

    def _bucket_headers(self, request, info) -> dict[str, str]:
        """A bucket's headers: its owner and policy only for the gateway asking a node."""
        context = request.get(_AUTH_CONTEXT)
        if context is not None and self.version_writer(context.principal):
            return bucket_headers(info)
        return bucket_headers(dataclasses.replace(info, options=s3policy.public_options(info.options)))

    async def prepare_buckets(self, principal: Principal | None, *buckets: str) -> None:
        """Load the owners and policies of ``buckets`` when they decide ``principal``'s request."""
        if self.buckets is not None and principal is not None and principal.account is not None:
            # at once: a ListBuckets by such a key asks every bucket's (each cached for a few seconds)
            await asyncio.gather(*(self.buckets.prepare(name) for name in dict.fromkeys(buckets)))

    async def _bucket_operation(self, request, method: str, bucket: str, q: dict):
        if "policy" in q or "policyStatus" in q:
            return await s3policy.bucket_policy(self, request, method, bucket, q, request[_AUTH_CONTEXT].principal)
        if method == "GET":
            if "location" in q:
                await self.backend.head_bucket(bucket)
                return self._xml(request, s3xml.location_xml(""))
            if "uploads" in q:
                return await self._list_uploads(request, bucket, q)
            if "versions" in q:
                internal = self.version_writer(request[_AUTH_CONTEXT].principal)
                return await s3versioning.list_versions(self, request, bucket, q, internal)
            if "versioning" in q:
                return await s3versioning.bucket_versioning(self, request, method, bucket)
            return await self._list_objects(request, bucket, q)
        if method == "PUT" and "versioning" in q:
            return await s3versioning.bucket_versioning(self, request, method, bucket)
        if method == "PUT":
            checksums.check_acl(request.headers)
            body = self._body(request, require_length=False)
            s3xml.parse_create_bucket(await body.read_all(MAX_XML_BODY))  # validated, then ignored
            options = {"dscs_replica": True} if is_true(request.headers.get(DSCS_REPLICA_HEADER)) else None
            options = s3policy.creation_options(self, request, bucket, options, request[_AUTH_CONTEXT].principal)
            info = await self.backend.create_bucket(bucket, options)
            s3policy.check_created(request[_AUTH_CONTEXT].principal, bucket, info)  # another key's, made just before
            # Creating a bucket you already own answers 200, as S3 does in us-east-1.
            headers = {"Location": f"/{bucket}", **self._bucket_headers(request, info)}
            return self._empty(request, 200, headers)
        if method == "HEAD":
            info = await self.backend.head_bucket(bucket)
            return self._empty(request, 200, {"x-amz-bucket-region": "us-east-1", **self._bucket_headers(request, info)})
        if method == "DELETE":
            await self.backend.delete_bucket(bucket)
            if self.buckets is not None:
                self.buckets.forget(bucket)  # a bucket made anew under this name has a new owner
            return self._empty(request, 204)
        if method == "POST":
            if "delete" in q:
                return await self._delete_objects(request, bucket)
            raise S3Error("InvalidRequest", "POST on a bucket needs ?delete or a multipart/form-data upload form.")
        raise S3Error("MethodNotAllowed", f"{method} is not allowed on a bucket.")

    async def _object_operation(self, request, method: str, bucket: str, key: str, q: dict):
        if method == "PUT" or (method == "POST" and "uploads" in q):
            # Writes that create a key (PutObject, CopyObject, CreateMultipartUpload) also refuse
            # the keys no listing could show; reads and deletes still reach an old one.
            validate_new_key(key)
        if method == "PUT":
            if "x-amz-copy-source" in request.headers:
                may_read = functools.partial(self._may_read_source, request)
                if "uploadId" in q or "partNumber" in q:
                    upload_id, number = _part_of(q)
                    return await s3copy.upload_part_copy(self, request, bucket, key, upload_id, number, may_read)
                return await s3copy.copy_object(self, request, bucket, key, may_read)
            if "uploadId" in q or "partNumber" in q:
                return await self._upload_part(request, bucket, key, q)
            return await self._put_object(request, bucket, key)
        if method == "GET":
            if "uploadId" in q:
                return await self._list_parts(request, bucket, key, q)
            if "attributes" in q:
                return await s3attributes.get_object_attributes(self, request, bucket, key, q)
            return await self._get_object(request, bucket, key, q)
        if method == "HEAD":
            return await self._head_object(request, bucket, key, q)
        if method == "DELETE":
            if "uploadId" in q:
                refuse_unsupported(request.headers, "AbortMultipartUpload")  # x-amz-if-match-initiated-time: not checked here
                await self.backend.abort_multipart_upload(bucket, key, q["uploadId"])
                return self._empty(request, 204)
            return self._empty(request, 204, await s3versioning.delete_object(self, request, bucket, key, q))
        if method == "POST":
            if "select" in q:
                return await self._select(request, bucket, key, q)
            if "uploads" in q:
                return await self._create_multipart(request, bucket, key)
            if "uploadId" in q:
                return await self._complete_multipart(request, bucket, key, q["uploadId"])
            raise S3Error("MethodNotAllowed", "POST on an object needs ?select&select-type=2, ?uploads or ?uploadId=.")
        raise S3Error("MethodNotAllowed", f"{method} is not allowed on an object.")

    async def _select(self, request, bucket: str, key: str, q: dict) -> web.StreamResponse:
        """SelectObjectContent (POST /bucket/key?select&select-type=2): the backend runs the query
        (next to the data where it can) and answers an event stream, relayed here as it comes."""
        if q.get("select-type") != "2":
            raise S3Error("InvalidArgument", "SelectObjectContent needs the query string ?select&select-type=2.")
        select = getattr(self.backend, "select_object", None)
        if select is None:
            raise S3Error("NotImplemented", "This endpoint does not run SelectObjectContent.")
        body = await self._body(request, require_length=False).read_all(MAX_XML_BODY)
        result = await select(bucket, key, body)
        try:
            response = web.StreamResponse(status=200, headers={**result.headers, **self._common(request)})
            return await _relay(request, response, result.body, f"SelectObjectContent {bucket}/{key}")
        finally:
            await aclose(result.body)

    async def _delete_objects(self, request, bucket: str) -> web.StreamResponse:
        """DeleteObjects (POST /bucket?delete): per-key results; a missing key counts as deleted.

        A key is reported Deleted only when the backend said so; any failure (an invalid key, a
        refusal, a node error) is that key's <Error>, which Quiet mode reports too."""
        refuse_unsupported(request.headers, "DeleteObjects")
        content_md5 = decode_content_md5(request.headers.get("Content-MD5"))
        body = await self._body(request, require_length=False).read_all(MAX_XML_BODY)
        if content_md5 is not None and hashlib.md5(body).digest() != content_md5:
            raise S3Error("BadDigest", "The Content-MD5 you specified does not match the request body.")
        keys, quiet = s3xml.parse_delete_objects(body)  # (key, version id or None)
        await self.backend.head_bucket(bucket)
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)
        context = request.get(_AUTH_CONTEXT)
        principal = context.principal if context is not None else None

        async def delete_one(key: str, version_id: str | None) -> S3Error | dict:
            try:
                # The same check a single DeleteObject gets in _dispatch: the gateway fans a
                # delete out by its key, so a bad one must stop here.
                validate_key(key)
                named = s3versioning.version_arg({} if version_id is None else {"versionId": version_id})
                action = s3actions.DELETE_OBJECT_VERSION if named else s3actions.DELETE_OBJECT
                s3actions.require(principal, action, bucket, key)  # per key, as S3
                async with gate:
                    return s3versioning.delete_headers(await self.backend.delete_object(bucket, key, **named))
            except S3Error as error:
                return error
            except Exception:
                log.exception("DeleteObjects: deleting s3://%s/%s failed", bucket, ascii(key))
                return S3Error("InternalError", "Deleting this key failed unexpectedly; it may still exist. Retry.")

        outcomes = await asyncio.gather(*(delete_one(key, vid) for key, vid in keys))
        deleted = [(key, vid, out) for (key, vid), out in zip(keys, outcomes, strict=True) if not isinstance(out, S3Error)]
        errors = [(key, out) for (key, _), out in zip(keys, outcomes, strict=True) if isinstance(out, S3Error)]
        return self._xml(request, s3xml.delete_result_xml([] if quiet else deleted, errors))

    async def _put_object(self, request, bucket: str, key: str) -> web.StreamResponse:
        content_md5 = decode_content_md5(request.headers.get("Content-MD5"))
        body = self._body(request)
        options = {"dscs_replica": True} if is_true(request.headers.get(DSCS_REPLICA_HEADER)) else None
        trailer = self._version_trailer(request)
        extra = {"version": trailer.version, **s3versioning.versioned_write(self, request)} if trailer is not None else {}
        if self._may_version(request, COPY_ETAG_HEADER):
            extra["copy_of"] = copy_of(request)
        if trailer is None:
            extra |= await self._condition(request, bucket, key)
        decode = None
        if transfer.sent_compressed(request.headers):  # a function's write, compressed for a slow link
            context = request.get(_AUTH_CONTEXT)
            if context is not None and context.access_key is not None and \
                    not {"content-encoding", transfer.OPT_IN_HEADER.lower()} <= context.signed_headers:
                # otherwise anyone on the path could add or strip them and change what is stored
                raise S3Error("AccessDenied", f"A compressed PUT must sign Content-Encoding and {transfer.OPT_IN_HEADER}.")
            decode = functools.partial(_gunzipped, limit=self.max_body)  # checksums are of the object, not the transfer
        # Standard headers and checksums stored with the object (s3/checksums.py); never decoded.
        stored, kinds = checksums.write_headers(request.headers), checksums.compute_kinds(request.headers)
        if decode is not None:  # that Content-Encoding was the transfer's (bitar/transfer.py), not the object's
            stored.pop("content-encoding", None)
        stored |= copied_checksums(request) if "copy_of" in extra else {}
        chunks = body.chunks(decode)
        chunks = checksums.recorded(trailer.strip(chunks) if trailer is not None else chunks, body, stored, kinds)
        info = await self.backend.put_object(
            bucket, key, chunks, content_md5=content_md5, content_type=request.headers.get("Content-Type"),
            metadata=user_metadata(request), options=options, **extra, **checksums.as_argument(stored, kinds))
        self._notify_created(request, bucket, key, info)
        return self._empty(request, 200, {"ETag": f'"{info.etag}"', **exact_headers(info), **checksums.checksum_response(stored)})

    async def _upload_part(self, request, bucket: str, key: str, q: dict) -> web.StreamResponse:
        upload_id, number = _part_of(q)
        content_md5 = decode_content_md5(request.headers.get("Content-MD5"))
        body = self._body(request)
        stored, kinds = {}, checksums.compute_kinds(request.headers)  # the part's checksums
        etag = await self.backend.upload_part(bucket, key, upload_id, number, checksums.recorded(body.chunks(), body, stored, kinds),
                                              content_md5=content_md5, **checksums.as_argument(stored, kinds))
        return self._empty(request, 200, {"ETag": f'"{etag}"', **checksums.checksum_response(stored)})

    async def _get_object(self, request, bucket: str, key: str, q: dict) -> web.StreamResponse:
        named = s3versioning.version_arg(q)
        byte_range, part_headers = await s3parts.read_range(self.backend, request.headers, bucket, key, q, named)
        stream = await self.backend.get_object(bucket, key, byte_range, **named)
        body_iter = stream.body
        try:
            not_modified = check_read(request.headers, stream.info)
            headers = s3parts.with_part(object_headers(stream.info, request.headers) | self._internal(request, stream.info),
                                        part_headers, stream.info)
            for param, header in _RESPONSE_OVERRIDES.items():
                if param in q:
                    validate_header_value(param, q[param])
                    headers[header] = q[param]
            if not_modified:
                return self._empty(request, 304, {"ETag": headers["ETag"], "Last-Modified": headers["Last-Modified"]})
            status = 200
            if byte_range is not None:
                status = 206
                headers["Content-Range"] = f"bytes {stream.start}-{stream.end}/{stream.info.size}"
            if self.transfer is not None and transfer.wants(request.headers, stream.length, byte_range is not None,
                                                            headers.get("Content-Encoding")):
                self.transfer.device  # noqa: B018 - made now, so a failure is an error answer, not a cut body
                headers |= {"Content-Encoding": "gzip", "Vary": "Accept-Encoding, " + transfer.OPT_IN_HEADER}
                response = web.StreamResponse(status=status, headers={**headers, **self._common(request)})
                members = self.transfer.stream(body_iter)
                try:
                    return await _relay(request, response, members, f"GET {bucket}/{key} (bitar)")
                finally:
                    await members.aclose()  # a client that left: stop compressing for it
            response = web.StreamResponse(status=status, headers={**headers, **self._common(request)})
            response.content_length = stream.length
            return await _relay(request, response, body_iter, f"GET {bucket}/{key}")
        finally:
            await aclose(body_iter)

    async def _head_object(self, request, bucket: str, key: str, q: dict) -> web.StreamResponse:
        info = await self.backend.head_object(bucket, key, **s3versioning.version_arg(q))
        headers = object_headers(info, request.headers) | self._internal(request, info)
        if check_read(request.headers, info):
            return self._empty(request, 304, {"ETag": headers["ETag"]})
        byte_range, part_headers = s3parts.part_range(info, q, request.headers)
        headers = s3parts.with_part(headers, part_headers, info)
        status, length = 200, info.size
        if byte_range is not None:
            start, end = resolve_range(byte_range, info.size)
            status, length = 206, end - start + 1
            headers["Content-Range"] = f"bytes {start}-{end}/{info.size}"
        response = web.StreamResponse(status=status, headers={**headers, **self._common(request)})
        response.content_length = length
        await response.prepare(request)
        await response.write_eof()
        return response

    # -- multipart -------------------------------------------------------------------------------

    async def _create_multipart(self, request, bucket: str, key: str) -> web.StreamResponse:
        stored = checksums.write_headers(request.headers, upload=True)  # end up on the completed object
        upload_id = await self.backend.create_multipart_upload(
            bucket, key, content_type=request.headers.get("Content-Type"), metadata=user_metadata(request),
            upload_id=request.headers.get(UPLOAD_ID_HEADER) or None, **checksums.as_argument(stored, []))
        return self._xml(request, s3xml.initiate_multipart_xml(bucket, key, upload_id), checksums.upload_response(stored))

    async def _complete_multipart(self, request, bucket: str, key: str, upload_id: str) -> web.StreamResponse:
        # Its x-amz-checksum-<kind> header is the object's checksum, not the XML body's.
        body = self._body(request, require_length=False, checksum_headers=False)
        document = await body.read_all(MAX_XML_BODY)
        parts, part_checksums = s3xml.parse_complete_multipart(document), checksums.parse_part_checksums(document)
        if whole := checksums.completion_checksum(request.headers):
            part_checksums[checksums.WHOLE_OBJECT] = whole
        version = self._version(request)
        extra = {"version": version, **s3versioning.versioned_write(self, request)} if version is not None else {}
        if version is None:
            extra = await self._condition(request, bucket, key)
        extra |= {"part_checksums": part_checksums} if part_checksums else {}
        info = await self.backend.complete_multipart_upload(bucket, key, upload_id, parts, **extra)
        self._notify_created(request, bucket, key, info)
        xml_body = s3xml.complete_multipart_xml(f"/{bucket}/{quote(key)}", bucket, key, info.etag)
        metadata_headers = {f"x-amz-meta-{name}": value for name, value in info.metadata.items()}
        return self._xml(request, checksums.with_checksum_xml(xml_body, info.headers),
                         {**exact_headers(info), **metadata_headers, **checksums.checksum_response(info.headers)})

    def _may_read_source(self, request, bucket: str, key: str, version_id: str | None = None) -> None:
        """A copy reads its source: the caller must be allowed to read that bucket too."""
        context = request.get(_AUTH_CONTEXT)
        principal = context.principal if context is not None else None
        if principal is not None and not principal.may_use(bucket):
            raise _outside_scope(principal, bucket)
        s3actions.copy_source_check(principal, bucket, key, version_id)  # the key's policy: s3:GetObject(Version) on the source

    async def _condition(self, request, bucket: str, key: str) -> dict:
        """The write's If-Match / If-None-Match (s3/conditions.py) as backend arguments: checked
        atomically with the write by a backend that can, else checked here first."""
        condition = WriteCondition.from_headers(request.headers)
        if condition is None:
            return {}
        if getattr(self.backend, "atomic_conditions", False):
            return {"condition": condition}
        try:
            current = await self.backend.head_object(bucket, key)
        except S3Error as exc:
            if exc.code != "NoSuchKey":
                raise
            current = None
        condition.check(current, key)
        return {}

    def _notify_created(self, request, bucket: str, key: str, info: ObjectInfo) -> None:
        """The object is durable whatever a listener does: its failure is logged, never the PUT's."""
        try:
            self.on_created(request, bucket, key, info)
        except Exception:
            log.exception("object-created listener failed for s3://%s/%s", bucket, key)

    def _may_version(self, request: web.Request, header: str) -> bool:
        if header not in request.headers:
            return False
        context = request.get(_AUTH_CONTEXT)
        if not self.version_writer(context.principal if context is not None else None):
            raise S3Error("AccessDenied", f"Only the gateway may send {header}; remove the header.")
        return True

    def _internal(self, request: web.Request, info: ObjectInfo) -> dict[str, str]:  # the gateway's own (s3/parts.py)
        return s3parts.internal_headers(request.headers, info, lambda: self.version_writer(request[_AUTH_CONTEXT].principal))

    def _version(self, request: web.Request) -> str | None:
        """The version a (gateway's) delete or multipart completion carries, if any."""
        if not self._may_version(request, VERSION_HEADER):
            return None
        version = request.headers[VERSION_HEADER]
        if not is_version(version):
            raise S3Error("InvalidArgument", f"{VERSION_HEADER} must be 16 hex digits, '.', and an origin; got {version!r}.")
        return version

    def _version_trailer(self, request: web.Request) -> VersionTrailer | None:
        if not self._may_version(request, VERSION_TRAILER_HEADER):
            return None
        raw = request.headers[VERSION_TRAILER_HEADER]
        if (length := decimal(raw)) is None or not 18 <= length <= 81:
            raise S3Error("InvalidArgument", f"{VERSION_TRAILER_HEADER} must be the version's length (18-81), not {raw!r}.")
        return VersionTrailer(length)

    def _body(self, request: web.Request, *, require_length: bool = True, checksum_headers: bool = True) -> RequestBody:
        """The request's body, checked against what its signature covers as it streams (and
        against its x-amz-checksum-* headers, unless they describe something else)."""
        context = request.get(_AUTH_CONTEXT)
        headers = request.headers if checksum_headers else \
            CIMultiDict((k, v) for k, v in request.headers.items() if not checksums.header_kind(k))
        return RequestBody(request.content, headers, max_body=self.max_body, require_length=require_length,
                           signing=context.streaming if context is not None else None)

    # -- responses -------------------------------------------------------------------------------

    @staticmethod
    def _common(request: web.Request) -> dict[str, str]:
        return {"x-amz-request-id": _request_id(request), "Server": "nearfaas"}

    def _xml(self, request, body: bytes, headers: dict | None = None) -> web.Response:
        return web.Response(status=200, body=body, content_type="application/xml",
                            headers={**(headers or {}), **self._common(request)})

    def _empty(self, request, status: int, headers: dict | None = None) -> web.Response:
        return web.Response(status=status, headers={**(headers or {}), **self._common(request)})


_REQUEST_ID = web.RequestKey("nearfaas_s3_request_id", str)
_AUTH_CONTEXT = web.RequestKey("nearfaas_s3_auth_context", AuthContext)


def _outside_scope(principal: Principal, bucket: str) -> S3Error:
    """AccessDenied naming what the key may use, and how the bucket is granted to it."""
    allowed = sorted(principal.buckets or ())
    scope = f"may only use buckets {', '.join(allowed)}" if allowed else "may not use any bucket"
    if principal.name.startswith("chain-call key"):
        grant = " A chain step's key reaches only the intermediates bucket; read other buckets through the function's own key."
    elif principal.name.startswith("function key") and (principal.authorizer is None
                                                         or principal.authorizer("s3:ListBucket", bucket, None)):
        # only where listing the bucket would grant it (a function key never reaches the intermediates)
        grant = (f" To grant it, list {bucket} under the function's x-nearfaas: {{buckets: [...]}} in its stack file "
                 "(or the deploy body's x-nearfaas.buckets) and deploy it again.")
    else:
        grant = ""  # the platform's own bucket, or a key scoped otherwise: nothing a user can list to reach it
    return S3Error("AccessDenied", f"Access Denied: {principal.name} {scope}, not {bucket}.{grant}", resource=f"/{bucket}")


async def _relay(request: web.Request, response: web.StreamResponse, body, what: str) -> web.StreamResponse:
    """Send the headers, then ``body``'s chunks as they come."""
    await response.prepare(request)
    try:
        async for chunk in body:
            await response.write(chunk)
        await response.write_eof()
    except ConnectionError:
        log.debug("client went away during %s", what)
    except Exception:
        # Headers are out: the only honest signal left is a cut connection.
        log.exception("%s failed mid-stream", what)
        if request.transport is not None:
            request.transport.close()
    return response


async def _gunzipped(chunks, limit: int):
    """A Bitar-compressed PUT body decoded as it streams; bad gzip or a bomb is a 400, and the
    object is never committed (the backend commits only once the stream ends cleanly)."""
    try:
        async for piece in transfer.gunzip_stream(chunks, limit):
            yield piece
    except ValueError as e:
        code = "EntityTooLarge" if "more than" in str(e) else "InvalidRequest"
        raise S3Error(code, f"Content-Encoding gzip ({transfer.OPT_IN_HEADER}): {e}") from None


def _request_id(request: web.Request) -> str:
    request_id = request.get(_REQUEST_ID)
    if request_id is None:
        request_id = request[_REQUEST_ID] = uuid.uuid4().hex[:16].upper()
    return request_id
