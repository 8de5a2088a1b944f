"""Porter's placement engine (native/memshim/placement.c, memory/placement.py): the shim puts
each allocation where the hint file says, within the DRAM budget; during the call a slow block
that turns hot is promoted and a cold fast one demoted to make room; the node writes the hint
file from the function's earlier runs; the slow NUMA node is found, or none with one node."""

from __future__ import annotations

import subprocess

import pytest

from memshim_fixtures import *  # noqa: F403  (built, pytestmark)
from nearfaas.memory import placement, profile, shim


def _sites(built, tmp_path, env: dict, name="p"):
    """alloc_probe's blocks by site (A malloc, B calloc, C mmap), its log, and the stacks."""
    proc, events = shim.run_logged([str(built / "alloc_probe"), "1"], tmp_path / f"{name}.log",
                                   env=shim.shim_env(tmp_path / "unused.log") | env)
    assert proc.returncode == 0, proc.stderr
    truth = [line.split() for line in proc.stdout.splitlines()]
    addr = {site: int(a, 16) for op, _, a, site in truth if op in ("malloc", "calloc", "mmap")}
    stack = {site: next(e.stack for e in events if e.addr == addr[site] and e.op in shim.ALLOCATES) for site in addr}
    placed = {site: next((e.op for e in events if e.addr == addr[site] and e.op in ("fast", "slow")), None) for site in addr}
    return placed, stack, events


def test_allocations_go_where_the_hint_says_within_the_budget(built, tmp_path):
    placed, stack, _ = _sites(built, tmp_path, {})
    assert placed == {"A": None, "B": None, "C": None}  # no hint, no budget: no placement at all
    hints = tmp_path / "hints.txt"
    hints.write_text(f"{stack['A']} slow 1.00\nnot a line\n{stack['C']} dram 0.50\n")
    placed, _, events = _sites(built, tmp_path, {"NEARFAAS_MEMSHIM_HINTS": str(hints)}, "hinted")
    assert placed == {"A": "slow", "B": "fast", "C": "fast"}  # B has no hint: a new site starts on DRAM
    placed, _, _ = _sites(built, tmp_path, {"NEARFAAS_MEMSHIM_HINTS": str(hints), "NEARFAAS_MEMSHIM_DRAM_BYTES": "500000"},
                          "capped")
    assert placed == {"A": "slow", "B": "fast", "C": "slow"}  # C (1 MiB) hinted dram, but 400 kB of 500 kB are taken
    folded = profile.decisions(events)
    assert folded["placed"] and folded["slow_bytes"] == 200000 and folded["fast_bytes"] == 400000 + 1048576


def test_a_hot_slow_block_is_promoted_and_a_cold_fast_one_demoted(built, tmp_path):
    """heat_probe writes block A, then B: with room for one block, A (hinted slow) is promoted
    while B sits cold, then B comes back when A cools and B heats."""
    log = tmp_path / "warm.log"
    proc = subprocess.run([str(built / "heat_probe")], env=shim.shim_env(log, sample_ms=10), capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    if "sampling is unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    first = shim.read_log(log)
    a_stack, b_stack = [e.stack for e in first if e.op == "malloc"]
    hints = tmp_path / "hints.txt"
    hints.write_text(f"{a_stack} slow 1.00\n{b_stack} dram 1.00\n")
    log.unlink()
    env = shim.shim_env(log, sample_ms=10) | {"NEARFAAS_MEMSHIM_HINTS": str(hints), "NEARFAAS_MEMSHIM_DRAM_BYTES": str(64 * 4096)}
    proc = subprocess.run([str(built / "heat_probe")], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = [line.split() for line in proc.stdout.splitlines()]
    phase = {row[1]: int(row[2]) for row in out if row[0] == "phase"}
    events = shim.read_log(log)
    a, b = (int(x, 16) for x in out[0][1:3])
    assert [(e.op, e.addr) for e in events if e.op in ("fast", "slow")] == [("slow", a), ("fast", b)]
    moves = [(e.op, e.addr, e.t_ns) for e in events if e.op in ("promote", "demote")]
    in_a = [(op, addr) for op, addr, t in moves if phase["a"] < t <= phase["b"]]
    assert ("demote", b) in in_a and ("promote", a) in in_a, moves  # A hot, B cold: they swap
    assert in_a.index(("demote", b)) < in_a.index(("promote", a))  # room is made first
    in_b = [(op, addr) for op, addr, t in moves if phase["b"] < t <= phase["read"]]
    assert ("promote", b) in in_b, moves  # and back when B heats


def test_the_node_writes_a_hint_file_from_earlier_runs(built, tmp_path):
    empty = placement.prepare(tmp_path / "none", dram_bytes=1 << 20, period_ms=10)
    assert empty == {"NEARFAAS_MEMSHIM_DRAM_BYTES": str(1 << 20)}  # a new function: DRAM first, no hint
    runs = tmp_path / "runs"
    runs.mkdir()
    shim.run_logged([str(built / "heat_probe")], runs / "one.log", sample_ms=10)
    env = placement.prepare(runs, dram_bytes=None, period_ms=10)
    lines = (runs / placement.HINT_FILE).read_text().splitlines()
    assert env == {"NEARFAAS_MEMSHIM_HINTS": str(runs / placement.HINT_FILE)}
    assert len(lines) == 2 and all(len(line.split()[0]) == 16 and line.split()[1] in ("dram", "slow") for line in lines)


def test_node_budget_reads_its_setting_or_half_the_memory(monkeypatch):
    monkeypatch.setenv("NEARFAAS_NODE_DRAM_BYTES", "12345")
    assert placement.node_budget() == 12345
    monkeypatch.setenv("NEARFAAS_NODE_DRAM_BYTES", "lots")
    with pytest.raises(ValueError, match="NEARFAAS_NODE_DRAM_BYTES"):
        placement.node_budget()
    monkeypatch.delenv("NEARFAAS_NODE_DRAM_BYTES")
    assert placement.node_budget() > 0


def test_the_slow_node_is_the_memory_only_one(tmp_path):
    def node(n, cpus):
        (tmp_path / f"node{n}").mkdir()
        (tmp_path / f"node{n}" / "cpulist").write_text(cpus + "\n")

    node(0, "0-7")
    assert placement.slow_node(tmp_path) is None  # one node: decisions are recorded
    node(1, "")
    node(2, "8-15")
    assert placement.slow_node(tmp_path) == 1  # CXL memory: a node without CPUs
    assert placement.slow_node(tmp_path / "missing") is None
