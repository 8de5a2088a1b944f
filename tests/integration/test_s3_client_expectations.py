"""What S3 clients expect and nearfaas got wrong: conditions a client sends are checked or refused,
never skipped (a versioned DELETE's If-Match; DeleteObject's x-amz-if-match-last-modified-time /
-size and DeleteObjects' per-object ETag answer 501); ListObjectsV2 echoes an empty
continuation-token; GetObjectAttributes answers for the version it names. boto3 against the
shared cluster."""

from __future__ import annotations

import datetime
import gzip
import uuid

import pytest
from botocore.exceptions import ClientError

from test_s3_copy_conditions import _fails, _signed  # one boto3 failure check and one signed raw request for both files

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3(cluster):
    client = cluster.s3()
    client.create_bucket(Bucket="conds-plain")
    client.create_bucket(Bucket="conds-versioned")
    client.put_bucket_versioning(Bucket="conds-versioned", VersioningConfiguration={"Status": "Enabled"})
    return client


def test_a_versioned_delete_checks_if_match_against_the_version_it_names(s3):
    # catches: DELETE ?versionId= carrying out the delete whatever If-Match says (it answered 204)
    key = f"v-{uuid.uuid4().hex}"
    old = s3.put_object(Bucket="conds-versioned", Key=key, Body=b"old")
    new = s3.put_object(Bucket="conds-versioned", Key=key, Body=b"new")
    assert _fails(412, s3.delete_object, Bucket="conds-versioned", Key=key, VersionId=old["VersionId"],
                  IfMatch=new["ETag"]) == "PreconditionFailed"  # the newest's ETag, not the named version's
    assert s3.get_object(Bucket="conds-versioned", Key=key, VersionId=old["VersionId"])["Body"].read() == b"old"
    s3.delete_object(Bucket="conds-versioned", Key=key, VersionId=old["VersionId"], IfMatch=old["ETag"])
    assert _fails(404, s3.get_object, Bucket="conds-versioned", Key=key, VersionId=old["VersionId"]) == "NoSuchVersion"
    assert s3.get_object(Bucket="conds-versioned", Key=key)["Body"].read() == b"new"  # the other version untouched


def test_delete_conditions_not_evaluated_here_are_refused_and_nothing_is_deleted(s3):
    # catches: x-amz-if-match-last-modified-time / -size ignored and the object deleted anyway
    key = f"d-{uuid.uuid4().hex}"
    s3.put_object(Bucket="conds-plain", Key=key, Body=b"keep me")
    long_ago = datetime.datetime(2001, 1, 1, tzinfo=datetime.UTC)
    assert _fails(501, s3.delete_object, Bucket="conds-plain", Key=key, IfMatchLastModifiedTime=long_ago) == "NotImplemented"
    assert _fails(501, s3.delete_object, Bucket="conds-plain", Key=key, IfMatchSize=999) == "NotImplemented"
    with pytest.raises(ClientError) as caught:
        s3.delete_objects(Bucket="conds-plain", Delete={"Objects": [{"Key": key, "ETag": '"00000000000000000000000000000000"'}]})
    assert caught.value.response["Error"]["Code"] == "NotImplemented" and "ETag" in caught.value.response["Error"]["Message"]
    assert s3.get_object(Bucket="conds-plain", Key=key)["Body"].read() == b"keep me"
    s3.delete_objects(Bucket="conds-plain", Delete={"Objects": [{"Key": key}]})  # without a condition: deleted
    assert _fails(404, s3.head_object, Bucket="conds-plain", Key=key) == "404"


def test_list_objects_v2_echoes_an_empty_continuation_token(s3, cluster):
    # catches: <ContinuationToken> left out when the token sent was empty (S3 echoes it)
    s3.put_object(Bucket="conds-plain", Key="listed", Body=b"1")
    resp = _signed(cluster, "GET", "/conds-plain?list-type=2&continuation-token=")
    assert resp.status_code == 200, resp.text[:300]
    assert "<ContinuationToken></ContinuationToken>" in resp.text or "<ContinuationToken/>" in resp.text
    assert "<Key>listed</Key>" in resp.text
    assert s3.list_objects_v2(Bucket="conds-plain", ContinuationToken="").get("ContinuationToken") == ""


def test_get_object_attributes_answers_for_the_version_it_names(s3):
    # catches: versionId ignored (the newest version's size and ETag, no x-amz-version-id), or an
    # older version behind a delete marker answered 404
    key = f"a-{uuid.uuid4().hex}"
    old = s3.put_object(Bucket="conds-versioned", Key=key, Body=b"the first, longer body")
    new = s3.put_object(Bucket="conds-versioned", Key=key, Body=b"short")
    got = s3.get_object_attributes(Bucket="conds-versioned", Key=key, VersionId=old["VersionId"], ObjectAttributes=["ETag", "ObjectSize"])
    assert got["ObjectSize"] == len(b"the first, longer body") and got["ETag"] == old["ETag"].strip('"')
    assert got["VersionId"] == old["VersionId"]
    newest = s3.get_object_attributes(Bucket="conds-versioned", Key=key, ObjectAttributes=["ETag", "ObjectSize"])
    assert newest["ObjectSize"] == 5 and newest["VersionId"] == new["VersionId"]
    s3.delete_object(Bucket="conds-versioned", Key=key)  # a delete marker on top
    behind = s3.get_object_attributes(Bucket="conds-versioned", Key=key, VersionId=old["VersionId"], ObjectAttributes=["ObjectSize"])
    assert behind["ObjectSize"] == len(b"the first, longer body")


