"""Porter's offline tuner (memory/profile.py): a profile folds the shim's events per stack, and
the hints put the hottest stacks on DRAM within the budget, with the runs' agreement as
confidence; the worked example from the module's opening comment."""

from __future__ import annotations

import pytest

from nearfaas.memory.profile import hints, size_class, summarize
from nearfaas.memory.shim import Event

A, B = "a" * 16, "b" * 16


def _run(hot_pages: int, cold_pages: int, periods: int = 10, hot=A, cold=B) -> list[Event]:
    ev = [Event(0, "malloc", hot_pages * 4096, 0x100000, hot), Event(1, "mmap", cold_pages * 4096, 0x900000, cold)]
    for p in range(periods):
        t = 10 + p * 10_000_000
        ev.append(Event(t, "touch", hot_pages * 4096, 0x100000, hot))
        if p == 0:
            ev.append(Event(t, "touch", cold_pages * 4096, 0x900000, cold))
    return ev


def test_the_worked_example():
    prof = summarize(_run(100, 300), period_ms=10)
    assert prof["periods"] == 10 and prof["footprint_pages"] == 400
    heat = {s["stack"]: s["heat"] for s in prof["stacks"]}
    assert heat[A] == pytest.approx(1.0) and heat[B] == pytest.approx(0.1)
    got = {h["stack"]: (h["tier"], h["confidence"]) for h in hints([prof], dram_share=0.5)}
    assert got == {A: ("dram", 1.0), B: ("slow", 1.0)}


def test_hints_survive_a_doubled_input_and_count_disagreement():
    small, big = summarize(_run(100, 300), 10), summarize(_run(200, 600), 10)
    assert [h["stack"] for h in hints([small])] == [h["stack"] for h in hints([big])]  # by stack, not size
    both = {h["stack"]: h for h in hints([small, big])}
    assert both[A]["tier"] == "dram" and both[A]["confidence"] == 1.0 and both[A]["runs"] == 2
    assert set(both[A]["size_classes"]) == {size_class(100 * 4096), size_class(200 * 4096)}
    tight = {h["stack"]: h for h in hints([small, summarize(_run(100, 300), 10)], dram_share=0.1)}
    assert tight[A]["tier"] == "slow"  # 100 of 400 pages do not fit in 10%


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_bad_budget_names_the_field(share):
    with pytest.raises(ValueError, match="dram_share"):
        hints([], share)
