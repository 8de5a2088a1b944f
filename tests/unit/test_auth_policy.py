"""Several access keys, each limited by an S3 bucket-policy subset (issue 22, item 5):
the policy engine (auth/policy.py), the action each request needs (s3/actions.py), the keys
file and its reloads (auth/keys.py), and the front end refusing what a key's policy does not
allow, with real boto3 clients against an in-process S3 server."""

from __future__ import annotations

import json
import os
import stat

import pytest
import requests
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.auth import keys as access_keys
from nearfaas.auth.policy import Policy, PolicyError, Statement
from nearfaas.s3 import actions
from nearfaas.s3.errors import S3Error
from nearfaas.s3.sigv4 import Principal, S3Auth
from s3_test_server import S3TestServer

pytestmark = pytest.mark.timeout(60)

ADMIN, ADMIN_SECRET = "AKIDADMIN", "admin-secret-0123456789"


def policy(*statements) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action, resource) -> dict:
    return {"Effect": "Allow", "Action": action, "Resource": resource}


def deny(action, resource) -> dict:
    return {"Effect": "Deny", "Action": action, "Resource": resource}


READ_A_REPORTS = policy(allow(["s3:GetObject"], "arn:aws:s3:::aaa/reports/*"),
                        allow("s3:ListBucket", "arn:aws:s3:::aaa"), allow("s3:ListAllMyBuckets", "arn:aws:s3:::*"))
RW_B = policy(allow("s3:*", ["arn:aws:s3:::bbb", "arn:aws:s3:::bbb/*"]), allow("s3:ListAllMyBuckets", "*"))


# -- the engine --------------------------------------------------------------------------------


def test_explicit_deny_wins_and_no_match_is_refused():
    p = Policy.parse(policy(allow("s3:*", "arn:aws:s3:::b/*"), deny("s3:DeleteObject", "arn:aws:s3:::b/keep/*")))
    assert p.authorize("s3:GetObject", "b", "x")
    assert p.authorize("s3:DeleteObject", "b", "tmp/x")
    assert not p.authorize("s3:DeleteObject", "b", "keep/x")
    assert p.decide("s3:DeleteObject", "arn:aws:s3:::b/keep/x") == "Deny"
    assert p.decide("s3:GetObject", "arn:aws:s3:::c/x") is None
    assert not p.authorize("s3:ListBucket", "b", None)  # the bucket's ARN is not b/*


def test_wildcards_in_actions_and_resources():
    p = Policy.parse(policy(allow(["s3:Get*", "s3:List?ucket"], ["arn:aws:s3:::logs-??/2024/*", "arn:aws:s3:::logs-??"])))
    assert p.authorize("s3:GetObject", "logs-eu", "2024/01/x.gz")
    assert p.authorize("s3:getobjectattributes", "logs-eu", "2024/x")  # actions are case-insensitive
    assert p.authorize("s3:ListBucket", "logs-us", None)
    assert not p.authorize("s3:GetObject", "logs-eur", "2024/x")
    assert not p.authorize("s3:GetObject", "logs-eu", "2023/x")
    assert not p.authorize("s3:GetObject", "LOGS-eu", "2024/x")  # resources are case-sensitive
    assert not p.authorize("s3:PutObject", "logs-eu", "2024/x")
    literal = Policy.parse(policy(allow("s3:GetObject", "arn:aws:s3:::a/x.y[1]+")))
    assert literal.authorize("s3:GetObject", "a", "x.y[1]+") and not literal.authorize("s3:GetObject", "a", "xzy1")


def test_single_statement_and_string_forms():
    p = Policy.parse(json.dumps({"Statement": {"Effect": "Allow", "Action": "*", "Resource": "*"}}))
    assert p.authorize("s3:DeleteBucket", "any", None)


