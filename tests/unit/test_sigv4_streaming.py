"""Streaming SigV4 (aws-chunked bodies with chunk signatures) against the S3 front end.

The chunk signatures here are made by hand with hmac from AWS's published formula, not by the
module under test; AWS's own worked example (a 66,560-byte PUT) is replayed byte for byte.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import hmac
import time
import zlib

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from nearfaas.s3.sigv4 import S3Auth
from nearfaas.s3.sigv4_streaming import StreamingSeed, canonical_trailers
from s3_test_server import S3TestServer
from sigv4_client import signed_streaming_put as sign_streaming
from test_sigv4 import send  # one raw-HTTP sender for both SigV4 test files

pytestmark = pytest.mark.timeout(60)

KEY, SECRET = "AKIDSTREAM", "stream-secret/with+odd=chars"
STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
EMPTY = hashlib.sha256(b"").hexdigest()

# AWS's worked example ("Signature Calculations for the Authorization Header: Transferring
# Payload in Multiple Chunks", Example: PUT Object): 66,560 bytes of "a" in chunks of 65,536 and
# 1,024 bytes, then the empty final chunk, at 20130524T000000Z.
AWS_KEY, AWS_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
AWS_CHUNK_SIGNATURES = ["ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
                        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
                        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"]
# The trailer signature the AWS SDKs' common runtime (aws-c-auth) tests for trailers
# first:1st, second:2nd, third:3rd chained off the final chunk signature above.
AWS_TRAILER_SIGNATURE = "df5735bd9f3295cd9386572292562fefc93ba94e80a0a1ddcbd652c4e0a75e6c"
AWS_TIME = calendar.timegm((2013, 5, 24, 0, 0, 0))
AWS_HEADERS = {
    "Host": "s3.amazonaws.com",
    "x-amz-date": "20130524T000000Z",
    "x-amz-storage-class": "REDUCED_REDUNDANCY",
    "Authorization": f"AWS4-HMAC-SHA256 Credential={AWS_KEY}/20130524/us-east-1/s3/aws4_request,"
                     "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
                     f"x-amz-decoded-content-length;x-amz-storage-class,Signature={AWS_SEED}",
    "x-amz-content-sha256": STREAMING,
    "Content-Encoding": "aws-chunked",
    "x-amz-decoded-content-length": "66560",
    "Content-Length": "66824",
}


def aws_example_body(chunks=((65536, "a"), (1024, "a")), signatures=AWS_CHUNK_SIGNATURES) -> bytes:
    out = b""
    for (size, fill), signature in zip(chunks, signatures, strict=False):
        out += f"{size:x};chunk-signature={signature}\r\n".encode() + fill.encode() * size + b"\r\n"
    return out + f"0;chunk-signature={signatures[-1]}\r\n\r\n".encode()


# -- a client that signs streaming uploads by hand -------------------------------------------------


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_streaming_put(url: str, chunks: list[bytes], *, payload_hash: str = STREAMING, secret: str = SECRET,
                         trailers: dict[str, str] | None = None, extra: dict | None = None,
                         access_key: str = KEY) -> tuple[dict, bytes]:
    """This module's key and secret unless told otherwise (tests/helpers/sigv4_client.py signs)."""
    return sign_streaming(url, chunks, access_key=access_key, secret=secret, payload_hash=payload_hash,
                          trailers=trailers, extra=extra)


def code(body: bytes) -> str:
    return body.split(b"<Code>", 1)[1].split(b"</Code>", 1)[0].decode() if b"<Code>" in body else ""


