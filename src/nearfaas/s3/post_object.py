"""PostObject: a browser form upload (``POST /bucket`` with ``multipart/form-data``), as S3 has it.

The form's fields come first, the ``file`` field last (fields after it are ignored, as S3 ignores
them); the fields before it may hold at most MAX_FORM_FIELDS bytes in all (400
MaxPostPreDataLengthExceeded), and the file streams into the backend as it arrives, never held
whole. Fields: ``key`` (``${filename}`` is replaced by the file's name), ``Content-Type``,
``Cache-Control`` / ``Content-Disposition`` / ``Content-Encoding`` / ``Expires``,
``x-amz-storage-class``, ``x-amz-meta-*``, ``success_action_status`` (200, 201 with a
PostResponse document, or the default 204) and ``success_action_redirect`` (a 303 to it with
bucket, key and etag in its query).

Authentication is SigV4's POST policy: ``policy`` (base64 of a JSON document with
``expiration`` and ``conditions``), ``x-amz-algorithm`` (AWS4-HMAC-SHA256), ``x-amz-credential``
(``<access-key>/<yyyymmdd>/<region>/s3/aws4_request``), ``x-amz-date`` and ``x-amz-signature``,
the hex HMAC-SHA256 of the base64 policy under the SigV4 signing key. Every condition must hold
(``{"field": value}`` and ``["eq", "$field", value]`` exactly, ``["starts-with", "$field",
prefix]``, ``["content-length-range", min, max]`` on the file's size), and every form field but
``file``, ``policy``, ``x-amz-signature`` and ``x-ignore-*`` must be named by a condition, or the
upload is refused (403 AccessDenied "Invalid according to Policy: ..."). The key's condition is
checked on the key as stored (after ``${filename}``). The signer must be allowed s3:PutObject on
bucket/key (s3/actions.py). A form without a policy is refused unless the server runs without
authentication (or allows anonymous requests).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import time
from datetime import datetime
from hashlib import sha256
from urllib.parse import quote, urlencode

from aiohttp import BodyPartReader, web

from nearfaas.s3 import actions as s3actions
from nearfaas.s3 import checksums
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.errors import S3Error
from nearfaas.s3.sigv4 import Principal, S3Auth
from nearfaas.s3.sigv4_streaming import signing_key
from nearfaas.s3.validation import validate_bucket_name, validate_header_value, validate_new_key

MAX_FORM_FIELDS = 20 << 10  # bytes of field names and values before the file (S3's limit too)
CHUNK = 256 << 10
_UNCHECKED = ("file", "policy", "x-amz-signature")  # fields no condition has to name
_HEADER_FIELDS = frozenset({"content-type", "success_action_redirect", "redirect", *checksums.STORED_HEADERS})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")


def is_form_post(method: str, bucket: str | None, key: str, q: dict, content_type: str) -> bool:
    return method == "POST" and bucket is not None and key == "" and "delete" not in q and \
        content_type.lower().startswith("multipart/form-data")


def _denied(reason: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {reason}", status=403)


def decode_policy(raw: str) -> dict:
    """The policy document of a form's base64 ``policy`` field; 400 InvalidPolicyDocument when it is not one."""
    try:
        document = json.loads(base64.b64decode(raw.encode("ascii"), validate=True))
    except (ValueError, binascii.Error, UnicodeError):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: the policy is not base64-encoded JSON.") from None
    if not isinstance(document, dict) or not isinstance(document.get("conditions"), list) or \
            not isinstance(document.get("expiration"), str):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: it must be a JSON object with an expiration and conditions.")
    return document


