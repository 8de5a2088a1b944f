"""SigV4 on the cluster's S3 endpoint when access keys are configured."""

from __future__ import annotations

import pytest
import requests
from botocore.exceptions import ClientError

from nearfaas.spec.cluster import AuthSpec

from conftest import running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("auth") / "state", auth=AuthSpec(access_key="AKIDNEARFAAS", secret_key="correct-horse-battery")) as c:
        yield c


def test_correct_signature_is_accepted(secured):
    s3 = secured.s3()  # keys from the cluster's layout
    s3.create_bucket(Bucket="signed")
    s3.put_object(Bucket="signed", Key="k", Body=b"v")
    assert s3.get_object(Bucket="signed", Key="k")["Body"].read() == b"v"


def test_wrong_secret_gets_signature_does_not_match(secured):
    s3 = secured.s3(access_key="AKIDNEARFAAS", secret_key="wrong")
    with pytest.raises(ClientError) as e:
        s3.list_buckets()
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_unknown_key_and_unsigned_requests_are_refused(secured):
    with pytest.raises(ClientError) as e:
        secured.s3(access_key="AKIDUNKNOWN", secret_key="x").list_buckets()
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    resp = requests.get(f"{secured.url}/")
    assert resp.status_code == 403 and "<Code>AccessDenied</Code>" in resp.text


def test_functions_read_and_write_objects_through_a_secured_gateway(secured, tmp_path_factory):
    """Workers sign their own S3 calls: a compute-node function can read its input and write
    its output when the cluster requires SigV4."""
    from pathlib import Path

    functions = Path(__file__).parent / "functions"
    s3 = secured.s3()
    s3.create_bucket(Bucket="secured-io")
    s3.put_object(Bucket="secured-io", Key="in/a b.txt", Body=b"signed bytes")
    assert secured.deploy("upper-signed", functions / "upper").status_code == 202  # not acceleratable: runs on compute-0
    resp = requests.post(f"{secured.url}/function/upper-signed", json={"input": {"bucket": "secured-io", "key": "in/a b.txt"}})
    assert resp.status_code == 200, resp.text
    assert s3.get_object(Bucket="secured-io", Key="in/a b.txt.upper")["Body"].read() == b"SIGNED BYTES"
