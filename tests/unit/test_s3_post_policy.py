"""The POST policy checks of a browser form upload (s3/post_object.py) and the part arithmetic of
GetObject ?partNumber (s3/parts.py), without a server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.parts import PART_SIZES, decode_sizes, encode_sizes, internal_headers, part_range, with_part
from nearfaas.s3.post_object import check_policy, decode_policy, signer
from nearfaas.s3.sigv4 import S3Auth
from nearfaas.s3.sigv4_streaming import signing_key

NOW = 1_800_000_000.0
LATER = "2027-01-15T08:00:00Z"  # after NOW
EARLIER = "2027-01-15T07:59:59.000Z"  # 1_800_000_000 is 2027-01-15T08:00:00Z


def _encode(policy: dict) -> str:
    return base64.b64encode(json.dumps(policy).encode()).decode()


def _code(call, *args) -> tuple[str, int, str]:
    with pytest.raises(S3Error) as excinfo:
        call(*args)
    return excinfo.value.code, excinfo.value.status, excinfo.value.message


def test_every_kind_of_condition_is_checked():
    policy = {"expiration": LATER, "conditions": [
        {"bucket": "b"}, ["starts-with", "$key", "up/"], ["eq", "$Content-Type", "text/plain"],
        ["starts-with", "$x-amz-meta-tag", ""], ["content-length-range", 10, 20]]}
    fields = {"key": "up/a", "content-type": "text/plain", "x-amz-meta-tag": "anything", "policy": "p",
              "x-amz-signature": "s", "x-ignore-me": "1"}
    assert check_policy(policy, fields, "b", NOW) == (10, 20)
    assert _code(check_policy, policy, fields, "other", NOW)[:2] == ("AccessDenied", 403)
    code, status, message = _code(check_policy, policy, {**fields, "key": "down/a"}, "b", NOW)
    assert (code, status) == ("AccessDenied", 403) and message.startswith("Invalid according to Policy: Policy Condition failed")
    assert _code(check_policy, policy, {**fields, "content-type": "text/html"}, "b", NOW)[0] == "AccessDenied"
    assert "Extra input fields: x-amz-meta-other" in _code(check_policy, policy, {**fields, "x-amz-meta-other": "1"}, "b", NOW)[2]


def test_expired_and_malformed_policies():
    assert _code(check_policy, {"expiration": EARLIER, "conditions": []}, {}, "b", NOW)[2] == \
        "Invalid according to Policy: Policy expired."
    assert check_policy({"expiration": LATER, "conditions": []}, {}, "b", NOW) is None
    for bad in ("not base64!", base64.b64encode(b"[1, 2]").decode(), _encode({"conditions": []})):
        assert _code(decode_policy, bad)[:2] == ("InvalidPolicyDocument", 400)
    for condition in (["matches", "$key", "x"], ["eq", "key", "x"], ["content-length-range", "1", 2], {"a": 1, "b": 2}):
        assert _code(check_policy, {"expiration": LATER, "conditions": [condition]}, {}, "b", NOW)[0] == "InvalidPolicyDocument"


def _signed_form(secret: str, policy_b64: str, access_key: str = "AKID") -> dict:
    key = signing_key(secret, "20270115", "us-east-1")
    return {"policy": policy_b64, "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-date": "20270115T080000Z",
            "x-amz-credential": f"{access_key}/20270115/us-east-1/s3/aws4_request",
            "x-amz-signature": hmac.new(key, policy_b64.encode(), hashlib.sha256).hexdigest()}


def test_the_signature_is_the_policy_under_the_signing_key():
    auth = S3Auth({"AKID": "secret"})
    policy = _encode({"expiration": LATER, "conditions": []})
    assert signer(auth, _signed_form("secret", policy)).name == "AKID"
    assert _code(signer, auth, _signed_form("wrong", policy))[:2] == ("SignatureDoesNotMatch", 403)
    tampered = {**_signed_form("secret", policy), "policy": _encode({"expiration": LATER, "conditions": [1]})}
    assert _code(signer, auth, tampered)[0] == "SignatureDoesNotMatch"
    assert _code(signer, auth, _signed_form("secret", policy, "NOBODY"))[0] == "InvalidAccessKeyId"
    assert _code(signer, auth, {**_signed_form("secret", policy), "x-amz-date": "20270116T000000Z"})[0] == "InvalidArgument"
    assert _code(signer, auth, {"key": "k"})[:2] == ("AccessDenied", 403)  # no policy, auth on
    assert signer(S3Auth(), {"key": "k"}) is None  # auth off: an unsigned form is fine


def _info(size: int, etag: str, sizes: str | None = None) -> ObjectInfo:
    return ObjectInfo("b", "k", size, etag, 0.0, headers={PART_SIZES: sizes} if sizes else {})


def test_part_ranges():
    info = _info(25, "a" * 32 + "-3", "10,10,5")
    assert part_range(info, {"partNumber": "2"}, {})[0] == (10, 19)
    byte_range, extra = part_range(info, {"partNumber": "3"}, {})
    assert byte_range == (20, 24)
    sent = with_part({"ETag": '"e"', "x-amz-checksum-crc32": "AAAAAA=="}, extra, info)
    assert sent == {"ETag": '"e"', "x-amz-mp-parts-count": "3"}  # the whole object's checksum is not the part's
    replaced = _info(25, "b" * 32 + "-3", "10,10,5")  # the GET found another object than the HEAD sized
    assert _code(with_part, {}, extra, replaced)[:2] == ("ServiceUnavailable", 503)
    assert _code(part_range, info, {"partNumber": "4"}, {})[:2] == ("InvalidPartNumber", 416)
    assert part_range(_info(7, "a" * 32), {"partNumber": "1"}, {}) == (None, {})
    assert _code(part_range, _info(7, "a" * 32), {"partNumber": "2"}, {})[:2] == ("InvalidPartNumber", 416)
    for bad in ("0", "10001", "x", "", "\u0661"):
        assert _code(part_range, info, {"partNumber": bad}, {})[:2] == ("InvalidArgument", 400)
    assert _code(part_range, info, {"partNumber": "1"}, {"Range": "bytes=0-1"})[:2] == ("InvalidRequest", 400)
    old = _info(25, "a" * 32 + "-3")  # completed before part sizes were stored
    assert "before nearfaas recorded part sizes" in _code(part_range, old, {"partNumber": "1"}, {})[2]
    assert part_range(info, {}, {"Range": "bytes=0-1"}) == ((0, 1), {})
    assert "before nearfaas recorded part sizes" in _code(part_range, _info(25, "a" * 32 + "-3", "1*x"), {"partNumber": "1"}, {})[2]


def test_part_sizes_are_run_length_encoded():
    sizes = [5 << 20] * 9999 + [17]
    assert encode_sizes(sizes) == f"{5 << 20}*9999,17" and decode_sizes(encode_sizes(sizes)) == sizes
    assert decode_sizes(encode_sizes([3, 3, 4, 4, 4, 5])) == [3, 3, 4, 4, 4, 5]
    assert decode_sizes("1*10001") is None and decode_sizes("a") is None and decode_sizes("1,,2") is None
    mixed = ObjectInfo("b", "k", 1, "e-2", 0.0, headers={PART_SIZES: ",".join(str(n) for n in range(2000))})
    assert internal_headers({PART_SIZES: "ENABLED"}, mixed, lambda: True) == {}  # too long to send
    short = ObjectInfo("b", "k", 1, "e-2", 0.0, headers={PART_SIZES: "5*2"})
    assert internal_headers({PART_SIZES: "ENABLED"}, short, lambda: True) == {PART_SIZES: "5*2"}
    assert internal_headers({PART_SIZES: "ENABLED"}, short, lambda: False) == {}
    assert internal_headers({}, short, lambda: True) == {}