def tmp_is_empty(server) -> bool:
    deadline = time.monotonic() + 5
    while list((server.store.root / "tmp").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not list((server.store.root / "tmp").iterdir())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = S3TestServer(tmp_path_factory.mktemp("streaming"), auth=S3Auth({KEY: SECRET})).start()
    srv.client(KEY, SECRET).create_bucket(Bucket="stream")
    yield srv
    srv.stop()


def get(server, key: str) -> bytes:
    return server.client(KEY, SECRET).get_object(Bucket="stream", Key=key)["Body"].read()


def missing(server, key: str) -> bool:
    return send(server, "HEAD", f"/stream/{key}", signed_head(server, key))[0] == 404


def signed_head(server, key: str) -> dict:
    request = AWSRequest(method="HEAD", url=f"{server.endpoint}/stream/{key}")
    S3SigV4Auth(Credentials(KEY, SECRET), "s3", "us-east-1").add_auth(request)
    return {"Host": f"127.0.0.1:{server.port}", **dict(request.headers.items())}


# -- AWS's published example -------------------------------------------------------------------


def test_signing_arithmetic_matches_aws_published_signatures():
    auth = S3Auth({AWS_KEY: AWS_SECRET}, clock=lambda: AWS_TIME)
    from multidict import CIMultiDict

    context = auth.authenticate("PUT", "/examplebucket/chunkObject.txt", [], CIMultiDict(AWS_HEADERS))
    seed = context.streaming
    assert isinstance(seed, StreamingSeed) and seed.signature == AWS_SEED and not seed.trailer
    assert seed.scope == "20130524/us-east-1/s3/aws4_request" and seed.timestamp == "20130524T000000Z"
    previous = AWS_SEED
    for data, expected in zip([b"a" * 65536, b"a" * 1024, b""], AWS_CHUNK_SIGNATURES, strict=True):
        previous = seed.sign_chunk(previous, hashlib.sha256(data).hexdigest())
        assert previous == expected
    trailers = {"first": "1st", "second": "2nd", "third": "3rd"}
    assert canonical_trailers(trailers) == b"first:1st\nsecond:2nd\nthird:3rd\n"
    assert seed.sign_trailer(AWS_CHUNK_SIGNATURES[-1], trailers) == AWS_TRAILER_SIGNATURE
    assert "key=" not in repr(seed)  # the derived key stays out of logs


def test_aws_published_request_is_accepted_and_a_same_length_replay_is_refused(tmp_path):
    srv = S3TestServer(tmp_path / "aws", auth=S3Auth({AWS_KEY: AWS_SECRET}, clock=lambda: AWS_TIME)).start()
    try:
        srv.run(srv.backend.create_bucket("examplebucket", None))
        body = aws_example_body()
        assert len(body) == 66824
        status, reply = send(srv, "PUT", "/examplebucket/chunkObject.txt", AWS_HEADERS, body)
        assert status == 200, reply
        stored = srv.run(srv.backend.get_object("examplebucket", "chunkObject.txt"))
        assert srv.run(_read(stored.body)) == b"a" * 66560
        # The captured request replayed with another body of the very same length.
        forged = aws_example_body(chunks=((65536, "a"), (1024, "b")))
        assert len(forged) == len(body)
        status, reply = send(srv, "PUT", "/examplebucket/chunkObject.txt", AWS_HEADERS, forged)
        assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), reply
        assert b"chunk 2 (decoded bytes 65536-66559)" in reply
        stored = srv.run(srv.backend.get_object("examplebucket", "chunkObject.txt"))
        assert srv.run(_read(stored.body)) == b"a" * 66560
        assert tmp_is_empty(srv)
    finally:
        srv.stop()


async def _read(body) -> bytes:
    return b"".join([chunk async for chunk in body])


# -- requests signed here, now ---------------------------------------------------------------------


def test_signed_streaming_put_is_accepted(server):
    chunks = [b"x" * 70000, b"middle chunk", b"\x00\xff" * 3000]
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/ok", chunks, extra={"x-amz-meta-who": "me"})
    status, reply = send(server, "PUT", "/stream/ok", headers, body)
    assert status == 200, reply
    assert get(server, "ok") == b"".join(chunks)


def test_replayed_with_another_body_of_the_same_length_is_refused(server):
    original = [b"A" * 9000, b"the signed tail"]
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/victim", original)
    assert send(server, "PUT", "/stream/victim", headers, body)[0] == 200
    cases = {
        "first chunk changed": body.replace(b"A" * 9000, b"B" * 9000, 1),
        "last data chunk changed": body.replace(b"the signed tail", b"the forged tail"),
    }
    for what, forged in cases.items():
        assert len(forged) == len(body)
        status, reply = send(server, "PUT", "/stream/victim", headers, forged)
        assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), (what, reply)
        assert get(server, "victim") == b"".join(original), what
    assert tmp_is_empty(server)
    # A new object is not created either.
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/never", original)
    status, reply = send(server, "PUT", "/stream/never", headers, body.replace(b"AAAA", b"AAAB", 1))
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch")
    assert missing(server, "never") and tmp_is_empty(server)


