"""`--ray auto` with no live Ray cluster fails within seconds, naming the address it tried and
where it came from (fanout.resolve_auto): a `ray_current_cluster` left by a killed cluster made
`nearfaas up --ray auto` retry GCS connections for about seven minutes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

NEARFAAS = str(Path(sys.executable).with_name("nearfaas"))


def _dead_port() -> int:
    with socket.socket() as s:  # bound, never listening, then closed: nothing answers there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    started = time.monotonic()
    done = subprocess.run([NEARFAAS, "up", *args, "--state", str(tmp_path / "state")], capture_output=True, text=True,
                          timeout=60, env=clean | {"RAY_TMPDIR": str(tmp_path)} | env)
    return done, time.monotonic() - started


@pytest.mark.parametrize("how", ["stale-file", "no-file", "RAY_ADDRESS", "explicit"])
def test_up_on_a_dead_ray_address_fails_fast_naming_it(tmp_path, how):
    address = f"127.0.0.1:{_dead_port()}"
    args, env = ["--ray", "auto"], {}
    if how == "stale-file":
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text(address + "\n")
    elif how == "RAY_ADDRESS":
        env["RAY_ADDRESS"] = address
    elif how == "explicit":
        args = ["--ray", address]
    done, seconds = _up(tmp_path, *args, **env)
    message = done.stderr + done.stdout
    assert done.returncode != 0 and seconds < 30, (seconds, message)
    assert "Traceback" not in message and "ray start --head" in message, message
    if how == "no-file":
        assert str(tmp_path / "ray" / "ray_current_cluster") in message and "does not exist" in message, message
    else:
        assert address in message, message
    if how == "stale-file":
        assert str(tmp_path / "ray" / "ray_current_cluster") in message and "stale" in message, message
    if how == "RAY_ADDRESS":
        assert "RAY_ADDRESS" in message, message
