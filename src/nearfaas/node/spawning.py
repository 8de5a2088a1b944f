"""Starting a worker process and waiting for its ``READY <port>`` line.

Why a module of its own: the worker's command line and the ready handshake are a contract with
runtime/worker.py (and, for ``await_ready``, with image functions' hosts, node/oci/launch.py);
the pool decides what to start, this module only starts it and reads the answer.

Worked example: ``spawn`` runs ``python -P -m nearfaas.runtime.jailed_start --spec <file> --node
compute-0 ... --jail '{"uid": 200001, ...}' --ready-fd 5`` in a session of its own, output into
the function's log; ``await_ready`` reads ``READY 41234`` (its port) or ``FAILED ["why", ...]``.

Known caveats: a start slower than its timeout is killed (its whole process group).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from nearfaas.node.objectfds import Channel
from nearfaas.node.pool_error import PoolError
from nearfaas.node.procs import kill_group, spawn_with_ready_pipe


async def spawn(args: dict, plan: dict | None, channel: Channel | None, env: dict, cwd: str, log_path: Path):
    """The classic cold start: a fresh interpreter for this function."""
    args = dict(args, jail=json.dumps(plan) if plan else None, object_fd=str(channel.worker_fd) if channel else None)
    # Flag and value as separate arguments: `nearfaas down` recognises our processes by
    # arguments that are paths under the state directory (cluster/launcher.py).
    flags = [part for key, value in args.items() if value is not None for part in (f"--{key.replace('_', '-')}", value)]
    try:
        # -P and jailed_start: nothing the function's author wrote is importable until the process
        # is in its jail (runtime/jailed_start.py), then the worker starts as always.
        return await spawn_with_ready_pipe([sys.executable, "-P", "-m", "nearfaas.runtime.jailed_start", *flags],
                                           log_path=log_path, env=env, cwd=cwd, extra_fds=(channel.child_fd,) if channel else ())
    finally:
        if channel is not None:
            channel.release_child()  # the worker has its copy (or never will)


async def await_ready(process, ready, transport, node: str, timeout: float, what: str, slow: str, failed: str, log_tail) -> str:
    """The new worker's ``READY <port>`` line; its ``FAILED <why>`` (or ``log_tail()``) and a
    start slower than ``timeout`` are PoolErrors saying ``what`` went wrong."""
    try:
        line = (await asyncio.wait_for(ready.readline(), timeout)).decode(errors="replace")
    except TimeoutError:
        kill_group(process)
        raise PoolError(f"{what} on {node} did not finish in {timeout:g}s {slow}".rstrip(), status=504) from None
    finally:
        transport.close()
    if not line.startswith("READY "):
        await process.wait()
        pipe = getattr(process, "log_pipe", None)
        if pipe is not None:  # its last words reach the log once the node has drained its output
            try:
                await asyncio.wait_for(asyncio.shield(pipe.done), 2.0)
            except TimeoutError:
                pass
        detail = line.removeprefix("FAILED ").strip()
        try:
            detail = "\n".join(json.loads(detail))
        except ValueError:
            detail = detail or log_tail()
        raise PoolError(f"{what} failed on {node}: {failed}\n{detail}")
    return line
