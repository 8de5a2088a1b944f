"""End-to-end model of the eight applications on the seven Table 2 platforms (DSCS §6.1).

``end_to_end(app, platform, batch=1, link="s3-like", **opts) -> Breakdown``: stages f1 → f2 → f3,
each a list of terms ``{value_s, label, source}`` whose sum is the stage time; the stages sum to
the total. ``evaluate(apps, platforms, **opts)``: speedup, energy reduction and cost efficiency
against the CPU baseline, with every input recorded. See docs/results.md.

Where each stage runs (DSCS §6.1: "we use the available compute unit ... to execute both f1 and
f2"; "Function 3 always runs on a CPU in a compute node"):

* f2 — DSA: ``nearfaas.hw`` dsa-mode timing of the design point; GPU/FPGA/NS devices: the
  catalog's roofline, layer by layer, over the compiler's fusion groups; CPU: the MEASURED
  profile (``cpu_compute="measured"``, default: this 2-core AMD EPYC VM, 1 ONNX Runtime thread,
  *not* a Xeon 8275CL) or the catalog's Xeon roofline (``cpu_compute="modelled"``).
* f1 — CPU: measured (or Xeon roofline when modelled); NS-ARM: measured × an A57 slowdown
  [assumption]; GPU/FPGA/NS-GPU/NS-FPGA: roofline element-wise op; DSA: VPU ``preprocess_timing``.
* f3 — measured CPU seconds on a compute node, every platform.

Data movement: traditional platforms read the upload, write and read the intermediates and
the result over the link (``link.profiles``, s3-like by default), plus host↔device PCIe copies
for GPU/FPGA; near-storage platforms move f1/f2 data flash ↔ drive DRAM over P2P and only f2's
result crosses the link to f3. The system-stack overhead per stage is MEASURED here
(``benchmarks/results/invoke_overhead.json``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from nearfaas.apps.catalog import APPS
from nearfaas.link.profiles import get_profile

from . import platforms as P

MEASURED = "measured"
MODELLED = "modelled"
CPU_MEASURED_NOTE = "measured on this machine, not a Xeon 8275CL (2-core AMD EPYC VM, 1 ONNX Runtime thread)"
OVERHEAD_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "invoke_overhead.json"
STACK_MODES = ("gateway-minus-worker", "gateway")
CPU_MODES = (MEASURED, MODELLED)


@dataclass
class Term:
    name: str
    value_s: float
    label: str  # measured | modelled
    source: str
    component: str  # host_cpu | accel | network | pcie | p2p | stack | driver
    bytes: float = 0.0
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "value_s": self.value_s,
            "label": self.label,
            "source": self.source,
            "component": self.component,
            "bytes": self.bytes,
            "detail": self.detail,
        }


@dataclass
class Stage:
    name: str  # f1 | f2 | f3
    where: str
    terms: list[Term]

    @property
    def total_s(self) -> float:
        return sum(t.value_s for t in self.terms)

    def to_dict(self) -> dict:
        return {"name": self.name, "where": self.where, "total_s": self.total_s, "terms": [t.to_dict() for t in self.terms]}


@dataclass
class Breakdown:
    app: str
    platform: str
    batch: int
    link: str
    stages: list[Stage]
    inputs: dict

    @property
    def total_s(self) -> float:
        return sum(s.total_s for s in self.stages)

    @property
    def terms(self) -> list[Term]:
        return [t for s in self.stages for t in s.terms]

    def network_bytes(self, input_only: bool = False) -> float:
        return sum(t.bytes for t in self.terms if t.component == "network" and (not input_only or t.detail.get("input")))

    def by_component(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for t in self.terms:
            out[t.component] = out.get(t.component, 0.0) + t.value_s
        return out

    @property
    def label(self) -> str:
        return MODELLED if any(t.label == MODELLED for t in self.terms) else MEASURED

    def to_dict(self) -> dict:
        return {
            "app": self.app,
            "platform": self.platform,
            "batch": self.batch,
            "link": self.link,
            "label": self.label + " (end-to-end twin; measured terms named in each term's source)",
            "total_s": self.total_s,
            "by_component_s": self.by_component(),
            "network_bytes": self.network_bytes(),
            "stages": [s.to_dict() for s in self.stages],
            "inputs": self.inputs,
        }


# ------------------------------------------------------------------ measured inputs


@cache
def _profiles():
    from nearfaas.apps.profiles import load

    return load()


def profile(app: str) -> dict:
    entry = _profiles().for_app(app)
    if not entry:
        raise ValueError(f"app {app!r}: no measured profile in {_profiles().path}; run benchmarks/apps.py")
    return entry


@cache
def stack_overhead(mode: str = "gateway-minus-worker", path: str | None = None) -> tuple[float, str]:
    """Seconds of system-stack overhead per stage invocation, measured on the live platform."""
    if mode not in STACK_MODES:
        raise ValueError(f"stack={mode!r}: use one of {', '.join(STACK_MODES)}")
    p = Path(path) if path else OVERHEAD_FILE
    warm = json.loads(p.read_text())["warm"]
    # The default (secured) configuration since issue 12; files from before it name no configuration.
    config = "secured/" if "secured/gateway@1" in warm else ""
    g, w = warm[f"{config}gateway@1"]["p50_ms"], warm[f"{config}worker@1"]["p50_ms"]
    if mode == "gateway":
        return g / 1e3, f"{p.name}: warm {config}gateway@1 p50 {g} ms (no-op call through gateway and worker)"
    return (g - w) / 1e3, f"{p.name}: warm {config}gateway@1 p50 {g} ms - {config}worker@1 p50 {w} ms (the gateway's own overhead)"


def sizes(app: str) -> dict:
    """Bytes of each object in the chain, from the measured profile: the upload (make_input's
    seed-0 JPEG/PNG/text/records), f1's tensor, f2's result; and Table 1's input dims."""
    e = profile(app)
    st = e["stages"]
    return {
        "upload": float(e["input"]["bytes"][0]),
        "f1_out": float(st["f1"]["batch1"]["output_bytes"]),
        "f2_out": float(st["f2"]["batch1"]["output_bytes"]),
        "f3_out": float(P.RESULT_RECORD_BYTES.value),
        "table1_dims": APPS[app].dims,
        "table1_input_elements": table1_input_elements(app),
        "source": "benchmarks/results/apps.json input.bytes[0] and stages.*.batch1.output_bytes (make_input seed 0); Table 1 dims",
    }


