"""Several access keys, each limited by a bucket policy, on a real cluster (issue 22, item 5):
boto3 clients signing with keys added by `nearfaas keys add`, refused with S3's AccessDenied
where their policy says no, revoked and added with no gateway restart."""

from __future__ import annotations

import json
import time

import pytest
import requests
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from click.testing import CliRunner

from nearfaas.cli import main as cli
from nearfaas.spec.cluster import AuthSpec

from conftest import running_cluster

pytestmark = pytest.mark.integration

ADMIN, ADMIN_SECRET = "AKIDKEYSADMIN", "keys-admin-secret-0123456789"
READER_POLICY = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::kp-a/public/*"},
    {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::kp-a"},
    {"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"}]}
WRITER_POLICY = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::kp-b", "arn:aws:s3:::kp-b/*"]},
    {"Effect": "Deny", "Action": "s3:DeleteBucket", "Resource": "*"},
    {"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"}]}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    keys_file = root / "conf" / "keys.yml"  # the cluster file's auth.keys_file
    with running_cluster(root / "state", auth=AuthSpec(ADMIN, ADMIN_SECRET, keys_file=str(keys_file))) as c:
        admin = c.s3()
        for bucket in ("kp-a", "kp-b", "kp-c"):
            admin.create_bucket(Bucket=bucket)
        admin.put_object(Bucket="kp-a", Key="public/1", Body=b"pub")
        admin.put_object(Bucket="kp-a", Key="private/1", Body=b"priv")
        c.keys_file = keys_file
        yield c


def keys_cli(cluster, *args):
    result = CliRunner().invoke(cli, ["keys", *args, "--state", str(cluster.state_dir)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def add_key(cluster, tmp_path, name, policy) -> dict:
    policy_file = tmp_path / f"{name}.json"
    policy_file.write_text(json.dumps(policy))
    created = json.loads(keys_cli(cluster, "add", name, "--policy", str(policy_file), "--json"))
    return {"access_key": created["access_key"], "secret_key": created["secret_key"]}


def presign(cluster, keys: dict, path: str, expires: int = 60) -> str:
    """A SigV4 presigned GET URL (any X-Amz-Expires, even one botocore's presigner would refuse)."""
    request = AWSRequest(method="GET", url=f"{cluster.url}{path}")
    S3SigV4QueryAuth(Credentials(keys["access_key"], keys["secret_key"]), "s3", "us-east-1", expires=expires).add_auth(request)
    return request.url


def refused(call, **kwargs) -> tuple[str, int]:
    with pytest.raises(ClientError) as e:
        call(**kwargs)
    return e.value.response["Error"]["Code"], e.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_two_keys_with_different_policies(keyed, tmp_path):
    reader_keys = add_key(keyed, tmp_path, "reader", READER_POLICY)
    reader = keyed.s3(**reader_keys)
    writer_keys = add_key(keyed, tmp_path, "writer", WRITER_POLICY)
    writer = keyed.s3(**writer_keys)
    assert keyed.keys_file.stat().st_mode & 0o777 == 0o600
    listed = keys_cli(keyed, "list")
    assert "reader" in listed and "writer" in listed and "secret" not in listed.lower()

    # reader: GetObject on kp-a/public/*, ListBucket on kp-a, nothing else.
    assert reader.get_object(Bucket="kp-a", Key="public/1")["Body"].read() == b"pub"
    assert reader.head_object(Bucket="kp-a", Key="public/1")["ContentLength"] == 3
    assert {o["Key"] for o in reader.list_objects_v2(Bucket="kp-a")["Contents"]} == {"public/1", "private/1"}
    assert [b["Name"] for b in reader.list_buckets()["Buckets"]] == ["kp-a"]
    assert refused(reader.get_object, Bucket="kp-a", Key="private/1") == ("AccessDenied", 403)
    assert refused(reader.put_object, Bucket="kp-a", Key="public/2", Body=b"x") == ("AccessDenied", 403)
    assert refused(reader.delete_object, Bucket="kp-a", Key="public/1") == ("AccessDenied", 403)
    assert refused(reader.get_object, Bucket="kp-b", Key="anything") == ("AccessDenied", 403)
    assert refused(reader.list_objects_v2, Bucket="kp-c") == ("AccessDenied", 403)
    assert refused(reader.create_bucket, Bucket="kp-new") == ("AccessDenied", 403)

    # writer: everything on kp-b, but no DeleteBucket anywhere, and nothing on kp-a.
    writer.put_object(Bucket="kp-b", Key="k", Body=b"v")
    assert writer.get_object(Bucket="kp-b", Key="k")["Body"].read() == b"v"
    upload = writer.create_multipart_upload(Bucket="kp-b", Key="big")["UploadId"]
    part = writer.upload_part(Bucket="kp-b", Key="big", UploadId=upload, PartNumber=1, Body=b"p" * 100)
    writer.complete_multipart_upload(Bucket="kp-b", Key="big", UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert writer.head_object(Bucket="kp-b", Key="big")["ContentLength"] == 100
    writer.delete_object(Bucket="kp-b", Key="k")
    assert [b["Name"] for b in writer.list_buckets()["Buckets"]] == ["kp-b"]
    assert refused(writer.delete_bucket, Bucket="kp-b") == ("AccessDenied", 403)  # explicit Deny wins
    assert refused(writer.get_object, Bucket="kp-a", Key="public/1") == ("AccessDenied", 403)
    assert refused(writer.put_object, Bucket="kp-a", Key="x", Body=b"x") == ("AccessDenied", 403)
    # CopyObject: s3:GetObject on the source, s3:PutObject on the destination.
    assert refused(writer.copy_object, Bucket="kp-b", Key="copy", CopySource={"Bucket": "kp-a", "Key": "public/1"}) \
        == ("AccessDenied", 403)
    assert refused(reader.copy_object, Bucket="kp-a", Key="public/copy",
                   CopySource={"Bucket": "kp-a", "Key": "public/1"}) == ("AccessDenied", 403)

    # The refusal is S3's XML error, naming the key and the action.
    response = requests.get(presign(keyed, reader_keys, "/kp-a/private/1"), timeout=10)
    assert response.status_code == 403 and response.headers["Content-Type"].startswith("application/xml"), response.text
    assert "<Code>AccessDenied</Code>" in response.text and "key reader" in response.text and "s3:GetObject" in response.text
    # A key of the keys file may not use the /system API.
    system = requests.get(f"{keyed.url}/system/functions", timeout=10,
                          auth=(writer_keys["access_key"], writer_keys["secret_key"]))
    assert system.status_code == 401
    keys_cli(keyed, "revoke", "writer")
    keys_cli(keyed, "revoke", "reader")


def test_revoked_key_is_refused_and_added_key_works_without_restart(keyed, tmp_path):
    temp = keyed.s3(**add_key(keyed, tmp_path, "temp", READER_POLICY))
    assert temp.get_object(Bucket="kp-a", Key="public/1")["Body"].read() == b"pub"  # added: works at once
    pid_before = [p["pid"] for p in json.loads((keyed.state_dir / "cluster.json").read_text())["processes"]]
    keys_cli(keyed, "revoke", "temp")
    start = time.monotonic()
    assert refused(temp.get_object, Bucket="kp-a", Key="public/1") == ("InvalidAccessKeyId", 403)
    assert time.monotonic() - start < 1.0
    pid_after = [p["pid"] for p in json.loads((keyed.state_dir / "cluster.json").read_text())["processes"]]
    assert pid_before == pid_after  # no restart


def test_a_bad_keys_file_keeps_the_last_good_keys(keyed, tmp_path):
    creds = add_key(keyed, tmp_path, "keeper", READER_POLICY)
    assert keyed.s3(**creds).get_object(Bucket="kp-a", Key="public/1")["Body"].read() == b"pub"  # loaded
    good = keyed.keys_file.read_text()
    try:
        keyed.keys_file.write_text(good + "- {name: broken, access_key: NKBROKEN, secret_key: x, policy: {}}\n")
        assert keyed.s3(**creds).get_object(Bucket="kp-a", Key="public/1")["Body"].read() == b"pub"
        assert keyed.http.get(f"{keyed.url}/healthz", timeout=10).status_code == 200
    finally:
        keyed.keys_file.write_text(good)
        keys_cli(keyed, "revoke", "keeper")


def test_unauthenticated_and_admin(keyed):
    anonymous = requests.get(f"{keyed.url}/kp-a/public/1", timeout=10)
    assert anonymous.status_code == 403 and "<Code>AccessDenied</Code>" in anonymous.text
    assert keyed.s3().get_object(Bucket="kp-a", Key="private/1")["Body"].read() == b"priv"  # the admin: everything


@pytest.mark.parametrize("expires, status, code", [(604801, 403, "AccessDenied"), (0, 403, "AccessDenied"),
                                                   (-1, 403, "AccessDenied"), (604800, 200, None)])
def test_presigned_url_expiry_out_of_range_is_403(keyed, expires, status, code):
    url = presign(keyed, {"access_key": ADMIN, "secret_key": ADMIN_SECRET}, "/kp-a/public/1", expires)
    response = requests.get(url, timeout=10)
    assert response.status_code == status, response.text
    if code:
        assert f"<Code>{code}</Code>" in response.text


def test_keys_over_the_admin_api(keyed):
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject",
                                                      "Resource": "arn:aws:s3:::kp-a/*"}]}
    assert requests.post(f"{keyed.url}/system/keys", json={"name": "api", "policy": policy}, timeout=10).status_code == 401
    created = keyed.http.post(f"{keyed.url}/system/keys", json={"name": "api", "policy": policy}, timeout=10)
    assert created.status_code == 201, created.text
    creds = {k: created.json()[k] for k in ("access_key", "secret_key")}
    api = keyed.s3(**creds)
    assert api.get_object(Bucket="kp-a", Key="private/1")["Body"].read() == b"priv"
    assert refused(api.put_object, Bucket="kp-a", Key="x", Body=b"x") == ("AccessDenied", 403)
    listed = keyed.http.get(f"{keyed.url}/system/keys", timeout=10).json()
    assert [k["name"] for k in listed] == ["api"] and "secret_key" not in json.dumps(listed)
    bad = keyed.http.post(f"{keyed.url}/system/keys", json={"name": "bad", "policy": {"Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "kp-a/*"}]}}, timeout=10)
    assert bad.status_code == 400 and "Statement[0].Resource" in bad.json()["error"]
    assert keyed.http.delete(f"{keyed.url}/system/keys/api", timeout=10).status_code == 204
    assert refused(api.get_object, Bucket="kp-a", Key="private/1") == ("InvalidAccessKeyId", 403)
    assert keyed.http.delete(f"{keyed.url}/system/keys/api", timeout=10).status_code == 404


EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def test_a_keys_bucket_is_its_own_and_its_bucket_policy_lets_others_in(keyed, tmp_path):
    """Buckets have owners (the key that made them) and bucket policies (PutBucketPolicy, as
    aws-cli, Terraform and boto3 manage them). Catches: a second key with a broad policy of its
    own reading another key's bucket (no owners), a bucket policy ignored or honoured from a
    non-owner, a policy naming resources outside its bucket stored, the policy leaking in HEAD."""
    alice = keyed.s3(**add_key(keyed, tmp_path, "alice", EVERYTHING))
    bob_keys = add_key(keyed, tmp_path, "bob", EVERYTHING)
    bob = keyed.s3(**bob_keys)
    admin = keyed.s3()
    try:
        alice.create_bucket(Bucket="kp-alice")
        alice.put_object(Bucket="kp-alice", Key="photo", Body=b"alice's")
        # bob's own policy allows everything, but kp-alice is alice's and no bucket policy lets him in
        assert refused(bob.get_object, Bucket="kp-alice", Key="photo") == ("AccessDenied", 403)
        assert refused(bob.list_objects_v2, Bucket="kp-alice") == ("AccessDenied", 403)
        assert refused(bob.put_object, Bucket="kp-alice", Key="x", Body=b"x") == ("AccessDenied", 403)
        assert "kp-alice" not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
        assert refused(bob.create_bucket, Bucket="kp-alice") == ("BucketAlreadyExists", 409)
        assert refused(bob.copy_object, Bucket="kp-b", Key="stolen", CopySource={"Bucket": "kp-alice", "Key": "photo"}) \
            == ("AccessDenied", 403)
        assert refused(alice.get_bucket_policy, Bucket="kp-alice") == ("NoSuchBucketPolicy", 404)
        # only the owner (or the admin) sets the policy; a bad one is refused, naming the field
        grant = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": [bob_keys["access_key"]]}, "Action": "s3:GetObject",
             "Resource": "arn:aws:s3:::kp-alice/*"}]}
        assert refused(bob.put_bucket_policy, Bucket="kp-alice", Policy=json.dumps(grant)) == ("AccessDenied", 403)
        outside = {"Version": "2012-10-17", "Statement": [dict(grant["Statement"][0], Resource="arn:aws:s3:::kp-a/*")]}
        code, status = refused(alice.put_bucket_policy, Bucket="kp-alice", Policy=json.dumps(outside))
        assert (code, status) == ("MalformedPolicy", 400)
        alice.put_bucket_policy(Bucket="kp-alice", Policy=json.dumps(grant))
        assert json.loads(alice.get_bucket_policy(Bucket="kp-alice")["Policy"]) == grant
        assert alice.get_bucket_policy_status(Bucket="kp-alice")["PolicyStatus"]["IsPublic"] is False
        # bob may now read, and only read
        assert bob.get_object(Bucket="kp-alice", Key="photo")["Body"].read() == b"alice's"
        assert refused(bob.put_object, Bucket="kp-alice", Key="x", Body=b"x") == ("AccessDenied", 403)
        assert refused(bob.delete_bucket_policy, Bucket="kp-alice") == ("AccessDenied", 403)
        # a HEAD of the bucket shows neither owner nor policy
        head = alice.head_bucket(Bucket="kp-alice")["ResponseMetadata"]["HTTPHeaders"]
        assert "policy" not in head.get("x-nearfaas-bucket-options", "") and "owner" not in head.get("x-nearfaas-bucket-options", "")
        # a Deny in the bucket's policy binds its owner too; the admin is above it
        deny = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::kp-alice/*"},
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::kp-alice/*"}]}
        alice.put_bucket_policy(Bucket="kp-alice", Policy=json.dumps(deny))
        assert alice.get_bucket_policy_status(Bucket="kp-alice")["PolicyStatus"]["IsPublic"] is True
        assert refused(alice.delete_object, Bucket="kp-alice", Key="photo") == ("AccessDenied", 403)
        assert bob.get_object(Bucket="kp-alice", Key="photo")["Body"].read() == b"alice's"
        admin.delete_bucket_policy(Bucket="kp-alice")
        assert refused(bob.get_object, Bucket="kp-alice", Key="photo") == ("AccessDenied", 403)
        alice.delete_object(Bucket="kp-alice", Key="photo")
        # unauthenticated: refused before any policy is read
        assert requests.get(f"{keyed.url}/kp-alice?policy", timeout=10).status_code == 403
    finally:
        admin.delete_bucket_policy(Bucket="kp-alice")
        for obj in admin.list_objects_v2(Bucket="kp-alice").get("Contents", []):
            admin.delete_object(Bucket="kp-alice", Key=obj["Key"])
        admin.delete_bucket(Bucket="kp-alice")
        keys_cli(keyed, "revoke", "alice")
        keys_cli(keyed, "revoke", "bob")


def test_two_keys_creating_one_bucket_at_once_get_one_owner_and_one_409(keyed, tmp_path):
    """Red team: both were told 200 though one owned it (and, without one creation at a time,
    the nodes could disagree on the owner)."""
    from concurrent.futures import ThreadPoolExecutor

    clients = [keyed.s3(**add_key(keyed, tmp_path, name, EVERYTHING)) for name in ("racer-a", "racer-b")]
    admin = keyed.s3()
    try:
        for round_ in range(5):
            name = f"kp-race-{round_}"
            with ThreadPoolExecutor(2) as pool:
                outcomes = list(pool.map(_create_outcome, clients, [name] * len(clients)))
            assert sorted(outcomes) == [200, 409], outcomes
            winner = clients[outcomes.index(200)]
            winner.put_object(Bucket=name, Key="k", Body=b"mine")
            loser = clients[outcomes.index(409)]
            assert refused(loser.get_object, Bucket=name, Key="k") == ("AccessDenied", 403)
            admin.delete_object(Bucket=name, Key="k")
            admin.delete_bucket(Bucket=name)
    finally:
        keys_cli(keyed, "revoke", "racer-a")
        keys_cli(keyed, "revoke", "racer-b")


def _create_outcome(client, name: str) -> int:
    try:
        return client.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "BucketAlreadyExists", exc.response
        return exc.response["ResponseMetadata"]["HTTPStatusCode"]
