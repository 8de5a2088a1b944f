"""How a request body's framing is decided (s3/body.py ``is_aws_chunked``): a body is read as
plain only where nothing it carries could go unchecked."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from nearfaas.s3.body import is_aws_chunked

HEX = "a" * 64


@pytest.mark.parametrize("headers, framed", [
    ({"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}, True),  # signed chunks, whatever else says
    ({"x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}, True),
    ({"Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "5", "x-amz-content-sha256": HEX}, True),
    ({"Content-Encoding": "gzip, aws-chunked", "x-amz-content-sha256": HEX}, False),  # its own hash checks the bytes
    ({"Content-Encoding": "gzip, aws-chunked", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}, True),  # nothing would check
    ({"Content-Encoding": "aws-chunked"}, True),
    ({"Content-Encoding": "aws-chunked", "x-amz-content-sha256": HEX, "x-amz-trailer": "x-amz-checksum-crc32"}, True),
    ({"Content-Encoding": "gzip", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}, False),
    ({}, False),
])
def test_a_body_is_plain_only_where_its_own_hash_checks_it(headers, framed):
    # catches: aws-chunked in Content-Encoding taken as plain where framing bytes would be stored
    # as data unchecked (UNSIGNED-PAYLOAD, a trailer's checksum never read), or a hex-signed plain
    # body refused for lack of a decoded length (411)
    assert is_aws_chunked(CIMultiDict(headers)) is framed
