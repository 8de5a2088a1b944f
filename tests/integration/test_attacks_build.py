"""Issue 39 finding 3: a deployer got root on the node through its requirements build.

The bundle's requirements.txt names ``./evil``, a project whose PEP 517 backend lives in the
bundle itself (``build-backend = "backend"``, ``backend-path = ["."]``). pip runs that backend
while it builds the wheel, at the first call. The node used to run pip as itself: the backend
ran as uid 0, outside the jail, and could read ``cluster.json`` (every key of the cluster) and
write anywhere. Now (node/build.py) pip runs in the function's jail as its uid: the backend
records what it could do into the wheel it builds (module ``evil_report``), the function
returns that record, and the test checks it ran as the function's uid, found ``cluster.json``
hidden, and could not write into the state directory.
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root")]

BACKEND = '''"""A PEP 517 backend that, when run, records what it may do: its uid, reading the cluster's
keys, writing into the state directory. It builds a wheel holding that record."""
import base64, hashlib, json, os, zipfile

NAME, VERSION = "evil_report", "1.0"


def _attempt(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return type(exc).__name__


def _probe():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "target.json")) as f:
        state = json.load(f)["state"]

    def read():
        with open(os.path.join(state, "cluster.json")) as f:
            f.read()

    def write():
        with open(os.path.join(state, "pwned-by-build"), "w") as f:
            f.write("root on the node")

    return {"uid": os.getuid(), "read_cluster_json": _attempt(read), "write_state": _attempt(write)}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = f"{NAME}-{VERSION}.dist-info"
    files = {"evil_report.py": f"REPORT = {_probe()!r}\\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: evil\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\\n".join(record + [f"{info}/RECORD,,"]) + "\\n"
    wheel = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel
'''

PYPROJECT = '''[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "evil_report"
version = "1.0"
'''

HANDLER = '''import json
import os

import evil_report


def handle(event, context):
    return json.dumps({"build": evil_report.REPORT, "uid": os.getuid()})
'''


UNREACHABLE = "def handle(event, context):\n    return 'unreachable'\n"


def _bundle(tmp_path, folder: str, project: str, backend: str, handler: str = HANDLER, target: dict | None = None):
    """A bundle whose requirements.txt names ``./<project>``, a local project whose PEP 517
    backend (``backend``) lives in the bundle: pip runs it while it builds."""
    bundle = tmp_path / folder
    (bundle / project).mkdir(parents=True)
    (bundle / "handler.py").write_text(handler)
    (bundle / "requirements.txt").write_text(f"./{project}\n")
    (bundle / project / "pyproject.toml").write_text(PYPROJECT if project == "evil" else PYPROJECT.replace("evil_report", project))
    (bundle / project / "backend.py").write_text(backend)
    if target is not None:
        (bundle / project / "target.json").write_text(json.dumps(target))
    return bundle


def test_a_build_backend_runs_as_the_function_and_sees_nothing_of_the_node(cluster, scratch, tmp_path):
    state = cluster.state_dir.resolve()
    bundle = _bundle(tmp_path, "evilbuild", "evil", BACKEND, target={"state": str(state)})

    assert scratch("build-attack", bundle, wait=False).status_code < 300
    resp = cluster.http.post(f"{cluster.url}/function/build-attack", data=b"", timeout=300)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    build = answer["build"]
    assert build["uid"] != 0 and build["uid"] == answer["uid"], answer  # the function's uid, not the node's
    assert build["read_cluster_json"] != "ok", answer   # the state directory is hidden from the build
    assert build["write_state"] != "ok", answer
    assert not (state / "pwned-by-build").exists()


def test_a_failing_jailed_build_is_pips_own_clear_error(cluster, scratch, tmp_path):
    """The jail keeps today's failure: the call is a 502 naming the file, with pip's tail."""
    refusing = ("def get_requires_for_build_wheel(config_settings=None):\n    return []\n\n\n"
                "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
                "    raise RuntimeError('the backend refuses to build')\n")
    bundle = _bundle(tmp_path, "brokenbuild", "broken", refusing, handler=UNREACHABLE)
    assert scratch("build-broken", bundle, wait=False).status_code < 300
    resp = cluster.http.post(f"{cluster.url}/function/build-broken", data=b"", timeout=300)
    assert resp.status_code == 502, resp.text
    assert "pip could not install" in resp.text and "fix requirements.txt" in resp.text, resp.text


SLOW_BACKEND = '''import time


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    time.sleep(600)  # a build that never ends on its own (PIP_TIMEOUT_S is 600 s)
'''


def _builds_of(state) -> list[int]:
    """Pids of requirements builds (node/build.py's jailed pip) of the cluster at ``state``."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"nearfaas.node.build" in argv and any(str(state).encode() in a for a in argv):
            pids.append(int(pid))
    return pids


def test_removing_a_function_stops_its_requirements_build(cluster, scratch, tmp_path):
    # Red team round 2 (side note): a build whose backend never ends ran on for its 600 s after
    # its function was removed, holding its cgroups, a pip and the uid's CPU.
    import threading
    import time

    bundle = _bundle(tmp_path, "slowbuild", "slow_build", SLOW_BACKEND, handler=UNREACHABLE)
    state = cluster.state_dir.resolve()
    assert scratch("build-forever", bundle, wait=False).status_code < 300
    answers = []
    caller = threading.Thread(target=lambda: answers.append(
        cluster.http.post(f"{cluster.url}/function/build-forever", data=b"", timeout=120)), daemon=True)
    caller.start()
    deadline = time.monotonic() + 60
    while not _builds_of(state):  # the cold start has begun the build
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.1)
    assert cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "build-forever"}, timeout=30).status_code < 300
    deadline = time.monotonic() + 20
    while _builds_of(state):
        assert time.monotonic() < deadline, f"the build of a removed function still runs: {_builds_of(state)}"
        time.sleep(0.1)
    caller.join(60)
    assert answers and answers[0].status_code >= 400, answers  # the call in flight is told, not left hanging