def table1_input_elements(app: str) -> int:
    """Elements of the model input in Table 1's dims, e.g. "(3,224,224)/(1,1000)" -> 150528."""
    first = APPS[app].dims.split("/")[0].strip().strip("()")
    return math.prod(int(x) for x in first.replace("(", "").replace(")", "").split(",") if x.strip())


def _cpu_s(app: str, stage: str, batch: int) -> float:
    fn = profile(app)["functions"][("f1", "f2", "f3").index(stage)]
    return float(_profiles().compute_s(fn, batch=batch))


# ------------------------------------------------------------------ the model


def _net(link, name, nbytes, requests, input_=False) -> Term:
    return Term(
        name,
        link.expected_transfer_s(int(nbytes), requests),
        MODELLED,
        f"link {link.name}: {requests} x expected first byte + bytes / {link.bandwidth_bytes_per_s:.3g} B/s ({link.source})",
        "network",
        nbytes,
        {"input": input_},
    )


def _p2p(name, nbytes, write=False, requests=1) -> Term:
    bw = min(P.GEN3_X4_BPS.value, (P.FLASH_WRITE_BPS if write else P.FLASH_READ_BPS).value)
    lat = (P.FLASH_WRITE_LATENCY_S if write else P.FLASH_READ_LATENCY_S).value
    return Term(
        name,
        requests * lat + nbytes / bw,
        MODELLED,
        f"P2P flash {'<-' if write else '->'} drive DRAM: latency {lat * 1e6:g} us + bytes / min(PCIe Gen3x4 3.94 GB/s [T2, HWR §3.5], "
        f"flash {'write' if write else 'read'} {bw / 1e9:g} GB/s [assumption])",
        "p2p",
        nbytes,
        {"write": write},
    )