@pytest.mark.parametrize("document, message", [
    ("{not json", "not valid JSON"),
    ([], "must be an object"),
    ({"Version": "2012-10-17"}, "Statement: must be a non-empty list"),
    ({"Version": "2020-01-01", "Statement": [allow("s3:*", "*")]}, 'Version: \'2020-01-01\''),
    (policy(allow("s3:*", "*"), {"Effect": "allow", "Action": "s3:*", "Resource": "*"}),
     'Statement[1].Effect: must be "Allow" or "Deny"'),
    (policy({"Effect": "Allow", "Resource": "*"}), "Statement[0].Action: must be a non-empty string or list"),
    (policy(allow("s3:*", [])), "Statement[0].Resource: must be a non-empty string or list"),
    (policy(allow("ec2:RunInstances", "*")), "Statement[0].Action: 'ec2:RunInstances' is not an S3 action"),
    (policy(allow("s3:GetObjct", "*")), "Statement[0].Action: 's3:GetObjct' is not an action nearfaas checks"),
    (policy(allow("s3:*", "bucket/*")), "Statement[0].Resource: 'bucket/*' is not an S3 ARN"),
    (policy({**allow("s3:*", "*"), "Condition": {}}), "Statement[0].Condition: conditions are not supported"),
    (policy({**allow("s3:*", "*"), "NotResource": "*"}), "Statement[0].NotResource"),
    (policy({**allow("s3:*", "*"), "Principal": {"AWS": "arn:aws:iam::1:user/x"}}), "Statement[0].Principal"),
    (policy({**allow("s3:*", "*"), "Actions": "s3:*"}), "Statement[0]: unknown field 'Actions'"),
])
def test_bad_policies_name_the_statement_field_and_fix(document, message):
    with pytest.raises(PolicyError) as e:
        Policy.parse(document, "policy")
    assert message in str(e.value)


_ACTIONS = sorted(actions.ACTIONS)
_BUCKETS = ["a", "b", "logs"]
_KEYS = [None, "x", "reports/1", "reports/2/z", "tmp/y"]
_ACTION_GLOBS = _ACTIONS + ["s3:*", "s3:Get*", "s3:List*", "*", "s3:?etObject"]
_RESOURCE_GLOBS = ["*", "arn:aws:s3:::*", "arn:aws:s3:::a", "arn:aws:s3:::a/*", "arn:aws:s3:::a/reports/*",
                   "arn:aws:s3:::b*", "arn:aws:s3:::?/tmp/*", "arn:aws:s3:::logs/reports/?"]
statements = st.builds(lambda effect, acts, res: Statement(effect, tuple(acts), tuple(res)),
                       st.sampled_from(["Allow", "Deny"]),
                       st.lists(st.sampled_from(_ACTION_GLOBS), min_size=1, max_size=3),
                       st.lists(st.sampled_from(_RESOURCE_GLOBS), min_size=1, max_size=3))
requests_ = st.tuples(st.sampled_from(_ACTIONS), st.sampled_from(_BUCKETS), st.sampled_from(_KEYS))


@settings(max_examples=300, deadline=None)
@given(st.lists(statements, max_size=6), requests_, st.sampled_from(_ACTION_GLOBS), st.sampled_from(_RESOURCE_GLOBS))
def test_a_matching_deny_refuses_whatever_the_allows(others, request, deny_action, deny_resource):
    action, bucket, key = request
    deny_statement = Statement("Deny", (deny_action,), (deny_resource,))
    p = Policy((*others, deny_statement, Statement("Allow", ("*",), ("*",))))
    if deny_statement.matches(action, actions.resource_arn(bucket, key)):
        assert not p.authorize(action, bucket, key)


@settings(max_examples=300, deadline=None)
@given(st.lists(statements, max_size=6), st.lists(requests_, min_size=1, max_size=8), st.sampled_from(_ACTION_GLOBS),
       st.sampled_from(_RESOURCE_GLOBS))
def test_adding_an_allow_never_refuses_what_was_allowed(base, probes, action_glob, resource_glob):
    before = Policy(tuple(base))
    after = Policy((*base, Statement("Allow", (action_glob,), (resource_glob,))))
    for action, bucket, key in probes:
        if before.authorize(action, bucket, key):
            assert after.authorize(action, bucket, key)


# -- which action a request needs ----------------------------------------------------------------


