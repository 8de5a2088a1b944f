"""Nothing a test run starts outlives it: the run's cgroups and the watchdog that empties them.

A test run starts clusters (a gateway, storage nodes, the fast path), jailed and pre-warmed
workers, containers, Ray heads and raylets, registries and FUSE mounts. Fixtures stop them when
a test ends, and ``tests/conftest.py`` turns SIGTERM into the same orderly stop as Ctrl-C; this
module is what still holds when that is not enough: a run killed with SIGKILL, a teardown cut
short by a second signal, an xdist worker the controller killed, a process a test forgot.

Mechanism:
1. Before pytest starts anything, ``Session.start`` makes one group for the run in every
   cgroup v1 hierarchy this process may write (``<own group>/nearfaas-tests-<pid>``; freezer,
   pids, memory, cpu, …; on a cgroup v2-only host one v2 group) and moves pytest into them.
   Everything started later is born inside: the nodes nest their workers' groups under their
   own (node/jail.py), OCI runtimes nest a container's under their caller's, and nothing in
   nearfaas moves a process in the freezer hierarchy, so that group holds every descendant.
2. It starts the watchdog (``python reaper.py``) first, in a session of its own and outside the
   groups, holding the read end of a pipe whose write end only pytest has. Whatever ends pytest,
   the kernel closes that end, and the watchdog reads EOF. A clean end closes it on purpose
   (``Session.finish``) after pytest has left the groups, and waits for the report.
3. The watchdog then sweeps (``sweep``): freeze the groups, SIGKILL every process in them and
   thaw, until they are empty; SIGKILL any process left whose command line names one of the
   run's folders (a host without writable cgroups gets this alone); remove the run's groups,
   deepest first, and the ``nearfaas-<tag>-*`` groups nodes of the run's state folders made
   outside them (v2 puts those at the root); unmount what is mounted under the run's folders;
   delete network namespaces of dead headroom rigs (econ/headroom_rig.sweep_stale); remove the
   run's Ray temp folder (``RAY_TMPDIR``), so no ``ray_current_cluster`` names a dead GCS.
4. It writes what it found and did to ``<basetemp>/reaper.json``; the run prints a line of it.

Worked example: ``make test`` as pid 4242 on this VM (cgroup v1) makes
``/sys/fs/cgroup/freezer/nearfaas-tests-4242`` (and the same in pids, memory, cpu, …), a
storage node's worker lands in ``/sys/fs/cgroup/pids/nearfaas-tests-4242/nearfaas-1a2b3c4d-
storage-0/echo-…``; ``kill -TERM 4242`` stops the clusters through their fixtures, and the
watchdog finds the groups empty, removes them and reports ``{"killed": [], …}``.

Known caveats:
- Without root (or with a read-only /sys/fs/cgroup), only the command-line sweep runs: a
  process that names none of the run's folders (a handler's daemon that re-execs) can escape.
- cgroup v1 lets any root process move itself to another freezer group; nothing here does.
- The watchdog itself can be SIGKILLed; then the run's groups stay until the next run's sweep of
  groups whose pytest is gone (``sweep_stale_runs``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the watchdog runs as a script
from nearfaas.cluster.launcher import _ancestors, cmdline as _cmdline
from nearfaas.cgroups import is_cgroup
from nearfaas.cgroups import join as _join
from nearfaas.cgroups import remove_cgroups
from nearfaas.cgroups import write as _write
from nearfaas.pids import alive as _alive

CGROUP_ROOT = "/sys/fs/cgroup"
PREFIX = "nearfaas-tests-"
SKIP_HIERARCHIES = {"", "name=systemd"}  # v2 on a hybrid host is read by node/jail.cpu_cgroup_of; systemd's is not ours


def _own_groups() -> dict[str, str]:
    """hierarchy (its mount folder under /sys/fs/cgroup) -> this process's group in it."""
    own = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers in SKIP_HIERARCHIES:
                continue
            for name in (controllers, *controllers.split(",")):  # co-mounted: "cpu,cpuacct", or one folder each
                if os.path.isdir(os.path.join(CGROUP_ROOT, name)):
                    own[os.path.join(CGROUP_ROOT, name)] = path
                    break
    if not own and os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):  # v2 only
        with open("/proc/self/cgroup") as f:
            path = next((line.rstrip("\n").split(":", 2)[2] for line in f if line.startswith("0::")), "/")
        own[CGROUP_ROOT] = path
    return own


def _tree(top: str) -> list[str]:
    """``top`` and every group below it, deepest first."""
    found = []
    for folder, _, _ in os.walk(top):
        found.append(folder)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def _pids_in(top: str) -> set[int]:
    pids = set()
    for folder in _tree(top):
        with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.procs")) as f:
            pids.update(int(p) for p in f.read().split())
    return pids


