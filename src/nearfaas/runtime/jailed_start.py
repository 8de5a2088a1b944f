"""A spawned worker's first step: enter the jail before any file the function's author wrote can
be imported, then become the worker (runtime/worker.py).

Why a module of its own: the worker imports the runtime (aiohttp, uvloop, yarl, ...) at its top,
and a process is root until ``jail.enter``. Red team round 2 planted ``aiohttp.py`` in a
requirements env (and a bundle can carry one too): the worker, started with the env on
PYTHONPATH and the handler folder as ``python -m``'s first sys.path entry, imported it as uid 0 in
the host's namespaces. This module imports only the standard library and the jail (node/jail.py
and what it uses: stdlib and ctypes), is started with ``python -P`` (no start-up folder on
sys.path) and with nothing of the function's on PYTHONPATH; it reads the spec (the jail hides the
state directory), enters the jail, and only then puts the handler folder and the requirements env
first on sys.path and imports the worker. So the function's packages still shadow the runtime's
(its pinned ``six`` is the one the runtime gets too), as the function's uid, inside its jail.

Worked example: ``python -P -m nearfaas.runtime.jailed_start --spec S --jail '{"uid": 200001,
...}' --sys-path <state>/envs/3f..9a --ready-fd 5 ...`` in the handler folder: the jail is
entered (uid 200001, own mount/IPC/network namespaces, seccomp), sys.path becomes
[handler folder, env, platform paths...], then ``worker.main`` serves as always.

Known caveats: without ``--jail`` (isolation off) the same order is kept, but nothing is
confined anyway: the function runs as the node's user.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys


def function_paths(code_dir: str, requirements_env: str | None) -> None:
    """The function's handler folder, then its requirements env, first on sys.path — called only
    once the process is in its jail (here, and by a pre-warmed worker in worker.main). Processes
    the function starts find its packages too (PYTHONPATH)."""
    for i, folder in enumerate(p for p in (code_dir, requirements_env) if p):
        sys.path.insert(i, folder)
    if requirements_env:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (requirements_env, os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--jail", type=json.loads, default=None)
    parser.add_argument("--sys-path", default=None)
    parser.add_argument("--ready-fd", type=int, required=True)
    known, _ = parser.parse_known_args(argv)
    try:
        with open(known.spec) as f:
            spec = json.load(f)
        code_dir = os.getcwd()  # spawned in the handler folder
        if known.jail:
            from nearfaas.node import jail

            jail.enter(known.jail)  # single-threaded still: nothing has started a thread
        function_paths(code_dir, known.sys_path)
    except Exception as exc:  # a start that fails must say why on the ready pipe, as the worker does
        try:
            os.write(known.ready_fd, ("FAILED " + json.dumps([f"{type(exc).__name__}: {exc}"]) + "\n").encode())
        except OSError:
            pass
        raise
    from nearfaas.runtime import worker

    worker.main(argv, jailed_spec=spec)


if __name__ == "__main__":
    main()
