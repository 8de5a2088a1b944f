"""Nothing runs without credentials (issue 12): the /system API, CSRF, node ports, deployments
that name paths or interpreter variables, per-function auth and scoped function keys.

Each test here failed on the code before issue 12: unsigned and cross-origin deploys were
accepted (202), node APIs answered anyone, `base_dir: 5` was a 500.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from nearfaas.auth import function_keys, internal
from nearfaas.spec.bundle import pack

pytestmark = pytest.mark.integration

SYSTEM_CALLS = [
    ("POST", "/system/functions", {"service": "evil", "handler": "/tmp", "envVars": {"PYTHONWARNINGS": "ignore::x.y"}}),
    ("PUT", "/system/functions", {"service": "evil", "handler": "/tmp"}),
    ("DELETE", "/system/functions", {"functionName": "anything"}),
    ("POST", "/system/scale-function/anything", {"replicas": 0}),
    ("GET", "/system/functions", None), ("GET", "/system/function/anything", None), ("GET", "/system/logs?name=x", None),
    ("GET", "/system/secrets", None), ("POST", "/system/secrets", {"name": "s", "value": "v"}),
    ("PUT", "/system/secrets", {"name": "s", "value": "v"}), ("DELETE", "/system/secrets", {"name": "s"}),
    ("GET", "/system/nodes", None), ("POST", "/system/nodes/storage-0/accelerator", {"available": False}),
    ("GET", "/system/info", None), ("GET", "/system/fastpath", None), ("GET", "/system/webhooks/x", None),
    # refused before the query engine loads (it loads on the first query the gateway runs)
    ("POST", "/system/query", {"sql": "SELECT * FROM t", "source": "s3://b/p"}), ("GET", "/system/stats?source=s3://b/p", None),
]


@pytest.mark.parametrize("method,path,body", SYSTEM_CALLS, ids=[f"{m} {p}" for m, p, _ in SYSTEM_CALLS])
def test_unsigned_system_calls_are_refused(cluster, method, path, body):
    resp = requests.request(method, f"{cluster.url}{path}", json=body, timeout=10)
    assert resp.status_code == 401, resp.text
    assert resp.headers["WWW-Authenticate"].startswith("Basic")
    wrong = requests.request(method, f"{cluster.url}{path}", json=body, auth=("admin", "not-the-secret"), timeout=10)
    assert wrong.status_code == 401


def test_cross_site_deploys_are_refused_even_with_credentials(cluster, functions_dir):
    body = json.dumps({"service": "csrf", "bundle": pack(functions_dir / "echo")})
    # What a web page can make a browser send without a preflight: text/plain, a foreign Origin.
    plain = cluster.http.post(f"{cluster.url}/system/functions", data=body, headers={"Content-Type": "text/plain"}, timeout=10)
    assert plain.status_code == 415 and "application/json" in plain.text
    foreign = cluster.http.post(f"{cluster.url}/system/functions", data=body, timeout=10,
                                headers={"Content-Type": "application/json", "Origin": "https://evil.example"})
    assert foreign.status_code == 403 and "evil.example" in foreign.text
    fetch = cluster.http.post(f"{cluster.url}/system/secrets", json={"name": "x", "value": "y"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert fetch.status_code == 403
    unsigned_plain = requests.post(f"{cluster.url}/system/functions", data=body, headers={"Content-Type": "text/plain"}, timeout=10)
    assert unsigned_plain.status_code in (401, 415)
    assert cluster.http.get(f"{cluster.url}/system/function/csrf").status_code == 404  # nothing was deployed
    # An S3 write from another origin (a form POST of DeleteObjects, say) is refused as well.
    assert requests.post(f"{cluster.url}/some-bucket?delete", data=b"<Delete/>", headers={"Origin": "http://evil.example"}).status_code == 403


def test_cross_site_system_reads_are_refused_even_with_credentials(cluster):
    """docs/security.md: a foreign Origin or cross-site fetch metadata is a 403 for all of
    /system, reads included (red team, issue 39: GET /system/secrets answered 200 with the names)."""
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "xsite-name", "value": "v"}, timeout=10).status_code == 200
    for headers in ({"Origin": "http://evil.com"}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}, {"Origin": "null"}):
        for path in ("/system/secrets", "/system/functions", "/system/info"):
            resp = cluster.http.get(f"{cluster.url}{path}", headers=headers, timeout=10)
            assert resp.status_code == 403 and "xsite-name" not in resp.text, (headers, path, resp.status_code, resp.text)
    own = cluster.http.get(f"{cluster.url}/system/secrets", headers={"Origin": cluster.url, "Sec-Fetch-Site": "same-origin"}, timeout=10)
    assert own.status_code == 200 and "xsite-name" in own.text


def test_a_protected_function_is_not_callable_cross_site_even_with_credentials(scratch, cluster, functions_dir):
    """What a web page can make a browser with cached Basic credentials send: a text/plain form
    post from another origin. A protected function refuses it (sync and async), as /system does;
    same-origin or header-less callers with credentials, and open functions cross-site, still run."""
    assert scratch("xsite-victim", functions_dir / "echo", **{"x-nearfaas": {"auth": True}}).status_code == 202
    assert scratch("xsite-open", functions_dir / "echo").status_code == 202
    form = {"Content-Type": "text/plain"}
    for headers in ({"Origin": "http://evil.com"}, {"Sec-Fetch-Site": "cross-site"}):
        for route in ("/function/xsite-victim", "/async-function/xsite-victim", "/function/xsite-victim/sub?x=1"):
            resp = cluster.http.post(f"{cluster.url}{route}", data=b"ran", headers=form | headers, timeout=30)
            assert resp.status_code == 403 and '"body"' not in resp.text, (route, headers, resp.status_code, resp.text)
        opened = requests.post(f"{cluster.url}/function/xsite-open", data=b"open", headers=form | headers, timeout=30)
        assert opened.status_code == 200 and opened.json()["body"] == "open", (headers, opened.text)
    same = cluster.http.post(f"{cluster.url}/function/xsite-victim", data=b"mine", timeout=30,
                             headers=form | {"Origin": cluster.url, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200 and same.json()["body"] == "mine", same.text
    assert cluster.http.post(f"{cluster.url}/function/xsite-victim", data=b"cli", headers=form, timeout=30).json()["body"] == "cli"
    assert cluster.http.post(f"{cluster.url}/async-function/xsite-victim", data=b"cli", headers=form, timeout=30).status_code == 202


def test_same_origin_and_sigv4_callers_are_accepted(cluster):
    same = cluster.http.get(f"{cluster.url}/system/functions", headers={"Origin": cluster.url})
    assert same.status_code == 200
    keys = cluster.layout["auth"]
    request = AWSRequest(method="GET", url=f"{cluster.url}/system/functions")
    SigV4Auth(Credentials(keys["access_key"], keys["secret_key"]), "s3", "us-east-1").add_auth(request)
    signed = requests.get(f"{cluster.url}/system/functions", headers=dict(request.headers), timeout=10)
    assert signed.status_code == 200, signed.text
    forged = dict(request.headers, Authorization=request.headers["Authorization"][:-4] + "0000")
    assert requests.get(f"{cluster.url}/system/functions", headers=forged, timeout=10).status_code == 401


def test_a_function_key_cannot_use_the_system_api(cluster):
    creds = function_keys.credentials(cluster.layout["internal_secret"], "whatever", 200_000)
    request = AWSRequest(method="GET", url=f"{cluster.url}/system/functions")
    SigV4Auth(Credentials(creds["access_key"], creds["secret_key"]), "s3", "us-east-1").add_auth(request)
    assert requests.get(f"{cluster.url}/system/functions", headers=dict(request.headers), timeout=10).status_code == 401


def test_node_ports_refuse_unsigned_callers(cluster, bucket):
    cluster.s3().put_object(Bucket=bucket, Key="private.txt", Body=b"private bytes")
    for node in cluster.layout["nodes"]:
        url = node["url"]
        start = requests.post(f"{url}/_nearfaas/functions/evil/workers", timeout=10,
                              json={"name": "evil", "handler_dir": "/tmp", "environment": {"PYTHONSTARTUP": "/tmp/x.py"}})
        assert start.status_code == 401, (node["name"], start.text)
        assert requests.get(f"{url}/_nearfaas/health", timeout=10).status_code == 401
        assert requests.get(f"{url}/_nearfaas/logs/x", timeout=10).status_code == 401
        assert requests.delete(f"{url}/_nearfaas/functions/x", timeout=10).status_code == 401
        if node["kind"] == "storage":
            for path in (f"/{bucket}/private.txt", f"/{bucket}", "/"):
                resp = requests.get(f"{url}{path}", timeout=10)
                assert resp.status_code == 403 and b"private bytes" not in resp.content, (node["name"], path)
            assert requests.put(f"{url}/{bucket}/planted", data=b"x", timeout=10).status_code == 403
        # A signature copied from another path does not open this one.
        health_sig = json.loads(json.dumps(__import__("nearfaas.auth.internal", fromlist=["sign"]).sign("guess", "GET", "/_nearfaas/health")))
        assert requests.get(f"{url}/_nearfaas/health", headers=health_sig, timeout=10).status_code == 401


class _Recorder:
    """A callback target of the test's own on 127.0.0.1: records each request it gets (method,
    path, headers, body) and sets ``arrived`` once it has answered one."""

    def __init__(self):
        self.requests: list[dict] = []
        self.arrived = threading.Event()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                recorder.requests.append({"method": self.command, "path": self.path, "headers": list(self.headers.items()),
                                          "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                recorder.arrived.set()

            do_GET = do_POST = do_PUT = do_DELETE = _record

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def recorder():
    r = _Recorder()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _internal(cluster, method: str, url: str, **kwargs) -> requests.Response:
    """A call to a node's internal API signed as the gateway signs its own (auth/internal.py)."""
    target = "/" + url.split("://", 1)[1].partition("/")[2]
    return requests.request(method, url, headers=internal.sign(cluster.layout["internal_secret"], method, target), timeout=30, **kwargs)


