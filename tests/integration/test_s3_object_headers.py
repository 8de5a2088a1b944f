"""Issue 22: every standard object header and the flexible checksums are stored, verified and
returned (single-part and multipart, GET and HEAD, through a replica repair), Content-Encoding is
stored as sent and never decoded, user metadata round-trips byte-exact, and x-amz-acl is either
honoured (private) or refused with an S3 error. Against a real local cluster, with boto3 and
with raw requests where boto3 would not send what a test needs."""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import urllib.parse
import zlib

import pytest
from botocore.exceptions import ClientError

from nearfaas.s3.checksums import new_checksum

pytestmark = pytest.mark.integration

HEADERS = {
    "CacheControl": "max-age=3600, public",
    "ContentDisposition": 'attachment; filename="report.csv"',
    "ContentEncoding": "identity",
    "ContentLanguage": "de-CH",
    "Expires": "Wed, 21 Oct 2037 07:28:00 GMT",
    "WebsiteRedirectLocation": "/elsewhere/index.html",
    "StorageClass": "STANDARD_IA",
}


def _b64(kind: str, data: bytes) -> str:
    c = new_checksum(kind)
    c.update(data)
    return base64.b64encode(c.digest()).decode()


def _check_headers(answer: dict) -> None:
    for name in ("CacheControl", "ContentDisposition", "ContentEncoding", "ContentLanguage", "WebsiteRedirectLocation",
                 "StorageClass"):
        assert answer.get(name) == HEADERS[name], (name, answer.get(name))
    assert answer["ResponseMetadata"]["HTTPHeaders"]["expires"] == HEADERS["Expires"]


