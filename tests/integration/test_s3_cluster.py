"""The cluster's S3 endpoint driven by boto3 (and raw HTTP for what boto3 will not send)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
from urllib.parse import urlsplit

import pytest
import requests
from botocore.exceptions import ClientError

from nearfaas.placement.replicas import StorageNode, replicas_for

pytestmark = pytest.mark.integration


def _code(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def test_put_get_head_range_delete(cluster, bucket):
    s3 = cluster.s3()
    body = os.urandom(100_000)
    put = s3.put_object(Bucket=bucket, Key="a/b.bin", Body=body, Metadata={"owner": "tests"}, ContentType="application/x-test")
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="a/b.bin")
    assert got["Body"].read() == body and got["Metadata"] == {"owner": "tests"} and got["ContentType"] == "application/x-test"
    head = s3.head_object(Bucket=bucket, Key="a/b.bin")
    assert head["ContentLength"] == len(body)
    assert s3.get_object(Bucket=bucket, Key="a/b.bin", Range="bytes=10-19")["Body"].read() == body[10:20]
    assert s3.get_object(Bucket=bucket, Key="a/b.bin", Range="bytes=-5")["Body"].read() == body[-5:]
    assert s3.get_object(Bucket=bucket, Key="a/b.bin", Range="bytes=99990-")["Body"].read() == body[99990:]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="a/b.bin", Range="bytes=200000-300000")
    assert _code(e) == "InvalidRange"
    s3.delete_object(Bucket=bucket, Key="a/b.bin")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="a/b.bin")
    assert _code(e) == "NoSuchKey"
    s3.delete_object(Bucket=bucket, Key="a/b.bin")  # idempotent


def test_objects_are_replicated_with_one_copy_on_a_dscs_node(cluster, bucket):
    s3 = cluster.s3()
    storage = [n for n in cluster.layout["nodes"] if n["kind"] == "storage"]
    ring = [StorageNode(n["name"], n["class"]) for n in storage]
    for i in range(20):
        key = f"rep/{i}"
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        expected = {n.name for n in replicas_for(ring, bucket, key, 2, dscs_replica=True)}
        holders = set()
        for node in storage:
            direct = cluster.s3_at(node["url"])
            try:
                direct.head_object(Bucket=bucket, Key=key)
                holders.add(node["name"])
            except ClientError:
                pass
        assert holders == expected
        assert any(n["class"] == "dscs" and n["name"] in holders for n in storage)


def test_list_prefix_delimiter_and_pagination(cluster, bucket):
    s3 = cluster.s3()
    keys = [f"photos/2024/{i:02d}.jpg" for i in range(7)] + [f"photos/2025/{i:02d}.jpg" for i in range(3)] + ["readme.txt", "notes/a.txt"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [c["Prefix"] for c in top["CommonPrefixes"]] == ["notes/", "photos/"]
    assert [o["Key"] for o in top["Contents"]] == ["readme.txt"]
    years = s3.list_objects_v2(Bucket=bucket, Prefix="photos/", Delimiter="/")
    assert [c["Prefix"] for c in years["CommonPrefixes"]] == ["photos/2024/", "photos/2025/"]
    seen = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 3}):
        assert page["KeyCount"] <= 3
        seen += [o["Key"] for o in page.get("Contents", [])]
    assert seen == sorted(keys)
    # Paging with a delimiter must not repeat a common prefix.
    prefixes = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 1}):
        prefixes += [c["Prefix"] for c in page.get("CommonPrefixes", [])] + [o["Key"] for o in page.get("Contents", [])]
    assert prefixes == ["notes/", "photos/", "readme.txt"]
    assert s3.list_objects_v2(Bucket=bucket, StartAfter="photos/2025/01.jpg")["Contents"][0]["Key"] == "photos/2025/02.jpg"


def test_multipart_upload(cluster, bucket):
    s3 = cluster.s3()
    parts_data = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024), os.urandom(1234)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big.bin")
    parts = []
    for n, data in enumerate(parts_data, start=1):
        etag = s3.upload_part(Bucket=bucket, Key="big.bin", UploadId=upload["UploadId"], PartNumber=n, Body=data)["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    done = s3.complete_multipart_upload(Bucket=bucket, Key="big.bin", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts})
    expected = hashlib.md5(b"".join(hashlib.md5(d).digest() for d in parts_data)).hexdigest() + "-3"
    assert done["ETag"].strip('"') == expected
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == b"".join(parts_data)
    aborted = s3.create_multipart_upload(Bucket=bucket, Key="gone.bin")
    s3.abort_multipart_upload(Bucket=bucket, Key="gone.bin", UploadId=aborted["UploadId"])
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="gone.bin", UploadId=aborted["UploadId"], PartNumber=1, Body=b"x")
    assert _code(e) == "NoSuchUpload"
    # boto3's managed transfer uses multipart above its threshold.
    path = cluster.state_dir.parent / "upload.bin"
    path.write_bytes(os.urandom(9 * 1024 * 1024))
    from boto3.s3.transfer import TransferConfig

    s3.upload_file(str(path), bucket, "managed.bin", Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
    assert s3.get_object(Bucket=bucket, Key="managed.bin")["Body"].read() == path.read_bytes()


def test_bucket_lifecycle_and_errors(cluster):
    s3 = cluster.s3()
    s3.create_bucket(Bucket="lifecycle")
    assert "lifecycle" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.put_object(Bucket="lifecycle", Key="k", Body=b"v")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="lifecycle")
    assert _code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket="lifecycle", Key="k")
    s3.delete_bucket(Bucket="lifecycle")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="lifecycle", Key="k", Body=b"v")
    assert _code(e) == "NoSuchBucket"
    for bad in ("ab", "UPPER", "under_score", "-dash", "192.168.1.1", "system"):
        with pytest.raises(ClientError) as e:
            s3.create_bucket(Bucket=bad)
        assert _code(e) == "InvalidBucketName", bad


def test_bad_digest_and_invalid_digest(cluster, bucket):
    url = f"{cluster.url}/{bucket}/digest"
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    resp = requests.put(url, data=b"payload", headers=cluster.signed_headers("PUT", url, {"Content-MD5": wrong}))
    assert resp.status_code == 400 and "<Code>BadDigest</Code>" in resp.text
    resp = requests.put(url, data=b"payload", headers=cluster.signed_headers("PUT", url, {"Content-MD5": "not-base64!"}))
    assert resp.status_code == 400 and "<Code>InvalidDigest</Code>" in resp.text
    assert requests.get(url, headers=cluster.signed_headers("GET", url)).status_code == 404  # nothing was stored
    good = base64.b64encode(hashlib.md5(b"payload").digest()).decode()
    assert requests.put(url, data=b"payload", headers=cluster.signed_headers("PUT", url, {"Content-MD5": good})).status_code == 200


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "nul\x00byte", "ctl\x01"])
def test_dangerous_keys_are_rejected(cluster, bucket, key):
    from urllib.parse import quote

    resp = requests.put(f"{cluster.url}/{bucket}/{quote(key, safe='')}", data=b"x", headers=cluster.signed_headers("PUT", f"{cluster.url}/{bucket}/{quote(key, safe='')}"))
    # An escaped "/" is refused as a second spelling of the path (InvalidURI, s3/sigv4.py) before the key is read.
    assert resp.status_code == 400 and ("<Code>InvalidObjectName</Code>" in resp.text or "<Code>InvalidURI</Code>" in resp.text)
    assert not any(p.name == "escape" for p in cluster.state_dir.rglob("escape"))


def test_oversized_body_is_rejected_before_it_is_read(cluster, bucket):
    parts = urlsplit(cluster.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.putrequest("PUT", f"/{bucket}/huge")
    conn.putheader("Content-Length", str(6 * 1024**4))  # 6 TiB, over the 5 GiB S3 limit
    for name, value in cluster.signed_headers("PUT", f"{cluster.url}/{bucket}/huge").items():
        conn.putheader(name, value)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read().decode()
    assert resp.status == 400 and "<Code>EntityTooLarge</Code>" in body


def test_unsupported_subresource_is_501_not_500(cluster, bucket):
    resp = requests.get(f"{cluster.url}/{bucket}?lifecycle", headers=cluster.signed_headers("GET", f"{cluster.url}/{bucket}?lifecycle"))
    assert resp.status_code == 501 and "<Code>NotImplemented</Code>" in resp.text


def test_zero_copy_read_on_the_storage_node(cluster, bucket, functions_dir):
    """A dscs-marked function runs on the node holding its input and reads it via mmap."""
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="in.txt", Body=b"near data")
    resp = cluster.deploy("neardata", functions_dir / "echo", **{"x-nearfaas": {"accelerator": "dscs", "placement": "data"}})
    assert resp.status_code == 202, resp.text
    call = requests.post(f"{cluster.url}/function/neardata", json={"input": {"bucket": bucket, "key": "in.txt"}})
    assert call.status_code == 200, call.text
    out = call.json()
    assert out["input"] == {"bucket": bucket, "key": "in.txt"}
    assert out["local"] is True and out["node"] == call.headers["X-Nearfaas-Node"]
    assert cluster.node(out["node"])["class"] == "dscs"
    assert call.headers["X-Nearfaas-Placement"] == "dscs;home-replica"
    assert int(call.headers["X-Nearfaas-Bytes-Local"]) == 0  # is_local() does not read; get() would
    # On a compute node the same function reads through S3.
    cluster.deploy("remote", functions_dir / "echo")
    far = requests.post(f"{cluster.url}/function/remote", json={"input": {"bucket": bucket, "key": "in.txt"}}).json()
    assert far["local"] is False and cluster.node(far["node"])["kind"] == "compute"