def _async_done(cluster, call_id: str) -> dict | None:
    """The gateway's ``async-done`` log record of one async call (written once it ran and its
    callback was delivered or finally failed), or None while there is none."""
    log = (cluster.state_dir / "logs" / "gateway.log").read_text(errors="replace")
    for line in log.splitlines():
        if call_id in line and '"async-done"' in line:
            return json.loads(line[line.index("{"):])
    return None


def test_an_async_callback_carries_the_result_and_no_platform_credentials(scratch, cluster, functions_dir, recorder):
    """A callback goes to a URL the caller chose: it gets the function's answer and nothing the
    platform signs or authenticates with, even on a path the gateway signs for its nodes."""
    assert scratch("cb-plain", functions_dir / "echo").status_code == 202
    # Sent with the admin's credentials: they were checked at accept time and are not passed on.
    resp = cluster.http.post(f"{cluster.url}/async-function/cb-plain", data=b"the callback's payload", timeout=30,
                             headers={"X-Callback-Url": f"{recorder.url}/_nearfaas/functions/cb-plain/workers"})
    assert resp.status_code == 202, resp.text
    call_id = resp.headers["X-Call-Id"]
    assert recorder.arrived.wait(30), f"no callback within 30 s; gateway record: {_async_done(cluster, call_id)}"
    [got] = recorder.requests
    headers = {k.lower(): v for k, v in got["headers"]}
    assert (got["method"], got["path"]) == ("POST", "/_nearfaas/functions/cb-plain/workers")
    assert headers["x-call-id"] == call_id and headers["x-function-status"] == "200"
    assert json.loads(got["body"])["body"] == "the callback's payload"
    platform = {internal.HEADER.lower(), internal.WORKER_TOKEN_HEADER.lower(), "authorization", "proxy-authorization", "cookie"}
    assert not platform & headers.keys(), {k: v for k, v in headers.items() if k in platform}
    assert not [k for k in headers if k.startswith("x-amz-")], headers
    raw = json.dumps(got["headers"]) + got["body"].decode(errors="replace")
    for secret in (cluster.layout["internal_secret"], cluster.layout["auth"]["secret_key"]):
        assert secret not in raw


