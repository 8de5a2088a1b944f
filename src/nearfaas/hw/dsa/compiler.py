"""The DSA compiler: ONNX workload -> an inspectable per-layer program with modelled timing.

Passes (in order):

1. **fusion** — an MPU op (Conv/Gemm/MatMul) absorbs the element-wise ops that follow on its
   output (bias Add, BatchNormalization, activations, residual Add, the Div/Erf/Add/Mul chain
   of GELU, attention's scale and mask) while they keep its output shape: they run on the VPU
   out of the shared ofmap buffer, so the intermediate never goes to DRAM. Other VPU ops
   (softmax, layer-norm, pooling, resize, reshape/transpose/concat/slice/gather, casts) form
   VPU layers that likewise absorb the VPU/metadata ops consuming their results.
2. **lowering** — conv → GEMM(s), matmul → GEMM(s) (``lower.py``).
3. **tiling with double buffering** — tiles sized to the ifmap/filter/ofmap buffers with the
   least DRAM traffic (``timing.choose_tiles``); loads/stores overlap compute per tile.
4. **padding to the array** — each GEMM is padded to whole folds of the R×C array; the program
   reports folds and the resulting utilisation.

Every number is *modelled* (``Program.to_dict()["label"]``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .config import DSAConfig
from .errors import GraphError
from .graph import ELEMENTWISE, REDUCTION, RESIZE, Op, Workload, load_ops
from .lower import lower
from .timing import fold_shape, gemm_timing, scalesim_cycles, vpu_cycles, vpu_op_timing

FUSE_WINDOW = 16  # how far past an op the fusion pass looks for its consumers


@dataclass
class Layer:
    name: str
    unit: str  # mpu | vpu | none | host
    kind: str
    ops: list[str]
    fused: list[str] = field(default_factory=list)
    gemms: list[dict] = field(default_factory=list)
    padded: list[dict] = field(default_factory=list)  # the GEMM padded to whole folds of the array
    macs: int = 0
    folds: int = 0
    tiles: int = 0
    tile: list[int] | None = None
    dram_in: int = 0
    dram_out: int = 0
    mpu_cycles: int = 0
    vpu_cycles: int = 0
    cycles: int = 0
    seconds: float = 0.0
    bound: str = ""
    utilisation: float = 0.0
    note: str = ""


@dataclass
class Program:
    model: str
    batch: int
    mode: str
    config: DSAConfig
    layers: list[Layer]
    unsupported: list[tuple[str, str, str]]

    @property
    def total_cycles(self) -> int:
        return sum(layer.cycles for layer in self.layers)

    @property
    def total_seconds(self) -> float:
        return self.total_cycles / (self.config.clock_ghz * 1e9)

    @property
    def total_macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    def totals(self) -> dict:
        ls = self.layers
        mpu = sum(x.mpu_cycles for x in ls)
        return {
            "cycles": self.total_cycles,
            "latency_ms": self.total_seconds * 1e3,
            "macs": self.total_macs,
            "mpu_cycles": mpu,
            "vpu_cycles": sum(x.vpu_cycles for x in ls),
            "dram_bytes_in": sum(x.dram_in for x in ls),
            "dram_bytes_out": sum(x.dram_out for x in ls),
            "mpu_utilisation": self.total_macs / (mpu * self.config.pes) if mpu else 0.0,
            "layers": len(ls),
            "mpu_layers": sum(x.unit == "mpu" for x in ls),
            "vpu_layers": sum(x.unit == "vpu" for x in ls),
            "host_ops": [x.name for x in ls if x.unit == "host"],
            "memory_bound_layers": sum(x.bound == "memory" for x in ls),
        }

    def to_dict(self) -> dict:
        cfg = asdict(self.config)
        cfg["dram_gbps"] = self.config.dram_gbps
        return {
            "label": f"modelled ({self.mode} mode, DSA model nearfaas.hw.dsa)",
            "model": self.model,
            "batch": self.batch,
            "mode": self.mode,
            "config": cfg,
            "layers": [asdict(x) for x in self.layers],
            "unsupported": [{"node": n, "op_type": t, "fallback": u} for n, t, u in self.unsupported],
            "totals": self.totals(),
        }


def op_vpu_cycles(op: Op, cfg: DSAConfig) -> int:
    """VPU cycles of one non-MPU op (element operations over L lanes)."""
    if op.unit in ("none", "host", "mpu"):
        return 0
    t = op.op_type
    if op.kind == "elementwise":
        return vpu_cycles(op.out_elems(), ELEMENTWISE.get(t, 1), cfg)
    if op.kind == "reduction":
        return vpu_cycles(op.in_elems(), REDUCTION.get(t, 1), cfg)
    if op.kind == "pool":
        if t.startswith("Global"):
            return vpu_cycles(op.in_elems(), 1, cfg)
        return vpu_cycles(op.out_elems(), math.prod(op.attrs.get("kernel_shape", [1])), cfg)
    if op.kind == "resize":
        ops = 1 if op.attrs.get("mode", "nearest") == "nearest" else 4
        return vpu_cycles(op.out_elems(), ops * RESIZE.get(t, 1), cfg)
    return vpu_cycles(op.out_elems(), 1, cfg)  # layout: one copy per element


def fuse(w: Workload) -> list[list[int]]:
    """Fusion pass: groups of op indices; the first of each group is its anchor."""
    ops = w.ops
    assigned: set[int] = set()
    groups: list[list[int]] = []
    for i, op in enumerate(ops):
        if i in assigned:
            continue
        group, produced = [i], set(op.outputs)
        assigned.add(i)
        if op.unit in ("mpu", "vpu"):
            anchor_shape = op.out_shapes[0]
            j, last = i + 1, i
            while j < len(ops) and j - last <= FUSE_WINDOW:
                nxt = ops[j]
                if j not in assigned and any(x in produced for x in nxt.inputs):
                    if op.unit == "mpu":
                        ok = nxt.kind == "elementwise" and nxt.out_shapes[0] == anchor_shape
                    else:
                        ok = nxt.unit in ("vpu", "none")
                    if not ok:
                        break
                    group.append(j)
                    assigned.add(j)
                    produced.update(nxt.outputs)
                    last = j
                j += 1
        groups.append(group)
    return groups


def _padded(M: int, N: int, K: int, cfg: DSAConfig) -> dict:
    """Padding pass: the spatial dims of the mapping rounded up to the array (R rows, C cols)."""
    R, C = cfg.rows, cfg.cols

    def up(x: int, a: int) -> int:
        return -(-x // a) * a

    if cfg.dataflow == "os":
        return {"M": up(M, R), "N": up(N, C), "K": K}
    if cfg.dataflow == "ws":
        return {"M": M, "N": up(N, C), "K": up(K, R)}
    return {"M": up(M, C), "N": N, "K": up(K, R)}


def _bytes(shape, b: int) -> int:
    return math.prod(shape) * b if shape is not None else 0


def compile_workload(w: Workload, cfg: DSAConfig, mode: str = "dsa") -> Program:
    """Run the passes over an imported workload and time every layer."""
    if mode not in ("dsa", "scalesim"):
        raise ValueError(f"unknown mode {mode!r}: use dsa or scalesim")
    ops, b = w.ops, cfg.bytes_per_element
    consumers: dict[str, set[int]] = {}
    for i, op in enumerate(ops):
        for x in op.inputs:
            consumers.setdefault(x, set()).add(i)
    layers: list[Layer] = []
    unsupported = list(w.unsupported)
    for group in fuse(w):
        members = [ops[i] for i in group]
        anchor = members[0]
        gset = set(group)
        produced = {x for m in members for x in m.outputs}
        ext_in = 0  # activations and weights read by absorbed members
        for k, m in enumerate(members):
            for x, s in zip(m.inputs, m.in_shapes, strict=False):
                if x and x not in produced and not (k == 0 and anchor.unit == "mpu" and x in m.inputs[:2]):
                    if m.op_type == "Gather" and x == m.inputs[0]:
                        s = m.out_shapes[0]  # a gather reads only the rows it picks
                    ext_in += _bytes(s, b)
        ext_out = 0
        for m in members:
            for x, s in zip(m.outputs, m.out_shapes, strict=False):
                if x in w.outputs or (consumers.get(x, set()) - gset):
                    ext_out += _bytes(s, b)
        vcyc = sum(op_vpu_cycles(m, cfg) for m in members[1:] if anchor.unit == "mpu")
        layer = Layer(
            name=anchor.name,
            unit=anchor.unit,
            kind=anchor.kind,
            ops=[m.op_type for m in members],
            fused=[f"{m.op_type}:{m.name}" for m in members[1:]],
            note=anchor.note,
        )
        if anchor.unit == "mpu" and (any(x is None for x in anchor.in_shapes[:2]) or anchor.out_shapes[0] is None):
            layer.unit, layer.kind = "host", "host"
            layer.note = f"{anchor.op_type} with shapes unknown after inference (after an unsupported op?): fallback host"
            unsupported.append((anchor.name, anchor.op_type, "host"))
        elif anchor.unit == "mpu":
            for g in lower(anchor):
                fr, fc, _ = fold_shape(g.M, g.N, g.K, cfg.rows, cfg.cols, cfg.dataflow)
                layer.gemms.append({"M": g.M, "N": g.N, "K": g.K, "count": g.count})
                layer.padded.append(_padded(g.M, g.N, g.K, cfg))
                layer.macs += g.macs
                layer.folds += fr * fc * g.count
                if mode == "scalesim":
                    c = g.count * scalesim_cycles(g.M, g.N, g.K, cfg.rows, cfg.cols, cfg.dataflow)
                    layer.mpu_cycles += c
                    layer.cycles += c
                    layer.bound = "compute"
                    continue
                t, tl = gemm_timing(g, cfg, extra_in=ext_in, extra_out=ext_out, vpu_cyc=vcyc, write_out=False)
                layer.tiles += t.tiles
                layer.tile = [tl.Mt, tl.Nt, tl.Kt]
                layer.dram_in += t.dram_in
                layer.dram_out += t.dram_out
                layer.mpu_cycles += t.mpu_cycles
                layer.vpu_cycles += t.vpu_cycles
                layer.cycles += t.cycles
                layer.seconds += t.seconds
                layer.bound = t.bound
            if layer.mpu_cycles:
                layer.utilisation = layer.macs / (layer.mpu_cycles * cfg.pes)
        elif anchor.unit == "vpu" and mode == "dsa":
            vcyc = sum(op_vpu_cycles(m, cfg) for m in members)
            t = vpu_op_timing(cfg, vcyc, ext_in, ext_out)
            layer.vpu_cycles, layer.cycles, layer.seconds = t.vpu_cycles, t.cycles, t.seconds
            layer.dram_in, layer.dram_out, layer.tiles, layer.bound = t.dram_in, t.dram_out, t.tiles, t.bound
        elif anchor.unit == "host":
            layer.note = layer.note or "runs on the host CPU: not modelled by the DSA"
        if mode == "dsa" and layer.seconds == 0 and layer.cycles:
            layer.seconds = layer.cycles / (cfg.clock_ghz * 1e9)
        if mode == "scalesim":
            layer.seconds = layer.cycles / (cfg.clock_ghz * 1e9)
        layers.append(layer)
    return Program(w.name, w.batch, mode, cfg, layers, unsupported)


def compile_model(source, cfg: DSAConfig | None = None, batch: int = 1, mode: str = "dsa") -> Program:
    """Import (path, ModelProto or zoo key) and compile."""
    if isinstance(source, str) and not source.endswith(".onnx"):
        from pathlib import Path

        from nearfaas.models import MODELS, shapes_only

        if source in MODELS:
            w = load_ops(shapes_only(source, "full"), batch=batch)
            w.name = source
            return compile_workload(w, cfg or DSAConfig().validated(), mode)
        if not Path(source).is_file():
            raise GraphError(f"{source}: neither a zoo model key ({', '.join(sorted(MODELS))}) nor an ONNX file")
    return compile_workload(load_ops(source, batch=batch), cfg or DSAConfig().validated(), mode)
