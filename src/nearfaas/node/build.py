"""A function's requirements, built as the function: pip runs in the function's jail, as its uid.

Why a module of its own: pip runs code the deployer wrote. A requirement such as ``./evil``
with an in-tree PEP 517 backend (``build-backend = "backend"``, ``backend-path = ["."]``), or
any sdist's ``setup.py``, is executed by pip while it builds. Run by the node, that code was
root outside every jail (issue 39, finding 3). Here it runs where the function's own code runs:

- ``pip install --target <envs>/<digest>.partial`` is started as ``python -m
  nearfaas.node.build --plan <jail plan> -- <pip args>``; that process applies the plan with
  ``jail.enter`` (the same call every worker makes: the function's uid, a mount namespace that
  hides the state directory, no_new_privs, the seccomp profile, fresh cgroups with a build's
  limits) and only then execs pip;
- the only folders of the state directory it sees are its output folder and a scratch folder
  (both the function's uid's, 0700), read-write; the bundle is seen through a hard-linked copy
  in the scratch folder (pip builds local projects in place; the bundle itself stays
  untouched);
- the node then renames the output into ``<envs>/<digest>`` and writes the marker
  ``<envs>/<digest>.complete`` itself, outside anything the build could write;
- the cache key is the requirements file's bytes and the function's uid (``env_key``): an env
  built by another function's build (its ``./evil``, or a module planted into its output while
  it was made) is never handed to this one.

Worked example: ``resize`` (uid 200001) with ``requirements.txt`` = ``./evil``. The node makes
``<state>/envs/3f..9a.partial`` and ``3f..9a.build/{src,tmp}`` owned by 200001, then runs pip
jailed with cwd ``3f..9a.build/src``. ``backend.py`` runs as 200001: ``open(<state>/cluster.json)``
is ENOENT (hidden), writing to ``<state>/nodes`` is EROFS; it can write only into the two
folders above. pip's failure, if any, is the PoolError's tail as before.

Removing a function stops its build (``RunningBuilds.stop``, from the pool's ``stop_function``):
a build whose backend never ends used to hold its cgroups, a pip and the function's uid's CPU
until the 600 s timeout, whether or not anyone still wanted the function (red team round 2).
A function has one build at a time: a build of its new version stops the older one's (red team
round 9 stacked six by redeploying with one changed comment line each, each allowed 512 pids,
2 GiB and 2 CPUs), and a node runs at most ``BUILD_SLOTS`` builds at once (the others wait for a
slot), so builds can never take more than ``BUILD_SLOTS`` x 512 of the node's pids share.

Its network is loopback and a proxy to the package index the node's pip is configured with
(node/build_net.py): a backend can reach no node port, no gateway, no other host; a
requirements line naming another index (``--index-url http://...``) is refused by the proxy and
the error says so.

Known caveats:
- The node's ``PIP_*`` variables (index, find-links, cert) are passed on, so credentials in
  ``PIP_INDEX_URL`` are readable by the build backend.
- pip's user config of the node's user (``~/.config/pip``) is not read (HOME is the jail's
  /tmp); /etc/pip.conf and ``PIP_*`` are.
- Unisolated nodes (``isolation: off``) run pip as the node, as they run functions.
- A tenant whose builds run long holds a node's build slots: other functions' builds on that
  node wait (their cold starts, not their calls, are delayed).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from nearfaas import atomic
from nearfaas.node import build_net, jail, netns, netrelay
from nearfaas.node.procs import kill_group, package_root

PIP_TIMEOUT_S = 600.0
BUILD_SLOTS = 2  # requirements builds one node runs at once (each may have 512 pids, 2 GiB, 2 CPUs)
# A build's cgroup limits: pip and a compiler need more than a small function's 128Mi.
BUILD_LIMITS = {"memory": 2 << 30, "pids": 512, "cpu": 2.0}
# pip installs a function's requirements into a folder of their own (--target implies
# --ignore-installed), which comes first on the worker's sys.path. Its resolver would compare
# that set against the runtime's packages and print their "conflicts" as an ERROR into the
# function's log; they are not conflicts here, the function's copies shadow the runtime's.
PIP_FLAGS = ("--quiet", "--disable-pip-version-check", "--no-input", "--ignore-installed", "--no-warn-conflicts",
             "--no-warn-script-location", "--root-user-action=ignore", "--no-cache-dir")


class BuildError(Exception):
    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class RunningBuilds:
    """The requirements builds in flight on one node, by function name."""

    def __init__(self):
        self._procs: dict[str, dict] = {}  # name -> {process: its cgroup folders}
        self.stopped: set = set()  # builds stopped because their function was removed or updated
        self._slots: asyncio.Semaphore | None = None

    def slots(self) -> asyncio.Semaphore:
        """The node's build slots (``BUILD_SLOTS`` builds at once), made in the running loop."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(BUILD_SLOTS)
        return self._slots

    def add(self, name: str, proc, groups: list[str]) -> None:
        self._procs.setdefault(name, {})[proc] = groups

    def discard(self, name: str, proc) -> None:
        self._procs.get(name, {}).pop(proc, None)
        self.stopped.discard(proc)
        if not self._procs.get(name):
            self._procs.pop(name, None)

    def stop(self, name: str) -> int:
        """Kill every build of ``name``: its process group, and whatever left the group (a
        backend's ``setsid`` child holding pip's output open) through its cgroups; how many."""
        procs = self._procs.get(name, {})
        for proc, groups in procs.items():
            self.stopped.add(proc)
            kill_group(proc)
            jail.remove_cgroups(groups)  # kills what is in them; _install removes the folders as it ends
        return len(procs)