def test_an_async_callback_cannot_make_the_gateway_call_a_node(scratch, cluster, tmp_path):
    """The gateway signs only its own calls to node URLs, and a callback URL aimed at a node's
    internal API is refused, not sent (egress.py), so a function's answer never becomes a node command.

    The function answers its request body as is, and the body is a worker spec the node would
    start if the gateway had signed it (checked at the end, signed by the test)."""
    relay = tmp_path / "relay"
    relay.mkdir()
    (relay / "handler.py").write_text("def handle(event, context):\n"
                                      "    return {'statusCode': 200, 'headers': {'Content-Type': 'application/json'},\n"
                                      "            'body': event.body.decode()}\n")
    assert scratch("cb-relay", relay).status_code == 202
    specs = json.loads((cluster.state_dir / "gateway" / "functions.json").read_text())
    evil = next(s for s in specs if s["name"] == "cb-relay") | {"name": "cb-evil"}  # real code, a name nobody deployed
    node = cluster.layout["nodes"][-1]
    workers_url = f"{node['url']}/_nearfaas/functions/cb-evil/workers"

    def evil_workers() -> list[dict]:
        return [w for w in cluster.node_health(node["url"])["workers"] if w["function"] == "cb-evil"]

    try:
        resp = requests.post(f"{cluster.url}/async-function/cb-relay", data=json.dumps(evil), timeout=10,
                             headers={"X-Callback-Url": workers_url})
        assert resp.status_code == 202, resp.text
        call_id = resp.headers["X-Call-Id"]
        # Until the call is done (its callback delivered or failed) or the node started the worker.
        deadline = time.monotonic() + 30
        while (done := _async_done(cluster, call_id)) is None and not evil_workers():
            assert time.monotonic() < deadline, "the async call neither finished nor started a worker within 30 s"
            time.sleep(0.1)
        assert not evil_workers(), f"the callback made node {node['name']} start a worker: {evil_workers()}"
        assert done is not None and done["status"] == 200, done
        assert done["callback"].startswith("refused:") and "cluster's own port" in done["callback"], done  # egress.py
        # The premise: the same spec, signed, does start a worker there.
        signed = _internal(cluster, "POST", workers_url, json=evil)
        assert signed.status_code == 200, signed.text
        assert evil_workers()
    finally:
        _internal(cluster, "DELETE", f"{node['url']}/_nearfaas/functions/cb-evil")


