"""The one home of cgroups: create, verify, limit, account and remove the groups functions,
the node agent and the benchmarks run in. Fail closed: nothing here writes a file that is not
already a cgroup file, and a missing controller is an error naming it and the fix.

Mechanism. Every write goes through ``write``: ``open(O_WRONLY)`` without ``O_CREAT``, then
``fstatfs`` on the open file must say cgroup (``CGROUP_SUPER_MAGIC`` 0x27e0eb, v1) or cgroup2
(``CGROUP2_SUPER_MAGIC`` 0x63677270). On a cgroup v1 host ``/sys/fs/cgroup`` itself is a
writable tmpfs: with ``open(path, "w")`` a missing controller silently became a plain file
(``/sys/fs/cgroup/pids/<group>/cgroup.procs``), the start-up probe passed and no limit applied.
``Cgroups.missing`` names each controller the jail needs (memory, pids, cpu with CFS bandwidth)
that this host lacks; ``Cgroups.create`` checks each new folder's controller files; ``set_limits``
raises when a limit's file is not there.

Worked example: ``/sys/fs/cgroup/pids`` is an empty folder on the tmpfs (pids not mounted).
``Cgroups(state, "storage-0").missing()`` is ``["the pids cgroup controller is missing:
/sys/fs/cgroup/pids is a plain folder (tmpfs), not a cgroup v1 hierarchy; fix: mount it (mkdir
-p /sys/fs/cgroup/pids && mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids) ..."]`` and the
node refuses to start (node/jail.py ``probe``/``refusal``); ``write(".../cgroup.procs", pid)``
raises ``CgroupError`` and creates nothing.

``NEARFAAS_CGROUP_ROOT`` moves the root (default ``/sys/fs/cgroup``) for the node's jail and
probe; tests use it to present a host with a controller missing. It cannot weaken anything:
whatever it points at is verified like the default.

Known caveats:
- v1 controllers must each be mounted at ``<root>/<controller>`` (a co-mounted ``cpu,cpuacct``
  is found through its usual ``cpu`` link).
- econ/rpwu.py and econ/headroom_rig.py start their load through ``sh -c 'echo $$ > cgroup.procs'``
  (so it starts inside the quota); the shell's ``>`` may create, but only after ``make_cpu_group``
  verified the folder is a real cgroup, where no file can be created.
- cgroup v2 groups sit under the root (``<root>/nearfaas-*``): a v2 node cannot enable
  controllers in its own, non-empty cgroup.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import signal
from pathlib import Path

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_SUPER_MAGIC = 0x27E0EB
CGROUP2_SUPER_MAGIC = 0x63677270
TMPFS_MAGIC = 0x01021994
PERIOD_US = 100000
DEFAULT_MEMORY = 1 << 30
DEFAULT_PIDS = 256
V1_CONTROLLERS = ("memory", "pids", "cpu")
# The file each controller must give a (non-root) group, v1 and v2: without it the limit the
# jail promises cannot be written.
V1_FILES = {"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us"}
V2_FILES = {"memory": "memory.max", "pids": "pids.max", "cpu": "cpu.max"}
FIX_HINT = {"cpu": "a kernel with CFS bandwidth control (CONFIG_CFS_BANDWIDTH) and the cpu controller mounted"}


class CgroupError(OSError):
    """A cgroup is not what isolation needs: not a cgroup, a controller or a limit missing."""


class _Statfs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 256)]


_libc = ctypes.CDLL(None, use_errno=True)


def fs_magic(path: str | int) -> int | None:
    """The filesystem type (statfs f_type) of a path or an open fd; None if it cannot be read."""
    buf = _Statfs()
    rc = _libc.fstatfs(path, ctypes.byref(buf)) if isinstance(path, int) else _libc.statfs(os.fsencode(path), ctypes.byref(buf))
    return None if rc != 0 else buf.f_type & 0xFFFFFFFF


def is_cgroup(path: str | int) -> bool:
    return fs_magic(path) in (CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC)


def _kind(path: str) -> str:
    if not os.path.exists(path):
        return "missing"
    magic = fs_magic(path)
    name = {TMPFS_MAGIC: "tmpfs"}.get(magic, f"filesystem type {magic:#x}" if magic is not None else "unknown filesystem")
    return f"a plain {'folder' if os.path.isdir(path) else 'file'} ({name})"


def verify(folder: str, files: tuple[str, ...] = ()) -> None:
    """Raise CgroupError unless ``folder`` is a cgroup holding every one of ``files``."""
    if not is_cgroup(folder):
        raise CgroupError(errno.ENOTDIR, f"{folder} is {_kind(folder)}, not a cgroup")
    for name in files:
        if not os.path.exists(os.path.join(folder, name)):
            raise CgroupError(errno.ENOENT, f"cgroup {folder} has no {name}")


def write(path: str, value: str | int) -> None:
    """Write an existing cgroup file: never creates one, never writes anything but a cgroup."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)  # no O_CREAT: a missing file is an error
    except FileNotFoundError:
        raise CgroupError(errno.ENOENT, f"{path} does not exist: not a cgroup, or its controller is missing") from None
    try:
        if not is_cgroup(fd):
            raise CgroupError(errno.EINVAL, f"{path} is not a cgroup file ({_kind(path)}): its controller is not mounted")
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def join(folder: str, pid: int | None = None) -> None:
    """Move ``pid`` (default: this process) into the cgroup ``folder``."""
    write(os.path.join(folder, "cgroup.procs"), pid or os.getpid())