def _raw(cluster, method: str, path: str, body: bytes = b"", headers: dict | None = None, *,
         payload: str = "UNSIGNED-PAYLOAD") -> tuple[int, dict, bytes]:
    """A signed request; header values go on the wire as their UTF-8 bytes (what is signed)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class _Signer(S3SigV4Auth):
        def payload(self, request):
            return payload

    url = cluster.url + path
    request = AWSRequest(method=method, url=url, headers=dict(headers or {}))
    _Signer(Credentials(*cluster.keys(cluster.url)), "s3", "us-east-1").add_auth(request)
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.putrequest(method, parsed.path + (f"?{parsed.query}" if parsed.query else ""), skip_accept_encoding=True)
        for name, value in request.headers.items():
            conn.putheader(name, value.encode("utf-8") if isinstance(value, str) else value)
        if body or method in ("PUT", "POST"):
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        response = conn.getresponse()
        raw_headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, raw_headers, response.read()
    finally:
        conn.close()


def test_standard_headers_round_trip_on_a_single_part_object(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"hello headers", **HEADERS)
    _check_headers(s3.head_object(Bucket=bucket, Key="one"))
    got = s3.get_object(Bucket=bucket, Key="one")
    assert got["Body"].read() == b"hello headers"
    _check_headers(got)


def test_standard_headers_of_create_multipart_upload_end_up_on_the_object(cluster, bucket):
    s3 = cluster.s3()
    upload = s3.create_multipart_upload(Bucket=bucket, Key="multi", Metadata={"m": "v"}, **HEADERS)
    part = s3.upload_part(Bucket=bucket, Key="multi", UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1000)
    s3.complete_multipart_upload(Bucket=bucket, Key="multi", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    for answer in (s3.head_object(Bucket=bucket, Key="multi"), s3.get_object(Bucket=bucket, Key="multi")):
        _check_headers(answer)
        assert answer["Metadata"] == {"m": "v"}


def test_an_unknown_storage_class_is_refused(cluster, bucket):
    with pytest.raises(ClientError) as err:
        cluster.s3().put_object(Bucket=bucket, Key="k", Body=b"x", StorageClass="PLATINUM")
    assert err.value.response["Error"]["Code"] == "InvalidStorageClass"


def test_acl_private_is_accepted_and_any_other_acl_refused_with_an_s3_error(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="private", Body=b"x", ACL="private")
    assert s3.get_object(Bucket=bucket, Key="private")["Body"].read() == b"x"
    for kwargs in ({"ACL": "public-read"}, {"GrantRead": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'}):
        with pytest.raises(ClientError) as err:
            s3.put_object(Bucket=bucket, Key="public", Body=b"x", **kwargs)
        assert err.value.response["Error"]["Code"] == "NotImplemented"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
        assert "private" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        s3.create_multipart_upload(Bucket=bucket, Key="public", ACL="public-read-write")
    assert err.value.response["Error"]["Code"] == "NotImplemented"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="public")


@pytest.mark.parametrize("kind", ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"])
def test_a_wrong_checksum_is_bad_digest_and_a_right_one_is_stored_and_returned(cluster, bucket, kind):
    body = b"checksummed body " * 100
    header = f"x-amz-checksum-{kind}"
    wrong = _b64(kind, body + b"!")
    status, _, answer = _raw(cluster, "PUT", f"/{bucket}/{kind}", body, {header: wrong})
    assert status == 400 and b"<Code>BadDigest</Code>" in answer, answer
    s3 = cluster.s3()
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key=kind)
    right = _b64(kind, body)
    status, _, answer = _raw(cluster, "PUT", f"/{bucket}/{kind}", body, {header: right})
    assert status == 200, answer
    field = "Checksum" + kind.upper()
    for answer in (s3.head_object(Bucket=bucket, Key=kind, ChecksumMode="ENABLED"),
                   s3.get_object(Bucket=bucket, Key=kind, ChecksumMode="ENABLED")):
        assert answer[field] == right
        assert answer.get("ChecksumType") == "FULL_OBJECT"
    # Without the checksum mode, no checksum header (as S3 does).
    assert field not in s3.head_object(Bucket=bucket, Key=kind)


@pytest.mark.parametrize("kind", ["CRC32", "CRC32C", "CRC64NVME", "SHA256"])
def test_boto3_checksum_algorithm_round_trip(cluster, bucket, kind):
    s3 = cluster.s3()
    body = b"boto3 computes it " * 1000
    s3.put_object(Bucket=bucket, Key="b", Body=body, ChecksumAlgorithm=kind)
    got = s3.get_object(Bucket=bucket, Key="b", ChecksumMode="ENABLED")  # botocore validates the body with it
    assert got["Body"].read() == body
    assert got["Checksum" + kind] == _b64(kind.lower(), body)


def test_multipart_checksums_are_per_part_and_composite(cluster, bucket):
    s3 = cluster.s3()
    parts = [b"a" * (5 << 20), b"tail part"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32C")
    done = []
    for number, data in enumerate(parts, 1):
        answer = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload["UploadId"], PartNumber=number, Body=data,
                                ChecksumAlgorithm="CRC32C")
        assert answer["ChecksumCRC32C"] == _b64("crc32c", data)
        done.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32C": answer["ChecksumCRC32C"]})
    completed = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload["UploadId"],
                                             MultipartUpload={"Parts": done})
    raw_digests = b"".join(base64.b64decode(_b64("crc32c", data)) for data in parts)
    composite = f"{_b64('crc32c', raw_digests)}-2"
    assert completed["ChecksumCRC32C"] == composite
    for answer in (s3.head_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED"),
                   s3.get_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")):
        assert answer["ChecksumCRC32C"] == composite
        assert answer["ChecksumType"] == "COMPOSITE"
    # A wrong part checksum in the completion is refused.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp2", ChecksumAlgorithm="CRC32C")
    answer = s3.upload_part(Bucket=bucket, Key="mp2", UploadId=upload["UploadId"], PartNumber=1, Body=b"p",
                            ChecksumAlgorithm="CRC32C")
    with pytest.raises(ClientError) as err:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp2", UploadId=upload["UploadId"], MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": answer["ETag"], "ChecksumCRC32C": _b64("crc32c", b"q")}]})
    assert err.value.response["Error"]["Code"] == "InvalidPart"


def test_a_wrong_part_checksum_is_bad_digest(cluster, bucket):
    s3 = cluster.s3()
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC64NVME")
    path = f"/{bucket}/mp?partNumber=1&uploadId={upload['UploadId']}"
    status, _, answer = _raw(cluster, "PUT", path, b"part", {"x-amz-checksum-crc64nvme": _b64("crc64nvme", b"trap")})
    assert status == 400 and b"<Code>BadDigest</Code>" in answer, answer


@pytest.mark.parametrize("kind", ["crc32c", "crc64nvme", "sha256"])
def test_an_aws_chunked_upload_with_a_trailing_checksum(cluster, bucket, kind):
    data = b"streamed with a trailer " * 500
    right = _b64(kind, data)

    def send(value: str):
        body = (f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n" + f"x-amz-checksum-{kind}:{value}\r\n\r\n".encode())
        headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
                   "x-amz-trailer": f"x-amz-checksum-{kind}"}
        return _raw(cluster, "PUT", f"/{bucket}/chunked", body, headers, payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER")

    status, _, answer = send(_b64(kind, b"other"))
    assert status == 400 and b"<Code>BadDigest</Code>" in answer, answer
    status, headers, answer = send(right)
    assert status == 200, answer
    got = cluster.s3().get_object(Bucket=bucket, Key="chunked", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got["Checksum" + kind.upper()] == right
    # aws-chunked is framing, not the object's Content-Encoding.
    assert "ContentEncoding" not in got


@pytest.mark.parametrize("encoding,body", [
    ("gzip", b"not gzip at all"),
    ("gzip", gzip.compress(b"really gzip " * 1000, mtime=0)),  # no clock in the bytes: xdist workers must collect the same ids
    ("deflate", zlib.compress(b"deflated " * 1000)),
    ("br", b"\x1b\x00\x00 pretend brotli"),
    ("x-custom, gzip", b"two codings"),
], ids=["gzip-not-gzip", "gzip", "deflate", "br", "two-codings"])
def test_content_encoding_is_stored_as_sent_and_never_decoded(cluster, bucket, encoding, body):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="enc", Body=body, ContentEncoding=encoding)
    for answer in (s3.head_object(Bucket=bucket, Key="enc"), s3.get_object(Bucket=bucket, Key="enc")):
        assert answer["ContentEncoding"] == encoding
        assert answer["ContentLength"] == len(body)
    assert s3.get_object(Bucket=bucket, Key="enc")["Body"].read() == body
    # And as a multipart part, raw: never a 500, bytes as sent.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="enc-mp", ContentEncoding=encoding)
    status, headers, answer = _raw(cluster, "PUT", f"/{bucket}/enc-mp?partNumber=1&uploadId={upload['UploadId']}", body,
                                   {"Content-Encoding": encoding})
    assert status == 200, answer
    assert headers["etag"].strip('"') == hashlib.md5(body).hexdigest()
    s3.complete_multipart_upload(Bucket=bucket, Key="enc-mp", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": headers["etag"]}]})
    got = s3.get_object(Bucket=bucket, Key="enc-mp")
    assert got["Body"].read() == body and got["ContentEncoding"] == encoding


def test_a_bad_request_with_content_encoding_gets_an_s3_xml_error(cluster, bucket):
    status, _, answer = _raw(cluster, "PUT", f"/{bucket}/enc", b"x", {"Content-Encoding": "br", "Content-MD5": "bad"})
    assert status == 400 and answer.startswith(b"<?xml") and b"<Code>InvalidDigest</Code>" in answer, answer


def test_non_ascii_user_metadata_round_trips_byte_exact(cluster, bucket):
    # boto3 refuses non-ASCII metadata itself (botocore's validate_ascii_metadata), so raw
    # requests send the UTF-8 bytes (signed as such): they come back exactly as they were sent,
    # through the gateway, a storage node's file and back.
    s3 = cluster.s3()
    for raw in ("caf\u00e9 \u65e5\u672c \U0001f600".encode(), b"plain"):
        status, _, answer = _raw(cluster, "PUT", f"/{bucket}/raw-meta", b"x", {"x-amz-meta-raw": raw.decode()})
        assert status == 200, answer
        for method in ("HEAD", "GET"):
            status, headers, _ = _raw(cluster, method, f"/{bucket}/raw-meta")
            assert status == 200
            assert headers["x-amz-meta-raw"].encode("latin-1") == raw
        # boto3 reads header bytes as Latin-1, as http.client does.
        assert s3.head_object(Bucket=bucket, Key="raw-meta")["Metadata"]["raw"] == raw.decode("latin-1")


def test_headers_and_checksums_survive_a_replica_repair(tmp_path):
    """A write only storage-0 got (made behind the gateway's back) is copied to storage-1 by
    anti-entropy with its standard headers and its checksum as they are, a multipart object's
    composite checksum included (it cannot be recomputed from the bytes)."""
    import asyncio
    import time

    from conftest import running_cluster
    from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
    from nearfaas.replication.repair import with_trailer
    from nearfaas.replication.version import HybridClock
    from nearfaas.s3.backend import ObjectInfo
    from nearfaas.s3.node_client import NodeClient
    from nearfaas.spec.cluster import ReplicationSpec

    composite = f"{_b64('crc32c', b'two part checksums')}-2"
    stored = {"cache-control": "no-cache", "content-encoding": "gzip", "content-language": "fr",
              "x-amz-storage-class": "ONEZONE_IA", "x-amz-checksum-crc32c": composite, "x-amz-checksum-type": "COMPOSITE"}
    with running_cluster(tmp_path / "state", replication=ReplicationSpec(factor=2, anti_entropy=1.0)) as cluster:
        cluster.s3().create_bucket(Bucket="repaired")
        version = HybridClock("test").now()

        async def write_on_storage_0_only():
            async def body():
                yield b"\x1f\x8b pretend gzip"

            url = cluster.node("storage-0")["url"]
            source = ObjectInfo("repaired", "k", 15, "0" * 32 + "-2", 1_700_000_000.0, version=version, headers=stored)
            async with NodeClient("storage-0", url, credentials=(INTERNAL_ACCESS_KEY, cluster.layout["internal_secret"])) as node:
                await node.put_object("repaired", "k", with_trailer(body(), version), version_trailer=len(version),
                                      copy_of=source, headers=stored)

        asyncio.run(write_on_storage_0_only())
        replica = cluster.s3_at(cluster.node("storage-1")["url"])
        deadline = time.monotonic() + 20
        while True:
            try:
                head = replica.head_object(Bucket="repaired", Key="k", ChecksumMode="ENABLED")
                break
            except ClientError:
                assert time.monotonic() < deadline, "anti-entropy did not copy the object within 20 s"
                time.sleep(0.2)
        assert head["ETag"] == '"' + "0" * 32 + '-2"'
        assert (head["CacheControl"], head["ContentEncoding"], head["ContentLanguage"], head["StorageClass"]) == \
            ("no-cache", "gzip", "fr", "ONEZONE_IA")
        assert (head["ChecksumCRC32C"], head["ChecksumType"]) == (composite, "COMPOSITE")
        got = cluster.s3().get_object(Bucket="repaired", Key="k", ChecksumMode="ENABLED")
        assert got["Body"].read() == b"\x1f\x8b pretend gzip" and got["ChecksumCRC32C"] == composite


def test_non_ascii_metadata_of_a_multipart_upload_round_trips_byte_exact(cluster, bucket):
    raw = "\u00e9t\u00e9 \u2603".encode()
    status, _, answer = _raw(cluster, "POST", f"/{bucket}/mp-meta?uploads=", b"", {"x-amz-meta-raw": raw.decode()})
    assert status == 200, answer
    upload_id = answer.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    s3 = cluster.s3()
    part = s3.upload_part(Bucket=bucket, Key="mp-meta", UploadId=upload_id, PartNumber=1, Body=b"x")
    s3.complete_multipart_upload(Bucket=bucket, Key="mp-meta", UploadId=upload_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    for method in ("HEAD", "GET"):
        status, headers, _ = _raw(cluster, method, f"/{bucket}/mp-meta")
        assert status == 200 and headers["x-amz-meta-raw"].encode("latin-1") == raw
