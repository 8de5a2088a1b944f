"""The fast path's memory budget and quota (red team round 5, N2): the cluster file's
``fastpath.memory`` and ``fastpath.max_functions_per_namespace``, the nodes' default
workers_memory that leaves the executor's share out, and the gateway's per-namespace quota of
functions on the executor. The executor's pools (fastpath/tests/pool.rs) and its cgroup
(tests/integration/test_fastpath_cluster.py) are checked where they run."""

import asyncio
import os

import pytest

from nearfaas.cluster import launcher
from nearfaas.gateway.fastpath import FastPath
from nearfaas.gateway.invoker import CallError
from nearfaas.spec.cluster import parse_cluster
from nearfaas.spec.errors import SpecError
from nearfaas.spec.fastpath import EXECUTOR_HEADROOM, FastpathSpec

HOST_BUDGET = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4


def test_fastpath_memory_is_a_quantity_with_a_clear_error():
    assert parse_cluster(None).fastpath.memory == 1 << 30
    spec = parse_cluster({"fastpath": {"memory": "512Mi", "max_functions_per_namespace": 8}})
    assert (spec.fastpath.memory, spec.fastpath.max_functions_per_namespace) == (512 << 20, 8)
    assert spec.fastpath.cgroup_limit() == (512 << 20) + EXECUTOR_HEADROOM
    assert parse_cluster(spec.to_dict()).fastpath == spec.fastpath
    for bad in ("lots", "100Mi", "2Ti", True, -1, [1]):
        with pytest.raises(SpecError) as exc:
            parse_cluster({"fastpath": {"memory": bad}})
        assert "fastpath.memory" in str(exc.value) and "from 144Mi to 1Ti" in str(exc.value) and "memory: 1Gi" in str(exc.value)
    with pytest.raises(SpecError, match="fastpath.max_functions_per_namespace"):
        parse_cluster({"fastpath": {"max_functions_per_namespace": 0}})


def test_the_nodes_default_workers_memory_leaves_the_fast_path_out():
    limit = FastpathSpec().cgroup_limit()
    share = launcher.default_workers_memory(3, limit)
    assert share == (HOST_BUDGET - limit) // 3
    # Nodes and executor together stay within the host's budget (3/4 of its memory).
    assert 3 * share + limit <= HOST_BUDGET
    with pytest.raises(launcher.ClusterError, match="lower fastpath.memory"):
        launcher.default_workers_memory(3, HOST_BUDGET)


