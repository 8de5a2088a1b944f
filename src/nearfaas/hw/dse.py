"""Design-space exploration of the DSCS in-storage DSA (paper §4.2 / §6.1). Every number is *modelled*.

The sweep (``default_space``): array rows × cols ∈ {4, 8, …, 1024}² (all 81 power-of-two pairs,
square and non-square), on-chip SRAM = bytes-per-PE × PEs for 64, 256 and 1024 B/PE (the
paper's DSA has 256 B/PE: 4 MB / 16,384 PEs), capped at 32 MiB in all and split
ifmap : filter : ofmap = 3 : 3 : 2 (as the 1536/1536/1024 KiB default), each buffer at least
1 KiB; DRAM ∈ {DDR4 19.2, DDR5 38.4, HBM2 460 GB/s}. 81 × 3 × 3 = 729 points, 690 distinct after
the 32 MiB cap merges some of the largest arrays' buffer options. Fixed: weight-stationary
dataflow, VPU lanes = cols (one lane per column, as ``AcceleratorConfig``'s default), int8,
1 GHz, 14 nm, batch 1, the ``aladdin`` (synthesised-PE) energy/area source.

Per (config, model): dsa-mode latency (``nearfaas.hw.dsa``), throughput, energy parts
(``nearfaas.hw.energy``), accelerator and DRAM average power, area (``nearfaas.hw.area``).

Each zoo graph is imported and its fusion groups and GEMMs are lowered ONCE (``prepare``); a
configuration then only re-times the GEMMs (``gemm_timing``, the compiler's own function), so the
results equal ``compile_workload``'s (a unit test checks it).

SRAM access counts (for energy; the compiler does not count them) are our assumption, per GEMM
of M×N×K on an R×C array (WS): ifmap reads M·K·⌈N/C⌉ (each activation row streams once per column
fold), filter reads K·N·(M tiles), partial sums written ⌈K/R⌉ times and read back ⌈K/R⌉ − 1
times plus once by the VPU (4-byte accumulators); DRAM fills write their bytes into the buffer
they land in; stores read from the ofmap buffer; standalone VPU layers write and read their
inputs and outputs through the ofmap buffer once.
"""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .area import AcceleratorConfig, area_mm2
from .dsa.compiler import fuse, op_vpu_cycles
from .dsa.config import DRAM_GBPS, DSAConfig
from .dsa.errors import HwError
from .dsa.graph import Workload, load_ops
from .dsa.lower import Gemm, lower
from .dsa.timing import choose_tiles, fold_shape, gemm_timing, vpu_op_timing
from .energy import EnergyModel
from nearfaas.fanout import run_points
from nearfaas.stats import geomean

ZOO = ("logreg", "resnet50", "yolov3", "fcn", "efficientnet", "bert_base", "gpt2_xl", "vit_huge")
# Throughput units: one inference = one frame (vision), one 128-token sequence (BERT, GPT-2 prefill
# over its 128-token input: tokens/s = 128 / latency), one 200-feature record (logreg).
UNITS = {
    "logreg": ("records/s", 1),
    "resnet50": ("frames/s", 1),
    "yolov3": ("frames/s", 1),
    "fcn": ("frames/s", 1),
    "efficientnet": ("frames/s", 1),
    "bert_base": ("tokens/s", 128),
    "gpt2_xl": ("tokens/s", 128),
    "vit_huge": ("frames/s", 1),
}
SIDES = tuple(2**i for i in range(2, 11))  # 4 … 1024
BYTES_PER_PE = (64, 256, 1024)
DRAMS = ("ddr4", "ddr5", "hbm2")
SRAM_CAP_BYTES = 32 * 1024 * 1024
SRAM_SPLIT = (3 / 8, 3 / 8, 2 / 8)  # ifmap, filter, ofmap
MIN_BUFFER_KIB = 1.0
DEFAULT_BUDGETS_W = (25.0, 15.0)
# Which accelerator power (never DRAM) decides feasibility and spans the power-throughput frontier:
# "peak" = TDP-style, every PE/lane busy (default: a drive's budget is a cap that must hold for any
# workload and batch); "average" = the highest batch-1 average power over the swept models.
POWER_METRICS = {"peak": "peak_accel_w", "average": "max_accel_w"}
LABEL = "modelled (nearfaas.hw DSE: dsa-mode timing, aladdin energy/area, 14 nm)"
DESIGN_POINT = DSAConfig(source="design point 128x128 / 4 MiB / DDR5 / 1 GHz / 14 nm")


