"""The shim's access sampler (native/memshim/sampler.c): reads are seen as well as writes, in
the block read and when; a program under aggressive sampling computes exactly what it computes
without it (its data survives arming, a fork, a read(2) into armed pages, madvise and realloc);
arming stays within its per-period budget; with the budget at 0 only writes are sampled."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from memshim_fixtures import *  # noqa: F403  (built, pytestmark)
from memshim_fixtures import heat_probe
from nearfaas.memory import shim

pytestmark = pytest.mark.skipif(not (shim.NATIVE / "build" / shim.LIBRARY).is_file() and not shutil.which("cc"),
                                reason="no C compiler here to build the memory shim (make -C native/memshim)")

PERIOD_NS = 100_000_000  # a sample lands up to a period after the access, later on a busy machine


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", str(shim.NATIVE)], check=True)
    return shim.NATIVE / "build"


def _in(events, op, block, size, start, end):
    return [e for e in events if e.op == op and start < e.t_ns <= end and block <= e.addr < block + size]


def test_reads_are_seen_in_the_block_read_and_are_not_writes(built, tmp_path):
    events, (a, b, size), phase = heat_probe(built, tmp_path)
    stacks = {e.addr: e.stack for e in events if e.op == "malloc"}
    for block, start, end in ((a, "a", "b"), (b, "b", "read"), (a, "read", "idle")):  # written, written, read
        seen = _in(events, "access", block, size, phase[start], phase[end] + PERIOD_NS)
        assert len(seen) >= 5 and {e.stack for e in seen} == {stacks[block]}, (start, len(seen))  # ~30 periods
        other = b if block == a else a
        assert not _in(events, "access", other, size, phase[start] + PERIOD_NS, phase[end]), start  # left alone
    assert not [e for e in events if e.op == "touch"]  # the access mode: writes are accesses
    assert not [e for e in events if e.op == "access" and phase["idle"] + PERIOD_NS < e.t_ns <= phase["end"]]
    # auto: the access sample. From a period into the read phase (the slack the checks above give): on a loaded machine the
    # sampler's last pass over the write phase (block b) can land just after the phase mark (CI).
    trace = shim.to_trace(events, 10, start_ns=phase["read"] + PERIOD_NS, end_ns=phase["idle"])
    armed = {p for e in events if e.op == "arm" for p in range(e.addr // 4096, (e.addr + e.size) // 4096)}
    assert trace.owner and set(trace.owner) <= armed | {e.addr // 4096 for e in events if e.op == "access"}
    seen = set().union(*trace.epochs)
    assert seen and all(a // 4096 <= p < (a + size) // 4096 for p in seen)


BOUNDED = r"""
import sys, time
import numpy as np
hot, cold = np.ones(8 << 20), np.ones(8 << 20)  # 64 MiB each: 64 sampled chunks, 1024 sampled pages
print(hot.ctypes.data, cold.ctypes.data, hot.nbytes, time.monotonic_ns(), flush=True)
end = time.monotonic() + 1.0
while time.monotonic() < end:
    hot.sum()  # every page of hot, about every 10 ms
print(time.monotonic_ns())
"""


def test_faults_stay_near_the_budget_and_a_cold_block_is_armed_quickly(built, tmp_path):
    """A hot 64 MiB array read all the time: the faults per period stay near the budget (the
    allowance halves when they pass it); an untouched one is armed whole within a few periods
    (moving cold pages costs no fault, so the allowance doubles)."""
    log = tmp_path / "bounded.log"
    proc = subprocess.run([sys.executable, "-c", BOUNDED], capture_output=True, text=True, timeout=60,
                          env=shim.shim_env(log, sample_ms=10, access_pages=32))
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "sampling is unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    first, last = proc.stdout.split("\n")[:2]
    hot, cold, size, start = map(int, first.split())
    end = int(last)
    events = shim.read_log(log)
    faults = [e.t_ns for e in events if e.op == "access" and hot <= e.addr < hot + size]
    periods = [0] * ((end - start) // 10_000_000 + 1)
    for t in faults:
        if start + 200_000_000 <= t <= end:  # after the first arming rounds
            periods[(t - start) // 10_000_000] += 1
    steady = periods[20:-1]
    assert steady and sum(steady) / len(steady) <= 3 * 32, steady  # budget..2x budget, oscillating
    armed_cold = {e.addr for e in events if e.op == "arm" and cold <= e.addr < cold + size and e.t_ns <= end}
    assert len(armed_cold) >= 60  # all 64 sampled chunks (bar partial ones at the ends), beside the hot block


def test_budget_zero_samples_writes_only(built, tmp_path):
    events, (a, _, size), phase = heat_probe(built, tmp_path, NEARFAAS_MEMSHIM_ACCESS_PAGES=0)
    assert any(e.op == "touch" for e in events)
    assert not [e for e in events if e.op in ("arm", "access")]
    assert not _in(events, "touch", a, size, phase["read"] + PERIOD_NS, phase["idle"])  # a read is not a write


PROGRAM = r"""
import ctypes, os, sys, time
import numpy as np
libc = ctypes.CDLL(None)
a = np.arange(4_000_000, dtype=np.int64)            # 32 MB: many sampled chunks
want = int(a.sum())
time.sleep(0.15)                                     # armed meanwhile
assert int(a.sum()) == want, "reads back through the stash"
a[::512] += 1
want += len(a[::512])
time.sleep(0.05)
assert int(a.sum()) == want, "writes kept"
pid = os.fork()
if pid == 0:
    os._exit(0 if int(a.sum()) == want else 3)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, "a forked child sees the data"
blob = sys.argv[1]
with open(blob, "wb") as f:
    f.write(np.full(1_000_000, 7, np.int64).tobytes())
b = np.zeros(1_000_000, np.int64)
time.sleep(0.15)
with open(blob, "rb") as f:
    assert f.readinto(memoryview(b).cast("B")) == 8_000_000
assert int(b.sum()) == 7_000_000, "read(2) into armed pages"
c = np.ones(2_000_000, dtype=np.int64)
time.sleep(0.15)
base = (c.ctypes.data + 4095) & ~4095
length = (c.ctypes.data + c.nbytes - base) & ~4095
assert libc.madvise(ctypes.c_void_p(base), ctypes.c_size_t(length), 4) == 0  # MADV_DONTNEED
assert int(c.sum()) == (c.nbytes - length) // 8, "dropped pages read back as zeros"
libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p
libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
p = libc.malloc(8 << 20)
ctypes.memset(p, 0x5A, 8 << 20)
time.sleep(0.15)
q = libc.realloc(p, 32 << 20)
assert ctypes.string_at(q, 8 << 20) == b"\x5a" * (8 << 20), "realloc keeps armed pages"
print("ok", want)
"""


def test_a_program_computes_the_same_under_aggressive_sampling(built, tmp_path):
    """Every page armed every 5 ms: whatever the program reads is what it wrote."""
    env = {"NEARFAAS_MEMSHIM_ACCESS_PAGES": "100000", "NEARFAAS_MEMSHIM_ACCESS_STRIDE": "1"}
    log = tmp_path / "integrity.log"
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / "blob")], capture_output=True, text=True,
                          timeout=60, env=shim.shim_env(log, sample_ms=5) | env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if "sampling is unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    events = shim.read_log(log)
    assert sum(e.op == "access" for e in events) > 100 and any(e.op == "arm" for e in events)  # it did sample
