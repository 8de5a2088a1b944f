"""Issue 22 leftovers against a real local cluster: GetObject / HeadObject by ``partNumber``
(s3/parts.py), GetObjectAttributes (s3/attributes.py) and the browser-form POST upload
(s3/post_object.py)."""

from __future__ import annotations

import hashlib

import pytest
import requests
from botocore.exceptions import ClientError

pytestmark = pytest.mark.integration

MIB = 1 << 20


def _code(excinfo) -> tuple[int, str]:
    response = excinfo.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def _multipart(s3, bucket: str, key: str, sizes: list[int], **create) -> bytes:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    parts, whole = [], b""
    for number, size in enumerate(sizes, 1):
        data = bytes([number]) * size
        whole += data
        extra = {"ChecksumAlgorithm": create["ChecksumAlgorithm"]} if "ChecksumAlgorithm" in create else {}
        answer = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data, **extra)
        part = {"PartNumber": number, "ETag": answer["ETag"]}
        part |= {k: v for k, v in answer.items() if k.startswith("Checksum")}
        parts.append(part)
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})
    return whole


def _signed(cluster, method: str, path: str, headers: dict | None = None) -> requests.Response:
    """A SigV4-signed request with a query boto3 would not send (it validates its parameters)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=cluster.url + path, headers=dict(headers or {}))
    S3SigV4Auth(Credentials(*cluster.keys(cluster.url)), "s3", "us-east-1").add_auth(request)
    return requests.request(method, request.url, headers=dict(request.headers.items()), timeout=30)


# -- GetObject / HeadObject ?partNumber ------------------------------------------------------------

def test_get_and_head_by_part_number_of_a_multipart_object(cluster, bucket):
    s3 = cluster.s3()
    sizes = [5 * MIB, 5 * MIB + 3, 17]
    whole = _multipart(s3, bucket, "mp", sizes)
    start = 0
    for number, size in enumerate(sizes, 1):
        got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=number)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["PartsCount"] == 3
        assert got["ContentRange"] == f"bytes {start}-{start + size - 1}/{len(whole)}"
        assert got["Body"].read() == whole[start:start + size]
        head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=number)
        assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert (head["PartsCount"], head["ContentLength"]) == (3, size)
        start += size
    # The internal part sizes never reach a client, on GET or HEAD.
    for answer in (s3.get_object(Bucket=bucket, Key="mp"), s3.head_object(Bucket=bucket, Key="mp"),
                   s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)):
        assert not [h for h in answer["ResponseMetadata"]["HTTPHeaders"] if "part-sizes" in h]
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=4)
    assert _code(excinfo) == (416, "InvalidPartNumber")


def test_part_number_of_a_single_part_object(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"just one part")
    got = s3.get_object(Bucket=bucket, Key="one", PartNumber=1)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200 and got["Body"].read() == b"just one part"
    assert "PartsCount" not in got
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="one", PartNumber=2)
    assert _code(excinfo) == (416, "InvalidPartNumber")
    with pytest.raises(ClientError) as excinfo:
        s3.head_object(Bucket=bucket, Key="one", PartNumber=2)
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


@pytest.mark.parametrize("number", ["0", "10001", "x", "-1", ""])
def test_a_bad_part_number_is_invalid_argument(cluster, bucket, number):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"abc")
    answer = _signed(cluster, "GET", f"/{bucket}/one?partNumber={number}")
    assert answer.status_code == 400 and b"<Code>InvalidArgument</Code>" in answer.content, answer.content


def test_part_number_with_a_range_is_invalid_request(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"abc")
    with pytest.raises(ClientError) as excinfo:
        s3.get_object(Bucket=bucket, Key="one", PartNumber=1, Range="bytes=0-1")
    assert _code(excinfo) == (400, "InvalidRequest")
    assert "Cannot specify both Range header and partNumber" in excinfo.value.response["Error"]["Message"]


def test_a_client_cannot_ask_for_the_internal_part_sizes(cluster, bucket):
    s3 = cluster.s3()
    _multipart(s3, bucket, "mp", [5 * MIB, 3])
    answer = _signed(cluster, "GET", f"/{bucket}/mp", {"x-nearfaas-part-sizes": "ENABLED", "Range": "bytes=0-0"})
    assert answer.status_code == 206 and "x-nearfaas-part-sizes" not in answer.headers


def test_part_sizes_survive_a_replica_repair(tmp_path):
    """The sizes travel with the object when anti-entropy copies it to a replica that missed it."""
    import asyncio
    import time

    from conftest import running_cluster
    from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
    from nearfaas.replication.repair import with_trailer
    from nearfaas.replication.version import HybridClock
    from nearfaas.s3.backend import ObjectInfo
    from nearfaas.s3.node_client import NodeClient
    from nearfaas.spec.cluster import ReplicationSpec

    data = b"a" * 10 + b"b" * 5
    stored = {"x-nearfaas-part-sizes": "10,5"}
    with running_cluster(tmp_path / "state", replication=ReplicationSpec(factor=2, anti_entropy=1.0)) as cluster:
        cluster.s3().create_bucket(Bucket="repaired")
        version = HybridClock("test").now()

        async def write_on_storage_0_only():
            async def body():
                yield data

            url = cluster.node("storage-0")["url"]
            source = ObjectInfo("repaired", "k", len(data), "0" * 32 + "-2", 1_700_000_000.0, version=version, headers=stored)
            async with NodeClient("storage-0", url, credentials=(INTERNAL_ACCESS_KEY, cluster.layout["internal_secret"])) as node:
                await node.put_object("repaired", "k", with_trailer(body(), version), version_trailer=len(version),
                                      copy_of=source, headers=stored)

        asyncio.run(write_on_storage_0_only())

        async def head_storage_1():
            url = cluster.node("storage-1")["url"]
            async with NodeClient("storage-1", url, credentials=(INTERNAL_ACCESS_KEY, cluster.layout["internal_secret"])) as node:
                return await node.head_object("repaired", "k")

        deadline = time.monotonic() + 20
        while True:
            try:
                info = asyncio.run(head_storage_1())
                break
            except Exception:
                assert time.monotonic() < deadline, "anti-entropy did not copy the object within 20 s"
                time.sleep(0.2)
        assert info.headers.get("x-nearfaas-part-sizes") == "10,5"
        got = cluster.s3().get_object(Bucket="repaired", Key="k", PartNumber=2)
        assert got["Body"].read() == b"b" * 5 and got["PartsCount"] == 2


# -- GetObjectAttributes ---------------------------------------------------------------------------

ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def test_attributes_of_a_multipart_object_with_paged_parts(cluster, bucket):
    s3 = cluster.s3()
    sizes = [5 * MIB, 5 * MIB, 5 * MIB, 9]
    _multipart(s3, bucket, "mp", sizes, ChecksumAlgorithm="CRC32C", StorageClass="STANDARD_IA")
    head = s3.head_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    answer = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL, MaxParts=2)
    assert answer["ETag"] == head["ETag"].strip('"') and answer["ObjectSize"] == sum(sizes)
    assert answer["StorageClass"] == "STANDARD_IA"
    assert answer["Checksum"]["ChecksumCRC32C"] == head["ChecksumCRC32C"]
    assert answer["Checksum"]["ChecksumType"] == "COMPOSITE"
    parts = answer["ObjectParts"]
    assert (parts["TotalPartsCount"], parts["MaxParts"], parts["IsTruncated"], parts["NextPartNumberMarker"]) == (4, 2, True, 2)
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, 5 * MIB), (2, 5 * MIB)]
    rest = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], PartNumberMarker=2)
    assert [(p["PartNumber"], p["Size"]) for p in rest["ObjectParts"]["Parts"]] == [(3, 5 * MIB), (4, 9)]
    assert rest["ObjectParts"]["IsTruncated"] is False and "ETag" not in rest and "ObjectSize" not in rest


def test_attributes_of_a_single_part_object(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"hello", ChecksumAlgorithm="SHA256")
    answer = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=ALL)
    assert answer["ETag"] == hashlib.md5(b"hello").hexdigest() and answer["ObjectSize"] == 5
    assert answer["StorageClass"] == "STANDARD" and "ObjectParts" not in answer
    assert answer["Checksum"]["ChecksumSHA256"] and answer["Checksum"]["ChecksumType"] == "FULL_OBJECT"
    assert answer["LastModified"]


def test_attributes_refuses_bad_names_and_missing_keys(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="one", Body=b"x")
    answer = _signed(cluster, "GET", f"/{bucket}/one?attributes", {"x-amz-object-attributes": "ETag,Owner"})
    assert answer.status_code == 400 and b"<Code>InvalidArgument</Code>" in answer.content
    answer = _signed(cluster, "GET", f"/{bucket}/one?attributes")
    assert answer.status_code == 400 and b"<Code>InvalidArgument</Code>" in answer.content
    with pytest.raises(ClientError) as excinfo:
        s3.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    assert _code(excinfo) == (404, "NoSuchKey")


# -- PostObject (browser form upload) --------------------------------------------------------------

def _signer(cluster, access_key: str | None = None, secret_key: str | None = None):
    """A boto3 client whose presigned POSTs are SigV4 (botocore's default presigned POST is SigV2)."""
    import boto3
    from botocore.config import Config

    if access_key is None:
        access_key, secret_key = cluster.keys(cluster.url)
    return boto3.client("s3", endpoint_url=cluster.url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                        region_name="us-east-1", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))


