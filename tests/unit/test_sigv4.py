"""SigV4 verification: real boto3 clients against the front end, and S3Auth on its own."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qsl, urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from multidict import CIMultiDict

from nearfaas.s3.errors import S3Error
from nearfaas.s3.node_client import NodeClient
from nearfaas.s3.sigv4 import Principal, S3Auth
from s3_test_server import S3TestServer

pytestmark = pytest.mark.timeout(60)

KEY, SECRET = "AKIDNEARFAAS", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = S3TestServer(tmp_path_factory.mktemp("auth"), auth=S3Auth({KEY: SECRET}), min_part_size=5).start()
    srv.client(KEY, SECRET).create_bucket(Bucket="signed")
    yield srv
    srv.stop()


def code_of(excinfo) -> tuple[str, int]:
    return excinfo.value.response["Error"]["Code"], excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def signed_headers(url: str, method: str = "GET", body: bytes = b"", headers: dict | None = None,
                   secret: str = SECRET, payload_hash: str | None = None) -> dict[str, str]:
    """Headers of a request signed by botocore's own signer, as an SDK would send them."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    if payload_hash is not None:
        request.headers["X-Amz-Content-SHA256"] = payload_hash
        signer = type("FixedPayload", (S3SigV4Auth,), {"payload": lambda self, r: payload_hash})
    else:
        signer = S3SigV4Auth
    signer(Credentials(KEY, secret), "s3", "us-east-1").add_auth(request)
    return {"Host": urlsplit(url).netloc, **dict(request.headers.items())}


def send(server, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        headers = {name: value for name, value in headers.items() if name.lower() != "content-length"}  # ours counts
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# -- through the server ---------------------------------------------------------------------------


def test_boto3_with_correct_keys_passes(server):
    s3 = server.client(KEY, SECRET)
    keys = ["plain", "with space", "ü/ñ/日本", "sym+=&?#%bols", "tilde~and*star()!'", "a%2Fb"]
    for key in keys:
        s3.put_object(Bucket="signed", Key=key, Body=b"v:" + key.encode(), Metadata={"who": "me"})
        assert s3.get_object(Bucket="signed", Key=key)["Body"].read() == b"v:" + key.encode()
        assert s3.head_object(Bucket="signed", Key=key)["Metadata"] == {"who": "me"}
    listed = s3.list_objects_v2(Bucket="signed", Prefix="sym+=&", Delimiter="/", StartAfter="a b", MaxKeys=5)
    assert [o["Key"] for o in listed["Contents"]] == ["sym+=&?#%bols"]
    assert s3.get_object(Bucket="signed", Key="plain", Range="bytes=2-")["Body"].read() == b"plain"
    upload = s3.create_multipart_upload(Bucket="signed", Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket="signed", Key="mp", UploadId=upload, PartNumber=1, Body=b"part")["ETag"]
    s3.complete_multipart_upload(Bucket="signed", Key="mp", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    s3.delete_object(Bucket="signed", Key="mp")
    s3.head_bucket(Bucket="signed")
    assert "signed" in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_presigned_urls(server):
    s3 = server.client(KEY, SECRET)
    s3.put_object(Bucket="signed", Key="pre/ü x", Body=b"presigned body")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "signed", "Key": "pre/ü x"}, ExpiresIn=60)
    assert urllib.request.urlopen(url, timeout=10).read() == b"presigned body"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "signed", "Key": "pre/put"}, ExpiresIn=60)
    urllib.request.urlopen(urllib.request.Request(put_url, data=b"uploaded", method="PUT"), timeout=10).read()
    assert s3.get_object(Bucket="signed", Key="pre/put")["Body"].read() == b"uploaded"
    tampered = url.replace("X-Amz-Expires=60", "X-Amz-Expires=61")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered, timeout=10)
    assert e.value.code == 403 and b"SignatureDoesNotMatch" in e.value.read()


