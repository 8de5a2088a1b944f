"""`nearfaas hw` CLI (click group tested with CliRunner)."""

import json

from click.testing import CliRunner

from nearfaas.cli.hw import hw


def test_compile_resnet50_table_and_json(tmp_path):
    r = CliRunner().invoke(hw, ["compile", "resnet50"])
    assert r.exit_code == 0, r.output
    assert "modelled" in r.output and "total:" in r.output and "GMACs" in r.output
    cfg = tmp_path / "dsa.yml"
    cfg.write_text("rows: 64\ncols: 64\ndram: hbm2\n")
    r = CliRunner().invoke(hw, ["compile", "resnet50", "--config", str(cfg), "--batch", "2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["label"].startswith("modelled") and d["batch"] == 2 and d["config"]["rows"] == 64
    assert d["totals"]["cycles"] == sum(x["cycles"] for x in d["layers"])
    first = next(x for x in d["layers"] if x["unit"] == "mpu")
    for key in ("kind", "gemms", "folds", "tiles", "dram_in", "dram_out", "mpu_cycles", "vpu_cycles", "fused"):
        assert key in first


def test_compile_onnx_path_and_errors(tmp_path):
    bad = tmp_path / "m.onnx"
    bad.write_bytes(b"nope")
    r = CliRunner().invoke(hw, ["compile", str(bad)])
    assert r.exit_code != 0 and "m.onnx" in r.output
    cfg = tmp_path / "dsa.yml"
    cfg.write_text("dataflow: zz\n")
    r = CliRunner().invoke(hw, ["compile", "logreg", "--config", str(cfg)])
    assert r.exit_code != 0 and "dataflow" in r.output


def test_simulate_missing_files(tmp_path):
    r = CliRunner().invoke(hw, ["simulate", "-c", str(tmp_path / "x.cfg"), "-t", str(tmp_path / "t.csv")])
    assert r.exit_code != 0 and "x.cfg" in r.output


def test_compile_onnx_file_and_unknown_key(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.zeros((16, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[w]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "small.onnx"
    onnx.save(m, path)
    r = CliRunner().invoke(hw, ["compile", str(path), "--batch", "2", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    (layer,) = d["layers"]
    assert layer["ops"] == ["Conv", "Relu"] and layer["gemms"] == [{"M": 2 * 32 * 32, "N": 16, "K": 27, "count": 1}]
    assert d["totals"]["macs"] == 2 * 32 * 32 * 16 * 27
    r = CliRunner().invoke(hw, ["compile", "resnet51"])
    assert r.exit_code != 0 and "neither a zoo model key" in r.output