@pytest.mark.parametrize("method, bucket, key, q, action", [
    ("GET", None, "", {}, "s3:ListAllMyBuckets"),
    ("GET", "b", "", {}, "s3:ListBucket"),
    ("GET", "b", "", {"list-type": "2"}, "s3:ListBucket"),
    ("HEAD", "b", "", {}, "s3:ListBucket"),
    ("GET", "b", "", {"location": ""}, "s3:GetBucketLocation"),
    ("GET", "b", "", {"uploads": ""}, "s3:ListBucketMultipartUploads"),
    ("PUT", "b", "", {}, "s3:CreateBucket"),
    ("DELETE", "b", "", {}, "s3:DeleteBucket"),
    ("POST", "b", "", {"delete": ""}, None),  # checked per key
    ("GET", "b", "k", {}, "s3:GetObject"),
    ("HEAD", "b", "k", {}, "s3:GetObject"),
    ("POST", "b", "k", {"select": "", "select-type": "2"}, "s3:GetObject"),
    ("GET", "b", "k", {"attributes": ""}, "s3:GetObjectAttributes"),
    ("GET", "b", "k", {"attributes": "", "versionId": "v1"}, "s3:GetObjectVersionAttributes"),  # not GetObjectAttributes: an old version's
    ("GET", "b", "k", {"uploadId": "u"}, "s3:ListMultipartUploadParts"),
    ("PUT", "b", "k", {}, "s3:PutObject"),
    ("PUT", "b", "k", {"uploadId": "u", "partNumber": "1"}, "s3:PutObject"),
    ("POST", "b", "k", {"uploads": ""}, "s3:PutObject"),
    ("POST", "b", "k", {"uploadId": "u"}, "s3:PutObject"),
    ("DELETE", "b", "k", {}, "s3:DeleteObject"),
    ("DELETE", "b", "k", {"uploadId": "u"}, "s3:AbortMultipartUpload"),
])
def test_action_for_each_operation(method, bucket, key, q, action):
    assert actions.action_for(method, bucket, key, q) == action


def test_principal_authorize_combines_bucket_scope_and_policy():
    p = Policy.parse(RW_B)
    scoped = Principal("k", "s", buckets=frozenset({"a"}), authorizer=p.authorize)
    assert not scoped.authorize("s3:GetObject", "bbb", "x")  # the policy allows it, the scope does not
    assert not scoped.authorize("s3:GetObject", "a", "x")  # the scope allows it, the policy does not
    assert Principal("admin", "s").authorize("s3:DeleteBucket", "z")
    with pytest.raises(S3Error) as e:
        actions.copy_source_check(Principal("key r", "s", authorizer=p.authorize), "a", "src")
    assert (e.value.code, e.value.status) == ("AccessDenied", 403)
    actions.copy_source_check(Principal("key r", "s", authorizer=p.authorize), "bbb", "src")
    actions.copy_source_check(None, "a", "src")  # auth off


# -- the keys file -----------------------------------------------------------------------------


def _write(path, entries):
    path.write_text(json.dumps({"keys": entries}))


def test_keys_file_reloads_on_change_and_keeps_the_last_good_set(tmp_path, caplog):
    path = tmp_path / "keys.json"
    store = access_keys.KeyStore(path, reserved={ADMIN})
    assert store.lookup("NKREADER") is None  # no file: no keys
    _write(path, [{"name": "reader", "access_key": "NKREADER", "secret_key": "r" * 20, "policy": READ_A_REPORTS}])
    entry = store.lookup("NKREADER")
    assert entry.name == "reader" and entry.policy.authorize("s3:GetObject", "aaa", "reports/x")
    path.write_text('{"keys": [{"name": "reader", "access_key": "NKREADER", "secret_key": "short", "policy": {}}]}')
    assert store.lookup("NKREADER") is not None  # the bad file is refused, the last good set stays
    assert "keys[0] (reader).secret_key" in store.last_error
    assert "previous keys stay in force" in caplog.text
    _write(path, [])
    assert store.lookup("NKREADER") is None and store.last_error is None  # revoked
    os.unlink(path)
    assert store.entries() == []


