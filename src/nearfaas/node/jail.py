"""Isolated, unprivileged workers: each function runs as its own uid, in its own mount
namespace that hides the cluster's state, inside cgroups that bound its memory, pids and CPU.

Mechanism. The node agent (root) decides everything and writes it into a *jail plan*, a small
JSON object; the worker process (still root, still running only our code) applies it to itself
with ``enter(plan)`` right before it imports the handler. Both ways a worker starts go through
that one call in ``runtime/worker.py``: a fresh spawn, and a pre-warmed generic worker that
receives the plan in its specialisation message. ``enter``:

1. joins the cgroups the node made for this instance (``Cgroups.create``; the cgroup half lives
   in nearfaas/cgroups.py, which refuses anything that is not a real cgroup) by writing its pid
   into each ``cgroup.procs`` (a process may only be moved there by root). A pre-warmed worker
   joined groups of its own when it was spawned (a v1 memory join waits for an RCU grace
   period, 5-20 ms here, kept off the cold start); the node writes the function's limits into
   them (``Cgroups.set_limits``) and its plan lists none;
   Then, with a plan's ``net``, a network namespace of its own with loopback only and the
   gateway's address relayed by the node (node/netns.py; the node's half is node/netrelay.py);
2. ``unshare(CLONE_NEWNS | CLONE_NEWIPC)`` (System V shared memory dies with the worker and no
   other tenant attaches it) and marks every mount private, so nothing below leaks out;
3. opens an ``O_PATH`` fd on every folder it must keep seeing (its handler bundle, its
   requirements env, its secrets, its volume, ``<state>/models``, the Python it runs when that lies under a
   hidden folder), then, outer folders first, mounts a tmpfs over every folder it must not see
   (the state directory, ``/tmp``, ``/dev/shm``, and a folder other users cannot traverse above
   the Python, such as ``/root`` of a pyenv install) and bind-mounts those fds back at their
   own paths, read-only but for the function's volume (the fds are opened after step 2: a bind
   source must belong to the caller's namespace). ``/tmp`` and ``/dev/shm`` stay writable: each
   is a fresh tmpfs of the plan's ``tmp_size`` (``x-nearfaas.tmp_size``), so every instance,
   spawned or pre-warmed, starts with an empty /tmp of its own, freed when its last process exits;
4. remounts the state directory's tmpfs read-only, re-enters its working directory in the new
   view, clears supplementary groups, ``setresgid``/``setresuid`` to the function's uid, sets
   ``PR_SET_NO_NEW_PRIVS`` and re-arms ``PR_SET_PDEATHSIG`` (the kernel clears it on a uid
   change, and a worker must still die with its node).
5. loads the default seccomp profile (node/seccomp.py: no namespaces, mounts, ptrace, keyrings,
   bpf, ...; EPERM), with TSYNC, so nothing the function runs can undo steps 1-4.

Everything the worker needs from the hidden state it already holds as file descriptors opened
before step 2: its log (fds 1 and 2), its ready pipe, and the object socket through which the
node hands it object files (node/objectfds.py).

Worked example: function ``resize`` (uid 200001, ``limits: {memory: 128Mi, cpu: 500m}``) on
node ``storage-0`` of a cluster in ``/srv/nf``. The node creates
``/sys/fs/cgroup/{memory,pids,cpu}/<own cgroup>/nearfaas-<hash>-storage-0/resize-storage-0-3fa2c1``
with ``memory.limit_in_bytes=134217728``, ``pids.max=256``, ``cpu.cfs_quota_us=50000`` per
``100000``, then sends the plan ``{"uid": 200001, "gid": 200001, "hide": ["/dev/shm", "/srv/nf",
"/tmp", "/root"], "show": ["/root/.pyenv/versions/3.11.7", "/srv/nf/functions/resize/<digest>",
"/srv/nf/nodes/storage-0/secrets/resize-storage-0-3fa2c1"], "cgroups": [...], "tmp_size": "67108864"}``. Inside, ``ls /srv/nf``
shows only the folders leading to the bundle and the secrets, ``cat /srv/nf/cluster.json`` is
``No such file or directory``, ``kill -0 <node pid>`` is ``Operation not permitted``.

``probe()`` checks all of this once at node start in a forked child (the node refuses to start
when isolation is on and something is missing; ``--isolation off`` skips the jail but keeps the
allow-listed environment and the fd hand-off).

Known caveats:
- The gateway (and, on a storage node, the node's own port) stays reachable from the worker's
  network namespace (node/netns.py): the function's S3 calls and OPENFAAS_URL go there.
- Workers of the same function share its uid, so they can signal one another.
- ``/proc`` is the jail's own (``hidepid=invisible``): a function sees only its uid's
  processes. On a kernel before 5.8 (procfs options shared with the host) it is the host's, and
  a function sees other processes and their command lines (not their environment, memory or
  fds, which need the same uid).
- Outside the state directory the filesystem is what any unprivileged user sees (world-readable
  files, e.g. the checkout, stay readable).
- A spec without ``uid`` (a gateway predating it, or a pool driven directly by a test) gets a
  uid derived from the function name in a range the gateway never assigns (``DERIVED_UID_BASE``);
  two such names collide with odds of one in 2**24.
- cgroup v2 is used at ``/sys/fs/cgroup/nearfaas-*`` under the root (a v2 node cannot enable
  controllers in its own, non-empty cgroup); v1 groups nest under the node's own cgroups. Memory
  charged before a worker joins (the interpreter and runtime, ~40 MB) stays with the node.
- A node killed with -9 cannot remove its workers' (then empty) groups; the node's next start
  on the same state directory sweeps them.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import signal
import sys
from pathlib import Path

from nearfaas.node import netns, seccomp

# The cgroup half lives in nearfaas/cgroups.py; these names stay importable from here for callers.
from nearfaas.cgroups import (CGROUP_ROOT, DEFAULT_MEMORY, DEFAULT_PIDS, V1_CONTROLLERS, CgroupError,  # noqa: F401
                              Cgroups, cpu_cgroup_of, cpu_seconds, default_root, remove_cgroups)
from nearfaas.cgroups import join as _join

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000  # System V IPC and POSIX queues: a segment dies with the worker, no other tenant sees it
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

MIN_UID = 200000                 # the gateway assigns function uids from here up
DERIVED_UID_BASE = 1_000_000_000  # see "Known caveats": never assigned by the gateway
PROBE_UID = MIN_UID - 1          # the probe's stand-in for a function uid; no function has it
TMP_SIZE = "64m"                 # a worker's private /tmp (and /dev/shm) unless its plan says (x-nearfaas.tmp_size)
OPENFAAS_DIR = "/var/openfaas"     # where OpenFaaS functions find /var/openfaas/secrets/<name>
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm")   # hidden by a writable tmpfs of the worker's own, sized by the plan's tmp_size
# Folders of the state directory every function may read: the models `nearfaas apps` builds
# there (jobs/apps.py) and names to inference stages by MODEL_PATH. Platform data, no secrets.
SHARED_STATE = ("models",)
FIX = "or set `isolation: off` in the cluster file to run functions unisolated — unsafe"

# The node's variables a worker may inherit; everything else (keys, tokens, the operator's
# shell) stays with the node. A function's own `environment` and the NEARFAAS_* variables the
# pool sets are added on top.
ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})
ENV_PREFIXES = ("LC_",)


class JailError(Exception):
    """The jail could not be entered or set up; the worker must not run the function."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), "prctl")


