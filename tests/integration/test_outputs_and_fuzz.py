"""Function outputs written as objects, and the gateway's API under random input."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.integration


def test_function_writes_its_output_as_an_object(cluster, bucket, functions_dir):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="in.txt", Body=b"near data")
    assert cluster.deploy("upper", functions_dir / "upper", **{"x-nearfaas": {"accelerator": "dscs"}}).status_code == 202
    resp = requests.post(f"{cluster.url}/function/upper", json={"input": {"bucket": bucket, "key": "in.txt"}})
    assert resp.status_code == 200, resp.text
    out = resp.json()["output"]
    assert s3.get_object(Bucket=out["bucket"], Key=out["key"])["Body"].read() == b"NEAR DATA"
    assert int(resp.headers["X-Nearfaas-Bytes-Local"]) == len(b"near data")  # read through mmap on the node
    assert int(resp.headers["X-Nearfaas-Bytes-Remote"]) == len(b"NEAR DATA")  # the write went through S3


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=12,
)
deployment_like = st.fixed_dictionaries({}, optional={
    "service": st.one_of(st.text(max_size=20), json_values), "handler": json_values, "lang": json_values,
    "image": json_values, "envVars": json_values, "labels": json_values, "secrets": json_values,
    "x-nearfaas": json_values, "annotations": json_values, "limits": json_values,
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(deployment_like, json_values))
def test_random_deployments_never_get_a_5xx(cluster, body):
    resp = cluster.http.post(f"{cluster.url}/system/functions", data=json.dumps(body), timeout=10)
    assert resp.status_code < 500, (body, resp.status_code, resp.text)
    assert resp.headers.get("X-Call-Id")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
       path=st.sampled_from(["/system/functions", "/system/function/x", "/system/scale-function/x", "/system/logs",
                             "/system/secrets", "/function/x", "/async-function/x", "/system/info"]),
       body=st.binary(max_size=200), query=st.text(alphabet="abc=&%1", max_size=12))
def test_random_api_requests_never_get_a_500(cluster, method, path, body, query):
    resp = requests.request(method, f"{cluster.url}{path}?{query}", data=body, timeout=10)
    assert resp.status_code != 500, (method, path, body, resp.text)