def test_a_sigv2_presigned_url_is_refused_with_how_to_presign_with_sigv4(server):
    # catches: a SigV2 URL (aws-cli 1.x `aws s3 presign`, boto3 with signature_version "s3")
    # served unchecked, or refused without saying how to get a URL that works
    import boto3
    from botocore.config import Config

    s3 = server.client(KEY, SECRET)
    s3.put_object(Bucket="signed", Key="pre/v2", Body=b"not for v2")
    v2 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                      aws_secret_access_key=SECRET, config=Config(signature_version="s3", s3={"addressing_style": "path"}))
    url = v2.generate_presigned_url("get_object", Params={"Bucket": "signed", "Key": "pre/v2"}, ExpiresIn=60)
    assert "AWSAccessKeyId=" in url and "Signature=" in url
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    body = e.value.read()
    assert e.value.code == 400 and b"InvalidRequest" in body and b"not for v2" not in body
    assert b"Signature Version 2" in body and b"default.s3.signature_version s3v4" in body and b"signature_version=" in body


def test_wrong_secret_is_signature_does_not_match(server):
    s3 = server.client(KEY, "not-the-secret")
    for call in (lambda: s3.list_objects_v2(Bucket="signed"), lambda: s3.put_object(Bucket="signed", Key="k", Body=b"x"),
                 lambda: s3.get_object(Bucket="signed", Key="plain")):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == ("SignatureDoesNotMatch", 403)


def test_unknown_access_key(server):
    with pytest.raises(ClientError) as e:
        server.client("AKIDUNKNOWN", SECRET).list_buckets()
    assert code_of(e) == ("InvalidAccessKeyId", 403)


def test_unsigned_request_is_access_denied(server):
    s3 = server.client(unsigned=True)
    for call in (lambda: s3.list_objects_v2(Bucket="signed"), lambda: s3.put_object(Bucket="signed", Key="anon", Body=b"x")):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == ("AccessDenied", 403)
    with pytest.raises(ClientError):
        server.client(KEY, SECRET).head_object(Bucket="signed", Key="anon")


def test_tampered_signed_header(server):
    url = f"http://127.0.0.1:{server.port}/signed/tamper"
    headers = signed_headers(url, "PUT", b"body", {"x-amz-meta-owner": "alice"})
    status, _ = send(server, "PUT", "/signed/tamper", headers, b"body")
    assert status == 200
    headers["x-amz-meta-owner"] = "mallory"
    status, body = send(server, "PUT", "/signed/tamper", headers, b"body")
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body


def test_body_must_match_signed_payload_hash(server):
    url = f"http://127.0.0.1:{server.port}/signed/swapped"
    headers = signed_headers(url, "PUT", b"the signed body")
    status, body = send(server, "PUT", "/signed/swapped", headers, b"another body!!!")
    assert status == 400 and b"<Code>XAmzContentSHA256Mismatch</Code>" in body
    with pytest.raises(ClientError) as e:
        server.client(KEY, SECRET).head_object(Bucket="signed", Key="swapped")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # UNSIGNED-PAYLOAD is a legitimate choice: the body is then not hashed.
    headers = signed_headers(url, "PUT", b"", payload_hash="UNSIGNED-PAYLOAD")
    status, _ = send(server, "PUT", "/signed/swapped", headers, b"any body")
    assert status == 200


