"""S3 bucket versioning on the local cluster, written to S3's documented semantics: Get/PutBucketVersioning,
version ids on PUT / GET / HEAD / DELETE / CopyObject, delete markers, the "null" version of a suspended or
never-versioned bucket, ListObjectVersions and its paging, errors, auth and policies, concurrent writers and
aws-cli.

To check these tests against another S3 (moto, MinIO, AWS itself), set ``NEARFAAS_TEST_S3_ENDPOINT`` to its
URL: the tests then use a plain boto3 client there (keys from the usual AWS_* variables) and aws-cli from
PATH instead of the cluster, and skip what only the cluster can show (auth, keys with policies)::

    NEARFAAS_TEST_S3_ENDPOINT=http://127.0.0.1:5055 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x \\
        pytest --noconftest -p no:cacheprovider tests/integration/test_s3_versioning.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError

pytestmark = pytest.mark.integration

OTHER_S3 = os.environ.get("NEARFAAS_TEST_S3_ENDPOINT", "")  # see the module docstring
cluster_only = pytest.mark.skipif(bool(OTHER_S3), reason="needs the nearfaas cluster (auth, keys, policies)")
AWS = Path(__file__).resolve().parents[2] / ".venv-awscli" / "bin" / "aws"
NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _code(exc: ClientError) -> tuple[int, str]:
    return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]


def _fails(call, **kwargs) -> tuple[int, str, dict]:
    """(HTTP status, S3 error code, response headers) of a call that must fail."""
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    return (*_code(caught.value), caught.value.response["ResponseMetadata"]["HTTPHeaders"])


@pytest.fixture(scope="module")
def s3(request):
    if OTHER_S3:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=OTHER_S3, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    return request.getfixturevalue("cluster").s3()


@pytest.fixture
def fresh(s3) -> str:
    """A new bucket, never versioned."""
    name = f"ver-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def enabled(s3, fresh) -> str:
    """A new bucket with versioning Enabled."""
    s3.put_bucket_versioning(Bucket=fresh, VersioningConfiguration={"Status": "Enabled"})
    return fresh


def _body(s3, **kwargs) -> bytes:
    return s3.get_object(**kwargs)["Body"].read()


def _versions(s3, bucket: str, **kwargs) -> tuple[list[dict], list[dict]]:
    """(Versions, DeleteMarkers) of one complete ListObjectVersions."""
    got = s3.list_object_versions(Bucket=bucket, **kwargs)
    assert not got["IsTruncated"]
    return got.get("Versions", []), got.get("DeleteMarkers", [])


# -- Get/PutBucketVersioning ---------------------------------------------------------------------

def test_bucket_versioning_configuration_round_trips(s3, fresh):
    assert "Status" not in s3.get_bucket_versioning(Bucket=fresh)  # never versioned: no Status at all
    s3.put_bucket_versioning(Bucket=fresh, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=fresh)["Status"] == "Enabled"
    s3.put_bucket_versioning(Bucket=fresh, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=fresh)["Status"] == "Suspended"
    s3.put_bucket_versioning(Bucket=fresh, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=fresh)["Status"] == "Enabled"
    # A Status other than Enabled / Suspended does not validate against S3's schema: AWS answers MalformedXML;
    # IllegalVersioningConfigurationException is S3's other documented code for a bad configuration.
    status, code, _ = _fails(s3.put_bucket_versioning, Bucket=fresh, VersioningConfiguration={"Status": "On"})
    assert (status, code) in ((400, "IllegalVersioningConfigurationException"), (400, "MalformedXML")), (status, code)
    assert s3.get_bucket_versioning(Bucket=fresh)["Status"] == "Enabled"  # unchanged
    s3.meta.events.register_first("before-sign.s3.PutBucketVersioning", _replace_body(b"this is not XML"), unique_id="nearfaas-test-body")
    try:
        status, code, _ = _fails(s3.put_bucket_versioning, Bucket=fresh, VersioningConfiguration={"Status": "Enabled"})
    finally:
        s3.meta.events.unregister("before-sign.s3.PutBucketVersioning", unique_id="nearfaas-test-body")
    assert (status, code) in ((400, "MalformedXML"), (400, "IllegalVersioningConfigurationException")), (status, code)
    with pytest.raises(ClientError) as nonexistent:
        s3.get_bucket_versioning(Bucket=f"ver-missing-{uuid.uuid4().hex[:12]}")
    assert _code(nonexistent.value) == (404, "NoSuchBucket")


@pytest.mark.skipif(bool(OTHER_S3), reason="nearfaas's own answer: it has no MFA devices, so MFA delete is 501")
def test_mfa_delete_is_not_implemented(s3, fresh):
    status, code, _ = _fails(s3.put_bucket_versioning, Bucket=fresh,
                             VersioningConfiguration={"Status": "Enabled", "MFADelete": "Enabled"})
    assert (status, code) == (501, "NotImplemented")
    assert "Status" not in s3.get_bucket_versioning(Bucket=fresh)  # nothing was changed


def _replace_body(body: bytes):
    """A before-sign handler that sends ``body`` instead of what boto3 built (with its Content-MD5)."""
    import base64
    import hashlib

    def handler(request, **_):
        for name in [h for h in request.headers if h.lower().startswith(("x-amz-checksum-", "x-amz-sdk-checksum", "content-md5"))]:
            del request.headers[name]
        request.data = body
        request.headers["Content-Length"] = str(len(body))
        request.headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()

    return handler


# -- the acceptance row: overwrite, delete, restore ------------------------------------------------

def test_versioned_overwrite_delete_and_restore(s3, enabled):
    b, key = enabled, "doc.txt"
    v1 = s3.put_object(Bucket=b, Key=key, Body=b"version one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key=key, Body=b"version two")["VersionId"]
    assert v1 and v2 and v1 != v2 and "null" not in (v1, v2)

    latest = s3.get_object(Bucket=b, Key=key)
    assert latest["Body"].read() == b"version two" and latest["VersionId"] == v2
    old = s3.get_object(Bucket=b, Key=key, VersionId=v1)
    assert old["Body"].read() == b"version one" and old["VersionId"] == v1
    head = s3.head_object(Bucket=b, Key=key, VersionId=v1)
    assert head["VersionId"] == v1 and head["ContentLength"] == len(b"version one")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-version-id"] == v1

    # DELETE with no version id: a delete marker becomes the latest version; nothing is removed.
    deleted = s3.delete_object(Bucket=b, Key=key)
    marker = deleted["VersionId"]
    assert deleted["DeleteMarker"] is True and marker not in (v1, v2, "null")
    assert deleted["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    status, code, headers = _fails(s3.get_object, Bucket=b, Key=key)
    assert (status, code) == (404, "NoSuchKey")
    assert headers.get("x-amz-delete-marker") == "true", headers
    status, _, headers = _fails(s3.head_object, Bucket=b, Key=key)
    assert status == 404 and headers.get("x-amz-delete-marker") == "true", headers
    assert "Contents" not in s3.list_objects_v2(Bucket=b)  # the listing of objects does not show it
    # Every version is still there, by id; the marker itself is not an object: 405 MethodNotAllowed.
    assert _body(s3, Bucket=b, Key=key, VersionId=v1) == b"version one"
    assert _body(s3, Bucket=b, Key=key, VersionId=v2) == b"version two"
    status, code, headers = _fails(s3.get_object, Bucket=b, Key=key, VersionId=marker)
    assert (status, code) == (405, "MethodNotAllowed") and headers.get("x-amz-delete-marker") == "true", headers

    versions, markers = _versions(s3, b)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions] == [(key, v2, False), (key, v1, False)]  # newest first
    assert [(m["Key"], m["VersionId"], m["IsLatest"]) for m in markers] == [(key, marker, True)]
    assert [v["Size"] for v in versions] == [len(b"version two"), len(b"version one")]
    assert versions[0]["ETag"] == latest["ETag"]
    assert versions[0]["LastModified"] <= markers[0]["LastModified"]

    # Restore: deleting the delete marker (by its id) makes v2 the latest again.
    undeleted = s3.delete_object(Bucket=b, Key=key, VersionId=marker)
    assert undeleted["VersionId"] == marker and undeleted["DeleteMarker"] is True
    again = s3.get_object(Bucket=b, Key=key)
    assert again["Body"].read() == b"version two" and again["VersionId"] == v2
    versions, markers = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(v2, True), (v1, False)] and markers == []

    # Restore an older version: copy it onto the key, which makes a new version with v1's bytes.
    copied = s3.copy_object(Bucket=b, Key=key, CopySource={"Bucket": b, "Key": key, "VersionId": v1})
    v3 = copied["VersionId"]
    assert copied["CopySourceVersionId"] == v1 and v3 not in (v1, v2, marker, "null")
    restored = s3.get_object(Bucket=b, Key=key)
    assert restored["Body"].read() == b"version one" and restored["VersionId"] == v3
    versions, markers = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(v3, True), (v2, False), (v1, False)] and markers == []


def test_deleting_a_version_removes_it_for_good(s3, enabled):
    b, key = enabled, "k"
    v1 = s3.put_object(Bucket=b, Key=key, Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key=key, Body=b"two")["VersionId"]
    v3 = s3.put_object(Bucket=b, Key=key, Body=b"three")["VersionId"]
    # An older version goes and the latest stays.
    gone = s3.delete_object(Bucket=b, Key=key, VersionId=v2)
    assert gone["VersionId"] == v2 and not gone.get("DeleteMarker")
    assert _fails(s3.get_object, Bucket=b, Key=key, VersionId=v2)[:2] == (404, "NoSuchVersion")
    assert _fails(s3.head_object, Bucket=b, Key=key, VersionId=v2)[0] == 404
    assert [v["VersionId"] for v in _versions(s3, b)[0]] == [v3, v1]
    assert _body(s3, Bucket=b, Key=key) == b"three"
    # The latest goes: the next newest becomes the latest.
    s3.delete_object(Bucket=b, Key=key, VersionId=v3)
    latest = s3.get_object(Bucket=b, Key=key)
    assert latest["Body"].read() == b"one" and latest["VersionId"] == v1
    versions, markers = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(v1, True)] and markers == []
    # Deleting a version that is no longer there is not an error (DELETE is idempotent).
    assert s3.delete_object(Bucket=b, Key=key, VersionId=v3)["ResponseMetadata"]["HTTPStatusCode"] == 204
    # The last version goes: the key is gone altogether, with no delete marker.
    s3.delete_object(Bucket=b, Key=key, VersionId=v1)
    status, code, headers = _fails(s3.get_object, Bucket=b, Key=key)
    assert (status, code) == (404, "NoSuchKey") and "x-amz-delete-marker" not in headers
    assert _versions(s3, b) == ([], [])


# -- Suspended, and objects from before versioning -------------------------------------------------

def test_a_suspended_bucket_writes_the_null_version(s3, enabled):
    b, key = enabled, "s"
    x = s3.put_object(Bucket=b, Key=key, Body=b"a")["VersionId"]
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    put_b = s3.put_object(Bucket=b, Key=key, Body=b"b")
    assert put_b.get("VersionId", "null") == "null"  # AWS sends x-amz-version-id: null here, or nothing; never an id
    head = s3.head_object(Bucket=b, Key=key)
    assert head["VersionId"] == "null" and head["ResponseMetadata"]["HTTPHeaders"]["x-amz-version-id"] == "null"
    s3.put_object(Bucket=b, Key=key, Body=b"c")  # replaces the null version, keeps X
    versions, markers = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"], v["Size"]) for v in versions] == [("null", True, 1), (x, False, 1)] and markers == []
    assert _body(s3, Bucket=b, Key=key) == b"c" and _body(s3, Bucket=b, Key=key, VersionId="null") == b"c"
    assert _body(s3, Bucket=b, Key=key, VersionId=x) == b"a"
    # DELETE while suspended: a delete marker whose id is "null", which replaces the null version.
    deleted = s3.delete_object(Bucket=b, Key=key)
    assert deleted["DeleteMarker"] is True and deleted["VersionId"] == "null"
    assert _fails(s3.get_object, Bucket=b, Key=key)[:2] == (404, "NoSuchKey")
    versions, markers = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(x, False)]
    assert [(m["VersionId"], m["IsLatest"]) for m in markers] == [("null", True)]
    assert _body(s3, Bucket=b, Key=key, VersionId=x) == b"a"
    # Enabled again: new writes get real ids again, and the null marker stays in the history.
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    y = s3.put_object(Bucket=b, Key=key, Body=b"d")["VersionId"]
    assert y not in ("null", x)
    versions, markers = _versions(s3, b)
    assert [v["VersionId"] for v in versions] == [y, x] and [(m["VersionId"], m["IsLatest"]) for m in markers] == [("null", False)]


def test_an_object_from_before_versioning_is_the_null_version(s3, fresh):
    b, key = fresh, "old"
    s3.put_object(Bucket=b, Key=key, Body=b"before")
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    assert s3.head_object(Bucket=b, Key=key)["VersionId"] == "null"
    new = s3.put_object(Bucket=b, Key=key, Body=b"after")["VersionId"]
    assert new != "null"
    versions, _ = _versions(s3, b)
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [(new, True), ("null", False)]
    got = s3.get_object(Bucket=b, Key=key, VersionId="null")
    assert got["Body"].read() == b"before" and got["VersionId"] == "null"
    assert _body(s3, Bucket=b, Key=key) == b"after"
    s3.delete_object(Bucket=b, Key=key, VersionId="null")  # the null version can be deleted by its id too
    assert [v["VersionId"] for v in _versions(s3, b)[0]] == [new]


# -- ListObjectVersions ----------------------------------------------------------------------------

def test_list_object_versions_pages_and_groups(s3, enabled):
    b = enabled
    keys = ["dir/a", "dir/b", "top"]
    written = {k: [s3.put_object(Bucket=b, Key=k, Body=f"{k} {i}".encode())["VersionId"] for i in range(3)] for k in keys}
    full, markers = _versions(s3, b)
    assert markers == []
    # Sorted by key, and newest first within a key; exactly one latest per key.
    assert [(v["Key"], v["VersionId"]) for v in full] == [(k, vid) for k in keys for vid in reversed(written[k])]
    assert [v["IsLatest"] for v in full] == [True, False, False] * 3

    pages, seen, marker = 0, [], {}
    while True:
        page = s3.list_object_versions(Bucket=b, MaxKeys=2, **marker)
        pages += 1
        got = page.get("Versions", [])
        assert len(got) <= 2 and page["MaxKeys"] == 2
        seen += [(v["Key"], v["VersionId"]) for v in got]
        if not page["IsTruncated"]:
            break
        assert got, "a truncated page with nothing in it"
        marker = {"KeyMarker": page["NextKeyMarker"], "VersionIdMarker": page["NextVersionIdMarker"]}
        assert page["NextKeyMarker"] == got[-1]["Key"] and page["NextVersionIdMarker"] == got[-1]["VersionId"]
        assert pages < 20
    assert seen == [(v["Key"], v["VersionId"]) for v in full]  # no repeats, no gaps, same order
    assert pages == 5
    # A KeyMarker alone starts after every version of that key.
    after = s3.list_object_versions(Bucket=b, KeyMarker="dir/a")
    assert [v["Key"] for v in after["Versions"]] == ["dir/b"] * 3 + ["top"] * 3
    # boto3's paginator follows the same markers.
    paged = [(v["Key"], v["VersionId"]) for p in s3.get_paginator("list_object_versions").paginate(
        Bucket=b, PaginationConfig={"PageSize": 4}) for v in p.get("Versions", [])]
    assert paged == seen

    prefixed, _ = _versions(s3, b, Prefix="dir/")
    assert [(v["Key"], v["VersionId"]) for v in prefixed] == [(v["Key"], v["VersionId"]) for v in full[:6]]
    grouped = s3.list_object_versions(Bucket=b, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["dir/"]
    assert [v["Key"] for v in grouped["Versions"]] == ["top"] * 3 and grouped["Delimiter"] == "/"
    nested = s3.list_object_versions(Bucket=b, Prefix="dir/", Delimiter="/")
    assert "CommonPrefixes" not in nested and len(nested["Versions"]) == 6
    assert "Versions" not in s3.list_object_versions(Bucket=b, Prefix="nothing/")


def test_list_object_versions_on_an_unversioned_bucket_shows_null_versions(s3, fresh):
    s3.put_object(Bucket=fresh, Key="plain", Body=b"x")
    versions, markers = _versions(s3, fresh)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions] == [("plain", "null", True)] and markers == []


# -- errors ----------------------------------------------------------------------------------------

def test_version_id_errors(s3, enabled):
    b, key = enabled, "e"
    v1 = s3.put_object(Bucket=b, Key=key, Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key=key, Body=b"two")["VersionId"]
    s3.delete_object(Bucket=b, Key=key, VersionId=v1)
    # A well-formed id (it was a real version of this key) that is not there: 404 NoSuchVersion.
    assert _fails(s3.get_object, Bucket=b, Key=key, VersionId=v1)[:2] == (404, "NoSuchVersion")
    assert _fails(s3.head_object, Bucket=b, Key=key, VersionId=v1)[0] == 404
    # An id no version could have: 400 InvalidArgument ("Invalid version id specified").
    for bad in ("not a version id", "x" * 2000):
        assert _fails(s3.get_object, Bucket=b, Key=key, VersionId=bad)[:2] == (400, "InvalidArgument"), bad
    assert _fails(s3.get_object, Bucket=b, Key="missing-key", VersionId=v2)[0] == 404
    # The copy source's version is checked the same way.
    assert _fails(s3.copy_object, Bucket=b, Key="dst", CopySource={"Bucket": b, "Key": key, "VersionId": v1})[:2] == (
        404, "NoSuchVersion")
    # A bucket that was never versioned: its objects have the id "null" and no other id is valid.
    fresh = f"ver-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=fresh)
    s3.put_object(Bucket=fresh, Key=key, Body=b"plain")
    assert _body(s3, Bucket=fresh, Key=key, VersionId="null") == b"plain"
    assert s3.head_object(Bucket=fresh, Key=key, VersionId="null")["ContentLength"] == 5
    assert _fails(s3.get_object, Bucket=fresh, Key=key, VersionId=v2)[:2] == (400, "InvalidArgument")
    assert "VersionId" not in s3.put_object(Bucket=fresh, Key=key, Body=b"again")  # no x-amz-version-id unversioned


# -- auth and policies (the cluster's own) ---------------------------------------------------------

@cluster_only
def test_unsigned_versioning_requests_are_refused(request, s3, enabled):
    url = request.getfixturevalue("cluster").url
    body = f'<VersioningConfiguration xmlns="{NS}"><Status>Suspended</Status></VersioningConfiguration>'
    for method, query, data in (("GET", "versions", None), ("GET", "versioning", None), ("PUT", "versioning", body)):
        response = requests.request(method, f"{url}/{enabled}?{query}", data=data, timeout=10)
        assert response.status_code == 403 and "<Code>AccessDenied</Code>" in response.text, (method, query, response.text)
    assert s3.get_bucket_versioning(Bucket=enabled)["Status"] == "Enabled"


@cluster_only
def test_versioning_actions_need_their_own_policy_actions(request, s3, enabled):
    cluster = request.getfixturevalue("cluster")
    b = enabled
    v1 = s3.put_object(Bucket=b, Key="k", Body=b"one")["VersionId"]
    s3.put_object(Bucket=b, Key="k", Body=b"two")
    made = []

    def key_with(*actions: str):
        name = f"ver-{uuid.uuid4().hex[:12]}"
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": list(actions), "Resource": [f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*"]}]}
        created = cluster.http.post(f"{cluster.url}/system/keys", json={"name": name, "policy": policy}, timeout=10)
        assert created.status_code == 201, created.text
        made.append(name)
        return cluster.s3(access_key=created.json()["access_key"], secret_key=created.json()["secret_key"])

    try:
        reader = key_with("s3:GetObject", "s3:DeleteObject")
        assert _body(reader, Bucket=b, Key="k") == b"two"
        # AWS splits the actions: by version id needs s3:GetObjectVersion / s3:DeleteObjectVersion.
        assert _fails(reader.get_object, Bucket=b, Key="k", VersionId=v1)[:2] == (403, "AccessDenied")
        assert _fails(reader.head_object, Bucket=b, Key="k", VersionId=v1)[0] == 403
        assert _fails(reader.delete_object, Bucket=b, Key="k", VersionId=v1)[:2] == (403, "AccessDenied")
        assert _fails(reader.put_bucket_versioning, Bucket=b,
                      VersioningConfiguration={"Status": "Suspended"})[:2] == (403, "AccessDenied")
        assert _fails(reader.get_bucket_versioning, Bucket=b)[:2] == (403, "AccessDenied")
        assert _fails(reader.list_object_versions, Bucket=b)[:2] == (403, "AccessDenied")
        assert _body(s3, Bucket=b, Key="k", VersionId=v1) == b"one"  # refused, so nothing was deleted

        versioned = key_with("s3:GetObject", "s3:GetObjectVersion", "s3:ListBucketVersions", "s3:GetBucketVersioning",
                             "s3:PutBucketVersioning", "s3:DeleteObjectVersion")
        assert _body(versioned, Bucket=b, Key="k", VersionId=v1) == b"one"
        assert len(versioned.list_object_versions(Bucket=b)["Versions"]) == 2
        assert _fails(versioned.list_objects_v2, Bucket=b)[:2] == (403, "AccessDenied")  # that is s3:ListBucket
        versioned.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
        assert versioned.get_bucket_versioning(Bucket=b)["Status"] == "Suspended"
        versioned.delete_object(Bucket=b, Key="k", VersionId=v1)
        assert len(s3.list_object_versions(Bucket=b)["Versions"]) == 1
    finally:
        for name in made:
            cluster.http.delete(f"{cluster.url}/system/keys/{name}", timeout=10)


# -- concurrency -----------------------------------------------------------------------------------

def test_concurrent_writers_each_get_their_own_version(request, s3, enabled):
    b, key, per_thread = enabled, "hot", 20
    clients = [request.getfixturevalue("cluster").s3() if not OTHER_S3 else s3 for _ in range(2)]
    written: dict[str, bytes] = {}
    errors: list[BaseException] = []
    lock, barrier = threading.Lock(), threading.Barrier(2)

    def write(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                body = f"thread {t} write {i} ".encode() * (1 + (i * 7 + t) % 13)
                vid = clients[t].put_object(Bucket=b, Key=key, Body=body)["VersionId"]
                with lock:
                    assert vid not in written, vid
                    written[vid] = body
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    listed = [v for p in s3.get_paginator("list_object_versions").paginate(Bucket=b) for v in p.get("Versions", [])]
    assert len(listed) == 2 * per_thread and {v["VersionId"] for v in listed} == set(written)
    assert sum(v["IsLatest"] for v in listed) == 1
    latest = s3.get_object(Bucket=b, Key=key)
    assert latest["VersionId"] == listed[0]["VersionId"] and latest["Body"].read() == written[latest["VersionId"]]
    for vid, body in written.items():
        got = s3.get_object(Bucket=b, Key=key, VersionId=vid)
        assert got["Body"].read() == body and got["VersionId"] == vid
    for v in listed:
        assert v["Size"] == len(written[v["VersionId"]])


# -- aws-cli ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def aws(request, tmp_path_factory):
    config = tmp_path_factory.mktemp("awscli") / "config"
    config.write_text("[default]\nregion = us-east-1\n")
    if OTHER_S3:
        binary, endpoint = shutil.which("aws"), OTHER_S3
        assert binary, "aws-cli is not on PATH"
        env = dict(os.environ)
    else:
        assert AWS.exists(), f"{AWS} is missing: run `make setup` (it installs aws-cli for these tests)"
        cluster = request.getfixturevalue("cluster")
        binary, endpoint = str(AWS), cluster.url
        access, secret = cluster.keys(cluster.url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
            "AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}
    env |= {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(config.with_name("none")),
            "AWS_EC2_METADATA_DISABLED": "true"}

    def run(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([binary, "--endpoint-url", endpoint, *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stdout[-500:], done.stderr[-1500:])
        return done

    return run


def test_aws_cli_versioning_flow(aws, s3, fresh, tmp_path):
    aws("s3api", "put-bucket-versioning", "--bucket", fresh, "--versioning-configuration", "Status=Enabled")
    assert json.loads(aws("s3api", "get-bucket-versioning", "--bucket", fresh).stdout)["Status"] == "Enabled"
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    first.write_bytes(b"first upload\n")
    second.write_bytes(b"the second upload\n")
    aws("s3", "cp", str(first), f"s3://{fresh}/notes.txt")
    aws("s3", "cp", str(second), f"s3://{fresh}/notes.txt")
    listed = json.loads(aws("s3api", "list-object-versions", "--bucket", fresh).stdout)
    versions = listed["Versions"]
    assert [(v["Key"], v["Size"], v["IsLatest"]) for v in versions] == [
        ("notes.txt", len(b"the second upload\n"), True), ("notes.txt", len(b"first upload\n"), False)]
    assert len({v["VersionId"] for v in versions}) == 2
    back = tmp_path / "back.txt"
    aws("s3api", "get-object", "--bucket", fresh, "--key", "notes.txt", "--version-id", versions[1]["VersionId"], str(back))
    assert back.read_bytes() == b"first upload\n"
    aws("s3", "rm", f"s3://{fresh}/notes.txt")  # a delete marker
    listed = json.loads(aws("s3api", "list-object-versions", "--bucket", fresh).stdout)
    assert len(listed["Versions"]) == 2 and [m["IsLatest"] for m in listed["DeleteMarkers"]] == [True]


@cluster_only
def test_a_deleted_keys_404_tells_clients_nothing_of_the_replicas(s3, fresh):
    """The replicas' own version headers stay between the nodes and the gateway."""
    s3.put_object(Bucket=fresh, Key="gone", Body=b"x")
    s3.delete_object(Bucket=fresh, Key="gone")
    status, code, headers = _fails(s3.head_object, Bucket=fresh, Key="gone")
    assert (status, code) == (404, "404") or (status, code) == (404, "NoSuchKey")
    assert not any(h.startswith("x-nearfaas-version") or h == "x-nearfaas-deleted" for h in headers), headers
