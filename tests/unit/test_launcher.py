"""`down`'s sweep finds only this cluster's own processes, judged by their command lines."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nearfaas.cluster.launcher import _is_ours, processes_of

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_processes_of_matches_only_our_commands_under_the_state_dir(tmp_path):
    state = (tmp_path / ".nearfaas").resolve()
    state.mkdir()
    procs = [
        # Names the state dir, but is not one of ours (a `tail -f` on a log, say).
        _spawn(["sleep", "30", f"{state}/logs/gateway.log"]),
        # Looks like a worker of this cluster: python runs -c and leaves the rest in sys.argv.
        _spawn([sys.executable, "-c", "import time; time.sleep(30)", "-m", "nearfaas.runtime.worker",
                "--spec", f"{state}/nodes/n/specs/f.json"]),
        # A worker of a sibling cluster whose path merely starts with ours.
        _spawn([sys.executable, "-c", "import time; time.sleep(30)", "-m", "nearfaas.runtime.worker",
                "--spec", f"{state}-demo/nodes/n/specs/f.json"]),
    ]
    try:
        time.sleep(0.2)  # let each exec, so /proc shows its final command line
        found = processes_of(state)
        assert procs[1].pid in found
        assert procs[0].pid not in found
        assert procs[2].pid not in found
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert procs[1].pid not in processes_of(state)


def test_is_ours_command_shapes():
    root = "/x/.nearfaas"
    assert _is_ours(["python", "-m", "nearfaas.node.agent", "--state", root], root)
    assert _is_ours(["python", "-m", "nearfaas.gateway.app", "--state", root], root)
    assert _is_ours(["python", "-m", "pip", "install", "--target", f"{root}/envs/abc.partial", "-r", "r.txt"], root)
    assert not _is_ours(["python", "-m", "pip", "install", "--target", "/elsewhere", f"{root}/r.txt"], root)
    assert not _is_ours(["python", "-m", "nearfaas.gateway.app", "--state", f"{root}-demo"], root)
    assert not _is_ours(["python", "-m", "pytest", f"{root}/tests"], root)
    assert not _is_ours(["tail", "-f", f"{root}/logs/n.log"], root)


def test_picked_ports_are_distinct_free_and_below_the_ephemeral_range():
    """A port-0 listener (the fast path's) or a client's outgoing connection cannot take a port
    the launcher picked for a server before that server binds it."""
    import socket

    from nearfaas.cluster import launcher

    taken: set[int] = set()
    ports = [launcher._free_port("127.0.0.1", taken) for _ in range(50)]
    assert len(set(ports)) == 50 and set(ports) == taken
    assert all(p < launcher._ephemeral_low() for p in ports)
    with socket.socket() as s:  # the kernel's own pick lands in its range, never on ours
        s.bind(("127.0.0.1", 0))
        assert s.getsockname()[1] >= launcher._ephemeral_low()


def test_groups_are_stopped_side_by_side_and_one_that_ignores_sigterm_is_killed():
    """``_stop_groups``: every group gets SIGTERM before any has exited (one graceful wait, not one
    each); a group that ignores SIGTERM is SIGKILLed after the timeout; none is left."""
    from nearfaas.cluster.launcher import _stop_groups
    from nearfaas.pids import alive

    def group(code: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    # Each says "ready" once its handler is set. A polite one notes when SIGTERM came and when it
    # exits (CLOCK_MONOTONIC is one clock for every process); a deaf one ignores SIGTERM.
    polite = ("import signal, sys, time\n"
              "def bye(*_):\n"
              "    print('term', time.monotonic(), flush=True); time.sleep(0.3); print('exit', time.monotonic(), flush=True); sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, bye)\nprint('ready', flush=True)\ntime.sleep(60)")
    deaf = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
    procs = [group(polite), group(polite), group(deaf)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    _stop_groups([p.pid for p in procs[:2]], timeout=5.0)
    said = [dict(line.split() for line in p.stdout.read().splitlines()) for p in procs[:2]]
    terms, exits = [float(s["term"]) for s in said], [float(s["exit"]) for s in said]
    assert max(terms) < min(exits), f"the second group got SIGTERM only after the first had exited: {said}"
    _stop_groups([procs[2].pid], timeout=0.5)
    for p in procs:
        p.wait(5)
        assert not alive(p.pid)


def test_a_server_that_is_not_ours_answering_at_the_url_is_not_our_process_ready(tmp_path):
    """Two clusters starting at once can draw the same random port: the other cluster's server
    answers at our URL while our process fails to bind it and exits. That must be a start-up
    error naming our process, never a layout pointing at the other server."""
    import http.server
    import threading

    from nearfaas.cluster.launcher import ClusterError, _wait_ready, said_ready

    other = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    log = tmp_path / "gateway.log"
    try:
        with open(log, "ab") as out:  # ours: binds the taken port, fails, exits 1
            ours = subprocess.Popen([sys.executable, "-c", f"import socket; socket.socket().bind(('127.0.0.1', {port}))"],
                                    stdout=out, stderr=subprocess.STDOUT)
        with pytest.raises(ClusterError, match="gateway exited with code 1 while starting"):
            _wait_ready(f"http://127.0.0.1:{port}/healthz", ours, "gateway", log)
    finally:
        other.shutdown()
        other.server_close()
    # A ready line counts only for its own pid, and only as the ready event (logs are appended to across restarts).
    log.write_text('{"event": "ready", "gateway": "x", "pid": 41}\n{"event": "started", "pid": 42}\n')
    assert said_ready(log, 41) and not said_ready(log, 42) and not said_ready(log, 4) and not said_ready(tmp_path / "none", 41)