@pytest.mark.parametrize("entries, message", [
    ([{"access_key": ADMIN, "secret_key": "x" * 20, "policy": RW_B}], "cluster's own key"),
    ([{"access_key": "nff.f.1", "secret_key": "x" * 20, "policy": RW_B}], "function key"),
    ([{"access_key": "NK1", "secret_key": "x" * 20, "policy": RW_B}] * 2, "listed twice"),
    ([{"access_key": "NK1", "secret_key": "x" * 20}], "give exactly one of policy"),
    ([{"access_key": "NK1", "secret_key": "x" * 20, "policy": policy(allow("s3:*", "b/*"))}],
     "keys[0] (NK1).policy.Statement[0].Resource: 'b/*' is not an S3 ARN"),
    ([{"access_key": "NK1", "secret_file": "missing.secret", "policy": RW_B}], "secret_file: cannot read"),
])
def test_bad_keys_files_are_explained(tmp_path, entries, message):
    path = tmp_path / "keys.json"
    _write(path, entries)
    with pytest.raises(access_keys.KeysFileError) as e:
        access_keys.load_keys(path, reserved={ADMIN})
    assert message in str(e.value)


def test_add_list_revoke_write_the_file_atomically_and_privately(tmp_path):
    path = tmp_path / "keys.yml"
    (tmp_path / "reader.secret").write_text("s" * 24 + "\n")
    entry = access_keys.add_key(path, "writer", RW_B)
    assert entry.access_key.startswith("NK") and len(entry.secret_key) >= 30
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(access_keys.KeysFileError, match="exists"):
        access_keys.add_key(path, "writer", RW_B)
    with pytest.raises(PolicyError, match="Statement"):
        access_keys.add_key(path, "bad", {"Statement": []})
    # A hand-written entry with a secret file survives the CLI's rewrites.
    text = path.read_text() + "- {name: reader, access_key: NKREADER, secret_file: reader.secret, policy_file: p.json}\n"
    (tmp_path / "p.json").write_text(json.dumps(READ_A_REPORTS))
    path.write_text(text)
    assert [e.name for e in access_keys.list_keys(path)] == ["writer", "reader"]
    assert access_keys.load_keys(path)["NKREADER"].secret_key == "s" * 24
    assert access_keys.revoke_key(path, entry.access_key) == "writer"
    assert [e.name for e in access_keys.list_keys(path)] == ["reader"]
    with pytest.raises(access_keys.KeysFileError, match="no key named"):
        access_keys.revoke_key(path, "writer")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".keys.yml.")] == []  # no temp file left


def test_keys_path_default_and_configured(tmp_path):
    assert access_keys.keys_path({"access_key": "x"}, tmp_path) == tmp_path / "keys.yml"
    assert access_keys.keys_path({"keys_file": "conf/k.json"}, tmp_path) == tmp_path / "conf" / "k.json"
    assert access_keys.keys_path({"keys_file": "/etc/k.yml"}, tmp_path) == access_keys.Path("/etc/k.yml")


def test_cluster_file_auth_block_takes_a_keys_file():
    from nearfaas.spec.cluster import _auth, _auth_dict
    from nearfaas.spec.errors import Collector

    c = Collector()
    spec = _auth({"keys_file": "/srv/keys.yml"}, c)
    assert spec.generated and spec.keys_file == "/srv/keys.yml" and not c.problems
    spec = _auth({"access_key": "AK", "secret_key": "S" * 20, "keys_file": "k.yml"}, c)
    assert not spec.generated and spec.keys_file == "k.yml" and not c.problems
    spec = _auth({"keys_file": "k.yml", "region": "eu-west-1"}, c)
    assert spec.generated and spec.region == "eu-west-1" and _auth(_auth_dict(spec), c) == spec and not c.problems