class DseError(HwError, ValueError):
    """Bad DSE input (budget, model list, empty space)."""


def buffers_kib(pes: int, bytes_per_pe: int) -> tuple[float, float, float]:
    total = min(pes * bytes_per_pe, SRAM_CAP_BYTES)
    return tuple(max(MIN_BUFFER_KIB, total * s / 1024) for s in SRAM_SPLIT)


def make_config(rows: int, cols: int, bytes_per_pe: int, dram: str) -> DSAConfig:
    ik, fk, ok = buffers_kib(rows * cols, bytes_per_pe)
    return DSAConfig(
        rows=rows,
        cols=cols,
        dataflow="ws",
        ifmap_sram_kib=ik,
        filter_sram_kib=fk,
        ofmap_sram_kib=ok,
        vpu_lanes=cols,
        clock_ghz=1.0,
        dram=dram,
        bytes_per_element=1,
        technology_nm=14,
        source="dse",
    ).validated()


def default_space(
    sides: Iterable[int] = SIDES, bytes_per_pe: Iterable[int] = BYTES_PER_PE, drams: Iterable[str] = DRAMS
) -> list[DSAConfig]:
    """The distinct configurations of the sweep, ordered by buffer set (tile cache locality)."""
    seen: dict[tuple, DSAConfig] = {}
    sides = list(sides)
    for r in sides:
        for c in sides:
            for m in bytes_per_pe:
                for d in drams:
                    cfg = make_config(r, c, m, d)
                    key = config_key(cfg)
                    seen.setdefault(key, cfg)
    return sorted(seen.values(), key=lambda c: (c.ifmap_sram_kib, c.ofmap_sram_kib, c.rows, c.cols, str(c.dram)))


def config_key(c: DSAConfig) -> tuple:
    return (c.rows, c.cols, c.ifmap_sram_kib, c.filter_sram_kib, c.ofmap_sram_kib, c.vpu_lanes, str(c.dram), c.clock_ghz)


# --------------------------------------------------------------------------------------------
# Workload skeletons: imported and lowered once


@dataclass
class Group:
    unit: str  # mpu | vpu | none | host
    members: list
    gemms: list[Gemm] = field(default_factory=list)
    ext_in: int = 0
    ext_out: int = 0


@dataclass
class Skeleton:
    name: str
    macs: int
    groups: list[Group]
    _vcyc: dict = field(default_factory=dict)  # (lanes, pipeline) -> per-group VPU cycles
    vpu_ops: int = 0  # lane-operations (config independent)

    def vpu_cycles(self, cfg: DSAConfig) -> list[int]:
        key = (cfg.vpu_lanes, cfg.vpu_pipeline)
        if key not in self._vcyc:
            out = []
            for g in self.groups:
                if g.unit == "mpu":
                    out.append(sum(op_vpu_cycles(m, cfg) for m in g.members[1:]))
                elif g.unit == "vpu":
                    out.append(sum(op_vpu_cycles(m, cfg) for m in g.members))
                else:
                    out.append(0)
            self._vcyc[key] = out
        return self._vcyc[key]


def _bytes(shape, b: int) -> int:
    return math.prod(shape) * b if shape is not None else 0


def prepare(w: Workload, bytes_per_element: int = 1) -> Skeleton:
    """Fusion groups, external DRAM bytes and lowered GEMMs of a workload (mirrors compile_workload)."""
    ops, b = w.ops, bytes_per_element
    consumers: dict[str, set[int]] = {}
    for i, op in enumerate(ops):
        for x in op.inputs:
            consumers.setdefault(x, set()).add(i)
    groups: list[Group] = []
    macs = 0
    for group in fuse(w):
        members = [ops[i] for i in group]
        anchor = members[0]
        gset = set(group)
        produced = {x for m in members for x in m.outputs}
        ext_in = 0
        for k, m in enumerate(members):
            for x, s in zip(m.inputs, m.in_shapes, strict=False):
                if x and x not in produced and not (k == 0 and anchor.unit == "mpu" and x in m.inputs[:2]):
                    if m.op_type == "Gather" and x == m.inputs[0]:
                        s = m.out_shapes[0]
                    ext_in += _bytes(s, b)
        ext_out = 0
        for m in members:
            for x, s in zip(m.outputs, m.out_shapes, strict=False):
                if x in w.outputs or (consumers.get(x, set()) - gset):
                    ext_out += _bytes(s, b)
        unit = anchor.unit
        gemms: list[Gemm] = []
        if unit == "mpu" and (any(x is None for x in anchor.in_shapes[:2]) or anchor.out_shapes[0] is None):
            unit = "host"
        elif unit == "mpu":
            gemms = list(lower(anchor))
            macs += sum(g.macs for g in gemms)
        groups.append(Group(unit, members, gemms, ext_in, ext_out))
    sk = Skeleton(w.name, macs, groups)
    lanes1 = DSAConfig(vpu_lanes=1, vpu_pipeline=0, source="lane-ops")
    sk.vpu_ops = sum(sk.vpu_cycles(lanes1))
    return sk


