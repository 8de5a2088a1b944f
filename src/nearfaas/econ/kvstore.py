"""The key-value data-access function's engine (issue 20): RocksDB through ``rocksdict``, opened
so the storage medium, not a cache, serves the reads — the condition an MBWU is measured under.

Caching minimised, and which of the issue's options holds here:
* **direct I/O**: reads and flush/compaction bypass the page cache (``O_DIRECT``; ext4 on this
  VM supports it, checked at open: ``open_db`` fails rather than fall back to buffered I/O);
* a **small block cache**: 8 MiB, against a dataset of 100k-1M 1 KB records (0.1-1 GB);
* no compression (YCSB's values are random).
A cgroup memory cap is not needed on top: with direct I/O the page cache never holds the data.

The engine is used twice: inside the function (examples/econ/kv/handler.py, one RocksDB per
function volume) and in-process by the MBWU calibration (bench/mbwu.py), so both run the same
options.

Worked example: ``db = open_db(path); load(db, 0, 1000, 1000, seed=1)`` writes 1000 records of
1000 bytes; ``execute(db, [("r", key(3)), ("u", key(4), "ab" * 500)])`` answers ``{"reads": 1,
"found": 1, "updates": 1}``; ``proc_io()`` then shows the bytes the process read and wrote at
the block layer (the kernel's per-process disk counters).

Known caveats:
- One process owns a RocksDB directory (its LOCK file): a function with a volume keeps one
  instance per node (``com.openfaas.scale.max: 1``), or a second worker's open fails clearly.
"""

from __future__ import annotations

import os
import random

from nearfaas.econ.ycsb import key

BLOCK_CACHE_BYTES = 8 << 20


def open_db(path: str, *, direct: bool = True, block_cache: int = BLOCK_CACHE_BYTES):
    """A RocksDB at ``path`` (created if missing), raw byte keys and values."""
    import rocksdict

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_compression_type(rocksdict.DBCompressionType.none())
    if direct:
        opts.set_use_direct_reads(True)
        opts.set_use_direct_io_for_flush_and_compaction(True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(rocksdict.Cache(block_cache))
    opts.set_block_based_table_factory(table)
    return rocksdict.Rdict(path, opts)


def load(db, start: int, count: int, value_bytes: int, seed: int) -> int:
    """Insert records ``start .. start + count - 1`` with random values; returns bytes written."""
    import rocksdict

    rng = random.Random(seed * 1_000_003 + start)
    batch, written = rocksdict.WriteBatch(raw_mode=True), 0
    for i in range(start, start + count):
        value = rng.randbytes(value_bytes)
        batch.put(key(i).encode(), value)
        written += value_bytes
        if len(batch) >= 1000:
            db.write(batch)
            batch = rocksdict.WriteBatch(raw_mode=True)
    if len(batch):
        db.write(batch)
    return written


def settle(db) -> None:
    """Flush and compact everything: every run starts from the same LSM shape (the thesis paced
    its loads so both platforms finished compaction)."""
    db.flush()
    db.compact_range(None, None)


def execute(db, ops) -> dict:
    """Run YCSB operations: ``("r", key)`` reads, ``("u", key, value)`` updates."""
    reads = found = updates = app_bytes = 0
    for op in ops:
        kind, k = op[0], op[1].encode()
        if kind == "r":
            value = db.get(k)
            reads += 1
            if value is not None:
                found += 1
                app_bytes += len(value)
        elif kind == "u":
            value = op[2].encode()
            db[k] = value
            updates += 1
            app_bytes += len(value)
        else:
            raise ValueError(f"unknown operation {kind!r}: use 'r' (read) or 'u' (update)")
    return {"reads": reads, "found": found, "updates": updates, "app_bytes": app_bytes}


def proc_io(pid: int | str = "self") -> dict:
    """The kernel's per-process I/O counters (bytes through the block layer, and syscalls)."""
    out = {}
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            out[name.strip()] = int(value)
    return out


def disk_of(path: str) -> str | None:
    """The block device (as named in /proc/diskstats) holding ``path``, or None."""
    dev = os.stat(path).st_dev
    name = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open(f"/sys/dev/block/{name}/uevent") as fh:
            for line in fh:
                if line.startswith("DEVNAME="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


def disk_bytes(device: str) -> tuple[int, int]:
    """Bytes read and written by ``device`` since boot (/proc/diskstats, 512-byte sectors)."""
    with open("/proc/diskstats") as fh:
        for line in fh:
            f = line.split()
            if f[2] == device:
                return int(f[5]) * 512, int(f[9]) * 512
    raise ValueError(f"no block device {device!r} in /proc/diskstats")
