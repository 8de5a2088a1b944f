"""A GET of one S3 object with nothing but the standard library (an image without boto3 does
this): SigV4-signed with the key pair and endpoint the platform put in the environment
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), as any AWS SDK reads them."""
import hashlib
import hmac
import http.client
import os
import time
from urllib.parse import quote, urlsplit


def _mac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def get_object(bucket: str, key: str) -> bytes:
    url = urlsplit(os.environ["AWS_ENDPOINT_URL"])
    access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    region = os.environ.get("AWS_REGION", "us-east-1")
    path = "/" + quote(bucket, safe="") + "/" + quote(key, safe="/~")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    empty = hashlib.sha256(b"").hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = "\n".join(["GET", path, "", f"host:{url.netloc}\nx-amz-content-sha256:{empty}\nx-amz-date:{stamp}\n", signed, empty])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing = _mac(_mac(_mac(_mac(("AWS4" + secret).encode(), stamp[:8]), region), "s3"), "aws4_request")
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", path, headers={"Host": url.netloc, "x-amz-date": stamp, "x-amz-content-sha256": empty,
                                       "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, "
                                                        f"Signature={signature}"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        raise OSError(f"GET s3://{bucket}/{key}: HTTP {resp.status} {body[:200]!r}")
    return body


def summary(document: dict) -> dict:
    """What the sample functions answer about ``{"input": {"bucket": ..., "key": ...}}``."""
    ref = document["input"]
    data = get_object(ref["bucket"], ref["key"])
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