def test_malformed_and_unsupported_authorization(server):
    base = {"Host": f"127.0.0.1:{server.port}", "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
            "x-amz-date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())}
    cases = [
        ("AWS4-HMAC-SHA256 Credential=x", "AuthorizationHeaderMalformed"),
        (f"AWS4-HMAC-SHA256 Credential={KEY}/20200101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
         "AuthorizationHeaderMalformed"),  # scope date is not the request date
        (f"AWS4-HMAC-SHA256 Credential={KEY}/{base['x-amz-date'][:8]}/us-east-1/s3/aws4_request, "
         "SignedHeaders=x-amz-date, Signature=ab", "AuthorizationHeaderMalformed"),  # host not signed
        (f"AWS {KEY}:c2lnbmF0dXJl", "InvalidRequest"),
        ("Bearer token", "AuthorizationHeaderMalformed"),
    ]
    for authorization, code in cases:
        status, body = send(server, "GET", "/signed", {**base, "Authorization": authorization})
        assert status in (400, 403) and f"<Code>{code}</Code>".encode() in body, (authorization, body)


def test_node_client_signs_its_requests(server):
    async def scenario():
        async with NodeClient("n", server.endpoint, credentials=(KEY, SECRET)) as client:
            async def body():
                yield b"streamed "
                yield b"and signed"

            info = await client.put_object("signed", "from/node client", body())
            stream = await client.get_object("signed", "from/node client")
            assert b"".join([c async for c in stream.body]) == b"streamed and signed"
            assert info.size == 19
            assert (await client.list_objects("signed", prefix="from/")).contents[0].key == "from/node client"
            tricky = "q+r s/ü~*'()!&=%2F"
            await client.put_object("signed", tricky, body())
            listing = await client.list_objects("signed", prefix="q+r s/", delimiter="&", start_after="q+r s/")
            assert [o.key for o in listing.contents] == [] and listing.common_prefixes == ["q+r s/ü~*'()!&"]
            assert (await client.head_object("signed", tricky)).size == 19
        async with NodeClient("n", server.endpoint, credentials=(KEY, "wrong")) as client:
            with pytest.raises(S3Error) as e:
                await client.list_buckets()
            assert (e.value.code, e.value.status) == ("SignatureDoesNotMatch", 403)
        async with NodeClient("n", server.endpoint) as client:
            with pytest.raises(S3Error) as e:
                await client.head_object("signed", "from/node client")
            assert e.value.status == 403

    asyncio.run(scenario())


def test_allow_anonymous_and_local_mode(tmp_path):
    srv = S3TestServer(tmp_path / "anon", auth=S3Auth({KEY: SECRET}, allow_anonymous=True)).start()
    try:
        srv.client(unsigned=True).create_bucket(Bucket="open")
        srv.client(KEY, SECRET).put_object(Bucket="open", Key="k", Body=b"x")
        with pytest.raises(ClientError) as e:  # a signature that is present must still be right
            srv.client(KEY, "wrong").get_object(Bucket="open", Key="k")
        assert code_of(e) == ("SignatureDoesNotMatch", 403)
    finally:
        srv.stop()
    local = S3TestServer(tmp_path / "local", auth=S3Auth()).start()
    try:  # no credentials configured: signed (any key) and unsigned requests are both accepted
        local.client("anything", "goes").create_bucket(Bucket="loose")
        local.client(unsigned=True).put_object(Bucket="loose", Key="k", Body=b"x")
    finally:
        local.stop()


# -- S3Auth on its own ----------------------------------------------------------------------------


def _authenticate(auth: S3Auth, method: str, url: str, headers: dict):
    parts = urlsplit(url)
    return auth.authenticate(method, parts.path, parse_qsl(parts.query, keep_blank_values=True),
                             CIMultiDict(headers))


def test_clock_skew_is_rejected():
    url = "http://node:9000/bkt/key?list-type=2&prefix=a%20b"
    headers = signed_headers(url)
    assert _authenticate(S3Auth({KEY: SECRET}), "GET", url, headers).access_key == KEY
    late = S3Auth({KEY: SECRET}, clock=lambda: time.time() + 3600)
    with pytest.raises(S3Error) as e:
        _authenticate(late, "GET", url, headers)
    assert (e.value.code, e.value.status) == ("RequestTimeTooSkewed", 403)


def test_presigned_expiry_and_missing_parameters(server):
    s3 = server.client(KEY, SECRET)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "signed", "Key": "k"}, ExpiresIn=30)
    host = {"Host": urlsplit(url).netloc}
    ctx = _authenticate(S3Auth({KEY: SECRET}), "GET", url, host)
    assert ctx.presigned and ctx.payload_hash == "UNSIGNED-PAYLOAD"
    with pytest.raises(S3Error) as e:
        _authenticate(S3Auth({KEY: SECRET}, clock=lambda: time.time() + 31), "GET", url, host)
    assert e.value.code == "AccessDenied" and "expired" in e.value.message
    stripped = url.replace("X-Amz-Expires=30&", "")
    with pytest.raises(S3Error) as e:
        _authenticate(S3Auth({KEY: SECRET}), "GET", stripped, host)
    assert e.value.code == "AuthorizationQueryParametersError"


def test_missing_payload_hash_header():
    url = "http://node:9000/bkt/key"
    headers = signed_headers(url)
    del headers["X-Amz-Content-SHA256"]
    with pytest.raises(S3Error) as e:
        _authenticate(S3Auth({KEY: SECRET}), "GET", url, headers)
    assert e.value.code == "InvalidRequest" and "x-amz-content-sha256" in e.value.message


