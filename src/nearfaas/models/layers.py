"""Graph-building helpers: a small builder over ``onnx.helper`` and the layers the zoo is made of.

One :class:`GraphBuilder` builds a model in one of two modes, with the same code:

* **weights** (a :class:`WeightSink` is given): every parameter is drawn from the model's seeded
  generator and streamed to the external data file as soon as it is made, one tensor at a time,
  so a 6 GB model never holds more than its largest tensor in memory;
* **shapes only** (no sink): every parameter is an initializer with its name, dims and dtype set
  and *no* data (no ``raw_data``, no ``float_data``, no external data), so the full graphs of the
  largest models cost a few hundred KB. Such a model is for analysis (shape inference, operator
  and parameter counts, the hardware model), not for running.

Initializers hold learned parameters only; every other constant (shapes, masks, scales) is a
``Constant`` node, so ``param_count`` is the sum of the initializers' sizes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization needs 17; ORT 1.31 runs up to 21
IR_VERSION = 10  # ORT 1.31 accepts IR <= 10 from onnx 1.23
INLINE_BYTES = 1024  # tensors smaller than this stay inside the .onnx file
ALIGN = 4096  # external tensors start on a page boundary (lets ORT map them)

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
Dim = int | str


class WeightSink:
    """Writes tensors' bytes to one external data file as they are made.

    ``location`` is the file name recorded in each tensor (relative to the .onnx file). When the
    whole model's external bytes stay under ``inline_below`` the builder folds them back into
    the .onnx file at the end (see :meth:`finish`), so small models are a single file.
    """

    def __init__(self, data_path: Path, progress: Callable[[int], None] | None = None):
        self.path = Path(data_path)
        self.location = self.path.name
        self._f = open(self.path, "wb")  # noqa: SIM115 - closed in finish()
        self.offset = 0
        self.external: list[TensorProto] = []
        self.progress = progress

    def put(self, tensor: TensorProto, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr)
        if arr.nbytes < INLINE_BYTES:
            tensor.raw_data = arr.tobytes()
        else:
            pad = (-self.offset) % ALIGN
            if pad:
                self._f.write(b"\0" * pad)
                self.offset += pad
            self._f.write(memoryview(arr).cast("B"))
            for k, v in (("location", self.location), ("offset", str(self.offset)), ("length", str(arr.nbytes))):
                entry = tensor.external_data.add()
                entry.key, entry.value = k, v
            tensor.data_location = TensorProto.EXTERNAL
            self.offset += arr.nbytes
            self.external.append(tensor)
        if self.progress is not None:
            self.progress(arr.size)

    def close(self) -> None:
        self._f.close()

    def finish(self, inline_below: int = 1 << 20) -> bool:
        """Flush and fsync the data file; fold it into the model if small. True if it stays."""
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        total = sum(int(np.prod(t.dims)) * 4 for t in self.external)
        if total > inline_below:
            return True
        data = self.path.read_bytes()
        for t in self.external:
            info = {e.key: e.value for e in t.external_data}
            off, length = int(info["offset"]), int(info["length"])
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = data[off : off + length]
        self.path.unlink()
        return False


class GraphBuilder:
    """Collects nodes, parameters, inputs and outputs; ``model()`` returns the ModelProto."""

    def __init__(self, name: str, seed: int, sink: WeightSink | None = None):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.sink = sink
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.n_params = 0
        self._count: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}
        self._names: set[str] = set()

    # -- names, inputs, outputs -------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}_{n}"

    def input(self, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        """Expose ``value`` as graph output ``name`` (through an Identity if it has another name)."""
        if value != name:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=self.fresh("out")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    # -- parameters and constants -----------------------------------------------------------
    def param(self, name: str, shape: Sequence[int], std: float = 0.02, init: str = "normal") -> str:
        """A float32 learned parameter: ``init`` is "normal" (mean 0, ``std``), "zeros" or "ones"."""
        if name in self._names:
            raise ValueError(f"duplicate parameter name {name!r}")
        self._names.add(name)
        t = TensorProto()
        t.name = name
        t.data_type = FLOAT
        t.dims.extend(int(d) for d in shape)
        if self.sink is not None:
            if init == "normal":
                arr = self.rng.standard_normal(tuple(shape), dtype=np.float32)
                arr *= np.float32(std)
            elif init == "zeros":
                arr = np.zeros(tuple(shape), np.float32)
            elif init == "ones":
                arr = np.ones(tuple(shape), np.float32)
            else:
                raise ValueError(f"unknown init {init!r}")
            self.sink.put(t, arr)
            del arr
        self.initializers.append(t)
        self.n_params += math.prod(int(d) for d in shape)
        return name

    def const(self, value, dtype=np.int64) -> str:
        """A ``Constant`` node (not an initializer: constants are not parameters)."""
        arr = np.asarray(value, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            out = self.fresh("const")
            tensor = numpy_helper.from_array(arr, name=out + "_value")
            self.nodes.append(helper.make_node("Constant", [], [out], name=out, value=tensor))
            self._consts[key] = out
        return self._consts[key]

    def scalar(self, value: float) -> str:
        return self.const(np.float32(value), np.float32)

    # -- nodes --------------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="nearfaas.models", doc_string=doc)
        model.ir_version = IR_VERSION
        return model


# -- layers ---------------------------------------------------------------------------------


def activation(g: GraphBuilder, x: str, kind: str | None) -> str:
    if kind is None:
        return x
    if kind == "relu":
        return g.op("Relu", x)
    if kind == "leaky":
        return g.op("LeakyRelu", x, alpha=0.1)
    if kind == "silu":  # swish: x * sigmoid(x)
        return g.op("Mul", x, g.op("Sigmoid", x))
    if kind == "sigmoid":
        return g.op("Sigmoid", x)
    if kind == "gelu":
        return gelu(g, x)
    raise ValueError(f"unknown activation {kind!r}")


def conv(
    g: GraphBuilder,
    x: str,
    name: str,
    cin: int,
    cout: int,
    k: int,
    stride: int = 1,
    pad: int | None = None,
    dilation: int = 1,
    groups: int = 1,
    act: str | None = "relu",
    gain: float = 1.0,
) -> str:
    """Conv with BatchNorm folded into its weights and bias (inference form), then ``act``.

    Weights are He-normal (std sqrt(2 / fan_in)) times ``gain``: a residual branch's last conv
    gets a small gain so that activations stay finite through deep stacks without real BN.
    """
    if pad is None:
        pad = dilation * (k - 1) // 2
    fan_in = (cin // groups) * k * k
    w = g.param(f"{name}.weight", (cout, cin // groups, k, k), std=gain * math.sqrt(2.0 / fan_in))
    b = g.param(f"{name}.bias", (cout,), std=0.01)
    y = g.op("Conv", x, w, b, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, dilations=[dilation, dilation], group=groups)
    return activation(g, y, act)


def linear(g: GraphBuilder, x: str, name: str, din: int, dout: int, std: float | None = None) -> str:
    """``x @ W + b`` with W stored [din, dout] (MatMul + Add; ORT fuses them)."""
    if std is None:
        std = 1.0 / math.sqrt(din)
    w = g.param(f"{name}.weight", (din, dout), std=std)
    b = g.param(f"{name}.bias", (dout,), init="zeros")
    return g.op("Add", g.op("MatMul", x, w), b)


def layer_norm(g: GraphBuilder, x: str, name: str, d: int, eps: float = 1e-5) -> str:
    scale = g.param(f"{name}.weight", (d,), init="ones")
    bias = g.param(f"{name}.bias", (d,), init="zeros")
    return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)


def gelu(g: GraphBuilder, x: str) -> str:
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as Div/Erf/Add/Mul (ORT fuses it into one Gelu)."""
    e = g.op("Erf", g.op("Div", x, g.scalar(math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, g.op("Add", e, g.scalar(1.0))), g.scalar(0.5))


def split_heads(g: GraphBuilder, x: str, heads: int, head_dim: int, perm=(0, 2, 1, 3)) -> str:
    """[b, s, heads*head_dim] -> [b, heads, s, head_dim] (or the ``perm`` given)."""
    r = g.op("Reshape", x, g.const([0, 0, heads, head_dim]))
    return g.op("Transpose", r, perm=list(perm))


def attention(
    g: GraphBuilder,
    x: str,
    name: str,
    d: int,
    heads: int,
    head_dim: int,
    mask: str | None = None,
    fused_qkv: bool = False,
    std: float = 0.02,
    out_std: float | None = None,
) -> str:
    """Multi-head self-attention over ``x`` [b, s, d]; ``mask`` is added to the scores.

    ``fused_qkv`` stores Q, K and V as one [d, 3*inner] matrix (GPT-2's ``c_attn``, ViT's
    ``in_proj``), else three (BERT). ``heads * head_dim`` may be smaller than ``d`` (tiny models).
    """
    inner = heads * head_dim
    if fused_qkv:
        qkv = linear(g, x, f"{name}.qkv", d, 3 * inner, std=std)
        q, k, v = g.op("Split", qkv, g.const([inner] * 3), n_out=3, axis=-1)
    else:
        q = linear(g, x, f"{name}.query", d, inner, std=std)
        k = linear(g, x, f"{name}.key", d, inner, std=std)
        v = linear(g, x, f"{name}.value", d, inner, std=std)
    qh = split_heads(g, q, heads, head_dim)
    kh = split_heads(g, k, heads, head_dim, perm=(0, 2, 3, 1))
    vh = split_heads(g, v, heads, head_dim)
    scores = g.op("Mul", g.op("MatMul", qh, kh), g.scalar(1.0 / math.sqrt(head_dim)))
    if mask is not None:
        scores = g.op("Add", scores, mask)
    probs = g.op("Softmax", scores, axis=-1)
    ctx = g.op("Transpose", g.op("MatMul", probs, vh), perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", ctx, g.const([0, 0, inner]))
    return linear(g, ctx, f"{name}.out", inner, d, std=std if out_std is None else out_std)


def mlp(g: GraphBuilder, x: str, name: str, d: int, hidden: int, std: float = 0.02, out_std: float | None = None) -> str:
    h = gelu(g, linear(g, x, f"{name}.fc1", d, hidden, std=std))
    return linear(g, h, f"{name}.fc2", hidden, d, std=std if out_std is None else out_std)
