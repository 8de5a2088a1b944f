"""Image-only OpenFaaS functions on a real cluster (issue 23, docs/images.md): images built here,
with umoci, from files of this host (busybox-static; the host's python3 and part of its
stdlib), deployed through the REST API as faas-cli sends them (only ``image:``), called through
/function/NAME. Skipped only when no OCI runtime can run a container on this host (the reason
says what failed); where one can, these run. The fail-closed test (a node without a runtime
refuses image functions) needs no runtime and no image tools: it always runs.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import requests
from conftest import running_cluster

from nearfaas.bench.images import BUSYBOX, build_images
from nearfaas.node.oci import tools

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    found = tools.find(tmp_path_factory.mktemp("oci-probe"))
    if found.refusal() is not None:
        pytest.skip(found.refusal())
    if BUSYBOX is None:
        pytest.skip("busybox is not installed (apt-get install busybox-static)")
    return found


@pytest.fixture(scope="module")
def images(runtime, tmp_path_factory) -> dict[str, str]:
    """Three images in one OCI layout, two of them also as archives: every source kind."""
    return build_images(tmp_path_factory.mktemp("images"))


def hand_made_layout(root: Path, tag: str = "sh") -> str:
    """An OCI image layout written here byte by byte, with no tool (no umoci, skopeo or runtime):
    one gzipped layer holding /app/shout.sh, a config whose fprocess runs it. The ``image:`` that
    names it; a node with image tools would import, unpack and try to run it."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as tar:
        script = (Path(__file__).resolve().parents[2] / "examples" / "images" / "shout.sh").read_bytes()
        for name, data, mode in (("app/", None, 0o755), ("app/shout.sh", script, 0o755)):
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = mode, 0
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    layer = tar_bytes.getvalue()
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
              "config": {"Env": ["PATH=/bin:/usr/bin", "fprocess=sh /app/shout.sh"], "WorkingDir": "/app"}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"),
                "layers": [blob(gzip.compress(layer, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")]}
    entry = blob(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        entry | {"annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return f"oci:{root}:{tag}"


@pytest.fixture
def deploy(cluster):
    names = []

    def go(name: str, image: str, wait: bool = True, **fields) -> requests.Response:
        names.append(name)
        resp = cluster.http.post(f"{cluster.url}/system/functions", json={"service": name, "image": image} | fields, timeout=30)
        if wait and resp.status_code < 300:
            cluster.wait_warm(name)
        return resp

    yield go
    for name in names:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def test_a_classic_shell_function_from_an_oci_layout(cluster, images, deploy):
    started = time.perf_counter()
    assert deploy("img-shout", images["sh"], wait=False).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-shout/sub?x=1", data=b"hello image", headers={"X-Test-Header": "yes"}, timeout=60)
    cold = time.perf_counter() - started
    assert call.status_code == 200, call.text
    assert call.text.startswith("HELLO IMAGE")
    assert "method=POST path=/sub query=x=1 header=yes" in call.text
    print(f"\nclassic shell image: deploy to first answer {cold:.3f}s")


def test_a_classic_python_function_from_a_docker_archive_within_its_memory_limit(cluster, images, deploy):
    assert deploy("img-pyshout", images["py-classic"], limits={"memory": "48Mi"}).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-pyshout", data=b"abc", headers={"Content-Type": "text/x-test"}, timeout=30)
    assert call.status_code == 200, call.text
    assert call.text == "ABC\nmethod=POST content_type=text/x-test\n"
    assert requests.post(f"{cluster.url}/function/img-pyshout?alloc=8", timeout=30).text == "allocated 8 MiB\n"
    over = requests.post(f"{cluster.url}/function/img-pyshout?alloc=200", timeout=30)
    assert over.status_code == 500 and "killed" in over.text, over.text
    assert requests.post(f"{cluster.url}/function/img-pyshout", data=b"again", timeout=30).text.startswith("AGAIN")


def test_an_http_mode_function_reads_its_secret_and_nothing_of_the_host(cluster, images, deploy):
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "img-key", "value": "s3cr3t"}, timeout=10).status_code == 200
    started = time.perf_counter()
    assert deploy("img-http", images["py-http"], secrets=["img-key"], wait=False).status_code == 202
    first = requests.post(f"{cluster.url}/function/img-http/p?secret=img-key", data=b"hi", timeout=60)
    cold = time.perf_counter() - started
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["secret"] == "s3cr3t" and answer["body"] == "HI" and answer["path"] == "/p" and answer["uid"] != 0
    marker = f"/tmp/nearfaas-escape-{uuid.uuid4().hex}"
    wrote = requests.get(f"{cluster.url}/function/img-http?write={marker}", timeout=10).json()
    assert wrote.get("written") and not os.path.exists(marker)  # its /tmp is its own
    assert requests.get(f"{cluster.url}/function/img-http?write=/app/x", timeout=10).json()["write_error"]  # read-only rootfs
    seen = requests.get(f"{cluster.url}/function/img-http?ls=/", timeout=10).json()["ls"]
    assert "work" not in seen and set(seen) <= {"app", "usr", "lib", "lib64", "proc", "dev", "sys", "tmp", "var", "etc"}, seen
    # Another function of the same image does not see img-http's secret.
    assert deploy("img-http-other", images["py-http"]).status_code == 202
    other = requests.get(f"{cluster.url}/function/img-http-other?secret=img-key", timeout=10).json()
    assert "secret" not in other and other["secret_error"]
    warm = []
    for _ in range(50):
        t = time.perf_counter()
        assert requests.post(f"{cluster.url}/function/img-http", data=b"x", timeout=10).status_code == 200
        warm.append(time.perf_counter() - t)
    print(f"\nhttp-mode python image: deploy to first answer {cold:.3f}s, warm p50 {statistics.median(warm) * 1000:.1f} ms")


def test_exec_timeout_ends_a_classic_call(cluster, images, deploy):
    assert deploy("img-slow", images["sh"], envVars={"fprocess": "sleep 5", "exec_timeout": "1s"}).status_code == 202
    t = time.perf_counter()
    call = requests.post(f"{cluster.url}/function/img-slow", timeout=30)
    assert call.status_code == 504 and "exec_timeout" in call.text and time.perf_counter() - t < 4


def test_a_missing_or_broken_image_is_a_400_naming_image_and_the_fix(cluster, images, deploy, tmp_path):
    broken = Path(images["root"]) / "broken.tar"
    broken.write_bytes(b"not a tar at all" * 100)
    for image in (f"oci-archive:{images['root']}/missing.tar", f"docker-archive:{broken}", f"oci:{images['layout']}:no-such-tag"):
        resp = deploy("img-bad", image, wait=False)
        assert resp.status_code == 400, (image, resp.text)
        assert "functions.img-bad.image" in resp.text and "oci-archive:" in resp.text, resp.text
    # A registry reference is accepted (a registry may answer); here none does: the call says so and what to do.
    assert deploy("img-registry", "ghcr.io/openfaas/figlet:latest", wait=False).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-registry", timeout=60)
    assert call.status_code >= 500 and "could not be pulled from its registry" in call.text and "docker-archive:" in call.text, call.text


def test_the_warm_instance_is_reused_and_its_container_goes_with_it(cluster, images, deploy):
    assert deploy("img-reuse", images["sh"]).status_code == 202
    status = cluster.http.get(f"{cluster.url}/system/function/img-reuse", timeout=5).json()
    (instance,) = status["instances"]
    for _ in range(3):
        assert requests.post(f"{cluster.url}/function/img-reuse", data=b"a", timeout=10).headers["X-Nearfaas-Instance"] == instance["id"]
    state_dirs = list(Path(cluster.state_dir).glob("nodes/*/oci/state"))
    listed = [json.loads(subprocess.run([tools.find(Path(cluster.state_dir) / "oci" / "probe").runtime, "--root", str(d), "list",
                                         "--format", "json"], capture_output=True, text=True).stdout or "[]") for d in state_dirs]
    assert any(c["id"] == instance["id"] for group in listed for c in group or [])
    # A second replica is a second container of the same unpacked image.
    assert cluster.http.post(f"{cluster.url}/system/scale-function/img-reuse", json={"replicas": 2}, timeout=10).status_code == 202
    ids = {i["id"] for i in cluster.wait_warm("img-reuse", replicas=2)["instances"]}
    assert len(ids) == 2 and instance["id"] in ids
    answered = {requests.post(f"{cluster.url}/function/img-reuse", data=b"a", timeout=10).headers["X-Nearfaas-Instance"] for _ in range(8)}
    assert answered <= ids
    # Read before the removal: a removed function's log goes with it (node/worker_logs.py).
    log = next(Path(cluster.state_dir).glob("nodes/*/logs/img-reuse.log")).read_text()
    texts = [json.loads(line)["text"] for line in log.splitlines()]  # every line a record (node/worker_logs.py)
    assert sum('"event": "container-ready"' in t for t in texts) >= 2  # the container's part of each cold start, measured
    assert cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "img-reuse"}, timeout=30).status_code == 202
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any((d / i).exists() for d in state_dirs for i in ids):
        time.sleep(0.1)
    assert not any((d / i).exists() for d in state_dirs for i in ids), "a container outlived its instance"


def test_without_a_working_runtime_the_call_names_what_is_missing(tmp_path, monkeypatch):
    """Fail closed: a node whose runtime is missing refuses image functions, naming it and
    `make setup`; it never runs the image some other way (nor imports or unpacks it). Needs no
    runtime: the image is written by hand (hand_made_layout), so this runs on every host."""
    os.chmod(tmp_path, 0o755)
    image = hand_made_layout(tmp_path / "layout")
    monkeypatch.setenv("NEARFAAS_OCI_RUNTIME", "nearfaas-no-such-runtime")  # the nodes inherit it
    with running_cluster(tmp_path / "state") as other:
        resp = other.http.post(f"{other.url}/system/functions", json={"service": "img-none", "image": image}, timeout=30)
        assert resp.status_code == 202, resp.text
        call = requests.post(f"{other.url}/function/img-none", data=b"x", timeout=60)
        assert call.status_code == 503, call.text
        assert "nearfaas-no-such-runtime is not installed" in call.text and "make setup" in call.text, call.text
        imported = [p for p in Path(other.state_dir).rglob("oci/*") if p.name in ("layout", "bundles")]
        assert not imported, f"the image was imported or unpacked with no runtime to run it: {imported}"


def test_a_server_that_dies_at_start_is_a_cold_start_error_with_its_reason(cluster, images, deploy):
    env = {"fprocess": "python3 -c 'raise SystemExit(3)'", "mode": "http", "upstream_url": "http://127.0.0.1:5000"}
    assert deploy("img-dies", images["py-http"], wait=False, envVars=env).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-dies", timeout=60)
    assert call.status_code == 502 and "exited before it listened on port 5000" in call.text, call.text


def test_a_stack_file_of_image_only_functions_deploys_with_nearfaas_deploy(cluster, images, bucket, tmp_path):
    """The issue's acceptance flow: `nearfaas deploy -f stack.yml` with only `image:` per function
    (a classic-watchdog and an of-watchdog HTTP one), called as NAME.openfaas-fn as faas-cli does,
    each reading its secret from /var/openfaas/secrets and its input object through the S3
    endpoint in its environment: from the storage node's own file under near-data placement (no
    link bytes), over the link under compute-only."""
    data = os.urandom(3 << 20)
    cluster.s3().put_object(Bucket=bucket, Key="in/blob.bin", Body=data)
    assert cluster.http.post(f"{cluster.url}/system/secrets", json={"name": "stack-key", "value": "from-stack"}).status_code == 201
    near = {"accelerator": "dscs", "placement": "data", "inputs": ["input"], "buckets": [bucket]}
    stack = tmp_path / "stack.yml"
    stack.write_text(json.dumps({"version": 1.0, "provider": {"name": "openfaas"}, "functions": {
        "stack-shout": {"image": images["sh"]},
        "stack-classic": {"image": images["py-classic"], "environment": {"fprocess": "python3 /app/objsum.py"},
                          "secrets": ["stack-key"], "x-nearfaas": near},
        "stack-http": {"image": images["py-http"], "secrets": ["stack-key"], "x-nearfaas": near}}}))
    env = dict(os.environ, NEARFAAS_STATE=str(cluster.state_dir))
    done = subprocess.run([sys.executable, "-m", "nearfaas.cli", "deploy", "-f", str(stack)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    body = {"input": {"bucket": bucket, "key": "in/blob.bin"}}
    want = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        shout = requests.post(f"{cluster.url}/function/stack-shout.openfaas-fn", data=b"stack", timeout=60)
        assert shout.status_code == 200 and shout.text.startswith("STACK"), shout.text
        for name, query in (("stack-classic", "secret=stack-key"), ("stack-http", "secret=stack-key&object=1")):
            call = requests.post(f"{cluster.url}/function/{name}.openfaas-fn?{query}", json=body, timeout=60)
            assert call.status_code == 200, (name, call.text)
            answer = call.json()
            assert answer["secret"] == "from-stack", answer
            assert (answer.get("object") or {k: answer.get(k) for k in want}) == want, answer
            # near the data: on a storage node that holds it, read from its file, nothing over the link
            assert call.headers["X-Nearfaas-Node"].startswith("storage-"), call.headers
            assert int(call.headers["X-Nearfaas-Bytes-Local"]) == len(data), call.headers
            assert "read=0;" in call.headers["X-Nearfaas-Link"], call.headers["X-Nearfaas-Link"]
            far = requests.post(f"{cluster.url}/function/{name}.openfaas-fn?{query}", json=body, timeout=60,
                                headers={"X-Nearfaas-Policy": "compute-only"})
            assert far.status_code == 200 and (far.json().get("object") or far.json())["sha256"] == want["sha256"], far.text
            assert far.headers["X-Nearfaas-Node"].startswith("compute-"), far.headers
            assert int(far.headers["X-Nearfaas-Bytes-Local"]) == 0 and int(far.headers["X-Nearfaas-Bytes-Remote"]) == len(data)
        assert cluster.http.get(f"{cluster.url}/system/function/stack-http").json()["image"] == images["py-http"]
        # each container's CPU time, from its cgroup (what com.openfaas.scale.type: cpu scales on)
        deadline = time.monotonic() + 5
        while True:
            used = [i["cpu_seconds"] for name in ("stack-classic", "stack-http")
                    for i in cluster.http.get(f"{cluster.url}/system/function/{name}").json()["instances"]]
            if all(isinstance(c, float) and c > 0 for c in used) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert used and all(isinstance(c, float) and c > 0 for c in used), used
    finally:
        for name in ("stack-shout", "stack-classic", "stack-http"):
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def test_an_image_function_reads_no_object_outside_its_buckets(cluster, images, bucket, deploy):
    """Hostile: the instance's endpoint serves only what the function's own key may read, from
    the node's file as from the cluster; the key the container holds opens nothing else."""
    cluster.s3().put_object(Bucket=bucket, Key="secret.bin", Body=b"not yours")
    x = {"accelerator": "dscs", "placement": "data", "inputs": ["input"], "buckets": ["img-nothing-here"]}
    assert deploy("img-nosy", images["py-classic"], envVars={"fprocess": "python3 /app/objsum.py"}, **{"x-nearfaas": x}).status_code == 202
    for policy in ("near-data", "compute-only"):
        call = requests.post(f"{cluster.url}/function/img-nosy", json={"input": {"bucket": bucket, "key": "secret.bin"}},
                             headers={"X-Nearfaas-Policy": policy}, timeout=60)
        assert call.status_code == 500 and "HTTP 403" in call.text and "not yours" not in call.text, (policy, call.text)
        assert int(call.headers.get("X-Nearfaas-Bytes-Local", 0)) == 0, call.headers


def test_a_chain_of_image_functions_passes_its_intermediate_on_the_storage_node(cluster, images, bucket, deploy):
    """Chains work for image functions: a stage's answer becomes its output object (it has no
    context.output), written onto the node that ran it, where the next stage reads it locally."""
    data = os.urandom(1 << 20)
    cluster.s3().put_object(Bucket=bucket, Key="chain/in.bin", Body=data)
    near = {"accelerator": "dscs", "placement": "data", "inputs": ["input"], "buckets": ["*"]}
    env = {"fprocess": "python3 /app/objsum.py"}
    assert deploy("img-stage-2", images["py-classic"], envVars=env, **{"x-nearfaas": near}).status_code == 202
    assert deploy("img-stage-1", images["py-classic"], envVars=env, **{"x-nearfaas": near | {"chain": ["img-stage-2"]}}).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-stage-1", json={"input": {"bucket": bucket, "key": "chain/in.bin"}}, timeout=60)
    assert call.status_code == 200, call.text
    stages = json.loads(call.headers["X-Nearfaas-Chain"])
    first = json.dumps({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode()  # stage 1's answer: stage 2's input
    assert call.json() == {"bytes": len(first), "sha256": hashlib.sha256(first).hexdigest()}, (call.text, stages)
    assert stages[0]["node"] == stages[1]["node"] and stages[0]["node"].startswith("storage-"), stages
    assert stages[0]["output"] == "local", stages
    assert "read=0;" in call.headers["X-Nearfaas-Link"], call.headers["X-Nearfaas-Link"]


def test_an_image_function_scaled_to_zero_cold_starts_its_container_on_a_call(cluster, images, deploy):
    """OpenFaaS's idler labels on an image function: at zero after the idle duration, and the
    next call creates a container again, its cold start measured in X-Nearfaas-Timing."""
    labels = {"com.openfaas.scale.zero": "true", "com.openfaas.scale.zero-duration": "2s"}
    assert deploy("img-zero", images["py-http"], labels=labels).status_code == 202
    status = lambda: cluster.http.get(f"{cluster.url}/system/function/img-zero").json()  # noqa: E731
    idle = time.monotonic()
    while (status()["replicas"] or status()["availableReplicas"]) and time.monotonic() - idle < 20:
        time.sleep(0.2)
    assert status()["replicas"] == 0 and status()["availableReplicas"] == 0, status()
    call = requests.post(f"{cluster.url}/function/img-zero", data=b"wake", timeout=60)
    assert call.status_code == 200 and call.json()["body"] == "WAKE", call.text
    assert call.headers["X-Nearfaas-Start"] == "cold", call.headers
    cold = float(dict(f.split("=") for f in call.headers["X-Nearfaas-Timing"].split(";")[1:])["cold_start"])
    print(f"\nimage function from zero: container cold start {cold * 1000:.0f} ms (measured)")
    assert cold > 0.01  # a container was made: not a warm instance


@pytest.fixture
def registry(images, tmp_path):
    """A real registry (Debian's docker-registry, the CNCF distribution server) on loopback,
    holding the HTTP-mode image as 127.0.0.1:PORT/fn/py:http; skipped only where not installed."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("docker-registry is not installed (make setup installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(json.dumps({"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(tmp_path / "blobs")}},
                                  "http": {"addr": f"127.0.0.1:{port}"}, "log": {"level": "error"}}))
    server = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the registry did not start"
                time.sleep(0.05)
        ref = f"127.0.0.1:{port}/fn/py:http"
        subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{images['layout']}:py-http",
                        f"docker://{ref}"], check=True, capture_output=True, timeout=120)
        yield ref
    finally:
        server.kill()
        server.wait()


def test_an_image_is_pulled_from_a_registry_once_and_run(cluster, registry, deploy):
    """`image:` as faas-cli sends it after `faas-cli push`: a registry reference, pulled by the
    node that starts it (plain HTTP: the registry is on loopback), then served from its store."""
    assert deploy("img-pulled", registry).status_code == 202
    call = requests.post(f"{cluster.url}/function/img-pulled", data=b"from a registry", timeout=60)
    assert call.status_code == 200 and call.json()["body"] == "FROM A REGISTRY", call.text
    assert cluster.http.get(f"{cluster.url}/system/function/img-pulled").json()["image"] == registry
    missing = deploy("img-unpushed", registry.replace("py:http", "py:nope"), wait=False)
    assert missing.status_code == 202  # a reference is checked when a node pulls it
    failed = requests.post(f"{cluster.url}/function/img-unpushed", timeout=60)
    assert failed.status_code == 502 and "py:nope" in failed.text, failed.text
    assert "could not be pulled from its registry" in failed.text and "manifest unknown" in failed.text, failed.text


def test_an_image_path_outside_handler_roots_is_refused(cluster, runtime, tmp_path):
    """The REST API reads no image from a path it is merely told (as for handler folders)."""
    outside = Path("/var/tmp") / f"nearfaas-outside-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(["umoci", "init", "--layout", str(outside)], check=True, capture_output=True)
        subprocess.run(["umoci", "new", "--image", f"{outside}:x"], check=True, capture_output=True)
        refused = cluster.http.post(f"{cluster.url}/system/functions", json={"service": "img-outside", "image": f"oci:{outside}:x"})
        assert refused.status_code == 400 and "handler_roots" in refused.text and "image" in refused.text, refused.text
    finally:
        shutil.rmtree(outside, ignore_errors=True)