def _describe(pid: int) -> str:
    return f"{pid} {' '.join(_cmdline(pid))[:160]}"


class Session:
    """The run's side: groups, the watchdog, and the report (tests/conftest.py drives it)."""

    def __init__(self, basetemp: Path, ray_tmpdir: Path | None):
        """``ray_tmpdir``: the Ray temp folder the run made (removed at the end), None when the
        caller named its own (kept)."""
        self.basetemp, self.ray_tmpdir = Path(basetemp), ray_tmpdir
        self.report_path = self.basetemp / "reaper.json"
        self.name = f"{PREFIX}{os.getpid()}"
        self.own: dict[str, str] = {}
        self.groups: list[str] = []
        self.watchdog: subprocess.Popen | None = None
        self._pipe_w: int | None = None

    def start(self) -> None:
        self.report_path.unlink(missing_ok=True)
        read_end, self._pipe_w = os.pipe()  # both close-on-exec: no child of pytest holds the write end
        config = {"groups": [], "folders": [str(self.basetemp), str(self.ray_tmpdir or "")], "ray_tmpdir": str(self.ray_tmpdir or ""),
                  "report": str(self.report_path), "pytest_pid": os.getpid(), "spare": sorted(_ancestors())}
        if os.geteuid() == 0:
            self.own = _own_groups()
            for hierarchy, path in self.own.items():
                group = os.path.join(hierarchy, path.lstrip("/"), self.name)
                if not is_cgroup(hierarchy):  # a plain folder on v1's tmpfs: nothing to contain
                    continue
                with contextlib.suppress(OSError):
                    os.makedirs(group, exist_ok=True)
                    self.groups.append(group)
        config["groups"] = self.groups
        # The watchdog starts outside the groups, so that it is not among what it kills.
        self.watchdog = subprocess.Popen([sys.executable, __file__, str(read_end), json.dumps(config)], pass_fds=[read_end],
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(read_end)
        for group in self.groups:
            with contextlib.suppress(OSError):
                _join(group)

    def finish(self, timeout: float = 120.0) -> dict:
        """Leave the groups, let the watchdog sweep, and return its report."""
        for hierarchy, path in self.own.items():
            with contextlib.suppress(OSError):
                _join(os.path.join(hierarchy, path.lstrip("/")))
        if self._pipe_w is not None:
            os.close(self._pipe_w)
            self._pipe_w = None
        if self.watchdog is not None:
            try:
                self.watchdog.wait(timeout)
            except subprocess.TimeoutExpired:
                return {"error": f"the watchdog (pid {self.watchdog.pid}) did not finish within {timeout:g}s"}
        try:
            return json.loads(self.report_path.read_text())
        except (OSError, ValueError) as exc:
            return {"error": f"no report from the watchdog: {exc}"}


# -- the watchdog -----------------------------------------------------------------------------


def _kill_groups(groups: list[str], deadline: float) -> list[str]:
    """SIGKILL everything in the groups (frozen meanwhile where a freezer is among them, so
    nothing forks past the kill) until they are empty; returns what was killed."""
    killed: dict[int, str] = {}
    freezers = [g for g in groups if os.path.exists(os.path.join(g, "freezer.state"))]
    while time.monotonic() < deadline:
        pids = set().union(*(_pids_in(g) for g in groups)) - {os.getpid()}
        pids = {p for p in pids if _alive(p)}
        if not pids:
            break
        for g in freezers:
            with contextlib.suppress(OSError):
                _write(os.path.join(g, "freezer.state"), "FROZEN")
        for pid in pids:
            killed.setdefault(pid, _describe(pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for g in freezers:
            with contextlib.suppress(OSError):
                _write(os.path.join(g, "freezer.state"), "THAWED")
        time.sleep(0.05)
    return list(killed.values())


def _names_a_folder(pid: int, folders: list[str]) -> bool:
    """Whether an argument is one of ``folders`` or a path under one (``--state=<f>/x`` too;
    ``<f>0`` is another folder)."""
    alternatives = "|".join(re.escape(f.rstrip("/")) for f in folders)
    pattern = re.compile(f"({alternatives})(/|$)")
    return any(pattern.search(a) for a in _cmdline(pid))


def _kill_by_command_line(folders: list[str], spare: set[int], deadline: float) -> list[str]:
    """Processes that name one of the run's folders (the sweep where cgroups are out of reach),
    except ``spare``: pytest and what started it (a shell given ``--basetemp``, say)."""
    killed = []
    spare = spare | {os.getpid()}
    while time.monotonic() < deadline:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in spare]
        found = [p for p in pids if _alive(p) and _names_a_folder(p, folders)]
        if not found:
            break
        for pid in found:
            killed.append(_describe(pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return killed


def state_dir_tags(folders: list[str]) -> set[str]:
    """The cgroup tags (node/jail.Cgroups) of every cluster state folder under ``folders``: a
    state folder holds ``cluster.json``."""
    import hashlib

    tags = set()
    for top in folders:
        for folder, _, files in os.walk(top):
            if "cluster.json" in files:
                tags.add(hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:8])
    return tags


def _node_groups(tags: set[str]) -> list[str]:
    """Groups named ``nearfaas-<tag>-<node>`` (or ``nearfaas-oci-…`` under them) anywhere in
    the cgroup hierarchies, for the run's tags, deepest first."""
    if not tags or not os.path.isdir(CGROUP_ROOT):
        return []
    pattern = re.compile(f"nearfaas-({'|'.join(sorted(tags))})-")
    found = []
    for folder, dirs, _ in os.walk(CGROUP_ROOT):
        for d in list(dirs):
            if pattern.match(d):
                found.extend(_tree(os.path.join(folder, d)))
                dirs.remove(d)
            elif d.startswith(PREFIX):
                dirs.remove(d)  # the run's own groups are removed as a whole
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def _remove(groups: list[str]) -> list[str]:
    """Each group and everything below it, deepest first; returns what could not be removed."""
    return [left for group in groups if os.path.isdir(group) for left in remove_cgroups(_tree(group), kill=False)]


def _mounts_under(folders: list[str]) -> list[str]:
    mounts = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if any(point == f or point.startswith(f.rstrip("/") + "/") for f in folders):
                mounts.append(point)
    return sorted(mounts, key=len, reverse=True)


def _unmount(points: list[str]) -> list[str]:
    for point in points:
        if shutil.which("fusermount3"):
            subprocess.run(["fusermount3", "-uz", point], capture_output=True)
        subprocess.run(["umount", "-l", point], capture_output=True)
    return points


def sweep(config: dict) -> dict:
    folders = [f for f in config["folders"] if f]
    deadline = time.monotonic() + 60
    report: dict = {"killed": _kill_groups(config["groups"], deadline)}
    report["killed_by_command_line"] = _kill_by_command_line(folders, set(config["spare"]), deadline)
    tags = state_dir_tags(folders)
    report["mounts"] = _unmount(_mounts_under(folders))
    node_groups = _node_groups(tags)
    report["node_groups_removed"] = [g for g in node_groups if not _remove([g])]
    report["groups_left"] = _remove(config["groups"])
    try:
        from nearfaas.econ import headroom_rig

        headroom_rig.sweep_stale()
    except Exception as exc:  # a sweep that cannot run says so in the report; the rest still ran
        report["netns_sweep"] = f"failed: {exc!r}"
    ray_dir = config.get("ray_tmpdir")
    report["ray_sessions"] = sorted(p.name for p in Path(ray_dir, "ray").glob("session_*")) if ray_dir else []
    if ray_dir:
        shutil.rmtree(ray_dir, ignore_errors=True)
    report["pytest_exited"] = not _alive(config["pytest_pid"])
    return report


def watch(read_fd: int, config: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the terminal's group must not stop the sweep
    while os.read(read_fd, 4096):
        pass
    report = sweep(config)
    tmp = config["report"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, config["report"])


def summary(report: dict) -> str:
    """One line for the end of a run."""
    if "error" in report:
        return f"reaper: {report['error']}"
    left = report.get("killed", []) + report.get("killed_by_command_line", [])
    parts = []
    if left:
        parts.append(f"killed {len(left)} process(es) left behind: " + "; ".join(left[:5]) + (" …" if len(left) > 5 else ""))
    if report.get("mounts"):
        parts.append(f"unmounted {', '.join(report['mounts'])}")
    if report.get("node_groups_removed"):
        parts.append(f"removed {len(report['node_groups_removed'])} node cgroup(s)")
    if report.get("groups_left"):
        parts.append(f"could not remove {', '.join(report['groups_left'])}")
    return "reaper: " + ("; ".join(parts) if parts else "nothing was left behind")


def sweep_stale_runs() -> list[str]:
    """Groups of earlier runs whose pytest is gone (their watchdog was killed too): emptied and
    removed. Called at the start of a run."""
    removed = []
    for hierarchy, path in _own_groups().items():
        base = os.path.join(hierarchy, path.lstrip("/"))
        with contextlib.suppress(OSError):
            for entry in os.scandir(base):
                m = re.fullmatch(PREFIX + r"(\d+)", entry.name)
                if m and entry.is_dir() and not _alive(int(m.group(1))):
                    _kill_groups([entry.path], time.monotonic() + 10)
                    if not _remove([entry.path]):
                        removed.append(entry.path)
    return removed


if __name__ == "__main__":
    watch(int(sys.argv[1]), json.loads(sys.argv[2]))