def has_requirements(req: Path | None) -> bool:
    return req is not None and any(line.strip() and not line.strip().startswith("#") for line in req.read_text().splitlines())


def env_key(req: Path, uid: int | None) -> str:
    """The cache key of an env: its requirements' bytes and the function's uid. Never shared
    between functions, even for index-only requirements: a build runs as the uid that asked for
    it, and any process of that uid (its workers, what an earlier build of it left running) can
    write into the build's output while it is made (``/proc/<pip>/root/...``), so a shared env
    would carry one function's planted module into another's (red team, round 2)."""
    salt = b"" if uid is None else f"uid {uid}\0".encode()
    return hashlib.sha256(salt + req.read_bytes()).hexdigest()[:16]


async def ensure(envs: Path, name: str, handler_dir: str, req: Path, uid: int | None, locks: dict, log_path: Path,
                 cgroups=None, running: RunningBuilds | None = None) -> str:
    """The function's requirements env, built once per key, shared by every node on this host."""
    digest = env_key(req, uid)
    target, done = envs / digest, envs / f"{digest}.complete"
    if done.exists():
        return str(target)
    async with locks.setdefault(digest, asyncio.Lock()):
        if done.exists():
            return str(target)
        envs.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(envs / f"{digest}.lock", "w") as lock_file:
            # Another node process on this host may be installing the same set: wait for it.
            await asyncio.get_running_loop().run_in_executor(None, fcntl.flock, lock_file, fcntl.LOCK_EX)
            if not done.exists():
                shutil.rmtree(target, ignore_errors=True)
                await _install(envs, digest, name, Path(handler_dir), req, uid, log_path, cgroups, running or RunningBuilds())
                done.touch(mode=0o600)
    return str(target)


