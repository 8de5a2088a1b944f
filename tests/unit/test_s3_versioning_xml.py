"""Bucket versioning XML (s3/versioning_xml.py): the PutBucketVersioning / GetBucketVersioning
documents, and the ListObjectVersions answer, both as botocore reads it and as the gateway
reads a storage node's internal answer back."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.handlers import decode_list_object_versions
from botocore.parsers import RestXMLParser
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.s3.backend import ObjectInfo, VersionEntry, VersionListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.versioning_xml import (
    list_versions_xml,
    parse_list_versions,
    parse_versioning_configuration,
    versioning_configuration_xml,
)
from nearfaas.s3.xml import S3_NS

BUCKET = "bkt"
_S3_MODEL = botocore.session.get_session().get_service_model("s3")


def boto_parse(operation: str, body: bytes, url_decode: bool = False) -> dict:
    """What a boto3 client would return for `body`, decoded as when it asked for encoding-type=url itself."""
    parsed = RestXMLParser().parse({"body": body, "headers": {}, "status_code": 200},
                                   _S3_MODEL.operation_model(operation).output_shape)
    if url_decode:
        decode_list_object_versions(parsed, context={"encoding_type_auto_set": True})
    return parsed


def version(key: str, vid: str, *, latest: bool = True, ts: float = 1700000000.123456, size: int = 3,
            etag: str = "acbd18db4cc2f85cedef654fccc4a4d8", order: str = "0001") -> VersionEntry:
    info = ObjectInfo(bucket=BUCKET, key=key, size=size, etag=etag, last_modified=ts, version=order)
    return VersionEntry(key=key, version_id=vid, is_latest=latest, last_modified=ts, info=info, version=order)


def marker(key: str, vid: str, *, latest: bool = True, ts: float = 1700000001.5, order: str = "0002") -> VersionEntry:
    return VersionEntry(key=key, version_id=vid, is_latest=latest, last_modified=ts, delete_marker=True, version=order)


def render(result: VersionListResult, *, internal: bool = False, encoding_type: str = "url", prefix: str = "",
           delimiter: str = "", key_marker: str = "", version_id_marker: str = "", max_keys: int = 1000) -> bytes:
    return list_versions_xml(BUCKET, result, prefix=prefix, delimiter=delimiter, max_keys=max_keys,
                             key_marker=key_marker, version_id_marker=version_id_marker,
                             encoding_type=encoding_type, internal=internal)


def config(inner: str) -> bytes:
    return f'<VersioningConfiguration xmlns="{S3_NS}">{inner}</VersioningConfiguration>'.encode()


# -- PutBucketVersioning / GetBucketVersioning ---------------------------------------------------


@pytest.mark.parametrize("status", ["Enabled", "Suspended"])
def test_versioning_configuration_round_trip(status):
    assert parse_versioning_configuration(config(f"<Status>{status}</Status><MfaDelete>Disabled</MfaDelete>")) == status
    body = versioning_configuration_xml(status)
    assert parse_versioning_configuration(body) == status
    assert boto_parse("GetBucketVersioning", body)["Status"] == status


def test_never_configured_has_no_status():
    body = versioning_configuration_xml("")
    assert b"Status" not in body and b"<VersioningConfiguration" in body
    assert "Status" not in boto_parse("GetBucketVersioning", body)


def test_versioning_configuration_accepts_no_namespace_and_whitespace():
    body = b"<VersioningConfiguration><Status> Suspended\n</Status></VersioningConfiguration>"
    assert parse_versioning_configuration(body) == "Suspended"


@pytest.mark.parametrize("body", [b"", b"  \n", b"<VersioningConfiguration><Status>", b"not xml",
                                  b"<Foo><Status>Enabled</Status></Foo>",
                                  b'<!DOCTYPE x [<!ENTITY a "b">]><VersioningConfiguration/>'])
def test_malformed_versioning_configuration(body):
    with pytest.raises(S3Error) as err:
        parse_versioning_configuration(body)
    assert (err.value.code, err.value.status) == ("MalformedXML", 400)
    assert "<VersioningConfiguration>" in err.value.message


@pytest.mark.parametrize("inner", ["", "<MfaDelete>Disabled</MfaDelete>", "<Status></Status>", "<Status>enabled</Status>",
                                   "<Status>Disabled</Status>", "<Status>Enabled</Status><MfaDelete>Maybe</MfaDelete>"])
def test_illegal_versioning_configuration(inner):
    with pytest.raises(S3Error) as err:
        parse_versioning_configuration(config(inner))
    assert (err.value.code, err.value.status) == ("IllegalVersioningConfigurationException", 400)
    if "MfaDelete>Maybe" in inner:
        assert "MfaDelete" in err.value.message and "Disabled" in err.value.message
    else:
        assert "Status" in err.value.message and "Enabled" in err.value.message and "Suspended" in err.value.message


def test_mfa_delete_is_not_implemented():
    with pytest.raises(S3Error) as err:
        parse_versioning_configuration(config("<Status>Enabled</Status><MfaDelete>Enabled</MfaDelete>"))
    assert (err.value.code, err.value.status) == ("NotImplemented", 501)
    assert "MFA delete" in err.value.message


# -- ListObjectVersions ------------------------------------------------------------------------

TRICKY = ["a b", "ünï/cødé✓", "x&y<z>", "line\nbreak", "plus+sign", "100%", "tab\tq", "q?#=;"]


def tricky_result() -> VersionListResult:
    entries = []
    for i, key in enumerate(TRICKY):
        entries.append(marker(key, f"v{i}b", order=f"{i:04d}b", ts=1700000000.0 + i / 3))
        entries.append(version(key, f"v{i}a", latest=False, size=i, order=f"{i:04d}a", ts=1699999999.0 + i / 7))
    entries.append(version("null-one", "null", order=""))
    return VersionListResult(versions=entries, common_prefixes=["dir one/", "é&+/"], is_truncated=True,
                             next_key_marker="plus+sign é", next_version_id_marker="v4a")


def test_internal_round_trip_is_exact():
    result = tricky_result()
    body = render(result, internal=True)
    assert b"<NearfaasLastModified>" in body and b"<NearfaasVersion>" in body
    assert parse_list_versions(BUCKET, body) == result


def test_public_round_trip_without_url_encoding():
    result = VersionListResult(versions=[version("a b&c", "v1", ts=1700000000.25), marker("ü", "v2", ts=1700000000.5)],
                               common_prefixes=["p&/"], is_truncated=False)
    body = render(result, encoding_type="")
    assert b"<Nearfaas" not in body and b"EncodingType" not in body
    assert parse_list_versions(BUCKET, body) == VersionListResult(
        versions=[version("a b&c", "v1", ts=1700000000.25, order=""), marker("ü", "v2", ts=1700000000.5, order="")],
        common_prefixes=["p&/"], is_truncated=False)


def test_public_answer_rounds_times_to_milliseconds():
    body = render(VersionListResult([version("k", "v1", ts=1700000000.123456)], [], False))
    entry = parse_list_versions(BUCKET, body).versions[0]
    assert entry.last_modified == pytest.approx(1700000000.123, abs=1e-6) and entry.version == ""


def test_next_markers_only_when_truncated():
    done = VersionListResult([version("k", "v1")], [], False, next_key_marker="k", next_version_id_marker="v1")
    body = render(done)
    assert b"NextKeyMarker" not in body and b"NextVersionIdMarker" not in body
    parsed = parse_list_versions(BUCKET, body)
    assert parsed.next_key_marker is None and parsed.next_version_id_marker is None
    # A page that ended on a common prefix resumes after the whole prefix: an empty version id.
    rolled = VersionListResult([], ["d/"], True, next_key_marker="d/", next_version_id_marker="")
    parsed = parse_list_versions(BUCKET, render(rolled, delimiter="/"))
    assert (parsed.next_key_marker, parsed.next_version_id_marker) == ("d/", "")


def test_keys_xml_cannot_carry_are_left_out_unless_url_encoded():
    result = VersionListResult([version("bad\x01key", "v1"), version("good", "v2")], [], False)
    assert [e.key for e in parse_list_versions(BUCKET, render(result, encoding_type="")).versions] == ["good"]
    assert [e.key for e in parse_list_versions(BUCKET, render(result)).versions] == ["bad\x01key", "good"]


def test_botocore_reads_the_public_answer():
    result = tricky_result()
    body = render(result, prefix="a b+&é", delimiter="+", key_marker="k m+é", version_id_marker="v+0")
    assert b"<Nearfaas" not in body
    parsed = boto_parse("ListObjectVersions", body, url_decode=True)
    assert (parsed["Name"], parsed["Prefix"], parsed["Delimiter"]) == (BUCKET, "a b+&é", "+")
    assert (parsed["KeyMarker"], parsed["VersionIdMarker"]) == ("k m+é", "v+0")
    assert (parsed["NextKeyMarker"], parsed["NextVersionIdMarker"]) == ("plus+sign é", "v4a")
    assert parsed["IsTruncated"] is True and parsed["MaxKeys"] == 1000 and parsed["EncodingType"] == "url"
    objects = [e for e in result.versions if not e.delete_marker]
    markers = [e for e in result.versions if e.delete_marker]
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"], v["ETag"], v["StorageClass"]) for v in parsed["Versions"]] == [
        (e.key, e.version_id, e.is_latest, e.info.size, f'"{e.info.etag}"', "STANDARD") for e in objects]
    assert [(m["Key"], m["VersionId"], m["IsLatest"]) for m in parsed["DeleteMarkers"]] == [
        (e.key, e.version_id, e.is_latest) for e in markers]
    assert all(v["Owner"]["ID"] == "nearfaas" for v in parsed["Versions"] + parsed["DeleteMarkers"])
    assert parsed["DeleteMarkers"][0]["LastModified"].timestamp() == pytest.approx(markers[0].last_modified, abs=1e-3)
    assert [p["Prefix"] for p in parsed["CommonPrefixes"]] == result.common_prefixes


def test_botocore_reads_an_answer_without_url_encoding():
    result = VersionListResult([version("a b&c", "v1"), marker("a b&c", "v0", latest=False)], [], False)
    parsed = boto_parse("ListObjectVersions", render(result, encoding_type="", prefix="a b&"))
    assert parsed["Prefix"] == "a b&" and "EncodingType" not in parsed and parsed["IsTruncated"] is False
    assert [(v["Key"], v["IsLatest"]) for v in parsed["Versions"]] == [("a b&c", True)]
    assert [(m["Key"], m["VersionId"], m["IsLatest"]) for m in parsed["DeleteMarkers"]] == [("a b&c", "v0", False)]
    assert "NextKeyMarker" not in parsed


def test_internal_answer_is_still_valid_for_botocore():
    parsed = boto_parse("ListObjectVersions", render(tricky_result(), internal=True), url_decode=True)
    assert [v["Key"] for v in parsed["Versions"]][-1] == "null-one"


# Any valid Unicode text: url encoding carries control characters too, but not lone surrogates.
_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), max_size=12)
_times = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)


@st.composite
def _entries(draw):
    key, vid, latest, ts, order = draw(_keys), draw(_ids), draw(st.booleans()), draw(_times), draw(_ids)
    if draw(st.booleans()):
        return VersionEntry(key, vid, latest, ts, delete_marker=True, version=order)
    info = ObjectInfo(bucket=BUCKET, key=key, size=draw(st.integers(0, 2**50)),
                      etag=draw(st.text("0123456789abcdef-", max_size=34)), last_modified=ts, version=order)
    return VersionEntry(key, vid, latest, ts, info=info, version=order)


@st.composite
def _results(draw):
    truncated = draw(st.booleans())
    next_key = draw(_keys) if truncated else None
    next_vid = draw(_ids) if truncated else None
    return VersionListResult(versions=draw(st.lists(_entries(), max_size=8)), common_prefixes=draw(st.lists(_keys, max_size=4)),
                             is_truncated=truncated, next_key_marker=next_key, next_version_id_marker=next_vid)


@settings(max_examples=300, deadline=None)
@given(result=_results(), prefix=_keys, delimiter=_keys, key_marker=_keys)
def test_internal_round_trip_property(result, prefix, delimiter, key_marker):
    body = render(result, internal=True, prefix=prefix, delimiter=delimiter, key_marker=key_marker)
    assert parse_list_versions(BUCKET, body) == result
    assert b"<Nearfaas" not in render(result, prefix=prefix, delimiter=delimiter, key_marker=key_marker)  # the elements, not a key that spells it
