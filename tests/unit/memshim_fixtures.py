"""What the memory shim's test modules share: skip where no C compiler can build the shim, and
the ``built`` fixture (the shim and its probe programs, built once per module) and
``heat_probe`` (one sampled run of native/memshim/heat_probe.c, read back). A test module
takes them with ``from memshim_fixtures import *`` (``pytestmark`` included)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from nearfaas.memory import shim

__all__ = ["built", "heat_probe", "pytestmark"]

pytestmark = pytest.mark.skipif(not (shim.NATIVE / "build" / shim.LIBRARY).is_file() and not shutil.which("cc"),
                                reason="no C compiler here to build the memory shim (make -C native/memshim)")


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", str(shim.NATIVE)], check=True)
    return shim.NATIVE / "build"


def heat_probe(built, tmp_path, **env):
    """heat_probe.c run under the shim sampling every 10 ms (``env`` added, e.g.
    NEARFAAS_MEMSHIM_ACCESS_PAGES=0 for the write mode): its log's events, its two blocks
    (a, b, size) and its phases' start times. Skips where the kernel refuses to sample."""
    log = tmp_path / "heat.log"
    log.unlink(missing_ok=True)
    base = shim.shim_env(log, sample_ms=10) | {k: str(v) for k, v in env.items()}
    proc = subprocess.run([str(built / "heat_probe")], env=base, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    if "sampling is unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    out = [line.split() for line in proc.stdout.splitlines()]
    a, b, size = int(out[0][1], 16), int(out[0][2], 16), int(out[0][3])
    phase = {row[1]: int(row[2]) for row in out if row[0] == "phase"}
    return shim.read_log(log), (a, b, size), phase
