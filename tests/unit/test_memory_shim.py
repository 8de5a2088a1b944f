"""The allocation shim (native/memshim, issue 18): its log for a C program equals the program's
own account of its allocations; the call-stack hashes survive ASLR and a doubled or halved
input; a Python worker's large NumPy buffer is seen; a missing log path never breaks the program."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memshim_fixtures import *  # noqa: F403  (built, pytestmark)
from memshim_fixtures import heat_probe
from nearfaas.memory import shim


def _probe(built, tmp_path, scale: int, name: str):
    proc, events = shim.run_logged([str(built / "alloc_probe"), str(scale)], tmp_path / f"{name}.log")
    assert proc.returncode == 0, proc.stderr
    truth = [line.split() for line in proc.stdout.splitlines()]
    return truth, events


def test_the_log_equals_the_programs_known_allocations(built, tmp_path):
    truth, events = _probe(built, tmp_path, 1, "one")
    assert [(e.op, e.size, hex(e.addr)) for e in events] == [(op, int(size), addr) for op, size, addr, _ in truth]
    assert [e.t_ns for e in events] == sorted(e.t_ns for e in events)
    assert shim.live_objects(events) == {}  # everything it made, it released


def test_stack_hashes_survive_aslr_and_input_size(built, tmp_path):
    runs = {name: _probe(built, tmp_path, scale, name) for name, scale in (("a", 2), ("b", 2), ("double", 4), ("half", 1))}

    def by_site(truth, events):
        return {(op, site): e.stack for (op, _, _, site), e in zip(truth, events, strict=True)}

    sites = [by_site(*run) for run in runs.values()]
    assert all(s == sites[0] for s in sites)  # same call site, same hash: every run and size
    allocs = {v for (op, _), v in sites[0].items() if op in ("malloc", "calloc", "mmap")}
    assert len(allocs) == 3  # three call sites, three hashes
    addrs = [events[0].addr for _, events in runs.values()]
    if len(set(addrs)) == 1:
        pytest.skip("ASLR is off here (identical addresses every run): the ASLR half of this test cannot fail")


def test_a_python_workers_large_buffer_is_logged(built, tmp_path):
    code = "import numpy as np; a = np.ones(2_000_000); print(a.ctypes.data)"
    proc, events = shim.run_logged([sys.executable, "-c", code], tmp_path / "py.log")
    assert proc.returncode == 0, proc.stderr
    addr = int(proc.stdout.split()[-1])
    mine = [e for e in events if e.addr <= addr < e.addr + e.size and not e.releases]
    assert mine and mine[-1].size >= 16_000_000  # the array's 16 MB block, from the call that made it


def test_sampled_writes_fall_in_the_block_written_and_when(built, tmp_path):
    """heat_probe writes only block A, then only block B, then nothing: every sampled run of
    written pages lies in the block being written at that time, under that block's stack."""
    events, (a, b, size), phase = heat_probe(built, tmp_path, NEARFAAS_MEMSHIM_ACCESS_PAGES=0)  # the write mode
    stacks = {e.addr: e.stack for e in events if e.op == "malloc"}
    period = 100_000_000  # a scan lands up to a period after the writes, later on a busy machine
    touches = [e for e in events if e.op == "touch"]
    for block, start, end in ((a, phase["a"], phase["b"]), (b, phase["b"], phase["idle"])):
        mine = [e for e in touches if start < e.t_ns <= end + period and block <= e.addr < block + size]
        assert len(mine) >= 5, (hex(block), len(mine))  # ~30 periods of writing: most are seen
        assert all(e.stack == stacks[block] and e.addr + e.size <= block + size for e in mine)
        other = b if block == a else a
        assert not [e for e in touches if start + period < e.t_ns <= end and other <= e.addr < other + size]
    assert not [e for e in touches if phase["idle"] + period < e.t_ns <= phase["end"]]  # nothing written: nothing seen
    trace = shim.to_trace(events, 10, start_ns=phase["a"], end_ns=phase["end"], source="writes")
    spans = {blk: set(range(blk // 4096, (blk + size + 4095) // 4096)) for blk in (a, b)}
    assert set(trace.owner) == spans[a] | spans[b]  # the whole footprint, written or not
    assert {trace.owner[p] for p in spans[a]} == {stacks[a]} and {trace.owner[p] for p in spans[b]} == {stacks[b]}
    written = [set(epoch) for epoch in trace.epochs]
    epoch = lambda t: (t - phase["a"]) // 10_000_000  # noqa: E731  (10 ms epochs from phase a's start)
    # Inside each phase (two epochs of slack at its edges, for a late scan on a busy machine) the
    # epochs that saw writes saw only that phase's block; at least one saw some.
    in_a = [w for w in written[1:epoch(phase["b"]) - 1] if w]
    in_b = [w for w in written[epoch(phase["b"]) + 2:epoch(phase["idle"]) - 1] if w]
    assert in_a and all(w <= spans[a] for w in in_a)
    assert in_b and all(w <= spans[b] for w in in_b)


def test_without_a_log_path_the_program_still_runs(built):
    env = shim.shim_env(built / "unused.log")
    del env["NEARFAAS_MEMSHIM_LOG"]
    proc = subprocess.run([str(built / "alloc_probe"), "1"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and "not logging" in proc.stderr and len(proc.stdout.splitlines()) == 6


@pytest.mark.parametrize("line, words", [("1 malloc 10 0x10", "expected"), ("1 nope 10 0x10 00000000000000aa", "unknown op"),
                                          ("x malloc 10 0x10 00000000000000aa", "does not parse"),
                                          ("1 malloc 10 0x10 zz", "16 hex digits")])
def test_bad_log_lines_are_named(line, words):
    with pytest.raises(shim.LogError, match=words):
        shim.parse_line(line, "t.log:3")


def test_the_log_stops_at_its_cap_and_says_so(built, tmp_path):
    """A long-lived sampled worker must not fill the node's disk: the shim stops at its cap."""
    log = tmp_path / "capped.log"
    env = shim.shim_env(log, sample_ms=2, max_bytes=300)
    proc = subprocess.run([str(built / "heat_probe")], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert log.stat().st_size <= 300 + 100 + len(shim.FULL)  # the cap, one line in flight, the marker
    assert shim.log_full(log) and log.read_text().endswith(shim.FULL)
    assert all(e.op != "full" for e in shim.read_log(log))
    _, events = shim.run_logged([str(built / "alloc_probe"), "1"], tmp_path / "uncapped.log")
    assert not shim.log_full(tmp_path / "uncapped.log") and len(events) == 6


def test_a_worker_killed_mid_run_leaves_a_readable_log(built, tmp_path):
    """SIGKILL while the shim samples: every line written is whole (one write(2) each), and a
    line cut short by a dying writer is left out rather than failing the read."""
    import signal
    import time

    log = tmp_path / "killed.log"
    proc = subprocess.Popen([str(built / "heat_probe")], env=shim.shim_env(log, sample_ms=2, access_pages=0),
                            stdout=subprocess.DEVNULL)
    time.sleep(0.2)  # inside phase a: writing, sampled
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    events = shim.read_log(log)
    assert [e.op for e in events[:2]] == ["malloc", "malloc"] and any(e.op == "touch" for e in events)
    with open(log, "a") as f:
        f.write("123 touch 40")  # what a writer killed mid-line would leave
    assert shim.read_log(log) == events
