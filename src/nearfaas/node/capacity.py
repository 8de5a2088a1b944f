"""A node's CPU capacity (``cpus`` in the cluster file): the whole node, not one worker.

The thesis offloads queries to a SmartNIC about 4× slower than its host; to reproduce that
shape on one machine, a storage node can be given fewer cores than the compute node. The cap
covers everything the node runs: its agent (where S3 Select and the statistics keeper run
their Arrow work) and all its function workers.

How, in order (the first that works is used, and reported in /_nearfaas/health as
``capacity``):
1. **cgroup v2** — ``cpu.max = <cpus × 100000> 100000`` on the node's group
   ``/sys/fs/cgroup/nearfaas-<hash>-<node>``; the agent moves into its child ``agent``
   (v2 keeps processes out of groups that have children with controllers).
2. **cgroup v1** — ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` on the node's group under the
   ``cpu`` hierarchy; CFS bandwidth is hierarchical there too, so the workers' own groups
   (node/jail.py creates them under the same node group) share the node's quota.
3. **threads only** — no writable cgroup: Arrow's thread pool is capped at ⌈cpus⌉, which bounds
   parallelism but not a fraction of a core; the health answer says ``enforced: false`` and why.

Measured on this machine (2-core Firecracker VM, cgroup v1, root): see docs/dataservices.md,
"Node classes".

Worked example: ``cpus: 0.5`` → ``/sys/fs/cgroup/cpu/<own>/nearfaas-1a2b3c4d-storage-0/
cpu.cfs_quota_us = 50000`` and the agent's pid in ``…/agent/cgroup.procs``.

Within the quota the agent's group weighs ``AGENT_WEIGHT`` (16×) a worker group: at 0.05 core
the pre-warm zygote's start (~0.4 s of CPU, 8 s of wall at that quota) or a function spinning
would otherwise take half of every 5 ms period from the agent, and its health answers missed the
gateway's 1 s timeout, so the node was taken for dead while serving.

Known caveats:
* The weight orders the agent first inside the quota only; the quota itself is still shared, so
  an agent doing heavy S3 Select work slows its own workers (by design: that is the node).
* Arrow's thread pool is process-wide: capping it to ⌈cpus⌉ also applies with a cgroup (more
  threads than cores would only queue on the quota).
"""

from __future__ import annotations

import math
import os

from nearfaas.dataservices.decision import CFS_PERIOD_S
from nearfaas import cgroups as cg
from nearfaas.cgroups import CGROUP_ROOT, Cgroups

PERIOD_US = int(CFS_PERIOD_S * 1_000_000)  # the decision engine models the quota with this period
# The agent's weight against each of its node's worker groups inside the node's quota: the agent
# answers health polls and S3 in a few ms of CPU, and a function spinning (or the pre-warm zygote
# importing) must not hold those answers past the gateway's 1 s health timeout, or the node is
# taken for dead with its data. An idle agent takes nothing from the workers.
AGENT_WEIGHT = 16


class CpuCap:
    def __init__(self, state_dir, node: str, cpus: float | None, root: str = CGROUP_ROOT):
        self.cpus, self.enforced, self.method, self.why = cpus, False, "none", ""
        self.group = ""
        self._agent_dir = ""
        self._home = ""
        if cpus is None:
            return
        _cap_arrow_threads(cpus)
        cgroups = Cgroups(state_dir, node, root)
        try:
            own = cg.own_cgroups()
            if cgroups.v2:
                base = cgroups._bases()[0]
                cg.verify(root)
                os.makedirs(base, exist_ok=True)
                cg.enable(root, "+cpu")
                cg.enable(base, "+cpu")
                self._home = os.path.join(root, own.get("", "/").lstrip("/"))
                self.method = "cgroup v2 cpu.max"
            else:
                base = next(b for b in cgroups._bases() if f"{os.sep}cpu{os.sep}" in b)
                cg.verify(os.path.dirname(base))
                os.makedirs(base, exist_ok=True)
                self._home = os.path.join(root, "cpu", own.get("cpu", "/").lstrip("/"))
                self.method = "cgroup v1 cpu.cfs_quota_us"
            cg.set_cpu(base, cpus, cgroups.v2, PERIOD_US)  # raises where the quota cannot be set
            self._agent_dir = os.path.join(base, "agent")
            os.makedirs(self._agent_dir, exist_ok=True)
            cg.set_cpu_weight(self._agent_dir, AGENT_WEIGHT, cgroups.v2)
            cg.join(self._agent_dir)
            self.group, self.enforced = base, True
        except (OSError, StopIteration) as exc:
            self.method = f"threads only (Arrow pool capped at {math.ceil(cpus)})"
            self.why = f"no writable CPU cgroup here: {exc}"

    def throttled(self) -> dict:
        """The group's CPU accounting (v1/v2 ``cpu.stat``): how often and how long it was held back."""
        if not self.group:
            return {}
        return cg.cpu_stat(self.group)

    def describe(self) -> dict:
        return {"cpus": self.cpus, "enforced": self.enforced, "method": self.method, "why": self.why,
                "group": self.group, "cpu_stat": self.throttled()}

    def release(self) -> None:
        """Move the agent back where it came from and remove its group (at shutdown), so the
        node's group can be removed once its workers are gone."""
        if not self._agent_dir:
            return
        try:
            cg.join(self._home)
            os.rmdir(self._agent_dir)
        except OSError:
            pass
        self._agent_dir = ""


def _cap_arrow_threads(cpus: float) -> None:
    try:
        import pyarrow as pa
    except ImportError:
        return
    pa.set_cpu_count(max(1, math.ceil(cpus)))
