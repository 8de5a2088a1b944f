"""S3 XML documents: rendering the responses the front end sends, parsing the requests it
receives, and parsing responses for the node client. Namespaces are ignored on input."""

from __future__ import annotations

import base64
import calendar
import binascii
import logging
import re
import time
import xml.etree.ElementTree as ET
from email.utils import formatdate
from urllib.parse import quote, unquote
from xml.sax.saxutils import escape

from nearfaas.s3.backend import BucketInfo, ListResult, ObjectInfo, PartInfo, PartListResult, UploadInfo, UploadListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import decimal

log = logging.getLogger(__name__)

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECL = '<?xml version="1.0" encoding="UTF-8"?>\n'
# Characters XML 1.0 cannot carry even escaped.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
OWNER_ID = "nearfaas"


def iso8601(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z"


def rfc1123(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def xml_safe(value: str) -> str:
    """`value` with the characters XML 1.0 cannot carry written as \\uXXXX (for error bodies)."""
    return _XML_ILLEGAL.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


def _text(value: str, url_encode: bool = False) -> str:
    if url_encode:
        return quote(value, safe="/")
    if _XML_ILLEGAL.search(value):
        raise S3Error("InvalidArgument", "A value in this listing holds characters XML cannot carry; "
                      "request it with encoding-type=url.")
    return escape(value)


def _carriable(value: str, url: bool) -> bool:
    """Whether a listing can show `value`: as text, XML 1.0 must carry every character; url
    encoded, it must be UTF-8 (a lone surrogate is not)."""
    if url:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return not _XML_ILLEGAL.search(value)


def _listable(what: str, bucket: str, keys: list, url: bool, key=lambda entry: entry) -> list:
    """The entries of a listing page that it can show. New keys with such characters are refused
    (s3/validation.py), but a bucket written by an older nearfaas may hold some: one such key
    must not make every listing of its bucket fail, so it is left out, and said so."""
    shown = [entry for entry in keys if _carriable(key(entry), url)]
    if len(shown) < len(keys):
        left_out = [ascii(key(entry)) for entry in keys if not _carriable(key(entry), url)]
        hint = ("they hold characters that are not valid Unicode text" if url else
                "they hold characters XML 1.0 cannot carry; list with encoding-type=url to see them")
        log.warning("%s of bucket %s left out %d key(s) (%s): %s", what, bucket, len(left_out),
                    ", ".join(k[:120] for k in left_out[:5]), hint)
    return shown


def _el(name: str, value, url_encode: bool = False) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return f"<{name}>{_text(str(value), url_encode)}</{name}>"


def encode_token(marker: str) -> str:
    """An opaque ListObjectsV2 continuation token: the last key or prefix returned."""
    return base64.urlsafe_b64encode(marker.encode("utf-8")).decode("ascii")


def decode_token(token: str) -> str:
    try:
        marker = base64.b64decode(token.encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
        if not marker:
            raise ValueError("empty token")
        return marker
    except (binascii.Error, ValueError, UnicodeError):
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect; pass the "
                      "NextContinuationToken of the previous page unchanged.") from None


# -- responses -------------------------------------------------------------------------------


def list_buckets_xml(buckets: list[BucketInfo], continuation_token: str | None = None, prefix: str | None = None) -> bytes:
    items = "".join(f"<Bucket>{_el('Name', b.name)}{_el('CreationDate', iso8601(b.created))}</Bucket>" for b in buckets)
    tail = (_el("ContinuationToken", continuation_token) if continuation_token else "") + (
        _el("Prefix", prefix) if prefix is not None else "")
    return (f'{_DECL}<ListAllMyBucketsResult xmlns="{S3_NS}"><Owner>{_el("ID", OWNER_ID)}'
            f'{_el("DisplayName", OWNER_ID)}</Owner><Buckets>{items}</Buckets>{tail}</ListAllMyBucketsResult>').encode()


def list_buckets_page(buckets: list[BucketInfo], q: dict) -> bytes:
    """ListBuckets with its paging parameters: ``max-buckets`` (1..10000), ``continuation-token``
    (the last name of the previous page, opaque) and ``prefix``."""
    prefix = q.get("prefix")
    if prefix:
        buckets = [b for b in buckets if b.name.startswith(prefix)]
    token = q.get("continuation-token") or None
    if token is not None:
        after = decode_token(token)
        buckets = [b for b in buckets if b.name > after]
    raw = q.get("max-buckets")
    if raw is None:
        return list_buckets_xml(buckets, prefix=prefix)
    count = decimal(raw.strip())
    if count is None or not 1 <= count <= 10000:
        raise S3Error("InvalidArgument", f"max-buckets must be an integer from 1 to 10000, not {raw!r}.")
    page = buckets[:count]
    more = encode_token(page[-1].name) if len(buckets) > len(page) else None
    return list_buckets_xml(page, continuation_token=more, prefix=prefix)


def _contents_xml(objects: list[ObjectInfo], url: bool, owner: bool) -> str:
    parts = []
    for o in objects:
        owner_xml = f"<Owner>{_el('ID', OWNER_ID)}{_el('DisplayName', OWNER_ID)}</Owner>" if owner else ""
        parts.append(
            f"<Contents>{_el('Key', o.key, url)}{_el('LastModified', iso8601(o.last_modified))}"
            f"{_el('ETag', chr(34) + o.etag + chr(34))}{_el('Size', o.size)}{owner_xml}"
            f"<StorageClass>STANDARD</StorageClass></Contents>"
        )
    return "".join(parts)


def _prefixes_xml(prefixes: list[str], url: bool) -> str:
    return "".join(f"<CommonPrefixes>{_el('Prefix', p, url)}</CommonPrefixes>" for p in prefixes)


def list_objects_v2_xml(bucket: str, result: ListResult, *, prefix: str, delimiter: str, max_keys: int,
                        start_after: str, continuation_token: str | None, encoding_type: str,
                        fetch_owner: bool) -> bytes:
    url = encoding_type == "url"
    contents = _listable("ListObjectsV2", bucket, result.contents, url, key=lambda o: o.key)
    prefixes = _listable("ListObjectsV2", bucket, result.common_prefixes, url)
    out = [f'{_DECL}<ListBucketResult xmlns="{S3_NS}">', _el("Name", bucket), _el("Prefix", prefix, url)]
    if delimiter:
        out.append(_el("Delimiter", delimiter, url))
    out.append(_el("MaxKeys", max_keys))
    if url:
        out.append(_el("EncodingType", "url"))
    out.append(_el("KeyCount", len(contents) + len(prefixes)))
    out.append(_el("IsTruncated", result.is_truncated))
    if continuation_token is not None:
        out.append(_el("ContinuationToken", continuation_token))
    # The token is base64 of the marker, so it carries any key that is valid Unicode.
    if result.is_truncated and result.next_marker is not None and _carriable(result.next_marker, True):
        out.append(_el("NextContinuationToken", encode_token(result.next_marker)))
    if start_after:
        out.append(_el("StartAfter", start_after, url))
    out.append(_contents_xml(contents, url, fetch_owner))
    out.append(_prefixes_xml(prefixes, url))
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def list_objects_v1_xml(bucket: str, result: ListResult, *, prefix: str, delimiter: str, max_keys: int,
                        marker: str, encoding_type: str) -> bytes:
    url = encoding_type == "url"
    contents = _listable("ListObjects", bucket, result.contents, url, key=lambda o: o.key)
    prefixes = _listable("ListObjects", bucket, result.common_prefixes, url)
    # v1 encodes Marker, Delimiter, NextMarker and keys, but not the top-level Prefix: the SDKs
    # (botocore's decode_list_object) decode exactly those, and S3 sends Prefix as it is.
    out = [f'{_DECL}<ListBucketResult xmlns="{S3_NS}">', _el("Name", bucket), _el("Prefix", prefix),
           _el("Marker", marker, url)]
    if delimiter:
        out.append(_el("Delimiter", delimiter, url))
    out.append(_el("MaxKeys", max_keys))
    if url:
        out.append(_el("EncodingType", "url"))
    out.append(_el("IsTruncated", result.is_truncated))
    # S3 sends NextMarker only with a delimiter; nearfaas always sends it on a truncated page,
    # unless the page ended on a key it left out (the client then resumes after its last key).
    if result.is_truncated and result.next_marker is not None and _carriable(result.next_marker, url):
        out.append(_el("NextMarker", result.next_marker, url))
    out.append(_contents_xml(contents, url, True))
    out.append(_prefixes_xml(prefixes, url))
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def list_multipart_uploads_xml(bucket: str, result: UploadListResult, *, prefix: str, delimiter: str,
                               max_uploads: int, key_marker: str, upload_id_marker: str, encoding_type: str) -> bytes:
    url = encoding_type == "url"
    uploads = _listable("ListMultipartUploads", bucket, result.uploads, url, key=lambda u: u.key)
    prefixes = _listable("ListMultipartUploads", bucket, result.common_prefixes, url)
    out = [f'{_DECL}<ListMultipartUploadsResult xmlns="{S3_NS}">', _el("Bucket", bucket),
           _el("KeyMarker", key_marker, url), _el("UploadIdMarker", upload_id_marker), _el("Prefix", prefix, url)]
    if delimiter:
        out.append(_el("Delimiter", delimiter, url))
    if result.is_truncated and result.next_key_marker is not None and _carriable(result.next_key_marker, url):
        out.append(_el("NextKeyMarker", result.next_key_marker, url))
        out.append(_el("NextUploadIdMarker", result.next_upload_id_marker or ""))
    out.append(_el("MaxUploads", max_uploads))
    out.append(_el("IsTruncated", result.is_truncated))
    if url:
        out.append(_el("EncodingType", "url"))
    owner = f"{_el('ID', OWNER_ID)}{_el('DisplayName', OWNER_ID)}"
    for u in uploads:
        out.append(f"<Upload>{_el('Key', u.key, url)}{_el('UploadId', u.upload_id)}<Initiator>{owner}</Initiator>"
                   f"<Owner>{owner}</Owner><StorageClass>STANDARD</StorageClass>"
                   f"{_el('Initiated', iso8601(u.initiated))}</Upload>")
    out.append(_prefixes_xml(prefixes, url))
    out.append("</ListMultipartUploadsResult>")
    return "".join(out).encode()


def list_parts_xml(bucket: str, key: str, upload_id: str, result: PartListResult, *, max_parts: int, marker: int) -> bytes:
    owner = f"{_el('ID', OWNER_ID)}{_el('DisplayName', OWNER_ID)}"
    out = [f'{_DECL}<ListPartsResult xmlns="{S3_NS}">', _el("Bucket", bucket), _el("Key", key), _el("UploadId", upload_id),
           f"<Initiator>{owner}</Initiator><Owner>{owner}</Owner><StorageClass>STANDARD</StorageClass>",
           _el("PartNumberMarker", marker), _el("NextPartNumberMarker", result.next_part_number_marker),
           _el("MaxParts", max_parts), _el("IsTruncated", result.is_truncated)]
    for p in result.parts:
        out.append(f"<Part>{_el('PartNumber', p.part_number)}{_el('LastModified', iso8601(p.last_modified))}"
                   f"{_el('ETag', chr(34) + p.etag + chr(34))}{_el('Size', p.size)}</Part>")
    out.append("</ListPartsResult>")
    return "".join(out).encode()


def parse_list_parts(body: bytes) -> PartListResult:
    root = ET.fromstring(body)
    parts = [PartInfo(int(_child_text(el, "PartNumber") or 0), (_child_text(el, "ETag") or "").strip('"'),
                      int(_child_text(el, "Size") or 0), _iso_to_ts(_child_text(el, "LastModified") or "1970-01-01T00:00:00Z"))
             for el in root if _local(el.tag) == "Part"]
    return PartListResult(parts, (_child_text(root, "IsTruncated") or "false").strip() == "true",
                          int(_child_text(root, "NextPartNumberMarker") or 0))


def location_xml(constraint: str = "") -> bytes:
    return f'{_DECL}<LocationConstraint xmlns="{S3_NS}">{escape(constraint)}</LocationConstraint>'.encode()


def initiate_multipart_xml(bucket: str, key: str, upload_id: str) -> bytes:
    return (f'{_DECL}<InitiateMultipartUploadResult xmlns="{S3_NS}">{_el("Bucket", bucket)}{_el("Key", key)}'
            f'{_el("UploadId", upload_id)}</InitiateMultipartUploadResult>').encode()


def complete_multipart_xml(location: str, bucket: str, key: str, etag: str) -> bytes:
    return (f'{_DECL}<CompleteMultipartUploadResult xmlns="{S3_NS}">{_el("Location", location)}'
            f'{_el("Bucket", bucket)}{_el("Key", key)}{_el("ETag", chr(34) + etag + chr(34))}'
            f'</CompleteMultipartUploadResult>').encode()


# -- parsing -----------------------------------------------------------------------------------


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_xml(body: bytes, expected_root: str | None = None) -> ET.Element:
    """Parse a request document; MalformedXML for anything not plain, well-formed XML."""
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs and entity declarations are not accepted in S3 XML.")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise S3Error("MalformedXML", f"The XML you provided was not well-formed: {exc}.") from None
    if expected_root is not None and _local(root.tag) != expected_root:
        raise S3Error("MalformedXML", f"Expected a <{expected_root}> document, got <{_local(root.tag)}>.")
    return root


def _child_text(el: ET.Element, name: str) -> str | None:
    for child in el:
        if _local(child.tag) == name:
            return child.text or ""
    return None


def parse_complete_multipart(body: bytes) -> list[tuple[int, str]]:
    root = parse_xml(body, "CompleteMultipartUpload")
    parts = []
    for el in root:
        if _local(el.tag) != "Part":
            continue
        number, etag = _child_text(el, "PartNumber"), _child_text(el, "ETag")
        if number is None or etag is None:
            raise S3Error("MalformedXML", "Every <Part> needs a <PartNumber> and an <ETag>.")
        if (value := decimal(number.strip())) is None:
            raise S3Error("MalformedXML", f"<PartNumber>{number}</PartNumber> is not an integer written in digits 0-9.")
        parts.append((value, etag.strip()))
    if not parts:
        raise S3Error("MalformedXML", "CompleteMultipartUpload must list at least one <Part>.")
    return parts


# C0 control characters XML 1.0 cannot carry, raw or as character references: SDKs write a key's
# characters as they are (boto3 puts a NUL straight into the document).
_XML_CONTROLS = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]|&#[xX]0*([0-9a-fA-F]{1,2});|&#0*([0-9]{1,2});")
# Each stands in for one control character while the document is parsed: the noncharacters
# U+FDD0..U+FDEF are legal XML, and no new key may hold one, so no real key is mistaken for them
# (an old key holding one can still be deleted, by DeleteObject).
_STAND_IN = 0xFDD0
_FROM_STAND_IN = {_STAND_IN + c: c for c in range(0x20)}


def _stand_in(match: re.Match) -> bytes:
    hex_ref, dec_ref = match.group(1), match.group(2)
    if hex_ref is None and dec_ref is None:
        value = match.group(0)[0]
    else:
        value = int(hex_ref, 16) if hex_ref is not None else int(dec_ref)
        if value >= 0x20 or value in (0x09, 0x0A, 0x0D):
            return match.group(0)  # a character XML carries: leave it to the parser
    return chr(_STAND_IN + value).encode()


def parse_delete_objects(body: bytes, limit: int = 1000) -> tuple[list[tuple[str, str | None]], bool]:
    """([(key, version id or None)], quiet) of a DeleteObjects (POST ?delete) request. A key holding a control
    character still parses, so that it gets its own error entry (the key is invalid) rather
    than failing the whole request as malformed XML."""
    substituted = _XML_CONTROLS.sub(_stand_in, body)
    stood_in = substituted != body
    root = parse_xml(substituted, "Delete")
    keys = []
    for el in root:
        if _local(el.tag) == "Object":
            key = _child_text(el, "Key")
            if key is None:
                raise S3Error("MalformedXML", "Every <Object> needs a <Key>.")
            for condition in ("ETag", "LastModifiedTime", "Size"):  # refused, never skipped (s3/conditions.py)
                if _child_text(el, condition) is not None:
                    raise S3Error("NotImplemented", f"DeleteObjects with a per-object <{condition}> condition is not supported "
                                  "here: it would not be checked. Delete that key with DeleteObject and If-Match.", status=501)
            keys.append((key.translate(_FROM_STAND_IN) if stood_in else key, _child_text(el, "VersionId")))
    if not keys or len(keys) > limit:
        raise S3Error("MalformedXML", f"DeleteObjects takes 1 to {limit} <Object> entries; got {len(keys)}.")
    return keys, (_child_text(root, "Quiet") or "").strip().lower() == "true"


def delete_result_xml(deleted: list[tuple[str, str | None, dict]], errors: list[tuple[str, S3Error]]) -> bytes:
    """``deleted``: (key, the version id the request named or None, the DeleteObject's answer
    headers: x-amz-version-id, x-amz-delete-marker) per key."""
    out = [f'{_DECL}<DeleteResult xmlns="{S3_NS}">']
    for key, named, answer in deleted:
        fields = _el("VersionId", named) if named is not None else ""
        if answer.get("x-amz-delete-marker") == "true":  # a marker made, or the version removed was one
            fields += _el("DeleteMarker", "true") + _el("DeleteMarkerVersionId", answer.get("x-amz-version-id", named or ""))
        out.append(f"<Deleted>{_el('Key', xml_safe(key))}{fields}</Deleted>")
    out += [f"<Error>{_el('Key', xml_safe(key))}{_el('Code', e.code)}{_el('Message', xml_safe(e.message))}</Error>"
            for key, e in errors]
    out.append("</DeleteResult>")
    return "".join(out).encode()


def parse_create_bucket(body: bytes) -> str | None:
    """The LocationConstraint of a CreateBucket body, if any (nearfaas ignores it)."""
    if not body.strip():
        return None
    return _child_text(parse_xml(body, "CreateBucketConfiguration"), "LocationConstraint")


def parse_error(body: bytes) -> tuple[str, str, str] | None:
    """(code, message, resource) of an S3 error document, or None if it is not one."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if _local(root.tag) != "Error":
        return None
    return (_child_text(root, "Code") or "", _child_text(root, "Message") or "", _child_text(root, "Resource") or "")


def _iso_to_ts(value: str) -> float:
    main, _, frac = value.rstrip("Z").partition(".")
    ts = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
    return ts + (float("0." + frac) if frac.isdigit() else 0.0)


def parse_list_buckets(body: bytes) -> list[BucketInfo]:
    root = ET.fromstring(body)
    out = []
    for el in root.iter():
        if _local(el.tag) == "Bucket":
            out.append(BucketInfo(name=_child_text(el, "Name") or "", created=_iso_to_ts(_child_text(el, "CreationDate") or "1970-01-01T00:00:00Z")))
    return out


def parse_list_objects(bucket: str, body: bytes) -> ListResult:
    """A ListBucketResult (v1 or v2); url-encoded values are decoded."""
    root = ET.fromstring(body)
    url = (_child_text(root, "EncodingType") or "") == "url"
    decode = unquote if url else (lambda s: s)
    contents, prefixes = [], []
    next_marker = None
    for el in root:
        tag = _local(el.tag)
        if tag == "Contents":
            contents.append(ObjectInfo(
                bucket=bucket, key=decode(_child_text(el, "Key") or ""), size=int(_child_text(el, "Size") or 0),
                etag=(_child_text(el, "ETag") or "").strip('"'),
                last_modified=_iso_to_ts(_child_text(el, "LastModified") or "1970-01-01T00:00:00Z"),
            ))
        elif tag == "CommonPrefixes":
            prefixes.append(decode(_child_text(el, "Prefix") or ""))
        elif tag == "NextMarker":
            next_marker = decode(el.text or "")
        elif tag == "NextContinuationToken" and next_marker is None:
            next_marker = decode_token(el.text or "")
    truncated = (_child_text(root, "IsTruncated") or "false").strip() == "true"
    if truncated and next_marker is None:  # v1 without NextMarker: the last entry returned
        entries = [o.key for o in contents] + prefixes
        next_marker = max(entries) if entries else None
    return ListResult(contents=contents, common_prefixes=prefixes, is_truncated=truncated,
                      next_marker=next_marker if truncated else None)


def parse_list_multipart_uploads(bucket: str, body: bytes) -> UploadListResult:
    """A ListMultipartUploadsResult; url-encoded values are decoded."""
    root = ET.fromstring(body)
    url = (_child_text(root, "EncodingType") or "") == "url"
    decode = unquote if url else (lambda s: s)
    uploads, prefixes = [], []
    for el in root:
        tag = _local(el.tag)
        if tag == "Upload":
            uploads.append(UploadInfo(
                bucket=bucket, key=decode(_child_text(el, "Key") or ""), upload_id=_child_text(el, "UploadId") or "",
                initiated=_iso_to_ts(_child_text(el, "Initiated") or "1970-01-01T00:00:00Z")))
        elif tag == "CommonPrefixes":
            prefixes.append(decode(_child_text(el, "Prefix") or ""))
    truncated = (_child_text(root, "IsTruncated") or "false").strip() == "true"
    next_key = _child_text(root, "NextKeyMarker")
    return UploadListResult(uploads=uploads, common_prefixes=prefixes, is_truncated=truncated,
                            next_key_marker=decode(next_key) if truncated and next_key is not None else None,
                            next_upload_id_marker=(_child_text(root, "NextUploadIdMarker") or "") if truncated else None)


def parse_initiate_multipart(body: bytes) -> str:
    upload_id = _child_text(ET.fromstring(body), "UploadId")
    if not upload_id:
        raise ValueError("InitiateMultipartUploadResult without UploadId")
    return upload_id


def parse_complete_result(body: bytes) -> str:
    """The ETag (unquoted) of a CompleteMultipartUploadResult; raises S3Error for an error body."""
    error = parse_error(body)
    if error is not None:
        code, message, resource = error
        raise S3Error(code, message or None, resource=resource)
    return (_child_text(ET.fromstring(body), "ETag") or "").strip('"')
