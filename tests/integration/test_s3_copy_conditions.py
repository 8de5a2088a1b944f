"""S3 that real clients trust (issue 22): CopyObject and UploadPartCopy, conditional requests on
PUT / GET / HEAD / DELETE / CompleteMultipartUpload / copies (atomic against concurrent writers),
a retried completion, and the listing fixes. boto3 against the shared local cluster."""

from __future__ import annotations

import threading
import time
import uuid
from email.utils import formatdate

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

pytestmark = pytest.mark.integration


def _code(exc: ClientError) -> tuple[int, str]:
    return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]


def _fails(expected_status: int, call, *args, **kwargs) -> str:
    with pytest.raises(ClientError) as caught:
        call(*args, **kwargs)
    status, code = _code(caught.value)
    assert status == expected_status, (status, code)
    return code


@pytest.fixture(scope="module")
def s3(cluster):
    client = cluster.s3()
    for bucket in ("copy-a", "copy-b"):
        client.create_bucket(Bucket=bucket)
    return client


def _signed(cluster, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> requests.Response:
    access, secret = cluster.keys(cluster.url)
    request = AWSRequest(method, f"{cluster.url}{path}", data=body, headers=dict(headers or {}))
    S3SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(request)
    return requests.request(method, f"{cluster.url}{path}", data=body, headers=dict(request.headers), timeout=30)


# -- CopyObject / UploadPartCopy -------------------------------------------------------------------

def test_copy_object_within_and_across_buckets_keeps_or_replaces_metadata(s3):
    s3.put_object(Bucket="copy-a", Key="src.txt", Body=b"copy me" * 1000, ContentType="text/plain", Metadata={"who": "a"})
    got = s3.copy_object(Bucket="copy-b", Key="dst.txt", CopySource={"Bucket": "copy-a", "Key": "src.txt"})
    source = s3.head_object(Bucket="copy-a", Key="src.txt")
    assert got["CopyObjectResult"]["ETag"] == source["ETag"]
    copied = s3.get_object(Bucket="copy-b", Key="dst.txt")
    assert copied["Body"].read() == b"copy me" * 1000
    assert copied["ContentType"] == "text/plain" and copied["Metadata"] == {"who": "a"}
    s3.copy_object(Bucket="copy-a", Key="src.txt", CopySource="copy-a/src.txt", MetadataDirective="REPLACE",
                   ContentType="application/json", Metadata={"who": "b"})
    replaced = s3.head_object(Bucket="copy-a", Key="src.txt")
    assert replaced["ContentType"] == "application/json" and replaced["Metadata"] == {"who": "b"}
    # A copy onto itself that changes nothing is refused, as S3 refuses it.
    assert _fails(400, s3.copy_object, Bucket="copy-a", Key="src.txt", CopySource="copy-a/src.txt") == "InvalidRequest"
    assert _fails(404, s3.copy_object, Bucket="copy-b", Key="x", CopySource="copy-a/missing") == "NoSuchKey"


def test_copy_source_conditions_answer_412(s3):
    s3.put_object(Bucket="copy-a", Key="cond-src", Body=b"v1")
    etag = s3.head_object(Bucket="copy-a", Key="cond-src")["ETag"]
    assert _fails(412, s3.copy_object, Bucket="copy-b", Key="cond-dst", CopySource="copy-a/cond-src",
                  CopySourceIfMatch='"0123"') == "PreconditionFailed"
    assert _fails(412, s3.copy_object, Bucket="copy-b", Key="cond-dst", CopySource="copy-a/cond-src",
                  CopySourceIfNoneMatch=etag) == "PreconditionFailed"
    s3.copy_object(Bucket="copy-b", Key="cond-dst", CopySource="copy-a/cond-src", CopySourceIfMatch=etag)
    assert s3.get_object(Bucket="copy-b", Key="cond-dst")["Body"].read() == b"v1"


def test_upload_part_copy_assembles_ranges_of_a_source(s3):
    data = bytes(range(256)) * 40960  # 10 MiB
    s3.put_object(Bucket="copy-a", Key="big", Body=data)
    upload = s3.create_multipart_upload(Bucket="copy-b", Key="assembled")["UploadId"]
    half = 5 * 1024 * 1024
    parts = []
    for number, span in ((1, f"bytes=0-{half - 1}"), (2, f"bytes={half}-{len(data) - 1}")):
        got = s3.upload_part_copy(Bucket="copy-b", Key="assembled", UploadId=upload, PartNumber=number,
                                  CopySource="copy-a/big", CopySourceRange=span)
        parts.append({"PartNumber": number, "ETag": got["CopyPartResult"]["ETag"]})
    assert _fails(400, s3.upload_part_copy, Bucket="copy-b", Key="assembled", UploadId=upload, PartNumber=3,
                  CopySource="copy-a/big", CopySourceRange=f"bytes=0-{len(data)}") == "InvalidArgument"
    done = s3.complete_multipart_upload(Bucket="copy-b", Key="assembled", UploadId=upload, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket="copy-b", Key="assembled")["Body"].read() == data
    # A client that lost the answer and completes again gets 200 and the same ETag, as from S3.
    again = s3.complete_multipart_upload(Bucket="copy-b", Key="assembled", UploadId=upload, MultipartUpload={"Parts": parts})
    assert again["ETag"] == done["ETag"]


# -- conditional writes ----------------------------------------------------------------------------

def test_conditional_puts_and_deletes(s3):
    key = f"cond-{uuid.uuid4().hex}"
    s3.put_object(Bucket="copy-a", Key=key, Body=b"first", IfNoneMatch="*")
    assert _fails(412, s3.put_object, Bucket="copy-a", Key=key, Body=b"clobber", IfNoneMatch="*") == "PreconditionFailed"
    assert s3.get_object(Bucket="copy-a", Key=key)["Body"].read() == b"first"
    etag = s3.head_object(Bucket="copy-a", Key=key)["ETag"]
    assert _fails(412, s3.put_object, Bucket="copy-a", Key=key, Body=b"x", IfMatch='"00"') == "PreconditionFailed"
    s3.put_object(Bucket="copy-a", Key=key, Body=b"second", IfMatch=etag)
    assert _fails(404, s3.put_object, Bucket="copy-a", Key=key + "-none", Body=b"x", IfMatch=etag) == "NoSuchKey"
    assert _fails(412, s3.delete_object, Bucket="copy-a", Key=key, IfMatch=etag) == "PreconditionFailed"  # the old ETag
    assert s3.get_object(Bucket="copy-a", Key=key)["Body"].read() == b"second"
    s3.delete_object(Bucket="copy-a", Key=key, IfMatch=s3.head_object(Bucket="copy-a", Key=key)["ETag"])
    assert _fails(404, s3.head_object, Bucket="copy-a", Key=key) == "404"
    # A multipart upload may not replace an object that appeared meanwhile.
    upload = s3.create_multipart_upload(Bucket="copy-a", Key=key)["UploadId"]
    part = s3.upload_part(Bucket="copy-a", Key=key, UploadId=upload, PartNumber=1, Body=b"mpu")
    s3.put_object(Bucket="copy-a", Key=key, Body=b"raced")
    assert _fails(412, s3.complete_multipart_upload, Bucket="copy-a", Key=key, UploadId=upload, IfNoneMatch="*",
                  MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}) == "PreconditionFailed"


