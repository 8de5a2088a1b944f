"""Multipart uploads through the S3 front end: create, parts, complete, errors, caller-chosen
upload ids, and ListMultipartUploads (fixtures in conftest.py)."""

from __future__ import annotations

import hashlib

import pytest
from botocore.exceptions import ClientError

from s3_test_server import code_of, raw, xml_code

pytestmark = pytest.mark.timeout(60)


# -- multipart ----------------------------------------------------------------------------------


def test_multipart_via_boto3(server, s3, bucket):
    created = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="a/b", Metadata={"m": "1"})
    upload = created["UploadId"]
    parts = [b"a" * 10, b"b" * 8, b"c" * 3]
    etags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=i + 1, Body=p)["ETag"]
             for i, p in enumerate(parts)]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert done["ETag"] == f'"{expected}-3"'
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["Body"].read() == b"".join(parts) and got["ContentType"] == "a/b" and got["Metadata"] == {"m": "1"}


def test_multipart_errors_via_boto3(server, s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mpe")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="mpe", UploadId=upload, PartNumber=1, Body=b"123")["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key="mpe", UploadId=upload, PartNumber=2, Body=b"456789")["ETag"]

    def complete(parts):
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(Bucket=bucket, Key="mpe", UploadId=upload,
                                         MultipartUpload={"Parts": [{"PartNumber": n, "ETag": t} for n, t in parts]})
        return code_of(e)

    assert complete([(2, e2), (1, e1)]) == ("InvalidPartOrder", 400)
    assert complete([(1, e1), (3, e2)]) == ("InvalidPart", 400)
    assert complete([(1, e2), (2, e2)]) == ("InvalidPart", 400)
    assert complete([(1, e1), (2, e2)]) == ("EntityTooSmall", 400)  # part 1 has 3 < 5 bytes
    status, _, body = raw(server, "POST", f"/{bucket}/mpe?uploadId={upload}", b"<CompleteMultipartUpload><Part>")
    assert (status, xml_code(body)) == (400, "MalformedXML")
    status, _, body = raw(server, "POST", f"/{bucket}/mpe?uploadId={upload}",
                          b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber><ETag>e</ETag></Part>"
                          b"</CompleteMultipartUpload>")
    assert (status, xml_code(body)) == (400, "MalformedXML")
    status, _, body = raw(server, "PUT", f"/{bucket}/mpe?partNumber=abc&uploadId={upload}", b"x")
    assert (status, xml_code(body)) == (400, "InvalidArgument")
    status, _, body = raw(server, "PUT", f"/{bucket}/mpe?partNumber=0&uploadId={upload}", b"x")
    assert (status, xml_code(body)) == (400, "InvalidArgument")
    assert s3.abort_multipart_upload(Bucket=bucket, Key="mpe", UploadId=upload)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mpe", UploadId=upload, PartNumber=1, Body=b"x")
    assert code_of(e) == ("NoSuchUpload", 404)
    assert complete([(1, e1)]) == ("NoSuchUpload", 404)


def test_caller_supplied_upload_id(server, bucket):
    status, _, body = raw(server, "POST", f"/{bucket}/gw?uploads", b"", {"x-nearfaas-upload-id": "gateway-id-7"})
    assert status == 200 and b"<UploadId>gateway-id-7</UploadId>" in body
    status, _, body = raw(server, "POST", f"/{bucket}/gw?uploads", b"", {"x-nearfaas-upload-id": "../../etc"})
    assert (status, xml_code(body)) == (400, "InvalidArgument")


# -- internal errors ----------------------------------------------------------------------------


def test_list_multipart_uploads_via_boto3(server, s3, bucket):
    ids = {key: s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"] for key in ("a/1", "a/2", "b", "c&<d")}
    second_b = s3.create_multipart_upload(Bucket=bucket, Key="b")["UploadId"]
    listed = s3.list_multipart_uploads(Bucket=bucket)
    b_ids = sorted([ids["b"], second_b])
    assert [(u["Key"], u["UploadId"]) for u in listed["Uploads"]] == [
        ("a/1", ids["a/1"]), ("a/2", ids["a/2"]), ("b", b_ids[0]), ("b", b_ids[1]), ("c&<d", ids["c&<d"])]
    assert listed["IsTruncated"] is False and listed["Uploads"][0]["Initiated"].year >= 2024
    assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix="a/")["Uploads"]] == ["a/1", "a/2"]
    top = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [c["Prefix"] for c in top["CommonPrefixes"]] == ["a/"] and [u["Key"] for u in top["Uploads"]] == ["b", "b", "c&<d"]
    page = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=3)
    assert page["IsTruncated"] and (page["NextKeyMarker"], page["NextUploadIdMarker"]) == ("b", b_ids[0])
    rest = s3.list_multipart_uploads(Bucket=bucket, KeyMarker="b", UploadIdMarker=b_ids[0])
    assert [u["UploadId"] for u in rest["Uploads"]] == [b_ids[1], ids["c&<d"]]
    paged = [u["UploadId"] for p in s3.get_paginator("list_multipart_uploads").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 2}) for u in p.get("Uploads", [])]
    assert paged == [u["UploadId"] for u in listed["Uploads"]]
    s3.abort_multipart_upload(Bucket=bucket, Key="b", UploadId=second_b)
    assert second_b not in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]]
    for query in ("uploads&max-uploads=x", "uploads&encoding-type=b64"):
        status, _, body = raw(server, "GET", f"/{bucket}?{query}")
        assert (status, xml_code(body)) == (400, "InvalidArgument"), query
    with pytest.raises(ClientError) as e:
        s3.list_multipart_uploads(Bucket="no-such-bucket-here")
    assert code_of(e) == ("NoSuchBucket", 404)
