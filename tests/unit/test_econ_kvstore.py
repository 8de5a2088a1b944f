"""The key-value function's engine (econ/kvstore.py): RocksDB with direct I/O, and the kernel's
disk counters the MBWU benchmark reads."""

from __future__ import annotations

import pytest

from nearfaas.econ import kvstore
from nearfaas.econ.ycsb import Workload, key


def test_load_execute_and_settle_round_trip(tmp_path):
    db = kvstore.open_db(str(tmp_path / "db"))
    try:
        assert kvstore.load(db, 0, 500, 100, seed=1) == 500 * 100
        kvstore.settle(db)
        got = kvstore.execute(db, [("r", key(3)), ("r", "missing"), ("u", key(4), "x" * 10), ("r", key(4))])
        assert got == {"reads": 3, "found": 2, "updates": 1, "app_bytes": 100 + 10 + 10}
        got = kvstore.execute(db, Workload(500, value_bytes=100, seed=3).batch(200))
        assert got["reads"] + got["updates"] == 200 and got["found"] == got["reads"]
        with pytest.raises(ValueError, match="unknown operation"):
            kvstore.execute(db, [("d", key(1))])
    finally:
        db.close()
    assert (tmp_path / "db" / "CURRENT").is_file()


def test_the_disk_counters_name_a_real_device(tmp_path):
    io = kvstore.proc_io()
    assert {"read_bytes", "write_bytes"} <= set(io)
    device = kvstore.disk_of(str(tmp_path))
    if device is None:
        pytest.skip(f"{tmp_path} is not on a block device here (tmpfs?)")
    read, written = kvstore.disk_bytes(device)
    assert read > 0 and written >= 0
    with pytest.raises(ValueError, match="no block device"):
        kvstore.disk_bytes("no-such-disk")
