"""S3 bucket versioning XML: the PutBucketVersioning / GetBucketVersioning documents and the
ListObjectVersions answer, rendered for clients and, with exact extras, for the gateway that
merges the listings of several storage nodes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import unquote

from nearfaas.s3.backend import ObjectInfo, VersionEntry, VersionListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.xml import (
    _DECL,
    OWNER_ID,
    S3_NS,
    _carriable,
    _child_text,
    _el,
    _iso_to_ts,
    _listable,
    _local,
    iso8601,
    parse_xml,
)

VERSIONING_STATUSES = ("Enabled", "Suspended")
_EXPECTED = ("PutBucketVersioning expects a <VersioningConfiguration> document, e.g. "
             f'<VersioningConfiguration xmlns="{S3_NS}"><Status>Enabled</Status></VersioningConfiguration>.')


def parse_versioning_configuration(body: bytes) -> str:
    """The Status ("Enabled" or "Suspended") of a PutBucketVersioning body."""
    if not body.strip():
        raise S3Error("MalformedXML", f"The request body is empty. {_EXPECTED}")
    try:
        root = parse_xml(body, "VersioningConfiguration")
    except S3Error as exc:
        raise S3Error("MalformedXML", f"{exc.message} {_EXPECTED}") from None
    status = _child_text(root, "Status")
    if status is None or status.strip() not in VERSIONING_STATUSES:
        got = "no <Status>" if status is None else f"<Status>{status.strip()[:64]}</Status>"
        raise S3Error("IllegalVersioningConfigurationException",
                      f"The versioning configuration needs a <Status> of Enabled or Suspended; got {got}.", status=400)
    mfa = _child_text(root, "MfaDelete")
    if mfa is not None:
        mfa = mfa.strip()
        if mfa == "Enabled":
            raise S3Error("NotImplemented", "MFA delete is not supported by nearfaas; leave <MfaDelete> out or set "
                          "it to Disabled.", status=501)
        if mfa != "Disabled":
            raise S3Error("IllegalVersioningConfigurationException",
                          f"<MfaDelete> must be Enabled or Disabled; got {mfa[:64]!r}.", status=400)
    return status.strip()


def versioning_configuration_xml(status: str) -> bytes:
    """The GetBucketVersioning answer; a bucket whose versioning was never set has no Status,
    which is how S3 tells "never enabled" apart from "Suspended"."""
    if not status:
        return f'{_DECL}<VersioningConfiguration xmlns="{S3_NS}"/>'.encode()
    return f'{_DECL}<VersioningConfiguration xmlns="{S3_NS}">{_el("Status", status)}</VersioningConfiguration>'.encode()


def _entry_xml(e: VersionEntry, url: bool, internal: bool, owner: str) -> str:
    # The public dates are millisecond ISO 8601; a gateway merging nodes' pages needs the exact
    # float and the write order to break ties the way each node did.
    extra = (_el("NearfaasVersion", e.version) + _el("NearfaasLastModified", repr(float(e.last_modified)))) if internal else ""
    head = f"{_el('Key', e.key, url)}{_el('VersionId', e.version_id)}{_el('IsLatest', e.is_latest)}"
    if e.delete_marker:
        return f"<DeleteMarker>{head}{_el('LastModified', iso8601(e.last_modified))}{owner}{extra}</DeleteMarker>"
    if e.info is None:
        raise ValueError(f"version {e.version_id!r} of {e.key!r} is no delete marker yet has no ObjectInfo")
    etag = f'"{e.info.etag}"'
    return (f"<Version>{head}{_el('LastModified', iso8601(e.last_modified))}{_el('ETag', etag)}"
            f"{_el('Size', e.info.size)}<StorageClass>STANDARD</StorageClass>{owner}{extra}</Version>")


def list_versions_xml(bucket: str, result: VersionListResult, *, prefix: str, delimiter: str, max_keys: int,
                      key_marker: str, version_id_marker: str, encoding_type: str, internal: bool = False) -> bytes:
    url = encoding_type == "url"
    versions = _listable("ListObjectVersions", bucket, result.versions, url, key=lambda v: v.key)
    prefixes = _listable("ListObjectVersions", bucket, result.common_prefixes, url)
    # Encoded are exactly the fields botocore's decode_list_object_versions decodes: KeyMarker,
    # NextKeyMarker, Prefix, Delimiter, the keys and common prefixes; version ids never.
    out = [f'{_DECL}<ListVersionsResult xmlns="{S3_NS}">', _el("Name", bucket), _el("Prefix", prefix, url),
           _el("KeyMarker", key_marker, url), _el("VersionIdMarker", version_id_marker)]
    # A page that ended on a key it could not show gives no NextKeyMarker; the client then
    # resumes after the last entry it saw, as with ListObjects.
    if result.is_truncated and result.next_key_marker is not None and _carriable(result.next_key_marker, url):
        out.append(_el("NextKeyMarker", result.next_key_marker, url))
        if result.next_version_id_marker is not None:
            out.append(_el("NextVersionIdMarker", result.next_version_id_marker))
    out.append(_el("MaxKeys", max_keys))
    if delimiter:
        out.append(_el("Delimiter", delimiter, url))
    if url:
        out.append(_el("EncodingType", "url"))
    out.append(_el("IsTruncated", result.is_truncated))
    owner = f"<Owner>{_el('ID', OWNER_ID)}{_el('DisplayName', OWNER_ID)}</Owner>"
    out += [_entry_xml(e, url, internal, owner) for e in versions]
    out += [f"<CommonPrefixes>{_el('Prefix', p, url)}</CommonPrefixes>" for p in prefixes]
    out.append("</ListVersionsResult>")
    return "".join(out).encode()


def _parse_entry(bucket: str, el: ET.Element, decode, delete_marker: bool) -> VersionEntry:
    key = decode(_child_text(el, "Key") or "")
    exact = _child_text(el, "NearfaasLastModified")
    if exact is not None:
        last_modified = float(exact)
    else:
        last_modified = _iso_to_ts(_child_text(el, "LastModified") or "1970-01-01T00:00:00Z")
    version = _child_text(el, "NearfaasVersion") or ""
    info = None
    if not delete_marker:
        info = ObjectInfo(bucket=bucket, key=key, size=int(_child_text(el, "Size") or 0),
                          etag=(_child_text(el, "ETag") or "").strip('"'), last_modified=last_modified, version=version)
    return VersionEntry(key=key, version_id=_child_text(el, "VersionId") or "",
                        is_latest=(_child_text(el, "IsLatest") or "false").strip() == "true",
                        last_modified=last_modified, delete_marker=delete_marker, info=info, version=version)


def parse_list_versions(bucket: str, body: bytes) -> VersionListResult:
    """A ListVersionsResult; url-encoded values are decoded, and the Nearfaas extras of an
    internal answer give the exact version order and modification times."""
    root = ET.fromstring(body)
    url = (_child_text(root, "EncodingType") or "") == "url"
    decode = unquote if url else (lambda s: s)
    versions, prefixes = [], []
    for el in root:
        tag = _local(el.tag)
        if tag in ("Version", "DeleteMarker"):
            versions.append(_parse_entry(bucket, el, decode, tag == "DeleteMarker"))
        elif tag == "CommonPrefixes":
            prefixes.append(decode(_child_text(el, "Prefix") or ""))
    next_key = _child_text(root, "NextKeyMarker")
    return VersionListResult(versions=versions, common_prefixes=prefixes,
                             is_truncated=(_child_text(root, "IsTruncated") or "false").strip() == "true",
                             next_key_marker=decode(next_key) if next_key is not None else None,
                             next_version_id_marker=_child_text(root, "NextVersionIdMarker"))