def test_concurrent_if_none_match_writers_exactly_one_wins(s3, cluster):
    for _ in range(3):
        key = f"race-{uuid.uuid4().hex}"
        writers = 8
        barrier = threading.Barrier(writers)
        outcomes: list = [None] * writers

        def write(i: int, barrier=barrier, key=key, outcomes=outcomes) -> None:
            client = cluster.s3()
            barrier.wait()
            try:
                client.put_object(Bucket="copy-a", Key=key, Body=f"writer {i}".encode(), IfNoneMatch="*")
                outcomes[i] = 200
            except ClientError as exc:
                outcomes[i] = _code(exc)[0]

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, o in enumerate(outcomes) if o == 200]
        assert len(winners) == 1 and all(o in (200, 409, 412) for o in outcomes), outcomes
        assert s3.get_object(Bucket="copy-a", Key=key)["Body"].read() == f"writer {winners[0]}".encode()


def test_conditional_reads(s3):
    s3.put_object(Bucket="copy-a", Key="dated", Body=b"x")
    future, past = formatdate(time.time() + 3600, usegmt=True), formatdate(time.time() - 3600, usegmt=True)
    for call in (s3.get_object, s3.head_object):
        assert _fails(304, call, Bucket="copy-a", Key="dated", IfModifiedSince=future) in ("304", "NotModified")
        assert _fails(412, call, Bucket="copy-a", Key="dated", IfUnmodifiedSince=past) in ("412", "PreconditionFailed")
    assert s3.get_object(Bucket="copy-a", Key="dated", IfModifiedSince=past)["Body"].read() == b"x"
    etag = s3.head_object(Bucket="copy-a", Key="dated")["ETag"]
    # If-Match holds, so a failing If-Unmodified-Since is not looked at (RFC 7232, as S3 does).
    assert s3.get_object(Bucket="copy-a", Key="dated", IfMatch=etag, IfUnmodifiedSince=past)["Body"].read() == b"x"


# -- listings ------------------------------------------------------------------------------------