def test_signature_covers_method_path_and_query():
    auth = S3Auth({KEY: SECRET})
    url = "http://node:9000/bkt/key?uploads"
    headers = signed_headers(url, "POST")
    assert _authenticate(auth, "POST", url, headers).access_key == KEY
    for method, other in [("PUT", url), ("POST", "http://node:9000/bkt/other?uploads"),
                          ("POST", "http://node:9000/bkt/key?uploads&x=1")]:
        with pytest.raises(S3Error) as e:
            _authenticate(auth, method, other, headers)
        assert e.value.code == "SignatureDoesNotMatch"
    body = b"payload"
    headers = signed_headers("http://node:9000/bkt/key", "PUT", body)
    assert _authenticate(auth, "PUT", "http://node:9000/bkt/key", headers).payload_hash == hashlib.sha256(body).hexdigest()


# -- principals limited to some buckets -----------------------------------------------------------

SCOPED_KEY, SCOPED_SECRET = "nff.resize.200001", "scoped-secret"


@pytest.fixture(scope="module")
def scoped(tmp_path_factory):
    asked: list[str] = []

    def resolver(access_key: str) -> Principal | None:
        asked.append(access_key)
        if access_key == SCOPED_KEY:
            return Principal(f"function key {SCOPED_KEY}", SCOPED_SECRET, frozenset({"docs", "nearfaas-intermediate"}))
        return None

    srv = S3TestServer(tmp_path_factory.mktemp("scoped"), auth=S3Auth({KEY: SECRET}, resolver=resolver)).start()
    admin = srv.client(KEY, SECRET)
    for name in ("docs", "private"):
        admin.create_bucket(Bucket=name)
    admin.put_object(Bucket="private", Key="secret.txt", Body=b"not for functions")
    srv.asked = asked
    yield srv
    srv.stop()


def test_scoped_principal_uses_its_buckets_only(scoped):
    s3 = scoped.client(SCOPED_KEY, SCOPED_SECRET)
    s3.put_object(Bucket="docs", Key="in.txt", Body=b"mine")
    assert s3.get_object(Bucket="docs", Key="in.txt")["Body"].read() == b"mine"
    denied = [lambda: s3.get_object(Bucket="private", Key="secret.txt"),
              lambda: s3.head_object(Bucket="private", Key="secret.txt"),
              lambda: s3.put_object(Bucket="private", Key="secret.txt", Body=b"overwritten"),
              lambda: s3.delete_object(Bucket="private", Key="secret.txt"),
              lambda: s3.list_objects_v2(Bucket="private"),
              lambda: s3.delete_objects(Bucket="private", Delete={"Objects": [{"Key": "secret.txt"}]}),
              lambda: s3.create_multipart_upload(Bucket="private", Key="mp"),
              lambda: s3.create_bucket(Bucket="brand-new"),
              lambda: s3.delete_bucket(Bucket="private")]
    for call in denied:
        with pytest.raises(ClientError) as e:
            call()
        meta = e.value.response["ResponseMetadata"]
        assert (meta["HTTPStatusCode"], meta["HTTPHeaders"]["x-nearfaas-error-code"]) == (403, "AccessDenied")
        if e.value.response["Error"]["Code"] != "403":  # a HEAD answer has no body, so no message
            bucket = "brand-new" if "brand-new" in e.value.response["Error"].get("Resource", "") else "private"
            assert e.value.response["Error"]["Message"] == (
                f"Access Denied: function key {SCOPED_KEY} may only use buckets docs, nearfaas-intermediate, not {bucket}. "
                f"To grant it, list {bucket} under the function's x-nearfaas: {{buckets: [...]}} in its stack file "
                "(or the deploy body's x-nearfaas.buckets) and deploy it again.")
    admin = scoped.client(KEY, SECRET)
    assert admin.get_object(Bucket="private", Key="secret.txt")["Body"].read() == b"not for functions"
    assert "brand-new" not in [b["Name"] for b in admin.list_buckets()["Buckets"]]
    # Its own buckets: creating one in scope works, and ListBuckets shows only those.
    s3.create_bucket(Bucket="nearfaas-intermediate")
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["docs", "nearfaas-intermediate"]
    assert {b["Name"] for b in admin.list_buckets()["Buckets"]} == {"docs", "nearfaas-intermediate", "private"}


