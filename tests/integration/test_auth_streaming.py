"""Streaming SigV4 uploads on a real cluster with auth on: a captured signed streaming PUT
replayed with another body of the same length is refused, and the object stays as it was."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from nearfaas.cluster import launcher
from nearfaas.spec.cluster import AuthSpec

from conftest import start_cluster

pytestmark = pytest.mark.integration

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    state = tmp_path_factory.mktemp("auth-streaming") / "state"
    c = start_cluster(state, auth=AuthSpec(access_key="AKIDSTREAMING", secret_key="streaming-secret-42"))
    yield c
    launcher.down(state)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_streaming_put(url: str, chunks: list[bytes], keys: dict, trailers: dict[str, str] | None = None
                         ) -> tuple[dict, bytes]:
    """A streaming PUT signed as an AWS SDK signs one (sigv4-streaming), by hand: the headers
    (seed signature) by botocore, each chunk and the trailer chained off it with hmac."""
    region = keys.get("region", "us-east-1")
    payload_hash = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" + ("-TRAILER" if trailers else "")
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(sum(map(len, chunks))),
               "X-Amz-Content-SHA256": payload_hash}
    if trailers:
        headers["x-amz-trailer"] = ",".join(trailers)
    request = AWSRequest(method="PUT", url=url, headers=headers)
    signer = type("Streaming", (S3SigV4Auth,), {"payload": lambda self, r: payload_hash})
    signer(Credentials(keys["access_key"], keys["secret_key"]), "s3", region).add_auth(request)
    headers = {"Host": urlsplit(url).netloc, **dict(request.headers.items())}
    timestamp, previous = headers["X-Amz-Date"], headers["Authorization"].rsplit("Signature=", 1)[1]
    scope = f"{timestamp[:8]}/{region}/s3/aws4_request"
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{keys['secret_key']}".encode(), timestamp[:8]), region), "s3"), "aws4_request")
    body = b""
    for data in [*chunks, b""]:
        to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", timestamp, scope, previous, EMPTY_SHA256,
                             hashlib.sha256(data).hexdigest()])
        previous = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        body += f"{len(data):x};chunk-signature={previous}\r\n".encode() + data + (b"\r\n" if data else b"")
    if trailers:
        canonical = "".join(f"{name}:{value}\n" for name, value in sorted(trailers.items())).encode()
        to_sign = "\n".join(["AWS4-HMAC-SHA256-TRAILER", timestamp, scope, previous, hashlib.sha256(canonical).hexdigest()])
        body += "".join(f"{name}:{value}\r\n" for name, value in trailers.items()).encode()
        body += f"x-amz-trailer-signature:{hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()}\r\n".encode()
    return headers, body + b"\r\n"


def _leftover_temp_files(state: Path) -> list[Path]:
    """Temp files of the storage nodes, once the aborted uploads have had a moment to unwind."""
    dirs = list((state / "nodes").glob("*/store/tmp"))
    assert dirs, f"no storage node temp folders under {state / 'nodes'}"
    deadline = time.monotonic() + 5
    while True:
        left = [p for tmp in dirs for p in tmp.iterdir()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_replayed_streaming_put_with_another_body_is_refused(secured):
    keys = secured.layout["auth"]
    s3 = secured.s3()
    s3.create_bucket(Bucket="streamed")
    url = f"{secured.url}/streamed/report.bin"
    original = [b"R" * 70000, b"signed by the owner"]
    headers, body = signed_streaming_put(url, original, keys)
    captured = requests.put(url, data=body, headers=headers, timeout=30)
    assert captured.status_code == 200, captured.text
    assert s3.get_object(Bucket="streamed", Key="report.bin")["Body"].read() == b"".join(original)

    forged = body.replace(b"signed by the owner", b"swapped by attacker")
    assert len(forged) == len(body) and forged != body
    replay = requests.put(url, data=forged, headers=headers, timeout=30)
    assert replay.status_code == 403, replay.text
    assert "<Code>SignatureDoesNotMatch</Code>" in replay.text
    assert s3.get_object(Bucket="streamed", Key="report.bin")["Body"].read() == b"".join(original)

    # The final (empty) chunk is signed too: a body cut short and re-terminated is refused.
    cut = body[:body.rindex(b"0;chunk-signature=")] + b"0\r\n\r\n"
    replay = requests.put(url, data=cut, headers=headers, timeout=30)
    assert replay.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in replay.text
    assert s3.get_object(Bucket="streamed", Key="report.bin")["Body"].read() == b"".join(original)
    assert _leftover_temp_files(secured.state_dir) == []


def test_signed_trailer_on_a_cluster(secured):
    keys = secured.layout["auth"]
    s3 = secured.s3()
    s3.create_bucket(Bucket="trailed")
    data = [b"checksummed " * 1000, b"tail"]
    crc = base64.b64encode(zlib.crc32(b"".join(data)).to_bytes(4, "big")).decode()
    url = f"{secured.url}/trailed/obj"
    headers, body = signed_streaming_put(url, data, keys, trailers={"x-amz-checksum-crc32": crc})
    resp = requests.put(url, data=body, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    new_crc = base64.b64encode(zlib.crc32(b"".join(data).replace(b"tail", b"TAIL")).to_bytes(4, "big")).decode()
    forged = body.replace(b"tail\r\n", b"TAIL\r\n").replace(crc.encode(), new_crc.encode())
    resp = requests.put(url, data=forged, headers=headers, timeout=30)
    assert resp.status_code == 403 and "<Code>SignatureDoesNotMatch</Code>" in resp.text
    assert s3.get_object(Bucket="trailed", Key="obj")["Body"].read() == b"".join(data)
