"""Functions from other clouds, as a porting user meets them (issue 42, docs/porting.md): Lambda
handlers run unchanged, /tmp is Lambda's size and an instance whose /tmp is spent is replaced
rather than kept warm, and a requirements.txt that cannot install is reported at once."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_a_lambda_handler_runs_unchanged_with_its_event_context_and_boto3(cluster, scratch, functions_dir, bucket):
    """SeBS's shape: handler(event, context) in lambda_function.py (named by _HANDLER, Lambda's
    Handler setting), the invoke's JSON payload as the event, context.aws_request_id, boto3 with
    no endpoint, a dict answered as JSON. Catches: the handler looked up as handle() in
    handler.py (a cold-start error), the body passed as an Event, the answer not JSON."""
    cluster.s3().put_object(Bucket=bucket, Key="in.bin", Body=b"lambda payload " * 1000)
    env = {"_HANDLER": "lambda_function.lambda_handler"}
    assert scratch("lambda-sebs", functions_dir / "lambda_sebs", lang="python3-lambda", envVars=env,
                   limits={"memory": "256Mi"}).status_code == 202
    call = requests.post(f"{cluster.url}/function/lambda-sebs", json={"bucket": bucket, "key": "in.bin"}, timeout=60)
    assert call.status_code == 200 and call.headers["Content-Type"].startswith("application/json"), call.text
    out = call.json()
    assert out["sha256"] == hashlib.sha256(b"lambda payload " * 1000).hexdigest()
    assert out["request_id"] == call.headers["X-Call-Id"] and out["function"] == "lambda-sebs"
    assert 0 < out["remaining_ms"] <= 10_000 and out["memory_mb"] == "256"
    assert out["arn"].endswith(":function:lambda-sebs")
    assert cluster.s3().get_object(Bucket=bucket, Key="in.bin.copy")["Body"].read() == b"lambda payload " * 1000
    # A body that is not the invoke's JSON payload is the caller's 400, saying what to send.
    bad = requests.post(f"{cluster.url}/function/lambda-sebs", data=b"not json", timeout=60)
    assert bad.status_code == 400 and "JSON payload" in bad.text, bad.text


def test_a_lambda_behind_a_function_url_gets_payload_2_events_and_answers_as_a_proxy(cluster, scratch, functions_dir):
    assert scratch("lambda-url", functions_dir / "lambda_url", lang="python3-lambda",
                   envVars={"LAMBDA_EVENT": "http"}).status_code == 202
    call = requests.put(f"{cluster.url}/function/lambda-url/items?color=red", data=b"hello", timeout=60)
    assert call.status_code == 201 and call.headers["X-Seen-Method"] == "PUT", call.text
    assert call.json() == {"path": "/items", "query": {"color": "red"}, "body": "hello", "request_id": True}
    assert sorted(call.raw.headers.getlist("Set-Cookie")) == ["a=1", "b=2"]


def test_a_malformed_handler_setting_is_the_deploys_400_naming_it(cluster, functions_dir):
    resp = cluster.deploy("lambda-bad", functions_dir / "lambda_sebs", wait=False, lang="python3-lambda",
                          envVars={"_HANDLER": "lambda_function"})
    assert resp.status_code == 400 and "_HANDLER" in resp.text and "module.function" in resp.text, resp.text
    missing = cluster.deploy("lambda-missing", functions_dir / "lambda_sebs", wait=False, lang="python3-lambda")
    assert missing.status_code == 400 and "handler.py" in missing.text, missing.text


def test_tmp_is_lambdas_size_and_an_instance_whose_tmp_is_full_is_replaced(cluster, scratch, functions_dir):
    """SeBS's compression leaves its archive in /tmp on every call. With a spent /tmp the call
    fails (ENOSPC) and its instance is replaced, so the next call works: catches an instance kept
    warm after the fault (every later call failed until it retired)."""
    assert scratch("tmp-default", functions_dir / "tmpfill").status_code == 202
    size = requests.post(f"{cluster.url}/function/tmp-default", data=b"0", timeout=60).json()["size"]
    assert size == 512 << 20, size  # AWS Lambda's default ephemeral storage

    assert scratch("tmp-fill", functions_dir / "tmpfill", **{"x-nearfaas": {"tmp_size": "8Mi"}}).status_code == 202
    url = f"{cluster.url}/function/tmp-fill"
    first = requests.post(url, data=b"3", timeout=60)
    assert first.status_code == 200, first.text
    second = requests.post(url, data=b"3", timeout=60)
    assert second.status_code == 200 and second.headers["X-Nearfaas-Instance"] == first.headers["X-Nearfaas-Instance"]
    full = requests.post(url, data=b"3", timeout=60)  # 9 MiB into 8: ENOSPC
    assert full.status_code == 502 and full.headers["X-Nearfaas-Error"] == "instance-fault", full.text
    assert "/tmp" in full.json()["fix"] and "replaced" in full.json()["fix"], full.text
    after = requests.post(url, data=b"3", timeout=60)
    assert after.status_code == 200, after.text
    assert after.headers["X-Nearfaas-Instance"] != first.headers["X-Nearfaas-Instance"]
    assert after.json()["free"] > 4 << 20  # a fresh, nearly empty /tmp
    # A call that succeeds but leaves /tmp full retires its instance too (red team: the next
    # caller got the 502 instead).
    exact = requests.post(url, data=b"5", timeout=60)  # 3 + 5 MiB: all of its 8
    assert exact.status_code == 200 and exact.json()["free"] == 0, exact.text
    assert "/tmp is full" in exact.headers["X-Nearfaas-Retiring"]
    fresh = requests.post(url, data=b"1", timeout=60)
    assert fresh.status_code == 200 and fresh.headers["X-Nearfaas-Instance"] != exact.headers["X-Nearfaas-Instance"], fresh.text


def test_a_requirements_file_that_cannot_install_is_reported_at_once(cluster, tmp_path):
    """`nearfaas deploy` used to wait its 120 s for a warm replica before saying anything; the
    function's status now carries the failed cold start, and deploy stops with pip's words."""
    folder = tmp_path / "badreq"
    folder.mkdir()
    (folder / "handler.py").write_text("def handle(event, context):\n    return 'never'\n")
    (folder / "requirements.txt").write_text("nearfaas-no-such-package-anywhere==1.0\n")
    stack = tmp_path / "stack.yml"
    stack.write_text("version: 1.0\nprovider: {name: openfaas}\nfunctions:\n  badreq:\n    lang: python3-http\n    handler: ./badreq\n")
    env = dict(os.environ, NEARFAAS_STATE=str(cluster.state_dir), COLUMNS="200")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "nearfaas.cli", "deploy", "-f", str(stack)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=110)
        took = time.monotonic() - started
        assert done.returncode != 0, done.stdout + done.stderr
        assert "could not start" in done.stderr and "nearfaas-no-such-package-anywhere" in done.stderr, done.stderr
        assert took < 100, took  # not the 120 s wait for a warm replica
        status = cluster.http.get(f"{cluster.url}/system/function/badreq", timeout=10).json()
        assert "pip could not install requirements.txt" in status["coldStartError"], status
        assert str(cluster.state_dir) not in status["coldStartError"]  # no server path in the message
        call = requests.post(f"{cluster.url}/function/badreq", timeout=60)
        assert call.status_code == 502 and str(cluster.state_dir) not in call.text, call.text
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "badreq"}, timeout=30)
