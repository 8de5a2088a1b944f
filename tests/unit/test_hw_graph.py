"""Workload import: zoo graphs, hand-built convs (groups, stride, padding, dilation), errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nearfaas.hw.dsa.errors import GraphError
from nearfaas.hw.dsa.graph import load_ops
from nearfaas.hw.dsa.lower import lower
from nearfaas.models import MODELS, shapes_only

ZOO = ["logreg", "resnet50", "yolov3", "fcn", "efficientnet", "bert_base", "gpt2_xl", "vit_huge"]


@pytest.mark.parametrize("key", ZOO)
def test_zoo_imports_with_every_shape(key):
    assert key in MODELS
    w = load_ops(shapes_only(key, "full"), batch=2)
    assert w.ops and not w.unsupported
    for op in w.ops:
        assert all(s is not None for s in op.out_shapes), (op.name, op.op_type)
    mpu = [op for op in w.ops if op.unit == "mpu"]
    assert mpu
    for op in mpu:
        for g in lower(op):
            assert g.M > 0 and g.N > 0 and g.K > 0


def _conv_model(tmp_path, c=8, h=17, w=13, f=16, k=3, stride=2, pad=1, dil=2, group=4):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    wt = numpy_helper.from_array(np.zeros((f, c // group, k, k), np.float32), "w")
    node = helper.make_node(
        "Conv", ["x", "w"], ["c"], name="conv", strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil], group=group
    )
    relu = helper.make_node("Relu", ["c"], ["y"], name="relu")
    g = helper.make_graph([node, relu], "g", [x], [y], initializer=[wt])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "conv.onnx"
    onnx.save(m, p)
    return p


def test_grouped_dilated_conv_lowering(tmp_path):
    w = load_ops(_conv_model(tmp_path), batch=3)
    conv = w.ops[0]
    eff = 2 * (3 - 1) + 1
    ho, wo = (17 + 2 - eff) // 2 + 1, (13 + 2 - eff) // 2 + 1
    assert conv.out_shapes[0] == (3, 16, ho, wo)
    (g,) = lower(conv)
    assert (g.M, g.N, g.K, g.count) == (3 * ho * wo, 4, 9 * 2, 4)
    assert g.macs == 3 * 16 * ho * wo * 9 * 2


def test_depthwise_conv_is_groups_gemms(tmp_path):
    w = load_ops(_conv_model(tmp_path, c=8, f=8, group=8, dil=1), batch=1)
    (g,) = lower(w.ops[0])
    assert (g.N, g.K, g.count) == (1, 9, 8)


def test_batched_attention_matmul():
    w = load_ops(shapes_only("bert_base", "full"), batch=2)
    batched = [g for op in w.ops if op.op_type == "MatMul" for g in lower(op) if g.count > 1]
    assert batched and all(g.count == 2 * 12 for g in batched)
    assert {(g.M, g.N, g.K) for g in batched} == {(128, 128, 64), (128, 64, 128)}


def test_malformed_file_names_the_file(tmp_path):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"\x00\xffthis is not a protobuf" * 10)
    with pytest.raises(GraphError, match="garbage.onnx"):
        load_ops(bad)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(GraphError, match="notes.txt"):
        load_ops(text)
    with pytest.raises(GraphError, match="missing.onnx"):
        load_ops(tmp_path / "missing.onnx")


def test_unsupported_ops_fall_back_by_name():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Celu", ["x"], ["a"], name="celu"),  # element-wise, not in our tables
        helper.make_node("TopK", ["a", "k"], ["v", "i"], name="topk"),
        helper.make_node("Relu", ["v"], ["y"], name="relu"),
    ]
    k = numpy_helper.from_array(np.array([2], np.int64), "k")
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[k]), opset_imports=[helper.make_opsetid("", 17)])
    w = load_ops(m)
    assert ("celu", "Celu", "vpu") in w.unsupported
    assert ("topk", "TopK", "host") in w.unsupported
    assert [op.unit for op in w.ops] == ["vpu", "host", "vpu"]
