"""Multipart uploads through the S3 front end, and ListMultipartUploads; DeleteObjects that
reports every key it could not delete; keys no listing could show."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from botocore.exceptions import ClientError

from nearfaas.s3.errors import S3Error
from nearfaas.s3.frontend import S3Frontend

from s3_fixtures import *  # noqa: F403  (the server, s3 and bucket fixtures)
from s3_fixtures import code_of, raw, xml_code

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




# -- leftovers: multipart listing, truthful DeleteObjects, keys XML cannot carry ------------------


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


def test_delete_objects_reports_every_key_it_could_not_delete(server, s3, bucket):
    for key in ("good1", "good2"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    bad = ["nul\x00key", "k" * 1025, "a/../b"]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in ["good1", *bad, "good2"]]})
    assert sorted(d["Key"] for d in result["Deleted"]) == ["good1", "good2"]
    codes = {e["Code"] for e in result["Errors"]}
    assert len(result["Errors"]) == 3 and codes == {"InvalidObjectName", "KeyTooLongError"}
    assert all(e["Message"] for e in result["Errors"])
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "nul\x00key"}, {"Key": "ok"}], "Quiet": True})
    assert "Deleted" not in quiet and [e["Code"] for e in quiet["Errors"]] == ["InvalidObjectName"]
    # A character reference to a control character is a bad key too, not a malformed request.
    status, _, body = raw(server, "POST", f"/{bucket}?delete",
                          b"<Delete><Object><Key>x&#x1;y</Key></Object><Object><Key>fine</Key></Object></Delete>")
    assert status == 200 and body.count(b"<Error>") == 1 and b"<Deleted><Key>fine</Key></Deleted>" in body


class _RefusingBackend:
    """A LocalBackend whose deletes fail for some keys, as a storage node could."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def delete_object(self, bucket, key):
        if key == "denied":
            raise S3Error("AccessDenied", "node says no")
        if key == "crash":
            raise RuntimeError("disk on fire")
        await self.inner.delete_object(bucket, key)


def test_delete_objects_reports_backend_refusals_and_failures(server, caplog):
    async def scenario():
        await server.backend.create_bucket("refusals")
        app = web.Application()
        S3Frontend(_RefusingBackend(server.backend)).mount(app)
        async with TestClient(TestServer(app)) as client:
            doc = (b"<Delete><Quiet>true</Quiet><Object><Key>denied</Key></Object><Object><Key>crash</Key></Object>"
                   b"<Object><Key>fine</Key></Object></Delete>")
            response = await client.post("/refusals?delete", data=doc)
            return response.status, await response.read()

    status, body = server.run(scenario())
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    root = ET.fromstring(body)
    errors = [(e.find("s3:Key", ns).text, e.find("s3:Code", ns).text) for e in root.findall("s3:Error", ns)]
    assert status == 200 and errors == [("denied", "AccessDenied"), ("crash", "InternalError")]
    assert root.findall("s3:Deleted", ns) == [] and "disk on fire" in caplog.text


@pytest.mark.parametrize("key", ["a\uffffb", "\ufffe", "x\ufdd0", "plane1\U0001ffff"])
def test_keys_with_noncharacters_are_refused_on_write(server, s3, bucket, key):
    path = f"/{bucket}/{quote(key, safe='')}"
    status, _, body = raw(server, "PUT", path, b"x")
    assert (status, xml_code(body)) == (400, "InvalidArgument")
    assert b"noncharacter U+" in body
    status, _, body = raw(server, "PUT", path, b"", {"x-amz-copy-source": f"/{bucket}/src"})
    assert (status, xml_code(body)) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key=key)
    assert code_of(e) == ("InvalidArgument", 400)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket=bucket)


def test_a_key_xml_cannot_carry_does_not_break_listings(server, s3, bucket, monkeypatch, caplog):
    import nearfaas.node.multipart as multipart_module
    import nearfaas.node.objectstore as objectstore_module
    from nearfaas.s3.validation import validate_key

    # An older nearfaas accepted such keys: write them the way it did.
    monkeypatch.setattr(objectstore_module, "validate_new_key", validate_key)
    monkeypatch.setattr(multipart_module, "validate_new_key", validate_key)
    legacy = "old\uffffkey"
    server.store.put_object(bucket, legacy, b"legacy")
    server.store.put_object(bucket, "zz\ufffe/x", b"in a group")
    server.store.create_multipart_upload(bucket, "up\uffff")
    for key in ("a", "z"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    for query in ("list-type=2", "", "list-type=2&delimiter=/", "uploads"):
        status, _, body = raw(server, "GET", f"/{bucket}?{query}")
        assert status == 200, (query, body)
        keys = [k.text for k in ET.fromstring(body).iter() if k.tag in (f"{{{ns['s3']}}}Key", f"{{{ns['s3']}}}Prefix")]
        assert not any("\uffff" in (k or "") or "\ufffe" in (k or "") for k in keys), query
    status, _, body = raw(server, "GET", f"/{bucket}?list-type=2")
    assert [k.text for k in ET.fromstring(body).iterfind("s3:Contents/s3:Key", ns)] == ["a", "z"]
    assert "left out" in caplog.text and "encoding-type=url" in caplog.text
    # boto3 lists with encoding-type=url: the key is there, and it can be read and deleted.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["a", legacy, "z", "zz\ufffe/x"]
    status, _, body = raw(server, "GET", f"/{bucket}?list-type=2&max-keys=1&start-after=a")
    assert status == 200 and b"<IsTruncated>true</IsTruncated>" in body
    status, _, body = raw(server, "GET", f"/{bucket}?max-keys=1&marker=a")
    assert status == 200 and b"<NextMarker>" not in body  # the page ended on the key it left out
    assert s3.get_object(Bucket=bucket, Key=legacy)["Body"].read() == b"legacy"
    s3.delete_object(Bucket=bucket, Key=legacy)
    assert legacy not in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
