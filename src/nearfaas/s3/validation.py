"""Pure checks shared by the storage node and the S3 front end: bucket names, object keys,
upload ids, byte ranges and user metadata. Each failure is an :class:`S3Error` whose message
says what was wrong and how to fix it."""

from __future__ import annotations

import re
import unicodedata

from nearfaas.s3.errors import S3Error

MAX_KEY_BYTES = 1024
# S3 limits the user metadata (names + values, UTF-8) of one object to 2 KiB.
MAX_METADATA_BYTES = 2048
MAX_PART_NUMBER = 10_000

_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
_IP_LIKE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_UPLOAD_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_METADATA_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")


def decimal(text: str) -> int | None:
    """A plain non-negative decimal number, or None. ASCII digits only: str.isdigit and int()
    also take "\u0661" (ARABIC-INDIC DIGIT ONE), int() also "+1", "1_0" and " 1", so a check by
    either lets another spelling of a number through (issue 39, finding 8: PartNumber=\u0661)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def validate_bucket_name(name: str) -> None:
    """S3 bucket naming rules (general purpose buckets)."""
    problem = None
    if not 3 <= len(name) <= 63:
        problem = f"it is {len(name)} characters long; use 3 to 63"
    elif not _BUCKET_CHARS.match(name):
        problem = "use only a-z, 0-9, '.' and '-', and start and end with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        problem = "it may not contain '..', '.-' or '-.'"
    elif _IP_LIKE.match(name):
        problem = "it may not be formatted as an IP address"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        problem = "the prefixes 'xn--', 'sthree-' and suffixes '-s3alias', '--ol-s3' are reserved"
    if problem:
        raise S3Error(
            "InvalidBucketName", f"The bucket name {name!r} is not valid: {problem}.", resource=name
        )


def validate_key(key: str) -> None:
    """S3 key rules plus the nearfaas rule: no control characters and no '.' or '..' path
    segment, so that a key can always be used as a relative path by functions."""
    if key == "":
        raise S3Error("InvalidArgument", "The object key is empty; give a key of 1 to 1024 bytes.")
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError as exc:
        ch = key[exc.start]
        raise S3Error(
            "InvalidArgument",
            f"The object key holds the unpaired surrogate U+{ord(ch):04X} at character {exc.start}; "
            "a key must be valid Unicode text (UTF-8).",
            resource=ascii(key)[:200],
        ) from None
    if len(encoded) > MAX_KEY_BYTES:
        raise S3Error(
            "KeyTooLongError",
            f"Your key is {len(encoded)} bytes of UTF-8; the maximum is {MAX_KEY_BYTES}.",
            resource=key[:64] + "...",
        )
    for ch in key:
        if unicodedata.category(ch) == "Cc":
            raise S3Error(
                "InvalidObjectName",
                f"The object key contains the control character U+{ord(ch):04X}; "
                "nearfaas keys may not contain NUL or other control characters.",
                resource=repr(key),
            )
    for segment in key.split("/"):
        if segment in (".", ".."):
            raise S3Error(
                "InvalidObjectName",
                f"The object key {key!r} has a {segment!r} path segment; nearfaas keys may not "
                "contain '.' or '..' segments.",
                resource=key,
            )


def is_noncharacter(ch: str) -> bool:
    """Unicode's 66 noncharacters: U+FDD0..U+FDEF and the last two code points of every plane."""
    cp = ord(ch)
    return 0xFDD0 <= cp <= 0xFDEF or (cp & 0xFFFE) == 0xFFFE


def validate_new_key(key: str) -> None:
    """validate_key plus the rule for keys being created (PUT, CreateMultipartUpload, Copy): no
    Unicode noncharacter. S3 lists keys in XML 1.0, which cannot carry U+FFFE or U+FFFF at all,
    so such a key would be stored but could never be listed without encoding-type=url; the
    other noncharacters are refused with them, as "not for interchange". Reads and deletes keep
    using validate_key alone, so an object stored by an older version stays reachable."""
    validate_key(key)
    for index, ch in enumerate(key):
        if is_noncharacter(ch):
            raise S3Error(
                "InvalidArgument",
                f"The object key holds the Unicode noncharacter U+{ord(ch):04X} at character {index}; "
                "S3 listings (XML 1.0) cannot carry it, so nearfaas does not accept it in a new key.",
                resource=ascii(key)[:200],
            )


