"""A streaming SigV4 upload signed by hand, as an AWS SDK signs one (sigv4-streaming): the
headers' seed signature by botocore, then each chunk and the trailer chained off it with hmac
from AWS's published formula — never by the module under test. Shared by the unit tests of
the S3 front end and the integration tests of a secured cluster."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

STREAMING = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_streaming_put(url: str, chunks: list[bytes], *, access_key: str, secret: str, region: str = "us-east-1",
                         payload_hash: str | None = None, trailers: dict[str, str] | None = None,
                         extra: dict | None = None) -> tuple[dict, bytes]:
    """Headers and aws-chunked body of a streaming PUT. ``payload_hash`` defaults to the signed
    streaming kind (with -TRAILER when there are trailers)."""
    payload_hash = payload_hash or STREAMING + ("-TRAILER" if trailers else "")
    headers = {"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(sum(map(len, chunks))),
               "X-Amz-Content-SHA256": payload_hash, **(extra or {})}
    if trailers:
        headers["x-amz-trailer"] = ",".join(trailers)
    request = AWSRequest(method="PUT", url=url, headers=headers)
    signer = type("Streaming", (S3SigV4Auth,), {"payload": lambda self, r: payload_hash})
    signer(Credentials(access_key, secret), "s3", region).add_auth(request)
    headers = {"Host": urlsplit(url).netloc, **dict(request.headers.items())}
    timestamp, previous = headers["X-Amz-Date"], headers["Authorization"].rsplit("Signature=", 1)[1]
    scope = f"{timestamp[:8]}/{region}/s3/aws4_request"
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), timestamp[:8]), region), "s3"), "aws4_request")
    body = b""
    for data in [*chunks, b""]:
        to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", timestamp, scope, previous, EMPTY_SHA256,
                             hashlib.sha256(data).hexdigest()])
        previous = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        body += f"{len(data):x};chunk-signature={previous}\r\n".encode() + data + (b"\r\n" if data else b"")
    if trailers:
        canonical = "".join(f"{name}:{value}\n" for name, value in sorted(trailers.items()))
        to_sign = "\n".join(["AWS4-HMAC-SHA256-TRAILER", timestamp, scope, previous, hashlib.sha256(canonical.encode()).hexdigest()])
        body += "".join(f"{name}:{value}\r\n" for name, value in trailers.items()).encode()
        body += f"x-amz-trailer-signature:{hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()}\r\n".encode()
    return headers, body + b"\r\n"