@pytest.mark.parametrize("body,field", [
    ({"handler": "echo", "base_dir": 5}, "base_dir"),
    ({"handler": "/etc"}, "handler_roots"),
    ({"handler": "/root"}, "handler_roots"),
    ({"bundle": 5}, "bundle"),
    ({"bundle": "not base64!"}, "base64"),
    ({"handler": None}, "handler"),
], ids=["base_dir-int", "etc", "root", "bundle-int", "bundle-junk", "no-code"])
def test_deployments_naming_paths_or_junk_get_a_400_naming_the_field(cluster, body, field):
    resp = cluster.http.post(f"{cluster.url}/system/functions", json={"service": "pathy"} | body, timeout=10)
    assert resp.status_code == 400 and field in resp.text, resp.text


def test_interpreter_variables_are_refused_by_name(cluster, functions_dir):
    for name in ("PYTHONWARNINGS", "BROWSER", "LD_PRELOAD", "NEARFAAS_SECRET_KEY"):
        resp = cluster.http.post(f"{cluster.url}/system/functions", timeout=10,
                                 json={"service": "envy", "bundle": pack(functions_dir / "echo"), "envVars": {name: "x"}})
        assert resp.status_code == 400 and name in resp.text, resp.text


def test_deployed_code_is_a_copy_not_the_path(scratch, cluster, functions_dir, tmp_path):
    import shutil

    folder = tmp_path / "mutable"
    shutil.copytree(functions_dir / "echo", folder)
    assert scratch("copied", folder).status_code == 202
    (folder / "handler.py").write_text("def handle(event, context):\n    return 'changed behind the gateway'\n")
    status = cluster.http.get(f"{cluster.url}/system/function/copied").json()
    assert status["handler"].startswith(str(cluster.state_dir.resolve() / "functions" / "copied"))
    assert "changed behind" not in requests.post(f"{cluster.url}/function/copied", data=b"x", timeout=30).text


def test_a_function_can_require_credentials(scratch, cluster, functions_dir):
    assert scratch("private-fn", functions_dir / "echo", **{"x-nearfaas": {"auth": True}}).status_code == 202
    assert scratch("public-fn", functions_dir / "echo").status_code == 202
    assert requests.post(f"{cluster.url}/function/private-fn", data=b"x", timeout=30).status_code == 401
    assert requests.post(f"{cluster.url}/async-function/private-fn", data=b"x", timeout=30).status_code == 401
    assert cluster.http.post(f"{cluster.url}/function/private-fn", data=b"x", timeout=30).status_code == 200
    assert requests.post(f"{cluster.url}/function/public-fn", data=b"x", timeout=30).status_code == 200