def load_skeletons(models: Iterable[str], progress: Callable[[str], None] | None = None) -> dict[str, Skeleton]:
    """Import each zoo graph once (``shapes_only(key, "full")``, batch 1) and prepare it."""
    from nearfaas.models import MODELS, shapes_only

    out = {}
    for key in models:
        if key not in MODELS:
            raise DseError(f"unknown model {key!r}; use 'all' or a comma-separated list of {', '.join(ZOO)}")
        w = load_ops(shapes_only(key, "full"), batch=1)
        w.name = key
        out[key] = prepare(w)
        if progress:
            progress(key)
    return out


def parse_models(spec: str) -> list[str]:
    if spec is None or spec.strip() in ("", "all"):
        return list(ZOO)
    keys = [k.strip() for k in spec.split(",") if k.strip()]
    bad = [k for k in keys if k not in ZOO]
    if bad or not keys:
        raise DseError(f"unknown model(s) {', '.join(bad) or repr(spec)}; use 'all' or a comma-separated list of {', '.join(ZOO)}")
    return list(dict.fromkeys(keys))


def check_budget(budget_w: float) -> float:
    if not isinstance(budget_w, (int, float)) or isinstance(budget_w, bool) or not budget_w > 0 or math.isinf(budget_w):
        raise DseError(f"budget {budget_w!r} W: the power budget must be a positive number of watts (e.g. 25)")
    return float(budget_w)


# --------------------------------------------------------------------------------------------
# Evaluation of one (config, model)


def _sram_counts(g: Gemm, cfg: DSAConfig, reads: dict, writes: dict) -> None:
    tl = choose_tiles(g, cfg)
    b, acc, n = cfg.bytes_per_element, cfg.acc_bytes, g.count
    M, N, K, R, C = g.M, g.N, g.K, cfg.rows, cfg.cols
    nM, nN, nK = math.ceil(M / tl.Mt), math.ceil(N / tl.Nt), math.ceil(K / tl.Kt)
    fr, fc, _ = fold_shape(M, N, K, R, C, cfg.dataflow)
    if cfg.dataflow == "ws":
        a_rd, b_rd, kf = M * K * fc, K * N * nM, fr
    elif cfg.dataflow == "os":
        a_rd, b_rd, kf = M * K * fc, K * N * fr, nK
    else:  # is
        a_rd, b_rd, kf = M * K * nN, K * N * fc, fr
    reads["ifmap"] += a_rd * b * n
    reads["filter"] += b_rd * b * n
    writes["ifmap"] += tl.a_reads * b * n
    writes["filter"] += tl.b_reads * b * n
    writes["ofmap"] += M * N * kf * acc * n
    reads["ofmap"] += M * N * kf * acc * n  # (kf - 1) read-backs + the VPU's final read


