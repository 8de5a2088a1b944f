"""Small process helpers shared by the worker pools (node/pool.py, node/prewarm.py).

Every worker runs in its own session (process group), so a signal to the group also reaches
whatever the handler started.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from nearfaas.node.worker_logs import LogPipe


async def pipe_reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """A stream over the read end of a pipe. It owns ``fd`` from the call on, even when it
    raises or is cancelled (the caller must not close it): closing the transport closes it. One
    reader serves a pipe for its whole life, so no line is lost between reads."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(fd, "rb", 0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except BaseException:
        pipe.close()  # a no-op when the loop has closed it already: it is the same file object
        raise
    return reader, transport


async def spawn_with_ready_pipe(argv: list[str], *, log_path: Path, env: dict, cwd: str, stdin=asyncio.subprocess.DEVNULL,
                                extra_fds: tuple[int, ...] = ()):
    """Start ``argv --ready-fd N`` in its own session, its stdout and stderr a pipe the node
    drains into ``log_path`` (``process.log_pipe``, node/worker_logs.LogPipe: the worker never
    holds the file itself); returns the process and a reader of the pipe on which it reports
    (WARM / READY / FAILED lines). ``extra_fds`` are inherited under the same numbers (the
    object socket); the caller closes its copies."""
    log = await LogPipe(log_path).start()
    read_fd, write_fd = os.pipe()
    try:
        reader, transport = await pipe_reader(read_fd)
    except BaseException:
        os.close(write_fd)
        log.close()
        raise
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, "--ready-fd", str(write_fd), stdin=stdin, stdout=log.child_fd, stderr=log.child_fd, env=env,
            pass_fds=(write_fd, *extra_fds), cwd=cwd, start_new_session=True)
    except BaseException:
        transport.close()
        log.close()
        raise
    finally:
        os.close(write_fd)  # the child holds its own copy; ours would keep the pipe from ever reporting EOF
        log.release_child()  # likewise for its output
    process.log_pipe = log
    return process, reader, transport


def kill_group(process) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


async def terminate_group(process) -> None:
    if process.returncode is not None:
        return
    try:
        os.killpg(process.pid, 15)
    except (ProcessLookupError, PermissionError):
        return
    try:
        await asyncio.wait_for(process.wait(), 3.0)
    except TimeoutError:
        kill_group(process)
        await process.wait()


def package_root() -> str:
    """The folder that holds the nearfaas package, so workers import the same code as the node."""
    return str(Path(__file__).resolve().parents[2])
