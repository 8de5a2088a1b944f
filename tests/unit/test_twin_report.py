"""`nearfaas twin report`: the evaluation set's files, keys and labels, and its bad-input errors."""

import json

import pytest
from click.testing import CliRunner

from nearfaas.cli import main
from nearfaas.twin import report
from nearfaas.twin.platforms import APP_KEYS, PLATFORMS


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("twin")
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--nodes", "6", "--out", str(out), "--json", "--no-progress"])
    assert res.exit_code == 0, res.output
    return out, json.loads(res.output)


def test_results_json_has_the_issue_keys(quick):
    out, printed = quick
    r = json.loads((out / "results.json").read_text())
    for key in ("speedup_vs_cpu", "energy_reduction_vs_cpu"):
        assert set(r[key]) == set(PLATFORMS)
        for p in PLATFORMS:
            assert set(r[key][p]) == {*APP_KEYS, "mean", "geomean"}
            assert all(v > 0 for v in r[key][p].values())
        assert all(v == pytest.approx(1.0) for v in r[key]["cpu"].values())
    assert set(r["cost_efficiency_vs_cpu"]) == set(PLATFORMS) and r["cost_efficiency_vs_cpu"]["cpu"] == pytest.approx(1.0)
    assert set(r["sensitivity"]) == {"batch", "tail", "accelerated_functions", "cold_start"}
    assert printed["speedup_vs_cpu"] == r["speedup_vs_cpu"]
    # Every block says what it is.
    for block in (r, r["simulation"], *r["sensitivity"].values()):
        assert "modelled" in block["label"]
    assert r["measured_here"]


def test_simulation_block_has_series_and_both_policies(quick):
    out, _ = quick
    sim = json.loads((out / "results.json").read_text())["simulation"]
    assert set(sim["runs"]) == {"near-data", "compute-only"}
    for run in sim["runs"].values():
        assert run["arrivals"] > 0 and run["completed"] + run["rejected"] == run["arrivals"]
        assert len(run["series"]["t"]) == len(run["series"]["queue_len"]) == len(run["series"]["latency_p95"]) > 10
        assert run["latency"]["p50"] <= run["latency"]["p99"]
    assert sim["inputs"]["cold_start_s"]["runtime"]["label"] == "measured"


def test_html_is_self_contained_with_every_figure(quick):
    out, printed = quick
    page = (out / "report.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 10 and printed["files"]["html"].endswith("report.html")
    assert page.count("data:image/png;base64,") == len(pngs)
    assert "src='http" not in page and 'src="http' not in page  # nothing fetched from elsewhere
    assert "modelled" in page and "Measured on this machine" in page


def test_speedup_table_rows():
    r = {"speedup_vs_cpu": {"cpu": {"a": 1.0, "mean": 1.0, "geomean": 1.0}, "dscs": {"a": 4.0, "mean": 4.0, "geomean": 4.0}}}
    assert report.speedup_table(r) == [["platform", "a", "mean", "geomean"], ["cpu", "1.00", "1.00", "1.00"], ["dscs", "4.00", "4.00", "4.00"]]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--platforms", "cpu,tpu"], "tpu"),
        (["--apps", "doom"], "doom"),
        (["--rate", "-5"], "rate"),
        (["--nodes", "1"], "nodes"),
        (["--link", "carrier-pigeon"], "carrier-pigeon"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, args, needle):
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--no-progress", "--out", str(tmp_path), *args])
    assert res.exit_code != 0 and needle in res.output and "Traceback" not in res.output, res.output


def test_malformed_trace_names_line_and_column(tmp_path):
    trace = tmp_path / "inv.csv"
    trace.write_text("HashOwner,HashApp,HashFunction,Trigger," + ",".join(str(i) for i in range(1, 1441)) + "\n"
                     + "o,a,f,http," + ",".join(["1"] * 5 + ["x"] + ["0"] * 1434) + "\n")
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--no-progress", "--out", str(tmp_path / "r"), "--trace", str(trace)])
    assert res.exit_code != 0 and "line 2" in res.output and "column 10" in res.output, res.output


def test_e2e_command_lists_terms_with_labels():
    res = CliRunner().invoke(main, ["twin", "e2e", "asset_damage", "--platform", "dscs", "--json"])
    assert res.exit_code == 0, res.output
    bd = json.loads(res.output)
    assert {t["label"] for s in bd["stages"] for t in s["terms"]} == {"measured", "modelled"}
    bad = CliRunner().invoke(main, ["twin", "e2e", "asset_damage", "--platform", "tpu"])
    assert bad.exit_code != 0 and "tpu" in bad.output