def test_a_function_key_reaches_only_its_declared_buckets(scratch, cluster, functions_dir):
    s3 = cluster.s3()
    for b in ("scope-mine", "scope-theirs"):
        s3.create_bucket(Bucket=b)
        s3.put_object(Bucket=b, Key="in.txt", Body=b"bytes of " + b.encode())
    assert scratch("scoped-upper", functions_dir / "upper", **{"x-nearfaas": {"buckets": ["scope-mine"], "placement": "compute"}}).status_code == 202
    ok = requests.post(f"{cluster.url}/function/scoped-upper", json={"input": {"bucket": "scope-mine", "key": "in.txt"}}, timeout=30)
    assert ok.status_code == 200, ok.text
    denied = requests.post(f"{cluster.url}/function/scoped-upper", json={"input": {"bucket": "scope-theirs", "key": "in.txt"}}, timeout=30)
    assert denied.status_code >= 400 and "AccessDenied" in denied.text, denied.text
    assert "scope-theirs/in.txt.upper" not in [o["Key"] for o in s3.list_objects_v2(Bucket="scope-theirs").get("Contents", [])]
    # Its key, used from outside, has the same scope; once the function is deleted it is unknown.
    specs = json.loads((cluster.state_dir / "gateway" / "functions.json").read_text())
    uid = next(s["uid"] for s in specs if s["name"] == "scoped-upper")
    creds = function_keys.credentials(cluster.layout["internal_secret"], "scoped-upper", uid)
    as_function = cluster.s3(access_key=creds["access_key"], secret_key=creds["secret_key"])
    assert as_function.get_object(Bucket="scope-mine", Key="in.txt")["Body"].read() == b"bytes of scope-mine"
    with pytest.raises(ClientError) as denied_err:
        as_function.get_object(Bucket="scope-theirs", Key="in.txt")
    assert denied_err.value.response["Error"]["Code"] == "AccessDenied"
    # The chain intermediates' bucket is never a function key's (only a chain call's own key), nor listed.
    assert [b["Name"] for b in as_function.list_buckets()["Buckets"]] == ["scope-mine"]
    assert cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "scoped-upper"}).status_code == 202
    with pytest.raises(ClientError) as gone:
        as_function.get_object(Bucket="scope-mine", Key="in.txt")
    assert gone.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_a_trigger_grants_no_bucket_its_key_was_not_given(scratch, cluster, functions_dir):
    # Red team round 6 (issue 39): a trigger added its bucket to the function key's grant, so a
    # deploy policy that forced a tenant's own `buckets` still let one stack line read all of
    # another tenant's bucket (`triggers: ["s3://tenant-a-private/"]`). A key reaches its
    # `buckets` only; a trigger outside them is refused at deploy, naming the fix.
    refused = scratch("trigger-thief", functions_dir / "upper",
                      **{"x-nearfaas": {"buckets": ["scope-mine"], "triggers": ["s3://scope-theirs/"]}})
    assert refused.status_code == 400, refused.text
    assert "x-nearfaas.triggers[0]" in refused.text and "add 'scope-theirs' to x-nearfaas.buckets" in refused.text
    assert scratch("trigger-granted", functions_dir / "upper",
                   **{"x-nearfaas": {"buckets": ["scope-mine"], "triggers": ["s3://scope-mine/in/"]}}).status_code == 202


def test_a_worker_answers_only_the_gateway(scratch, cluster, functions_dir):
    """Workers listen on loopback, where other functions run too: a direct call without the
    instance's token (which only the node's signed answer and the admin API carry) is a 401."""
    from nearfaas.auth.internal import WORKER_TOKEN_HEADER

    assert scratch("direct-target", functions_dir / "echo", **{"x-nearfaas": {"auth": True}}).status_code == 202
    instance = cluster.http.get(f"{cluster.url}/system/function/direct-target").json()["instances"][0]
    assert requests.post(instance["url"] + "/", data=b"x", timeout=10).status_code == 401
    assert requests.post(instance["url"] + "/", data=b"x", timeout=10, headers={WORKER_TOKEN_HEADER: "0" * 32}).status_code == 401
    assert requests.post(instance["url"] + "/", data=b"x", timeout=10, headers={WORKER_TOKEN_HEADER: instance["token"]}).status_code == 200
    unsigned = requests.get(f"{cluster.url}/system/function/direct-target", timeout=10)
    assert unsigned.status_code == 401 and instance["token"] not in unsigned.text