# -- the worker side ------------------------------------------------------------------------------

def enter(plan: dict) -> None:
    """Apply a jail plan to this process. Call it single-threaded (a new mount namespace is per
    thread) and before any function code runs. Raises JailError; never returns half-jailed
    without saying so, because the caller then exits instead of serving."""
    try:
        _enter(plan)
    except OSError as exc:
        raise JailError(f"could not isolate the worker: {exc}") from None


def _enter(plan: dict) -> None:
    for folder in plan.get("cgroups") or []:
        _join(folder)  # fails (never creates a file) unless the folder is a real cgroup
    if plan.get("net"):  # its own network namespace (node/netns.py), while the state folder is still writable
        netns.enter(plan["net"])
    cwd = os.getcwd()
    _mount_view(plan)
    os.chdir(cwd)  # the old working directory still points into the hidden tree; look it up anew
    os.environ["HOME"] = "/tmp"
    _drop(int(plan["uid"]), int(plan["gid"]))
    try:  # step 5: the default seccomp profile (node/seccomp.py), last: it forbids mount and unshare
        seccomp.apply()
    except seccomp.SeccompError as exc:
        raise OSError(errno.ENOSYS, str(exc)) from None


def _mount_view(plan: dict) -> None:
    """Steps 2 and 3 of the module docstring: this process's own view of the filesystem."""
    os.umask(0o022)
    _unshare(CLONE_NEWNS | CLONE_NEWIPC)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    shown = {}
    writable = set(plan.get("write") or [])
    for path in sorted(set(plan.get("show") or []) | writable):
        try:
            shown[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open {path} to keep it visible: {exc.strerror}") from None
    hidden = sorted(set(plan.get("hide") or []))
    # Outer folders first, whatever their kind: a folder shown inside a hidden one is bound onto
    # its stand-in, and a hidden folder inside a shown one is covered again after the bind.
    steps = sorted([(p, 0) for p in hidden] + [(p, 1) for p in shown], key=lambda s: (s[0].count("/"), s[0], s[1]))
    for path, show in steps:
        os.makedirs(path, mode=0o755, exist_ok=True)
        if not show:
            # /tmp and /dev/shm: empty, this process's own (freed with the namespace's last process);
            # their pages are charged to the memory cgroup of whoever writes them, the worker's.
            if path in PRIVATE:
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={plan.get('tmp_size') or TMP_SIZE}")
            else:
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={TMP_SIZE}")
            continue
        fd = shown.pop(path)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        # Only the function's own volume stays writable (its folder is 0700 and its uid's).
        _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (0 if path in writable else MS_RDONLY))
        os.close(fd)
    for path in hidden:
        if path not in PRIVATE:  # stand-ins for hidden folders: nothing to write there
            _mount("tmpfs", path, "tmpfs", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if plan.get("secrets"):
        _mount_openfaas_secrets(plan["secrets"])
    _mount_own_proc()


def _mount_own_proc() -> None:
    """A /proc of this mount namespace's own in which other uids' processes do not exist
    (``hidepid=invisible``): the function sees its own processes only, not the node's, the
    gateway's or other tenants' workers' (red team round 7 read their mount tables and socket
    paths). Procfs options are per mount since Linux 5.8; on an older kernel they would apply
    to the host's /proc as well, so there the host's /proc stays (a caveat above)."""
    if tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2] if x.isdigit()) < (5, 8):
        return
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")


