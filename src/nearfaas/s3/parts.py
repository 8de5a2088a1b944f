"""Reading an object by part (GetObject / HeadObject ``?partNumber=N``) and the part numbers of
UploadPart requests.

A multipart upload's completion stores the parts' sizes with the object, in its stored headers
(``ObjectInfo.headers``, persisted, replicated and repaired with the object) under
``x-nearfaas-part-sizes`` ("5242880*2,17": runs of equal sizes as size*count). That header is nearfaas-internal: a GET or
HEAD answers it only to the gateway (a storage node's trusted writer, who asks for it with the
same request header), never to a client (s3/checksums.py ``response_headers`` drops every
``x-nearfaas-*`` stored name). Part N of a multipart object is then served as the range of its
bytes (206, Content-Range, ``x-amz-mp-parts-count``). A single-part object has one part: N=1 is
the whole object (200, no parts count), any other N is 416 InvalidPartNumber.

Objects completed before part sizes were stored have only their part count (the ETag's
"-<n>"): for them a partNumber read is refused with 400 InvalidRequest naming why. So is one
whose sizes do not fit in one header (MAX_HEADER: thousands of parts of differing sizes; the
usual upload, equal parts and a last one, is a few bytes): a node does not send it to the gateway.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import MAX_PART_NUMBER, decimal, parse_range_header

PART_SIZES = "x-nearfaas-part-sizes"
PARTS_COUNT = "x-amz-mp-parts-count"
MAX_HEADER = 6000  # under aiohttp's 8190-byte limit on a header field
_ETAG = "etag of the part's object"  # in part_range's extra headers, for with_part; never sent


def part_of(q: dict) -> tuple[str, int]:
    """(upload id, part number) of an UploadPart / UploadPartCopy."""
    upload_id = q.get("uploadId")
    if not upload_id:
        raise S3Error("InvalidArgument", "UploadPart needs both partNumber and uploadId.")
    return upload_id, part_number(q)


def part_number(q: dict) -> int:
    raw = q.get("partNumber", "")
    number = decimal(raw)
    if number is None or not 1 <= number <= MAX_PART_NUMBER:
        raise S3Error("InvalidArgument", f"partNumber must be an integer from 1 to {MAX_PART_NUMBER}, not {raw!r}.")
    return number


def part_sizes(info: ObjectInfo) -> list[int] | None:
    """The object's part sizes; [size] for a single-part object; None when it is a multipart
    object completed before nearfaas stored part sizes."""
    raw = info.headers.get(PART_SIZES)
    if raw:
        return decode_sizes(raw)
    return None if parts_count(info) else [info.size]


def encode_sizes(sizes: list[int]) -> str:
    """Part sizes, runs of equal ones as "<size>*<count>": "5242880*9999,17" for the usual upload."""
    runs = [(size, len(list(group))) for size, group in itertools.groupby(sizes)]
    return ",".join(f"{size}*{count}" if count > 1 else str(size) for size, count in runs)


def decode_sizes(raw: str) -> list[int] | None:
    sizes: list[int] = []
    for item in raw.split(","):
        size, _, count = item.partition("*")
        if not size.isdigit() or (count and not count.isdigit()) or len(sizes) + int(count or 1) > MAX_PART_NUMBER:
            return None  # not what encode_sizes writes: treated as unknown
        sizes += [int(size)] * int(count or 1)
    return sizes


def parts_count(info: ObjectInfo) -> int:
    """The number of parts of a multipart object (its ETag's "-<n>"); 0 for a single-part object."""
    _, dash, count = info.etag.rpartition("-")
    return int(count) if dash and count.isdigit() else 0


def part_range(info: ObjectInfo, q: dict, request_headers) -> tuple[tuple[int | None, int | None] | None, dict[str, str]]:
    """(byte range, extra response headers) of a GET / HEAD: the Range header's, or part N's."""
    if "partNumber" not in q:
        return parse_range_header(request_headers.get("Range")), {}
    number = part_number(q)
    if request_headers.get("Range") is not None:
        raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query parameter.")
    sizes = part_sizes(info)
    if sizes is None:
        raise S3Error("InvalidRequest", f"nearfaas does not know the sizes of this object's {parts_count(info)} parts (it was "
                      "completed before nearfaas recorded part sizes, or has very many parts of differing sizes), so it "
                      "cannot be read by partNumber; use a Range request.")
    if number > len(sizes):
        raise S3Error("InvalidPartNumber", f"The object has {len(sizes)} part(s); there is no part {number}.",
                      status=416)
    if not parts_count(info):
        return None, {}  # a single-part object: part 1 is all of it
    start = sum(sizes[: number - 1])
    extra = {PARTS_COUNT: str(len(sizes)), _ETAG: info.etag}
    if sizes[number - 1] == 0:  # an empty last part: no byte range names it
        raise S3Error("InvalidRequest", f"Part {number} of the object is empty; there are no bytes to read.")
    return (start, start + sizes[number - 1] - 1), extra


def with_part(headers: dict[str, str], extra: dict[str, str], info: ObjectInfo) -> dict[str, str]:
    """A GET's / HEAD's headers for what part_range chose: a part's carry its parts count and
    no checksum (the object's is not the part's). A GET reads after the HEAD that sized the part:
    an object replaced in between is a 503 to retry, never another object's bytes under this range."""
    if not extra:
        return headers
    if extra[_ETAG] != info.etag:
        raise S3Error("ServiceUnavailable", "The object changed while its part was being located; retry the request.")
    kept = {k: v for k, v in headers.items() if not k.lower().startswith("x-amz-checksum-")}
    return kept | {PARTS_COUNT: extra[PARTS_COUNT]}


async def read_range(backend, request_headers, bucket: str, key: str, q: dict, version: dict | None = None):
    """part_range for a GET, which has no ObjectInfo before it reads: one HEAD first, only for a
    partNumber read (of the version named, ``{"version_id": ...}``, if any)."""
    if "partNumber" not in q:
        return parse_range_header(request_headers.get("Range")), {}
    part_number(q)  # a bad partNumber is a 400 before the object is looked up
    return part_range(await backend.head_object(bucket, key, **(version or {})), q, request_headers)


def internal_headers(request_headers, info: ObjectInfo, trusted: Callable[[], bool]) -> dict[str, str]:
    """The part sizes, to the gateway's node client only (it sends PART_SIZES to ask)."""
    if PART_SIZES not in request_headers or len(info.headers.get(PART_SIZES, "")) not in range(1, MAX_HEADER) or not trusted():
        return {}  # too long a list (many parts of many sizes) would break the gateway's reading of the answer
    return {PART_SIZES: info.headers[PART_SIZES]}
