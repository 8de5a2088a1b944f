"""The fast-path executor is held to its memory budget (red team round 5, N2: it ran in no
limited cgroup and grew by 16 MiB for every lambda a tenant deployed and called, up to 8 GiB,
beyond the nodes' worker limits). In the shared session cluster (defaults: isolation on,
fastpath.memory 1Gi): the executor runs in a memory cgroup of its own whose limit is the budget
and its headroom, and its instance pools were sized from the same budget. That `nearfaas down`
removes the group is checked in test_fastpath_cluster.py, whose cluster goes down; the pools'
eviction in fastpath/tests/pool.rs; the quota and the nodes' share in
tests/unit/test_fastpath_budget.py. Beside it, the host budget's other shared resource: each
node's workers together are held to their share of the host's pids."""

import json
import os
from pathlib import Path

import pytest

from nearfaas.cgroups import CGROUP_ROOT
from nearfaas.fastpath.executor import binary_path
from nearfaas.spec.fastpath import FastpathSpec

pytestmark = pytest.mark.integration

if not binary_path().exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"the fast path is not built ({binary_path()}); `make setup` builds it")
    pytest.skip("the fast path is not built: run `make setup`", allow_module_level=True)


def memory_group_of(pid: int) -> tuple[str, str]:
    """(folder, its limit file) of the memory cgroup ``pid`` is in, read from /proc/<pid>/cgroup."""
    lines = [line.rstrip("\n").split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):  # cgroup v1
            return os.path.join(CGROUP_ROOT, "memory", path.lstrip("/")), "memory.limit_in_bytes"
    path = next(path for _, controllers, path in lines if controllers == "")  # cgroup v2
    return os.path.join(CGROUP_ROOT, path.lstrip("/")), "memory.max"


def test_the_executor_runs_in_a_memory_cgroup_held_to_its_budget(cluster):
    fp = cluster.layout["fastpath"]
    pid = next(p["pid"] for p in cluster.layout["processes"] if p["name"] == "fastpath")
    folder, limit_file = memory_group_of(pid)
    expected = FastpathSpec().cgroup_limit()  # 1 GiB of instances and the executor's headroom
    assert expected == fp["cgroup_limit"] < 4 << 30
    assert os.path.basename(folder).endswith(".fastpath"), f"the executor is in {folder}, not a group of its own"
    assert int(Path(folder, limit_file).read_text()) == expected
    # Its pools were sized from the same budget (the executor's ready file says what it runs with).
    ready = json.loads(Path(fp["ready_file"]).read_text())
    assert ready["pool_memory"] == FastpathSpec().memory and ready["pool_slots"] == FastpathSpec().memory // (16 << 20) // 3
    # The nodes' workers got the host's budget less the executor's limit (default workers_memory).
    budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    nodes = cluster.layout["nodes"]
    assert sum(n["workers_memory"] for n in nodes) + expected <= budget


def test_every_nodes_workers_together_are_held_to_their_share_of_the_hosts_pids(cluster):
    # Each worker is held to 256 processes (cgroups.DEFAULT_PIDS), but 3 nodes × 32 workers × 256
    # is 24,576 of this host's 32,768 pids: fork bombs in many workers of one tenant would leave
    # the host unable to fork. Each node's worker groups hang below one pids limit now.
    from nearfaas.cgroups import Cgroups, V1_FILES, V2_FILES
    from nearfaas.cluster.launcher import default_workers_pids

    if not cluster.layout.get("isolation", True):
        pytest.skip("the limit is a cgroup of the jail")
    nodes = cluster.layout["nodes"]
    share = default_workers_pids(len(nodes))
    assert share <= int(Path("/proc/sys/kernel/pid_max").read_text()) // 2 // len(nodes) or share == 1024
    for node in nodes:
        groups = Cgroups(cluster.state_dir, node["name"])
        base = groups._bases()[0] if groups.v2 else next(
            b for c, b in zip(groups._controllers(), groups._bases(), strict=True) if c == "pids")
        limit = Path(base, V2_FILES["pids"] if groups.v2 else V1_FILES["pids"]).read_text().strip()
        assert limit == str(share), f"{node['name']}: {base} pids.max is {limit}, not {share}"