def evaluate(sk: Skeleton, cfg: DSAConfig, em: EnergyModel) -> dict:
    """Latency, throughput, energy, power of one model on one config (batch 1, dsa mode)."""
    vcyc = sk.vpu_cycles(cfg)
    cycles = 0
    dram = 0
    reads = {"ifmap": 0, "filter": 0, "ofmap": 0}
    writes = {"ifmap": 0, "filter": 0, "ofmap": 0}
    mpu_cycles = 0
    for grp, vc in zip(sk.groups, vcyc, strict=True):
        if grp.unit == "mpu":
            for g in grp.gemms:
                t, _ = gemm_timing(g, cfg, extra_in=grp.ext_in, extra_out=grp.ext_out, vpu_cyc=vc, write_out=False)
                cycles += t.cycles
                mpu_cycles += t.mpu_cycles
                dram += t.dram_in + t.dram_out
                _sram_counts(g, cfg, reads, writes)
                writes["ofmap"] += grp.ext_in + grp.ext_out
                reads["ofmap"] += grp.ext_in + grp.ext_out
        elif grp.unit == "vpu":
            t = vpu_op_timing(cfg, vc, grp.ext_in, grp.ext_out)
            cycles += t.cycles
            dram += t.dram_in + t.dram_out
            writes["ofmap"] += t.dram_in + t.dram_out
            reads["ofmap"] += t.dram_in + t.dram_out
    f = cfg.clock_ghz * 1e9
    latency = cycles / f
    e = em.breakdown(
        {
            "macs": sk.macs,
            "sram_reads_bytes": reads,
            "sram_writes_bytes": writes,
            "dram_bytes": dram,
            "vpu_ops": sk.vpu_ops,
            "cycles": cycles,
            "clock_hz": f,
        }
    )
    p = em.average_power(e, latency)
    unit, per = UNITS.get(sk.name, ("inferences/s", 1))
    return {
        "model": sk.name,
        "cycles": cycles,
        "latency_s": latency,
        "inferences_per_s": 1.0 / latency,
        "throughput": per / latency,
        "throughput_unit": unit,
        "macs": sk.macs,
        "mpu_utilisation": sk.macs / (mpu_cycles * cfg.pes) if mpu_cycles else 0.0,
        "dram_bytes": dram,
        **{f"energy_{k}_j": v for k, v in e.items()},
        "accel_w": p["accelerator_w"],
        "dram_w": p["dram_w"],
        "total_w": p["total_w"],
    }


def energy_model(cfg: DSAConfig) -> EnergyModel:
    return EnergyModel(AcceleratorConfig.from_dsa_config(cfg))


def config_record(cfg: DSAConfig, em: EnergyModel) -> dict:
    a = area_mm2(em.config.accel)
    return {
        "rows": cfg.rows,
        "cols": cfg.cols,
        "pes": cfg.pes,
        "sram_kib": cfg.ifmap_sram_kib + cfg.filter_sram_kib + cfg.ofmap_sram_kib,
        "ifmap_kib": cfg.ifmap_sram_kib,
        "filter_kib": cfg.filter_sram_kib,
        "ofmap_kib": cfg.ofmap_sram_kib,
        "vpu_lanes": cfg.vpu_lanes,
        "dram": str(cfg.dram),
        "dram_gbps": cfg.dram_gbps,
        "area_mm2": a["total"],
        "area_pe_mm2": a["pe_array"],
        "area_sram_mm2": a["sram"],
        "peak_accel_w": peak_accel_w(cfg, em),
        "static_w": em.static_w,
    }


def peak_accel_w(cfg: DSAConfig, em: EnergyModel) -> float:
    """TDP-style accelerator power, no DRAM: every PE does a MAC each cycle with the SRAM traffic
    a streaming WS array needs (an ifmap byte per row, a weight byte per column for the next
    fold, a partial sum written and read per column), every VPU lane busy, DRAM fills arriving
    at the full DRAM bandwidth into the ifmap buffer, plus leakage."""
    f = cfg.clock_ghz * 1e9
    b, acc = cfg.bytes_per_element, cfg.acc_bytes
    pj = cfg.pes * em.mac_pj
    pj += cfg.rows * b * em.sram_pj_per_byte("ifmap") + cfg.cols * b * em.sram_pj_per_byte("filter")
    pj += cfg.cols * acc * (em.sram_pj_per_byte("ofmap") + em.sram_pj_per_byte("ofmap", write=True))
    pj += cfg.vpu_lanes * em.vpu_pj
    fill = cfg.dram_gbps * 1e9 * em.sram_pj_per_byte("ifmap", write=True)
    return (pj * f + fill) * 1e-12 + em.static_w


def name_of(cfg: DSAConfig) -> str:
    sram = cfg.ifmap_sram_kib + cfg.filter_sram_kib + cfg.ofmap_sram_kib
    s = f"{sram / 1024:g}MiB" if sram >= 1024 else f"{sram:g}KiB"
    return f"{cfg.rows}x{cfg.cols}/{s}/{str(cfg.dram).upper()}"


def config_point(shared: tuple[dict[str, Skeleton], list[str]], point: tuple[int, DSAConfig]) -> tuple[dict, list[dict]]:
    """One config of the sweep: its record and one ``evaluate`` per model (a pure function of its
    arguments, so it runs the same here or on a Ray worker)."""
    sks, models = shared
    i, cfg = point
    em = energy_model(cfg)
    rec = {"config_id": i, "name": name_of(cfg), **config_record(cfg, em)}
    return rec, [evaluate(sks[m], cfg, em) for m in models]


