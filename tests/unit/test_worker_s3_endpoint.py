"""The worker's S3 endpoint (runtime/s3proxy.py) against a stand-in cluster: who may use it, what
is forwarded, and which call each byte is charged to."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from nearfaas.runtime.context import IOStats, ObjectClient
from nearfaas.runtime.s3proxy import Calls, S3Endpoint, _single_range, current_call, install_botocore_hook


class _Cluster(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list = []
    objects: dict = {}

    def log_message(self, *args):
        pass

    def _reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(("PUT", self.path, dict(self.headers)))
        self.objects[self.path] = body
        self._reply(200, headers=[("ETag", '"e"')])

    def do_GET(self):
        self.seen.append(("GET", self.path, dict(self.headers)))
        body = self.objects.get(self.path.split("?")[0])
        if body is None:
            return self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
        self._reply(200, body, [("ETag", '"e"'), ("Content-Type", "text/plain")])


@pytest.fixture()
def endpoint():
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Cluster)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = f"http://127.0.0.1:{upstream.server_address[1]}"
    _Cluster.seen.clear()
    _Cluster.objects.clear()
    calls = Calls(ObjectClient(gateway, None, IOStats(), caller="fn"))
    ep = S3Endpoint(calls)
    install_botocore_hook(ep.url)
    ep.start()
    yield ep, calls, gateway
    ep.server.shutdown()
    upstream.shutdown()


def _client(ep, key=None, secret=None):
    # A new session: botocore copies its built-in handlers (the call tag among them) when one is made.
    return boto3.session.Session().client("s3", endpoint_url=ep.url, aws_access_key_id=key or ep.access_key,
                        aws_secret_access_key=secret or ep.secret_key, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}))


def test_only_requests_signed_with_the_instance_key_get_through(endpoint):
    ep, _, _ = endpoint
    assert requests.get(f"{ep.url}/b/k", timeout=5).status_code == 403
    with pytest.raises(ClientError) as caught:
        _client(ep, "someone", "x" * 30).get_object(Bucket="bucket", Key="k")
    assert caught.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    with pytest.raises(ClientError) as caught:
        _client(ep, ep.access_key, "wrong" * 6).get_object(Bucket="bucket", Key="k")
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert _Cluster.seen == []  # nothing reached the cluster


def test_a_body_that_does_not_match_its_signed_hash_is_refused(endpoint):
    ep, _, _ = endpoint
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest("PUT", f"{ep.url}/bucket/k", data=b"signed body")
    S3SigV4Auth(Credentials(ep.access_key, ep.secret_key), "s3", "us-east-1").add_auth(request)
    resp = requests.put(f"{ep.url}/bucket/k", data=b"other body", headers=dict(request.headers), timeout=5)
    assert resp.status_code == 400 and b"XAmzContentSHA256Mismatch" in resp.content
    headers = dict(request.headers) | {"X-Amz-Content-SHA256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}
    assert requests.put(f"{ep.url}/bucket/k", data=b"x", headers=headers, timeout=5).status_code in (403, 501)


def test_each_call_is_charged_its_own_bytes_and_writes_name_the_caller(endpoint):
    ep, calls, gateway = endpoint
    s3 = _client(ep)
    first, second = ObjectClient(gateway, None, IOStats(), caller="app"), ObjectClient(gateway, None, IOStats(), caller="app")
    calls.begin("c1", first)
    calls.begin("c2", second)
    token = current_call.set("c1")
    s3.put_object(Bucket="bucket", Key="k", Body=b"12345")
    current_call.reset(token)
    token = current_call.set("c2")
    assert s3.get_object(Bucket="bucket", Key="k")["Body"].read() == b"12345"
    current_call.reset(token)
    assert (first.stats.bytes_written, first.stats.bytes_read_remote) == (5, 0)
    assert (second.stats.bytes_written, second.stats.bytes_read_remote) == (0, 5)
    assert second.stats.objects == {("bucket", "k"): 5}
    put = next(h for m, _, h in _Cluster.seen if m == "PUT")
    assert put.get("X-Nearfaas-Caller") == "app" and "x-nearfaas-call" not in {k.lower() for k in put}
    # Untagged with two calls in flight: charged to neither; with one: charged to it.
    requests_s3 = _client(ep)
    requests_s3.get_object(Bucket="bucket", Key="k")
    assert second.stats.bytes_read_remote == 5 and calls.unattributed.stats.bytes_read_remote == 5
    calls.end("c1")
    requests_s3.get_object(Bucket="bucket", Key="k")
    assert second.stats.bytes_read_remote == 10
    with pytest.raises(ClientError) as caught:
        requests_s3.get_object(Bucket="bucket", Key="missing")
    assert caught.value.response["Error"]["Code"] == "NoSuchKey"


@pytest.mark.parametrize("header,size,span", [
    ("bytes=0-9", 100, (0, 9)), ("bytes=90-", 100, (90, 99)), ("bytes=-10", 100, (90, 99)), ("bytes=50-500", 100, (50, 99)),
    ("bytes=100-", 100, None), ("bytes=5-1", 100, None), ("bytes=-0", 100, None), ("bytes=0-1,5-6", 100, None),
    ("items=0-1", 100, None), ("bytes=-", 100, None), ("bytes=-5", 0, None),
])
def test_single_ranges_are_served_locally_and_anything_else_goes_to_the_cluster(header, size, span):
    assert _single_range(header, size) == span


def test_a_stranger_is_refused_before_its_body_is_read_and_connections_are_bounded(endpoint, monkeypatch):
    import socket

    from nearfaas.runtime import s3proxy

    ep, _, _ = endpoint
    host, port = ep.server.server_address
    with socket.create_connection((host, port), timeout=5) as sock:
        # Claims 10 GB and sends none of it: the 403 comes at once, the connection is closed.
        sock.sendall(b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
        reply = sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 403"), reply[:80]
    held = [socket.create_connection((host, port), timeout=5) for _ in range(s3proxy.MAX_CONNECTIONS)]
    try:
        # A newcomer takes the slot of the oldest stranger (none has proved the key), which is
        # hung up on: strangers cannot keep the function's own connections out (test_flood_budgets.py).
        extra = socket.create_connection((host, port), timeout=5)
        assert held[0].recv(10) == b""
        extra.close()
    finally:
        for sock in held:
            sock.close()
    # And it serves again once they are gone (their threads notice the close and free their slots).
    import time

    deadline = time.monotonic() + 10
    while True:
        try:
            assert requests.get(f"{ep.url}/b/k", timeout=5).status_code == 403
            break
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the endpoint never took a connection again"
            time.sleep(0.05)
