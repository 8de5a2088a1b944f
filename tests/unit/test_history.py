"""The last-writer-wins history checker used by benchmarks/consistency.py."""

from __future__ import annotations

from nearfaas.bench.history import ABSENT, Op, check


def test_the_worked_example_is_stale_and_resurrected():
    history = [Op("put", "k", 0, 1, True, "a"), Op("delete", "k", 2, 3, True), Op("get", "k", 4, 5, True, "a")]
    v = check(history, final={"k": "a"})
    assert v.counts()["stale"] == 1 and v.counts()["resurrected"] == 1 and v.counts()["lost"] == 0


def test_a_clean_history_passes():
    history = [Op("put", "k", 0, 1, True, "a"), Op("get", "k", 2, 3, True, "a"), Op("put", "k", 4, 5, True, "b"),
               Op("get", "k", 6, 7, True, "b"), Op("delete", "k", 8, 9, True), Op("get", "k", 10, 11, True, ABSENT)]
    v = check(history, final={"k": ABSENT}, replicas={"k": [ABSENT, ABSENT]})
    assert v.counts() == {"operations": 6, "acknowledged_writes": 3, "lost": 0, "resurrected": 0, "stale": 0, "diverged": 0}


def test_overlapping_writes_may_be_read_in_either_order():
    history = [Op("put", "k", 0, 2, True, "a"), Op("put", "k", 1, 3, True, "b"), Op("get", "k", 4, 5, True, "a")]
    assert check(history, final={"k": "a"}).counts()["stale"] == 0  # a and b overlap: a may be the later one


def test_a_lost_write_and_divergence_are_found():
    history = [Op("put", "k", 0, 1, True, "a"), Op("put", "k", 2, 3, True, "b")]
    v = check(history, final={"k": "a"}, replicas={"k": ["a", "b"]})
    assert v.counts()["lost"] == 1 and v.counts()["diverged"] == 1


def test_unknown_outcomes_excuse_reads_but_not_invented_values():
    history = [Op("put", "k", 0, 1, True, "a"), Op("put", "k", 2, 3, None, "b"), Op("get", "k", 4, 5, True, "b"),
               Op("get", "k", 6, 7, True, "zzz")]
    v = check(history, final={"k": "b"})
    assert [s[2] for s in v.stale] == ["zzz"]
    assert v.counts()["lost"] == 0  # the last write's outcome is unknown: the end state is not judged


def test_refused_writes_have_no_effect():
    history = [Op("put", "k", 0, 1, True, "a"), Op("put", "k", 2, 3, False, "b"), Op("get", "k", 4, 5, True, "b")]
    assert check(history, final={"k": "a"}).counts()["stale"] == 1
