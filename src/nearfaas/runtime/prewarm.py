"""A pre-warmed generic worker: an interpreter that has already paid for starting up and for
importing the runtime (aiohttp, uvloop, nearfaas.runtime.*), waiting to become one function.

Run by the node agent (node/prewarm.py) as
``python -m nearfaas.runtime.prewarm --node-dir DIR --ready-fd N``. Protocol on the ready pipe:

1. ``WARM <json list>`` once the imports are done and the seccomp filter is built (node/seccomp.py
   ``prepare``: the jail then only loads it); the list names the top-level modules now
   imported, so the node can tell whether a function's requirements.txt would have shadowed one.
2. It then blocks on stdin for one JSON line, the *specialisation message*: every field the
   classic path passes as a command-line argument (spec, node, gateway, instance, object_fd,
   jail, secrets_dir, link), plus ``env`` (variables to set: the function's, its gateway URL,
   namespace and TMPDIR among them), ``sys_path`` (the function's requirements env or null,
   put before the runtime's packages), ``cwd`` (the handler folder) and ``log`` (the function's
   log file, which the node points this worker's output pipe at; the worker never opens it).
3. ``TAKEN`` as soon as it has read the message: from then on a failure is the function's (the
   node would otherwise not know whether a worker that died had ever seen it).
4. It applies them and runs the very code the classic worker runs (``worker.main``), which
   enters the jail (node/jail.py: until then this process is root and unconfined, running only
   our code) and answers ``READY <port>`` or ``FAILED ...`` on the same pipe.

``object_fd`` names the socket the node gave this process when it spawned it (its end of the
object fd hand-off, node/objectfds.py); the node only lets it read buckets once it knows the
function.

Settings that only take effect when an interpreter starts (``PYTHON*`` variables and the like)
cannot be applied here; the node spawns a fresh worker for such functions instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

# The imports are the point of a pre-warmed worker: everything the classic worker imports
# before it loads the handler is loaded here, before any function is known.
from nearfaas import cgroups
from nearfaas.node import seccomp
from nearfaas.runtime import worker

try:
    import uvloop  # noqa: F401  imported now so that worker.main's uvloop.install() costs nothing later
except ImportError:
    pass
try:
    # The request signer (runtime/context.py, sigv4_signer) imports these whenever a function
    # has S3 keys, which with auth on (the default) is every function: ~65 ms of a cold start.
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    import botocore.handlers  # noqa: F401  the worker's S3 endpoint tags calls through it (runtime/s3proxy.py)
except ImportError:
    pass

# The fields of the message that worker.main's argument parser would otherwise produce.
REQUIRED_FIELDS = ("spec", "node", "gateway", "instance")
OPTIONAL_FIELDS = {"object_fd": None, "jail": None, "secrets_dir": None, "link": "local", "sys_path": None}


def read_message(fd: int = 0) -> dict | None:
    """One JSON line from ``fd``; None when the node closed the pipe without sending one."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)  # plain os.read: no buffered reader may hold bytes after the line
        if not chunk:
            break
        data += chunk
    if not data.strip():
        return None
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("the specialisation message must be a JSON object")
    return message


def specialise(message: dict, startup_cwd: str) -> None:
    """Make this process look as if it had been spawned for the function."""
    env = {str(k): str(v) for k, v in (message.get("env") or {}).items()}
    os.environ.update(env)
    if "TZ" in env:
        time.tzset()  # the C library caches the time zone; re-read it like a fresh process would
    # tempfile caches the folder it chose on first use: the function's private /tmp (TMPDIR) is
    # found anew, as a fresh process would (unjailed it is a folder of the instance's own).
    tempfile.tempdir = None
    cwd = message["cwd"]
    os.chdir(cwd)
    # The handler folder and the requirements env go on sys.path in worker.main, after the jail
    # (jailed_start.function_paths, from worker.main): this process is still root here, and both hold the author's files.
    # Its output already goes to a pipe the node drains into the function's log from now on
    # (node/worker_logs.LogPipe, retargeted when the node sent this message): nothing to open.
    sys.stdout.flush()
    sys.stderr.flush()
    # A spawned worker's stdin is /dev/null; the message pipe is done with.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _fail(ready_fd: int, message: list[str]) -> None:
    try:
        os.write(ready_fd, ("FAILED " + json.dumps(message[-8:]) + "\n").encode())
    except OSError:
        pass
    print("\n".join(message), file=sys.stderr, flush=True)
    sys.exit(1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="nearfaas pre-warmed generic worker (started by a node agent)")
    # Names the node's folder under the state directory so that `nearfaas down`'s sweep, which
    # matches command lines, finds this process too (see cluster/launcher.py).
    parser.add_argument("--node-dir", required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--cgroup", action="append", default=[],
                        help="cgroup folder to join now (the node writes the function's limits into it later)")
    args = parser.parse_args(argv)
    worker._die_with_parent()
    try:
        # Joined now, while idle: a cgroup join can wait for an RCU grace period (ms), which
        # would otherwise be part of a cold start. Memory used from here on is charged to it.
        for folder in args.cgroup:
            cgroups.join(folder)  # never creates a file: a folder that is no cgroup fails the start
    except OSError:
        _fail(args.ready_fd, traceback.format_exc().strip().splitlines())
    try:  # the seccomp filter, built now (node/seccomp.py): the jail only loads it when specialised
        seccomp.prepare()
    except seccomp.SeccompError:
        pass  # jail.enter builds it again and refuses to run the function, naming what is missing
    startup_cwd = os.getcwd()
    modules = sorted({name.partition(".")[0] for name in sys.modules})
    os.write(args.ready_fd, ("WARM " + json.dumps(modules) + "\n").encode())
    try:
        message = read_message()
    except (OSError, ValueError):
        _fail(args.ready_fd, traceback.format_exc().strip().splitlines())
    if message is None:
        sys.exit(0)  # the node is shutting down and never needed us
    os.write(args.ready_fd, b"TAKEN\n")
    try:
        specialise(message, startup_cwd)
        fields = {name: message[name] for name in REQUIRED_FIELDS}
        fields.update({name: message.get(name) or default for name, default in OPTIONAL_FIELDS.items()})
    except Exception:  # e.g. the handler folder vanished: report it like a failed cold start
        _fail(args.ready_fd, traceback.format_exc().strip().splitlines())
    worker.main(args=argparse.Namespace(**fields, ready_fd=args.ready_fd))


if __name__ == "__main__":
    main()
