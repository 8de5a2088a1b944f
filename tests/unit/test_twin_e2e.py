"""The end-to-end twin (nearfaas.twin.e2e, power, cost, platforms): structure and invariants,
not target numbers (every figure is modelled)."""

from __future__ import annotations

import math

import pytest

from nearfaas.apps import APPS
from nearfaas.twin import cost, e2e, platforms, power

PLATFORMS = ("cpu", "gpu", "fpga", "ns_arm", "ns_mobile_gpu", "ns_fpga", "dscs")


@pytest.fixture(scope="module")
def result():
    return e2e.evaluate()


def test_platform_keys_exact():
    assert platforms.PLATFORMS == PLATFORMS


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("app", list(APPS))
def test_every_app_platform_finite_positive_and_terms_sum(app, platform):
    bd = e2e.end_to_end(app, platform)
    assert [s.name for s in bd.stages] == ["f1", "f2", "f3"]
    for t in bd.terms:
        assert math.isfinite(t.value_s) and t.value_s >= 0, (t.name, t.value_s)
        assert t.label in ("measured", "modelled") and t.source
    for s in bd.stages:
        assert s.total_s > 0 and math.isfinite(s.total_s)
    assert bd.total_s > 0 and math.isfinite(bd.total_s)
    assert math.isclose(sum(t.value_s for t in bd.terms), bd.total_s, rel_tol=1e-12)
    assert math.isclose(sum(s.total_s for s in bd.stages), bd.total_s, rel_tol=1e-12)
    # f2 always has a compute term; f3 runs on the CPU and is measured
    assert any(t.name == "compute" for t in bd.stages[1].terms)
    f3c = [t for t in bd.stages[2].terms if t.name == "compute"]
    assert f3c and f3c[0].label == "measured"


def test_cpu_speedup_exactly_one(result):
    for app in APPS:
        assert result["speedup_vs_cpu"]["cpu"][app] == 1.0
        assert result["energy_reduction_vs_cpu"]["cpu"][app] == 1.0
    assert result["speedup_vs_cpu"]["cpu"]["geomean"] == pytest.approx(1.0)
    assert result["cost_efficiency_vs_cpu"]["cpu"] == 1.0


def test_evaluate_shape(result):
    for key in ("speedup_vs_cpu", "energy_reduction_vs_cpu"):
        assert set(result[key]) == set(PLATFORMS)
        for p, v in result[key].items():
            assert set(v) == set(APPS) | {"mean", "geomean"}
            assert all(math.isfinite(x) and x > 0 for x in v.values()), p
    assert set(result["cost_efficiency_vs_cpu"]) == set(PLATFORMS)
    assert "modelled" in result["label"]
    assert result["inputs"]["link"] == "s3-like"
    assert set(result["breakdowns"]) == set(PLATFORMS)


@pytest.mark.parametrize("app", list(APPS))
def test_input_bytes_over_network(app):
    for p in platforms.NEAR_STORAGE:
        assert e2e.end_to_end(app, p).network_bytes(input_only=True) == 0
    for p in platforms.TRADITIONAL:
        assert e2e.end_to_end(app, p).network_bytes(input_only=True) > 0


@pytest.mark.parametrize("platform", platforms.TRADITIONAL)
def test_s3_slower_than_dc25g_for_traditional(platform):
    for app in APPS:
        assert e2e.end_to_end(app, platform, link="s3-like").total_s > e2e.end_to_end(app, platform, link="dc-25g").total_s


def test_cpu_modes_and_labels():
    m = e2e.end_to_end("asset_damage", "cpu")
    x = e2e.end_to_end("asset_damage", "cpu", cpu_compute="modelled")
    f2m = [t for t in m.stages[1].terms if t.name == "compute"][0]
    f2x = [t for t in x.stages[1].terms if t.name == "compute"][0]
    assert f2m.label == "measured" and "not a Xeon 8275CL" in f2m.source
    assert f2x.label == "modelled"
    stack = [t for t in m.stages[0].terms if t.component == "stack"][0]
    assert stack.label == "measured" and "invoke_overhead.json" in stack.source and stack.value_s > 0
    with pytest.raises(ValueError, match="cpu_compute"):
        e2e.end_to_end("asset_damage", "cpu", cpu_compute="guess")


def test_batch_scales():
    one = e2e.end_to_end("chatbot", "dscs", batch=1)
    eight = e2e.end_to_end("chatbot", "dscs", batch=8)
    assert eight.total_s > one.total_s


