"""S3's conditional requests: If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since on
reads, writes (PutObject, CompleteMultipartUpload, CopyObject's destination), DeleteObject, and
the x-amz-copy-source-if-* headers of a copy's source.

Reads (GET, HEAD) follow RFC 7232 as S3 applies it: If-Match fails with 412 and then
If-Unmodified-Since is not looked at; If-None-Match matching answers 304 and then
If-Modified-Since is not looked at. A date that does not parse is ignored, as S3 ignores it.

Writes take ``If-None-Match: *`` (only if the key has no object) and ``If-Match: "<etag>"`` (only if
the object is that one; 404 NoSuchKey when there is none). A backend that can make the check and
the write one atomic step says so (``atomic_conditions``: the gateway's cluster backend, which
sees every write of the cluster); for any other the front end checks, then writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error


def etag_matches(header: str, etag: str) -> bool:
    candidates = [c.strip() for c in header.split(",")]
    return "*" in candidates or any(c.removeprefix("W/").strip('"') == etag for c in candidates)


def _date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _modified_since(info: ObjectInfo, since: float) -> bool:
    return int(info.last_modified) > int(since)  # HTTP dates have whole seconds


def _failed(what: str) -> S3Error:
    return S3Error("PreconditionFailed", f"At least one of the pre-conditions you specified did not hold ({what}).",
                   resource=what)


def check_read(headers, info: ObjectInfo, prefix: str = "") -> bool:
    """Raise 412 for a failed If-Match / If-Unmodified-Since; True when the answer is 304.

    With ``prefix="x-amz-copy-source-"`` the headers are a copy's source conditions, where S3
    answers 412 for every failure (a copy has no 304)."""
    if_match = headers.get(prefix + "If-Match")
    if if_match is not None:
        if not etag_matches(if_match, info.etag):
            raise _failed(prefix + "If-Match")
    else:
        since = _date(headers.get(prefix + "If-Unmodified-Since"))
        if since is not None and _modified_since(info, since):
            raise _failed(prefix + "If-Unmodified-Since")
    if_none_match = headers.get(prefix + "If-None-Match")
    if if_none_match is not None:
        not_modified = etag_matches(if_none_match, info.etag)
    else:
        since = _date(headers.get(prefix + "If-Modified-Since"))
        not_modified = since is not None and not _modified_since(info, since)
    if not_modified and prefix:
        raise _failed(prefix + ("If-None-Match" if if_none_match is not None else "If-Modified-Since"))
    return not_modified


@dataclass(frozen=True)
class WriteCondition:
    """A write's or a delete's precondition on the object it replaces."""

    if_match: str | None = None
    if_none_match: str | None = None

    @classmethod
    def from_headers(cls, headers) -> WriteCondition | None:
        if_match, if_none_match = headers.get("If-Match"), headers.get("If-None-Match")
        if if_match is None and if_none_match is None:
            return None
        if if_none_match is not None and if_none_match.strip() != "*":
            raise S3Error("NotImplemented", "A write's If-None-Match takes only * (write only if the key has no object); "
                          "use If-Match: \"<etag>\" to replace one object.", status=501)
        return cls(if_match, if_none_match)

    def check(self, info: ObjectInfo | None, key: str = "") -> None:
        """``info``: the key's current object, None when it has none (or a delete marker)."""
        if self.if_none_match is not None and info is not None:
            raise _failed("If-None-Match")
        if self.if_match is not None:
            if info is None:
                raise S3Error("NoSuchKey", "The specified key does not exist (If-Match needs an object to match).",
                              resource=key)
            if not etag_matches(self.if_match, info.etag):
                raise _failed("If-Match")


# Conditions S3 defines that nearfaas does not evaluate: a request carrying one is refused, never
# carried out as if it were unconditional (an unchecked condition is a write the client forbade).
UNSUPPORTED_DELETE_HEADERS = ("x-amz-if-match-last-modified-time", "x-amz-if-match-size", "x-amz-if-match-initiated-time")


def refuse_unsupported(headers, what: str) -> None:
    """501 NotImplemented naming the first condition header of ``UNSUPPORTED_DELETE_HEADERS`` present."""
    for name in UNSUPPORTED_DELETE_HEADERS:
        if name in headers:
            raise S3Error("NotImplemented", f"{what} with {name} is not supported here: the condition would not be "
                          "checked. Use If-Match: \"<etag>\" (and versionId to name one version).", status=501)


def conflict() -> S3Error:
    return S3Error("ConditionalRequestConflict", "A conflicting conditional operation is currently in progress against "
                   "this resource; retry.", status=409)
