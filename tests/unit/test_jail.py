"""Isolated workers (node/jail.py): a real jailed child process, the cgroups it is put in, the
environment allow-list, and the start-up probe that refuses to run functions unisolated."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nearfaas.node import jail
from nearfaas.node.pool import PoolError, WorkerPools

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root (mount namespaces, setresuid, cgroups)")

# What a jailed worker would try: it reports, the test judges.
CHILD = r"""
import json, os, sys
from nearfaas.node import jail
plan, paths = json.loads(sys.argv[1]), json.loads(sys.argv[2])
jail.enter(plan)
report = {"uid": os.getresuid(), "gid": os.getresgid(), "groups": os.getgroups(), "home": os.environ.get("HOME"),
          "cwd": os.getcwd(), "read": {}, "write": {}, "cgroup": open("/proc/self/cgroup").read()}
for path in paths["read"]:
    try:
        with open(path, "rb") as f:
            report["read"][path] = f.read().decode()
    except OSError as exc:
        report["read"][path] = type(exc).__name__
for path in paths["write"]:
    try:
        with open(path, "w") as f:
            f.write("x")
        report["write"][path] = "written"
    except OSError as exc:
        report["write"][path] = f"{type(exc).__name__}:{exc.errno}"
try:
    os.kill(os.getppid(), 0)
    report["kill_parent"] = "allowed"
except PermissionError:
    report["kill_parent"] = "PermissionError"
try:
    os.setuid(0)
    report["setuid0"] = "allowed"
except PermissionError:
    report["setuid0"] = "PermissionError"