def _expiration(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise S3Error("InvalidPolicyDocument", f"Invalid Policy: invalid expiration {value!r}.") from None


def check_policy(policy: dict, fields: dict[str, str], bucket: str, now: float) -> tuple[int, int] | None:
    """Check every condition of ``policy`` against the form's ``fields`` (lower-case names; "key"
    the key as stored); the content-length-range (min, max) for the file, or None. Raises 403
    AccessDenied for a condition that fails or a field no condition names, 400
    InvalidPolicyDocument for a condition nearfaas cannot read."""
    if _expiration(policy["expiration"]) < now:
        raise _denied("Policy expired.")
    values = {**fields, "bucket": bucket}
    named, length_range = set(), None
    for condition in policy["conditions"]:
        if isinstance(condition, dict) and len(condition) == 1:
            (name, expected), op = next(iter(condition.items())), "eq"
            name = name.lower()
        elif isinstance(condition, list) and len(condition) == 3 and isinstance(condition[0], str):
            op = condition[0].lower()
            if op == "content-length-range":
                low, high = condition[1], condition[2]
                if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (low, high)):
                    raise S3Error("InvalidPolicyDocument", "Invalid Policy: content-length-range needs two integers.")
                length_range = (low, high)
                continue
            if op not in ("eq", "starts-with") or not isinstance(condition[1], str) or not condition[1].startswith("$"):
                raise S3Error("InvalidPolicyDocument", f"Invalid Policy: invalid condition {json.dumps(condition)[:200]}.")
            name, expected = condition[1][1:].lower(), condition[2]
        else:
            raise S3Error("InvalidPolicyDocument", f"Invalid Policy: invalid condition {json.dumps(condition)[:200]}.")
        if not isinstance(expected, str):
            raise S3Error("InvalidPolicyDocument", f"Invalid Policy: the condition on {name} must name a string.")
        named.add(name)
        actual = values.get(name, "")
        if op == "eq" and actual != expected:
            raise _denied(f"Policy Condition failed: [\"eq\", \"${name}\", \"{expected}\"]")
        if op == "starts-with":
            pieces = [p.strip() for p in actual.split(",")] if name == "content-type" else [actual]
            if not all(p.startswith(expected) for p in pieces):
                raise _denied(f"Policy Condition failed: [\"starts-with\", \"${name}\", \"{expected}\"]")
    extra = sorted(n for n in fields if n not in named and n not in _UNCHECKED and not n.startswith("x-ignore-"))
    if extra:
        raise _denied(f"Extra input fields: {', '.join(extra)}")
    return length_range


def signer(auth: S3Auth, fields: dict[str, str]) -> Principal | None:
    """Who signed the form's policy (None when the server runs without authentication); raises
    unless the signature is the policy's under that principal's key."""
    if "policy" not in fields:
        if auth.enabled and not auth.allow_anonymous:
            raise S3Error("AccessDenied", "Access Denied: a POST upload needs a policy signed with SigV4 "
                          "(policy, x-amz-algorithm, x-amz-credential, x-amz-date, x-amz-signature).")
        return None
    if not auth.enabled:
        return None
    if "awsaccesskeyid" in fields or "signature" in fields:
        raise S3Error("InvalidArgument", "Signature Version 2 POST policies are not supported; sign with SigV4.")
    missing = [n for n in ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature") if not fields.get(n)]
    if missing:
        raise S3Error("InvalidArgument", f"Bucket POST with a policy must contain a field named '{missing[0]}'.")
    if fields["x-amz-algorithm"] != "AWS4-HMAC-SHA256":
        raise S3Error("InvalidArgument", f"The x-amz-algorithm {fields['x-amz-algorithm']!r} is not AWS4-HMAC-SHA256.")
    parts = fields["x-amz-credential"].rsplit("/", 4)
    if len(parts) != 5 or parts[4] != "aws4_request" or parts[3] != "s3" or not parts[0]:
        raise S3Error("InvalidArgument", f"The credential {fields['x-amz-credential']!r} is malformed; expected "
                      "<access-key>/<yyyymmdd>/<region>/s3/aws4_request.")
    access_key, date, region = parts[0], parts[1], parts[2]
    if fields["x-amz-date"][:8] != date:
        raise S3Error("InvalidArgument", f"The credential date {date} does not match x-amz-date {fields['x-amz-date']!r}.")
    principal = auth.principal(access_key)
    expected = hmac.new(signing_key(principal.secret_key, date, region), fields["policy"].encode(), sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["x-amz-signature"].strip().lower()):
        raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you "
                      "provided. Check your key and signing method.", status=403)
    return principal


async def _form_fields(reader) -> tuple[dict[str, str], object]:
    """The fields before the file (lower-case names) and the file's part."""
    fields: dict[str, str] = {}
    total = 0
    while True:
        part = await reader.next()
        if part is None:
            raise S3Error("InvalidArgument", "POST requires exactly one file upload per request.")
        if not isinstance(part, BodyPartReader):
            raise S3Error("MalformedPOSTRequest", "A POST form may not nest multipart bodies.")
        name = (part.name or "").lower()
        if not name:
            raise S3Error("MalformedPOSTRequest", "Every part of a POST form needs a name (Content-Disposition: form-data; name=...).")
        if name == "file":
            return fields, part
        value = bytearray()
        total += len(name)
        while chunk := await part.read_chunk(4096):
            value += chunk
            if total + len(value) > MAX_FORM_FIELDS:
                raise S3Error("MaxPostPreDataLengthExceeded", "Your POST request fields preceding the upload file "
                              f"were too large: at most {MAX_FORM_FIELDS} bytes.")
        total += len(value)
        if name in fields:
            raise S3Error("InvalidArgument", f"The POST form has the field {name!r} twice.")
        try:
            fields[name] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise S3Error("InvalidArgument", f"The POST form field {name!r} is not UTF-8.") from None


