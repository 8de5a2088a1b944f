"""AWS Signature Version 4 verification for the S3 front end.

The expected signature is computed by botocore's own S3 signer (``S3SigV4Auth``) from the
request as received: we hand it exactly the headers named in SignedHeaders, the query
parameters, the path, the X-Amz-Date timestamp and the client's ``x-amz-content-sha256``
as the payload hash, and compare its result with ``hmac.compare_digest``. Writing SigV4 by
hand would risk a canonicalisation that differs subtly from the SDKs'.

Payload hash policy (see also s3/body.py): the payload hash is whatever the client signed
(``x-amz-content-sha256``). Where it is a hex digest, the front end hashes the body while it
streams and checks the digest at the end, *before* the object is committed, so a mismatch
(XAmzContentSHA256Mismatch) never leaves an object behind and no body is buffered.
``UNSIGNED-PAYLOAD`` and ``STREAMING-UNSIGNED-PAYLOAD-TRAILER`` leave the body unsigned (the
signer's choice). ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`` bodies (aws-chunked) carry a
signature per chunk chained from this request's signature: the verified request hands its body a
:class:`~nearfaas.s3.sigv4_streaming.StreamingSeed` (``AuthContext.streaming``) and the body
checks every chunk, the final empty one and the signed trailer as they stream
(``s3/sigv4_streaming.py``), so a captured request replayed with another body is refused.

Who signs: an access key is looked up in ``credentials`` (full access), then through the
optional ``resolver``, which returns a :class:`Principal` that may be limited to some buckets
and by a policy (``Principal.authorizer``, e.g. ``auth/policy.py``); the front end enforces
both, asking for the action each request needs (``s3/actions.py``, ``s3/frontend.py``).

Presigned URLs: ``X-Amz-Expires`` that is not a number is AuthorizationQueryParametersError
(400); a number out of 1..604800 is AccessDenied (403), as S3 answers.

With no credentials and no resolver (local mode) every request is accepted, signed or not.
"""

from __future__ import annotations

import calendar
import hmac
import logging
import re
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Protocol
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from nearfaas.s3.errors import S3Error
from nearfaas.s3.sigv4_streaming import KNOWN_STREAMING, SIGNED_STREAMING, STREAMING_PAYLOAD_TRAILER, StreamingSeed, signing_key

log = logging.getLogger(__name__)

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600


class HeaderLookup(Protocol):
    """What we need of a request's headers (aiohttp's CIMultiDictProxy fits)."""

    def get(self, name: str, default: str | None = None) -> str | None: ...

    def getall(self, name: str, default: list[str] | None = None) -> list[str]: ...


@dataclass(frozen=True)
class Principal:
    """Who signed a request. `name` is shown in AccessDenied messages; `buckets` is the set of
    buckets it may touch, None for every bucket."""

    name: str
    secret_key: str = field(repr=False)  # never in a log line or a traceback's locals repr
    buckets: frozenset[str] | None = None
    # A policy (auth/policy.py) as a callable: may this principal do `action` (an S3 policy action,
    # s3/actions.py) on bucket/key? None: every action on the buckets it may use.
    authorizer: Callable[[str, str | None, str | None], bool] | None = field(default=None, repr=False, compare=False)
    # The access key buckets it creates are owned by, when bucket ownership applies to it (a key of
    # the keys file, auth/bucket_policy.py); None: the admin and function keys.
    account: str | None = None

    def may_use(self, bucket: str) -> bool:
        return self.buckets is None or bucket in self.buckets

    def authorize(self, action: str, bucket: str | None, key: str | None = None) -> bool:
        """May this principal do ``action`` (e.g. ``s3:GetObject``) on bucket/key (bucket None:
        the service, as for ListAllMyBuckets)?"""
        if bucket is not None and not self.may_use(bucket):
            return False
        return self.authorizer is None or bool(self.authorizer(action, bucket, key or None))


@dataclass(frozen=True)
class AuthContext:
    access_key: str | None  # None for an anonymous request or when auth is off
    payload_hash: str | None  # the signed x-amz-content-sha256 value, if any
    presigned: bool = False
    principal: Principal | None = None  # None for an anonymous request or when auth is off
    # Set when the payload is signed chunk by chunk (STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]):
    # the body must verify its chunk signatures against it.
    streaming: StreamingSeed | None = None
    signed_headers: frozenset = frozenset()  # lower-case names the signature covers (header auth)


class _SignedHeaders(dict):
    """name -> [values], as botocore's canonicalisation reads headers (``get_all``, iteration over
    names). Not email's Message (HTTPHeaders): it turns a non-ASCII value into a Header object that
    botocore cannot canonicalise, and a request carrying one answered 500."""

    def get_all(self, name: str, failobj=None):
        return self.get(name, failobj)


