"""`--ray auto` / `--ray HOST:PORT` with no live Ray cluster fails within seconds, naming the
address it tried and where it came from (fanout.resolve_auto, fanout.probe): a
`ray_current_cluster` left by a killed cluster made `nearfaas up --ray auto` retry GCS
connections for about seven minutes, and a port that accepts connections but is no GCS made
ray.init retry for longer still.

Each case runs the real CLI with RAY_TMPDIR set to the test's own directory, so Ray's record is
read from there (never the /tmp/ray of a cluster running on this host), and starts no Ray
process: the test checks that none is left with its directory on its command line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nearfaas import fanout

NEARFAAS = str(Path(sys.executable).with_name("nearfaas"))


def _dead_port() -> int:
    with socket.socket() as s:  # bound, never listening, then closed: nothing answers there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_listener():
    """A port that accepts TCP connections (the kernel's backlog) and never says a word: what a
    hung GCS or some other program looks like to a TCP probe."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def _processes_naming(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and int(proc.name) != os.getpid() and text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def _up(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR", "TMPDIR")}
    started = time.monotonic()
    done = subprocess.run([NEARFAAS, "up", *args, "--state", str(tmp_path / "state")], capture_output=True, text=True,
                          timeout=60, env=clean | {"RAY_TMPDIR": str(tmp_path)} | env)
    return done, time.monotonic() - started


@pytest.mark.parametrize("how", ["stale-file", "no-file", "RAY_ADDRESS", "explicit", "stale-file-silent", "explicit-silent",
                                 "ray-client"])
def test_up_on_a_dead_ray_address_fails_fast_naming_it(tmp_path, how, silent_listener):
    address = silent_listener if how.endswith("-silent") else f"127.0.0.1:{_dead_port()}"
    record = tmp_path / "ray" / "ray_current_cluster"
    args, env = ["--ray", "auto"], {}
    if how.startswith("stale-file"):
        record.parent.mkdir()
        record.write_text(address + "\n")
    elif how == "RAY_ADDRESS":
        env["RAY_ADDRESS"] = address
    elif how == "ray-client":
        address = "ray://" + address
        env["RAY_ADDRESS"] = address
    elif how.startswith("explicit"):
        args = ["--ray", address]
    done, seconds = _up(tmp_path, *args, **env)
    message = done.stderr + done.stdout
    assert done.returncode != 0 and seconds < 30, (seconds, message)
    assert "Traceback" not in message, message
    assert message.startswith("Error: ") and "ray start --head" in message, message  # the CLI's error, and what to do
    if how == "no-file":
        assert str(record) in message and "does not exist" in message, message
    else:
        assert address in message, message
    if how == "stale-file":
        assert str(record) in message and "stale" in message and "Connection refused" in message, message
    if how.endswith("-silent"):
        assert "no Ray GCS answered within 3s" in message, message
    if how == "stale-file-silent":
        assert str(record) in message and "stale" not in message, message  # something is there: not called stale
    if how in ("RAY_ADDRESS", "ray-client"):
        assert "RAY_ADDRESS" in message, message
    if how == "ray-client":
        assert "Ray Client address" in message, message
    assert not _processes_naming(str(tmp_path)), _processes_naming(str(tmp_path))  # no raylet or GCS started


def test_auto_for_sweeps_says_why_it_starts_a_local_ray(tmp_path, monkeypatch):
    """`hw dse --ray auto` and kin start a local Ray when none answers; the reason they print
    names the stale record (checked without starting that Ray)."""
    address = f"127.0.0.1:{_dead_port()}"
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(address)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    found, why, refused = fanout._auto("--ray", 1.0)
    assert found is None and not refused
    assert address in why and str(tmp_path / "ray" / "ray_current_cluster") in why and "stale" in why, why
    with pytest.raises(fanout.FanoutError, match=r"--ray auto: read 127\.0\.0\.1:\d+ from .*ray_current_cluster.*ray start --head"):
        fanout.resolve_auto()


@pytest.mark.parametrize("reply, why", [(b"HTTP/1.1 400 Bad Request\r\n\r\n", "answers HTTP/1"), (b"hello there", "not gRPC")])
def test_a_port_that_answers_but_is_no_gcs_is_named(reply, why):
    """The dashboard's port, or any other program: an error at once, not ray.init's retries."""
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)

        def answer():
            conn, _ = s.accept()
            with conn:
                conn.recv(64)
                conn.sendall(reply)

        threading.Thread(target=answer, daemon=True).start()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(fanout.FanoutError, match=rf"no Ray cluster at {address}: .*{why}.*--ray HOST:PORT"):
            fanout.probe(address)
