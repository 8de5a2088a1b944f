"""The OpenFaaS REST API against a real cluster: deploy, list, update, scale, delete, invoke
(sync and async with a callback), timeouts, max_inflight, logs, secrets, bad input."""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from nearfaas.spec.bundle import pack

pytestmark = pytest.mark.integration


def test_deploy_list_get_update_delete(cluster, functions_dir):
    url = cluster.url
    resp = cluster.deploy("crud", functions_dir / "echo", envVars={"GREETING": "hello"},
                          labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "2"})
    assert resp.status_code == 202, resp.text
    names = [f["name"] for f in cluster.http.get(f"{url}/system/functions").json()]
    assert "crud" in names
    status = cluster.http.get(f"{url}/system/function/crud").json()
    assert status["envVars"]["GREETING"] == "hello" and status["availableReplicas"] >= 1
    assert requests.post(f"{url}/function/crud", data=b"x").json()["greeting"] == "hello"

    body = {"service": "crud", "lang": "python3-http", "handler": str(functions_dir / "echo"), "envVars": {"GREETING": "bonjour"}}
    assert cluster.http.put(f"{url}/system/functions", json=body).status_code == 200
    cluster.wait_warm("crud")
    assert requests.post(f"{url}/function/crud", data=b"x").json()["greeting"] == "bonjour"
    assert cluster.http.get(f"{url}/system/function/crud").json()["envVars"]["GREETING"] == "bonjour"

    assert cluster.http.delete(f"{url}/system/functions", json={"functionName": "crud"}).status_code == 202
    assert cluster.http.get(f"{url}/system/function/crud").status_code == 404
    assert requests.post(f"{url}/function/crud").status_code == 404
    assert cluster.http.delete(f"{url}/system/functions", json={"functionName": "crud"}).status_code == 404


def test_sync_invoke_headers_and_warm_reuse(cluster, functions_dir):
    cluster.deploy("count", functions_dir / "counter")
    first = requests.post(f"{cluster.url}/function/count?x=1")
    second = requests.post(f"{cluster.url}/function/count")
    assert first.status_code == second.status_code == 200
    for resp in (first, second):
        assert resp.headers["X-Call-Id"] and float(resp.headers["X-Duration-Seconds"]) > 0
        assert resp.headers["X-Nearfaas-Timing"].startswith("measured;")
    assert second.headers["X-Nearfaas-Start"] == "warm"
    # The same warm process served both calls (its module state persisted).
    assert second.json()["pid"] == first.json()["pid"] and second.json()["calls"] == first.json()["calls"] + 1


def test_cold_start_when_scaled_from_zero(cluster, functions_dir):
    cluster.deploy("zero", functions_dir / "counter", wait=False,
                   labels={"com.openfaas.scale.min": "0", "com.openfaas.scale.zero": "true"})
    time.sleep(0.3)
    assert cluster.http.get(f"{cluster.url}/system/function/zero").json()["availableReplicas"] == 0
    resp = requests.post(f"{cluster.url}/function/zero")
    assert resp.status_code == 200 and resp.headers["X-Nearfaas-Start"] == "cold"
    cold = float(resp.headers["X-Nearfaas-Timing"].split("cold_start=")[1].split(";")[0])
    assert cold > 0
    assert requests.post(f"{cluster.url}/function/zero").headers["X-Nearfaas-Start"] == "warm"
    metrics = requests.get(f"{cluster.url}/metrics").text
    assert 'nearfaas_cold_starts_total{function_name="zero"' in metrics