def validate_upload_id(upload_id: str) -> None:
    # Upload ids name a directory on the node, so they are kept to a safe alphabet.
    if not _UPLOAD_ID.match(upload_id):
        raise S3Error(
            "InvalidArgument",
            "The upload id must be 1-128 characters of A-Z, a-z, 0-9, '.', '_' or '-', "
            "not starting with '.'.",
            resource=upload_id[:130],
        )


def validate_part_number(part_number: int) -> None:
    if not 1 <= part_number <= MAX_PART_NUMBER:
        raise S3Error(
            "InvalidArgument",
            f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive; "
            f"got {part_number}.",
        )


def validate_metadata(metadata: dict | None) -> dict:
    """Return the metadata with lower-case names; enforce the S3 size limit."""
    if not metadata:
        return {}
    clean: dict[str, str] = {}
    total = 0
    for name, value in metadata.items():
        lname = str(name).lower()
        if not _METADATA_NAME.match(lname):
            raise S3Error(
                "InvalidArgument", f"The user metadata name {name!r} is not a valid HTTP header name."
            )
        value = str(value)
        validate_header_value(f"x-amz-meta-{lname}", value)
        total += len(lname.encode()) + len(value.encode("utf-8", "surrogateescape"))
        clean[lname] = value
    if total > MAX_METADATA_BYTES:
        raise S3Error(
            "MetadataTooLarge",
            f"Your metadata headers are {total} bytes; the limit is {MAX_METADATA_BYTES}.",
        )
    return clean


def validate_header_value(name: str, value: str) -> None:
    """Values echoed back as response headers (content type, user metadata) must be sendable:
    no control characters other than tab, no unpaired surrogates."""
    for ch in value:
        if (unicodedata.category(ch) in ("Cc", "Cs")) and ch != "\t":
            raise S3Error(
                "InvalidArgument",
                f"The value of {name} contains the character U+{ord(ch):04X}, which cannot be sent "
                "in an HTTP header; use printable text.",
            )


# ---------------------------------------------------------------------------------------------
# Byte ranges. A request range is a (first, last) pair as the Range header gives it:
#   (a, b) for bytes=a-b, (a, None) for bytes=a-, (None, n) for the suffix bytes=-n.


def parse_range_header(value: str | None) -> tuple[int | None, int | None] | None:
    """Parse one HTTP byte range. Returns None where the header is absent or not a single,
    syntactically valid byte range: RFC 9110 says such a header is ignored (S3 then serves
    the whole object), so bad syntax never becomes an error."""
    if not value:
        return None
    value = value.strip()
    if not value.lower().startswith("bytes="):
        return None
    spec = value[6:].strip()
    if "," in spec:
        return None  # S3 does not serve multiple ranges; it returns the whole object
    first, sep, last = spec.partition("-")
    first, last = first.strip(), last.strip()
    if not sep or not (first.isdigit() or first == "") or not (last.isdigit() or last == ""):
        return None
    if not first.isascii() or not last.isascii():
        return None  # str.isdigit accepts non-ASCII digits that int() would also take
    if first == "" and last == "":
        return None
    if first == "":
        return (None, int(last))
    if last == "":
        return (int(first), None)
    a, b = int(first), int(last)
    if b < a:
        return None
    return (a, b)


def resolve_range(byte_range: tuple[int | None, int | None] | None, size: int) -> tuple[int, int]:
    """Turn a request range into inclusive (start, end) offsets within an object of `size`
    bytes; raises InvalidRange (416) when it selects no byte. For no range the whole object
    is served; an empty object then gives (0, -1)."""
    if byte_range is None:
        return (0, size - 1)
    first, last = byte_range
    if first is None:
        suffix = last or 0
        if suffix <= 0 or size == 0:
            raise _unsatisfiable(byte_range, size)
        return (max(0, size - suffix), size - 1)
    if first >= size or (last is not None and last < first):
        raise _unsatisfiable(byte_range, size)
    end = size - 1 if last is None else min(last, size - 1)
    return (first, end)


def format_range(byte_range: tuple[int | None, int | None]) -> str:
    first, last = byte_range
    return f"bytes={'' if first is None else first}-{'' if last is None else last}"


def _unsatisfiable(byte_range: tuple[int | None, int | None], size: int) -> S3Error:
    return S3Error(
        "InvalidRange",
        f"The range {format_range(byte_range)} selects no byte of this {size}-byte object.",
    )