def test_listing_fixes(s3, cluster):
    for key in ("a b/1", "a b/2", "c"):
        s3.put_object(Bucket="copy-b", Key=key, Body=b"1")
    # boto3 asks ListObjects (v1) with encoding-type=url and decodes only what S3 encodes.
    assert s3.list_objects(Bucket="copy-b", Prefix="a b/")["Prefix"] == "a b/"
    assert s3.list_objects_v2(Bucket="copy-b", Prefix="a b/")["Prefix"] == "a b/"
    resp = _signed(cluster, "GET", "/copy-b?list-type=2&continuation-token=")
    assert resp.status_code == 200 and resp.text.count("<Key>") >= 3, resp.text[:300]
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "nearfaas-intermediates" not in names and {"copy-a", "copy-b"} <= set(names)
    first = s3.list_buckets(MaxBuckets=1)
    assert len(first["Buckets"]) == 1 and first["ContinuationToken"]
    rest = s3.list_buckets(ContinuationToken=first["ContinuationToken"])
    assert [b["Name"] for b in first["Buckets"] + rest["Buckets"]] == names


def test_list_parts_pages_through_an_upload(s3):
    upload = s3.create_multipart_upload(Bucket="copy-a", Key="parts")["UploadId"]
    etags = [s3.upload_part(Bucket="copy-a", Key="parts", UploadId=upload, PartNumber=n, Body=bytes([n]) * (n * 10))["ETag"]
             for n in (1, 2, 3)]
    listed = s3.list_parts(Bucket="copy-a", Key="parts", UploadId=upload)
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed["Parts"]] == [(n, etags[n - 1], n * 10) for n in (1, 2, 3)]
    first = s3.list_parts(Bucket="copy-a", Key="parts", UploadId=upload, MaxParts=2)
    assert first["IsTruncated"] and [p["PartNumber"] for p in first["Parts"]] == [1, 2]
    rest = s3.list_parts(Bucket="copy-a", Key="parts", UploadId=upload, PartNumberMarker=first["NextPartNumberMarker"])
    assert not rest["IsTruncated"] and [p["PartNumber"] for p in rest["Parts"]] == [3]
    s3.abort_multipart_upload(Bucket="copy-a", Key="parts", UploadId=upload)
    assert _fails(404, s3.list_parts, Bucket="copy-a", Key="parts", UploadId=upload) == "NoSuchUpload"


def test_conditional_writes_hold_while_a_replica_is_stopped_and_after_it_returns(fresh_cluster):
    import os
    import signal

    from nearfaas.cluster import launcher

    s3 = fresh_cluster.s3()
    s3.create_bucket(Bucket="cond-hung")
    pid = next(p["pid"] for p in launcher.read_layout(fresh_cluster.state_dir)["processes"] if p["name"] == "storage-1")
    os.kill(pid, signal.SIGSTOP)
    try:
        s3.put_object(Bucket="cond-hung", Key="once", Body=b"first", IfNoneMatch="*")  # a degraded write, with a hint
        assert _fails(412, s3.put_object, Bucket="cond-hung", Key="once", Body=b"second", IfNoneMatch="*") == "PreconditionFailed"
    finally:
        os.kill(pid, signal.SIGCONT)
    # storage-1 is owed the write: the condition still sees it while the hint is replayed and after.
    for _ in range(3):
        assert _fails(412, s3.put_object, Bucket="cond-hung", Key="once", Body=b"third", IfNoneMatch="*") == "PreconditionFailed"
        time.sleep(1)
    assert s3.get_object(Bucket="cond-hung", Key="once")["Body"].read() == b"first"


def test_a_copy_keeps_the_sources_standard_headers_and_checksum_or_takes_the_requests(s3):
    s3.put_object(Bucket="copy-a", Key="hdr-src", Body=b"headers travel", CacheControl="max-age=60", ContentEncoding="gzip",
                  ContentDisposition="attachment", ChecksumAlgorithm="CRC32C")
    s3.copy_object(Bucket="copy-b", Key="hdr-dst", CopySource="copy-a/hdr-src")
    got = s3.head_object(Bucket="copy-b", Key="hdr-dst", ChecksumMode="ENABLED")
    source = s3.head_object(Bucket="copy-a", Key="hdr-src", ChecksumMode="ENABLED")
    assert (got["CacheControl"], got["ContentEncoding"], got["ContentDisposition"]) == ("max-age=60", "gzip", "attachment")
    assert got["ChecksumCRC32C"] == source["ChecksumCRC32C"]
    s3.copy_object(Bucket="copy-b", Key="hdr-dst", CopySource="copy-a/hdr-src", MetadataDirective="REPLACE",
                   CacheControl="no-store")
    replaced = s3.head_object(Bucket="copy-b", Key="hdr-dst")
    assert replaced["CacheControl"] == "no-store" and "ContentEncoding" not in replaced
    assert _fails(501, s3.copy_object, Bucket="copy-b", Key="hdr-dst", CopySource="copy-a/hdr-src",
                  ACL="public-read") == "NotImplemented"