# -- the front end with several keys -------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    path = folder / "keys.json"
    _write(path, [{"name": "reader", "access_key": "NKREADER", "secret_key": "r" * 20, "policy": READ_A_REPORTS},
                  {"name": "writer", "access_key": "NKWRITER", "secret_key": "w" * 20, "policy": RW_B}])
    store = access_keys.KeyStore(path, reserved={ADMIN})
    auth = S3Auth({ADMIN: ADMIN_SECRET}, resolver=access_keys.resolver(store))
    srv = S3TestServer(folder / "store", auth=auth).start()
    srv.keys_file = path
    admin = srv.client(ADMIN, ADMIN_SECRET)
    for bucket in ("aaa", "bbb", "ccc"):
        admin.create_bucket(Bucket=bucket)
    admin.put_object(Bucket="aaa", Key="reports/1", Body=b"r1")
    admin.put_object(Bucket="aaa", Key="private/1", Body=b"p1")
    yield srv
    srv.stop()


def denied(call, *args, **kwargs):
    with pytest.raises(ClientError) as e:
        call(*args, **kwargs)
    error = e.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]


def test_reader_may_read_its_prefix_only(server):
    reader = server.client("NKREADER", "r" * 20)
    assert reader.get_object(Bucket="aaa", Key="reports/1")["Body"].read() == b"r1"
    assert reader.head_object(Bucket="aaa", Key="reports/1")["ContentLength"] == 2
    assert [o["Key"] for o in reader.list_objects_v2(Bucket="aaa")["Contents"]] == ["private/1", "reports/1"]
    assert [b["Name"] for b in reader.list_buckets()["Buckets"]] == ["aaa"]  # only what it may list
    assert denied(reader.get_object, Bucket="aaa", Key="private/1") == ("AccessDenied", 403)
    assert denied(reader.put_object, Bucket="aaa", Key="reports/2", Body=b"x") == ("AccessDenied", 403)
    assert denied(reader.delete_object, Bucket="aaa", Key="reports/1") == ("AccessDenied", 403)
    assert denied(reader.list_objects_v2, Bucket="bbb") == ("AccessDenied", 403)
    assert denied(reader.create_bucket, Bucket="ddd") == ("AccessDenied", 403)
    assert denied(reader.delete_bucket, Bucket="ccc") == ("AccessDenied", 403)
    assert denied(reader.create_multipart_upload, Bucket="aaa", Key="reports/3") == ("AccessDenied", 403)


def test_writer_has_its_bucket_and_nothing_else(server):
    writer = server.client("NKWRITER", "w" * 20)
    writer.put_object(Bucket="bbb", Key="k", Body=b"v")
    assert writer.get_object(Bucket="bbb", Key="k")["Body"].read() == b"v"
    upload = writer.create_multipart_upload(Bucket="bbb", Key="big")["UploadId"]
    assert writer.list_multipart_uploads(Bucket="bbb")["Uploads"][0]["Key"] == "big"
    writer.abort_multipart_upload(Bucket="bbb", Key="big", UploadId=upload)
    assert {b["Name"] for b in writer.list_buckets()["Buckets"]} == {"bbb"}
    assert denied(writer.get_object, Bucket="aaa", Key="reports/1") == ("AccessDenied", 403)
    assert denied(writer.list_objects_v2, Bucket="aaa") == ("AccessDenied", 403)
    writer.delete_object(Bucket="bbb", Key="k")


def test_delete_objects_is_checked_per_key(server):
    admin = server.client(ADMIN, ADMIN_SECRET)
    admin.put_object(Bucket="ccc", Key="x", Body=b"1")
    deny_c = policy(allow("s3:*", ["arn:aws:s3:::ccc", "arn:aws:s3:::ccc/*"]), deny("s3:DeleteObject", "arn:aws:s3:::ccc/x"))
    entries = json.loads(server.keys_file.read_text())["keys"]
    _write(server.keys_file, entries + [{"name": "c-user", "access_key": "NKCUSER", "secret_key": "c" * 20, "policy": deny_c}])
    try:
        user = server.client("NKCUSER", "c" * 20)
        user.put_object(Bucket="ccc", Key="y", Body=b"2")
        result = user.delete_objects(Bucket="ccc", Delete={"Objects": [{"Key": "x"}, {"Key": "y"}]})
        assert [d["Key"] for d in result["Deleted"]] == ["y"]
        assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("x", "AccessDenied")]
        assert admin.get_object(Bucket="ccc", Key="x")["Body"].read() == b"1"
    finally:
        _write(server.keys_file, entries)