@dataclass
class SweepResult:
    models: list[str]
    budget_w: float
    configs: list[dict]  # one per config: record + aggregates
    points: list[dict]  # one per (config, model)
    power_frontier: list[dict]
    area_frontier: list[dict]
    optimum: dict | None
    reason: str
    budgets: dict[str, dict | None]  # optimum per reported budget
    power: str = "peak"  # which accelerator power is "power_w" (POWER_METRICS)


def sweep(
    configs: list[DSAConfig] | None = None,
    models: Iterable[str] | None = None,
    budget_w: float = 25.0,
    skeletons: dict[str, Skeleton] | None = None,
    advance: Callable[[int], None] | None = None,
    power: str = "peak",
    ray_address: str | None = None,
) -> SweepResult:
    """Evaluate every config on every model; Pareto frontiers; the optimum within ``budget_w``.
    ``ray_address`` (host:port or ``auto``): the configs run as Ray tasks (``nearfaas.fanout``),
    with the same result as here; ``advance(n)`` is called as configs finish."""
    budget_w = check_budget(budget_w)
    if power not in POWER_METRICS:
        raise DseError(f"power metric {power!r}: use one of {', '.join(POWER_METRICS)}")
    pkey = POWER_METRICS[power]
    models = list(models) if models is not None else list(ZOO)
    if not models:
        raise DseError("no models to sweep; use 'all' or a comma-separated list of zoo keys")
    for m in models:
        if m not in ZOO:
            raise DseError(f"unknown model {m!r}; use 'all' or a comma-separated list of {', '.join(ZOO)}")
    configs = default_space() if configs is None else configs
    if not configs:
        raise DseError("empty design space")
    sks = skeletons if skeletons is not None else load_skeletons(models)
    rows, points = [], []
    # Each config is an independent point (run here, or as Ray tasks with ``ray_address``); the
    # skeletons go to the workers once. Results come back in config order: the output is the same.
    done = run_points(config_point, list(enumerate(configs)), shared=({m: sks[m] for m in models}, models),
                      ray_address=ray_address, progress=advance, description="sweeping configs")
    for rec, res in done:
        i = rec["config_id"]
        for r in res:
            points.append(
                {"config_id": i, "name": rec["name"], **{k: rec[k] for k in ("rows", "cols", "sram_kib", "dram", "area_mm2")}, **r}
            )
        rec["geomean_inferences_per_s"] = geomean([r["inferences_per_s"] for r in res])
        rec["max_accel_w"] = max(r["accel_w"] for r in res)
        rec["max_dram_w"] = max(r["dram_w"] for r in res)
        rec["max_total_w"] = max(r["total_w"] for r in res)
        rec["mean_energy_j"] = sum(r["energy_total_j"] for r in res) / len(res)
        for m, r in zip(models, res, strict=True):
            rec[f"{m}_per_s"] = r["throughput"]
        rows.append(rec)
    for rec in rows:
        rec["power_w"] = rec[pkey]
        for b in sorted({budget_w, *DEFAULT_BUDGETS_W}):
            rec[f"feasible_{b:g}w_peak"] = rec["peak_accel_w"] <= b
            rec[f"feasible_{b:g}w_average"] = rec["max_accel_w"] <= b
            rec[f"feasible_{b:g}w_average_with_dram"] = rec["max_total_w"] <= b
    pf = pareto(rows, "power_w", "geomean_inferences_per_s")
    af = pareto(rows, "area_mm2", "geomean_inferences_per_s")
    pf_ids, af_ids = {r["config_id"] for r in pf}, {r["config_id"] for r in af}
    for rec in rows:
        rec["on_power_frontier"] = rec["config_id"] in pf_ids
        rec["on_area_frontier"] = rec["config_id"] in af_ids
    best = choose(rows, budget_w)
    what = "TDP-style peak power (all PEs and lanes busy)" if power == "peak" else "max over the models of the batch-1 average power"
    reason = (
        f"maximum geometric-mean inferences/s over {len(models)} models ({', '.join(models)}) among the "
        f"{sum(r['power_w'] <= budget_w for r in rows)} of {len(rows)} configs whose accelerator power ({what}, "
        f"DRAM not counted) is <= {budget_w:g} W; ties broken by smaller area, then lower power"
    )
    if best is None:
        reason = f"no configuration meets the {budget_w:g} W budget"
    budgets = {f"{b:g}W": choose(rows, b) for b in sorted({budget_w, *DEFAULT_BUDGETS_W})}
    return SweepResult(models, budget_w, rows, points, pf, af, best, reason, budgets, power)