def _as_sent(value: str) -> str:
    """The header value as the client's signer saw it: bytes the server could not decode as UTF-8
    (aiohttp keeps them as surrogates) were latin-1 text on the client, as http.client sends str."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape").decode("latin-1")
    return value


class _BotocoreVerifier(S3SigV4Auth):
    """botocore's S3 signer, fed the received request instead of one it is about to send."""

    def __init__(self, credentials: Credentials, region: str, signed_headers: _SignedHeaders, payload_hash: str):
        super().__init__(credentials, "s3", region)
        self._received_headers = signed_headers
        self._payload_hash = payload_hash

    def headers_to_sign(self, request):  # exactly the headers the client listed as signed
        return self._received_headers

    def payload(self, request):  # the hash the client signed; the body is checked elsewhere
        return self._payload_hash

    def expected_signature(self, method: str, path: str, query: list[tuple[str, str]], timestamp: str) -> str:
        request = AWSRequest(method=method, url=f"http://signed-host{path}", params=query)
        request.context["timestamp"] = timestamp
        canonical = self.canonical_request(request)
        string_to_sign = self.string_to_sign(request, canonical)
        log.debug("SigV4 canonical request:\n%s\nstring to sign:\n%s", canonical, string_to_sign)
        return self.signature(string_to_sign, request)


