"""Every 4xx/5xx the S3 router answers is an S3 XML error (issue 22), and no request makes it
answer 500: Hypothesis sends signed and unsigned requests with arbitrary methods, paths, query
strings, headers and bodies to the cluster's S3 endpoint."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import quote

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.integration

SUBRESOURCES = ["", "uploads", "uploadId=x", "partNumber=1&uploadId=x", "list-type=2", "list-type=3", "delete",
                "acl", "versions", "versioning", "tagging", "select&select-type=2", "max-keys=-1", "encoding-type=zip",
                "continuation-token=%%%", "max-buckets=0", "location", "uploadId=", "x-id=GetObject"]
HEADERS = st.dictionaries(
    st.sampled_from(["Content-Encoding", "Content-MD5", "x-amz-checksum-crc32", "x-amz-checksum-crc32c", "Range", "If-Match",
                     "If-None-Match", "If-Modified-Since", "x-amz-copy-source", "x-amz-copy-source-range", "x-amz-acl",
                     "x-amz-metadata-directive", "x-amz-meta-a", "Content-Type", "x-amz-storage-class",
                     "x-amz-copy-source-if-match", "Expect"]),
    st.sampled_from(["gzip", "deflate", "br", "*", "bytes=0-1", "bytes=5-1", "bytes=-0", "abc", "AAAAAA==", '"x"',
                     "errbkt/missing", "/fuzz-err/k", "bytes=0-99999999999", "public-read", "REPLACE", "COPY", "",
                     "Wed, 21 Oct 2015 07:28:00 GMT", "100-continue", "ü"]),
    max_size=3)


@pytest.fixture(scope="module")
def target(cluster):
    cluster.s3().create_bucket(Bucket="fuzz-err")
    cluster.s3().put_object(Bucket="fuzz-err", Key="k", Body=b"0123456789")
    return cluster


def _is_s3_error(body: bytes) -> bool:
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return False
    return root.tag == "Error" and bool(root.findtext("Code"))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(method=st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "OPTIONS"]),
       path=st.sampled_from(["/", "/fuzz-err", "/fuzz-err/k", "/fuzz-err/new", "/no-such-bucket/k", "/fuzz-err/a%00b",
                             "/fuzz-err/../x", "/Bad_Bucket/k", "/fuzz-err/" + quote("ü/∑", safe="/")]),
       sub=st.sampled_from(SUBRESOURCES), headers=HEADERS,
       body=st.sampled_from([b"", b"hello", b"\x1f\x8b\x08\x00garbage", b"<xml", b"\x00" * 100]),
       signed=st.booleans())
def test_every_error_is_s3_xml_and_nothing_is_a_500(target, method, path, sub, headers, body, signed):
    url = f"{target.url}{path}" + (f"?{sub}" if sub else "")
    headers = {k: v for k, v in headers.items() if v.isascii()} | ({"x-amz-meta-a": "ü"} if "x-amz-meta-a" in headers else {})
    if signed:
        access, secret = target.keys(target.url)
        request = AWSRequest(method, url, data=body, headers=dict(headers))
        try:
            S3SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(request)
        except (UnicodeEncodeError, ValueError):
            return  # botocore itself cannot sign it: nothing to send
        headers = dict(request.headers)
    try:
        resp = requests.request(method, url, data=body, headers=headers, timeout=20)
    except requests.exceptions.InvalidHeader:
        return
    assert resp.status_code < 500 or resp.status_code in (501, 503), (method, url, headers, resp.status_code, resp.content[:300])
    if resp.status_code >= 400 and method != "HEAD":
        assert _is_s3_error(resp.content), (method, url, headers, resp.status_code, resp.content[:300])
