"""What the S3 front end answers when its backend fails or the input is fuzzed (a 4xx or an
InternalError, never a traceback), and the gateway's node client against a real node front end."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
import string
from email.utils import parsedate_to_datetime
from urllib.parse import quote

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from aiohttp.test_utils import TestClient, TestServer

from nearfaas.s3.errors import S3Error
from nearfaas.s3.frontend import S3Frontend
from nearfaas.s3.node_client import NodeClient, nodelay_socket

from s3_fixtures import *  # noqa: F403  (the server, s3 and bucket fixtures)
from s3_fixtures import raw, tmp_empties_soon, xml_code

pytestmark = pytest.mark.timeout(60)


# -- internal errors ----------------------------------------------------------------------------


class _BrokenBackend:
    async def head_object(self, bucket, key):
        raise RuntimeError("disk on fire")

    async def put_object(self, *args, **kwargs):  # makes it look like a backend
        raise RuntimeError("unused")


def test_unexpected_exception_is_internal_error(caplog):
    async def scenario():
        app = web.Application()
        S3Frontend(_BrokenBackend()).mount(app)
        async with TestClient(TestServer(app)) as client:
            head = await client.head("/bkt/key")
            get = await client.get("/bkt/key?acl")
            return head.status, head.headers.get("x-nearfaas-error-code"), get.status, await get.read()

    head_status, head_code, get_status, get_body = asyncio.run(scenario())
    assert (head_status, head_code) == (500, "InternalError")
    assert get_status == 501 and xml_code(get_body) == "NotImplemented"
    assert "disk on fire" in caplog.text




# -- node client ----------------------------------------------------------------------------------


def test_node_client_roundtrip_and_errors(server):
    async def scenario():
        async with NodeClient("node-a", server.endpoint) as client:
            await client.create_bucket("nc-bucket", {"dscs_replica": True})
            assert (await client.head_bucket("nc-bucket")).options == {"dscs_replica": True}

            async def body():
                for i in range(40):
                    yield bytes([i]) * 50_000

            data = b"".join(bytes([i]) * 50_000 for i in range(40))
            info = await client.put_object("nc-bucket", "dir/obj ü", body(), content_type="x/y", metadata={"k": "v"},
                                           content_md5=hashlib.md5(data).digest())
            assert (info.size, info.etag, info.content_type) == (len(data), hashlib.md5(data).hexdigest(), "x/y")
            stream = await client.get_object("nc-bucket", "dir/obj ü", (100, 199))
            assert (stream.start, stream.end, stream.info.size) == (100, 199, len(data))
            assert b"".join([c async for c in stream.body]) == data[100:200]
            head = await client.head_object("nc-bucket", "dir/obj ü")
            assert (head.metadata, head.content_type, head.last_modified) == ({"k": "v"}, "x/y", info.last_modified)
            listing = await client.list_objects("nc-bucket", delimiter="/", max_keys=10)
            assert listing.common_prefixes == ["dir/"]
            upload = await client.create_multipart_upload("nc-bucket", "mp", upload_id="gw-upload-1")
            assert upload == "gw-upload-1"

            async def one(chunk):
                yield chunk

            e1 = await client.upload_part("nc-bucket", "mp", upload, 1, one(b"hello"))
            e2 = await client.upload_part("nc-bucket", "mp", upload, 2, one(b"!"))
            done = await client.complete_multipart_upload("nc-bucket", "mp", upload, [(1, e1), (2, e2)])
            assert done.size == 6 and done.etag.endswith("-2")
            with pytest.raises(S3Error) as e:
                await client.get_object("nc-bucket", "missing")
            assert (e.value.code, e.value.status) == ("NoSuchKey", 404)
            with pytest.raises(S3Error) as e:
                await client.head_object("no-such-bucket", "k")
            assert (e.value.code, e.value.status) == ("NoSuchBucket", 404)
            with pytest.raises(S3Error) as e:
                await client.get_object("nc-bucket", "dir/obj ü", (10**9, None))
            assert (e.value.code, e.value.status) == ("InvalidRange", 416)

            async def failing():
                yield b"partial"
                raise S3Error("BadDigest", "caller-side check failed")

            with pytest.raises(S3Error) as e:
                await client.put_object("nc-bucket", "failed", failing())
            assert e.value.message == "caller-side check failed"
            with pytest.raises(S3Error):
                await client.head_object("nc-bucket", "failed")
        async with NodeClient("node-down", "http://127.0.0.1:9") as down:
            with pytest.raises(S3Error) as e:
                await down.list_buckets()
            assert e.value.code == "ServiceUnavailable" and "node-down" in e.value.message

    asyncio.run(scenario())
    assert tmp_empties_soon(server)


def test_node_client_sockets_use_tcp_nodelay():
    sock = nodelay_socket((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 0)))
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_last_modified_header_parses(s3, bucket):
    s3.put_object(Bucket=bucket, Key="lm", Body=b"x")
    header = s3.head_object(Bucket=bucket, Key="lm")["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
    assert abs(parsedate_to_datetime(header).timestamp() - time.time()) < 60




# -- fuzz: bad input is a 4xx S3 error, never a 500 ------------------------------------------------

_text = st.text(alphabet=string.ascii_letters + string.digits + string.punctuation + " ", max_size=24)
_segment = st.one_of(st.sampled_from(["fuzz-bucket", "obj", "..", "."]), st.text(max_size=10).map(lambda s: quote(s, safe="")))
_paths = st.lists(_segment, max_size=4).map(lambda segments: "/" + "/".join(segments))
_query = st.lists(st.tuples(st.sampled_from(["list-type", "prefix", "delimiter", "max-keys", "continuation-token",
                                             "start-after", "encoding-type", "marker", "uploads", "uploadId",
                                             "partNumber", "location", "acl", "x-id", "X-Amz-Algorithm",
                                             "response-content-type"]), st.one_of(_text, st.text(max_size=8))),
                  max_size=4).map(lambda pairs: "&".join(f"{k}={quote(v)}" for k, v in pairs))
_headers = st.dictionaries(
    st.sampled_from(["Range", "Content-MD5", "x-amz-content-sha256", "Content-Encoding", "x-amz-decoded-content-length",
                     "x-amz-checksum-crc32", "If-Match", "x-nearfaas-upload-id", "Content-Type", "x-amz-meta-a",
                     "x-amz-trailer", "Authorization", "x-amz-copy-source"]),
    st.one_of(_text, st.sampled_from(["aws-chunked", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "bytes=0-3", "bytes=-2",
                                      "10", "x-amz-checksum-crc32", "AAAAAA=="])), max_size=5)
_bodies = st.one_of(st.binary(max_size=64), st.sampled_from([
    b"5\r\nhello\r\n0\r\n\r\n", b"3;chunk-signature=00\r\nabc\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n",
    b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>"]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD"]), path=_paths, query=_query,
       headers=_headers, body=_bodies)
def test_fuzzed_requests_get_s3_errors_not_500s(server, s3, method, path, query, headers, body):
    if not getattr(server, "fuzz_ready", False):
        s3.create_bucket(Bucket="fuzz-bucket")
        s3.put_object(Bucket="fuzz-bucket", Key="obj", Body=b"0123456789")
        server.fuzz_ready = True
    status, response_headers, data = raw(server, method, path + (f"?{query}" if query else ""), body, headers)
    assert status < 500 or status == 501, (status, data)
    if status >= 400:
        assert response_headers["x-nearfaas-error-code"]
        if method != "HEAD":
            assert xml_code(data) == response_headers["x-nearfaas-error-code"]