class S3Auth:
    """`credentials` maps access keys to secrets with access to every bucket; `resolver` is asked
    about any other access key and returns its Principal (possibly limited to some buckets) or
    None when the key is unknown. With neither, auth is off."""

    def __init__(self, credentials: dict[str, str] | None = None, allow_anonymous: bool = False,
                 *, resolver: Callable[[str], Principal | None] | None = None, max_skew_s: float = 900.0,
                 clock=time.time):
        self.credentials = dict(credentials or {})
        self.resolver = resolver
        self.allow_anonymous = allow_anonymous
        self.max_skew_s = max_skew_s
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self.credentials) or self.resolver is not None

    def principal(self, access_key: str) -> Principal:
        """The principal behind `access_key`; InvalidAccessKeyId when nobody knows it."""
        secret = self.credentials.get(access_key)
        if secret is not None:
            return Principal(access_key, secret)
        found = self.resolver(access_key) if self.resolver is not None else None
        if found is None:
            raise S3Error("InvalidAccessKeyId", f"The access key id {access_key!r} is not known to this server.")
        return found

    def authenticate(self, method: str, path: str, query: list[tuple[str, str]], headers: HeaderLookup) -> AuthContext:
        """Check one request. `path` is the raw (still percent-encoded) path; `query` the
        decoded query parameters in order. Raises S3Error when the request may not proceed."""
        payload_hash = headers.get("x-amz-content-sha256")
        if not self.enabled:
            return AuthContext(access_key=None, payload_hash=payload_hash)
        _refuse_non_canonical_path(path)
        authorization = headers.get("authorization")
        if authorization:
            return self._check_header_auth(method, path, query, headers, authorization.strip())
        if any(name == "X-Amz-Algorithm" for name, _ in query):
            return self._check_query_auth(method, path, query, headers)
        if any(name in ("Signature", "AWSAccessKeyId") for name, _ in query):
            raise S3Error("InvalidRequest", "This URL is presigned with Signature Version 2 (AWSAccessKeyId=...&Signature=...), "
                          "which nearfaas does not accept; presign it with SigV4: aws-cli 1.x `aws configure set "
                          "default.s3.signature_version s3v4` before `aws s3 presign`, boto3 "
                          "`boto3.client('s3', config=Config(signature_version='s3v4'))` before generate_presigned_url.")
        if self.allow_anonymous:
            return AuthContext(access_key=None, payload_hash=payload_hash)
        raise S3Error("AccessDenied", "Access Denied: this endpoint requires requests signed with AWS SigV4 "
                      "(configure an access key and secret in your client).")

    # -- Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=... ------

    def _check_header_auth(self, method, path, query, headers, authorization: str) -> AuthContext:
        algorithm, _, rest = authorization.partition(" ")
        if algorithm == "AWS":
            raise _v2_not_supported()
        if algorithm != ALGORITHM:
            raise S3Error("AuthorizationHeaderMalformed", f"Unsupported authorization algorithm {algorithm!r}; "
                          f"use {ALGORITHM}.")
        fields = {}
        for part in rest.split(","):
            name, sep, value = part.strip().partition("=")
            if sep:
                fields[name.strip()] = value.strip()
        missing = [f for f in ("Credential", "SignedHeaders", "Signature") if not fields.get(f)]
        if missing:
            raise S3Error("AuthorizationHeaderMalformed", f"The authorization header lacks {', '.join(missing)}.")
        payload_hash = headers.get("x-amz-content-sha256")
        if not payload_hash:
            raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256 "
                          "(the SHA-256 hex of the body, or UNSIGNED-PAYLOAD).")
        if payload_hash.startswith("STREAMING-") and payload_hash not in KNOWN_STREAMING:
            raise S3Error("InvalidArgument", f"x-amz-content-sha256 {payload_hash!r} is not supported; use the SHA-256 "
                          "hex of the body, UNSIGNED-PAYLOAD or one of " + ", ".join(sorted(KNOWN_STREAMING)) + ".")
        timestamp = _request_timestamp(headers)
        self._check_skew(timestamp)
        access_key, principal, region = self._check_scope(fields["Credential"], timestamp,
                                                          "AuthorizationHeaderMalformed")
        signed = self._signed_header_map(fields["SignedHeaders"], headers)
        signature = fields["Signature"]
        self._compare(principal, region, signed, payload_hash, method, path, query, timestamp, signature)
        return AuthContext(access_key=access_key, payload_hash=payload_hash, principal=principal,
                           streaming=_streaming_seed(principal, region, payload_hash, timestamp, signature),
                           signed_headers=frozenset(n.strip().lower() for n in fields["SignedHeaders"].split(";")))

    # -- presigned URL: ?X-Amz-Algorithm=...&X-Amz-Signature=... --------------------------------

    def _check_query_auth(self, method, path, query, headers) -> AuthContext:
        params = dict(query)
        needed = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                  "X-Amz-SignedHeaders", "X-Amz-Signature")
        missing = [name for name in needed if not params.get(name)]
        if missing:
            raise S3Error("AuthorizationQueryParametersError",
                          f"The presigned URL lacks {', '.join(missing)}.")
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise S3Error("AuthorizationQueryParametersError", f"X-Amz-Algorithm must be {ALGORITHM}.")
        timestamp = params["X-Amz-Date"]
        signed_at = _parse_amz_date(timestamp)
        raw_expires = params["X-Amz-Expires"].strip()
        if not re.fullmatch(r"-?[0-9]{1,18}", raw_expires):
            raise S3Error("AuthorizationQueryParametersError", "X-Amz-Expires should be a number of seconds "
                          f"from 1 to {MAX_PRESIGN_EXPIRES}, not {raw_expires!r}.")
        expires = int(raw_expires)
        # A number out of range is refused as S3 refuses it: 403 (the s3-tests conformance suite's
        # x_amz_expires_out_range_zero / out_max_range / out_positive_range).
        if expires < 0:
            raise S3Error("AccessDenied", "X-Amz-Expires must be non-negative.")
        if expires > MAX_PRESIGN_EXPIRES:
            raise S3Error("AccessDenied", f"X-Amz-Expires must be less than a week (in seconds) that is "
                          f"{MAX_PRESIGN_EXPIRES}.")
        if expires == 0:
            raise S3Error("AccessDenied", "Request has expired: X-Amz-Expires is 0.")
        now = self._clock()
        if now > signed_at + expires:
            raise S3Error("AccessDenied", "Request has expired: the presigned URL's lifetime has passed.")
        if signed_at > now + self.max_skew_s:
            raise S3Error("AccessDenied", "Request is not valid yet: its X-Amz-Date is in the future.")
        access_key, principal, region = self._check_scope(params["X-Amz-Credential"], timestamp,
                                                          "AuthorizationQueryParametersError")
        signed = self._signed_header_map(params["X-Amz-SignedHeaders"], headers)
        # As botocore signs presigned URLs: the payload is unsigned unless its hash was a signed header.
        payload_hash = signed.get("x-amz-content-sha256") or UNSIGNED_PAYLOAD
        canonical_query = [(k, v) for k, v in query if k != "X-Amz-Signature"]
        signature = params["X-Amz-Signature"]
        self._compare(principal, region, signed, payload_hash, method, path, canonical_query, timestamp, signature)
        return AuthContext(access_key=access_key, payload_hash=payload_hash, presigned=True, principal=principal,
                           streaming=_streaming_seed(principal, region, payload_hash, timestamp, signature))

    # -- shared --------------------------------------------------------------------------------

    def _check_scope(self, credential: str, timestamp: str, malformed_code: str) -> tuple[str, Principal, str]:
        parts = credential.rsplit("/", 4)
        if len(parts) != 5 or parts[4] != "aws4_request" or parts[3] != "s3" or not parts[0]:
            raise S3Error(malformed_code, f"The credential {credential!r} is malformed; expected "
                          "<access-key>/<yyyymmdd>/<region>/s3/aws4_request.")
        access_key, date, region = parts[0], parts[1], parts[2]
        if date != timestamp[:8]:
            raise S3Error(malformed_code, f"The credential date {date} does not match the request date "
                          f"{timestamp[:8]}.")
        return access_key, self.principal(access_key), region  # any region is accepted: nearfaas is one region

    def _check_skew(self, timestamp: str) -> None:
        skew = abs(self._clock() - _parse_amz_date(timestamp))
        if skew > self.max_skew_s:
            raise S3Error("RequestTimeTooSkewed", f"The request time {timestamp} is {int(skew)} s away from the "
                          f"server's clock; the limit is {int(self.max_skew_s)} s. Fix the client's clock.")

    @staticmethod
    def _signed_header_map(signed_headers: str, headers: HeaderLookup) -> _SignedHeaders:
        names = [n.strip().lower() for n in signed_headers.split(";") if n.strip()]
        if "host" not in names:
            raise S3Error("AuthorizationHeaderMalformed", "SignedHeaders must include host.")
        signed = _SignedHeaders()
        for name in names:
            values = headers.getall(name, [])
            if not values:
                raise S3Error("SignatureDoesNotMatch", f"The signed header {name!r} is missing from the request.")
            signed.setdefault(name, []).extend(_as_sent(v) for v in values)
        return signed

    def _compare(self, principal: Principal, region, signed, payload_hash, method, path, query, timestamp,
                 provided) -> None:
        # The access key is not part of what is signed (the scope is date/region/service), so the
        # principal's name stands in for it whatever form the resolver gave it.
        verifier = _BotocoreVerifier(Credentials(principal.name, principal.secret_key), region, signed, payload_hash)
        for candidate_path in _canonical_path_candidates(path):
            expected = verifier.expected_signature(method, candidate_path, query, timestamp)
            if hmac.compare_digest(expected.encode(), provided.encode()):
                return
        raise S3Error("SignatureDoesNotMatch")


