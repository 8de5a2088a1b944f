"""The stream twin (network-attached FPGA, streaming Top-K): monotonicity, limits, constants, the CLI."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from nearfaas.cli.twin import twin
from nearfaas.hw.sourced import Sourced
from nearfaas.twin import stream as st

SIZES = st.PAPER_SIZES
NS = st.PAPER_CONCURRENCY
CORNERS = st._corners(None)


@pytest.mark.parametrize("p", [st.nominal()] + CORNERS[::37], ids=lambda p: "")
def test_latency_non_decreasing_in_size(p):
    sizes = sorted(set(SIZES) | set(range(1, 9000, 97)))
    lat = [st.single_s(s, p) for s in sizes]
    assert all(a <= b for a, b in zip(lat, lat[1:], strict=False))
    for n in NS:
        per = [st.per_request_s(n, s, p) for s in sizes]
        assert all(a <= b for a, b in zip(per, per[1:], strict=False))


@pytest.mark.parametrize("p", [st.nominal()] + CORNERS[::37], ids=lambda p: "")
@pytest.mark.parametrize("size", SIZES)
def test_per_request_non_increasing_in_n(p, size):
    per = [st.per_request_s(n, size, p) for n in NS]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(per, per[1:], strict=False)), per


def test_never_faster_than_the_link():
    for p in [st.nominal()] + CORNERS:
        for s in SIZES:
            for n in NS:
                assert st.per_request_s(n, s, p) >= st.wire_bytes(s, p) * 8 / p["link_bps"]


def test_n1_is_the_single_request_model():
    m = st.model(SIZES, NS, concurrency_size=1024)
    p = st.nominal()
    assert m["per_request"][1].nominal == pytest.approx(st.single_s(1024, p))
    assert m["per_request"][1].nominal == pytest.approx(m["p50"][1024].nominal)
    for s in SIZES:
        assert st.per_request_s(1, s, p) == st.batch_s(1, s, p) == st.single_s(s, p)
        assert st.cold_s(s, p) == pytest.approx(st.single_s(s, p) + st.PR_TIME_S.value)


def test_huge_sizes_become_link_bound():
    huge = 1 << 30
    # one stream whose pipeline takes a whole 64 B beat per cycle (16 lanes of 4 B) outruns 100 Gb/s
    p = {**st.nominal(), "values_per_cycle": 16}
    link = st.wire_bytes(huge, p) * 8 / p["link_bps"]
    assert st.per_request_s(1, huge, p) == pytest.approx(link, rel=1e-3)
    assert huge * 8 / st.per_request_s(1, huge, p) == pytest.approx(100e9 * huge / st.wire_bytes(huge, p), rel=1e-3)
    # many streams over enough II=1 pipelines (16 x 1 GB/s > 12.5 GB/s) saturate the shared link too
    p = st.nominal()
    assert st.per_request_s(64, huge, p) == pytest.approx(st.wire_bytes(huge, p) * 8 / 100e9, rel=1e-3)
    # one II=1 pipeline of 4 B values at 250 MHz is 1 GB/s: pipeline-bound, not link-bound
    assert st.per_request_s(1, huge, p) == pytest.approx(huge / 4 / 250e6, rel=1e-3)


def test_constants_are_sourced_and_none_is_fitted():
    assert st.CONSTANTS and all(isinstance(c, Sourced) for c in st.CONSTANTS.values())
    for name, c in st.CONSTANTS.items():
        assert c.source.strip(), name
        assert not re.search(r"\bfit(ted|ting)?\b|\btuned\b", c.source, re.I), name
        if c.status in ("assumption", "mem"):
            assert c.sweep is not None, f"{name}: an unverified constant needs a sweep"
        if c.sweep is not None:
            assert c.sweep[0] <= c.value <= c.sweep[1]
    assert st.LINK_BPS.value == 100e9 and st.LINK_BPS.status == "src"
    assert st.CLOCK_HZ.value == 250e6 and st.CLOCK_HZ.sweep == (250e6, 300e6)
    assert st.STACK_HOP_S.sweep == (1e-6, 5e-6) and st.PIPELINES.status == "assumption"


def test_ranges_contain_the_nominal():
    m = st.model()
    for key in ("p50", "cold", "per_request"):
        for b in m[key].values():
            assert b.min <= b.nominal <= b.max
            assert b.min < b.max  # the sweeps do move it
    flat = st.model(ranges=False)
    assert all(b.min == b.nominal == b.max for b in flat["p50"].values())


def test_model_rejects_bad_input():
    with pytest.raises(ValueError, match="sizes"):
        st.model([64, -1])
    with pytest.raises(ValueError, match="concurrency"):
        st.model([64], [0])
    with pytest.raises(ValueError, match="unknown"):
        st.model(overrides={"nope": 1})


def _run(*args):
    return CliRunner().invoke(twin, ["stream", *args])


def test_cli_json_shape_not_measured(tmp_path):
    r = _run("--sizes", "64,128,256,1024,2048,4096", "--concurrency", "1,2,4,8,16,32,64", "--json",
             "--results", str(tmp_path / "absent.json"))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    fpga = d["modelled_fpga"]
    assert set(fpga["p50_us"]) == {"64", "128", "256", "1024", "2048", "4096"}
    assert set(fpga["per_request_us"]) == {"1", "2", "4", "8", "16", "32", "64"}
    for row in list(fpga["p50_us"].values()) + list(fpga["per_request_us"].values()):
        assert set(row) == {"nominal", "min", "max"} and row["min"] <= row["nominal"] <= row["max"]
    assert d["measured"].startswith("not measured yet")
    assert {c["name"] for c in d["constants"]} == set(st.CONSTANTS)
    for c in d["constants"]:
        assert set(c) == {"name", "value", "source", "status", "sweep"} and c["source"]


def test_cli_reads_measured_rows_tolerantly(tmp_path):
    f = tmp_path / "stream_topk.json"
    f.write_text(json.dumps({"systems": {"executor": {"p50_us": {"64": 310.0}, "per_request_us": {"1": 320, "2": 200}},
                                         "baremetal": {"p50_us": {"64": 400}}}}))
    r = _run("--sizes", "64,128", "--concurrency", "1,2", "--json", "--results", str(f))
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["measured"]
    assert m["executor"]["p50_us"] == {"64": 310.0, "128": None}
    assert m["executor"]["per_request_us"] == {"1": 320.0, "2": 200.0}
    assert m["baremetal"]["per_request_us"] == st.NOT_MEASURED
    assert m["serverless"] == st.NOT_MEASURED
    r = _run("--sizes", "64,128", "--concurrency", "1,2", "--results", str(f))
    assert r.exit_code == 0, r.output
    assert "modelled" in r.output and "measured" in r.output and "310" in r.output and "not measured yet" in r.output
    f.write_text("{broken")
    r = _run("--json", "--results", str(f))
    assert r.exit_code == 0 and json.loads(r.output)["measured"] == st.NOT_MEASURED


@pytest.mark.parametrize("opt,value,needle", [("--sizes", "64,-128", "-128"), ("--sizes", "64,1.5", "'1.5'"),
                                              ("--sizes", "abc", "'abc'"), ("--sizes", "0", "0"),
                                              ("--concurrency", "1,x", "'x'"), ("--concurrency", "-2", "-2")])
def test_cli_bad_input_is_a_click_error(opt, value, needle):
    r = _run(opt, value)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{opt}'" in r.output and needle in r.output