async def _install(envs: Path, digest: str, name: str, handler: Path, req: Path, uid: int | None, log_path: Path, cgroups,
                   running: RunningBuilds) -> None:
    staging, scratch = envs / f"{digest}.partial", envs / f"{digest}.build"
    for path in (staging, scratch):
        shutil.rmtree(path, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "install", *PIP_FLAGS, "--target", str(staging)]
    groups: list[str] = []
    proxy: build_net.IndexProxy | None = None
    try:
        if uid is None:  # unisolated: the node builds, as it runs the function
            staging.mkdir(mode=0o700)
            argv, env, cwd = [*pip, "-r", str(req)], None, str(req.parent)
        else:
            cwd = await asyncio.to_thread(_prepare, staging, scratch, handler, req, uid)
            instance = f"build-{digest}-{os.getpid()}"
            groups = cgroups.create(instance, BUILD_LIMITS)
            # Its network: loopback and a proxy to the configured package index (node/build_net.py).
            proxy = build_net.IndexProxy(netrelay.instance_folder(envs, instance), uid,
                                         build_net.index_hosts(build_net.index_urls(os.environ)))
            plan = jail.plan(uid, envs.parent, [], groups, [staging, scratch], net=await proxy.start())
            env = jail.allowed_env(os.environ) | {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
            env |= {"PYTHONPATH": package_root(), "TMPDIR": str(scratch / "tmp"), "PYTHONUNBUFFERED": "1"}
            env |= build_net.proxy_env()
            argv = [sys.executable, "-m", "nearfaas.node.build", "--plan", json.dumps(plan), "--", *pip, "-r", req.name]
        running.stop(name)  # one build per function: an older version's is not needed any more
        async with running.slots():
            proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                        cwd=cwd, env=env, start_new_session=True)
            running.add(name, proc, groups)
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), PIP_TIMEOUT_S)
            except TimeoutError:
                kill_group(proc)
                await proc.wait()
                raise BuildError(f"installing {req.name} for {name!r} took over {PIP_TIMEOUT_S:g}s", status=504) from None
            finally:
                stopped = proc in running.stopped
                running.discard(name, proc)
        if stopped:
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildError(f"the requirements build of {name!r} was stopped: the function was removed or "
                             "updated (a newer version's build replaced it)", status=404)
        with atomic.append(log_path) as log:  # pip's own words, whatever they are (a failure's, mostly)
            log.write(out)
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            tail = out.decode(errors="replace").strip().splitlines()[-6:]
            refused = f"\n(the build may reach only this node's package index; refused: {', '.join(proxy.refused[:3])})" \
                if proxy is not None and proxy.refused else ""
            raise BuildError(f"pip could not install {req.name} for {name!r} (exit {proc.returncode}); fix {req.name}:\n"
                             + "\n".join(tail) + refused)
        atomic.publish(staging, envs / digest)  # the envs folder is the node's: the build cannot swap this
    finally:
        if proxy is not None:
            await proxy.close()
        await asyncio.to_thread(shutil.rmtree, scratch, True)
        for _ in range(50):  # what the build left running is killed with its groups
            groups = jail.remove_cgroups(groups)
            if not groups:
                break
            await asyncio.sleep(0.02)


def _prepare(staging: Path, scratch: Path, handler: Path, req: Path, uid: int) -> str:
    """The build's folders, its uid's before it starts (nothing of it runs yet, so no race):
    the output, and a scratch holding TMPDIR and a copy of the bundle whose folders it may
    write (pip builds local projects in place). Files are hard links where the bundle's file
    is root's and not world-writable (the uid cannot change them), copies otherwise."""
    staging.mkdir(mode=0o700)  # the function's own env: its uid alone reads it
    scratch.mkdir(mode=0o700)
    (scratch / "tmp").mkdir(mode=0o700)
    src = scratch / "src"

    def link(source: str, dest: str) -> None:
        st = os.lstat(source)
        if st.st_uid == 0 and not st.st_mode & 0o002:
            try:
                os.link(source, dest)
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
        shutil.copy2(source, dest)
        os.chown(dest, uid, uid, follow_symlinks=False)

    shutil.copytree(handler, src, symlinks=True, copy_function=link)
    for root, dirs, _ in os.walk(src):
        for d in dirs:
            os.chown(os.path.join(root, d), uid, uid, follow_symlinks=False)
    for path in (staging, scratch, scratch / "tmp", src):
        os.chown(path, uid, uid)
    return str(src / req.parent.relative_to(handler))


def main(argv: list[str]) -> None:
    """The jailed side: enter the plan, then become pip (never run anything before the jail)."""
    if len(argv) < 4 or argv[0] != "--plan" or argv[2] != "--":
        sys.exit("usage: python -m nearfaas.node.build --plan JSON -- COMMAND...")
    try:
        plan = json.loads(argv[1])
        jail.enter(plan)
    except jail.JailError as exc:
        print(f"the requirements build could not be isolated: {exc}", flush=True)
        sys.exit(70)
    if not plan.get("net"):
        os.execve(argv[3], argv[3:], dict(os.environ))
    # In its own network namespace: this process stays (jailed, as the function's uid) to carry
    # pip's connections to the node's index proxy (netns.start_forwarding), pip is its child.
    child = os.fork()
    if child == 0:
        try:
            os.execve(argv[3], argv[3:], dict(os.environ))
        finally:
            os._exit(127)
    netns.start_forwarding()
    _, status = os.waitpid(child, 0)
    sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
