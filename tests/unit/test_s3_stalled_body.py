"""A PUT whose body stops arriving: a 400 RequestTimeout after the progress timeout, no object,
no temp file left (issue 13, item 4)."""

from __future__ import annotations

import socket
import time

import pytest

from nearfaas.s3 import body
from s3_test_server import S3TestServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setattr(body, "BODY_PROGRESS_TIMEOUT_S", 0.5)
    srv = S3TestServer(tmp_path / "node").start()
    srv.client().create_bucket(Bucket="stall")
    yield srv
    srv.stop()


@pytest.mark.parametrize("framing", ["plain", "aws-chunked"])
def test_a_stalled_body_times_out_and_leaves_nothing(server, tmp_path, framing):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        if framing == "plain":
            head = (b"PUT /stall/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
            first = b"x" * 1000
        else:
            head = (b"PUT /stall/slow HTTP/1.1\r\nHost: x\r\nContent-Encoding: aws-chunked\r\nTransfer-Encoding: chunked\r\n"
                    b"x-amz-decoded-content-length: 1000000\r\n\r\n")
            first = b"3e8\r\n" + b"x" * 1000
        sock.sendall(head + first)  # then nothing more: a stalled client
        started = time.monotonic()
        reply = b""
        while b"</Error>" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        waited = time.monotonic() - started
    assert b" 400 " in reply.split(b"\r\n", 1)[0], reply[:200]
    assert b"<Code>RequestTimeout</Code>" in reply
    assert 0.4 < waited < 5, waited
    assert not list((tmp_path / "node" / "tmp").glob("*")), "the stalled PUT left a temp file"
    assert "Contents" not in server.client().list_objects_v2(Bucket="stall")


def test_a_body_that_keeps_coming_is_not_cut(server):
    """The timeout is between reads, not on the whole body: a slow but steady sender succeeds."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"PUT /stall/steady HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n")
        for _ in range(3):
            time.sleep(0.3)  # each gap under the 0.5 s timeout, the whole body over it
            sock.sendall(b"y" * 1000)
        reply = sock.recv(65536)
    assert b" 200 " in reply.split(b"\r\n", 1)[0], reply[:300]
    assert server.client().get_object(Bucket="stall", Key="steady")["Body"].read() == b"y" * 3000
