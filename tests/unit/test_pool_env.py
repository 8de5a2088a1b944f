"""A worker's environment as the node builds it (node/pool.py): the gateway URL, the function's
name and namespace, its private /tmp, its requirements env first on PYTHONPATH; which
requirements file is read; the /tmp size in the jail plan; the sweep of a crashed node's /tmp
folders. No worker is started here (tests/integration/test_function_environment.py does)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from nearfaas.node import jail
from nearfaas.node.pool import DEFAULT_NAMESPACE, PIP_FLAGS, PoolError, WorkerPools
from nearfaas.node.prewarm import GenericWorker, PrewarmPool
from nearfaas.node.procs import package_root
from nearfaas.spec.options import DEFAULT_TMP_SIZE

GATEWAY = "http://127.0.0.1:8080"


@pytest.fixture
def pools(tmp_path) -> WorkerPools:
    """A pool that never starts anything: unjailed, so it needs no probe, and prewarm 0."""
    return WorkerPools("node-u", tmp_path / "state", GATEWAY, None, prewarm=0, node_url="http://127.0.0.1:9001", isolation=False)


def _spec(tmp_path: Path, **fields) -> dict:
    handler = tmp_path / "handler"
    handler.mkdir(exist_ok=True)
    return {"name": "thumb", "lang": "python3-http", "handler_dir": str(handler)} | fields


def test_a_jailed_workers_environment_names_the_gateway_function_namespace_and_tmp(pools, tmp_path):
    env = pools._function_env(_spec(tmp_path, environment={"GREETING": "hi"}), "/state/envs/abc")
    assert env["OPENFAAS_URL"] == env["NEARFAAS_GATEWAY_URL"] == GATEWAY
    assert (env["NEARFAAS_FUNCTION"], env["NEARFAAS_NAMESPACE"]) == ("thumb", "openfaas-fn") and DEFAULT_NAMESPACE == "openfaas-fn"
    assert env["TMPDIR"] == env["TMP"] == env["TEMP"] == env["HOME"] == "/tmp"  # jailed: /tmp is a tmpfs of its own
    assert env["GREETING"] == "hi" and env["NEARFAAS_NODE"] == "node-u" and env["NEARFAAS_NODE_URL"] == "http://127.0.0.1:9001"
    # The function's requirements env first, so its packages shadow the runtime's.
    # The requirements env is never on the worker's PYTHONPATH: the worker is root until its jail,
    # and puts the env on sys.path only after it (runtime/jailed_start.py; red team round 2).
    assert env["PYTHONPATH"].split(os.pathsep)[0] == package_root() and "/state/envs/abc" not in env["PYTHONPATH"]


def test_an_unjailed_workers_tmp_and_home_are_its_own_folder(pools, tmp_path):
    folder = pools._private_tmp("thumb-node-u-000001")
    assert folder == pools.node_dir / "tmp" / "thumb-node-u-000001"
    assert folder.is_dir() and not any(folder.iterdir()) and folder.stat().st_mode & 0o777 == 0o700
    env = pools._function_env(_spec(tmp_path), None, folder)
    assert env["TMPDIR"] == env["TMP"] == env["TEMP"] == env["HOME"] == str(folder)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == package_root()  # no requirements env: nothing before the runtime


def test_the_platform_sets_its_own_names_and_the_function_may_name_another_gateway(pools, tmp_path):
    spec = _spec(tmp_path, namespace="team-a", environment={"NEARFAAS_FUNCTION": "someone-else", "TMP": "/elsewhere",
                                                            "OPENFAAS_URL": "http://gateway.openfaas:8080"})
    env = pools._function_env(spec, None)
    assert env["NEARFAAS_FUNCTION"] == "thumb" and env["NEARFAAS_NAMESPACE"] == "team-a" and env["TMP"] == "/tmp"
    assert env["OPENFAAS_URL"] == "http://gateway.openfaas:8080" and env["NEARFAAS_GATEWAY_URL"] == GATEWAY


def test_a_pre_warmed_worker_is_sent_what_a_spawned_one_starts_with(pools, tmp_path):
    """The specialisation message carries every variable the generic workers lack (pool._specialise)."""
    env = pools._function_env(_spec(tmp_path), "/state/envs/abc", pools._private_tmp("thumb-node-u-000002"))
    sent = {k for k, v in env.items() if pools.prewarm.env.get(k) != v}
    assert {"OPENFAAS_URL", "NEARFAAS_GATEWAY_URL", "NEARFAAS_NAMESPACE", "NEARFAAS_FUNCTION", "TMPDIR", "TMP", "TEMP", "HOME"} <= sent
    assert "PYTHONPATH" not in sent  # the env travels as the message's sys_path, applied after the jail


def test_requirements_come_from_requirements_txt_or_the_named_file(pools, tmp_path):
    spec = _spec(tmp_path)
    handler = Path(spec["handler_dir"])
    assert pools._requirements_file(spec) is None  # requirements.txt is optional
    (handler / "requirements.txt").write_text("pillow\n")
    assert pools._requirements_file(spec) == handler / "requirements.txt"
    (handler / "deps").mkdir()
    (handler / "deps" / "prod.txt").write_text("pillow==10.4.0\n")
    assert pools._requirements_file(spec | {"x": {"requirements": "deps/prod.txt"}}) == handler / "deps" / "prod.txt"


def test_a_named_requirements_file_that_is_missing_or_outside_is_a_400_naming_it(pools, tmp_path):
    spec = _spec(tmp_path)
    with pytest.raises(PoolError) as info:
        pools._requirements_file(spec | {"x": {"requirements": "requirements-prod.txt"}})
    assert info.value.status == 400
    assert "'requirements-prod.txt'" in str(info.value) and "add requirements-prod.txt to the handler folder" in str(info.value)
    (tmp_path / "outside.txt").write_text("pillow\n")
    with pytest.raises(PoolError, match="not a file inside its handler folder") as info:
        pools._requirements_file(spec | {"x": {"requirements": "../outside.txt"}})
    assert info.value.status == 400


def test_comment_only_requirements_install_nothing(pools, tmp_path):
    spec = _spec(tmp_path)
    req = Path(spec["handler_dir"]) / "requirements.txt"
    req.write_text("# nothing yet\n\n")
    assert asyncio.run(pools._ensure_requirements(spec, req)) is None
    assert asyncio.run(pools._ensure_requirements(spec, None)) is None
    assert not (pools.state_dir / "envs").exists()


def test_pip_installs_beside_the_runtime_without_conflict_noise():
    # --target implies --ignore-installed; the conflict check compares against the runtime's
    # packages, which the function's env shadows: its ERROR would only be noise in the log.
    assert {"--ignore-installed", "--no-warn-conflicts", "--no-warn-script-location", "--root-user-action=ignore",
            "--quiet"} <= set(PIP_FLAGS)


def test_the_tmp_size_reaches_the_jail_plan(pools, tmp_path):
    assert pools._tmp_size(_spec(tmp_path)) == DEFAULT_TMP_SIZE == 512 << 20  # AWS Lambda's default
    assert pools._tmp_size(_spec(tmp_path, x={"tmp_size": 2 << 20})) == 2 << 20
    assert pools._tmp_size(_spec(tmp_path, x={"tmp_size": "256Mi"})) == 256 << 20
    with pytest.raises(PoolError, match="tmp_size") as info:
        pools._tmp_size(_spec(tmp_path, x={"tmp_size": "lots"}))
    assert info.value.status == 400
    plan = pools._plan(200001, [], [], None, 2 << 20)
    assert plan["tmp_size"] == str(2 << 20) and {"/tmp", "/dev/shm"} <= set(plan["hide"])
    assert jail.plan(200001, tmp_path / "state", [], [])["tmp_size"] == jail.TMP_SIZE  # the default: 64m


def test_a_node_start_sweeps_the_tmp_folders_a_killed_node_left(tmp_path):
    left = tmp_path / "state" / "nodes" / "node-u" / "tmp" / "thumb-node-u-dead00"
    left.mkdir(parents=True)
    (left / "19MB-of-compression-scratch").write_bytes(b"x" * 4096)
    WorkerPools("node-u", tmp_path / "state", GATEWAY, None, prewarm=0, isolation=False)
    assert not left.parent.exists()


def test_a_generic_worker_that_imported_a_shadowed_module_is_not_taken(tmp_path):
    env = tmp_path / "env"
    env.mkdir()
    (env / "PIL").mkdir()
    (env / "six.py").write_text("")
    (env / "six-1.16.0.dist-info").mkdir()
    prewarm = PrewarmPool(1, tmp_path, {}, tmp_path / "prewarm.log")
    generic = GenericWorker(SimpleNamespace(returncode=None), None, None, modules=frozenset({"six", "aiohttp"}))
    prewarm.idle = [generic]
    assert prewarm.take({}, str(env), "requirements-prod.txt") == (
        None, "its requirements-prod.txt provides 'six', which a generic worker has already imported")
    assert prewarm.idle == [generic]  # left for another function
    (env / "six.py").unlink()
    assert prewarm.take({}, str(env), "requirements-prod.txt") == (generic, None)  # PIL: not imported, the env's copy wins


def test_a_failed_install_keeps_pips_own_words_in_the_error_and_the_log(pools, tmp_path):
    """No network: the requirement names a wheel file the bundle lacks."""
    spec = _spec(tmp_path, x={"requirements": "requirements-prod.txt"})
    req = Path(spec["handler_dir"]) / "requirements-prod.txt"
    req.write_text("./nearfaas_absent-1.0-py3-none-any.whl\n")
    with pytest.raises(PoolError) as info:
        asyncio.run(pools._ensure_requirements(spec, req))
    message = str(info.value)
    assert "fix requirements-prod.txt" in message and "nearfaas_absent-1.0-py3-none-any.whl" in message, message
    assert "ERROR" in pools.tail_log("thumb", 20)  # pip's failure, as pip said it
    assert not any(p.name.endswith(".partial") for p in (pools.state_dir / "envs").iterdir())  # no half-made env left
