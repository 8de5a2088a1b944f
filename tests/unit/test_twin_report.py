"""`nearfaas twin report`: the evaluation set's files, keys, mode and labels, its numbers (pinned in
tests/golden/twin/, or checked by relations derived another way), and its bad-input errors."""

import json
from pathlib import Path

import pytest
import twin_golden as golden
from click.testing import CliRunner

from nearfaas.cli import main
from nearfaas.twin import report
from nearfaas.twin.platforms import APP_KEYS, PLATFORMS
from nearfaas.twin.sim import poisson


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
    # Every block says what it is, and in which mode it was computed.
    for block in (r, r["simulation"], *r["sensitivity"].values()):
        assert "modelled" in block["label"]
    assert r["mode"] == printed["mode"] == r["simulation"]["mode"] == r["headline"]["mode"] == "paper" and "paper mode" in r["label"]
    assert r["alternative_mode"]["mode"] == "measured-here" and "NOT this report's mode" in r["alternative_mode"]["label"]
    assert r["measured_here"]
    # per platform and app: speedup, energy reduction and cost efficiency
    for p in PLATFORMS:
        for a in APP_KEYS:
            cell = printed["headline"]["per_app"][p][a]
            assert cell == {"speedup": r["speedup_vs_cpu"][p][a], "energy_reduction": r["energy_reduction_vs_cpu"][p][a],
                            "cost_efficiency": r["cost_efficiency_vs_cpu_per_app"][p][a]}
        assert printed["headline"]["summary"][p]["cost_efficiency"] == r["cost_efficiency_vs_cpu"][p]


def test_results_json_numbers_are_the_golden_tables(quick):
    """What the command writes is what the golden files pin (tests/golden/twin/, 6 significant
    digits): the headline in paper mode and, as the alternative, in measured-here mode, the
    runtime breakdown and the four sensitivity studies (--quick: 1,000 samples, seed 1)."""
    out, _ = quick
    r = json.loads((out / "results.json").read_text())
    ev, bd = golden.load("evaluate"), golden.load("breakdown")
    for key in ("speedup_vs_cpu", "energy_reduction_vs_cpu", "cost_efficiency_vs_cpu", "cost_efficiency_vs_cpu_per_app"):
        assert golden.diff(golden.rounded(r[key]), ev["paper"][key]) == [], key
        assert golden.diff(golden.rounded(r["alternative_mode"][key]), ev["measured_here"][key]) == [], key
    for p, row in r["runtime_breakdown_s"].items():
        for a, b in row.items():
            assert golden.diff(golden.rounded(b), {k: bd[p][a][k] for k in ("total_s", "by_component_s")}) == [], (p, a)
    assert golden.diff(golden.rounded(golden._numbers(r["sensitivity"])), golden.load("sensitivity")) == []


def test_every_reported_ratio_has_its_nominal_inside_its_p5_p95(quick):
    """An honest band contains the number it is printed beside. Breaks when a constant's draws
    are not centred on its nominal (uniform over a range with the nominal at an end: the DSCS
    speedup was once reported as 3.16 [3.17-3.68])."""
    out, printed = quick
    outside = []
    for metric, per in printed["headline"]["ranges"].items():
        for platform, keys in per.items():
            for key, h in keys.items():
                if not h["p5"] <= h["nominal"] <= h["p95"]:
                    outside.append(f"{metric}/{platform}/{key}: {h['nominal']:.4g} [{h['p5']:.4g}-{h['p95']:.4g}]")
    assert printed["headline"]["ranges"] and not outside, outside


# Assumptions that reach the headline with no range, each said to be fixed in docs/methodology.md.
FIXED_IN_DOCS = {"specs['price_usd']"}


def test_no_constant_reaching_the_headline_is_without_a_range(quick):
    """One traced evaluation reads every assumption/mem constant that has no range: any the
    headline reads must get one, or be one the methodology says is fixed (the device prices).
    Breaks when a swept figure loses its range (e.g. the GPU's memory bandwidth's sweep)."""
    out, _ = quick
    r = json.loads((out / "results.json").read_text())
    reaching = r["uncertainty"]["fixed_reaching"]
    assert {c["name"] for c in reaching} <= FIXED_IN_DOCS, reaching
    methodology = (Path(__file__).resolve().parents[2] / "docs" / "methodology.md").read_text()
    assert "Device prices are fixed" in methodology
    swept = {(c["module"], c["name"]) for c in r["uncertainty"]["swept"]}
    for must in (("nearfaas.twin.stack", "TEMPLATE_S"), ("nearfaas.twin.platforms", "LINK_SWEEPS['s3-like']['first_byte_median_s']"),
                 ("nearfaas.hw.devices.catalog", "_CPU_EFF['gemm'].compute")):
        assert must in swept, must  # the stack, the S3 link and the CPU's GEMM efficiency are swept now
    tornado = r["uncertainty"]["tornado"]["speedup_vs_cpu"]["dscs"]
    assert len(tornado) > 10  # every swept constant that moves it, not a top ten


def test_simulation_block_has_series_and_both_policies(quick):
    out, _ = quick
    sim = json.loads((out / "results.json").read_text())["simulation"]
    assert set(sim["runs"]) == {"near-data", "compute-only"}
    for run in sim["runs"].values():
        assert run["arrivals"] > 0 and run["completed"] + run["rejected"] == run["arrivals"]
        assert len(run["series"]["t"]) == len(run["series"]["queue_len"]) == len(run["series"]["latency_p95"]) > 10
        assert run["latency"]["p50"] <= run["latency"]["p99"]
    assert sim["inputs"]["cold_start_s"]["runtime"]["label"] == "measured"