report["no_new_privs"] = [l for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0].split()[1]
report["state_listing"] = sorted(os.listdir(paths["state"]))
print(json.dumps(report))
"""


@pytest.fixture
def layout(tmp_path):
    state = tmp_path / "state"
    bundle = state / "functions" / "f" / "d1"
    bundle.mkdir(parents=True)
    (bundle / "handler.py").write_text("def handle(e, c): return 1\n")
    (state / "cluster.json").write_text('{"auth": {"secret": "the cluster key"}}')
    (state / "secrets").mkdir()
    (state / "secrets" / "other").write_text("another function's secret")
    store = state / "nodes" / "storage-0" / "store"
    store.mkdir(parents=True)
    (store / "object").write_text("object bytes")
    return state, bundle


@needs_root
def test_a_jailed_child_is_unprivileged_blind_to_the_state_and_limited(layout):
    state, bundle = layout
    uid = 200777
    cgroups = jail.Cgroups(state, "t-node")
    dirs = cgroups.create("f-t-node-abc123", jail.limits_of({"limits": {"memory": "64Mi", "cpu": "250m"}}))
    try:
        plan = jail.plan(uid, state, [str(bundle)], dirs)
        paths = {"read": [str(bundle / "handler.py"), str(state / "cluster.json"), str(state / "secrets" / "other"),
                          str(state / "nodes" / "storage-0" / "store" / "object")],
                 "write": [str(bundle / "handler.py"), str(bundle / "new.py"), "/tmp/scratch"], "state": str(state)}
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan), json.dumps(paths)], capture_output=True,
                              text=True, timeout=60, cwd=str(bundle))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        # Its own uid and gid, no groups, no way back, and the node out of its reach.
        assert report["uid"] == [uid] * 3 and report["gid"] == [uid] * 3 and report["groups"] == []
        assert report["setuid0"] == "PermissionError" and report["kill_parent"] == "PermissionError"
        assert report["no_new_privs"] == "1" and report["home"] == "/tmp"
        # The state directory holds only the way to its bundle; the rest does not exist for it.
        assert report["state_listing"] == ["functions"]
        assert report["read"][str(bundle / "handler.py")].startswith("def handle")
        for hidden in ("cluster.json", "secrets/other", "nodes/storage-0/store/object"):
            assert report["read"][str(state / hidden)] == "FileNotFoundError", hidden
        # Its bundle is read-only (EROFS), its /tmp private and writable.
        assert report["write"][str(bundle / "handler.py")].endswith(":30")
        assert report["write"][str(bundle / "new.py")].endswith(":30")
        assert report["write"]["/tmp/scratch"] == "written" and not os.path.exists("/tmp/scratch")
        assert report["cwd"] == str(bundle)
        # It ran inside the cgroups made for it, with their limits.
        for folder in dirs:
            assert os.path.basename(folder) in report["cgroup"]
        memory = next(d for d in dirs if "/memory/" in d)
        assert int(Path(memory, "memory.limit_in_bytes").read_text()) == 64 * 2**20
        pids = next(d for d in dirs if "/pids/" in d)
        assert Path(pids, "pids.max").read_text().strip() == str(jail.DEFAULT_PIDS)
        cpu = next(d for d in dirs if "/cpu/" in d)
        assert Path(cpu, "cpu.cfs_quota_us").read_text().strip() == "25000"
    finally:
        assert jail.remove_cgroups(dirs) == []
        cgroups.close()
    assert not any(os.path.exists(d) for d in dirs)


@needs_root
def test_removing_a_cgroup_kills_what_escaped_the_process_group(layout):
    state, _ = layout
    cgroups = jail.Cgroups(state, "t-node")
    dirs = cgroups.create("straggler", jail.limits_of({}))
    try:
        # A daemon that left the worker's session: not reached by killpg, still in the cgroup.
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        for folder in dirs:
            Path(folder, "cgroup.procs").write_text(str(proc.pid))
        assert set(jail.remove_cgroups(dirs)) <= set(dirs)  # killed; each group goes once it has died
        assert proc.wait(5) == -9
        assert jail.remove_cgroups(dirs) == []
    finally:
        jail.remove_cgroups(dirs)
        cgroups.close()


def test_limits_follow_openfaas_units_with_defaults():
    assert jail.limits_of({}) == {"memory": 1 << 30, "pids": 256, "cpu": None}
    assert jail.limits_of({"limits": {"memory": "128Mi", "cpu": "500m"}}) == {"memory": 128 * 2**20, "pids": 256, "cpu": 0.5}
    assert jail.limits_of({"limits": {"cpu": "1.5"}})["cpu"] == 1.5
    with pytest.raises(ValueError):
        jail.limits_of({"limits": {"cpu": "0"}})


def test_cgroup_v2_files(tmp_path):
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    cgroups = jail.Cgroups(tmp_path / "state", "n1", root=str(root))
    assert cgroups.v2
    [folder] = cgroups.create("fn-n1-1", {"memory": 128 * 2**20, "pids": 256, "cpu": 0.5})
    assert Path(folder).parent.parent == root
    assert Path(folder, "memory.max").read_text() == str(128 * 2**20)
    assert Path(folder, "pids.max").read_text() == "256"
    assert Path(folder, "cpu.max").read_text() == "50000 100000"
    assert "+memory" in Path(folder).parent.joinpath("cgroup.subtree_control").read_text()


def test_the_environment_is_an_allow_list():
    node_env = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "NEARFAAS_SECRET_KEY": "cluster",
                "NEARFAAS_ACCESS_KEY": "admin", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/root", "SSH_AUTH_SOCK": "/tmp/s"}
    assert jail.allowed_env(node_env) == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC"}


def test_uids_come_from_the_spec_or_a_range_the_gateway_never_uses():
    assert jail.function_uid({"name": "f", "uid": 200001}) == 200001
    derived = jail.function_uid({"name": "f"})
    assert derived >= jail.DERIVED_UID_BASE and derived == jail.function_uid({"name": "f"}) != jail.function_uid({"name": "g"})
    for bad in (0, 1000, True, "200001"):
        with pytest.raises(ValueError):
            jail.function_uid({"name": "f", "uid": bad})


def test_a_plan_hides_the_state_and_shows_only_what_the_worker_needs(tmp_path):
    state = tmp_path / "state"
    bundle = state / "functions" / "f" / "d"
    plan = jail.plan(200001, state, [str(bundle)], [])
    assert {"/tmp", "/dev/shm", str(state.resolve())} <= set(plan["hide"])
    assert str(bundle) in plan["show"]
    assert not any(p == str(state) or p.startswith(str(state) + "/") for p in plan["show"] if p != str(bundle))


@needs_root
def test_the_probe_finds_everything_here():
    assert jail._probe(Path(tempfile.mkdtemp()) / "state", "probe-node", jail.CGROUP_ROOT) == []


@needs_root
def test_the_probe_names_what_is_missing(tmp_path, monkeypatch):
    def no_namespaces(flags):
        raise OSError(1, "unshare: Operation not permitted")

    monkeypatch.setattr(jail, "_unshare", no_namespaces)
    problems = jail._probe(tmp_path / "state", "n", jail.CGROUP_ROOT)
    # (Without its own view, a Python under a closed folder such as /root may be named too.)
    assert "mount namespace" in problems[0] and "Operation not permitted" in problems[0]
    monkeypatch.undo()

    problems = jail._probe(tmp_path / "state", "n", "/proc/no-cgroups-here")
    assert len(problems) == 1 and "cgroup" in problems[0]

    def no_setuid(*ids):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setresuid", no_setuid)
    problems = jail._probe(tmp_path / "state", "n", jail.CGROUP_ROOT)
    monkeypatch.undo()
    assert len(problems) == 1 and "unprivileged uid" in problems[0]
    text = jail.refusal("storage-0", problems)
    assert text.startswith("node storage-0 cannot isolate functions") and "`isolation: off`" in text and "unsafe" in text


@needs_root
def test_a_checkout_other_users_cannot_read_fails_starts_with_the_fix(tmp_path, monkeypatch):
    closed = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp, which the jail replaces
    try:
        (closed / "pkg").mkdir()
        (closed / "pkg" / "mod.py").write_text("")
        os.chmod(closed, 0o700)
        monkeypatch.setattr(jail, "_python_files", lambda: [str(closed / "pkg" / "mod.py")])
        problems = jail._probe(tmp_path / "state", "n", jail.CGROUP_ROOT)
        assert problems == [f"folder {closed} is not traversable by other users, and functions run as their own uids and "
                            f"must read {closed / 'pkg' / 'mod.py'}; fix: chmod o+x {closed}"]
        os.chmod(closed, 0o711)
        os.chmod(closed / "pkg" / "mod.py", 0o600)
        problems = jail._probe(tmp_path / "state", "n", jail.CGROUP_ROOT)
        assert problems == [f"file {closed / 'pkg' / 'mod.py'} is not readable by other users; fix: chmod -R o+rX {closed / 'pkg'}"]

        # A pool on such a host refuses every start with that sentence, never a traceback.
        monkeypatch.setattr(jail, "_probed", {})

        async def main():
            pools = WorkerPools("n", tmp_path / "state", "http://127.0.0.1:9", None, prewarm=0)
            try:
                with pytest.raises(PoolError, match="not readable by other users; fix: chmod") as info:
                    await pools.start({"name": "f", "lang": "python3-http", "handler_dir": str(tmp_path), "uid": 200001})
                assert info.value.status == 503 and "`isolation: off`" in str(info.value)
            finally:
                await pools.shutdown()

        asyncio.run(main())
    finally:
        os.chmod(closed, 0o755)
        subprocess.run(["rm", "-rf", str(closed)], check=True)


@needs_root
def test_a_pre_warmed_workers_groups_get_the_functions_limits_later(tmp_path):
    cgroups = jail.Cgroups(tmp_path / "state", "t-node")
    dirs = cgroups.create("prewarm-x", jail.limits_of({}))  # joined at spawn, default limits
    try:
        memory = next(d for d in dirs if "/memory/" in d)
        cpu = next(d for d in dirs if "/cpu/" in d)
        assert int(Path(memory, "memory.limit_in_bytes").read_text()) == 1 << 30
        assert Path(cpu, "cpu.cfs_quota_us").read_text().strip() == "-1"
        cgroups.set_limits(dirs, jail.limits_of({"limits": {"memory": "96Mi", "cpu": "1.5"}}))
        assert int(Path(memory, "memory.limit_in_bytes").read_text()) == 96 * 2**20
        assert Path(cpu, "cpu.cfs_quota_us").read_text().strip() == "150000"
        if Path(memory, "memory.memsw.limit_in_bytes").exists():
            assert int(Path(memory, "memory.memsw.limit_in_bytes").read_text()) == 96 * 2**20
        cgroups.set_limits(dirs, jail.limits_of({"limits": {"memory": "2Gi"}}))  # raising: memsw first
        assert int(Path(memory, "memory.limit_in_bytes").read_text()) == 2 << 30
        assert Path(cpu, "cpu.cfs_quota_us").read_text().strip() == "-1"
    finally:
        jail.remove_cgroups(dirs)
        cgroups.close()


def test_a_node_that_cannot_isolate_exits_at_start_naming_the_fix(tmp_path, monkeypatch, capsys):
    from nearfaas.node import agent

    monkeypatch.setattr(jail, "probe", lambda state, node: ["cannot switch to an unprivileged uid (EPERM); run the node agent as root"])
    argv = ["--name", "storage-0", "--kind", "storage", "--port", "1", "--state", str(tmp_path), "--gateway", "http://127.0.0.1:9"]
    with pytest.raises(SystemExit) as exited:
        agent.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("node storage-0 cannot isolate functions, so it will not start: cannot switch to an unprivileged uid")
    assert "set `isolation: off` in the cluster file to run functions unisolated — unsafe" in err
    with pytest.raises(SystemExit):  # and `--isolation` takes on or off only
        agent.main(argv + ["--isolation", "maybe"])
