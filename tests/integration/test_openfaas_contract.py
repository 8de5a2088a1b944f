"""The OpenFaaS REST contract as faas-cli and the OpenFaaS gateway's clients drive it (issue 23):
namespaces (one, ``openfaas-fn``), ``/function/NAME.NAMESPACE``, FunctionStatus fields as Go's
``omitempty`` marshals them, ``faas-cli deploy``'s PUT-then-POST, secrets with ``rawValue``, and
the headers a function's answer carries. Real cluster, plain HTTP."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from conftest import running_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def echo(cluster, functions_dir):
    resp = cluster.deploy("contract-echo", functions_dir / "echo", envProcess="python3 index.py",
                          labels={"team": "web"}, readOnlyRootFilesystem=True)
    assert resp.status_code == 202, resp.text
    return "contract-echo"


def test_one_namespace_and_function_urls_that_name_it(cluster, echo):
    http = cluster.http
    assert http.get(f"{cluster.url}/system/namespaces").json() == ["openfaas-fn"]
    called = requests.post(f"{cluster.url}/function/{echo}.openfaas-fn", data=b"hi", timeout=30)
    assert called.status_code == 200 and called.json()["body"] == "hi"
    start = int(called.headers["X-Start-Time"])  # unix nanoseconds, as OpenFaaS's gateway sends it
    assert abs(start / 1e9 - time.time()) < 60 and float(called.headers["X-Duration-Seconds"]) > 0
    assert requests.post(f"{cluster.url}/function/{echo}.elsewhere", timeout=10).status_code == 404
    assert requests.post(f"{cluster.url}/async-function/{echo}.openfaas-fn", timeout=10).status_code == 202
    assert requests.post(f"{cluster.url}/async-function/{echo}.elsewhere", timeout=10).status_code == 404
    for path in ("/system/functions?namespace=elsewhere", f"/system/function/{echo}?namespace=elsewhere",
                 "/system/secrets?namespace=elsewhere", f"/system/logs?name={echo}&namespace=elsewhere"):
        refused = http.get(f"{cluster.url}{path}")
        assert refused.status_code == 404 and "openfaas-fn" in refused.text, path
    assert http.get(f"{cluster.url}/system/functions?namespace=openfaas-fn").status_code == 200


def test_function_status_marshals_like_faas_provider(cluster, echo):
    status = cluster.http.get(f"{cluster.url}/system/function/{echo}?namespace=openfaas-fn").json()
    assert status["name"] == echo and status["namespace"] == "openfaas-fn" and status["image"] == ""
    assert status["labels"] == {"team": "web", "faas_function": echo}
    assert status["envProcess"] == "python3 index.py" and status["readOnlyRootFilesystem"] is True
    for omitted in ("envVars", "constraints", "secrets", "limits", "requests"):
        assert omitted not in status, omitted  # Go's omitempty: absent, not null or {}
    assert status["annotations"] == {}  # but annotations: clients index it unchecked, so it is always there
    assert isinstance(status["invocationCount"], int | float) and status["replicas"] >= 1
    listed = {f["name"]: f for f in cluster.http.get(f"{cluster.url}/system/functions").json()}
    assert listed[echo]["labels"]["faas_function"] == echo


def test_faas_cli_deploy_puts_first_and_posts_on_404(cluster):
    """faas-cli sends every function with an image and tries PUT before POST."""
    body = {"service": "contract-never-deployed", "image": "ghcr.io/example/fn:latest", "namespace": "openfaas-fn"}
    put = cluster.http.put(f"{cluster.url}/system/functions", json=body)
    assert put.status_code == 404, put.text
    assert cluster.http.post(f"{cluster.url}/system/functions", json={**body, "namespace": "elsewhere"}).status_code == 404
    assert cluster.http.delete(f"{cluster.url}/system/functions",
                               json={"functionName": "x", "namespace": "elsewhere"}).status_code == 404


def test_secrets_take_raw_bytes_and_delete_answers_200(cluster, functions_dir):
    http = cluster.http
    created = http.post(f"{cluster.url}/system/secrets", json={"name": "contract-raw", "rawValue": base64.b64encode(b"bytes!").decode()})
    assert created.status_code == 201
    cluster.deploy("contract-secret", functions_dir / "secretreader", secrets=["contract-raw"])
    # secretreader reads "api-key": give it that name too, from raw bytes
    http.post(f"{cluster.url}/system/secrets", json={"name": "api-key", "rawValue": base64.b64encode(b"raw-value").decode()})
    cluster.deploy("contract-secret2", functions_dir / "secretreader", secrets=["api-key"])
    assert requests.post(f"{cluster.url}/function/contract-secret2", timeout=30).text == "raw-value"
    assert http.post(f"{cluster.url}/system/secrets", json={"name": "contract-bad", "rawValue": "%%%"}).status_code == 400
    assert http.post(f"{cluster.url}/system/secrets", json={"name": "contract-ns", "value": "v", "namespace": "x"}).status_code == 404
    listed = http.get(f"{cluster.url}/system/secrets").json()
    assert {"name": "contract-raw", "namespace": "openfaas-fn"} in listed
    assert all("value" not in s and "rawValue" not in s for s in listed)
    assert http.delete(f"{cluster.url}/system/secrets", json={"name": "contract-raw"}).status_code == 200
    assert http.delete(f"{cluster.url}/system/secrets", json={"name": "contract-raw"}).status_code == 404


def test_a_protected_function_is_protected_under_its_namespaced_name_too(cluster, functions_dir):
    cluster.deploy("contract-private", functions_dir / "echo", **{"x-nearfaas": {"auth": True}})
    for path in ("/function/contract-private", "/function/contract-private.openfaas-fn",
                 "/async-function/contract-private.openfaas-fn"):
        assert requests.post(f"{cluster.url}{path}", timeout=10).status_code == 401, path
    assert cluster.http.post(f"{cluster.url}/function/contract-private.openfaas-fn", timeout=30).status_code == 200


def test_system_info_names_the_release_and_commit(cluster):
    info = cluster.http.get(f"{cluster.url}/system/info").json()
    assert info["version"]["release"] and info["provider"]["provider"] == "nearfaas"
    assert re.fullmatch(r"[0-9a-f]{40}", info["version"]["sha"]) or info["version"]["sha"] == "unknown"


def _status(cluster, name: str) -> dict:
    return cluster.http.get(f"{cluster.url}/system/function/{name}").json()


def _load_until_replicas(cluster, name: str, call_once, wanted: int, callers: int = 2, limit_s: float = 30.0) -> tuple[float, dict]:
    """``callers`` threads run ``call_once`` in a loop until the function's ``replicas`` reaches
    ``wanted`` (or ``limit_s`` passes): the seconds that took and its status then; load stops
    on return."""
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            call_once()

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    began = time.monotonic()
    for t in threads:
        t.start()
    try:
        while (status := _status(cluster, name))["replicas"] < wanted and time.monotonic() - began < limit_s:
            time.sleep(0.2)
        return time.monotonic() - began, status
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_replicas_follow_request_rate_up_to_max_and_back_to_min(cluster, functions_dir):
    """OpenFaaS's autoscaling under 10 calls/s from 2 callers, com.openfaas.scale.max 2."""
    name = "contract-scaled"
    cluster.deploy(name, functions_dir / "echo", labels={"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "2"})

    def call_once():
        started = time.monotonic()
        requests.post(f"{cluster.url}/function/{name}", data=b"x", timeout=30)
        time.sleep(max(0.0, 0.2 - (time.monotonic() - started)))  # 5 calls/s each

    up, _ = _load_until_replicas(cluster, name, call_once, 2)
    print(f"replicas reached scale.max=2 after {up:.1f} s of load")
    assert _status(cluster, name)["replicas"] == 2 and up < 30
    cluster.wait_warm(name, replicas=2)
    stopped = time.monotonic()
    while _status(cluster, name)["replicas"] > 1 and time.monotonic() - stopped < 40:
        time.sleep(0.5)
    print(f"back to scale.min=1 {time.monotonic() - stopped:.1f} s after the load stopped")
    assert _status(cluster, name)["replicas"] == 1
    metrics = requests.get(f"{cluster.url}/metrics", timeout=10).text
    assert re.search(rf'nearfaas_autoscale_decisions_total{{direction="up",function_name="{name}"}} [1-9]', metrics)
    assert re.search(rf'nearfaas_autoscale_decisions_total{{direction="down",function_name="{name}"}} [1-9]', metrics)
    refused = cluster.deploy("contract-mem", functions_dir / "echo", wait=False, labels={"com.openfaas.scale.type": "memory"})
    assert refused.status_code == 400 and "com.openfaas.scale.type" in refused.text


def test_cpu_type_scales_on_the_cpu_its_instances_use(cluster):
    """com.openfaas.scale.type: cpu, target 300 m: two callers keep a one-at-a-time worker's core
    busy (about 1000 m), so replicas grow past 1; the CPU comes from the instances' cgroups."""
    name = "contract-cpu"
    functions = Path(__file__).resolve().parent / "functions"
    labels = {"com.openfaas.scale.type": "cpu", "com.openfaas.scale.target": "300", "com.openfaas.scale.target-proportion": "1",
              "com.openfaas.scale.min": "1", "com.openfaas.scale.max": "3"}
    assert cluster.deploy(name, functions / "spin", labels=labels).status_code == 202
    up, status = _load_until_replicas(cluster, name, lambda: requests.post(f"{cluster.url}/function/{name}?ms=100", timeout=30), 2)
    used = [i["cpu_seconds"] for i in status["instances"]]
    print(f"cpu-scaled: replicas {_status(cluster, name)['replicas']} after {up:.1f} s; instances' CPU seconds {used}")
    assert _status(cluster, name)["replicas"] >= 2 and up < 30
    assert any(isinstance(c, float) and c > 0.2 for c in used), used  # measured from the cgroups, not made up
    cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def test_scale_to_zero_after_the_idle_duration_and_back_on_a_call(cluster, functions_dir):
    name = "contract-zero"
    cluster.deploy(name, functions_dir / "echo", labels={"com.openfaas.scale.zero": "true",
                                                          "com.openfaas.scale.zero-duration": "2s"})
    idle = time.monotonic()
    while (_status(cluster, name)["availableReplicas"] or _status(cluster, name)["replicas"]) and time.monotonic() - idle < 20:
        time.sleep(0.2)
    print(f"scaled to zero {time.monotonic() - idle:.1f} s after deploy (zero-duration 2s)")
    assert _status(cluster, name)["replicas"] == 0 and _status(cluster, name)["availableReplicas"] == 0
    called = requests.post(f"{cluster.url}/function/{name}", data=b"wake", timeout=60)
    assert called.status_code == 200 and called.headers["X-Nearfaas-Start"] == "cold"
    print(f"cold start from zero: {called.headers['X-Nearfaas-Timing']}")


def test_repeated_response_headers_pass_through(cluster, functions_dir):
    cluster.deploy("contract-cookies", functions_dir / "cookies")
    called = requests.post(f"{cluster.url}/function/contract-cookies", timeout=30)
    assert called.status_code == 200
    assert called.raw.headers.getlist("Set-Cookie") == ["session=abc; Path=/", "theme=dark; Path=/"]


def test_a_python_function_reads_its_secret_at_the_openfaas_path(cluster, functions_dir):
    http = cluster.http
    http.post(f"{cluster.url}/system/secrets", json={"name": "api-key", "rawValue": base64.b64encode(b"raw-value").decode()})
    cluster.deploy("contract-ofsecret", functions_dir / "ofsecret", secrets=["api-key"])
    assert requests.post(f"{cluster.url}/function/contract-ofsecret", timeout=30).text == "raw-value"
    # a function not given the secret finds no such file (and the host's /var/openfaas stays empty)
    cluster.deploy("contract-nosecret", functions_dir / "ofsecret")
    denied = requests.post(f"{cluster.url}/function/contract-nosecret", timeout=30)
    assert denied.status_code == 502 and "No such file" in denied.text
    assert not any(Path("/var/openfaas").glob("**/api-key"))


@pytest.fixture(scope="module")
def namespaced(tmp_path_factory):
    """A cluster with two function namespaces (gateway.namespaces): openfaas-fn, the default, and team-a."""
    with running_cluster(tmp_path_factory.mktemp("ns") / "state", namespaces=["openfaas-fn", "team-a"]) as c:
        yield c


def test_functions_secrets_and_logs_are_scoped_by_namespace(namespaced, functions_dir):
    c, http = namespaced, namespaced.http
    assert http.get(f"{c.url}/system/namespaces").json() == ["openfaas-fn", "team-a"]
    for namespace, greeting, secret in (("openfaas-fn", "default", "default-secret"), ("team-a", "team", "team-secret")):
        assert http.post(f"{c.url}/system/secrets", json={"name": "api-key", "value": secret, "namespace": namespace}).status_code == 201
        for name, folder in (("nsecho", "echo"), ("nssecret", "secretreader")):
            resp = c.deploy(name, functions_dir / folder, wait=False, namespace=namespace, envVars={"GREETING": greeting},
                            secrets=["api-key"])
            assert resp.status_code == 202, resp.text
            c.wait_warm(f"{name}.{namespace}")
    listed = {(f["name"], f["namespace"]) for f in http.get(f"{c.url}/system/functions").json()}
    assert listed == {("nsecho", "openfaas-fn"), ("nssecret", "openfaas-fn")}
    team = http.get(f"{c.url}/system/functions?namespace=team-a").json()
    assert {(f["name"], f["namespace"]) for f in team} == {("nsecho", "team-a"), ("nssecret", "team-a")}
    assert requests.post(f"{c.url}/function/nsecho", timeout=30).json()["greeting"] == "default"
    assert requests.post(f"{c.url}/function/nsecho.openfaas-fn", timeout=30).json()["greeting"] == "default"
    assert requests.post(f"{c.url}/function/nsecho.team-a", timeout=30).json()["greeting"] == "team"
    assert requests.post(f"{c.url}/function/nssecret.team-a", timeout=30).text == "team-secret"
    assert requests.post(f"{c.url}/function/nssecret", timeout=30).text == "default-secret"
    assert {s["namespace"] for s in http.get(f"{c.url}/system/secrets?namespace=team-a").json()} == {"team-a"}
    logs = http.get(f"{c.url}/system/logs", params={"name": "nsecho", "namespace": "team-a"}).text.splitlines()
    assert logs and all('"namespace": "team-a"' in line and '"name": "nsecho"' in line for line in logs)
    assert http.get(f"{c.url}/system/function/nsecho?namespace=team-a").json()["namespace"] == "team-a"
    # A deployment in one namespace never touches the other's function of the same name
    assert http.delete(f"{c.url}/system/functions", json={"functionName": "nsecho", "namespace": "team-a"}).status_code == 202
    assert requests.post(f"{c.url}/function/nsecho.team-a", timeout=30).status_code == 404
    assert requests.post(f"{c.url}/function/nsecho", timeout=30).json()["greeting"] == "default"
    assert http.post(f"{c.url}/system/functions?namespace=team-b", json={"service": "x"}).status_code == 404


def test_nearfaas_deploy_sends_a_stack_functions_namespace(namespaced, functions_dir, tmp_path):
    stack = tmp_path / "stack.yml"
    stack.write_text(json.dumps({"version": 1.0, "provider": {"name": "openfaas"}, "functions": {
        "clins": {"lang": "python3-http", "handler": str(functions_dir / "echo"), "namespace": "team-a"}}}))
    env = dict(os.environ, NEARFAAS_STATE=str(namespaced.state_dir))
    done = subprocess.run([sys.executable, "-m", "nearfaas.cli", "deploy", "-f", str(stack)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    namespaced.wait_warm("clins.team-a")
    assert requests.post(f"{namespaced.url}/function/clins.team-a", data=b"ns", timeout=30).json()["body"] == "ns"
    assert requests.post(f"{namespaced.url}/function/clins", timeout=30).status_code == 404


def test_a_namespaced_function_uses_its_declared_bucket_with_its_own_key(namespaced, functions_dir):
    """Issue 39, finding 8: a team-a function's key (nff.<fn>.team-a.<uid>) was InvalidAccessKeyId."""
    c = namespaced
    c.s3().create_bucket(Bucket="ns-data")
    c.s3().put_object(Bucket="ns-data", Key="in.txt", Body=b"team data")
    resp = c.deploy("nsboto", functions_dir / "upper_boto", wait=False, namespace="team-a", **{"x-nearfaas": {"buckets": ["ns-data"]}})
    assert resp.status_code == 202, resp.text
    c.wait_warm("nsboto.team-a")
    got = requests.post(f"{c.url}/function/nsboto.team-a", json={"input": {"bucket": "ns-data", "key": "in.txt"}}, timeout=60)
    assert got.status_code == 200, got.text
    assert c.s3().get_object(Bucket="ns-data", Key="in.txt.upper")["Body"].read() == b"TEAM DATA"