def test_scope_follows_the_bucket_the_request_addresses(scoped):
    """Virtual-host style names the bucket in Host; the path is then all key."""
    def put(host: str, path: str, body: bytes) -> tuple[int, bytes]:
        url = f"http://{host}:{scoped.port}{path}"
        request = AWSRequest(method="PUT", url=url, data=body)
        S3SigV4Auth(Credentials(SCOPED_KEY, SCOPED_SECRET), "s3", "us-east-1").add_auth(request)
        return send(scoped, "PUT", path, {"Host": f"{host}:{scoped.port}", **dict(request.headers.items())}, body)

    status, body = put("private.localhost", "/docs/x", b"sneaky")  # bucket private, key docs/x
    assert status == 403 and b"<Code>AccessDenied</Code>" in body
    status, body = put("docs.localhost", "/private/secret.txt", b"fine")  # bucket docs, key private/secret.txt
    assert status == 200, body
    admin = scoped.client(KEY, SECRET)
    assert admin.get_object(Bucket="docs", Key="private/secret.txt")["Body"].read() == b"fine"
    assert admin.get_object(Bucket="private", Key="secret.txt")["Body"].read() == b"not for functions"


def test_presigned_urls_carry_the_scope(scoped):
    s3 = scoped.client(SCOPED_KEY, SCOPED_SECRET)
    s3.put_object(Bucket="docs", Key="shared", Body=b"shared body")
    ok = s3.generate_presigned_url("get_object", Params={"Bucket": "docs", "Key": "shared"}, ExpiresIn=60)
    assert urllib.request.urlopen(ok, timeout=10).read() == b"shared body"
    for method, params in (("get_object", {"Bucket": "private", "Key": "secret.txt"}),
                           ("put_object", {"Bucket": "private", "Key": "secret.txt"})):
        url = s3.generate_presigned_url(method, Params=params, ExpiresIn=60)
        request = urllib.request.Request(url, data=b"x" if method == "put_object" else None,
                                         method="PUT" if method == "put_object" else "GET")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        assert e.value.code == 403 and b"<Code>AccessDenied</Code>" in e.value.read()
    assert scoped.client(KEY, SECRET).get_object(Bucket="private", Key="secret.txt")["Body"].read() == b"not for functions"


def test_credentials_first_then_resolver_then_unknown(scoped):
    scoped.asked.clear()
    scoped.client(KEY, SECRET).list_buckets()
    assert scoped.asked == []  # a configured key never reaches the resolver
    with pytest.raises(ClientError) as e:
        scoped.client("AKIDNOBODY", SECRET).list_buckets()
    assert code_of(e) == ("InvalidAccessKeyId", 403) and scoped.asked == ["AKIDNOBODY"]
    with pytest.raises(ClientError) as e:  # a scoped key with the wrong secret
        scoped.client(SCOPED_KEY, "wrong").get_object(Bucket="docs", Key="in.txt")
    assert code_of(e) == ("SignatureDoesNotMatch", 403)


def test_principal_and_auth_context_api():
    auth = S3Auth(resolver=lambda key: Principal("p", "s", frozenset({"b1"})) if key == "k" else None)
    assert auth.enabled and not S3Auth().enabled and S3Auth({KEY: SECRET}).enabled
    assert auth.principal("k") == Principal("p", "s", frozenset({"b1"}))
    assert S3Auth({KEY: SECRET}).principal(KEY) == Principal(KEY, SECRET, None)
    assert "s'" not in repr(Principal("p", "s")) and SECRET not in repr(S3Auth({KEY: SECRET}).principal(KEY))
    assert Principal("p", "s").may_use("anything") and not Principal("p", "s", frozenset()).may_use("b1")
    url = "http://node:9000/b1/key"
    headers = {"Host": "node:9000"}
    request = AWSRequest(method="GET", url=url)
    S3SigV4Auth(Credentials("k", "s"), "s3", "us-east-1").add_auth(request)
    context = _authenticate(auth, "GET", url, {**headers, **dict(request.headers.items())})
    assert context.access_key == "k" and context.principal.name == "p" and context.streaming is None
    assert _authenticate(S3Auth(), "GET", url, headers).principal is None