def test_up_gives_the_nodes_the_budget_less_the_executors_limit(tmp_path, monkeypatch):
    # up() itself (not only the helper) takes the executor's limit out of the nodes' default.
    spec = parse_cluster({"fastpath": {"memory": "256Mi"}})
    seen = {}

    def stop(layout_dir, layout):
        seen.update(layout)
        raise RuntimeError("stop before starting anything")

    monkeypatch.setattr(launcher, "_fastpath_layout", lambda *a: {"cgroup_limit": spec.fastpath.cgroup_limit()})
    monkeypatch.setattr(launcher, "_write_layout", stop)
    with pytest.raises(RuntimeError, match="stop before"):
        launcher.up(spec, tmp_path)
    nodes = seen["nodes"]
    assert {n["workers_memory"] for n in nodes} == {(HOST_BUDGET - spec.fastpath.cgroup_limit()) // len(nodes)}


def _lambda(name):
    return {"name": name, "handler_dir": "/x", "x": {"target": "fastpath", "fastpath": {
        "module": "web.wasm", "native": None, "weight": 1, "timeout_ms": 50, "external": None}}}


def _stream(name):
    return {"name": name, "handler_dir": "/x", "x": {"target": "stream", "stream": {"fn": "topk", "k": 3}}}


def test_a_namespace_gets_at_most_its_quota_of_fast_path_functions():
    fp = FastPath({"host": "127.0.0.1", "tcp": 1, "control": 1, "host_port": 1, "stream": 1, "max_functions_per_namespace": 3}, None)
    installed = []

    async def control(body):
        installed.append(body["op"])
        return {"ok": True}

    fp.control = control
    deploy = lambda spec: asyncio.run(fp.deploy(spec))  # noqa: E731
    deploy(_lambda("a.team-a"))
    deploy(_stream("s.team-a"))  # lambdas and stream functions count together
    deploy(_lambda("b.team-a"))
    deploy(_lambda("a.team-a"))  # a redeploy counts once
    with pytest.raises(CallError) as exc:
        deploy(_stream("c.team-a"))
    message = str(exc.value)
    assert exc.value.status == 400 and "namespace 'team-a'" in message and "already has 3 functions" in message
    assert "fastpath.max_functions_per_namespace of 3" in message
    deploy(_lambda("c.team-b"))  # another namespace has its own
    deploy(_lambda("d"))  # and so has the default one
    deploy({"name": "w.team-a", "x": {"target": "worker"}})  # workers are not the executor's
    asyncio.run(fp.remove("b.team-a", fastpath=True))  # removing frees a place
    deploy(_lambda("c.team-a"))
    with pytest.raises(CallError, match="namespace 'team-a' already has 3"):
        deploy(_lambda("e.team-a"))


def test_no_memory_controller_no_executor(tmp_path, monkeypatch):
    # Fail closed: with isolation on, a host whose memory controller is missing gets no
    # executor outside every limit, but an error naming the controller and the fixes.
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)  # a plain folder, as on a tmpfs /sys/fs/cgroup
    monkeypatch.setenv("NEARFAAS_CGROUP_ROOT", str(root))
    layout = {"isolation": True, "fastpath": {"cgroup_limit": FastpathSpec().cgroup_limit()}}
    monkeypatch.setattr(launcher, "_write_layout", lambda *a: None)
    with pytest.raises(launcher.ClusterError) as exc:
        launcher._fastpath_group(layout, tmp_path / "state")
    message = str(exc.value)
    assert "the memory cgroup controller is missing" in message and "mount -t cgroup -o memory" in message
    assert "fastpath.enabled: false" in message and "cgroup" not in layout["fastpath"]
    assert not list((root / "memory").iterdir())  # nothing was made on the plain folder
    layout["isolation"] = False  # no isolation: no limits at all, as for the nodes
    assert launcher._fastpath_group(layout, tmp_path / "state") is None


def test_down_removes_the_nodes_relay_folders(tmp_path, monkeypatch):
    # A node sweeps its relay folders under /run/nearfaas-net when it starts, but a cluster that
    # is not started again left them (1,224 folders of stale sockets on red team round 7's
    # host): `nearfaas down` removes each node's.
    from nearfaas.cluster import launcher
    from nearfaas.node import netrelay

    monkeypatch.setattr(netrelay, "ROOT", tmp_path / "run")
    state = tmp_path / "state"
    folders = [netrelay.instance_folder(state / "nodes" / n, "w1") for n in ("storage-0", "compute-0")]
    for f in folders:
        f.mkdir(parents=True)
        (f / "serve.sock").write_text("")
    other = netrelay.instance_folder(tmp_path / "other" / "nodes" / "storage-0", "w1")
    other.mkdir(parents=True)
    launcher._remove_relay_folders({"nodes": [{"name": "storage-0"}, {"name": "compute-0"}]}, state)
    assert not any(f.parent.exists() for f in folders) and other.exists()  # another cluster's stay


def test_cpu_shares_refuse_a_kernel_without_schedstat(monkeypatch):
    # Without /proc/<pid>/task/*/schedstat every share would read 0 and a spinning executor would
    # pass for an idle one: the measurement says what the kernel lacks instead.
    import builtins

    from nearfaas.bench import fastpath_poll

    real_open = builtins.open

    def no_schedstat(path, *a, **k):
        if str(path).endswith("/schedstat"):
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_schedstat)
    with pytest.raises(OSError, match="CONFIG_SCHED_INFO"):
        fastpath_poll.cpu_use(os.getpid(), 0.01)
