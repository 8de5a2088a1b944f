"""Golden tests: the twin's headline tables (speedup, energy, cost, runtime breakdown, the four
sensitivity studies, the rack simulation and the simulator engine) against tests/golden/twin/*.json.

A failure lists every number that moved. An intended change: regenerate and review the diff,
    NEARFAAS_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/test_twin_golden.py
"""

from __future__ import annotations

import pytest
import twin_golden as golden


@pytest.mark.parametrize("name", list(golden.TABLES))
def test_twin_table_matches_golden(name):
    golden.check(name, golden.TABLES[name]())


def test_golden_files_are_the_tables_rounded():
    # The comparison itself: equal tables pass, a moved number is named with its path.
    t = golden.load("evaluate")
    assert golden.diff(t, t) == []
    moved = golden.rounded(t["paper"]["speedup_vs_cpu"]["dscs"]["geomean"] * 1.001)
    bad = {**t, "paper": {**t["paper"], "speedup_vs_cpu": {**t["paper"]["speedup_vs_cpu"],
                                                           "dscs": {**t["paper"]["speedup_vs_cpu"]["dscs"], "geomean": moved}}}}
    assert golden.diff(bad, t) == [f"/paper/speedup_vs_cpu/dscs/geomean: {t['paper']['speedup_vs_cpu']['dscs']['geomean']!r} -> {moved!r}"]
    assert golden.sig(1.23456789) == 1.23457 and golden.rounded(float("nan")) is None