def test_tampered_final_chunk_missing_signatures_and_reordering_are_refused(server):
    chunks = [b"one " * 100, b"two " * 100]
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/final", chunks)
    head, _, final_signature = body[:-4].rpartition(b";chunk-signature=")
    cases = {
        "final signature altered": head + b";chunk-signature=" + bytes(reversed(final_signature)) + b"\r\n\r\n",
        "final chunk unsigned": head + b"\r\n\r\n",
        "first chunk unsigned": body.replace(body.split(b"\r\n", 1)[0], f"{len(chunks[0]):x}".encode(), 1),
    }
    first_len = len(f"{len(chunks[0]):x};chunk-signature=".encode()) + 64 + 2 + len(chunks[0]) + 2
    first, rest = body[:first_len], body[first_len:]
    second_len = len(f"{len(chunks[1]):x};chunk-signature=".encode()) + 64 + 2 + len(chunks[1]) + 2
    cases["chunks swapped"] = rest[:second_len] + first + rest[second_len:]
    for what, forged in cases.items():
        status, reply = send(server, "PUT", "/stream/final", headers, forged)
        assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), (what, reply)
    assert missing(server, "final") and tmp_is_empty(server)
    # Trailing headers are not covered by STREAMING-AWS4-HMAC-SHA256-PAYLOAD: refused, not ignored.
    unsigned_trailer = body[:-2] + b"x-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    status, reply = send(server, "PUT", "/stream/final", headers, unsigned_trailer)
    assert (status, code(reply)) == (400, "InvalidRequest"), reply
    assert send(server, "PUT", "/stream/final", headers, body)[0] == 200
    assert get(server, "final") == b"".join(chunks)


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_signed_trailer_is_verified(server):
    chunks = [b"trailing " * 500, b"end"]
    data = b"".join(chunks)
    trailers = {"x-amz-checksum-crc32": _crc32(data)}
    url = f"{server.endpoint}/stream/trailed"
    headers, body = signed_streaming_put(url, chunks, payload_hash=STREAMING_TRAILER, trailers=trailers)
    status, reply = send(server, "PUT", "/stream/trailed", headers, body)
    assert status == 200, reply
    assert get(server, "trailed") == data
    # Another body with a matching checksum in the trailer: the trailer signature gives it away.
    other = data.replace(b"end", b"END")
    forged = body.replace(b"end\r\n", b"END\r\n").replace(trailers["x-amz-checksum-crc32"].encode(),
                                                          _crc32(other).encode())
    status, reply = send(server, "PUT", "/stream/trailed", headers, forged)
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), reply
    # The data intact but the trailer changed, or its signature gone.
    status, reply = send(server, "PUT", "/stream/trailed", headers,
                         body.replace(trailers["x-amz-checksum-crc32"].encode(), _crc32(b"x").encode()))
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch") and b"x-amz-trailer-signature" in reply
    no_signature = body[:body.index(b"x-amz-trailer-signature:")] + b"\r\n"
    status, reply = send(server, "PUT", "/stream/trailed", headers, no_signature)
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), reply
    duplicated = body.replace(b"x-amz-trailer-signature:", f"x-amz-checksum-crc32:{_crc32(b'x')}\r\n"
                              "x-amz-trailer-signature:".encode())
    status, reply = send(server, "PUT", "/stream/trailed", headers, duplicated)
    assert (status, code(reply)) == (400, "InvalidRequest"), reply
    assert get(server, "trailed") == data and tmp_is_empty(server)


def test_unsigned_trailer_keeps_its_checksum_check_with_auth_on(server):
    data = b"unsigned payload, checked by its trailer"
    chunked = f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n"
    url = f"{server.endpoint}/stream/unsigned"
    headers, _ = signed_streaming_put(url, [data], payload_hash="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                                      trailers={"x-amz-checksum-crc32": _crc32(data)})
    good = chunked + f"x-amz-checksum-crc32:{_crc32(data)}\r\n\r\n".encode()
    assert send(server, "PUT", "/stream/unsigned", headers, good)[0] == 200
    bad = chunked + f"x-amz-checksum-crc32:{_crc32(b'other')}\r\n\r\n".encode()
    status, reply = send(server, "PUT", "/stream/unsigned", headers, bad)
    assert (status, code(reply)) == (400, "BadDigest"), reply
    assert get(server, "unsigned") == data


def test_unknown_streaming_mode_and_wrong_secret(server):
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/odd", [b"x"], payload_hash="STREAMING-MADE-UP")
    status, reply = send(server, "PUT", "/stream/odd", headers, body)
    assert (status, code(reply)) == (400, "InvalidArgument"), reply
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/odd", [b"x"], secret="not-the-secret")
    status, reply = send(server, "PUT", "/stream/odd", headers, body)
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), reply
    assert missing(server, "odd")


def test_chunk_bigger_than_a_read_is_hashed_as_it_streams(server):
    # One 1 MiB chunk spans several 256 KiB reads: its signature covers all of them.
    chunks = [bytes(range(256)) * 4096]
    headers, body = signed_streaming_put(f"{server.endpoint}/stream/big", chunks)
    assert send(server, "PUT", "/stream/big", headers, body)[0] == 200
    assert get(server, "big") == chunks[0]
    forged = body[:-600] + b"\xee" + body[-599:]  # one byte near the end of the data
    status, reply = send(server, "PUT", "/stream/big", headers, forged)
    assert (status, code(reply)) == (403, "SignatureDoesNotMatch"), reply
    assert get(server, "big") == chunks[0] and tmp_is_empty(server)
