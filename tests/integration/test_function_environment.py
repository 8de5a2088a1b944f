"""A function's environment (issue 21, item 3): a private /tmp per instance (empty at start,
gone when the instance retires, bounded by x-nearfaas.tmp_size in the jail), the gateway URL and
its own name and namespace in its environment, and requirements (requirements.txt or the file
x-nearfaas.requirements names) installed into an env of its own that shadows the runtime's
packages without pip's conflict noise in its log.

A real cluster per isolation mode (jailed, the default, and `isolation: off`), then a
WorkerPools driven directly for what a cluster cannot show cheaply (crashes, failed starts, the
sweep at node start, both ways a worker starts). Every folder lies under /var/tmp, not /tmp: a
jailed worker's /tmp would otherwise hold the empty folders leading to the state directory's
stand-in (docs/isolation.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import requests
from conftest import start_cluster

from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.cluster import launcher
from nearfaas.node.pool import PoolError, WorkerPools

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="a jailed worker (the default) needs a node agent running as root")]

def _mount_stubs() -> set[str]:
    """Folders a jailed /tmp holds only as the way to a path the jail shows: this checkout or its
    Python, when they lie under /tmp (CI clones into a temporary folder)."""
    paths = (Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.executable).resolve())
    return {p.relative_to("/tmp").parts[0] for p in paths if p.is_relative_to("/tmp")}


STUBS = _mount_stubs()


def _own(listing: list[str]) -> list[str]:
    return [name for name in listing if name not in STUBS]


PINNED_PILLOW = "10.4.0"  # older than the runtime's (pyproject pins pillow==13.0.0); cp311 manylinux wheels exist
PINNED_SIX = "1.16.0"     # the runtime's is 1.17.0, and a generic worker has imported six already (botocore, dateutil)

PROBE = '''"""Reports its /tmp and environment; writes, fills, looks and calls as its JSON body asks."""
import errno
import json
import os
import tempfile
import urllib.request

NAMES = ("OPENFAAS_URL", "NEARFAAS_GATEWAY_URL", "NEARFAAS_NAMESPACE", "NEARFAAS_FUNCTION", "TMPDIR", "TMP", "TEMP", "HOME")


def _fill(path, size):
    try:
        with open(path, "wb") as f:
            for _ in range(size // 65536):
                f.write(b"x" * 65536)
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    finally:
        if os.path.exists(path):
            os.unlink(path)


def handle(event, context):
    body = event.json() or {}
    tmp = tempfile.gettempdir()
    answer = {"tmp": tmp, "listing": sorted(os.listdir(tmp)), "env": {k: os.environ.get(k) for k in NAMES},
              "seen": {p: os.path.exists(p) for p in body.get("look", [])}}
    if body.get("write"):
        with open(os.path.join(tmp, body["write"]), "w") as f:
            f.write("mine")
        answer["wrote"] = os.path.join(tmp, body["write"])
    if body.get("fill"):
        answer["fill"] = _fill(os.path.join(tmp, "fill.bin"), body["fill"])
        answer["fill_shm"] = _fill("/dev/shm/fill.bin", body["fill"])
    if body.get("call"):
        url = os.environ["OPENFAAS_URL"].rstrip("/") + "/function/" + body["call"]
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=20) as resp:
            answer["called"] = json.loads(resp.read())
    return answer
'''

VERSIONS = '''import PIL
import six


def handle(event, context):
    return {"pil": PIL.__version__, "pil_file": PIL.__file__, "six": six.__version__, "six_file": six.__file__}
'''

PIL_ONLY = '''import PIL


def handle(event, context):
    return {"pil": PIL.__version__, "pil_file": PIL.__file__}
'''


@pytest.fixture(scope="module")
def base():
    """Everything of this module under /var/tmp (see the module docstring), world-traversable."""
    root = Path(tempfile.mkdtemp(prefix="nearfaas-fenv-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _handler(base: Path, name: str, code: str) -> Path:
    """A handler folder a function's uid can read."""
    folder = base / "handlers" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "handler.py").write_text(code)
    for path in (folder.parent, folder, folder / "handler.py"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _files(folder: Path, files: dict[str, str]) -> None:
    for filename, text in files.items():
        (folder / filename).write_text(text)
        (folder / filename).chmod(0o644)


@pytest.fixture(scope="module", params=["jailed", "unjailed"])
def env_cluster(request, base):
    """A cluster per isolation mode; one at a time (pytest finishes one param before the next)."""
    state = base / f"state-{request.param}"
    cluster = start_cluster(state, isolation=request.param == "jailed")
    cluster.jailed = request.param == "jailed"
    yield cluster
    launcher.down(state)
    assert launcher.processes_of(state) == []


def _call(cluster, name: str, body: dict | None = None, timeout: float = 120) -> requests.Response:
    return requests.post(f"{cluster.url}/function/{name}", json=body or {}, timeout=timeout)


def _answer(cluster, name: str, body: dict | None = None) -> dict:
    resp = _call(cluster, name, body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def _remove(cluster, *names: str) -> None:
    for name in names:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


# -- /tmp ------------------------------------------------------------------------------------------

def test_functions_do_not_see_each_others_tmp(env_cluster, base):
    cluster = env_cluster
    probe = _handler(base, "probe", PROBE)
    for name in ("fenv-a", "fenv-b"):
        assert cluster.deploy(name, probe).status_code < 300
    secret = f"a-only-{uuid.uuid4().hex[:8]}"
    a = _answer(cluster, "fenv-a", {"write": secret})
    assert secret in _answer(cluster, "fenv-a")["listing"]  # the same instance keeps it between calls
    b = _answer(cluster, "fenv-b", {"look": [a["wrote"]]})
    assert secret not in b["listing"] and b["tmp"] != "" and _own(b["listing"]) == []
    assert not os.path.exists(Path("/tmp") / secret), "a function wrote into the host's shared /tmp"
    if cluster.jailed:
        assert a["tmp"] == b["tmp"] == "/tmp"  # the same path, two tmpfs of their own
        assert b["seen"] == {a["wrote"]: False}
    else:
        # Unjailed, each instance's TMPDIR is a folder of its own in the node's state; nothing
        # hides one from another (isolation off is unsafe, docs/isolation.md).
        assert a["tmp"] != b["tmp"] and not a["tmp"].startswith("/tmp")
        assert Path(a["tmp"]).parent.name == "tmp" and Path(a["tmp"]).is_relative_to(cluster.state_dir.resolve())
    _remove(cluster, "fenv-a", "fenv-b")


def test_tmp_is_empty_after_an_instance_retires(env_cluster, base):
    cluster = env_cluster
    probe = _handler(base, "probe", PROBE)
    name = "fenv-retire"
    resp = cluster.deploy(name, probe, wait=False, labels={"com.openfaas.scale.min": "0", "com.openfaas.scale.zero": "true",
                                                          "com.openfaas.scale.zero-duration": "1s"},
                          **{"x-nearfaas": {"keep_alive": "1s"}})
    assert resp.status_code < 300, resp.text
    first = _answer(cluster, name, {"write": "left-behind.bin"})
    assert _own(first["listing"]) == []  # a new instance: empty
    assert "left-behind.bin" in _answer(cluster, name)["listing"]
    # Idle past zero-duration: the gateway scales it to zero and its node stops the worker.
    deadline = time.monotonic() + 20
    while cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["availableReplicas"]:
        assert time.monotonic() < deadline, "never scaled to zero"
        time.sleep(0.1)
    if not cluster.jailed:
        deadline = time.monotonic() + 10
        while os.path.exists(first["tmp"]):  # removed when the node reaps the worker
            assert time.monotonic() < deadline, f"{first['tmp']} outlived its instance"
            time.sleep(0.05)
    again = _call(cluster, name)
    assert again.status_code == 200 and again.headers["X-Nearfaas-Start"] == "cold", again.text
    assert _own(again.json()["listing"]) == [], "a new instance saw the retired one's /tmp"
    _remove(cluster, name)


def test_tmp_size_bounds_a_jailed_tmp_and_shm(env_cluster, base):
    cluster = env_cluster
    if not cluster.jailed:
        pytest.skip("only the jail bounds /tmp (isolation off: a plain folder on the node's disk, docs/isolation.md)")
    probe = _handler(base, "probe", PROBE)
    assert cluster.deploy("fenv-small", probe, **{"x-nearfaas": {"tmp_size": "2Mi"}}).status_code < 300
    fits = _answer(cluster, "fenv-small", {"fill": 1 << 20})
    assert (fits["fill"], fits["fill_shm"]) == ("ok", "ok")
    over = _answer(cluster, "fenv-small", {"fill": 4 << 20})
    assert (over["fill"], over["fill_shm"]) == ("ENOSPC", "ENOSPC")
    # The default is 64 MiB: the same 4 MiB fits a function that did not ask for less.
    assert cluster.deploy("fenv-default", probe).status_code < 300
    assert _answer(cluster, "fenv-default", {"fill": 4 << 20})["fill"] == "ok"
    _remove(cluster, "fenv-small", "fenv-default")


# -- environment -----------------------------------------------------------------------------------

def test_the_environment_names_the_gateway_the_function_and_its_namespace(env_cluster, base):
    cluster = env_cluster
    probe = _handler(base, "probe", PROBE)
    for name in ("fenv-caller", "fenv-callee"):
        assert cluster.deploy(name, probe).status_code < 300
    answer = _answer(cluster, "fenv-caller", {"call": "fenv-callee"})
    env = answer["env"]
    assert env["OPENFAAS_URL"] == env["NEARFAAS_GATEWAY_URL"] == cluster.url
    assert (env["NEARFAAS_FUNCTION"], env["NEARFAAS_NAMESPACE"]) == ("fenv-caller", "openfaas-fn")
    assert env["TMPDIR"] == env["TMP"] == env["TEMP"] == answer["tmp"]
    assert env["HOME"] == ("/tmp" if cluster.jailed else answer["tmp"])
    # Through OPENFAAS_URL it calls another function, the OpenFaaS way.
    assert answer["called"]["env"]["NEARFAAS_FUNCTION"] == "fenv-callee"
    _remove(cluster, "fenv-caller", "fenv-callee")


# -- requirements ----------------------------------------------------------------------------------

def _logs(cluster, name: str) -> str:
    resp = cluster.http.get(f"{cluster.url}/system/logs", params={"name": name}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.text


def _no_pip_noise(logs: str) -> None:
    for line in logs.splitlines():
        text = json.loads(line).get("text", "") if line.startswith("{") else line
        assert "ERROR" not in text and "dependency conflicts" not in text and "incompatible" not in text, text


def test_a_pinned_older_pillow_shadows_the_runtimes_without_pip_noise(env_cluster, base):
    import PIL

    cluster = env_cluster
    if not cluster.jailed:
        pytest.skip("the requirements env does not depend on isolation; the jailed cluster covers it")
    assert PIL.__version__ != PINNED_PILLOW
    folder = _handler(base, "pinned", PIL_ONLY)
    _files(folder, {"requirements.txt": f"Pillow=={PINNED_PILLOW}\n"})
    assert cluster.deploy("fenv-pinned", folder, wait=False).status_code < 300
    answer = _answer(cluster, "fenv-pinned")
    assert answer["pil"] == PINNED_PILLOW, answer
    assert Path(answer["pil_file"]).is_relative_to(cluster.state_dir.resolve() / "envs"), answer
    _no_pip_noise(_logs(cluster, "fenv-pinned"))
    _remove(cluster, "fenv-pinned")


def test_a_named_requirements_file_is_used_and_a_missing_one_is_a_400(env_cluster, base):
    cluster = env_cluster
    if not cluster.jailed:
        pytest.skip("the requirements env does not depend on isolation; the jailed cluster covers it")
    folder = _handler(base, "named", PIL_ONLY)
    # requirements.txt would fail to install: only the named file may be read.
    _files(folder, {"requirements.txt": "nearfaas-no-such-package-anywhere==0.0.1\n",
                    "requirements-pinned.txt": f"Pillow=={PINNED_PILLOW}\n"})
    assert cluster.deploy("fenv-named", folder, wait=False, **{"x-nearfaas": {"requirements": "requirements-pinned.txt"}}).status_code < 300
    assert _answer(cluster, "fenv-named")["pil"] == PINNED_PILLOW
    _no_pip_noise(_logs(cluster, "fenv-named"))

    assert cluster.deploy("fenv-missing", folder, wait=False, **{"x-nearfaas": {"requirements": "requirements-gone.txt"}}).status_code < 300
    missing = _call(cluster, "fenv-missing")
    assert missing.status_code == 400, missing.text
    assert "requirements-gone.txt" in missing.text and "add requirements-gone.txt to the handler folder" in missing.text
    _remove(cluster, "fenv-named", "fenv-missing")


# -- a WorkerPools driven directly ---------------------------------------------------------------

NODE = "node-f"


async def _until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _pool_call(worker, body: dict | None = None) -> dict:
    resp = await asyncio.to_thread(requests.post, f"http://127.0.0.1:{worker.port}/", json=body or {}, timeout=30,
                                   headers={WORKER_TOKEN_HEADER: worker.token})
    assert resp.status_code == 200, resp.text
    return resp.json()


def _with_pool(state: Path, body, prewarm: int = 0, isolation: bool = True) -> None:
    async def main():
        pools = WorkerPools(NODE, state, "http://127.0.0.1:9", None, workers_max=4, prewarm=prewarm, isolation=isolation)
        pools.start_prewarming()
        try:
            await body(pools)
        finally:
            await pools.shutdown()

    asyncio.run(main())
    assert launcher.processes_of(state) == []


def _spec(name: str, folder: Path, **x) -> dict:
    return {"name": name, "lang": "python3-http", "handler_dir": str(folder), "x": x}


def test_unjailed_tmp_folders_go_with_their_instance_however_it_ends(base):
    state = base / "pool-unjailed"
    probe = _handler(base, "probe", PROBE)
    broken = _handler(base, "broken", "import module_that_does_not_exist\n")
    leftover = state / "nodes" / NODE / "tmp" / "crashed-node-instance"
    leftover.mkdir(parents=True)
    (leftover / "big.bin").write_bytes(b"x" * 1024)

    async def body(pools: WorkerPools):
        tmp_root = pools.node_dir / "tmp"
        assert not leftover.exists(), "the node's start did not sweep a previous run's /tmp folders"
        # Pre-warmed and spawned: each instance's TMPDIR is its own folder, tempfile finds it.
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        first = await pools.start(_spec("fenv-pool", probe))
        second = await pools.start(_spec("fenv-pool", probe))
        assert first.prewarmed and not second.prewarmed
        for worker in (first, second):
            answer = await _pool_call(worker, {"write": "scratch.bin"})
            assert answer["tmp"] == str(worker.tmp_dir) == answer["env"]["TMPDIR"] == answer["env"]["HOME"]
            assert answer["listing"] == [] and (worker.tmp_dir / "scratch.bin").exists()
        # Stopped (retired or scaled down): gone.
        await pools.stop(first.id)
        await _until(lambda: not first.tmp_dir.exists(), what="a stopped instance's /tmp to go")
        # Crashed: gone.
        os.kill(second.process.pid, 9)
        await _until(lambda: not second.tmp_dir.exists(), what="a crashed instance's /tmp to go")
        # A start that fails leaves none either.
        with pytest.raises(PoolError, match="module_that_does_not_exist"):
            await pools.start(_spec("fenv-broken", broken))
        await _until(lambda: not any(tmp_root.iterdir()), what="a failed start's /tmp to go")
        # Shutdown removes what is left.
        last.append(await pools.start(_spec("fenv-pool", probe)))

    last = []
    _with_pool(state, body, prewarm=1, isolation=False)
    assert last and not last[0].tmp_dir.exists()


def test_pre_warmed_and_spawned_workers_load_the_functions_own_packages(base):
    """A generic worker has not imported PIL: it is specialised, and finds the function's PIL
    first. It has imported six: a function pinning six gets a fresh spawn, never the runtime's six."""
    import six

    assert six.__version__ != PINNED_SIX
    state = base / "pool-packages"
    pinned = _handler(base, "pool-pinned", PIL_ONLY)
    _files(pinned, {"requirements-pil.txt": f"Pillow=={PINNED_PILLOW}\n"})
    both = _handler(base, "pool-both", VERSIONS)
    _files(both, {"requirements.txt": f"Pillow=={PINNED_PILLOW}\nsix=={PINNED_SIX}\n"})

    async def body(pools: WorkerPools):
        await _until(lambda: len(pools.prewarm.idle) == 1, what="a generic worker to warm up")
        assert "PIL" not in pools.prewarm.idle[0].modules and "six" in pools.prewarm.idle[0].modules
        worker = await pools.start(_spec("fenv-pil", pinned, requirements="requirements-pil.txt", tmp_size=8 << 20))
        assert worker.prewarmed, worker.spawn_reason
        answer = await _pool_call(worker)
        assert answer["pil"] == PINNED_PILLOW and answer["pil_file"].startswith(str(state / "envs")), answer
        await _until(lambda: len(pools.prewarm.idle) == 1, what="the pool to refill")
        worker = await pools.start(_spec("fenv-six", both))
        assert not worker.prewarmed
        assert worker.spawn_reason == "its requirements.txt provides 'six', which a generic worker has already imported"
        answer = await _pool_call(worker)
        assert (answer["pil"], answer["six"]) == (PINNED_PILLOW, PINNED_SIX), answer
        assert answer["six_file"].startswith(str(state / "envs")), answer
        for name in ("fenv-pil", "fenv-six"):
            _no_pip_noise("\n".join(r["text"] for r in pools.read_logs(name)))
        assert not (pools.node_dir / "tmp").exists()  # jailed: a tmpfs, never a folder on the node

    _with_pool(state, body, prewarm=1)