def test_scale_function(cluster, functions_dir):
    cluster.deploy("scaled", functions_dir / "echo", labels={"com.openfaas.scale.max": "3"})
    resp = cluster.http.post(f"{cluster.url}/system/scale-function/scaled", json={"serviceName": "scaled", "replicas": 3})
    assert resp.status_code == 202
    assert cluster.wait_warm("scaled", replicas=3)["availableReplicas"] == 3
    assert cluster.http.post(f"{cluster.url}/system/scale-function/scaled", json={"replicas": 1}).status_code == 202
    deadline = time.monotonic() + 10
    while cluster.http.get(f"{cluster.url}/system/function/scaled").json()["availableReplicas"] != 1:
        assert time.monotonic() < deadline, "scale down did not happen"
        time.sleep(0.05)
    assert cluster.http.post(f"{cluster.url}/system/scale-function/scaled", json={"replicas": 9}).status_code == 400
    assert cluster.http.post(f"{cluster.url}/system/scale-function/scaled", json={"replicas": "two"}).status_code == 400
    assert cluster.http.post(f"{cluster.url}/system/scale-function/nope", json={"replicas": 1}).status_code == 404


class _Sink(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Sink.received.append((dict(self.headers), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_async_invoke_with_callback(cluster, functions_dir):
    cluster.deploy("asyncecho", functions_dir / "echo")
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    try:
        callback = f"http://127.0.0.1:{sink.server_address[1]}/done"
        resp = requests.post(f"{cluster.url}/async-function/asyncecho", data=b"later", headers={"X-Callback-Url": callback})
        assert resp.status_code == 202
        call_id = resp.headers["X-Call-Id"]
        deadline = time.monotonic() + 10
        while not _Sink.received:
            assert time.monotonic() < deadline, "callback never arrived"
            time.sleep(0.02)
        headers, body = _Sink.received[0]
        assert headers["X-Call-Id"] == call_id
        assert headers["X-Function-Status"] == "200"
        assert float(headers["X-Duration-Seconds"]) > 0
        assert json.loads(body)["body"] == "later"
    finally:
        sink.shutdown()
    bad = requests.post(f"{cluster.url}/async-function/asyncecho", headers={"X-Callback-Url": "not a url"})
    assert bad.status_code == 400
    assert requests.post(f"{cluster.url}/async-function/nope").status_code == 404


def test_exec_timeout_gives_504_naming_the_layer_and_replaces_worker(cluster, functions_dir):
    cluster.deploy("sleepy", functions_dir / "slow", envVars={"exec_timeout": "1s"})
    started = time.monotonic()
    resp = requests.post(f"{cluster.url}/function/sleepy?sleep=-1", timeout=30)  # never returns
    assert resp.status_code == 504
    assert "exec_timeout" in resp.text and "worker" in resp.text
    assert resp.headers["X-Nearfaas-Layer"] == "worker"
    assert time.monotonic() - started < 5
    # The stuck worker was replaced: the next call succeeds.
    ok = requests.post(f"{cluster.url}/function/sleepy?sleep=0", timeout=30)
    assert ok.status_code == 200, ok.text


def test_max_inflight_gives_429_with_retry_after(cluster, functions_dir):
    cluster.deploy("narrow", functions_dir / "slow", envVars={"max_inflight": "1"},
                   labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}, **{"x-nearfaas": {"queue_depth": 0}})
    results = cluster.post_concurrently("/function/narrow?sleep=0.8", 4, timeout=30)
    codes = sorted(r.status_code for r in results)
    assert codes.count(200) >= 1 and 429 in codes, codes
    rejected = next(r for r in results if r.status_code == 429)
    assert rejected.headers["Retry-After"] == "1"
    assert "max_inflight" in rejected.text


def test_handler_exception_is_502_with_the_error(cluster, functions_dir):
    cluster.deploy("boom", functions_dir / "boom")
    resp = requests.post(f"{cluster.url}/function/boom")
    assert resp.status_code == 502
    body = resp.json()
    assert "ZeroDivisionError" in body["error"] and body["layer"] == "function"
    # the traceback stays in the log: the caller sees no frame and none of the node's paths
    assert "traceback" not in body and "File \"" not in resp.text and "/handler" not in resp.text, body
    assert "nearfaas logs boom" in body["fix"]
    assert resp.headers["X-Nearfaas-Instance"] == body["instance"] != ""  # which instance failed, as on a 200
    # The worker survived its handler's exception.
    assert requests.post(f"{cluster.url}/function/boom").status_code == 502


def test_failed_cold_start_says_why(cluster, functions_dir):
    resp = cluster.deploy("badimport", functions_dir / "badimport", wait=False)
    assert resp.status_code == 202
    call = requests.post(f"{cluster.url}/function/badimport", timeout=60)
    assert call.status_code == 502
    assert "ModuleNotFoundError: No module named 'module_that_does_not_exist'" in call.text, call.text
    # the error and where its traceback is, never the traceback: its frames name the node's paths
    assert 'File "' not in call.text and str(cluster.state_dir) not in call.text and "nearfaas logs" in call.text, call.text


def test_logs_capture_stdout(cluster, functions_dir):
    cluster.deploy("talker", functions_dir / "echo")
    requests.post(f"{cluster.url}/function/talker", data=b"12345")
    deadline = time.monotonic() + 5
    while True:
        resp = cluster.http.get(f"{cluster.url}/system/logs", params={"name": "talker", "tail": 10})
        lines = [json.loads(line) for line in resp.text.splitlines()]
        if any("echo called with 5 bytes" in line["text"] for line in lines):
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    assert all({"name", "instance", "timestamp", "text"} <= set(line) for line in lines)
    every = cluster.http.get(f"{cluster.url}/system/logs", params={"name": "talker", "tail": -1})  # faas-cli's default
    assert every.status_code == 200 and any("echo called with 5 bytes" in json.loads(x)["text"] for x in every.text.splitlines())
    assert cluster.http.get(f"{cluster.url}/system/logs", params={"name": "talker", "tail": "ten"}).status_code == 400
    assert cluster.http.get(f"{cluster.url}/system/logs", params={"name": "ghost"}).status_code == 404
    assert cluster.http.get(f"{cluster.url}/system/logs").status_code == 400


def test_secrets_are_mounted_as_files(cluster, functions_dir):
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "api-key", "value": "s3cr3t"}).status_code == 200
    cluster.deploy("secretive", functions_dir / "secretreader", secrets=["api-key"])
    assert requests.post(f"{cluster.url}/function/secretive").text == "s3cr3t"


