"""nearfaas.hw.dse: the design-space sweep, Pareto frontiers, the design-point report, the CLI."""

import json
import math

import pytest
from click.testing import CliRunner

from nearfaas.cli.hw import hw
from nearfaas.hw import dse
from nearfaas.hw.dsa import compile_workload, load_ops


@pytest.fixture(scope="module")
def sks():
    return dse.load_skeletons(["logreg", "resnet50", "bert_base"])


def small_space():
    return dse.default_space(sides=(8, 32, 128), bytes_per_pe=(64, 256), drams=("ddr4", "hbm2"))


def test_space_has_at_least_650_distinct_configs():
    space = dse.default_space()
    keys = {dse.config_key(c) for c in space}
    assert len(keys) == len(space) >= 650
    assert {c.rows for c in space} == {c.cols for c in space} == set(dse.SIDES)
    assert any(c.rows != c.cols for c in space)
    assert {str(c.dram) for c in space} == {"ddr4", "ddr5", "hbm2"}
    assert max(c.ifmap_sram_kib + c.filter_sram_kib + c.ofmap_sram_kib for c in space) <= 32 * 1024
    assert all(c.vpu_lanes == c.cols and c.technology_nm == 14 and c.clock_ghz == 1.0 for c in space)


def test_evaluate_matches_the_compiler(sks):
    from nearfaas.models import shapes_only

    for cfg in (dse.make_config(8, 32, 64, "ddr4"), dse.make_config(256, 64, 1024, "hbm2"), dse.DESIGN_POINT.validated()):
        em = dse.energy_model(cfg)
        for key in ("resnet50", "bert_base"):
            r = dse.evaluate(sks[key], cfg, em)
            t = compile_workload(load_ops(shapes_only(key, "full"), batch=1), cfg).totals()
            assert r["cycles"] == t["cycles"]
            assert r["dram_bytes"] == t["dram_bytes_in"] + t["dram_bytes_out"]
            assert r["macs"] == t["macs"]


def test_restricted_sweep_pareto_not_dominated(sks):
    res = dse.sweep(small_space(), ["logreg", "resnet50"], 25, skeletons=sks)
    assert len(res.configs) == 3 * 3 * 2 * 2 and len(res.points) == 2 * len(res.configs)
    for front, cost in ((res.power_frontier, "power_w"), (res.area_frontier, "area_mm2")):
        assert front
        for p in front:
            assert not dse.dominated(p, res.configs, cost, "geomean_inferences_per_s")
        ids = {p["config_id"] for p in front}
        for q in res.configs:  # everything off the frontier is dominated by something
            if q["config_id"] not in ids:
                assert dse.dominated(q, res.configs, cost, "geomean_inferences_per_s")


def test_feasibility_respects_the_budget(sks):
    space = small_space()
    res = dse.sweep(space, ["logreg", "resnet50"], 25, skeletons=sks)
    powers = sorted(r["power_w"] for r in res.configs)
    budget = powers[len(powers) // 2]
    tight = dse.sweep(space, ["logreg", "resnet50"], budget, skeletons=sks)
    assert tight.optimum["power_w"] <= budget
    feas = [r for r in tight.configs if r["power_w"] <= budget]
    assert tight.optimum["geomean_inferences_per_s"] == max(r["geomean_inferences_per_s"] for r in feas)
    assert tight.optimum["geomean_inferences_per_s"] <= res.optimum["geomean_inferences_per_s"]
    assert all(r["feasible_15w_peak"] == (r["peak_accel_w"] <= 15) for r in tight.configs)
    none = dse.sweep(space, ["logreg"], powers[0] / 2, skeletons=sks)
    assert none.optimum is None and "no configuration" in none.reason
    avg = dse.sweep(space, ["logreg", "resnet50"], budget, skeletons=sks, power="average")
    assert avg.optimum["max_accel_w"] <= budget


def test_report_design_point_finite_and_parts_add_up(sks):
    rep = dse.report(["logreg", "resnet50", "bert_base"], skeletons=sks)
    dp = rep["design_point"]
    assert rep["label"].startswith("modelled")
    assert (dp["rows"], dp["cols"], dp["sram_kib"], dp["dram"]) == (128, 128, 4096, "ddr5")
    assert math.isfinite(dp["area_mm2"]) and dp["area_mm2"] > 0
    for r in rep["models"]:
        for k in ("throughput", "latency_s", "accel_w", "dram_w", "energy_total_j"):
            assert math.isfinite(r[k]) and r[k] > 0, (r["model"], k)
        assert r["accel_w"] + r["dram_w"] == pytest.approx(r["total_w"], rel=1e-12)
        parts = sum(r[f"energy_{p}_j"] for p in ("mac", "sram", "dram", "vpu", "static"))
        assert parts == pytest.approx(r["energy_total_j"], rel=1e-12)
        assert r["accel_w"] * r["latency_s"] == pytest.approx(r["energy_total_j"] - r["energy_dram_j"], rel=1e-9)
    bert = next(r for r in rep["models"] if r["model"] == "bert_base")
    assert bert["throughput_unit"] == "tokens/s" and bert["throughput"] == pytest.approx(128 / bert["latency_s"])


def test_bad_input_errors():
    with pytest.raises(dse.DseError, match="budget"):
        dse.sweep([dse.DESIGN_POINT], ["logreg"], 0)
    with pytest.raises(dse.DseError, match="unknown model"):
        dse.parse_models("resnet50,nope")
    r = CliRunner().invoke(hw, ["dse", "--budget-w", "-5", "--no-progress"])
    assert r.exit_code != 0 and "budget" in r.output
    r = CliRunner().invoke(hw, ["dse", "--models", "resnet50,alexnet", "--no-progress"])
    assert r.exit_code != 0 and "alexnet" in r.output
    r = CliRunner().invoke(hw, ["report", "--models", "alexnet"])
    assert r.exit_code != 0 and "alexnet" in r.output


def test_cli_report_table_and_json():
    r = CliRunner().invoke(hw, ["report"])
    assert r.exit_code == 0, r.output
    assert "modelled" in r.output and "frames/s" in r.output and "tokens/s" in r.output and "DRAM W" in r.output
    r = CliRunner().invoke(hw, ["report", "--json", "--models", "resnet50"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["models"][0]["model"] == "resnet50" and d["design_point"]["area_mm2"] > 0


def test_cli_dse_outputs(tmp_path):
    r = CliRunner().invoke(hw, ["dse", "--models", "logreg", "--out", str(tmp_path), "--json", "--budget-w", "15", "--no-progress"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["configs"] >= 650 and d["points"] == d["configs"] and d["budget_w"] == 15
    assert d["optimum"]["power_w"] <= 15 and d["reason"]
    for name in ("points.csv", "configs.csv", "pareto_power.csv", "pareto_area.csv", "pareto_power.png", "pareto_area.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert (tmp_path / "pareto_power.png").read_bytes()[:4] == b"\x89PNG"
    lines = (tmp_path / "points.csv").read_text().splitlines()
    assert len(lines) == d["points"] + 1 and "accel_w" in lines[0] and "dram_w" in lines[0]


def test_cli_dse_text_with_progress_bar():
    r = CliRunner().invoke(hw, ["dse", "--models", "logreg", "--budget-w", "25"])
    assert r.exit_code == 0, r.output
    assert "chosen optimum (25 W)" in r.stdout and "690 configs" in r.stdout and "modelled" in r.stdout