def test_aws_chunked_in_content_encoding_on_a_plain_body_is_a_plain_body(s3, cluster):
    # catches: 411 MissingContentLength for `Content-Encoding: gzip, aws-chunked` when the body is
    # not framed (its payload hash is the body's own hex digest, no decoded length)
    data = gzip.compress(b"plain body, gzip on the wire " * 50)
    resp = _signed(cluster, "PUT", "/conds-plain/gz", data, {"Content-Encoding": "gzip, aws-chunked", "Content-Type": "text/plain"})
    assert resp.status_code == 200, resp.text[:300]
    got = s3.get_object(Bucket="conds-plain", Key="gz")
    assert got["Body"].read() == data and got["ContentEncoding"] == "gzip"  # stored as sent, aws-chunked dropped


def test_conditions_that_could_race_or_go_unchecked_are_refused(s3, cluster):
    # catches: DELETE ?versionId=null with If-Match checked then deleted (a write can replace the
    # null version in between), or an abort's x-amz-if-match-initiated-time ignored
    key = f"n-{uuid.uuid4().hex}"
    put = s3.put_object(Bucket="conds-plain", Key=key, Body=b"null version")
    assert _fails(501, s3.delete_object, Bucket="conds-plain", Key=key, VersionId="null", IfMatch=put["ETag"]) == "NotImplemented"
    assert s3.get_object(Bucket="conds-plain", Key=key)["Body"].read() == b"null version"
    upload = s3.create_multipart_upload(Bucket="conds-plain", Key=key)["UploadId"]
    resp = _signed(cluster, "DELETE", f"/conds-plain/{key}?uploadId={upload}",
                   headers={"x-amz-if-match-initiated-time": "Wed, 01 Jan 2025 00:00:00 GMT"})
    assert resp.status_code == 501 and "x-amz-if-match-initiated-time" in resp.text
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="conds-plain", Prefix=key).get("Uploads", [])] == [upload]
    s3.abort_multipart_upload(Bucket="conds-plain", Key=key, UploadId=upload)


def _upload_in_two_parts(s3, key: str, checksum_type: str) -> tuple[str, list[dict], bytes]:
    """A CRC32 multipart upload of 5 MiB + 1 KiB, as boto3's checksum helpers make one."""
    data = bytes(range(256)) * (5 * 4096 + 4)
    upload = s3.create_multipart_upload(Bucket="conds-plain", Key=key, ChecksumAlgorithm="CRC32", ChecksumType=checksum_type)["UploadId"]
    parts = []
    for number, chunk in ((1, data[:5 << 20]), (2, data[5 << 20:])):
        answer = s3.upload_part(Bucket="conds-plain", Key=key, UploadId=upload, PartNumber=number, Body=chunk, ChecksumAlgorithm="CRC32")
        parts.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32": answer["ChecksumCRC32"]})
    return upload, parts, data


def test_a_completion_names_the_objects_full_checksum_and_a_wrong_one_writes_nothing(s3):
    """The completion's x-amz-checksum-crc32 is the object's CRC (FULL_OBJECT), checked before the
    write; it was checked against the CRC of the request's XML (BadDigest for every right value)."""
    import base64
    import zlib

    upload, parts, data = _upload_in_two_parts(s3, "full-crc", "FULL_OBJECT")
    right = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    wrong = base64.b64encode((zlib.crc32(data) ^ 1).to_bytes(4, "big")).decode()
    assert "BadDigest" == _fails(400, lambda: s3.complete_multipart_upload(Bucket="conds-plain", Key="full-crc", UploadId=upload,
                                                             MultipartUpload={"Parts": parts}, ChecksumCRC32=wrong,
                                                             ChecksumType="FULL_OBJECT"))
    _fails(404, lambda: s3.head_object(Bucket="conds-plain", Key="full-crc"))  # nothing written
    done = s3.complete_multipart_upload(Bucket="conds-plain", Key="full-crc", UploadId=upload, MultipartUpload={"Parts": parts},
                                        ChecksumCRC32=right, ChecksumType="FULL_OBJECT")
    assert done["ChecksumCRC32"] == right and done["ChecksumType"] == "FULL_OBJECT"
    assert s3.get_object(Bucket="conds-plain", Key="full-crc")["Body"].read() == data


def test_a_completion_may_name_the_composite_checksum_with_its_part_count(s3):
    """A COMPOSITE value, <base64>-<parts>, was refused as 'not valid base64'."""
    upload, parts, data = _upload_in_two_parts(s3, "composite-crc", "COMPOSITE")
    import base64
    import zlib

    raw = b"".join(base64.b64decode(p["ChecksumCRC32"]) for p in parts)
    composite = base64.b64encode(zlib.crc32(raw).to_bytes(4, "big")).decode() + "-2"
    assert "BadDigest" == _fails(400, lambda: s3.complete_multipart_upload(Bucket="conds-plain", Key="composite-crc", UploadId=upload,
                                                             MultipartUpload={"Parts": parts}, ChecksumCRC32="AAAAAA==-2"))
    assert "InvalidRequest" == _fails(400, lambda: s3.complete_multipart_upload(Bucket="conds-plain", Key="composite-crc", UploadId=upload,
                                                                  MultipartUpload={"Parts": parts}, ChecksumCRC32="not base64"))
    done = s3.complete_multipart_upload(Bucket="conds-plain", Key="composite-crc", UploadId=upload,
                                        MultipartUpload={"Parts": parts}, ChecksumCRC32=composite)
    assert done["ChecksumCRC32"] == composite and done["ChecksumType"] == "COMPOSITE"
    assert s3.get_object(Bucket="conds-plain", Key="composite-crc")["Body"].read() == data