def _replicas(cluster, bucket: str, key: str) -> list[tuple[str, str] | None]:
    """(ETag, x-nearfaas-version) of the key on every storage node, read there directly; None
    where a node does not hold it (yet: a replica owed the write gets it from its hint)."""
    found = []
    for node in (n for n in cluster.layout["nodes"] if n["kind"] == "storage"):
        try:
            head = cluster.s3_at(node["url"]).head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] != 404:
                raise
            found.append(None)
            continue
        found.append((head["ETag"], head["ResponseMetadata"]["HTTPHeaders"]["x-nearfaas-version"]))
    return found


def test_a_copy_whose_source_is_on_every_replica_is_made_in_place(s3, cluster):
    """Same-node fast path: each replica copies its own replica of the source; no object byte
    crosses a link, and every replica holds the same copy under the same version."""
    data = bytes(range(256)) * 8192  # 2 MiB
    s3.put_object(Bucket="copy-a", Key="local-src", Body=data, ContentType="text/csv", CacheControl="max-age=9",
                  ChecksumAlgorithm="CRC32C")
    got = s3.copy_object(Bucket="copy-b", Key="local-dst", CopySource="copy-a/local-src", ChecksumAlgorithm="CRC32C")
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-nearfaas-copy"] == "in-place"
    copied = s3.get_object(Bucket="copy-b", Key="local-dst", ChecksumMode="ENABLED")
    assert copied["Body"].read() == data and copied["ContentType"] == "text/csv" and copied["CacheControl"] == "max-age=9"
    assert copied["ChecksumCRC32C"] == s3.head_object(Bucket="copy-a", Key="local-src", ChecksumMode="ENABLED")["ChecksumCRC32C"]
    replicas = _replicas(cluster, "copy-b", "local-dst")
    assert len(set(replicas)) == 1 and replicas[0][0] == got["CopyObjectResult"]["ETag"]
    # REPLACE and the source's conditions are honoured on the replicas as through the gateway
    s3.copy_object(Bucket="copy-b", Key="local-dst", CopySource="copy-a/local-src", MetadataDirective="REPLACE",
                   ContentType="application/json", Metadata={"who": "replica"})
    head = s3.head_object(Bucket="copy-b", Key="local-dst")
    assert head["ContentType"] == "application/json" and head["Metadata"] == {"who": "replica"}
    assert _fails(412, s3.copy_object, Bucket="copy-b", Key="local-dst", CopySource="copy-a/local-src",
                  CopySourceIfMatch='"0123"') == "PreconditionFailed"
    assert _fails(412, s3.copy_object, Bucket="copy-b", Key="local-dst", CopySource="copy-a/local-src",
                  IfNoneMatch="*") == "PreconditionFailed"
    # a replica may not be told to copy by anyone but the gateway
    node = next(n for n in cluster.layout["nodes"] if n["kind"] == "storage")
    raw = requests.put(f"{node['url']}/copy-b/forged", headers={"x-amz-copy-source": "copy-a/local-src",
                                                                "x-nearfaas-version": "0000000000000001.gw"}, timeout=10)
    assert raw.status_code == 403


def test_copies_racing_overwrites_of_their_source_leave_identical_replicas(s3, cluster):
    """A concurrent writer: the source is overwritten while it is copied in place. A replica
    that finds its source changed is owed the copy; no two replicas hold different bytes."""
    s3.put_object(Bucket="copy-a", Key="moving-src", Body=b"0" * 4096)
    stop = threading.Event()

    def overwrite():
        n = 0
        while not stop.is_set():
            n += 1
            s3.put_object(Bucket="copy-a", Key="moving-src", Body=str(n).encode() * 4096)

    writer = threading.Thread(target=overwrite)
    writer.start()
    try:
        etags = [s3.copy_object(Bucket="copy-b", Key=f"moving-dst-{i}", CopySource="copy-a/moving-src")["CopyObjectResult"]["ETag"]
                 for i in range(20)]
    finally:
        stop.set()
        writer.join()
    for i, etag in enumerate(etags):
        deadline = time.monotonic() + 10
        while (len(set(held := _replicas(cluster, "copy-b", f"moving-dst-{i}"))) != 1 or None in held) and time.monotonic() < deadline:
            time.sleep(0.1)  # a replica owed the copy gets it by its hint
        held = _replicas(cluster, "copy-b", f"moving-dst-{i}")
        assert None not in held and len(set(held)) == 1 and held[0][0] == etag, (i, held)