def _mount_openfaas_secrets(folder: str) -> None:
    """The instance's secrets, read-only, at /var/openfaas/secrets (OpenFaaS's path), on a
    stand-in /var/openfaas of this namespace's own: the host's (an empty folder made once as the
    mount point) is never written."""
    os.makedirs(OPENFAAS_DIR, mode=0o755, exist_ok=True)
    _mount("tmpfs", OPENFAAS_DIR, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    target = os.path.join(OPENFAAS_DIR, "secrets")
    os.mkdir(target, 0o755)
    _mount(folder, target, None, MS_BIND)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("tmpfs", OPENFAAS_DIR, "tmpfs", MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _drop(uid: int, gid: int) -> None:
    """Step 4: the function's identity, for good."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the node went while we switched: the re-armed signal came too late
        os._exit(0)
    if os.getresuid() != (uid, uid, uid) or os.getgroups():
        raise OSError(errno.EPERM, f"still uid {os.getresuid()} groups {os.getgroups()} after the switch to {uid}")


# -- the node side ------------------------------------------------------------------------------

def function_uid(spec: dict) -> int:
    """The uid a function runs as: the gateway's ``spec["uid"]``, else derived (see caveats)."""
    uid = spec.get("uid")
    if uid is None:
        digest = hashlib.sha256(str(spec["name"]).encode()).digest()
        return DERIVED_UID_BASE + int.from_bytes(digest[:3], "big")
    if isinstance(uid, bool) or not isinstance(uid, int) or uid < MIN_UID or uid >= 2**32 - 1:
        raise ValueError(f"spec uid must be an integer >= {MIN_UID}, got {uid!r}")
    return uid


def allowed_env(environ: dict) -> dict:
    """The part of the node's environment a worker may see."""
    return {k: v for k, v in environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def python_paths() -> list[str]:
    """Folders the worker's interpreter reads from after the switch (lazy imports): our
    package, the venv, the base installation, site-packages and the node's PYTHONPATH."""
    import site

    from nearfaas.node.procs import package_root

    paths = [package_root(), sys.prefix, sys.base_prefix, os.path.dirname(os.__file__), *site.getsitepackages()]
    paths += (os.environ.get("PYTHONPATH") or "").split(os.pathsep)
    return sorted({os.path.realpath(p) for p in paths if p and os.path.isdir(p)})


def plan(uid: int, state_dir: Path, show: list[str], cgroups: list[str], write: list[str] = (),
         tmp_size: int | str = TMP_SIZE, secrets: Path | None = None, net: dict | None = None) -> dict:
    """The jail plan: ``show`` read-only, ``write`` (the function's volume) read-write, a private
    ``/tmp`` and ``/dev/shm`` of ``tmp_size`` each (bytes, or a tmpfs size such as "64m"), the
    instance's ``secrets`` folder (one of ``show``) also at /var/openfaas/secrets, where
    OpenFaaS functions read them, and ``net`` (node/netrelay.Relay.plan): a network namespace
    of its own (its relay folder lies outside the state directory, under /run)."""
    hide = {*PRIVATE, str(Path(state_dir).resolve())}
    show = list(show) + [str(Path(state_dir).resolve() / s) for s in SHARED_STATE if (Path(state_dir) / s).is_dir()]
    shown = {os.path.realpath(p) for p in show}
    wanted = sorted(shown) + python_paths()
    # A folder other users cannot traverse (say /root, 0700, holding a pyenv Python) would stop
    # the function's uid from reaching what it needs below it. The function could see nothing
    # of it anyway, so it gets a stand-in holding exactly the needed paths: no chmod on the host.
    under = lambda p, roots: any(p == r or p.startswith(r + "/") for r in roots)  # noqa: E731
    hide |= {a for a in map(_closed_ancestor, wanted) if a and not under(a, hide)}
    # Whatever the worker needs that lies under a hidden folder is bound back. Python outside
    # the hidden folders is visible anyway; binding it too would only cost mounts.
    keep = sorted({p for p in wanted if under(p, hide) or p in shown}, key=len)
    binds: list[str] = []
    for p in keep:  # a path inside one already bound comes with it
        if not under(p, binds):
            binds.append(p)
    return {"uid": uid, "gid": uid, "hide": sorted(hide), "show": sorted(binds), "cgroups": cgroups, "tmp_size": str(tmp_size),
            "write": sorted(os.path.realpath(p) for p in write), **({"secrets": os.path.realpath(secrets)} if secrets else {}),
            **({"net": net} if net else {})}


def _closed_ancestor(path: str) -> str | None:
    """The outermost folder above ``path`` that other users may not traverse, if any."""
    for parent in reversed(Path(path).parents):
        if str(parent) == "/":
            continue
        try:
            if not os.stat(parent).st_mode & 0o001:
                return str(parent)
        except OSError:
            return None
    return None


def parse_cpu(value: str) -> float:
    """"500m" -> 0.5, "1.5" -> 1.5 CPUs."""
    value = str(value).strip()
    cpus = float(value[:-1]) / 1000 if value.endswith("m") else float(value)
    if cpus <= 0:
        raise ValueError(f"cpu limit must be positive, got {value!r}")
    return cpus


def limits_of(spec: dict) -> dict:
    """{memory: bytes, pids: n, cpu: CPUs or None} from the spec's OpenFaaS ``limits``."""
    from nearfaas.spec.errors import parse_memory

    limits = spec.get("limits") or {}
    memory = parse_memory(limits["memory"]) if limits.get("memory") else DEFAULT_MEMORY
    cpu = parse_cpu(limits["cpu"]) if limits.get("cpu") else None
    return {"memory": memory, "pids": DEFAULT_PIDS, "cpu": cpu}


# -- the probe ----------------------------------------------------------------------------------

_probed: dict[str, list[str]] = {}


def probe(state_dir: Path, node: str, cgroup_root: str | None = None) -> list[str]:
    """What isolation needs and this host lacks, one sentence each (empty: all is there).
    Runs the real steps in a forked child, so nothing here changes the node itself. The cgroup
    root defaults to nearfaas/cgroups.default_root() (``NEARFAAS_CGROUP_ROOT`` or /sys/fs/cgroup)."""
    cgroup_root = cgroup_root or default_root()
    key = f"{Path(state_dir).resolve()}|{node}|{cgroup_root}"
    if key not in _probed:
        _probed[key] = _probe(Path(state_dir), node, cgroup_root)
    return _probed[key]


def _probe(state_dir: Path, node: str, cgroup_root: str) -> list[str]:
    cgroups = Cgroups(state_dir, node, cgroup_root)
    instance = f"probe-{os.getpid()}"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, reported through the pipe
        os.close(read_fd)
        try:
            problems = _probe_child(state_dir, cgroups, instance)
        except BaseException as exc:  # a probe must report, never raise in the child
            problems = [f"the isolation probe failed unexpectedly: {type(exc).__name__}: {exc}"]
        os.write(write_fd, json.dumps(problems).encode())
        os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    try:
        remove_cgroups([os.path.join(b, instance) for b in cgroups._bases()])
        cgroups.close()  # a node that then runs makes its group again; one that does not leaves none
    except OSError:
        pass
    try:
        return json.loads(b"".join(chunks) or b'["the isolation probe died without an answer"]')
    except ValueError:
        return ["the isolation probe answered garbage"]


def _probe_child(state_dir: Path, cgroups: Cgroups, instance: str) -> list[str]:
    problems = cgroups.missing()  # each missing controller by name, with its fix (fail closed)
    try:
        if problems:
            raise CgroupError(errno.ENOENT, "a controller is missing")
        dirs = cgroups.create(instance, {"memory": DEFAULT_MEMORY, "pids": DEFAULT_PIDS, "cpu": 0.5})
        for folder in dirs:
            _join(folder)
    except CgroupError as exc:
        if not problems:
            problems.append(f"the cgroups under {cgroups.root} are not usable for isolation ({exc}); mount the cgroup "
                            f"controllers memory, pids and cpu (with CFS bandwidth) writable for root")
    except (OSError, KeyError) as exc:
        kind = "v2" if cgroups.v2 else "v1 memory, pids and cpu"
        problems.append(f"cannot create and join a cgroup ({kind} under {cgroups.root}: {exc}); mount the cgroup "
                        f"controllers writable for root")
    problems += netns.probe()  # a network namespace of its own (node/netns.py), fail closed
    files = _python_files()  # found while still root: after the switch, finding them is the test
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        _mount_view(plan(PROBE_UID, state_dir, [], []))  # the very view a worker gets
    except OSError as exc:
        problems.append(f"cannot create a private mount namespace with tmpfs and read-only bind mounts ({exc}); "
                        f"run the node agent as root on Linux with mount namespaces (in a container: CAP_SYS_ADMIN)")
    try:
        _drop(PROBE_UID, PROBE_UID)
    except OSError as exc:
        problems.append(f"cannot switch to an unprivileged uid ({exc}); run the node agent as root")
        return problems
    problems += seccomp.probe()
    try:
        os.kill(os.getppid(), 0)
        problems.append("a process of an unprivileged uid may signal the node agent; run the node agent as root")
    except (PermissionError, ProcessLookupError):
        pass
    problems += readability_problems(files)
    return problems


def _python_files() -> list[str]:
    """Files the worker reads after its switch: our package, the runtime's dependencies (the
    request signer imports botocore lazily, after the switch), the standard library. Located,
    not imported: importing botocore alone would add ~0.3 s to every node's start."""
    import importlib.util

    from nearfaas.node.procs import package_root

    files = [os.path.join(package_root(), "nearfaas", "runtime", "worker.py"), os.__file__,
             os.path.join(os.path.dirname(os.__file__), "json", "__init__.py")]
    for module in ("aiohttp", "botocore"):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            files.append(spec.origin)
    return files


def readability_problems(files: list[str]) -> list[str]:
    """For the current (unprivileged) uid: the folders it cannot traverse and the files it
    cannot read among ``files``, each with the chmod that fixes it."""
    problems = []
    for path in files:
        try:
            os.close(os.open(path, os.O_RDONLY))
            continue
        except PermissionError:
            pass
        except FileNotFoundError:
            continue  # not there for anyone: not an isolation problem
        blocked = next((str(p) for p in reversed(Path(path).parents) if not os.access(p, os.X_OK)), None)
        if blocked:
            problem = (f"folder {blocked} is not traversable by other users, and functions run as their own uids "
                       f"and must read {path}; fix: chmod o+x {blocked}")
        else:
            problem = f"file {path} is not readable by other users; fix: chmod -R o+rX {os.path.dirname(path)}"
        if problem not in problems:
            problems.append(problem)
    return problems


def refusal(node: str, problems: list[str]) -> str:
    """The one paragraph a node prints when it cannot isolate functions and will not start."""
    return (f"node {node} cannot isolate functions, so it will not start: " + "; ".join(problems)
            + f". Fix the above, {FIX}.")
