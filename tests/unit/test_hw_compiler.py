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


def test_bandwidth_and_array_move_latency():
    slow = compile_model("resnet50", DSAConfig(dram="ddr4").validated()).total_seconds
    mid = compile_model("resnet50", DSAConfig(dram="ddr5").validated()).total_seconds
    fast = compile_model("resnet50", DSAConfig(dram="hbm2").validated()).total_seconds
    assert slow >= mid >= fast


def test_scalesim_mode_is_mpu_only_closed_form():
    prog = compile_model("resnet50", mode="scalesim")
    assert all(layer.cycles == 0 for layer in prog.layers if layer.unit != "mpu")
    d = prog.to_dict()
    assert d["label"].startswith("modelled")


def test_padding_pass_rounds_to_the_array():
    prog = compile_model("resnet50", DSAConfig(dataflow="ws").validated())
    layer = next(x for x in prog.layers if x.unit == "mpu")
    (g,), (p,) = layer.gemms, layer.padded
    assert p["N"] % 128 == 0 and p["K"] % 128 == 0 and p["M"] == g["M"]
    assert p["N"] >= g["N"] and p["K"] >= g["K"]


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
