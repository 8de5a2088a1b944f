"""The held-out check of the CPU roofline: nearfaas.twin.heldout's networks,
nearfaas.twin.cpu_model's layer extraction and runtime graph, and the held-out keys of
validate()'s result. Nothing here measures timing: predictions use synthetic micro-benchmarks
(test_twin_validate._bench), measurements come from synthetic or committed records."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from nearfaas.apps import APPS
from nearfaas.twin import cpu_model as C
from nearfaas.twin import heldout as H
from nearfaas.twin import heldout_fresh as F
from nearfaas.twin import platforms as P
from nearfaas.twin import validate as V

from test_twin_validate import _bench, _profiles  # one synthetic micro-benchmark record for both files

RESULT_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu_validation.json"
SMALL = ("mlp_small", "cnn_small", "dwcnn_v1_small", "transformer_small")  # fast to build (< 0.2 s each)
FRESH = ("transformer_tiny",)  # the smallest fresh network (heldout_fresh): builds in milliseconds


def test_small_heldout_networks_build_and_pass_the_onnx_checker():
    # catches: a builder that emits a malformed graph (wrong shapes, missing initializer, bad attribute)
    for name in SMALL:
        m = H.build(name)
        onnx.checker.check_model(m, full_check=True)
        assert H.digest(m) == H.digest(H.build(name)), "seeded weights: the same bytes every build"


def test_heldout_set_is_large_varied_distinct_and_no_app():
    # catches: an empty or shrunk set, a set of one family, two entries that are the same network,
    # or a held-out network that is (named as) one of the apps' models
    assert len(H.NETWORKS) >= 8
    assert {fam for fam, _ in H.NETWORKS.values()} >= {"mlp", "cnn", "dwcnn", "transformer"}
    zoo = {c.model for c in APPS.values()} | set(APPS)
    assert not zoo & set(H.NETWORKS)
    sizes = {}
    for name in H.NETWORKS:
        sk = C.skeleton_of(H.build(name)) if name in SMALL else None
        if sk is not None:
            sizes[name] = (sk.macs, len(sk.groups))
    app_sizes = {(P.skeleton(c.model).macs, len(P.skeleton(c.model).groups)) for c in APPS.values() if c.model in ("logreg", "resnet50")}
    assert len(set(sizes.values())) == len(sizes) and not app_sizes & set(sizes.values())


def _tiny_mlp():
    g = H._G(0)
    return g.model("X", (1, 8), g.dense(g.dense("X", 8, 16), 16, 4, act=None), (1, 4), "tiny_mlp")


def _tiny_conv():
    g = H._G(0)
    return g.model("X", (1, 3, 8, 8), g.conv("X", 3, 8), (1, 8, 8, 8), "tiny_conv")


def test_layer_flops_match_a_hand_count():
    # catches: the path-based entry (ModelProto -> compiler skeleton) dropping or double-counting a layer
    mlp = C.refined_layers(C.skeleton_of(_tiny_mlp()))
    assert sum(x["flops"] for x in mlp) == 2 * (8 * 16 + 16 * 4)  # MatMul MACs x 2
    assert [x["kind"] for x in mlp] == ["gemm", "gemm"]
    conv = C.refined_layers(C.skeleton_of(_tiny_conv()))
    assert sum(x["flops"] for x in conv if x["kind"] == "conv") == 2 * (8 * 8) * 8 * 3 * 3 * 3  # out pixels x C_out x C_in x k x k
    # catalog layers add the fused bias/ReLU lane-ops to the MAC FLOPs
    cat = C.catalog_layers(C.skeleton_of(_tiny_mlp()))
    assert sum(x["flops"] for x in cat) > 2 * (8 * 16 + 16 * 4)


@pytest.mark.parametrize("key", ["logreg", "resnet50"])
def test_catalog_layers_equal_platforms_layers(key):
    # catches: cpu_model's copy of platforms.layers drifting from the twin's (a different Xeon form validated)
    assert C.catalog_layers(C.skeleton_of(key)) == list(P.layers(key))


def test_runtime_graph_counts_the_nchwc_reorders():
    # catches: the ORT-graph reader losing the reorders (unknown shapes -> 0 elements) or the node count
    g = H._G(0)
    y = g.conv(g.conv("X", 16, 16), 16, 16)
    m = g.model("X", (1, 16, 8, 8), g.op("Flatten", [y]), (1, 16 * 64), "two_convs")
    rg = C.runtime_graph(m)
    assert rg["reorders"] >= 1 and rg["unknown_reorders"] == 0
    assert rg["reorder_elems"] >= 16 * 8 * 8  # at least the output back to NCHW before Flatten
    assert rg["nodes"] >= 3


def test_runtime_form_adds_dispatch_and_reorders_to_refined():
    # catches: the runtime form not charging what it says (per ORT node dispatch + reorder elements)
    b = _bench((1,))
    ov = {"reorder_s_per_elem": 1e-9, "dwconv_case_reorder_elems": 0.0, "source": "ran: test"}
    rt = {"nodes": 7, "reorder_elems": 1000.0}
    m = _tiny_conv()
    ref = C.predict(b, 1, m, "refined")
    run = C.predict(b, 1, m, "runtime", overhead=ov, rt=rt)
    assert run["seconds"] == pytest.approx(ref["seconds"] - ref["launch_s"] + 7 * 1e-6 + 1000 * 1e-9)
    with pytest.raises(ValueError):
        C.predict(b, 1, m, "runtime")


def _kernels(t: int = 1) -> dict:
    """A kernel micro-benchmark record (cpu_kernels.measure_kernels' shape) with round, made-up numbers,
    consistent with _bench's peak (32 FLOP/cycle x 3.5 GHz per thread)."""
    peak = t * 32 * 3.5e9

    def bmm(h, m, k, n, eff):
        f = 2.0 * h * m * k * n
        return {"h": h, "M": m, "K": k, "N": n, "flops": f, "net_s": f / (eff * peak)}

    def chain(c, hw, k, group, eff):
        f = 2.0 * hw * hw * c * (c // group) * k * k
        return {"case": f"c{c} g{group}", "c": c, "hw": hw, "k": k, "group": group, "flops": f, "interior_s": f / (eff * peak)}
    return {"threads": t, "fixed_one_node_s": 2e-5, "source": "ran: synthetic",
            "gemv": [{"K": 512, "N": 512, "weight_bytes": 2.0**20, "bytes_s": 40e9}, {"K": 8192, "N": 8192, "weight_bytes": 2.0**28, "bytes_s": 10e9}],
            "bmm": [bmm(2, 16, 32, 16, 0.1), bmm(12, 256, 64, 256, 0.5)],
            "scan": {op: [{"elems": 256, "s_per_elem": 1e-9}, {"elems": 1 << 20, "s_per_elem": 5e-10}] for op in ("Softmax", "LayerNormalization", "Transpose")},
            "conv_chain": [chain(64, 56, 3, 1, 0.75), chain(128, 56, 3, 128, 0.25)],
            "reorder_chain": {"ort_keeps_pairs": True, "s_per_elem": 2e-10, "cases": []}}


def _cache_with_heldout(tmp_path: Path, names=("mlp_small",), fresh=("transformer_tiny",)) -> Path:
    f2 = {"2": {k: {"value_s": 0.03, "stage_value_s": 0.035, "estimator": "best of the repeats"} for k in APPS},
          "1": {k: {"value_s": 0.041} for k in APPS}}
    ov = {t: {"reorder_s_per_elem": 3e-10, "dwconv_case_reorder_elems": 8e5, "source": "ran: synthetic", "kernels": _kernels(int(t))}
          for t in ("1", "2")}
    rts = {f"zoo:{c.model}": {"nodes": 5, "reorder_elems": 0.0} for c in APPS.values()}
    def measured(prefix, names_, build, nodes, seconds):
        """Synthetic graphs and per-thread f2 for a set, keyed by the built models' digests."""
        held_ = {}
        for n in names_:
            digest = H.digest(build(n))
            rts[f"{prefix}:{n}"] = {"nodes": nodes, "reorder_elems": 0.0, "digest": digest}
            for t, v in zip(("1", "2"), seconds, strict=True):
                held_.setdefault(t, {})[n] = {"value_s": v, "estimator": "synthetic", "digest": digest}
        return held_

    held = measured("heldout", names, H.build, 4, (1e-4, 6e-5))
    fresh_held = measured("fresh", fresh, F.build, 6, (2e-4, 1.2e-4))
    hot = {k: {"value_s": 0.02, "estimator": "synthetic"} for k in APPS}
    p = tmp_path / "cpu_validation.json"
    p.write_text(json.dumps({"microbench": _bench(), "f2_measured": f2, "overhead": ov, "runtime_graphs": rts, "held_out_measured": held,
                             "held_out_fresh_measured": fresh_held, "f2_hot_measured": hot}))
    return p


def test_validate_result_has_the_held_out_keys(tmp_path):
    # catches: validate() or --json dropping the held-out figures, or computing them off the definition
    names = ("mlp_small", "cnn_small")
    r = V.validate((1, 2), path=_cache_with_heldout(tmp_path, names), measure=False, write=False,
                   profiles_path=_profiles(tmp_path), held_out=names, fresh=FRESH)
    cpu = r["cpu"]
    for k in ("held_out_geomean_abs_error", "held_out_worst_abs_error", "held_out_per_model_error", "goal_held_out", "worst_abs_error"):
        assert k in cpu, k
    errs = cpu["held_out_per_model_error"]
    assert set(errs) == set(names)
    rows = cpu["held_out_models"]["1"]
    for n in names:
        assert errs[n] == pytest.approx(rows[n]["predicted_catalog_s"] / 1e-4 - 1, abs=1e-4)
    assert cpu["held_out_worst_abs_error"] == pytest.approx(max(abs(e) for e in errs.values()), abs=1e-4)
    assert set(cpu["held_out"]["1"]["forms"]) == {"refined", "runtime", "runtime2"}
    assert set(cpu["goal_held_out"]["by_form"]) == set(C.FORMS)
    json.dumps(r)
    # a held-out measurement of another build of the network is stale: refused without measuring
    with pytest.raises(ValueError):
        V.validate((1,), path=_cache_with_heldout(tmp_path, ("mlp_small",)), measure=False, write=False,
                   profiles_path=_profiles(tmp_path), held_out=("cnn_small",), fresh=FRESH)


@pytest.mark.skipif(not RESULT_FILE.is_file(), reason="benchmarks/results/cpu_validation.json not written yet")
def test_committed_record_holds_a_measured_held_out_check():
    # catches: a committed record without the held-out check, with fewer than 8 networks, whose errors
    # are not predicted/measured - 1, or measured on networks other than today's builds (a builder changed)
    rec = json.loads(RESULT_FILE.read_text())
    cpu = rec["result"]["cpu"]
    errs = cpu["held_out_per_model_error"]
    assert len(errs) >= 8 and set(errs) == set(H.NETWORKS)
    for t, rows in cpu["held_out_models"].items():
        for n, row in rows.items():
            assert row["measured_s"] == rec["held_out_measured"][t][n]["value_s"]
            for f in C.FORMS:
                assert row[f"error_{f}"] == pytest.approx(row[f"predicted_{f}_s"] / row["measured_s"] - 1, abs=1e-3)
    for n in SMALL:
        assert rec["held_out_measured"]["1"][n]["digest"] == H.digest(H.build(n))
    assert cpu["held_out_geomean_abs_error"] == pytest.approx(V.geomean_abs(errs.values()), abs=1e-3)
