"""Compiler passes and the per-layer program."""

import pytest

from nearfaas.hw.dsa.compiler import compile_model
from nearfaas.hw.dsa.config import DSAConfig


def test_resnet50_compiles_and_macs_match_conv_arithmetic():
    prog = compile_model("resnet50", DSAConfig().validated(), batch=1)
    # sum over convs of Ho*Wo*Cout*kh*kw*Cin/groups plus the FC: ~4.1 GMACs at batch 1
    assert prog.total_macs == pytest.approx(4.09e9, rel=0.01)
    t = prog.totals()
    assert t["mpu_layers"] == 54 and t["cycles"] > 0 and 0 < t["mpu_utilisation"] <= 1
    for layer in prog.layers:
        if layer.unit == "mpu":
            assert layer.macs <= layer.mpu_cycles * prog.config.pes  # padding never creates MACs
            assert layer.folds >= 1 and layer.tiles >= 1 and layer.dram_in > 0
    assert compile_model("resnet50", batch=4).total_macs == 4 * prog.total_macs


def test_fusion_conv_bias_residual_relu_and_gelu():
    prog = compile_model("resnet50")
    fused = [layer.ops for layer in prog.layers if layer.unit == "mpu"]
    assert ["Conv", "Relu"] in fused and ["Conv", "Add", "Relu"] in fused
    bert = compile_model("bert_base")
    ops = [layer.ops for layer in bert.layers if layer.unit == "mpu"]
    assert ["MatMul", "Add", "Div", "Erf", "Add", "Mul", "Mul"] in ops  # matmul + bias + GELU
    assert any(layer.ops[0] == "Softmax" and layer.unit == "vpu" for layer in bert.layers)
    assert any(layer.ops[0] == "LayerNormalization" and layer.unit == "vpu" for layer in bert.layers)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# Closed forms, written out here (not imported from the code under test). R x C array, GEMM M x N x K.
def _scalesim_closed_form(M, N, K, R, C, dataflow):
    # hw-references.md "SCALE-Sim v3 closed forms (verified against SCALE-Sim runs)"
    if dataflow == "os":
        return _ceil(M, R) * _ceil(N, C) * (K + R + C - 2) - 1
    assert dataflow == "ws"
    return _ceil(K, R) * _ceil(N, C) * (M + 2 * R + C - 2) - 1


def _dsa_ws_closed_form(M, N, K, R, C, count):
    # timing.dsa_compute_cycles' docstring (WS): F = ceil(K/R) ceil(N/C) count folds streaming T = M
    # vectors each, the next fold's R-deep weights load in the background (a later fold lasts
    # max(T, R)), the first fill (R) and the last drain (R + C - 2) exposed.
    folds = _ceil(K, R) * _ceil(N, C) * count
    return M + (folds - 1) * max(M, R) + 2 * R + C - 3


ARRAYS = [(16, 64), (64, 16), (128, 128), (256, 32)]


@pytest.mark.parametrize("rows, cols", ARRAYS)
def test_dsa_mode_mpu_cycles_match_the_closed_form_and_latency_bounds(rows, cols):
    cfg = DSAConfig(rows=rows, cols=cols, dataflow="ws").validated()
    prog = compile_model("resnet50", cfg)
    for layer in (x for x in prog.layers if x.unit == "mpu"):
        want = sum(_dsa_ws_closed_form(g["M"], g["N"], g["K"], rows, cols, g["count"]) for g in layer.gemms)
        assert layer.mpu_cycles == want, layer.name
        assert layer.cycles >= layer.mpu_cycles
    # whole-model lower bounds: the MPU's cycles at the clock, and the DRAM bytes at the bandwidth
    t = prog.totals()
    assert prog.total_seconds >= t["mpu_cycles"] / 1e9
    assert prog.total_seconds >= (t["dram_bytes_in"] + t["dram_bytes_out"]) / (cfg.dram_gbps * 1e9)


def test_bandwidth_and_array_move_latency():
    secs = [compile_model("resnet50", DSAConfig(dram=d).validated()).total_seconds for d in ("ddr4", "ddr5", "hbm2")]
    assert secs[0] >= secs[1] >= secs[2] and secs[0] > secs[2]
    small = compile_model("resnet50", DSAConfig(rows=32, cols=32).validated()).totals()["mpu_cycles"]
    big = compile_model("resnet50", DSAConfig(rows=128, cols=128).validated()).totals()["mpu_cycles"]
    assert small > 4 * big  # 16x the PEs; fill/drain and small layers keep it short of 16x