async def _file_chunks(part, length_range: tuple[int, int] | None, max_body: int):
    size = 0
    low, high = length_range if length_range is not None else (0, max_body)
    high = min(high, max_body)
    while chunk := await part.read_chunk(CHUNK):
        size += len(chunk)
        if size > high:
            raise S3Error("EntityTooLarge", f"Your proposed upload exceeds the maximum allowed size of {high} bytes.")
        yield chunk
    if size < low:
        raise S3Error("EntityTooSmall", f"Your proposed upload is smaller than the minimum allowed size of {low} bytes.")


def _check_header_fields(fields: dict[str, str], metadata: dict[str, str]) -> None:
    """Form fields become response headers of every later GET: they must be sendable as headers
    (a POST body can carry what a request header cannot, a line break for one)."""
    for name, value in fields.items():
        if name in _HEADER_FIELDS or name.startswith("x-amz-meta-"):
            validate_header_value(name, value)
    bad = sorted(n for n in metadata if not _TOKEN.fullmatch(n))
    if bad:
        raise S3Error("InvalidArgument", f"x-amz-meta-{bad[0]!r} is not a valid header name.")


async def post_object(frontend, request: web.Request, bucket: str) -> web.StreamResponse:
    validate_bucket_name(bucket)
    try:
        reader = await request.multipart()
        fields, file_part = await _form_fields(reader)
    except (ValueError, AssertionError, RuntimeError) as exc:
        raise S3Error("MalformedPOSTRequest", f"The body of your POST request is not well-formed multipart/form-data: {exc}") from None
    if "key" not in fields:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'key'.")
    filename = (file_part.filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    key = fields["key"].replace("${filename}", filename)
    if not key:
        raise S3Error("InvalidArgument", "The key of a POST upload may not be empty.")
    validate_new_key(key)
    principal = signer(frontend.auth, fields)
    length_range = None
    if "policy" in fields:
        now = getattr(frontend.auth, "_clock", time.time)()
        length_range = check_policy(decode_policy(fields["policy"]), {**fields, "key": key}, bucket, now)
    if principal is not None and not principal.may_use(bucket):
        raise S3Error("AccessDenied", f"Access Denied: {principal.name} may not use the bucket {bucket}.")
    await frontend.prepare_buckets(principal, bucket)  # its owner and policy (auth/bucket_policy.py)
    s3actions.require(principal, s3actions.PUT_OBJECT, bucket, key)
    stored = checksums.stored_request_headers({n: v for n, v in fields.items() if n != "content-type"})
    metadata = {n[11:]: v for n, v in fields.items() if n.startswith("x-amz-meta-")}
    _check_header_fields(fields, metadata)
    try:
        info = await frontend.backend.put_object(
            bucket, key, _file_chunks(file_part, length_range, frontend.max_body), content_type=fields.get("content-type"),
            metadata=metadata, **checksums.as_argument(stored, []))
    except (ValueError, AssertionError) as exc:
        raise S3Error("MalformedPOSTRequest", f"The file part of the POST form is not well-formed: {exc}") from None
    frontend._notify_created(request, bucket, key, info)
    etag = f'"{info.etag}"'
    location = f"/{bucket}/{quote(key)}"
    headers = {"ETag": etag, "Location": location}
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect:
        query = urlencode({"bucket": bucket, "key": key, "etag": etag})
        return frontend._empty(request, 303, {**headers, "Location": f"{redirect}{'&' if '?' in redirect else '?'}{query}"})
    status = fields.get("success_action_status", "204")
    if status == "201":
        body = (f'<?xml version="1.0" encoding="UTF-8"?><PostResponse>{s3xml._el("Location", location)}'
                f'{s3xml._el("Bucket", bucket)}{s3xml._el("Key", key)}{s3xml._el("ETag", etag)}</PostResponse>').encode()
        return web.Response(status=201, body=body, content_type="application/xml", headers={**headers, **frontend._common(request)})
    return frontend._empty(request, 200 if status == "200" else 204, headers)
