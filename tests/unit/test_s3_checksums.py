"""Issue 22 on one storage node's S3 front end (no cluster): the flexible checksums (s3/checksums.py)
verified, stored in the object file and returned on request, multipart composites and full-object
CRCs, standard headers kept, Content-Encoding stored as sent, ACLs, and object files written
before these fields existed still read."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

import pytest
from botocore.exceptions import ClientError

from s3_fixtures import *  # noqa: F403 - the server, s3 and bucket fixtures
from s3_fixtures import code_of, raw, xml_code

from nearfaas.node.objectfile import encode_header, header_from_info, info_from_header, object_path, read_header
from nearfaas.s3 import checksums
from nearfaas.s3.backend import ObjectInfo


def b64(kind: str, data: bytes) -> str:
    c = checksums.Checksum(kind)
    c.update(data)
    return c.b64()


def test_known_answers_match_botocore_and_the_standard_library():
    from botocore.httpchecksum import CrtCrc32cChecksum, CrtCrc64NvmeChecksum

    data = b"The quick brown fox jumps over the lazy dog"
    for kind, cls in (("crc32c", CrtCrc32cChecksum), ("crc64nvme", CrtCrc64NvmeChecksum)):
        reference = cls()
        reference.update(data)
        assert b64(kind, data) == reference.b64digest()
    assert b64("crc32", data) == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    assert b64("sha256", data) == base64.b64encode(hashlib.sha256(data).digest()).decode()
    c = checksums.Checksum("crc32c")  # streaming equals one shot
    for piece in (data[:5], data[5:20], data[20:]):
        c.update(piece)
    assert c.b64() == b64("crc32c", data)


def test_stored_request_headers_drop_aws_chunked_and_check_the_storage_class():
    stored = checksums.stored_request_headers({"content-encoding": "gzip,aws-chunked", "cache-control": "no-cache"})
    assert stored == {"content-encoding": "gzip", "cache-control": "no-cache"}
    assert checksums.stored_request_headers({"content-encoding": "aws-chunked"}) == {}
    with pytest.raises(Exception) as err:
        checksums.stored_request_headers({"x-amz-storage-class": "GOLD"})
    assert err.value.code == "InvalidStorageClass"


@pytest.mark.parametrize("headers", [{"x-amz-acl": "public-read"}, {"x-amz-grant-read": "id=x"}])
def test_only_the_private_acl_is_accepted(headers):
    checksums.check_acl({"x-amz-acl": "private"})
    with pytest.raises(Exception) as err:
        checksums.check_acl(headers)
    assert err.value.code == "NotImplemented" and err.value.status == 501 and "private" in err.value.message


@pytest.mark.parametrize("kind", checksums.KINDS)
def test_each_checksum_is_verified_stored_and_returned_only_on_request(server, s3, bucket, kind):
    body = b"node-level body" * 10
    status, _, answer = raw(server, "PUT", f"/{bucket}/k", body, {f"x-amz-checksum-{kind}": b64(kind, b"wrong")})
    assert status == 400 and xml_code(answer) == "BadDigest"
    status, headers, _ = raw(server, "PUT", f"/{bucket}/k", body, {f"x-amz-checksum-{kind}": b64(kind, body)})
    assert status == 200 and headers[f"x-amz-checksum-{kind}"] == b64(kind, body)
    _, plain, _ = raw(server, "HEAD", f"/{bucket}/k")
    assert f"x-amz-checksum-{kind}" not in plain
    for method in ("HEAD", "GET"):
        _, asked, _ = raw(server, method, f"/{bucket}/k", None, {"x-amz-checksum-mode": "ENABLED"})
        assert asked[f"x-amz-checksum-{kind}"] == b64(kind, body) and asked["x-amz-checksum-type"] == "FULL_OBJECT"
    # In the object file itself, so it survives a restart.
    fd = os.open(object_path(server.store.root, bucket, "k"), os.O_RDONLY)
    try:
        _, fields = read_header(fd)
    finally:
        os.close(fd)
    assert fields["headers"][f"x-amz-checksum-{kind}"] == b64(kind, body)


def test_the_algorithm_alone_has_the_checksum_computed(server, bucket):
    status, headers, _ = raw(server, "PUT", f"/{bucket}/k", b"abc", {"x-amz-sdk-checksum-algorithm": "CRC64NVME"})
    assert status == 200 and headers["x-amz-checksum-crc64nvme"] == b64("crc64nvme", b"abc")


def test_a_trailing_checksum_in_an_aws_chunked_body(server, bucket):
    data = b"trailer" * 50

    def put(value):
        body = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n" + f"x-amz-checksum-crc32c:{value}\r\n\r\n".encode()
        return raw(server, "PUT", f"/{bucket}/t", body, {"Content-Encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32c",
                                                        "x-amz-decoded-content-length": str(len(data)),
                                                        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"})

    status, _, answer = put(b64("crc32c", b"nope"))
    assert status == 400 and xml_code(answer) == "BadDigest"
    status, _, _ = put(b64("crc32c", data))
    assert status == 200
    status, headers, got = raw(server, "GET", f"/{bucket}/t", None, {"x-amz-checksum-mode": "ENABLED"})
    assert got == data and headers["x-amz-checksum-crc32c"] == b64("crc32c", data)
    assert "content-encoding" not in headers  # aws-chunked is framing, not the object's encoding


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_content_encoding_is_stored_and_the_bytes_kept_as_sent(server, bucket, encoding):
    body = b"\x1f\x8b not really compressed"
    status, _, answer = raw(server, "PUT", f"/{bucket}/e", body, {"Content-Encoding": encoding})
    assert status == 200, answer
    status, headers, got = raw(server, "GET", f"/{bucket}/e")
    assert status == 200 and got == body and headers["content-encoding"] == encoding


def test_multipart_composite_and_full_object_checksums(server, s3, bucket):
    parts = [b"A" * 5, b"BB"]  # the test server's minimum part size is 5 bytes
    for kind, checksum_type in (("crc32c", "COMPOSITE"), ("crc32", "FULL_OBJECT"), ("crc64nvme", None), ("sha1", None)):
        extra = {"ChecksumType": checksum_type} if checksum_type else {}
        upload = s3.create_multipart_upload(Bucket=bucket, Key=kind, ChecksumAlgorithm=kind.upper(), CacheControl="no-store",
                                            **extra)
        done = []
        for n, data in enumerate(parts, 1):
            answer = s3.upload_part(Bucket=bucket, Key=kind, UploadId=upload["UploadId"], PartNumber=n, Body=data,
                                    ChecksumAlgorithm=kind.upper())
            done.append({"PartNumber": n, "ETag": answer["ETag"]})
        s3.complete_multipart_upload(Bucket=bucket, Key=kind, UploadId=upload["UploadId"], MultipartUpload={"Parts": done})
        head = s3.head_object(Bucket=bucket, Key=kind, ChecksumMode="ENABLED")
        assert head["CacheControl"] == "no-store"
        if (checksum_type or ("FULL_OBJECT" if kind == "crc64nvme" else "COMPOSITE")) == "FULL_OBJECT":
            assert head["Checksum" + kind.upper()] == b64(kind, b"".join(parts))
            assert head["ChecksumType"] == "FULL_OBJECT"
        else:
            raw_sums = b"".join(base64.b64decode(b64(kind, p)) for p in parts)
            assert head["Checksum" + kind.upper()] == f"{b64(kind, raw_sums)}-2"
            assert head["ChecksumType"] == "COMPOSITE"


def test_sha_checksums_cannot_be_full_object(s3, bucket):
    with pytest.raises(ClientError) as err:
        s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT")
    assert code_of(err) == ("InvalidRequest", 400)


def test_a_part_without_the_uploads_checksum_cannot_complete(server, s3, bucket):
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k", ChecksumAlgorithm="SHA256")
    status, headers, _ = raw(server, "PUT", f"/{bucket}/k?partNumber=1&uploadId={upload['UploadId']}", b"abcdef")
    assert status == 200
    with pytest.raises(ClientError) as err:
        s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": headers["etag"]}]})
    assert code_of(err) == ("InvalidPart", 400)


def test_non_utf8_metadata_is_refused_not_mangled(server, bucket):
    # aiohttp can only send back header values that are text: bytes that are not UTF-8 are
    # refused up front (400) rather than stored and returned re-encoded.
    status, _, answer = raw(server, "PUT", f"/{bucket}/m", b"x", {"x-amz-meta-a": b"caf\xe9"})
    assert status == 400 and xml_code(answer) == "InvalidArgument"
    status, _, _ = raw(server, "PUT", f"/{bucket}/m", b"x", {"x-amz-meta-a": "café ☕".encode()})
    assert status == 200
    _, headers, _ = raw(server, "HEAD", f"/{bucket}/m")
    assert headers["x-amz-meta-a"].encode("latin-1") == "café ☕".encode()


def test_object_files_without_the_new_fields_still_read():
    info = ObjectInfo("b", "k", 3, "e" * 32, 1.0, version="v")
    fields = header_from_info(info)
    assert "headers" not in fields  # an object with no stored headers is written as before
    assert info_from_header("b", fields).headers == {}
    with_headers = ObjectInfo("b", "k", 3, "e" * 32, 1.0, headers={"cache-control": "x", "x-amz-checksum-crc32": "AAAAAA=="})
    assert info_from_header("b", header_from_info(with_headers)).headers == with_headers.headers
    assert len(encode_header(header_from_info(with_headers), 4096)) == 4096