def _pcie(platform, name, nbytes) -> Term:
    bw = P.host_link_bps(platform)
    return Term(
        name,
        nbytes / bw,
        MODELLED,
        f"host<->device PCIe {bw / 1e9:.2f} GB/s ({P.device(platform).specs['host_link'].source})",
        "pcie",
        nbytes,
    )


def _driver(platform) -> Term:
    d = P.device(platform)
    return Term("driver", float(d.driver_s.value), MODELLED, f"{d.name} driver_s ({d.driver_s.source})", "driver")


def _stack(opts) -> Term:
    s, src = stack_overhead(opts.get("stack", "gateway-minus-worker"), opts.get("overhead_path"))
    return Term("system stack", s, MEASURED, src + " [measured on this machine's live platform]", "stack")


def _f1_compute(app, platform, batch, sz, opts) -> Term:
    cpu_mode = opts.get("cpu_compute", MEASURED)
    if platform == "cpu" and cpu_mode == MEASURED:
        return Term(
            "compute", _cpu_s(app, "f1", batch), MEASURED, "apps.json f1 cpu_s: " + CPU_MEASURED_NOTE, "host_cpu", detail={"cores": 1}
        )
    if platform == "ns_arm":
        k = P.ARM_VS_THIS_CORE.value
        s = _cpu_s(app, "f1", batch) * k
        return Term(
            "compute", s, MODELLED, f"measured f1 cpu_s x {k:g} ({P.ARM_VS_THIS_CORE.source})", "accel", detail={"busy_s": s, "cores": 1}
        )
    elements = sz["f1_out"] / 4 * batch  # f1 writes float32 tensors
    flops = elements * P.F1_OPS_PER_ELEMENT.value
    nbytes = (sz["upload"] + sz["f1_out"]) * batch
    if platform == "dscs":
        from nearfaas.hw.dsa.timing import preprocess_timing

        cfg = P.dsa_config()
        t = preprocess_timing(cfg, int(elements), P.F1_OPS_PER_ELEMENT.value, int(sz["upload"] * batch), int(elements))
        return Term(
            "compute",
            t.seconds,
            MODELLED,
            f"hw.dsa preprocess_timing on the VPU ({cfg.vpu_lanes} lanes), {P.F1_OPS_PER_ELEMENT.value:g} ops/element [assumption]",
            "accel",
            detail={"busy_s": t.seconds, "vpu_ops": flops, "dram_bytes": sz["upload"] * batch + elements, "cycles": t.cycles},
        )
    d = P.device(platform)
    op = {"kind": "elementwise", "flops": flops, "bytes": nbytes, "dtype": "fp32" if "fp32" in d.peak_ops else d.default_dtype}
    busy = float(d.roofline(op)["busy_s"])
    comp = "host_cpu" if platform == "cpu" else "accel"
    return Term(
        "compute",
        d.latency(op),
        MODELLED,
        f"{d.name} roofline, element-wise op: {P.F1_OPS_PER_ELEMENT.value:g} ops/output element [assumption], upload + tensor bytes",
        comp,
        detail={"busy_s": busy, "cores": "all"},
    )


def _f2_compute(app, platform, batch, opts) -> Term:
    model = APPS[app].model
    if platform == "cpu" and opts.get("cpu_compute", MEASURED) == MEASURED:
        return Term(
            "compute", _cpu_s(app, "f2", batch), MEASURED, "apps.json f2 cpu_s: " + CPU_MEASURED_NOTE, "host_cpu", detail={"cores": 1}
        )
    if platform == "dscs":
        r = P.dsa_f2(model, batch=batch)
        return Term(
            "compute",
            r["latency_s"],
            MODELLED,
            f"nearfaas.hw dse.evaluate: dsa-mode timing, 128x128 / 4 MiB / DDR5 / 1 GHz / 14 nm design point, graph at batch {batch}",
            "accel",
            detail={"busy_s": r["latency_s"], "energy_j": r["energy_total_j"], "energy_dram_j": r["energy_dram_j"]},
        )
    r = P.roofline_f2(platform, model, opts.get("dtype") if platform != "cpu" else None, batch=batch)
    d = P.device(platform)
    return Term(
        "compute",
        r["seconds"],
        MODELLED,
        f"{d.name} roofline per fused layer ({r['layers']} layers, {r['flops'] / 1e9:.3g} GFLOP, {r['bytes'] / 1e6:.3g} MB at {r['dtype']}) + launch_s per layer",
        "host_cpu" if platform == "cpu" else "accel",
        detail={"busy_s": r["busy_s"], "cores": "all", "dtype": r["dtype"]},
    )


