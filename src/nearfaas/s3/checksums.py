"""S3's flexible checksums (CRC32, CRC32C, CRC64NVME, SHA1, SHA256) and the system headers an
object keeps besides its user metadata.

An object's stored headers (``ObjectInfo.headers``) hold, under their lower-case names, the
standard headers a client set when it wrote it (``STORED_HEADERS``: Cache-Control,
Content-Disposition, Content-Encoding, Content-Language, Expires,
x-amz-website-redirect-location, x-amz-storage-class) and its checksum: ``x-amz-checksum-<kind>``
(base64; for a multipart upload the composite ``<b64>-<n>`` of its parts' checksums, as S3
computes it) and ``x-amz-checksum-type`` (FULL_OBJECT or COMPOSITE). Checksum headers are sent
back only to a GET or HEAD that asks (``x-amz-checksum-mode: ENABLED``).

CRC32C and CRC64NVME come from awscrt (what botocore itself uses for them); CRC32 from zlib,
SHA1 / SHA256 from hashlib.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib

from awscrt import checksums as crt

from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import decimal

KINDS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
CHECKSUM_PREFIX = "x-amz-checksum-"
CHECKSUM_TYPE = "x-amz-checksum-type"
CHECKSUM_MODE = "x-amz-checksum-mode"
# Standard headers stored with an object and returned on GET / HEAD (Content-Type has its own field).
STORED_HEADERS = ("cache-control", "content-disposition", "content-encoding", "content-language", "expires",
                  "x-amz-website-redirect-location", "x-amz-storage-class")
STORAGE_CLASSES = frozenset({"STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
                             "GLACIER", "DEEP_ARCHIVE", "OUTPOSTS", "GLACIER_IR", "SNOW", "EXPRESS_ONEZONE"})
# The algorithm a CreateMultipartUpload names (and a node is told to compute, by the gateway).
ALGORITHM_HEADERS = ("x-amz-checksum-algorithm", "x-amz-sdk-checksum-algorithm")
_CANONICAL = {"cache-control": "Cache-Control", "content-disposition": "Content-Disposition",
              "content-encoding": "Content-Encoding", "content-language": "Content-Language", "expires": "Expires"}


class Checksum:
    """One running checksum of ``kind`` (one of KINDS)."""

    def __init__(self, kind: str):
        if kind not in KINDS:
            raise ValueError(f"unknown checksum {kind!r}")
        self.kind = kind
        self._crc = 0
        self._hash = hashlib.new(kind) if kind.startswith("sha") else None

    def update(self, data: bytes) -> None:
        if self._hash is not None:
            self._hash.update(data)
        elif self.kind == "crc32":
            self._crc = zlib.crc32(data, self._crc)
        elif self.kind == "crc32c":
            self._crc = crt.crc32c(data, self._crc)
        else:
            self._crc = crt.crc64nvme(data, self._crc)

    def digest(self) -> bytes:
        if self._hash is not None:
            return self._hash.digest()
        return self._crc.to_bytes(8 if self.kind == "crc64nvme" else 4, "big")

    def b64(self) -> str:
        return base64.b64encode(self.digest()).decode()


def new_checksum(kind: str) -> Checksum:
    return Checksum(kind)


def header_kind(header: str) -> str | None:
    """``crc32c`` for ``x-amz-checksum-crc32c``; None for any other header."""
    header = header.lower()
    kind = header[len(CHECKSUM_PREFIX):] if header.startswith(CHECKSUM_PREFIX) else ""
    return kind if kind in KINDS else None


def requested_algorithm(headers) -> str | None:
    """The checksum kind named by x-amz-checksum-algorithm (or the SDK's header), if any."""
    for name in ALGORITHM_HEADERS:
        value = (headers.get(name) or "").strip().lower()
        if value:
            if value not in KINDS:
                raise S3Error("InvalidRequest", f"{name} {value.upper()!r} is not one of "
                              f"{', '.join(k.upper() for k in KINDS)}.")
            return value
    return None


def composite(kind: str, part_digests: list[bytes]) -> str:
    """S3's checksum of a multipart object: the checksum of the parts' raw checksums, "-<n>"."""
    c = Checksum(kind)
    c.update(b"".join(part_digests))
    return f"{c.b64()}-{len(part_digests)}"


def stored_request_headers(request_headers) -> dict[str, str]:
    """The standard headers of a write to store with the object (lower-case names). aws-chunked
    is the body's framing, not the object's encoding: it is dropped from Content-Encoding."""
    stored = {}
    for name in STORED_HEADERS:
        value = request_headers.get(name)
        if value is None:
            continue
        if name == "content-encoding" and "aws-chunked" in value.lower():
            value = ", ".join(e for e in (p.strip() for p in value.split(",")) if e and e.lower() != "aws-chunked")
            if not value:
                continue
        if name == "x-amz-storage-class" and value not in STORAGE_CLASSES:
            raise S3Error("InvalidStorageClass", f"The storage class {value!r} is not one of "
                          f"{', '.join(sorted(STORAGE_CLASSES))}.")
        stored[name] = value
    return stored


def response_headers(stored: dict, checksum_mode: bool) -> dict[str, str]:
    """What a GET / HEAD answers for an object's stored headers: the standard ones always, its
    checksum (and type) only when the client asked (x-amz-checksum-mode: ENABLED)."""
    out = {}
    for name, value in stored.items():
        if name.startswith(CHECKSUM_PREFIX):
            if checksum_mode:
                out[name] = value
        elif not name.startswith("x-nearfaas-"):  # internal (s3/parts.py): never a client's header
            out[_CANONICAL.get(name, name)] = value
    return out


def checksum_mode(request_headers) -> bool:
    return (request_headers.get(CHECKSUM_MODE) or "").strip().upper() == "ENABLED"


# -- writes ----------------------------------------------------------------------------------------

# Kinds a storage node is to compute for a write (sent by the gateway's node client, whose body
# ends with the version trailer, so it cannot send the values themselves as x-amz-checksum-*).
COMPUTE_HEADER = "x-nearfaas-checksums"
_IMPLEMENTED_ACL = "private"
_TYPES = ("COMPOSITE", "FULL_OBJECT")
_COMBINE = {"crc32": crt.combine_crc32, "crc32c": crt.combine_crc32c, "crc64nvme": crt.combine_crc64nvme}


def check_acl(request_headers) -> None:
    """nearfaas has one ACL, private (the owner, i.e. the cluster's keys and the functions and
    keys it grants buckets to): ``x-amz-acl: private`` is accepted, anything else refused."""
    acl = request_headers.get("x-amz-acl")
    if acl is not None and acl.strip() != _IMPLEMENTED_ACL:
        raise S3Error("NotImplemented", f"x-amz-acl {acl!r} is not implemented by nearfaas: every bucket and object is "
                      "private; send x-amz-acl: private or no x-amz-acl header, and share data with access keys.")
    grants = sorted(name.lower() for name in request_headers if name.lower().startswith("x-amz-grant-"))
    if grants:
        raise S3Error("NotImplemented", f"{grants[0]} is not implemented by nearfaas: every bucket and object is private; "
                      "remove the x-amz-grant-* headers (or send x-amz-acl: private), and share data with access keys.")


def write_headers(request_headers, *, upload: bool = False) -> dict[str, str]:
    """The headers to store for a PutObject (``upload``: a CreateMultipartUpload, which also keeps
    the checksum algorithm and type its parts are to be combined with). Checks the ACL."""
    check_acl(request_headers)
    stored = stored_request_headers(request_headers)
    kind = requested_algorithm(request_headers)
    checksum_type = (request_headers.get(CHECKSUM_TYPE) or "").strip().upper()
    if upload and kind:
        stored["x-amz-checksum-algorithm"] = kind.upper()
        checksum_type = checksum_type or ("FULL_OBJECT" if kind == "crc64nvme" else "COMPOSITE")
        allowed = {"crc64nvme": ("FULL_OBJECT",), "crc32": _TYPES, "crc32c": _TYPES}.get(kind, ("COMPOSITE",))
        if checksum_type not in allowed:
            raise S3Error("InvalidRequest", f"The {kind.upper()} checksum cannot be of type {checksum_type}: SHA1 and SHA256 "
                          "are COMPOSITE only, CRC64NVME FULL_OBJECT only, CRC32 and CRC32C either.")
        stored[CHECKSUM_TYPE] = checksum_type
    return stored


def compute_kinds(request_headers) -> list[str]:
    """The checksum kinds a write body is checksummed with: those whose value a header or a
    trailer carries, the algorithm named, and (from the gateway) COMPUTE_HEADER's."""
    kinds = [k for k in KINDS if request_headers.get(CHECKSUM_PREFIX + k) is not None]
    for name in (request_headers.get("x-amz-trailer") or "").split(","):
        kind = header_kind(name.strip())
        if kind and kind not in kinds:
            kinds.append(kind)
    kind = requested_algorithm(request_headers)
    if kind and kind not in kinds:
        kinds.append(kind)
    for name in (request_headers.get(COMPUTE_HEADER) or "").split(","):
        kind = name.strip().lower()
        if kind in KINDS and kind not in kinds:
            kinds.append(kind)
    return kinds


async def recorded(chunks, body, stored: dict, kinds: list[str]):
    """``chunks`` (the object's bytes) as they come; once they have all come, ``stored`` gets the
    checksums of ``kinds`` (x-amz-checksum-<kind>, base64; type FULL_OBJECT). Those the request
    body verified (``body.verified``, header or trailer values) are taken from it."""
    own = {k: Checksum(k) for k in kinds if CHECKSUM_PREFIX + k not in body.verified_kinds()}
    async for chunk in chunks:
        for checksum in own.values():
            checksum.update(chunk)
        yield chunk
    found = {**body.verified, **{CHECKSUM_PREFIX + k: c.b64() for k, c in own.items()}}
    # COMPUTE_HEADER stays: a replica's call may not have been sent yet (the stores drop it).
    if found:
        stored.update(found)
        stored[CHECKSUM_TYPE] = "FULL_OBJECT"


def to_compute(stored: dict, kinds: list[str]) -> dict:
    """``stored`` with the kinds still to be computed (for the node client: COMPUTE_HEADER)."""
    if kinds:
        stored[COMPUTE_HEADER] = ",".join(kinds)
    return stored


def checksum_response(stored: dict) -> dict[str, str]:
    """A write's response headers for its checksums (PutObject, UploadPart)."""
    return {k: v for k, v in stored.items() if k.startswith(CHECKSUM_PREFIX) and k != "x-amz-checksum-algorithm"}


# part_checksums[WHOLE_OBJECT]: the checksum a CompleteMultipartUpload names for the object itself
# (its x-amz-checksum-<kind> header, and x-amz-checksum-type), carried beside the parts' (whose
# numbers start at 1) so every layer between the gateway and the node that writes passes it on.
WHOLE_OBJECT = 0


def completion_checksum(request_headers) -> dict[str, str]:
    """The object checksum a CompleteMultipartUpload names (boto3's ChecksumCRC32=..., etc.):
    a FULL_OBJECT value (base64 of the digest) or a COMPOSITE one (``<base64>-<parts>``). It is
    the checksum of the object the parts make, never of the request's XML body."""
    found = {}
    for kind in KINDS:
        value = request_headers.get(CHECKSUM_PREFIX + kind)
        if value is None:
            continue
        value = value.strip()
        digest, dash, count = value.partition("-")
        try:
            raw = base64.b64decode(digest, validate=True)
        except (ValueError, binascii.Error):
            raw = b""
        if len(raw) != len(Checksum(kind).digest()) or (dash and not count.isdigit()):
            raise S3Error("InvalidRequest", f"Value for {CHECKSUM_PREFIX}{kind} is not the base64 of a {kind.upper()} "
                          "digest, or such a value followed by -<number of parts> (a COMPOSITE checksum).")
        found[CHECKSUM_PREFIX + kind] = value
    kind_of_type = (request_headers.get(CHECKSUM_TYPE) or "").strip().upper()
    if found and kind_of_type:
        if kind_of_type not in _TYPES:
            raise S3Error("InvalidRequest", f"{CHECKSUM_TYPE} {kind_of_type!r} is not COMPOSITE or FULL_OBJECT.")
        found[CHECKSUM_TYPE] = kind_of_type
    return found


def _check_completion(expected: dict, stored: dict, kind: str) -> None:
    """The completion's own checksum (``expected``) against the object's, before it is written."""
    named = [h for h in expected if header_kind(h)]
    if not named:
        return
    if not kind:
        raise S3Error("InvalidRequest", f"The completion names {named[0]}, but the upload was created without a checksum "
                      "algorithm, so its object has none to compare; create the upload with x-amz-checksum-algorithm "
                      "(boto3: ChecksumAlgorithm=...), or complete it without the checksum.")
    header = CHECKSUM_PREFIX + kind
    if named != [header]:
        raise S3Error("InvalidRequest", f"The completion names {', '.join(named)}, but the upload's checksum algorithm is "
                      f"{kind.upper()}; name {header}.")
    actual_type = stored.get(CHECKSUM_TYPE)
    if expected.get(CHECKSUM_TYPE, actual_type) != actual_type:
        raise S3Error("InvalidRequest", f"The completion says {CHECKSUM_TYPE} {expected[CHECKSUM_TYPE]}, but the upload "
                      f"was created as {actual_type}.")
    value, actual = expected[header], stored[header]
    if actual_type == "FULL_OBJECT" and "-" in value:
        raise S3Error("InvalidRequest", f"{header} {value!r} is a COMPOSITE value (<base64>-<parts>), but this upload's "
                      "checksum is FULL_OBJECT: name the CRC of the whole object.")
    # A COMPOSITE checksum may be named with or without its -<parts> suffix; FULL_OBJECT has none.
    same = value == actual or (actual_type == "COMPOSITE" and "-" not in value and actual.partition("-")[0] == value)
    if not same:
        raise S3Error("BadDigest", f"The {kind.upper()} you specified in {header} ({value}) did not match the "
                      f"{actual_type} checksum of the object the parts make ({actual}).")


def multipart_headers(upload_headers: dict, parts: list[tuple[int, str]], part_fields: list[dict],
                      part_checksums: dict) -> dict:
    """The stored headers of a completed multipart object: the upload's, and when the upload named a
    checksum algorithm, its parts' checksums combined as S3 does: COMPOSITE, the checksum of the
    parts' raw checksums with "-<n>"; FULL_OBJECT, the CRC of the whole object. The checksums the
    completion lists (``part_checksums``: part number -> {header: value}) must be the parts', and
    the object's own (``part_checksums[WHOLE_OBJECT]``) the object's: BadDigest before anything is
    written if not."""
    expected = part_checksums.get(WHOLE_OBJECT) or {}
    stored = {k: v for k, v in upload_headers.items() if k not in ("x-amz-checksum-algorithm", CHECKSUM_TYPE)}
    for (number, _), fields in zip(parts, part_fields, strict=True):
        have = fields.get("checksums") or {}
        for header, value in (part_checksums.get(number) or {}).items():
            if have.get(header) != value:
                raise S3Error("InvalidPart", f"Part {number} has {header} {have.get(header)!r}, not {value!r}; list the "
                              "checksums that UploadPart returned.")
    kind = (upload_headers.get("x-amz-checksum-algorithm") or "").lower()
    if not kind:
        _check_completion(expected, stored, kind)
        return stored
    header, raw = CHECKSUM_PREFIX + kind, []
    for (number, _), fields in zip(parts, part_fields, strict=True):
        value = (fields.get("checksums") or {}).get(header)
        if value is None:
            raise S3Error("InvalidPart", f"Part {number} was uploaded without {header}, which this upload's checksum "
                          f"algorithm {kind.upper()} needs; upload it again with that checksum.")
        raw.append(base64.b64decode(value))
    if upload_headers.get(CHECKSUM_TYPE) == "FULL_OBJECT":
        crc = int.from_bytes(raw[0], "big")
        for digest, fields in zip(raw[1:], part_fields[1:], strict=True):
            crc = _COMBINE[kind](crc, int.from_bytes(digest, "big"), fields["size"])
        stored[header] = base64.b64encode(crc.to_bytes(len(raw[0]), "big")).decode()
        stored[CHECKSUM_TYPE] = "FULL_OBJECT"
    else:
        stored[header] = composite(kind, raw)
        stored[CHECKSUM_TYPE] = "COMPOSITE"
    _check_completion(expected, stored, kind)
    return stored


def parse_part_checksums(xml_body: bytes) -> dict[int, dict[str, str]]:
    """The checksums a CompleteMultipartUpload lists: part number -> {x-amz-checksum-<kind>: b64}."""
    from nearfaas.s3.xml import parse_xml

    found: dict[int, dict[str, str]] = {}
    for part in parse_xml(xml_body, "CompleteMultipartUpload"):
        if part.tag.rsplit("}", 1)[-1] != "Part":
            continue
        number, values = None, {}
        for child in part:
            name, text = child.tag.rsplit("}", 1)[-1], (child.text or "").strip()
            if name == "PartNumber" and decimal(text) is not None:
                number = decimal(text)
            elif name.startswith("Checksum") and name[8:].lower() in KINDS:
                values[CHECKSUM_PREFIX + name[8:].lower()] = text
        if number is not None and values:
            found[number] = values
    return found


def part_checksums_xml(checksums: dict[str, str]) -> str:
    """<ChecksumCRC32C>...</ChecksumCRC32C> elements for a <Part> (the node client's completion)."""
    return "".join(f"<Checksum{h[len(CHECKSUM_PREFIX):].upper()}>{v}</Checksum{h[len(CHECKSUM_PREFIX):].upper()}>"
                   for h, v in checksums.items() if header_kind(h))


def with_checksum_xml(xml_body: bytes, stored: dict) -> bytes:
    """A CompleteMultipartUploadResult with the object's checksum and type, as S3 answers it."""
    extra = "".join(f"<Checksum{h[len(CHECKSUM_PREFIX):].upper()}>{v}</Checksum{h[len(CHECKSUM_PREFIX):].upper()}>"
                    for h, v in stored.items() if header_kind(h))
    if not extra:
        return xml_body
    extra += f"<ChecksumType>{stored.get(CHECKSUM_TYPE, 'COMPOSITE')}</ChecksumType>"
    return xml_body.replace(b"</CompleteMultipartUploadResult>", extra.encode() + b"</CompleteMultipartUploadResult>")


def as_argument(stored: dict, kinds: list[str]) -> dict:
    """The backend keyword for a write's stored headers, only when there are any (so a backend
    that keeps none, e.g. a test's, is called as before)."""
    to_compute(stored, kinds)
    return {"headers": stored} if stored else {}


def upload_response(stored: dict) -> dict[str, str]:
    """CreateMultipartUpload's answer headers: the checksum algorithm and type of the upload."""
    return {k: stored[k] for k in ("x-amz-checksum-algorithm", CHECKSUM_TYPE) if k in stored}