def _form(s3, bucket: str, key: str = "uploads/${filename}", fields: dict | None = None, conditions: list | None = None,
          expires: int = 300) -> dict:
    return s3.generate_presigned_post(bucket, key, Fields=fields, Conditions=conditions, ExpiresIn=expires)


def _post(form: dict, data: bytes = b"hello world", filename: str = "hello.txt", **overrides) -> requests.Response:
    fields = {**form["fields"], **overrides}
    return requests.post(form["url"], data=fields, files={"file": (filename, data)}, timeout=60)


def test_post_upload_with_a_boto3_presigned_post(cluster, bucket):
    s3 = _signer(cluster)
    fields = {"Content-Type": "text/plain", "x-amz-meta-owner": "me", "success_action_status": "201",
              "Cache-Control": "no-cache"}
    conditions = [{"Content-Type": "text/plain"}, {"x-amz-meta-owner": "me"}, {"success_action_status": "201"},
                  {"Cache-Control": "no-cache"}, ["starts-with", "$key", "uploads/"], ["content-length-range", 1, 8 * MIB]]
    form = _form(s3, bucket, fields=fields, conditions=conditions)
    answer = _post(form)
    assert answer.status_code == 201, answer.content
    assert b"<Key>uploads/hello.txt</Key>" in answer.content and b"<Bucket>" + bucket.encode() in answer.content
    got = s3.get_object(Bucket=bucket, Key="uploads/hello.txt")
    assert got["Body"].read() == b"hello world" and got["ContentType"] == "text/plain"
    assert got["Metadata"] == {"owner": "me"} and got["CacheControl"] == "no-cache"
    assert answer.headers["ETag"] == got["ETag"]
    big = bytes(range(256)) * (6 * MIB // 256)  # streamed into the store, not held whole
    assert _post(form, big, "big.bin").status_code == 201
    assert s3.get_object(Bucket=bucket, Key="uploads/big.bin")["Body"].read() == big


def test_post_success_statuses_and_redirect(cluster, bucket):
    s3 = _signer(cluster)
    assert _post(_form(s3, bucket)).status_code == 204
    ok = _form(s3, bucket, fields={"success_action_status": "200"}, conditions=[{"success_action_status": "200"}])
    assert _post(ok).status_code == 200
    to = _form(s3, bucket, fields={"success_action_redirect": "http://example.invalid/done"},
               conditions=[{"success_action_redirect": "http://example.invalid/done"}])
    answer = requests.post(to["url"], data=to["fields"], files={"file": ("r.txt", b"r")}, allow_redirects=False, timeout=30)
    assert answer.status_code == 303 and answer.headers["Location"].startswith("http://example.invalid/done?bucket=")
    assert "key=uploads%2Fr.txt" in answer.headers["Location"]


def _refused(answer: requests.Response, status: int, code: str, words: str = "") -> None:
    assert answer.status_code == status, (answer.status_code, answer.content)
    assert f"<Code>{code}</Code>".encode() in answer.content, answer.content
    assert words.encode() in answer.content, answer.content


def test_post_refuses_hostile_forms(cluster, bucket):
    import base64
    import json

    s3 = _signer(cluster)
    form = _form(s3, bucket, conditions=[["starts-with", "$key", "uploads/"], ["content-length-range", 1, 1000]])
    _refused(_post(_form(s3, bucket, expires=-10)), 403, "AccessDenied", "Invalid according to Policy: Policy expired.")
    policy = json.loads(base64.b64decode(form["fields"]["policy"]))
    policy["conditions"] = [c for c in policy["conditions"] if not (isinstance(c, list) and c[0] == "content-length-range")]
    tampered = base64.b64encode(json.dumps(policy).encode()).decode()
    _refused(_post(form, b"x" * 2000, policy=tampered), 403, "SignatureDoesNotMatch")
    _refused(_post(form, key="elsewhere/${filename}"), 403, "AccessDenied", "Invalid according to Policy")
    _refused(_post(form, b"x" * 1001), 400, "EntityTooLarge")
    _refused(_post(form, b""), 400, "EntityTooSmall")
    _refused(_post(form, **{"x-amz-meta-sneaky": "1"}), 403, "AccessDenied", "Extra input fields: x-amz-meta-sneaky")
    _refused(_post(form, **{"x-ignore-pad": "p" * 30_000}), 400, "MaxPostPreDataLengthExceeded")
    _refused(_post(form, **{"x-amz-signature": "0" * 64}), 403, "SignatureDoesNotMatch")
    unsigned = requests.post(form["url"], data={"key": "uploads/anon"}, files={"file": ("a", b"a")}, timeout=30)
    _refused(unsigned, 403, "AccessDenied")
    no_file = requests.post(form["url"], files={k: (None, v) for k, v in form["fields"].items()}, timeout=30)
    _refused(no_file, 400, "InvalidArgument", "exactly one file")
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert listed == [], [o["Key"] for o in listed]


def test_post_by_a_tenant_without_put_object_is_denied(tmp_path):
    from test_s3_keys_policies import ADMIN, ADMIN_SECRET, READER_POLICY, WRITER_POLICY, add_key

    from conftest import running_cluster
    from nearfaas.spec.cluster import AuthSpec

    keys_file = tmp_path / "conf" / "keys.yml"
    with running_cluster(tmp_path / "state", auth=AuthSpec(ADMIN, ADMIN_SECRET, keys_file=str(keys_file))) as c:
        c.keys_file = keys_file
        admin = c.s3()
        for name in ("kp-a", "kp-b"):
            admin.create_bucket(Bucket=name)
        reader = _signer(c, *add_key(c, tmp_path, "reader", READER_POLICY).values())
        writer = _signer(c, *add_key(c, tmp_path, "writer", WRITER_POLICY).values())
        _refused(_post(_form(reader, "kp-a", "public/${filename}")), 403, "AccessDenied")
        _refused(_post(_form(writer, "kp-a")), 403, "AccessDenied")
        assert _post(_form(writer, "kp-b")).status_code == 204
        assert admin.get_object(Bucket="kp-b", Key="uploads/hello.txt")["Body"].read() == b"hello world"
        assert "Contents" not in admin.list_objects_v2(Bucket="kp-a")


@pytest.mark.parametrize(("content_type", "body"), [
    ("multipart/form-data", b"no boundary at all"),
    ("multipart/form-data; boundary=XX", b"garbage without any boundary line"),
    ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Type: multipart/mixed; boundary=YY\r\n\r\n--YY\r\n\r\nx\r\n--YY--\r\n--XX--\r\n"),
    ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Disposition: form-data\r\n\r\nnameless\r\n--XX--\r\n"),
    ("multipart/form-data; boundary=XX", b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nx\r\n--XX--\r\n"),
])
def test_a_malformed_form_is_a_400_s3_error(cluster, bucket, content_type, body):
    answer = requests.post(f"{cluster.url}/{bucket}", data=body, headers={"Content-Type": content_type}, timeout=30)
    assert 400 <= answer.status_code < 500 and b"<Error><Code>" in answer.content, (answer.status_code, answer.content)


def test_post_fields_that_cannot_be_headers_are_refused(cluster, bucket):
    s3 = _signer(cluster)
    form = _form(s3, bucket, conditions=[["starts-with", "$Cache-Control", ""], ["starts-with", "$x-amz-meta-a b", ""]])
    _refused(_post(form, **{"Cache-Control": "no-cache\r\nX-Evil: 1"}), 400, "InvalidArgument")
    _refused(_post(form, **{"x-amz-meta-a b": "v"}), 400, "InvalidArgument")
    assert _post(form, **{"Cache-Control": "no-cache"}).status_code == 204
    assert s3.head_object(Bucket=bucket, Key="uploads/hello.txt")["CacheControl"] == "no-cache"