def _check(app: str, platform: str, batch: int, link: str, opts: dict) -> None:
    P.check_app(app)
    P.check_platform(platform)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}: must be a whole number >= 1")
    get_profile(link)
    known = {"cpu_compute", "stack", "overhead_path", "dtype"}
    bad = set(opts) - known
    if bad:
        raise ValueError(f"unknown option(s) {sorted(bad)}; valid options: {sorted(known)}")
    if opts.get("cpu_compute", MEASURED) not in CPU_MODES:
        raise ValueError(f"cpu_compute={opts['cpu_compute']!r}: use one of {', '.join(CPU_MODES)}")


def end_to_end(app: str, platform: str, batch: int = 1, link: str = "s3-like", **opts) -> Breakdown:
    """The modelled end-to-end latency of one request (``batch`` inputs) of ``app`` on ``platform``.

    opts: ``cpu_compute`` ("measured" | "modelled"), ``stack`` ("gateway-minus-worker" |
    "gateway"), ``overhead_path`` (another invoke_overhead.json), ``dtype`` (f2's data type on
    non-CPU roofline devices)."""
    _check(app, platform, batch, link, opts)
    ln = get_profile(link)
    sz = sizes(app)
    up, t1, t2, t3 = (sz[k] * batch for k in ("upload", "f1_out", "f2_out", "f3_out"))
    near = platform in P.NEAR_STORAGE
    accel = platform not in ("cpu",)
    pcie = P.host_link_bps(platform) is not None and not near
    where = {"cpu": "compute node CPU", "gpu": "GPU on a compute node", "fpga": "FPGA on a compute node"}.get(
        platform, "in the storage drive"
    )

    f1 = [_stack(opts)]
    f2 = [_stack(opts)]
    if near:
        f1 += [_driver(platform), _p2p("read upload (flash -> drive DRAM)", up)]
        f1.append(_f1_compute(app, platform, batch, sz, opts))
        f1.append(_p2p("write tensor (drive DRAM -> flash)", t1, write=True))
        f2 += [_driver(platform), _p2p("read tensor (flash -> drive DRAM)", t1)]
        f2.append(_f2_compute(app, platform, batch, opts))
        f2.append(_p2p("write result (drive DRAM -> flash)", t2, write=True))
    else:
        f1.append(_net(ln, "read upload (remote storage)", up, 1, input_=True))
        if pcie:
            f1 += [_driver(platform), _pcie(platform, "upload host -> device", up)]
        f1.append(_f1_compute(app, platform, batch, sz, opts))
        if pcie:
            f1.append(_pcie(platform, "tensor device -> host", t1))
        f1.append(_net(ln, "write tensor (remote storage)", t1, 1))
        f2.append(_net(ln, "read tensor (remote storage)", t1, 1))
        if pcie:
            f2 += [_driver(platform), _pcie(platform, "tensor host -> device", t1)]
        f2.append(_f2_compute(app, platform, batch, opts))
        if pcie:
            f2.append(_pcie(platform, "result device -> host", t2))
        f2.append(_net(ln, "write result (remote storage)", t2, 1))
    f3 = [
        _stack(opts),
        _net(ln, "read result (remote storage)", t2, 1),
        Term("compute", _cpu_s(app, "f3", batch), MEASURED, "apps.json f3 cpu_s: " + CPU_MEASURED_NOTE, "host_cpu", detail={"cores": 1}),
        _net(ln, "write notification record", t3, 1),
    ]
    inputs = {
        "sizes_bytes": sz,
        "link": {
            "name": ln.name,
            "first_byte_median_s": ln.first_byte_median_s,
            "first_byte_p99_s": ln.first_byte_p99_s,
            "bandwidth_bytes_per_s": ln.bandwidth_bytes_per_s,
            "source": ln.source,
        },
        "device": P.PLATFORM_DEVICES[platform],
        "placement": P.placement(platform),
        "model": APPS[app].model,
        "cpu_compute": opts.get("cpu_compute", MEASURED),
        "stack": opts.get("stack", "gateway-minus-worker"),
        "constants": {
            k: getattr(P, k).to_dict()
            for k in (
                "GEN3_X4_BPS",
                "FLASH_READ_BPS",
                "FLASH_WRITE_BPS",
                "FLASH_READ_LATENCY_S",
                "FLASH_WRITE_LATENCY_S",
                "F1_OPS_PER_ELEMENT",
                "ARM_VS_THIS_CORE",
                "RESULT_RECORD_BYTES",
            )
        },
        "accelerated": accel,
    }
    stages = [Stage("f1", where, f1), Stage("f2", where, f2), Stage("f3", "compute node CPU", f3)]
    return Breakdown(app, platform, batch, link, stages, inputs)