def _streaming_seed(principal: Principal, region: str, payload_hash: str, timestamp: str,
                    signature: str) -> StreamingSeed | None:
    """The first link of the chunk-signature chain, for a payload signed chunk by chunk."""
    if payload_hash not in SIGNED_STREAMING:
        return None  # the fast path: no key derivation unless chunks must be checked
    date = timestamp[:8]
    return StreamingSeed(key=signing_key(principal.secret_key, date, region), timestamp=timestamp,
                         scope=f"{date}/{region}/s3/aws4_request", signature=signature,
                         trailer=payload_hash == STREAMING_PAYLOAD_TRAILER)


# An escape of "/" or of an unreserved character (RFC 3986: letters, digits, "-._~"): SDKs never
# send one (botocore quotes keys with safe="/~"), so such a spelling is another path for the
# same signature; and a "." or ".." segment names no object.
_NEEDLESS_ESCAPE = re.compile(r"%(2[Ff]|2[DdEe]|3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa]|5[Ff]|7[Ee])")


def _refuse_non_canonical_path(raw_path: str) -> None:
    """Only one spelling of a path is accepted, so the path a signature (or a presigned URL)
    covers is the path served: ``/./``, ``/../``, ``%2F``, ``%2E`` or ``%78`` (an escaped
    unreserved character) are refused (issue 39, finding 8)."""
    for match in re.finditer(r"%[0-9A-Fa-f]{2}", raw_path):
        if _NEEDLESS_ESCAPE.fullmatch(match.group()):
            raise S3Error("InvalidURI", f"The request path escapes {unquote(match.group())!r} as {match.group()}; send "
                          "it unescaped, as the AWS SDKs do (only one spelling of a path is accepted).")
    if any(segment in (".", "..") for segment in raw_path.split("/")):
        raise S3Error("InvalidURI", "The request path has a '.' or '..' segment, which names no object; send the "
                      "path without it.")


def _canonical_path_candidates(raw_path: str) -> Iterable[str]:
    """SigV4 for S3 signs the path URI-encoded once. SDKs encode alike, but a client may have
    escaped characters differently on the wire; try the strict re-encoding first, then the
    path exactly as received."""
    raw_path = raw_path or "/"
    reencoded = quote(unquote(raw_path), safe="/~")
    yield reencoded
    if raw_path != reencoded:
        yield raw_path


def _request_timestamp(headers: HeaderLookup) -> str:
    amz_date = headers.get("x-amz-date")
    if amz_date:
        _parse_amz_date(amz_date)
        return amz_date
    date = headers.get("date")
    if date:
        try:
            return parsedate_to_datetime(date).strftime(_AMZ_DATE_FORMAT)
        except (TypeError, ValueError):
            pass
    raise S3Error("AccessDenied", "AWS authentication requires a valid X-Amz-Date or Date header.")


def _parse_amz_date(value: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(value, _AMZ_DATE_FORMAT)))
    except ValueError:
        raise S3Error("AccessDenied", f"X-Amz-Date {value!r} is not of the form yyyymmddThhmmssZ.") from None


def _v2_not_supported() -> S3Error:
    return S3Error("InvalidRequest", "The authorization mechanism you have provided is not supported. "
                   "Please use AWS4-HMAC-SHA256.")
