"""Issue 39 finding 5: any local user read every object. Store files were 0644 in 0755 folders
(the user ``nobody`` read another bucket's objects) and ``gateway.log`` and ``functions.json``
were world-readable.

After objects are put, a function with a secret is deployed and called (so logs, records, specs
and secrets exist), the state directory is walked: nothing in it may be readable, and no folder
listable or traversable, by anyone but the platform's user, except what the design requires
(``DESIGN_READABLE``, each with its reason). Then the attack itself, as ``nobody``: read another
bucket's object file, ``gateway.log`` and ``functions.json`` -> EACCES, both by path (as on a
host whose folders above the state directory are world-traversable, e.g. ``/srv/nf``) and
past the folders (a file's own mode must hold too, so that one folder opened up by mistake does
not expose everything below it).
"""

from __future__ import annotations

import fnmatch
import json
import os
import pwd
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acts as the user nobody: needs root")

# What the design lets the function's own uid read (and so must leave readable to a uid that is
# not the platform's). None of it is reachable by other local users: each lies below the 0700
# state directory (and functions/<name> is 0700 too); a jailed function sees only its own copy,
# through the bind mounts its jail makes (node/jail.py), which do not pass through those folders.
DESIGN_READABLE = {
    "functions/*/*": "a function's unpacked code (0755/0644): its uid imports it",
    "envs/*": "a requirements.txt environment (pip's modes), shared by the functions with the same requirements",
    "models": "the model cache every worker reads (node/jail.py SHARED_STATE)",
    "images/*": "an image function's unpacked root filesystem (the image's own modes)",
}

def _matches(rel: Path, patterns) -> bool:
    """``rel`` is, or lies below, a path matching one of ``patterns`` from the state dir down."""
    for pattern in patterns:
        want = pattern.split("/")
        if len(rel.parts) >= len(want) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(rel.parts[:len(want)], want, strict=True)):
            return True
    return False


def _design_readable(rel: Path) -> bool:
    return _matches(rel, DESIGN_READABLE)


def _open_to_others(state: Path) -> list[str]:
    found = []
    for root, dirs, files in os.walk(state):
        for name in dirs + files:
            path = Path(root) / name
            rel = path.relative_to(state)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or _design_readable(rel):
                continue
            if st.st_uid != 0 and not {"secrets", "volumes"} & set(rel.parts):  # a function's own: its uid's
                found.append(f"{rel}: owned by uid {st.st_uid}")
            if st.st_mode & 0o077:
                found.append(f"{rel}: mode {stat.S_IMODE(st.st_mode):o}")
    return found


ATTACK = r"""
import errno, json, os, sys
base, files, uid, gid = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
held = {f: os.open(os.path.join(base, f), os.O_PATH) for f in files}  # as root: past the folders
base_fd = os.open(base, os.O_PATH | os.O_DIRECTORY)  # as if every folder above were world-traversable
os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
def attempt(fn):
    try:
        fn()
        return "READ"
    except OSError as exc:
        return errno.errorcode[exc.errno]
def read_or_list(fd):  # a folder is listed, a file read
    return os.listdir(fd) if os.path.isdir(f"/proc/self/fd/{fd}") else os.read(fd, 1)
print(json.dumps({f: {"by_path": attempt(lambda: read_or_list(os.open(f, os.O_RDONLY, dir_fd=base_fd))),
                      "past_folders": attempt(lambda: read_or_list(os.open(f"/proc/self/fd/{held[f]}", os.O_RDONLY)))}
                  for f in files}))
"""


def _as_nobody(state: Path, files: list[str]) -> dict:
    nobody = pwd.getpwnam("nobody")
    out = subprocess.run([sys.executable, "-c", ATTACK, str(state), json.dumps(files), str(nobody.pw_uid), str(nobody.pw_gid)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_nobody_reads_no_object_log_or_record(cluster, bucket, scratch, functions_dir):
    state = cluster.state_dir
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="payroll.csv", Body=b"alice,100000\n")
    assert cluster.http.put(f"{cluster.url}/system/secrets", json={"name": "api-key", "value": "s3cr3t"}, timeout=10).status_code == 200
    assert scratch("files-secretreader", functions_dir / "secretreader", secrets=["api-key"]).status_code < 300
    assert cluster.http.post(f"{cluster.url}/function/files-secretreader", data=b"", timeout=30).text == "s3cr3t"

    objects = [p for p in state.glob(f"nodes/*/**/buckets/{bucket}/objects/*/*") if p.is_file()]
    assert objects, f"no object file of {bucket} under {state}/nodes"
    assert os.stat(state).st_mode & 0o777 == 0o700
    targets = [str(p.relative_to(state)) for p in (objects[0], objects[0].parent, state / "logs" / "gateway.log",
                                                    state / "logs", state / "gateway" / "functions.json")]
    tried = _as_nobody(state, targets)
    assert tried == {t: {"by_path": "EACCES", "past_folders": "EACCES"} for t in targets}

    open_to_others = _open_to_others(state)
    assert not open_to_others, "readable by other local users:\n" + "\n".join(open_to_others)
    for node in (state / "nodes").iterdir():
        assert stat.S_IMODE(node.stat().st_mode) == 0o700, node


LOG_FDS = '''import json
import os
import stat


def handle(event, context):
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    out = {"fds": fds, "stdout_is_pipe": stat.S_ISFIFO(os.fstat(1).st_mode)}
    for name, action in (("fallocate", lambda: os.posix_fallocate(1, 0, 64 << 20)), ("ftruncate", lambda: os.ftruncate(1, 0))):
        try:
            action()
            out[name] = "ok"
        except OSError as exc:
            out[name] = type(exc).__name__
    print("a line of its output")
    return json.dumps(out)
'''


@pytest.mark.parametrize("start", ["prewarmed", "spawned"])
def test_a_function_holds_no_log_file_of_the_node(cluster, scratch, tmp_path, start):
    # Red team round 5: a worker's stdout/stderr were its log file itself (root's, 0600, opened
    # before the jail): posix_fallocate took 100 MiB of the host's disk in one call (all 70 GiB
    # would have fit in one), ftruncate erased the function's log, and a pre-warmed worker still
    # held the node's _prewarm.log. Now its output is a pipe the node drains into the log.
    import requests

    folder = tmp_path / "logfds"
    folder.mkdir()
    (folder / "handler.py").write_text(LOG_FDS)
    name = f"logfds-{start}"
    env = {"LC_ALL": "C"} if start == "spawned" else {}  # a start-up variable: a fresh interpreter
    assert scratch(name, folder, wait=False, envVars=env).status_code < 300
    resp = requests.post(f"{cluster.url}/function/{name}", data=b"", timeout=60)
    assert resp.status_code == 200, resp.text
    got = resp.json()
    state = str(cluster.state_dir.resolve())
    assert got["stdout_is_pipe"], got
    assert not [t for t in got["fds"].values() if t.startswith(state) or t.endswith(".log")], got["fds"]
    assert got["fallocate"] != "ok" and got["ftruncate"] != "ok", got
    deadline = time.monotonic() + 10  # its output still reaches its log, through the node
    while "a line of its output" not in cluster.http.get(f"{cluster.url}/system/logs?name={name}", timeout=10).text:
        assert time.monotonic() < deadline, "the function's output never reached its log"
        time.sleep(0.1)
