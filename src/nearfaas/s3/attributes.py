"""GetObjectAttributes (``GET /bucket/key?attributes``): the object's ETag (unquoted), size,
storage class, stored checksum and parts, as many of them as ``x-amz-object-attributes`` names.

ObjectParts is answered for a multipart object only (as S3 does): its TotalPartsCount always, and
its parts (PartNumber, Size), paged by ``x-amz-max-parts`` (default and most 1000) after
``x-amz-part-number-marker``, when nearfaas knows their sizes (objects completed since it records
them, s3/parts.py). Per-part checksums are not kept, so a Part has none.
"""

from __future__ import annotations

from nearfaas.s3 import checksums
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.errors import S3Error
from nearfaas.s3.parts import part_sizes, parts_count
from nearfaas.s3.versioning import version_arg, version_headers

ATTRIBUTES_HEADER = "x-amz-object-attributes"
NAMES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
MAX_PARTS = 1000
_CHECKSUM_TAGS = {"crc32": "ChecksumCRC32", "crc32c": "ChecksumCRC32C", "crc64nvme": "ChecksumCRC64NVME",
                  "sha1": "ChecksumSHA1", "sha256": "ChecksumSHA256"}


def requested(request_headers) -> set[str]:
    """The attributes asked for; InvalidArgument for none or an unknown one (names are case-sensitive, as S3's)."""
    names = {n.strip() for value in request_headers.getall(ATTRIBUTES_HEADER, []) for n in value.split(",") if n.strip()}
    if not names:
        raise S3Error("InvalidArgument", f"GetObjectAttributes needs the {ATTRIBUTES_HEADER} header, naming some of "
                      f"{', '.join(NAMES)}.")
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise S3Error("InvalidArgument", f"Invalid attribute name specified: {unknown[0]!r}; use {', '.join(NAMES)}.")
    return names


def _count(request_headers, header: str, default: int, most: int | None = None) -> int:
    raw = request_headers.get(header)
    if raw is None:
        return default
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise S3Error("InvalidArgument", f"{header} must be a non-negative integer, not {raw!r}.")
    return min(int(raw), most) if most is not None else int(raw)


def attributes_xml(info, names: set[str], request_headers) -> bytes:
    out = [f'<?xml version="1.0" encoding="UTF-8"?><GetObjectAttributesResponse xmlns="{s3xml.S3_NS}">']
    if "ETag" in names:
        out.append(s3xml._el("ETag", info.etag))
    if "Checksum" in names:
        sums = [s3xml._el(tag, info.headers[checksums.CHECKSUM_PREFIX + kind])
                for kind, tag in _CHECKSUM_TAGS.items() if checksums.CHECKSUM_PREFIX + kind in info.headers]
        if sums:
            kind = info.headers.get(checksums.CHECKSUM_TYPE) or "FULL_OBJECT"
            out.append(f"<Checksum>{''.join(sums)}{s3xml._el('ChecksumType', kind)}</Checksum>")
    count = parts_count(info)
    if "ObjectParts" in names and count:
        max_parts = _count(request_headers, "x-amz-max-parts", MAX_PARTS, MAX_PARTS)
        marker = _count(request_headers, "x-amz-part-number-marker", 0)
        sizes = part_sizes(info)
        out.append(f"<ObjectParts>{s3xml._el('PartsCount', count)}")
        if sizes is not None:
            page = [(n, size) for n, size in enumerate(sizes, 1) if n > marker][:max_parts]
            truncated = bool(page) and page[-1][0] < len(sizes)
            out.append(s3xml._el("PartNumberMarker", marker) + s3xml._el("NextPartNumberMarker", page[-1][0] if page else marker)
                       + s3xml._el("MaxParts", max_parts) + s3xml._el("IsTruncated", "true" if truncated else "false"))
            out += [f"<Part>{s3xml._el('PartNumber', n)}{s3xml._el('Size', size)}</Part>" for n, size in page]
        out.append("</ObjectParts>")
    if "StorageClass" in names:
        out.append(s3xml._el("StorageClass", info.headers.get("x-amz-storage-class") or "STANDARD"))
    if "ObjectSize" in names:
        out.append(s3xml._el("ObjectSize", info.size))
    out.append("</GetObjectAttributesResponse>")
    return "".join(out).encode()


async def get_object_attributes(frontend, request, bucket: str, key: str, q: dict):
    """The newest version's attributes, or those of the version ``?versionId=`` names (with its id
    in ``x-amz-version-id``, as S3 answers)."""
    names = requested(request.headers)
    info = await frontend.backend.head_object(bucket, key, **version_arg(q))
    return frontend._xml(request, attributes_xml(info, names, request.headers),
                         {"Last-Modified": s3xml.rfc1123(info.last_modified), **version_headers(info)})
