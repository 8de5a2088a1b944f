"""The S3 front end over a LocalBackend, driven by a real boto3 client and raw HTTP: objects,
listings, buckets and bad input."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import socket
import time
import xml.etree.ElementTree as ET
import zlib

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError


from s3_fixtures import *  # noqa: F403  (the server, s3 and bucket fixtures)
from s3_fixtures import aws_chunked, code_of, new_name, raw, tmp_empties_soon, tmp_is_empty, xml_code

pytestmark = pytest.mark.timeout(60)


# -- objects ------------------------------------------------------------------------------------


def test_put_get_head_roundtrip(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="dir/file one+ü.txt", Body=b"hello world", ContentType="text/plain",
                        Metadata={"Color": "blue"})
    assert put["ETag"] == f'"{hashlib.md5(b"hello world").hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/file one+ü.txt")
    assert got["Body"].read() == b"hello world"
    assert (got["ContentType"], got["Metadata"], got["ETag"]) == ("text/plain", {"color": "blue"}, put["ETag"])
    headers = got["ResponseMetadata"]["HTTPHeaders"]
    assert re.fullmatch(r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", headers["last-modified"])
    assert headers["x-amz-request-id"] and headers["accept-ranges"] == "bytes"
    head = s3.head_object(Bucket=bucket, Key="dir/file one+ü.txt")
    assert head["ContentLength"] == 11 and head["Metadata"] == {"color": "blue"}
    assert abs(head["LastModified"].timestamp() - time.time()) < 60


def test_default_content_type_and_empty_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    got = s3.get_object(Bucket=bucket, Key="empty")
    assert got["Body"].read() == b"" and got["ContentType"] == "binary/octet-stream"


def test_get_ranges(s3, bucket):
    data = bytes(range(256)) * 4
    s3.put_object(Bucket=bucket, Key="r", Body=data)
    for header, expected, content_range in [
        ("bytes=0-9", data[:10], "bytes 0-9/1024"),
        ("bytes=1000-", data[1000:], "bytes 1000-1023/1024"),
        ("bytes=-24", data[-24:], "bytes 1000-1023/1024"),
        ("bytes=1020-5000", data[1020:], "bytes 1020-1023/1024"),
        ("bytes=-5000", data, "bytes 0-1023/1024"),
    ]:
        got = s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert got["Body"].read() == expected
        assert got["ContentRange"] == content_range
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    # A syntactically invalid range is ignored: the whole object, 200.
    got = s3.get_object(Bucket=bucket, Key="r", Range="bytes=9-1")
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200 and got["Body"].read() == data
    for header in ("bytes=1024-", "bytes=5000-6000", "bytes=-0"):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key="r", Range=header)
        assert code_of(e) == ("InvalidRange", 416)


def test_large_object_streams_both_ways(server, s3, bucket):
    data = os.urandom(12 << 20)
    s3.upload_fileobj(io.BytesIO(data), bucket, "big", Config=TransferConfig(multipart_threshold=64 << 20))
    out = io.BytesIO()
    s3.download_fileobj(bucket, "big", out, Config=TransferConfig(multipart_threshold=64 << 20))
    assert hashlib.sha256(out.getvalue()).digest() == hashlib.sha256(data).digest()
    # boto3's managed multipart transfer (5 MiB parts) also works end to end.
    s3.upload_fileobj(io.BytesIO(data), bucket, "big-mp",
                      Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20))
    head = s3.head_object(Bucket=bucket, Key="big-mp")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-3"')
    body = s3.get_object(Bucket=bucket, Key="big-mp", Range="bytes=5242870-5242889")["Body"].read()
    assert body == data[5242870:5242890]


def test_head_missing_is_404_without_body(server, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="missing")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    status, headers, body = raw(server, "HEAD", f"/{bucket}/missing")
    assert (status, body, headers["x-nearfaas-error-code"]) == (404, b"", "NoSuchKey")
    assert headers["x-amz-request-id"]
    status, _, body = raw(server, "GET", f"/{bucket}/missing")
    assert status == 404 and xml_code(body) == "NoSuchKey"
    assert ET.fromstring(body).findtext("RequestId")


def test_delete_object_is_idempotent(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert s3.delete_object(Bucket=bucket, Key="k")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.delete_object(Bucket=bucket, Key="k")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert code_of(e) == ("NoSuchKey", 404)


def test_response_header_overrides(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"x")
    got = s3.get_object(Bucket=bucket, Key="o", ResponseContentType="text/csv", ResponseContentDisposition="inline")
    assert got["ContentType"] == "text/csv" and got["ContentDisposition"] == "inline"
    status, _, body = raw(server, "GET", f"/{bucket}/o?response-content-type=a%0D%0AX-Evil:%201")
    assert (status, xml_code(body)) == (400, "InvalidArgument")


def test_delete_objects(server, s3, bucket):
    for key in ("a", "b", "c/d"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "c/d"}, {"Key": "never"},
                                                                  {"Key": "x/../y"}]})
    assert sorted(d["Key"] for d in result["Deleted"]) == ["a", "c/d", "never"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("x/../y", "InvalidObjectName")]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["b"]
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "b"}], "Quiet": True})
    assert "Deleted" not in quiet and s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    status, _, body = raw(server, "POST", f"/{bucket}?delete", b"<Delete></Delete>")
    assert (status, xml_code(body)) == (400, "MalformedXML")
    doc = b"<Delete><Object><Key>b</Key></Object></Delete>"
    status, _, body = raw(server, "POST", f"/{bucket}?delete", doc,
                          {"Content-MD5": base64.b64encode(hashlib.md5(b"other").digest()).decode()})
    assert (status, xml_code(body)) == (400, "BadDigest")


def test_conditional_get(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"x")["ETag"]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert code_of(e) == ("PreconditionFailed", 412)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"x"


# -- listing ------------------------------------------------------------------------------------


def test_list_v2_prefix_delimiter_and_pagination(s3, bucket):
    keys = [f"photos/2024/{i:02d}.jpg" for i in range(7)] + ["photos/cover.jpg", "readme", "videos/a.mp4",
                                                            "videos/b/c.mp4", "weird key+%&<>ü"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [c["Prefix"] for c in top["CommonPrefixes"]] == ["photos/", "videos/"]
    assert [o["Key"] for o in top["Contents"]] == ["readme", "weird key+%&<>ü"]
    assert top["KeyCount"] == 4 and top["IsTruncated"] is False
    sub = s3.list_objects_v2(Bucket=bucket, Prefix="photos/", Delimiter="/")
    assert [o["Key"] for o in sub["Contents"]] == ["photos/cover.jpg"]
    assert [c["Prefix"] for c in sub["CommonPrefixes"]] == ["photos/2024/"]
    entries = []
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2})
    for page in pages:
        assert page["KeyCount"] <= 2
        entries += [o["Key"] for o in page.get("Contents", [])]
    assert entries == sorted(keys)
    entries = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Delimiter="/",
                                                             PaginationConfig={"PageSize": 1}):
        entries += [o["Key"] for o in page.get("Contents", [])] + [c["Prefix"] for c in page.get("CommonPrefixes", [])]
    assert entries == ["photos/", "readme", "videos/", "weird key+%&<>ü"]
    after = s3.list_objects_v2(Bucket=bucket, StartAfter="videos/a.mp4")
    assert [o["Key"] for o in after["Contents"]] == ["videos/b/c.mp4", "weird key+%&<>ü"]
    first = s3.list_objects_v2(Bucket=bucket, MaxKeys=3)
    assert first["IsTruncated"] and first["NextContinuationToken"]
    second = s3.list_objects_v2(Bucket=bucket, MaxKeys=3, ContinuationToken=first["NextContinuationToken"])
    assert [o["Key"] for o in second["Contents"]] == sorted(keys)[3:6]
    listed = {o["Key"]: o for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed["readme"]["ETag"] == f'"{hashlib.md5(b"").hexdigest()}"' and listed["readme"]["Size"] == 0


def test_list_without_url_encoding_escapes_xml(server, bucket, s3):
    s3.put_object(Bucket=bucket, Key="a&b<c>", Body=b"")
    status, _, body = raw(server, "GET", f"/{bucket}?list-type=2")
    assert status == 200
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    assert ET.fromstring(body).find("s3:Contents/s3:Key", ns).text == "a&b<c>"
    assert re.search(rb"<LastModified>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z</LastModified>", body)


def test_list_v1_marker_pagination(s3, bucket):
    keys = [f"k{i:02d}" for i in range(9)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    got = []
    for page in s3.get_paginator("list_objects").paginate(Bucket=bucket, PaginationConfig={"PageSize": 4}):
        got += [o["Key"] for o in page.get("Contents", [])]
    assert got == keys
    assert [o["Key"] for o in s3.list_objects(Bucket=bucket, Marker="k06")["Contents"]] == ["k07", "k08"]


def test_list_argument_errors(server, bucket):
    for query, code in [("list-type=2&max-keys=abc", "InvalidArgument"), ("list-type=3", "InvalidArgument"),
                        ("list-type=2&encoding-type=base64", "InvalidArgument"),
                        ("list-type=2&continuation-token=%%%", "InvalidArgument")]:
        status, _, body = raw(server, "GET", f"/{bucket}?{query}")
        assert (status, xml_code(body)) == (400, code), query


# -- buckets ------------------------------------------------------------------------------------


def test_bucket_lifecycle(server, s3):
    name = f"life-{new_name()}"
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    # Creating a bucket you own again succeeds (S3 us-east-1 behaviour).
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket=name)
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] is None
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert code_of(e) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=name, Key="k")
    assert s3.delete_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert code_of(e) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="k", Body=b"x")
    assert code_of(e) == ("NoSuchBucket", 404)
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=name)
    assert code_of(e) == ("NoSuchBucket", 404)
    status, _, _ = raw(server, "HEAD", f"/{name}")
    assert status == 404


def test_create_bucket_with_location_body_and_dscs_option(server, s3):
    name = f"dscs-{new_name()}"
    body = b'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' \
           b"<LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>"
    status, headers, _ = raw(server, "PUT", f"/{name}", body, {"x-nearfaas-dscs-replica": "true"})
    assert status == 200 and headers["location"] == f"/{name}"
    assert server.run(server.backend.head_bucket(name)).options == {"dscs_replica": True}
    status, _, body = raw(server, "PUT", f"/bad-{new_name()}", b"<not-xml")
    assert (status, xml_code(body)) == (400, "MalformedXML")


@pytest.mark.parametrize("name", ["ab", "Upper-Case", "192.168.1.1", "a..b", "-dash"])
def test_invalid_bucket_name(s3, name):
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert code_of(e) == ("InvalidBucketName", 400)


def test_virtual_host_style(server, bucket, s3):
    s3.put_object(Bucket=bucket, Key="vh/key", Body=b"virtual")
    status, _, body = raw(server, "GET", "/vh/key", headers={"Host": f"{bucket}.localhost:{server.port}"})
    assert (status, body) == (200, b"virtual")
    status, _, body = raw(server, "GET", "/?list-type=2&prefix=vh/", headers={"Host": f"{bucket}.localhost"})
    assert status == 200 and b"<Key>vh/key</Key>" in body
    status, _, _ = raw(server, "PUT", "/new", b"hosted", headers={"Host": f"{bucket}.localhost"})
    assert status == 200 and s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"hosted"


def test_host_routes_are_not_shadowed(server):
    status, _, body = raw(server, "GET", "/healthz")
    assert (status, body) == (200, b"ok")


# -- errors on bad input ------------------------------------------------------------------------


def test_key_errors(server, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert code_of(e) == ("KeyTooLongError", 400)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad\x01key", Body=b"x")
    assert code_of(e) == ("InvalidObjectName", 400)
    for path in (f"/{bucket}/a/../b", f"/{bucket}/a/%2E%2E/b", f"/{bucket}/./x"):
        status, _, body = raw(server, "PUT", path, b"x")
        assert (status, xml_code(body)) == (400, "InvalidObjectName"), path
    status, _, body = raw(server, "GET", f"/{bucket}/%FF%FE")
    assert (status, xml_code(body)) == (400, "InvalidURI")
    assert tmp_is_empty(server)


def test_content_md5(s3, bucket, server):
    good = base64.b64encode(hashlib.md5(b"payload").digest()).decode()
    s3.put_object(Bucket=bucket, Key="md5", Body=b"payload", ContentMD5=good)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="md5-bad", Body=b"payload", ContentMD5=wrong)
    assert code_of(e) == ("BadDigest", 400)
    for invalid in ("not base64!", base64.b64encode(b"short").decode()):
        status, _, body = raw(server, "PUT", f"/{bucket}/md5-invalid", b"payload", {"Content-MD5": invalid})
        assert (status, xml_code(body)) == (400, "InvalidDigest")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="md5-bad")
    assert tmp_is_empty(server)


def test_crc32_checksum_header(server, bucket):
    data = b"checked bytes"
    good = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    status, _, _ = raw(server, "PUT", f"/{bucket}/crc", data, {"x-amz-checksum-crc32": good})
    assert status == 200
    status, _, body = raw(server, "PUT", f"/{bucket}/crc-bad", data, {"x-amz-checksum-crc32": "AAAAAA=="})
    assert (status, xml_code(body)) == (400, "BadDigest")
    status, _, _ = raw(server, "HEAD", f"/{bucket}/crc-bad")
    assert status == 404


def test_payload_sha256_mismatch(server, bucket):
    headers = {"x-amz-content-sha256": hashlib.sha256(b"something else").hexdigest()}
    status, _, body = raw(server, "PUT", f"/{bucket}/sha", b"payload", headers)
    assert (status, xml_code(body)) == (400, "XAmzContentSHA256Mismatch")
    status, _, _ = raw(server, "HEAD", f"/{bucket}/sha")
    assert status == 404 and tmp_is_empty(server)


def test_entity_too_large_before_body(server, bucket):
    # Only headers are sent: the answer must come without waiting for 1 TB of body.
    status, _, body = raw(server, "PUT", f"/{bucket}/huge", b"", {"Content-Length": str(1 << 40)}, send_body=False)
    assert (status, xml_code(body)) == (400, "EntityTooLarge")
    status, _, body = raw(server, "PUT", f"/{bucket}/huge", b"", {"Content-Length": str(1 << 40),
                                                                   "Expect": "100-continue"}, send_body=False)
    assert (status, xml_code(body)) == (400, "EntityTooLarge")


def test_chunked_transfer_body_over_limit(server, bucket):
    chunk = b"x" * (1 << 20)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(17)) + b"0\r\n\r\n"
    status, _, resp = raw(server, "PUT", f"/{bucket}/chunked", body, {"Transfer-Encoding": "chunked"})
    assert (status, xml_code(resp)) == (400, "EntityTooLarge")
    assert tmp_is_empty(server)


def test_missing_content_length(server, bucket):
    status, _, body = raw(server, "PUT", f"/{bucket}/nolength")
    assert (status, xml_code(body)) == (411, "MissingContentLength")


def test_client_disconnect_mid_body_leaves_nothing(server, s3, bucket):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(f"PUT /{bucket}/cut HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n".encode() + b"x" * 5000)
    sock.shutdown(socket.SHUT_WR)
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    sock.close()
    assert tmp_empties_soon(server), os.listdir(server.store.root / "tmp")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="cut")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404




def test_aws_chunked_bodies(server, s3, bucket):
    data = b"the quick brown fox jumps over the lazy dog" * 3
    headers = {"Content-Encoding": "aws-chunked", "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
               "x-amz-decoded-content-length": str(len(data))}
    status, _, body = raw(server, "PUT", f"/{bucket}/chunked-signed", aws_chunked(data), headers)
    assert status == 200, body
    assert s3.get_object(Bucket=bucket, Key="chunked-signed")["Body"].read() == data
    crc = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    trailer_headers = {"Content-Encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32",
                       "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                       "x-amz-decoded-content-length": str(len(data))}
    status, _, body = raw(server, "PUT", f"/{bucket}/chunked-trailer",
                          aws_chunked(data, 16, ("x-amz-checksum-crc32", crc), signatures=False), trailer_headers)
    assert status == 200, body
    assert s3.get_object(Bucket=bucket, Key="chunked-trailer")["Body"].read() == data
    status, _, body = raw(server, "PUT", f"/{bucket}/chunked-badcrc",
                          aws_chunked(data, 16, ("x-amz-checksum-crc32", "AAAAAA=="), False), trailer_headers)
    assert (status, xml_code(body)) == (400, "BadDigest")
    short = {**headers, "x-amz-decoded-content-length": str(len(data) + 10)}
    status, _, body = raw(server, "PUT", f"/{bucket}/chunked-short", aws_chunked(data), short)
    assert (status, xml_code(body)) == (400, "IncompleteBody")
    status, _, body = raw(server, "PUT", f"/{bucket}/chunked-garbage", b"zz;x\r\nabc\r\n", headers)
    assert (status, xml_code(body)) == (400, "InvalidRequest")
    for key in ("chunked-badcrc", "chunked-short", "chunked-garbage"):
        assert raw(server, "HEAD", f"/{bucket}/{key}")[0] == 404
    assert tmp_is_empty(server)


def test_not_implemented_subresources(s3, bucket, server):
    for call in (lambda: s3.get_bucket_acl(Bucket=bucket), lambda: s3.get_bucket_lifecycle_configuration(Bucket=bucket),
                 lambda: s3.get_bucket_cors(Bucket=bucket), lambda: s3.get_bucket_tagging(Bucket=bucket)):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == ("NotImplemented", 501)
    # A copy source's version id is checked like any other (s3/versioning.py).
    status, _, body = raw(server, "PUT", f"/{bucket}/copy", b"", {"x-amz-copy-source": f"/{bucket}/x?versionId=3"})
    assert (status, xml_code(body)) == (400, "InvalidArgument")
    status, _, body = raw(server, "PATCH", f"/{bucket}/k", b"")
    assert (status, xml_code(body)) == (405, "MethodNotAllowed")


def test_a_full_disk_is_507_insufficient_storage_not_a_500(s3, bucket, server, monkeypatch):
    """A write that meets ENOSPC past the floor check stored nothing: it says so as the floor's
    refusal does (507), which the gateway treats as a missed write it owes the node (issue 43)."""
    import errno as errno_

    async def full(*args, **kwargs):
        raise OSError(errno_.ENOSPC, "No space left on device")

    monkeypatch.setattr(server.backend, "put_object", full)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert code_of(e) == ("InsufficientStorage", 507)

    async def broken(*args, **kwargs):
        raise OSError(errno_.EIO, "I/O error")

    monkeypatch.setattr(server.backend, "put_object", broken)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert code_of(e) == ("InternalError", 500)
