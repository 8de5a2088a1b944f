"""`nearfaas econ mbwu` end to end on a private cluster (issue 20): the key-value function under
YCSB-A on a storage node and the compute node, three landscapes, the issue's JSON shape."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("fusermount3") is None,
                                 reason="the disaggregated landscape mounts a FUSE file system: needs root and fuse3 (make setup)")]


def test_mbwu_json_has_every_landscape(tmp_path):
    out = subprocess.run([sys.executable, "-m", "nearfaas.cli", "econ", "mbwu", "--records", "3000", "--seconds", "1",
                          "--repeats", "1", "--json", "--plot", str(tmp_path / "m.png")],
                         capture_output=True, text=True, timeout=280, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["mbwu_ops_s"] > 0 and got["placed"] == {"kv-embedded": "storage-0", "kv-host": "compute-0", "kv-disagg": "compute-0"}
    for name in ("integrated", "network", "disaggregated"):
        cell = got["landscapes"][name]
        assert cell["mbwus"]["host"] > 0 and cell["mbwus"]["embedded"] > 0
        assert cell["usd_per_mbwu_reduction_pct"] is not None and cell["kwh_per_mbwu_reduction_pct"] is not None
    # The embedded platform's disaggregated number is its network one (its setup does not change).
    assert got["landscapes"]["disaggregated"]["ops_s"]["embedded"] == got["landscapes"]["network"]["ops_s"]["embedded"]
    assert (tmp_path / "m.png").stat().st_size > 10_000
    from pathlib import Path

    assert "nearfaas-linkfs" not in Path("/proc/mounts").read_text(), "the link file system was left mounted"
