"""Workload import: an ONNX graph -> a list of operations with shapes, each assigned to a unit.

``load_ops(source, batch=1)`` takes a path to an ``.onnx`` file or an ``onnx.ModelProto`` (e.g.
``nearfaas.models.shapes_only("resnet50", "full")``), fixes the symbolic batch dimension, runs
ONNX shape inference and returns ``Workload(ops, unsupported)``. Each ``Op`` carries its input
and output shapes, its attributes, which inputs are weights (initializers) and the unit that
runs it: ``mpu`` (Conv, Gemm, MatMul), ``vpu`` (element-wise, reductions, pooling, resize, data
layout), ``none`` (metadata only: Shape, Constant, Identity, Reshape...) or ``host``. An operator
we do not know is never an error: it is listed in ``unsupported`` with the fallback chosen (the
VPU when its output has its input's shape, i.e. it looks element-wise; the host otherwise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from .errors import GraphError

MPU_OPS = {"Conv", "Gemm", "MatMul"}
# op type -> (VPU class, element operations per output element)
ELEMENTWISE = {
    "Add": 1,
    "Sub": 1,
    "Mul": 1,
    "Div": 1,
    "Relu": 1,
    "LeakyRelu": 1,
    "PRelu": 1,
    "Clip": 1,
    "Max": 1,
    "Min": 1,
    "Abs": 1,
    "Neg": 1,
    "Where": 1,
    "Equal": 1,
    "Less": 1,
    "Greater": 1,
    "LessOrEqual": 1,
    "GreaterOrEqual": 1,
    "Not": 1,
    "And": 1,
    "Or": 1,
    "Floor": 1,
    "Ceil": 1,
    "Round": 1,
    "Sign": 1,
    "Reciprocal": 1,
    "BatchNormalization": 2,
    "HardSigmoid": 2,
    "HardSwish": 3,
    "Pow": 4,
    "Sqrt": 4,
    "Exp": 4,
    "Log": 4,
    "Sigmoid": 4,
    "Tanh": 4,
    "Erf": 4,
    "Gelu": 6,
    "Elu": 4,
    "Selu": 4,
    "Softplus": 4,
    "Mish": 8,
    "QuantizeLinear": 2,
    "DequantizeLinear": 2,
    "Dropout": 0,
    "Cast": 1,
}
REDUCTION = {
    "Softmax": 7,
    "LogSoftmax": 8,
    "LayerNormalization": 8,
    "InstanceNormalization": 8,
    "GroupNormalization": 8,
    "ReduceMean": 1,
    "ReduceSum": 1,
    "ReduceMax": 1,
    "ReduceMin": 1,
    "ReduceProd": 1,
    "ReduceL2": 2,
    "ReduceSumSquare": 2,
    "ArgMax": 1,
    "ArgMin": 1,
}
POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"}
RESIZE = {"Resize": 1, "Upsample": 1}
LAYOUT = {"Transpose", "Concat", "Slice", "Gather", "Split", "Expand", "Pad", "Tile", "GatherElements"}
METADATA = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Constant", "ConstantOfShape", "Range", "Size"}


@dataclass
class Op:
    """One ONNX node with shapes (``None`` where inference could not tell)."""

    name: str
    op_type: str
    unit: str  # mpu | vpu | none | host
    kind: str  # conv | gemm | matmul | elementwise | reduction | pool | resize | layout | metadata | host
    inputs: list[str]
    outputs: list[str]
    in_shapes: list[tuple[int, ...] | None]
    out_shapes: list[tuple[int, ...] | None]
    attrs: dict = field(default_factory=dict)
    weights: set[str] = field(default_factory=set)
    note: str = ""

    def out_elems(self) -> int:
        return sum(math.prod(s) for s in self.out_shapes if s is not None)

    def in_elems(self, activations_only: bool = True) -> int:
        return sum(
            math.prod(s)
            for n, s in zip(self.inputs, self.in_shapes, strict=False)
            if s is not None and not (activations_only and n in self.weights)
        )


@dataclass
class Workload:
    name: str
    ops: list[Op]
    unsupported: list[tuple[str, str, str]]  # (node name, op type, fallback unit)
    outputs: set[str]
    batch: int


def _load(source) -> tuple[onnx.ModelProto, str]:
    if isinstance(source, onnx.ModelProto):
        return source, source.graph.name or "model"
    path = Path(source)
    if not path.is_file():
        raise GraphError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise GraphError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise GraphError(f"{path}: not an ONNX model (no graph nodes): is this the right file?")
    return model, path.stem


def _fix_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    init = {t.name for t in m.graph.initializer}
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.name in init or not vi.type.HasField("tensor_type"):
            continue
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                d.Clear()
                d.dim_value = batch if i == 0 else 1
    del m.graph.value_info[:]
    return m


def _shape(vi) -> tuple[int, ...] | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def classify(op_type: str) -> tuple[str, str] | None:
    if op_type == "Conv":
        return "mpu", "conv"
    if op_type == "Gemm":
        return "mpu", "gemm"
    if op_type == "MatMul":
        return "mpu", "matmul"
    if op_type in ELEMENTWISE:
        return "vpu", "elementwise"
    if op_type in REDUCTION:
        return "vpu", "reduction"
    if op_type in POOL:
        return "vpu", "pool"
    if op_type in RESIZE:
        return "vpu", "resize"
    if op_type in LAYOUT:
        return "vpu", "layout"
    if op_type in METADATA:
        return "none", "metadata"
    return None


def load_ops(source, batch: int = 1) -> Workload:
    """Import an ONNX graph (path or ModelProto) with the batch fixed to ``batch``."""
    if batch < 1:
        raise GraphError(f"batch must be >= 1 (got {batch})")
    model, name = _load(source)
    label = str(source) if not isinstance(source, onnx.ModelProto) else name
    fixed = _fix_batch(model, batch)
    try:
        inferred = onnx.shape_inference.infer_shapes(fixed, strict_mode=False, data_prop=True)
    except Exception as exc:
        raise GraphError(f"{label}: ONNX shape inference failed: {exc}") from None
    g = inferred.graph
    shapes: dict[str, tuple[int, ...] | None] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shapes[vi.name] = _shape(vi)
    weights = set()
    for t in g.initializer:
        shapes[t.name] = tuple(int(d) for d in t.dims)
        weights.add(t.name)
    for n in g.node:  # Constant nodes are weights-like (not read from activations)
        if n.op_type == "Constant":
            weights.update(n.output)
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = tuple(int(d) for d in a.t.dims)
    ops: list[Op] = []
    unsupported: list[tuple[str, str, str]] = []
    for i, n in enumerate(g.node):
        attrs = {}
        for a in n.attribute:
            try:
                v = helper.get_attribute_value(a)
            except Exception:  # pragma: no cover - exotic attribute kinds
                continue
            if isinstance(v, onnx.TensorProto):
                v = numpy_helper.to_array(v).tolist() if (v.raw_data or v.float_data or v.int64_data) else None
            elif isinstance(v, bytes):
                v = v.decode(errors="replace")
            attrs[a.name] = v
        ins = [x for x in n.input]
        outs = [x for x in n.output]
        in_shapes = [shapes.get(x) if x else None for x in ins]
        out_shapes = [shapes.get(x) for x in outs]
        cls = classify(n.op_type)
        note = ""
        if cls is None:
            first = next((s for x, s in zip(ins, in_shapes, strict=False) if x and x not in weights), None)
            looks_ew = first is not None and out_shapes and all(s == first for s in out_shapes)
            unit = "vpu" if looks_ew else "host"
            cls = (unit, "elementwise" if looks_ew else "host")
            note = f"unsupported operator {n.op_type}: fallback {unit}"
            unsupported.append((n.name or f"{n.op_type}_{i}", n.op_type, unit))
        ops.append(
            Op(
                name=n.name or f"{n.op_type}_{i}",
                op_type=n.op_type,
                unit=cls[0],
                kind=cls[1],
                inputs=ins,
                outputs=outs,
                in_shapes=in_shapes,
                out_shapes=out_shapes,
                attrs=attrs,
                weights={x for x in ins if x in weights},
                note=note,
            )
        )
    return Workload(name=name, ops=ops, unsupported=unsupported, outputs={o.name for o in g.output}, batch=batch)