def test_a_deployment_naming_a_missing_secret_is_a_400_naming_it(cluster, scratch, functions_dir):
    """docs/user-guide.md: a missing secret is a 400 at deploy (and update), naming secrets[i] and
    how to create it; before issue 39 the deploy was a 202 and only each call failed."""
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "api-key", "value": "s3cr3t"}, timeout=10).status_code == 200
    missing = scratch("needs-missing", functions_dir / "secretreader", wait=False, secrets=["api-key", "no-such-secret"])
    assert missing.status_code == 400, missing.text
    assert "secrets[1]" in missing.text and "no-such-secret" in missing.text and "nearfaas secret create no-such-secret" in missing.text
    assert "POST /system/secrets" in missing.text
    assert cluster.http.get(f"{cluster.url}/system/function/needs-missing", timeout=10).status_code == 404  # nothing deployed
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "late-secret", "value": "late"}, timeout=10).status_code == 200
    assert scratch("needs-missing", functions_dir / "secretreader", secrets=["late-secret"]).status_code == 202
    update = cluster.http.put(f"{cluster.url}/system/functions", timeout=30, json={
        "service": "needs-missing", "bundle": pack(functions_dir / "secretreader"), "secrets": ["late-secret", "gone-secret"]})
    assert update.status_code == 400 and "secrets[1]" in update.text and "gone-secret" in update.text, update.text
    assert cluster.http.get(f"{cluster.url}/system/function/needs-missing", timeout=10).json()["secrets"] == ["late-secret"]


