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

from nearfaas import cgroups as cgroups_mod
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


def test_cgroup_v2_files(tmp_path, monkeypatch):
    # A v2 kernel, faked: every folder reads as cgroup2 and mkdir brings the controller files.
    root = tmp_path / "cg2"
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777):
        real_mkdir(path, mode)
        for name in ("cgroup.procs", "cgroup.subtree_control", "memory.max", "pids.max", "cpu.max"):
            Path(path, name).write_text("")

    monkeypatch.setattr(os, "mkdir", mkdir)
    mkdir(root)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    monkeypatch.setattr(cgroups_mod, "fs_magic", lambda path: cgroups_mod.CGROUP2_SUPER_MAGIC)
    cgroups = jail.Cgroups(tmp_path / "state", "n1", root=str(root))
    assert cgroups.v2 and cgroups.missing() == []
    [folder] = cgroups.create("fn-n1-1", {"memory": 128 * 2**20, "pids": 256, "cpu": 0.5})
    assert Path(folder).parent.parent == root
    assert Path(folder, "memory.max").read_text() == str(128 * 2**20)
    assert Path(folder, "pids.max").read_text() == "256"
    assert Path(folder, "cpu.max").read_text() == "50000 100000"
    assert "+memory" in Path(folder).parent.joinpath("cgroup.subtree_control").read_text()


def test_a_plain_folder_is_not_a_cgroup(tmp_path):
    # On cgroup v1 /sys/fs/cgroup is a writable tmpfs: a folder there that no controller is
    # mounted on used to take `cgroup.procs` as a new plain file, and no limit applied.
    fake = tmp_path / "cg"
    (fake / "pids" / "grp").mkdir(parents=True)
    (fake / "cgroup.controllers").write_text("cpu memory pids\n")  # looks like v2, is not
    assert not cgroups_mod.is_cgroup(str(fake / "pids" / "grp"))
    with pytest.raises(cgroups_mod.CgroupError, match="does not exist"):
        cgroups_mod.join(str(fake / "pids" / "grp"))
    assert not (fake / "pids" / "grp" / "cgroup.procs").exists()  # nothing created
    (fake / "pids" / "grp" / "cgroup.procs").write_text("")  # even a file put there is refused
    with pytest.raises(cgroups_mod.CgroupError, match="not a cgroup file"):
        cgroups_mod.join(str(fake / "pids" / "grp"))
    assert (fake / "pids" / "grp" / "cgroup.procs").read_text() == ""
    with pytest.raises(cgroups_mod.CgroupError, match="not a cgroup"):
        cgroups_mod.verify(str(fake / "pids"))
    cgroups = jail.Cgroups(tmp_path / "state", "n1", root=str(fake))
    assert not cgroups.v2
    missing = cgroups.missing()
    assert [m.split(" cgroup controller")[0] for m in missing] == ["the memory", "the pids", "the cpu"]
    assert "plain folder" in missing[1] and "mount -t cgroup -o pids" in missing[1]
    with pytest.raises(cgroups_mod.CgroupError, match="the pids cgroup controller is missing"):
        cgroups.create("x", jail.limits_of({}))
    assert not (fake / "pids" / "grp" / cgroups.group).exists()


@pytest.fixture
def host_without(tmp_path):
    """A cgroup root on a real tmpfs (as /sys/fs/cgroup is on v1) where the named controllers
    are real cgroup hierarchies (bind mounts of this host's) and the others plain folders, or
    another hierarchy standing in (``{"cpu": "cpuacct"}``: a cgroup without a CPU quota)."""
    made = []

    def make(mounts: dict[str, str | None]) -> str:
        root = tmp_path / "cgroot"
        root.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)], check=True)
        made.append(root)
        for name, source in mounts.items():
            (root / name).mkdir()
            if source:
                subprocess.run(["mount", "--bind", os.path.join(jail.CGROUP_ROOT, source), str(root / name)], check=True)
        return str(root)

    yield make
    for root in made:
        subprocess.run(["umount", "-R", "-l", str(root)], check=False)


v1_host = pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/pids/")
                             or cgroups_mod.is_v2(jail.CGROUP_ROOT), reason="needs root on a cgroup v1 host")


@v1_host
def test_a_node_missing_a_controller_refuses_to_start_and_to_deploy(tmp_path, host_without, monkeypatch, capsys):
    from nearfaas.node import agent

    root = host_without({"memory": "memory", "cpu": "cpu", "cpuacct": "cpuacct", "pids": None})  # pids not mounted
    monkeypatch.setenv("NEARFAAS_CGROUP_ROOT", root)
    monkeypatch.setattr(jail, "_probed", {})
    argv = ["--name", "storage-0", "--kind", "storage", "--port", "1", "--state", str(tmp_path / "state"),
            "--gateway", "http://127.0.0.1:9"]
    with pytest.raises(SystemExit) as exited:
        agent.main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "node storage-0 cannot isolate functions" in err and "the pids cgroup controller is missing" in err
    assert f"mount -t cgroup -o pids cgroup {root}/pids" in err
    assert not os.path.exists(os.path.join(root, "pids", "cgroup.procs"))  # the probe wrote no plain file

    async def main():  # a deploy on such a node is refused with the same sentence
        pools = WorkerPools("n", tmp_path / "state", "http://127.0.0.1:9", None, prewarm=0)
        try:
            with pytest.raises(PoolError, match="the pids cgroup controller is missing") as info:
                await pools.start({"name": "f", "lang": "python3-http", "handler_dir": str(tmp_path), "uid": 200001})
            assert info.value.status == 503
        finally:
            await pools.shutdown()

    asyncio.run(main())


@v1_host
def test_set_limits_raises_when_the_cpu_quota_is_missing(tmp_path, host_without):
    # A `cpu` hierarchy without CFS bandwidth (cpu.cfs_quota_us): stood in for by cpuacct's.
    root = host_without({"memory": "memory", "cpu": "cpuacct", "pids": "pids"})
    cgroups = jail.Cgroups(tmp_path / "state", "t-node", root=root)
    with pytest.raises(cgroups_mod.CgroupError, match="cannot set a CPU quota.*cpu.cfs_quota_us.*CONFIG_CFS_BANDWIDTH"):
        cgroups.create("f-1", jail.limits_of({"limits": {"cpu": "250m"}}))
    assert all(not os.path.exists(os.path.join(b, "f-1")) for b in cgroups._bases())  # cleaned up
    cpu_dir = os.path.join(cgroups._bases()[2], "f-2")
    os.makedirs(cpu_dir)
    try:
        with pytest.raises(cgroups_mod.CgroupError, match="cpu.cfs_quota_us"):
            cgroups.set_limits([cpu_dir], {"memory": 1 << 30, "pids": 256, "cpu": 0.25})
    finally:
        jail.remove_cgroups([cpu_dir])
        cgroups.close()


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
    assert [p.split(":")[0] for p in problems] == [f"the {c} cgroup controller is missing" for c in ("memory", "pids", "cpu")]

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
    closed = Path(tempfile.mkdtemp(dir="/var/lib"))  # not under /tmp or /var/tmp, which the jail replaces
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
