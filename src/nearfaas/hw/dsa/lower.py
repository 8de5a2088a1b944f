"""Lowering of MPU operations to GEMMs.

Conv (im2col): M = output pixels × batch, N = filters per group, K = kh·kw·C_in/groups, repeated
``groups`` times (a depthwise conv is C GEMMs with N = 1). MatMul/Gemm: M×K @ K×N; a batched
MatMul (attention: both operands activations with leading dims) is ``count`` GEMMs, a MatMul
against a 2-D weight folds the leading dims into M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import LayerError
from .graph import Op


@dataclass(frozen=True)
class Gemm:
    """``count`` independent GEMMs of (M×K)·(K×N), with the DRAM footprint of their operands.

    ``a_elems`` is the activation tensor actually read (the ifmap, not its im2col expansion),
    ``b_elems`` the weights (0 when B is an activation it is counted in ``a_elems``), ``b_is_weight``
    whether B comes from the initializers.
    """

    name: str
    M: int
    N: int
    K: int
    count: int = 1
    a_elems: int = 0
    b_elems: int = 0
    b_is_weight: bool = True

    def __post_init__(self):
        for f in ("M", "N", "K", "count"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise LayerError(
                    f"layer {self.name!r}: {f} = {v!r} is a zero-size or degenerate GEMM dimension; every dimension must be >= 1"
                )

    @property
    def macs(self) -> int:
        return self.M * self.N * self.K * self.count


def scalesim_conv_out(h: int, f: int, s: int) -> int:
    """SCALE-Sim's ofmap size (no padding): ceil((H - F + S) / S)."""
    return math.ceil((h - f + s) / s)


def conv_gemm(name: str, batch: int, c_in: int, h: int, w: int, filters: int, kh: int, kw: int, ho: int, wo: int, groups: int = 1) -> Gemm:
    for label, v in (
        ("batch", batch),
        ("channels", c_in),
        ("ifmap height", h),
        ("ifmap width", w),
        ("filters", filters),
        ("filter height", kh),
        ("filter width", kw),
        ("ofmap height", ho),
        ("ofmap width", wo),
        ("groups", groups),
    ):
        if v <= 0:
            raise LayerError(f"layer {name!r}: {label} = {v} (must be >= 1): zero-size or degenerate conv")
    if c_in % groups or filters % groups:
        raise LayerError(f"layer {name!r}: channels {c_in} and filters {filters} must be divisible by groups {groups}")
    M, N, K = batch * ho * wo, filters // groups, kh * kw * c_in // groups
    # the ifmap as stored, but never more than its im2col expansion (a strided 1x1 conv skips pixels)
    a = min(batch * c_in * h * w, M * K * groups)
    return Gemm(name, M=M, N=N, K=K, count=groups, a_elems=a, b_elems=filters * (c_in // groups) * kh * kw)


def lower(op: Op) -> list[Gemm]:
    """The GEMMs of an MPU op (``[]`` for any other op)."""
    if op.unit != "mpu":
        return []
    if any(s is None for s in op.in_shapes[:2]) or op.out_shapes[0] is None:
        raise LayerError(f"layer {op.name!r} ({op.op_type}): shapes unknown after inference; cannot lower")
    if op.op_type == "Conv":
        x, wt, y = op.in_shapes[0], op.in_shapes[1], op.out_shapes[0]
        if len(x) != 4:
            # 1-D / 3-D convs: flatten the spatial dims into one (same MAC count)
            xs, ws, ys = x[2:], wt[2:], y[2:]
            x = (x[0], x[1], math.prod(xs), 1)
            wt = (wt[0], wt[1], math.prod(ws), 1)
            y = (y[0], y[1], math.prod(ys), 1)
        groups = int(op.attrs.get("group", 1))
        return [conv_gemm(op.name, x[0], x[1], x[2], x[3], wt[0], wt[2], wt[3], y[2], y[3], groups)]
    a, b = op.in_shapes[0], op.in_shapes[1]
    if op.op_type == "Gemm":
        M, K = (a[1], a[0]) if op.attrs.get("transA", 0) else (a[0], a[1])
        N = b[0] if op.attrs.get("transB", 0) else b[1]
        return [Gemm(op.name, M, N, K, 1, a_elems=M * K, b_elems=K * N, b_is_weight=op.inputs[1] in op.weights)]
    # MatMul with numpy semantics
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    K = a2[-1]
    if b2[-2] != K:
        raise LayerError(f"layer {op.name!r}: MatMul inner dimensions differ ({a} @ {b})")
    N = b2[-1]
    b_weight = op.inputs[1] in op.weights
    if len(b2) == 2:
        M = math.prod(a2[:-1])
        return [Gemm(op.name, M, N, K, 1, a_elems=M * K, b_elems=K * N, b_is_weight=b_weight)]
    batch_dims = _broadcast(a2[:-2], b2[:-2], op.name)
    count = math.prod(batch_dims) if batch_dims else 1
    M = a2[-2]
    return [Gemm(op.name, M, N, K, count, a_elems=math.prod(a2), b_elems=math.prod(b2), b_is_weight=b_weight)]


def _broadcast(x: tuple, y: tuple, name: str) -> tuple:
    n = max(len(x), len(y))
    x = (1,) * (n - len(x)) + x
    y = (1,) * (n - len(y)) + y
    out = []
    for p, q in zip(x, y, strict=False):
        if p != q and 1 not in (p, q):
            raise LayerError(f"layer {name!r}: batch dims {x} and {y} do not broadcast")
        out.append(max(p, q))
    return tuple(out)