NET_BACKEND = BACKEND.replace('''    return {"uid": os.getuid(), "read_cluster_json": _attempt(read), "write_state": _attempt(write)}''', '''    import socket

    with open(os.path.join(here, "target.json")) as f:
        ports = json.load(f)["ports"]

    def direct(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return "connected"
        except OSError as exc:
            return type(exc).__name__

    def through_proxy(target):
        proxy = os.environ.get("HTTPS_PROXY", "").rpartition(":")[2]
        if not proxy:
            return "no proxy"
        with socket.create_connection(("127.0.0.1", int(proxy)), timeout=10) as s:
            s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
            return s.recv(200).split(b"\\r\\n")[0].decode()

    return {"uid": os.getuid(), "direct": {str(p): direct(p) for p in ports},
            "proxied": {f"127.0.0.1:{p}": through_proxy(f"127.0.0.1:{p}") for p in ports}
                       | {"example.com:443": through_proxy("example.com:443")}}''')


def test_a_build_reaches_no_node_port_and_nothing_but_the_package_index(cluster, scratch, tmp_path):
    # Build item 2 of issue 39: a build's network is limited to the index the operator
    # configured. Before node/build_net.py the backend above connected to the gateway and every
    # node port directly from inside the build (it had the host's network).
    ports = [cluster.layout["gateway_port"], *(n["port"] for n in cluster.layout["nodes"])]
    bundle = _bundle(tmp_path, "netbuild", "evil", NET_BACKEND, target={"state": str(cluster.state_dir.resolve()), "ports": ports})
    assert scratch("build-net", bundle, wait=False).status_code < 300
    resp = cluster.http.post(f"{cluster.url}/function/build-net", data=b"", timeout=300)
    assert resp.status_code == 200, resp.text
    build = resp.json()["build"]
    assert all(v != "connected" for v in build["direct"].values()), build  # no route out of its namespace
    assert all(v.startswith("HTTP/1.1 403") for v in build["proxied"].values()), build  # the proxy goes to the index only