@pytest.mark.parametrize("rows, cols", ARRAYS)
@pytest.mark.parametrize("dataflow", ["os", "ws"])
def test_scalesim_mode_matches_the_closed_form(rows, cols, dataflow):
    cfg = DSAConfig(rows=rows, cols=cols, dataflow=dataflow).validated()
    prog = compile_model("resnet50", cfg, mode="scalesim")
    assert all(layer.cycles == 0 for layer in prog.layers if layer.unit != "mpu")
    assert prog.to_dict()["label"].startswith("modelled")
    for layer in (x for x in prog.layers if x.unit == "mpu"):
        want = sum(g["count"] * _scalesim_closed_form(g["M"], g["N"], g["K"], rows, cols, dataflow) for g in layer.gemms)
        assert layer.cycles == layer.mpu_cycles == want, layer.name
    # and on a GEMM whose dimensions are known by construction: a 1x1 conv (M = 7x7 pixels,
    # N = 96 filters, K = 200 channels) and a MatMul 37x300 @ 300x70
    onnx_model = _conv_then_matmul()
    (conv, mm) = [x for x in compile_model(onnx_model, cfg, mode="scalesim").layers if x.unit == "mpu"]
    assert conv.cycles == _scalesim_closed_form(49, 96, 200, rows, cols, dataflow)
    assert mm.cycles == _scalesim_closed_form(37, 70, 300, rows, cols, dataflow)


def _conv_then_matmul():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 200, 7, 7])
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [37, 300])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    wc = numpy_helper.from_array(np.zeros((96, 200, 1, 1), np.float32), "wc")
    wm = numpy_helper.from_array(np.zeros((300, 70), np.float32), "wm")
    nodes = [helper.make_node("Conv", ["x", "wc"], ["y"], name="conv"), helper.make_node("MatMul", ["a", "wm"], ["z"], name="mm")]
    g = helper.make_graph(nodes, "g", [x, a], [y, z], initializer=[wc, wm])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("rows, cols", ARRAYS)
@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_padding_pass_rounds_to_the_array(rows, cols, dataflow):
    # The mapped dims round up to whole folds: os maps M on rows and N on cols, ws K on rows and
    # N on cols, is K on rows and M on cols; the streamed dim is unpadded.
    R, C = rows, cols
    prog = compile_model("resnet50", DSAConfig(rows=R, cols=C, dataflow=dataflow).validated(), mode="scalesim")
    for layer in (x for x in prog.layers if x.unit == "mpu"):
        folds = 0
        for g, p in zip(layer.gemms, layer.padded, strict=True):
            M, N, K = g["M"], g["N"], g["K"]
            want = {
                "os": {"M": _ceil(M, R) * R, "N": _ceil(N, C) * C, "K": K},
                "ws": {"M": M, "N": _ceil(N, C) * C, "K": _ceil(K, R) * R},
                "is": {"M": _ceil(M, C) * C, "N": N, "K": _ceil(K, R) * R},
            }[dataflow]
            assert p == want, layer.name
            rows_used = {"os": M, "ws": K, "is": K}[dataflow]
            cols_used = {"os": N, "ws": N, "is": M}[dataflow]
            folds += _ceil(rows_used, R) * _ceil(cols_used, C) * g["count"]
        assert layer.folds == folds, layer.name


def test_custom_domain_op_never_crashes():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.zeros((16, 8), np.float32), "w")
    nodes = [
        helper.make_node("MyOp", ["x"], ["a"], name="mine", domain="com.example"),
        helper.make_node("MatMul", ["a", "w"], ["y"], name="mm"),
    ]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], initializer=[w]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    prog = compile_model(m)
    assert ("mine", "MyOp", "host") in prog.unsupported and ("mm", "MatMul", "host") in prog.unsupported
    assert [x.unit for x in prog.layers] == ["host", "host"]


@pytest.mark.parametrize("key", ["logreg", "yolov3", "fcn", "efficientnet", "bert_base", "gpt2_xl", "vit_huge"])
def test_every_zoo_model_compiles(key):
    prog = compile_model(key)
    t = prog.totals()
    assert t["cycles"] == sum(x.cycles for x in prog.layers) > 0
    assert 0 < t["mpu_utilisation"] <= 1 and not t["host_ops"]