def own_cgroups() -> dict[str, str]:
    """controller -> this process's group ("" for v2), from /proc/self/cgroup."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(","):
                own[c] = path
    return own


def default_root() -> str:
    return os.environ.get("NEARFAAS_CGROUP_ROOT") or CGROUP_ROOT


def is_v2(root: str) -> bool:
    return fs_magic(root) == CGROUP2_SUPER_MAGIC


def make_cpu_group(parent: str, name: str, cpus: float | None, v2: bool, period_us: int = PERIOD_US) -> str:
    """mkdir ``parent/name`` (a cgroup), with a CPU quota of ``cpus`` cores; its path. v2: the
    parent must already delegate +cpu (``enable``)."""
    verify(parent)
    folder = os.path.join(parent, name)
    os.makedirs(folder, exist_ok=True)
    try:
        set_cpu(folder, cpus, v2, period_us)
    except OSError:
        remove_cgroups([folder])
        raise
    return folder


def enable(folder: str, controllers: str) -> None:
    """v2: let ``folder``'s children use ``controllers`` ("+cpu +memory")."""
    write(os.path.join(folder, "cgroup.subtree_control"), controllers)


def set_cpu(folder: str, cpus: float | None, v2: bool, period_us: int = PERIOD_US) -> None:
    """A CPU quota (None: none) on a group; raises when the group has no quota file."""
    quota = max(1000, round(cpus * period_us)) if cpus else None
    if v2:
        verify(folder, ("cpu.max",))
        write(os.path.join(folder, "cpu.max"), f"{quota or 'max'} {period_us}")
        return
    try:
        verify(folder, ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
    except CgroupError as exc:
        raise CgroupError(exc.errno, f"cannot set a CPU quota: {exc.strerror}; needs {FIX_HINT['cpu']}") from None
    write(os.path.join(folder, "cpu.cfs_period_us"), period_us)
    write(os.path.join(folder, "cpu.cfs_quota_us"), quota or -1)


def set_cpu_weight(folder: str, factor: int, v2: bool) -> None:
    """A group's share of its parent's CPU relative to a default sibling (``factor`` × the
    default: v2 ``cpu.weight`` 100, v1 ``cpu.shares`` 1024) when both want more than the parent
    has; it takes nothing from anyone while it is idle."""
    name, default, top = ("cpu.weight", 100, 10000) if v2 else ("cpu.shares", 1024, 262144)
    verify(folder, (name,))
    write(os.path.join(folder, name), min(top, default * factor))


def cpu_stat(folder: str) -> dict[str, int]:
    """A group's ``cpu.stat`` (throttling and, on v2, usage); {} when unreadable."""
    try:
        return {k: int(v) for k, v in (line.split()[:2] for line in read(os.path.join(folder, "cpu.stat")).splitlines() if line.strip())}
    except (OSError, ValueError):
        return {}
class Cgroups:
    """Per-worker cgroups of one node: ``create`` before the worker joins, ``remove`` once it
    is reaped. v2 when ``<root>/cgroup.controllers`` exists, else v1 (memory, pids, cpu)."""

    def __init__(self, state_dir: Path, node: str, root: str | None = None):
        self.root = root = root or default_root()
        tag = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
        self.group = f"nearfaas-{tag}-{node}"  # one node owns it; two clusters never share one
        self.v2 = is_v2(root)
        # Where this process was when the node started: the node's groups hang there even after
        # the agent moves itself into its own capped group (node/capacity.py).
        self._own = {} if self.v2 else own_cgroups()

    def _controllers(self) -> list[str]:
        controllers = list(V1_CONTROLLERS)
        # cpuacct meters the CPU time the autoscaler's ``cpu`` type reads (cpu_seconds): its own
        # group where its hierarchy is mounted apart from cpu's; co-mounted, cpu's group has it.
        accounting = os.path.join(self.root, "cpuacct")
        if is_cgroup(accounting) and os.path.realpath(accounting) != os.path.realpath(os.path.join(self.root, "cpu")):
            controllers.append("cpuacct")
        return controllers

    def _bases(self) -> list[str]:
        if self.v2:
            return [os.path.join(self.root, self.group)]
        own = self._own
        return [os.path.join(self.root, c, own.get(c, "/").lstrip("/"), self.group) for c in self._controllers()]

    def controller_of(self, folder: str) -> str:
        """v1: the controller of one of this node's instance groups (from its hierarchy)."""
        for c, base in zip(self._controllers(), self._bases(), strict=True):
            if os.path.dirname(os.path.normpath(folder)) == base:
                return c
        raise CgroupError(errno.EINVAL, f"{folder} is not one of node group {self.group}'s cgroups")

    def missing(self) -> list[str]:
        """Each controller the jail needs that this host lacks, one sentence each with the fix."""
        problems = []
        if self.v2:
            try:
                have = read(os.path.join(self.root, "cgroup.controllers")).split()
            except OSError:
                have = []
            for c in V1_CONTROLLERS:
                if c not in have:
                    problems.append(f"the {c} cgroup controller is missing from cgroup v2 at {self.root} (cgroup.controllers: "
                                    f"{' '.join(have) or 'none'}); fix: enable it in the kernel and for this root "
                                    f"({FIX_HINT.get(c, f'the {c} controller')})")
            return problems
        for c in V1_CONTROLLERS:
            mount = os.path.join(self.root, c)
            if is_cgroup(mount) and c in self._own:
                continue
            what = _kind(mount) if not is_cgroup(mount) else "a cgroup this process is not in"
            problems.append(f"the {c} cgroup controller is missing: {mount} is {what}, not a cgroup v1 {c} hierarchy "
                            f"(and {self.root} is not cgroup v2); fix: mount it (mkdir -p {mount} && mount -t cgroup -o {c} "
                            f"cgroup {mount}) or boot with cgroup v2")
        return problems

    def create(self, instance: str, limits: dict) -> list[str]:
        """The instance's cgroup folders, verified and limits written; the worker joins them
        itself. Raises CgroupError naming a missing controller."""
        dirs = []
        try:
            for base in self._ready_bases():
                dirs.append(os.path.join(base, instance))
                os.mkdir(dirs[-1])
                verify(dirs[-1], ("cgroup.procs",))
            self.set_limits(dirs, limits)
            return dirs
        except OSError:
            remove_cgroups(dirs)
            raise

    def _ready_bases(self) -> list[str]:
        """The node's own group folders, made (v2: with the controllers delegated to them);
        CgroupError naming each controller this host lacks."""
        problems = self.missing()
        if problems:
            raise CgroupError(errno.ENOENT, "; ".join(problems))
        bases = self._bases()
        for base in bases:
            os.makedirs(base, exist_ok=True)
        if self.v2:
            enable(self.root, "+memory +pids +cpu")
            enable(bases[0], "+memory +pids +cpu")
        return bases

    def limit_total(self, controller: str, limit: int) -> None:
        """A limit on the node's own group of ``controller`` (memory or pids), over all its
        instance groups together. Memory: their pages and what they write to their tmpfs /tmp;
        past it the kernel reclaims, then stops one of this node's workers, never the gateway or
        another node. Pids: processes and threads; past it a fork in any of the node's workers
        fails (EAGAIN), the host's pid space (``kernel.pid_max``, 32768 here) is never used up
        by one tenant's fork bombs in many workers (each worker alone is held to DEFAULT_PIDS).
        Raises CgroupError where the limit cannot be written (never skipped)."""
        bases = self._ready_bases()
        base = bases[0] if self.v2 else next(b for c, b in zip(self._controllers(), bases, strict=True) if c == controller)
        name = V2_FILES[controller] if self.v2 else V1_FILES[controller]
        verify(base, (name,))
        write(os.path.join(base, name), str(limit))

    def cpu_groups(self, dirs: list[str]) -> list[str]:
        """Of an instance's folders, those its CPU time is charged to (v1 cpu and cpuacct)."""
        return list(dirs) if self.v2 else [d for d in dirs if self.controller_of(d) in ("cpu", "cpuacct")]

    def set_limits(self, dirs: list[str], limits: dict) -> None:
        """Write ``limits`` into an instance's groups (also groups a worker is in already: a
        pre-warmed one joins its groups when it is spawned and gets the function's limits when
        it is specialised). Raises CgroupError when a group lacks its controller's file (never
        skips a limit); a memory limit below what the group uses fails with EBUSY."""
        for folder in dirs:
            if self.v2:
                verify(folder, tuple(V2_FILES.values()))
                write(os.path.join(folder, "memory.max"), str(limits["memory"]))
                write(os.path.join(folder, "pids.max"), str(limits["pids"]))
                set_cpu(folder, limits.get("cpu"), True)
                continue
            controller = self.controller_of(folder)
            if controller == "cpuacct":
                verify(folder)  # accounting only: no limit lives here
            elif controller == "cpu":
                set_cpu(folder, limits.get("cpu"), False)
            else:
                try:
                    verify(folder, (V1_FILES[controller],))
                except CgroupError as exc:
                    raise CgroupError(exc.errno, f"the {controller} limit cannot be set: {exc.strerror}") from None
                if controller == "pids":
                    write(os.path.join(folder, "pids.max"), str(limits["pids"]))
                    continue
                memsw = os.path.join(folder, "memory.memsw.limit_in_bytes")
                # memory+swap must stay >= memory: lower it after, raise it before, the other.
                order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                if os.path.exists(memsw) and int(read(memsw)) < limits["memory"]:
                    order.reverse()
                for name in order:
                    if os.path.exists(os.path.join(folder, name)):  # memsw: only with swap accounting
                        write(os.path.join(folder, name), str(limits["memory"]))

    def close(self) -> None:
        """Remove this node's (empty) group folders, at shutdown."""
        remove_cgroups(self._bases(), kill=False)

    def sweep(self) -> None:
        """Remove empty groups a previous run of this node left (it was killed with -9, say)."""
        for base in self._bases():
            try:
                names = [e.name for e in os.scandir(base) if e.is_dir()]
            except OSError:
                continue
            remove_cgroups([os.path.join(base, n) for n in names], kill=False)


class MemoryGroup:
    """A memory cgroup of its own for one of the platform's long-running processes outside the
    nodes (the fast-path executor, cluster/launcher.py), with a limit: ``create(limit)`` before
    the process starts (CgroupError naming the missing memory controller and the fix), ``join``
    once it is spawned, ``remove`` at ``nearfaas down``. It sits where the nodes' groups do (v1:
    under the starting process's memory group; v2: under the root), named
    ``nearfaas-<state dir tag>.<name>`` (a node's name has no dot, so the two never meet).

    Worked example (red team round 5, N2): ``MemoryGroup(state, "fastpath").create(1879048192)``
    on a v1 host whose launcher is in memory group ``/user.slice`` makes
    ``/sys/fs/cgroup/memory/user.slice/nearfaas-1a2b3c4d.fastpath`` with
    ``memory.limit_in_bytes`` 1879048192 (and memsw where swap is accounted); ``join(pid)`` moves
    the executor there, and a stack of tenant lambdas can no longer grow it past 1.75 GiB.

    Known caveats: pages the process touched before ``join`` stay charged to its old group (v1
    moves no charges; the executor has run no tenant code by then). Past the limit the kernel
    reclaims, then kills the executor (the fast path stops; the host and the nodes do not).
    """

    def __init__(self, state_dir: Path, name: str, root: str | None = None, folder: str | None = None):
        """``folder``: where ``up`` made it (its layout records it), for a ``down`` run from
        another cgroup; only a folder of this group's name is taken."""
        self.root = root or default_root()
        tag = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
        self.name = f"nearfaas-{tag}.{name}"
        self.v2 = is_v2(self.root)
        if folder and os.path.basename(os.path.normpath(folder)) == self.name:
            self.folder = folder
        elif self.v2:
            self.folder = os.path.join(self.root, self.name)
        else:
            own = own_cgroups().get("memory", "/")
            self.folder = os.path.join(self.root, "memory", own.lstrip("/"), self.name)
        self.limit_file = V2_FILES["memory"] if self.v2 else V1_FILES["memory"]

    def missing(self) -> str | None:
        """Why this host cannot give the group a memory limit (the fix named), or None."""
        if self.v2:
            try:
                have = read(os.path.join(self.root, "cgroup.controllers")).split()
            except OSError:
                have = []
            if "memory" in have:
                return None
            return (f"the memory cgroup controller is missing from cgroup v2 at {self.root} (cgroup.controllers: "
                    f"{' '.join(have) or 'none'}); fix: enable it in the kernel and for this root")
        mount = os.path.join(self.root, "memory")
        if is_cgroup(mount):
            return None
        return (f"the memory cgroup controller is missing: {mount} is {_kind(mount)}, not a cgroup v1 memory hierarchy "
                f"(and {self.root} is not cgroup v2); fix: mount it (mkdir -p {mount} && mount -t cgroup -o memory cgroup "
                f"{mount}) or boot with cgroup v2")

    def create(self, limit: int) -> str:
        """Make the group (or reuse an empty one a killed run left) with ``limit`` bytes; its
        folder. Raises CgroupError naming what is missing; never leaves a group without it."""
        problem = self.missing()
        if problem:
            raise CgroupError(errno.ENOENT, problem)
        if self.v2:
            enable(self.root, "+memory")
        try:
            os.makedirs(self.folder, exist_ok=True)
            verify(self.folder, ("cgroup.procs", self.limit_file))
            if self.v2:
                write(os.path.join(self.folder, "memory.max"), str(limit))
                if os.path.exists(os.path.join(self.folder, "memory.swap.max")):
                    write(os.path.join(self.folder, "memory.swap.max"), "0")  # the limit is not sidestepped into swap
            else:
                memsw = os.path.join(self.folder, "memory.memsw.limit_in_bytes")
                order = [self.limit_file, "memory.memsw.limit_in_bytes"]  # memsw >= memory at every step
                if os.path.exists(memsw) and int(read(memsw)) < limit:
                    order.reverse()
                for name in order:
                    if os.path.exists(os.path.join(self.folder, name)):
                        write(os.path.join(self.folder, name), str(limit))
        except OSError:
            remove_cgroups([self.folder], kill=False)
            raise
        return self.folder

    def join(self, pid: int) -> None:
        join(self.folder, pid)

    def limit(self) -> int | None:
        """The group's memory limit in bytes (None: none set, or no group)."""
        try:
            value = read(os.path.join(self.folder, self.limit_file))
        except OSError:
            return None
        return None if value == "max" else int(value)

    def remove(self) -> list[str]:
        """Kill what is left in the group and remove it (``remove_cgroups``); only a cgroup."""
        return remove_cgroups([self.folder]) if is_cgroup(self.folder) else []


def cpu_seconds(dirs: list[str]) -> float | None:
    """CPU time used so far by the processes of an instance's cgroups (v1 ``cpuacct.usage``,
    v2 ``cpu.stat``); None where none of them meters it."""
    for folder in dirs:
        try:
            return int(read(os.path.join(folder, "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            pass
        try:
            stat = dict(line.split() for line in read(os.path.join(folder, "cpu.stat")).splitlines())
            if "usage_usec" in stat:
                return int(stat["usage_usec"]) / 1e6
        except (OSError, ValueError):
            pass
    return None


def cpu_cgroup_of(pid: int, root: str = CGROUP_ROOT) -> str | None:
    """The cgroup folder that meters ``pid``'s CPU time (a container's, found from its init)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, path in lines:
        if "cpuacct" in controllers.split(","):
            folder = os.path.join(root, controllers, path.lstrip("/"))
            if os.path.isdir(folder):
                return folder
    v2_root = root if os.path.exists(os.path.join(root, "cgroup.controllers")) else os.path.join(root, "unified")
    for _, controllers, path in lines:
        if controllers == "" and path != "/":
            return os.path.join(v2_root, path.lstrip("/"))
    return None


def remove_cgroups(dirs: list[str], kill: bool = True) -> list[str]:
    """rmdir each cgroup; with ``kill``, first SIGKILL whatever is still in it (a process the
    handler started in a session of its own escapes the group kill, never its cgroup). Returns
    the folders still there (a process that has not finished dying yet)."""
    left = []
    for folder in dirs:
        if kill:
            try:
                with open(os.path.join(folder, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            except OSError:
                pass
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            pass
        except OSError:
            left.append(folder)
    return left


