"""MBWU-based efficiency metrics (econ/mbwu.py): the thesis's own counts give its reductions."""

from __future__ import annotations

import pytest

from nearfaas.econ import mbwu

HOST = mbwu.Platform("host", cost_usd=1.0, power_w=100.0, volume_m3=0.03)
EMBEDDED = mbwu.Platform("embedded", cost_usd=0.03, power_w=10.0, volume_m3=0.001)  # cost ratio 0.03 (issue 20)


@pytest.mark.parametrize("landscape,host_mbwus,emb_mbwus,expected", [
    ("integrated", 5.95, 0.5, 64.0), ("network", 5.2, 0.37, 57.86), ("disaggregated", 3.28, 0.37, 73.4)])
def test_the_thesis_counts_give_its_dollar_reductions(landscape, host_mbwus, emb_mbwus, expected):
    got = mbwu.compare(HOST, EMBEDDED, host_mbwus, emb_mbwus)["usd_per_mbwu_reduction_pct"]
    assert got == pytest.approx(expected, abs=1.0), landscape


def test_metrics_divide_investments_by_mbwus():
    e = mbwu.efficiency(HOST, 2.0)
    assert e["usd_per_mbwu"] == 0.5 and e["m3_per_mbwu"] == 0.015
    assert e["kwh_per_mbwu"] == pytest.approx(100.0 / 3.6e6 / 2.0)  # one second of 100 W, per MBWU
    assert mbwu.mbwus(7314.7, 7314.7) == 1.0
    assert mbwu.reduction_pct(2.0, 3.0) == pytest.approx(-50.0)  # offloading can cost more
    assert mbwu.efficiency(HOST, 0.0)["usd_per_mbwu"] is None


def test_a_zero_mbwu_and_bad_platforms_are_refused():
    with pytest.raises(ValueError, match="MBWU must be above 0"):
        mbwu.mbwus(10.0, 0.0)
    with pytest.raises(ValueError, match="platforms.host.power_w"):
        mbwu.Platform("host", 1.0, -5.0, 1.0)


def test_profile_errors_name_the_field(tmp_path):
    p = tmp_path / "p.yml"
    p.write_text("platforms:\n  host: {cost_usd: 1, power_w: 2, volume_m3: 3}\n  embedded: {cost_usd: 1, watts: 2, volume_m3: 3}\n")
    with pytest.raises(ValueError, match=r"platforms.embedded: missing power_w; unknown watts"):
        mbwu.load_profile(p)
    p.write_text("platforms: [1, 2]\n")
    with pytest.raises(ValueError, match="'platforms' mapping"):
        mbwu.load_profile(p)
    p.write_text("platforms: {host: {")
    with pytest.raises(ValueError, match="not valid YAML"):
        mbwu.load_profile(p)


def test_the_example_profile_loads():
    from pathlib import Path

    got = mbwu.load_profile(Path(__file__).resolve().parents[2] / "examples" / "econ" / "platforms.yml")
    assert got["embedded"].cost_usd < got["host"].cost_usd