def test_simulation_numbers_obey_relations_derived_another_way(quick):
    """The rack simulation's numbers against what follows from its inputs without the engine:
    the arrivals are the bursty trace's (6 nodes x 0.75/s, seed 1); with nothing rejected, the
    area under calls-in-system is the sum of the latencies (Little's law, exactly over a drained
    run) and the area under the queue-length series is the total waiting time; near-data beats
    compute-only (the headline of the rack study)."""
    out, _ = quick
    sim = json.loads((out / "results.json").read_text())["simulation"]
    trace = sum(1 for _ in poisson(report.burst_schedule(0.75 * 6), report.SIM_DURATION_S, seed=1))
    for run in sim["runs"].values():
        assert run["arrivals"] == trace and run["rejected"] == 0 and run["completed"] == trace
        lat = run["latency"]
        assert run["time_avg_in_system"] * run["sim_time_s"] == pytest.approx(run["completed"] * lat["mean"], rel=1e-9)
        s = run["series"]
        assert sum(s["queue_len"]) * s["bin_s"] == pytest.approx(run["mean_wait_s"] * run["completed"], rel=1e-9, abs=1e-12)
        assert s["t"] == [k * s["bin_s"] for k in range(len(s["t"]))] and s["t"][-1] >= report.SIM_DURATION_S - s["bin_s"]
        assert lat["p50"] <= lat["p95"] <= lat["p99"] and lat["p50"] > 0
    nd, co = sim["runs"]["near-data"], sim["runs"]["compute-only"]
    assert nd["latency"]["mean"] < co["latency"]["mean"] and nd["latency"]["p99"] < co["latency"]["p99"]
    # a near-data request pays at least its own stages' modelled means on its fastest path
    means = sim["inputs"]["service_means_s"]
    fastest = min(sum(min(means.get(f"{a}-{fn};{t}", float("inf")) for t in ("cpu", "dscs")) for fn in ("pre", "infer", "notify"))
                  for a in (k.replace("_", "-") for k in APP_KEYS))
    assert nd["latency"]["p50"] > 0.5 * fastest


def test_html_is_self_contained_with_every_figure(quick):
    out, printed = quick
    page = (out / "report.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 10 and printed["files"]["html"].endswith("report.html")
    assert page.count("data:image/png;base64,") == len(pngs)
    assert "src='http" not in page and 'src="http' not in page  # nothing fetched from elsewhere
    assert "modelled" in page and "Measured on this machine" in page


def test_measured_here_report_is_labelled(tmp_path):
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--nodes", "4", "--apps", "credit_risk,chatbot", "--platforms", "dscs",
                                    "--baseline", "measured-here", "--out", str(tmp_path), "--no-progress"])
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["mode"] == "measured-here" and "NOT the paper's method" in r["label"] and r["alternative_mode"]["mode"] == "paper"
    assert r["inputs"]["options"]["cpu_compute"] == "measured" and r["simulation"]["inputs"]["dscs_storage_nodes"] == 2
    assert "measured-here mode: NOT the paper's method" in res.output and "measured-here mode" in (tmp_path / "report.html").read_text()


def test_headline_hook_takes_any_evaluate():
    """The hook an uncertainty study re-runs: any evaluate-like callable, its kwargs passed through."""
    seen = []

    def fake(**kw):
        seen.append(kw)
        return {"mode": "paper", "label": "x", "speedup_vs_cpu": {"dscs": {"a": 2.0, "mean": 2.0, "geomean": 2.0}},
                "energy_reduction_vs_cpu": {"dscs": {"a": 3.0, "mean": 3.0, "geomean": 3.0}}, "cost_efficiency_vs_cpu": {"dscs": 4.0},
                "cost_efficiency_vs_cpu_per_app": {"dscs": {"a": 5.0, "mean": 5.0, "geomean": 5.0}}}

    h = report.headline(fake, apps=["a"])
    assert seen == [{"apps": ["a"]}]
    assert h["per_app"] == {"dscs": {"a": {"speedup": 2.0, "energy_reduction": 3.0, "cost_efficiency": 5.0}}}
    assert h["summary"]["dscs"] == {"speedup_geomean": 2.0, "energy_reduction_geomean": 3.0, "cost_efficiency": 4.0}
    real = report.headline(apps=["credit_risk"], platforms=["dscs"], baseline="measured-here")
    assert real["mode"] == "measured-here" and set(real["per_app"]["dscs"]) == {"credit_risk"}


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
    assert bd["mode"] == "paper" and bd["inputs"]["latency"]["statistic"] == "p95"
    here = CliRunner().invoke(main, ["twin", "e2e", "asset_damage", "--platform", "cpu", "--baseline", "measured-here"])
    assert here.exit_code == 0 and "measured-here mode" in here.output and "mean" in here.output, here.output
    bad = CliRunner().invoke(main, ["twin", "e2e", "asset_damage", "--platform", "tpu"])
    assert bad.exit_code != 0 and "tpu" in bad.output


def test_a_report_piped_says_each_step_as_a_line(tmp_path):
    # catches: a report whose stderr is not a terminal printing nothing until it ends (rich draws
    # no progress there), or a step line written to stdout, where it would break --json
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--apps", "credit_risk", "--platforms", "cpu,dscs", "--nodes", "2",
                                    "--minutes", "1", "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    steps = [line for line in res.stderr.splitlines() if line.startswith("twin report: ")]
    assert "twin report: rack-scale simulation" in steps and steps[-1] == "twin report: writing figures and report.html"
    assert any(s.endswith(" points") for s in steps) and any(s.endswith(": done") for s in steps)
    assert "twin report:" not in res.stdout and json.loads(res.stdout)["mode"]