# ------------------------------------------------------------------ evaluation


def _summary(values: dict[str, float]) -> dict[str, float]:
    v = list(values.values())
    out = dict(values)
    out["mean"] = sum(v) / len(v)
    out["geomean"] = math.exp(sum(math.log(x) for x in v) / len(v))
    return out


def evaluate(
    apps=None, platforms=None, batch: int = 1, link: str = "s3-like", network_energy: bool = False, cost_opts: dict | None = None, **opts
) -> dict:
    """Speedup, energy reduction and cost efficiency of every platform against ``cpu``.

    Returns {"label", "speedup_vs_cpu": {platform: {app: x, "mean", "geomean"}},
    "energy_reduction_vs_cpu": (same), "cost_efficiency_vs_cpu": {platform: x},
    "cost_efficiency": {platform: record}, "breakdowns": {platform: {app: Breakdown.to_dict()}},
    "energy": {platform: {app: parts}}, "inputs": {...}}. The CPU baseline is always evaluated."""
    from . import cost, power

    apps = list(APPS) if apps is None else [P.check_app(a) for a in apps]
    platforms = list(P.PLATFORMS) if platforms is None else [P.check_platform(p) for p in platforms]
    if not apps or not platforms:
        raise ValueError("evaluate needs at least one app and one platform")
    every = list(dict.fromkeys(["cpu", *platforms]))
    bds = {p: {a: end_to_end(a, p, batch, link, **opts) for a in apps} for p in every}
    en = {p: {a: power.energy(bds[p][a], network=network_energy) for a in apps} for p in every}
    ce = {p: cost.platform_cost_efficiency(p, bds[p], en[p], **(cost_opts or {})) for p in every}
    speed = {p: _summary({a: bds["cpu"][a].total_s / bds[p][a].total_s for a in apps}) for p in platforms}
    ered = {p: _summary({a: en["cpu"][a]["total_j"] / en[p][a]["total_j"] for a in apps}) for p in platforms}
    cev = {p: ce[p]["requests_per_usd"] / ce["cpu"]["requests_per_usd"] for p in platforms}
    return {
        "label": "modelled (nearfaas twin: measured CPU stages, gateway overhead and object sizes; modelled devices, links, P2P, energy, cost)",
        "speedup_vs_cpu": speed,
        "energy_reduction_vs_cpu": ered,
        "cost_efficiency_vs_cpu": cev,
        "cost_efficiency": ce,
        "energy": en,
        "breakdowns": {p: {a: bds[p][a].to_dict() for a in apps} for p in every},
        "inputs": {
            "apps": apps,
            "platforms": platforms,
            "batch": batch,
            "link": link,
            "network_energy": network_energy,
            "options": {"cpu_compute": opts.get("cpu_compute", MEASURED), "stack": opts.get("stack", "gateway-minus-worker"), **opts},
            "cost": cost.params(**(cost_opts or {})),
            "power": power.params(),
            "profiles": str(_profiles().path),
            "overhead_file": str(opts.get("overhead_path") or OVERHEAD_FILE),
        },
    }