def test_requirements_are_installed_into_a_cached_env(cluster, functions_dir, tmp_path):
    """requirements.txt is installed once per key into <state>/envs/<key> (node/build.py), marked
    done by <key>.complete. A requirements file that reads the bundle (here a wheel file) keys the env
    to the function's uid too: another function with the same text gets an env of its own."""
    cluster.deploy("usepkg", functions_dir / "usepkg", wait=False)
    resp = requests.post(f"{cluster.url}/function/usepkg", timeout=300)
    assert resp.status_code == 200, resp.text
    assert resp.text == "forty-two from a requirements.txt wheel"

    envs = cluster.state_dir / "envs"
    built = lambda: {p.name for p in envs.iterdir() if p.is_dir() and (p / "nearfaas_testpkg.py").is_file()}  # noqa: E731
    (env,) = built()
    assert (envs / f"{env}.complete").is_file(), sorted(p.name for p in envs.iterdir())
    # Another function, the same requirements.txt: it says where it imported the package from.
    other = tmp_path / "usepkg-where"
    shutil.copytree(functions_dir / "usepkg", other)
    (other / "handler.py").write_text("import nearfaas_testpkg\n\n\ndef handle(event, context):\n    return nearfaas_testpkg.__file__\n")
    cluster.deploy("usepkg-where", other, wait=False)
    resp = requests.post(f"{cluster.url}/function/usepkg-where", timeout=300)
    assert resp.status_code == 200, resp.text
    (own,) = built() - {env}  # its own build of its own bundle's wheel, not usepkg's
    assert resp.text == str(envs / own / "nearfaas_testpkg.py")


