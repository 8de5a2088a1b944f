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
    "bundle": st.one_of(json_values, st.binary(max_size=64).map(lambda b: __import__("base64").b64encode(b).decode())),
    "base_dir": json_values, "functionName": json_values, "replicas": json_values, "name": json_values, "value": json_values,
})
SYSTEM_WRITES = [("POST", "/system/functions"), ("PUT", "/system/functions"), ("DELETE", "/system/functions"),
                 ("POST", "/system/scale-function/fuzz"), ("POST", "/system/secrets"), ("PUT", "/system/secrets"),
                 ("DELETE", "/system/secrets"), ("POST", "/system/nodes/storage-0/accelerator")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(deployment_like, json_values), target=st.sampled_from(SYSTEM_WRITES))
def test_random_system_bodies_never_get_a_5xx(cluster, body, target):
    """Every /system write, signed as the admin, with any JSON: a 4xx naming the field, never a 500."""
    method, path = target
    resp = cluster.http.request(method, f"{cluster.url}{path}", data=json.dumps(body), timeout=10,
                                headers={"Content-Type": "application/json"})
    assert resp.status_code < 500, (target, body, resp.status_code, resp.text)
    assert resp.headers.get("X-Call-Id") or resp.status_code in (401, 403, 415)
    if path == "/system/nodes/storage-0/accelerator" and resp.status_code == 200:  # leave the node as it was
        cluster.http.post(f"{cluster.url}{path}", json={"available": True}, timeout=10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH"]),
       path=st.sampled_from(["/system/functions", "/system/function/x", "/system/scale-function/x", "/system/logs",
                             "/system/secrets", "/function/x", "/async-function/x", "/system/info"]),
       body=st.binary(max_size=200), query=st.text(alphabet="abc=&%1", max_size=12))
def test_random_api_requests_never_get_a_5xx(cluster, method, path, body, query):
    """Any method, path, body and query, unsigned or as the admin: a 4xx (or a 2xx), never a 5xx.
    No function named x is deployed, so no 502/503/504 is a function's or a node's to give."""
    for client in (requests, cluster.http):  # unsigned, then as the admin
        resp = client.request(method, f"{cluster.url}{path}?{query}", data=body, timeout=10)
        assert resp.status_code < 500, (method, path, body, query, resp.status_code, resp.text)
        if client is requests and path.startswith("/system/") and method != "HEAD":
            assert resp.status_code in (401, 403, 404, 405, 415), (method, path, resp.status_code)