def test_revoked_and_added_keys_take_effect_without_restart(server):
    entries = json.loads(server.keys_file.read_text())["keys"]
    reader = server.client("NKREADER", "r" * 20)
    try:
        _write(server.keys_file, [e for e in entries if e["name"] != "reader"])
        assert denied(reader.get_object, Bucket="aaa", Key="reports/1") == ("InvalidAccessKeyId", 403)
        _write(server.keys_file, entries + [{"name": "new", "access_key": "NKNEW00", "secret_key": "n" * 20,
                                             "policy": policy(allow("s3:GetObject", "arn:aws:s3:::aaa/*"))}])
        assert server.client("NKNEW00", "n" * 20).get_object(Bucket="aaa", Key="private/1")["Body"].read() == b"p1"
        assert reader.get_object(Bucket="aaa", Key="reports/1")["Body"].read() == b"r1"  # back
    finally:
        _write(server.keys_file, entries)


def test_access_denied_is_s3_xml_and_presigned_urls_obey_the_policy(server):
    reader = server.client("NKREADER", "r" * 20)
    url = reader.generate_presigned_url("get_object", Params={"Bucket": "aaa", "Key": "private/1"}, ExpiresIn=60)
    response = requests.get(url, timeout=10)
    assert response.status_code == 403
    assert "<Code>AccessDenied</Code>" in response.text and "key reader" in response.text
    assert "s3:GetObject" in response.text and "<Resource>/aaa/private/1</Resource>" in response.text
    ok = reader.generate_presigned_url("get_object", Params={"Bucket": "aaa", "Key": "reports/1"}, ExpiresIn=60)
    assert requests.get(ok, timeout=10).content == b"r1"
    anonymous = requests.get(f"{server.endpoint}/aaa/reports/1", timeout=10)
    assert anonymous.status_code == 403 and "<Code>AccessDenied</Code>" in anonymous.text


@pytest.mark.parametrize("expires, code, status", [
    ("0", "AccessDenied", 403), ("604801", "AccessDenied", 403), ("-7", "AccessDenied", 403),
    ("soon", "AuthorizationQueryParametersError", 400), ("604800", None, 200), ("1", None, 200),
])
def test_presigned_expiry_out_of_range_is_403(server, expires, code, status):
    """As S3 (and the s3-tests conformance suite's x_amz_expires_out_* tests): a number out of
    1..604800 is 403; a value that is no number is a malformed query, 400."""
    # Sign the out-of-range value itself (botocore's presigner refuses it), so only the range decides.
    request = AWSRequest(method="GET", url=f"{server.endpoint}/aaa/reports/1")
    number = expires.lstrip("-").isdigit()
    S3SigV4QueryAuth(Credentials(ADMIN, ADMIN_SECRET), "s3", "us-east-1", expires=int(expires) if number else 60).add_auth(request)
    url = request.url if number else request.url.replace("X-Amz-Expires=60", f"X-Amz-Expires={expires}")
    response = requests.get(url, timeout=10)
    assert response.status_code == status, response.text
    if code:
        assert f"<Code>{code}</Code>" in response.text


def test_copy_needs_get_on_the_source_and_put_on_the_destination(server):
    reader = server.client("NKREADER", "r" * 20)
    writer = server.client("NKWRITER", "w" * 20)
    # writer may put into bbb but not read aaa; reader may read aaa/reports but not put.
    assert denied(writer.copy_object, Bucket="bbb", Key="copied", CopySource={"Bucket": "aaa", "Key": "reports/1"}) \
        == ("AccessDenied", 403)
    assert denied(reader.copy_object, Bucket="aaa", Key="reports/copy",
                  CopySource={"Bucket": "aaa", "Key": "reports/1"}) == ("AccessDenied", 403)
    writer.put_object(Bucket="bbb", Key="src", Body=b"s")
    writer.copy_object(Bucket="bbb", Key="dst", CopySource={"Bucket": "bbb", "Key": "src"})
    assert writer.get_object(Bucket="bbb", Key="dst")["Body"].read() == b"s"