def choose(rows: list[dict], budget_w: float) -> dict | None:
    feas = [r for r in rows if r["power_w"] <= budget_w]
    if not feas:
        return None
    return min(feas, key=lambda r: (-round(r["geomean_inferences_per_s"], 9), r["area_mm2"], r["power_w"]))


def pareto(rows: list[dict], cost: str, value: str) -> list[dict]:
    """Non-dominated rows: no other row has cost <= and value >= with one strict. Sorted by cost."""
    ordered = sorted(rows, key=lambda r: (r[cost], -r[value]))
    out, best = [], -math.inf
    for r in ordered:
        if r[value] > best:
            out.append(r)
            best = r[value]
    return out


def dominated(p: dict, rows: list[dict], cost: str, value: str) -> bool:
    return any((q[cost] <= p[cost] and q[value] >= p[value]) and (q[cost] < p[cost] or q[value] > p[value]) for q in rows)


# --------------------------------------------------------------------------------------------
# Outputs


def write_outputs(res: SweepResult, out_dir) -> dict[str, str]:
    """points.csv, configs.csv, pareto_power.csv, pareto_area.csv and the two PNGs."""
    import csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {}

    def dump(name, rows):
        path = out / name
        with path.open("w", newline="") as f:
            if rows:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        files[name] = str(path)

    dump("points.csv", res.points)
    dump("configs.csv", res.configs)
    dump("pareto_power.csv", res.power_frontier)
    dump("pareto_area.csv", res.area_frontier)
    files.update(plot(res, out))
    return files


def plot(res: SweepResult, out) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = {}
    for cost, front, label, fname in (
        ("power_w", res.power_frontier, f"accelerator power, W ({res.power}, no DRAM)", "pareto_power.png"),
        ("area_mm2", res.area_frontier, "area, mm² (14 nm)", "pareto_area.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        feas = [r for r in res.configs if r["power_w"] <= res.budget_w]
        infeas = [r for r in res.configs if r["power_w"] > res.budget_w]
        ax.scatter([r[cost] for r in infeas], [r["geomean_inferences_per_s"] for r in infeas], s=6, c="0.75", label="over budget")
        ax.scatter(
            [r[cost] for r in feas], [r["geomean_inferences_per_s"] for r in feas], s=6, c="tab:blue", label=f"<= {res.budget_w:g} W"
        )
        ax.plot([r[cost] for r in front], [r["geomean_inferences_per_s"] for r in front], "-o", ms=3, c="tab:red", label="Pareto frontier")
        if res.optimum:
            o = res.optimum
            ax.scatter(
                [o[cost]],
                [o["geomean_inferences_per_s"]],
                marker="*",
                s=160,
                c="gold",
                edgecolors="k",
                zorder=5,
                label=f"chosen {o['name']}",
            )
        if cost == "power_w":
            ax.axvline(res.budget_w, ls="--", c="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"geomean inferences/s over {len(res.models)} models")
        ax.set_title(f"DSA design space, {len(res.configs)} configs (modelled)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = Path(out) / fname
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files[fname] = str(path)
    return files


# --------------------------------------------------------------------------------------------
# The design-point report


def report(models: Iterable[str] | None = None, cfg: DSAConfig | None = None, skeletons: dict | None = None) -> dict:
    """Per-model numbers of one design point (default 128×128 / 4 MiB / DDR5 / 1 GHz / 14 nm)."""
    cfg = (cfg or DESIGN_POINT).validated()
    models = list(models) if models is not None else list(ZOO)
    sks = skeletons if skeletons is not None else load_skeletons(models)
    em = energy_model(cfg)
    rec = config_record(cfg, em)
    rows = [evaluate(sks[m], cfg, em) for m in models]
    return {
        "label": LABEL,
        "design_point": {
            "name": name_of(cfg),
            "dataflow": cfg.dataflow,
            "clock_ghz": cfg.clock_ghz,
            "technology_nm": cfg.technology_nm,
            "dtype": "int8",
            "batch": 1,
            **rec,
        },
        "models": rows,
    }


__all__ = [
    "DESIGN_POINT",
    "DRAM_GBPS",
    "DseError",
    "SweepResult",
    "ZOO",
    "default_space",
    "dominated",
    "evaluate",
    "load_skeletons",
    "make_config",
    "pareto",
    "parse_models",
    "prepare",
    "report",
    "sweep",
    "write_outputs",
]