@pytest.mark.parametrize("platform", ["gpu", "fpga", "ns_mobile_gpu", "dscs"])
def test_batching_amortises_weights_on_devices(platform):
    """A batch reuses the weights and the per-layer launches: f2's time grows with the batch but
    never faster than linearly. Where batch 1 is weight- or launch-bound (the DSA, the GPU) the
    time per item must fall; on the FPGAs and the mobile GPU BERT is compute-bound already."""
    f2 = [e2e.end_to_end("chatbot", platform, batch=b).stages[1].terms for b in (1, 4, 16)]
    compute = [next(t.value_s for t in terms if t.name == "compute") for terms in f2]
    assert compute[0] < compute[1] < compute[2]
    per_item = [c / b for c, b in zip(compute, (1, 4, 16), strict=True)]
    assert per_item[0] >= per_item[1] >= per_item[2]
    if platform in ("gpu", "dscs"):
        assert per_item[2] < 0.9 * per_item[0], "no batching gain at all: weights are being re-read per item"


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("network", [False, True])
def test_energy_parts_sum(platform, network):
    for app in ("credit_risk", "asset_damage", "translation"):
        bd = e2e.end_to_end(app, platform)
        en = power.energy(bd, network=network)
        assert math.isclose(sum(en[k] for k in power.PARTS), en["total_j"], rel_tol=1e-12)
        assert en["total_j"] > 0 and all(en[k] >= 0 for k in power.PARTS)
        if network and platform in platforms.TRADITIONAL:
            assert en["network_j"] > 0
        if not network:
            assert en["network_j"] == 0


def test_network_energy_flag_increases_energy():
    bd = e2e.end_to_end("asset_damage", "gpu")
    assert power.energy(bd, network=True)["total_j"] > power.energy(bd)["total_j"]


def test_cost_efficiency_monotone():
    base = cost.cost_efficiency(10.0, 5000.0, 100.0)["requests_per_usd"]
    assert cost.cost_efficiency(20.0, 5000.0, 100.0)["requests_per_usd"] > base
    assert cost.cost_efficiency(10.0, 8000.0, 100.0)["requests_per_usd"] < base
    assert cost.cost_efficiency(10.0, 5000.0, 100.0, usd_per_kwh=0.2)["requests_per_usd"] < base
    assert cost.cost_efficiency(10.0, 5000.0, 100.0, pue=2.0)["requests_per_usd"] < base
    with pytest.raises(ValueError):
        cost.cost_efficiency(0.0, 5000.0, 100.0)


def test_asic_cost_grows_with_area_and_defects():
    a = cost.asic_cost(8.5)
    assert 0 < a["yield"] <= 1 and a["total_usd"] > 0
    assert cost.asic_cost(100.0)["die_usd"] > a["die_usd"]
    assert cost.asic_cost(100.0, defect_density_per_cm2=0.3)["yield"] < cost.asic_cost(100.0)["yield"]
    for p in PLATFORMS:
        assert cost.capex(p)["total_usd"] > 0


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: e2e.end_to_end("nope", "cpu"), "nope"),
        (lambda: e2e.end_to_end("chatbot", "tpu"), "tpu"),
        (lambda: e2e.evaluate(apps=["chatbot", "bogus_app"]), "bogus_app"),
        (lambda: e2e.evaluate(platforms=["quantum"]), "quantum"),
    ],
)
def test_unknown_keys_are_clear(call, name):
    with pytest.raises(ValueError) as exc:
        call()
    msg = str(exc.value)
    assert repr(name) in msg
    if name in ("tpu", "quantum"):
        assert all(p in msg for p in PLATFORMS)
    else:
        assert all(a in msg for a in APPS)


def test_unknown_link_and_option():
    with pytest.raises(ValueError, match="link"):
        e2e.end_to_end("chatbot", "cpu", link="carrier-pigeon")
    with pytest.raises(ValueError, match="valid options"):
        e2e.end_to_end("chatbot", "cpu", warp=9)


@pytest.mark.parametrize("app", [a for a, c in APPS.items() if c.input_kind == "image"])
def test_image_tensor_is_table1_dims(app):
    # f1's float32 .npy is Table 1's input dims x 4 bytes plus its header
    sz = e2e.sizes(app)
    n = e2e.table1_input_elements(app)
    assert n * 4 <= sz["f1_out"] <= n * 4 + 1024
    assert 0 < sz["upload"] < sz["f1_out"] * 2


def test_dscs_f2_is_the_hw_design_point():
    from nearfaas.hw import dse

    sk = dse.load_skeletons(["resnet50"])
    want = dse.report(["resnet50"], skeletons=sk)["models"][0]["latency_s"]
    bd = e2e.end_to_end("asset_damage", "dscs")
    f2 = [t for t in bd.stages[1].terms if t.name == "compute"][0]
    assert f2.value_s == pytest.approx(want)
    assert f2.label == "modelled"