def test_bad_requests_get_4xx_naming_the_field(cluster, functions_dir):
    url = cluster.url
    missing_image = cluster.http.post(f"{url}/system/functions", json={"service": "img", "image": "oci-archive:/nonexistent.tar"})
    assert missing_image.status_code == 400 and "image" in missing_image.text and "does not exist" in missing_image.text
    outside = cluster.http.post(f"{url}/system/functions", json={"service": "img", "image": "oci:/etc"})
    assert outside.status_code == 400 and "image" in outside.text
    bad_timeout = cluster.http.post(f"{url}/system/functions", json={"service": "t", "handler": str(functions_dir / "echo"),
                                                                 "envVars": {"exec_timeout": "soon"}})
    assert bad_timeout.status_code == 400 and "exec_timeout" in bad_timeout.text
    bad_name = cluster.http.post(f"{url}/system/functions", json={"service": "Not_A_Name", "handler": str(functions_dir / "echo")})
    assert bad_name.status_code == 400 and "Not_A_Name" in bad_name.text
    no_handler = cluster.http.post(f"{url}/system/functions", json={"service": "nohandler", "handler": "/does/not/exist"})
    assert no_handler.status_code == 400 and "handler" in no_handler.text
    assert cluster.http.post(f"{url}/system/functions", data=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert cluster.http.post(f"{url}/system/functions", data=b"{not json").status_code == 415  # not sent as JSON
    assert cluster.http.post(f"{url}/system/functions", json=[1, 2]).status_code == 400
    assert requests.post(f"{url}/function/does-not-exist").status_code == 404
    big = requests.post(f"{url}/function/does-not-exist", data=b"x" * (9 * 1024 * 1024))
    assert big.status_code == 413 and "object reference" in big.text


def test_info_health_openapi_and_metrics(cluster, functions_dir):
    assert requests.get(f"{cluster.url}/healthz").text == "OK"
    info = cluster.http.get(f"{cluster.url}/system/info").json()
    assert info["provider"]["provider"] == "nearfaas"
    doc = cluster.http.get(f"{cluster.url}/system/openapi.json").json()
    assert doc["openapi"].startswith("3.") and "/system/functions" in doc["paths"]
    cluster.deploy("metered", functions_dir / "echo")
    requests.post(f"{cluster.url}/function/metered")
    text = requests.get(f"{cluster.url}/metrics").text
    for name in ('gateway_function_invocation_total{code="200",function_name="metered"}', "gateway_functions_seconds_bucket",
                 'gateway_service_count{function_name="metered"}', "nearfaas_inflight", "nearfaas_cold_start_seconds",
                 "nearfaas_object_bytes_in_total", "nearfaas_objects", "nearfaas_placement_total"):
        assert name in text, name


def test_query_and_path_reach_the_handler_decoded(cluster, functions_dir):
    cluster.deploy("paths", functions_dir / "echo")
    resp = requests.post(f"{cluster.url}/function/paths/some%20dir/file?q=a%26b&plus=%2B1&nl=x%0D%0Ay&empty=")
    out = resp.json()
    assert out["path"] == "/some dir/file"
    assert out["query"] == {"q": "a&b", "plus": "+1", "nl": "x\r\ny", "empty": ""}


def test_bodies_up_to_the_gateway_limit_reach_the_handler(cluster, functions_dir):
    cluster.deploy("bigbody", functions_dir / "echo")
    payload = b"z" * (3 * 1024 * 1024)  # above aiohttp's 1 MiB default, below the 8 MiB limit
    resp = requests.post(f"{cluster.url}/function/bigbody", data=payload)
    assert resp.status_code == 200, resp.text[:200]
    assert len(resp.json()["body"]) == len(payload)


def test_calls_queued_behind_busy_threads_do_not_count_against_exec_timeout(cluster, functions_dir):
    cluster.deploy("queued", functions_dir / "slow", envVars={"exec_timeout": "1s"}, **{"x-nearfaas": {"execution": "threads"}},
                   labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"})
    results = cluster.post_concurrently("/function/queued?sleep=0.6", 12, timeout=30)
    assert [r.status_code for r in results] == [200] * 12, [r.text for r in results if r.status_code != 200]


def test_one_call_at_a_time_per_instance_scales_out_then_queues_at_the_gateway(cluster, functions_dir):
    # execution: main (the default): a busy instance is a reason for another, up to scale.max;
    # past it calls wait in the gateway's queue, never behind a busy worker's backstop clock.
    cluster.deploy("serial", functions_dir / "slow", envVars={"exec_timeout": "3s"},
                   labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "2"})
    results = cluster.post_concurrently("/function/serial?sleep=0.5", 6, timeout=30)
    assert [r.status_code for r in results] == [200] * 6, [r.text for r in results if r.status_code != 200]
    instances = {r.headers["X-Nearfaas-Instance"] for r in results}
    assert len(instances) == 2, instances


def test_update_lets_calls_in_flight_finish(cluster, functions_dir):
    """A call in flight finishes on the old version; every call after the update gets the new
    code and environment."""
    cluster.deploy("draining", functions_dir / "slow")
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(requests.post, f"{cluster.url}/function/draining?sleep=1.0", timeout=30)
        time.sleep(0.3)
        body = {"service": "draining", "lang": "python3-http", "handler": str(functions_dir / "echo"), "envVars": {"GREETING": "v2"}}
        assert cluster.http.put(f"{cluster.url}/system/functions", json=body).status_code == 200
        assert busy.result().status_code == 200, busy.result().text
        assert busy.result().text == "slept 1.0"  # the old code finished the call it had
    status = cluster.wait_warm("draining")
    assert status["envVars"] == {"GREETING": "v2"}
    for _ in range(3):  # no call reaches an old instance
        resp = requests.post(f"{cluster.url}/function/draining?sleep=0", data=b"new")
        assert resp.status_code == 200 and resp.text.startswith("{"), f"an instance of the old version answered: {resp.text!r}"
        answer = resp.json()  # echo's answer, not slow's "slept 0.0"
        assert answer["greeting"] == "v2" and answer["function"] == "draining" and answer["body"] == "new", answer


def test_a_compressed_call_body_reaches_the_handler_as_sent(cluster, functions_dir):
    """Content-Encoding passes through, as OpenFaaS's watchdogs pass it: the worker decompressed
    it, so 20 KB of gzip became a 20 MiB body past invoke_max_body, and bad gzip a 500 (red team)."""
    import gzip

    cluster.deploy("echo-encoded", functions_dir / "echo")
    try:
        bomb = gzip.compress(b"0" * (20 << 20), 9)
        call = requests.post(f"{cluster.url}/function/echo-encoded", data=bomb, headers={"Content-Encoding": "gzip"}, timeout=60)
        assert call.status_code == 200 and len(call.json()["body"]) <= len(bomb), len(call.text)
        bad = requests.post(f"{cluster.url}/function/echo-encoded", data=b"not gzip", headers={"Content-Encoding": "gzip"},
                            timeout=60)
        assert bad.status_code == 200 and bad.json()["body"] == "not gzip", bad.text
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "echo-encoded"}, timeout=30)
