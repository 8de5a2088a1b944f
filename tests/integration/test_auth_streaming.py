"""Streaming SigV4 uploads on a real cluster with auth on: a captured signed streaming PUT
replayed with another body of the same length is refused, and the object stays as it was."""

from __future__ import annotations

import base64
import hashlib
import time
import zlib
from pathlib import Path

import pytest
import requests

from nearfaas.spec.cluster import AuthSpec

from conftest import running_cluster
from sigv4_client import signed_streaming_put as sign_streaming

pytestmark = pytest.mark.integration

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("auth-streaming") / "state", auth=AuthSpec(access_key="AKIDSTREAMING", secret_key="streaming-secret-42")) as c:
        yield c


def signed_streaming_put(url: str, chunks: list[bytes], keys: dict, trailers: dict[str, str] | None = None):
    return sign_streaming(url, chunks, access_key=keys["access_key"], secret=keys["secret_key"],
                          region=keys.get("region", "us-east-1"), trailers=trailers)


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
