"""Fixtures and raw-HTTP helpers shared by the S3 front-end test modules: one node-style server
(a real S3Frontend over a LocalBackend on 127.0.0.1) per module, a boto3 client, a fresh bucket
per test. A test module takes the fixtures with ``from s3_fixtures import *`` (``__all__``)."""

from __future__ import annotations

import http.client
import itertools
import os
import time
import xml.etree.ElementTree as ET

import pytest


from s3_test_server import S3TestServer

__all__ = ["bucket", "s3", "server"]  # the fixtures; helpers are imported by name

_names = itertools.count()


def new_name() -> str:
    """A bucket name no other test of this run uses."""
    return f"bucket-{next(_names)}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = S3TestServer(tmp_path_factory.mktemp("node"), min_part_size=5, max_body=16 << 20).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def s3(server):
    return server.client()


@pytest.fixture
def bucket(s3):
    name = new_name()
    s3.create_bucket(Bucket=name)
    return name


def code_of(excinfo) -> tuple[str, int]:
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def raw(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        send_body: bool = True) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = dict(headers or {})
        conn.putrequest(method, path, skip_accept_encoding=True, skip_host="Host" in headers)
        if body is not None and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            headers["Content-Length"] = str(len(body))
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body is not None and send_body:
            conn.send(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def xml_code(body: bytes) -> str:
    return ET.fromstring(body).findtext("Code")


def tmp_is_empty(server) -> bool:
    return os.listdir(server.store.root / "tmp") == []


def tmp_empties_soon(server, timeout: float = 5.0, settle: float = 0.5) -> bool:
    """For aborts the server only sees once the client's connection has gone. Empty must stay
    empty for ``settle`` seconds: the handler may open its temp file only after the client has
    gone (and then abort it), so one empty listing proves nothing."""
    deadline = time.monotonic() + timeout
    empty_since = None
    while time.monotonic() < deadline:
        if not tmp_is_empty(server):
            empty_since = None
        elif empty_since is None:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since >= settle:
            return True
        time.sleep(0.02)
    return False


def aws_chunked(data: bytes, chunk: int = 7, trailer: tuple[str, str] | None = None, signatures: bool = True) -> bytes:
    sig = ";chunk-signature=" + "0" * 64 if signatures else ""
    out = b"".join(f"{len(data[i:i + chunk]):x}{sig}\r\n".encode() + data[i:i + chunk] + b"\r\n"
                   for i in range(0, len(data), chunk))
    out += f"0{sig}\r\n".encode()
    if trailer:
        out += f"{trailer[0]}:{trailer[1]}\r\n".encode()
    return out + b"\r\n"
