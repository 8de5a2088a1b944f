"""End-to-end model of the eight applications on the seven Table 2 platforms (DSCS §6.1).

``end_to_end(app, platform, batch=1, link="s3-like", baseline="paper", **opts) -> Breakdown``:
stages f1 → f2 → f3, each a list of terms ``{value_s, label, source}`` whose sum is the stage
time; the stages sum to the total. ``evaluate(apps, platforms, baseline="paper", **opts)``:
speedup, energy reduction and cost efficiency against the CPU baseline, every input recorded.

Two modes (``platforms.MODES``; single choices may be overridden, ``platforms.OPTIONS``):

* ``paper`` (default) follows DSCS §6.1 / Table 2 (docs/methodology.md): the CPU baseline is the
  Xeon 8275CL roofline; each request's latency is the p95 of 10,000 simulated sequential
  requests whose tailed terms (the link's first byte, the system stack) are sampled, seeded,
  and the p95 picked by hey's rule; the DSA runs at its Table 2 configuration with the
  SmartSSD's DDR4; the FPGAs run the DSA design at their Table 2 size; the near-storage
  platforms are DSCS's path with the compute term swapped; measured terms use wall seconds.
* ``measured-here`` keeps the twin's earlier view: CPU f1/f2 MEASURED on this 2-core AMD EPYC
  VM (1 ONNX Runtime thread, cpu_s), mean latencies, the DSA with DDR5, FPGA rooflines.

Where each stage runs (DSCS §6.1): f1 and f2 on the platform's compute unit, f3 on a compute
node's CPU (its MEASURED seconds, every platform). Data movement: traditional platforms read and
write every object over the link (``link.profiles``, s3-like by default), plus host↔device PCIe
copies for GPU/FPGA; near-storage platforms move f1/f2 data flash ↔ drive DRAM over P2P and only
f2's result crosses the link to f3. The system-stack overhead per stage is OpenFaaS on Kubernetes
in paper mode (``twin/stack.py``: four stages, sourced ranges, MODELLED) and MEASURED here in
measured-here mode (``benchmarks/results/invoke_overhead.json``; ``stack="measured-here"`` puts
this machine's whole warm call through our gateway in paper mode instead).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path

import numpy as np

from nearfaas.apps.catalog import APPS
from nearfaas.link.profiles import get_profile

from . import platforms as P
from . import stack as paper_stack
from nearfaas.stats import geomean

MEASURED = "measured"
MODELLED = "modelled"
CPU_MEASURED_NOTE = "measured on this machine, not a Xeon 8275CL (2-core AMD EPYC VM, 1 ONNX Runtime thread)"
OVERHEAD_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "invoke_overhead.json"
PAPER_STACK = "openfaas-k8s"  # modelled (twin/stack.py); the others are measured here
STACK_MODES = ("gateway-minus-worker", "measured-here")
CPU_MODES = (MEASURED, MODELLED)
PAPER, MEASURED_HERE, BASELINES = P.PAPER, P.MEASURED_HERE, P.BASELINES
P95_REQUESTS = 10_000  # DSCS §6.1: "10,000 sequential requests using hey"
PERCENTILE = 95  # DSCS §6.1: "95th percentile latency for all our analyses"
HEY_RULE = "hey (rakyll/hey requester/report.go latencies()): sorted[i] at the first i with i*100//n >= 95"
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile
OTHER_OPTIONS = {"overhead_path", "dtype", "requests", "request_seed"}
FPGAS = ("fpga", "ns_fpga")


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

    @property
    def options(self) -> dict:
        return self.inputs.get("options") or P.resolve(MEASURED_HERE)

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
            "mode": self.inputs.get("baseline"),
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
    """The app's measured entry, read-only: the twin reads it thousands of times per report, so
    this is the loaded entry itself, not a copy (Profiles.for_app's deepcopy dominated)."""
    entry = _profiles().entry(app)
    if not entry:
        raise ValueError(f"app {app!r}: no measured profile in {_profiles().path}; run benchmarks/apps.py")
    return entry


@cache
def _overhead(path: str | None) -> tuple[dict, str, Path]:
    p = Path(path) if path else OVERHEAD_FILE
    warm = json.loads(p.read_text())["warm"]
    # The default (secured) configuration since issue 12; files from before it name no configuration.
    return warm, ("secured/" if "secured/gateway@1" in warm else ""), p


@cache
def stack_overhead(mode: str = "gateway-minus-worker", path: str | None = None) -> tuple[float, str]:
    """Seconds of system-stack overhead per stage invocation, measured on the live platform."""
    if mode not in STACK_MODES:
        raise ValueError(f"stack={mode!r}: use one of {', '.join(STACK_MODES)}")
    warm, config, p = _overhead(path)
    g, w = warm[f"{config}gateway@1"]["p50_ms"], warm[f"{config}worker@1"]["p50_ms"]
    if mode == "measured-here":
        return g / 1e3, f"{p.name}: warm {config}gateway@1 p50 {g} ms (no-op call through gateway and worker)"
    return (g - w) / 1e3, f"{p.name}: warm {config}gateway@1 p50 {g} ms - {config}worker@1 p50 {w} ms (the gateway's own overhead)"


def stack_sigma(path: str | None = None) -> tuple[float, str]:
    """Lognormal shape of the stack overhead: from the measured warm gateway@1 p50 and p99."""
    warm, config, p = _overhead(path)
    g = warm[f"{config}gateway@1"]
    return math.log(g["p99_ms"] / g["p50_ms"]) / _Z99, f"{p.name}: {config}gateway@1 p99/p50 = {g['p99_ms']}/{g['p50_ms']} ms"


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


def _cpu_s(app: str, stage: str, batch: int, clock: str = "cpu") -> float:
    """Measured seconds of one call of ``stage`` on ``batch`` inputs: CPU time (``clock="cpu"``,
    ``Profiles.compute_s``) or wall time (the same batch-1 / batch-8 line over ``wall_s``)."""
    fn = profile(app)["functions"][("f1", "f2", "f3").index(stage)]
    if clock == "cpu":
        return float(_profiles().compute_s(fn, batch=batch))
    st = profile(app)["stages"][stage]
    one = float(st["batch1"]["wall_s"])
    eight = ((st.get("batch8") or {}).get("total") or {}).get("wall_s")
    if batch == 1:
        return one
    if eight is None:
        return one * batch
    return float(eight) if batch == 8 else max(0.0, one + (float(eight) - one) * (batch - 1) / 7)


def _measured(app, stage, batch, o, component="host_cpu", k=1.0, why="") -> Term:
    clock = o["measured_clock"]
    s = _cpu_s(app, stage, batch, clock) * k
    label, src = MEASURED, f"apps.json {stage} {clock}_s: {CPU_MEASURED_NOTE}"
    if k != 1.0:
        label, src = MODELLED, f"measured {stage} {clock}_s x {k:g} ({why})"
    return Term("compute", s, label, src, component, detail={"busy_s": s, "cores": 1})


# ------------------------------------------------------------------ the model


def _net(link, name, nbytes, requests, input_=False) -> Term:
    detail = {"input": input_}
    if requests == 1 and link.sigma > 0:
        detail["tail"] = {"median_s": link.first_byte_median_s, "sigma": link.sigma, "fixed_s": nbytes / link.bandwidth_bytes_per_s,
                          "source": f"link {link.name} first byte lognormal (median {link.first_byte_median_s * 1e3:g} ms, "
                                    f"p99 {link.first_byte_p99_s * 1e3:g} ms)"}
    return Term(
        name,
        link.expected_transfer_s(int(nbytes), requests),
        MODELLED,
        f"link {link.name}: {requests} x expected first byte + bytes / {link.bandwidth_bytes_per_s:.3g} B/s ({link.source})",
        "network",
        nbytes,
        detail,
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


def _driver(platform, o=None) -> Term:
    if o and o["ns_driver"] == "dsa" and platform in P.NEAR_STORAGE:
        d = P.device("dscs")  # NS = DSCS's path with only the compute swapped (DSCS §6.1)
        return Term("driver", float(d.driver_s.value), MODELLED, f"DSCS path: {d.name} driver_s ({d.driver_s.source})", "driver")
    d = P.device(platform)
    return Term("driver", float(d.driver_s.value), MODELLED, f"{d.name} driver_s ({d.driver_s.source})", "driver")


def _stack(opts) -> Term:
    mode = opts.get("stack", "gateway-minus-worker")
    if mode == PAPER_STACK:  # OpenFaaS on Kubernetes: sourced ranges, read at every call (the uncertainty study swaps them)
        s, src = paper_stack.overhead()
        shape = paper_stack.tail()
        tail = {"median_s": s, "sigma": shape["sigma"], "fixed_s": 0.0, "source": shape["source"]}
        return Term("system stack", s, MODELLED, src, "stack", detail={"tail": tail})
    s, src = stack_overhead(mode, opts.get("overhead_path"))
    sigma, why = stack_sigma(opts.get("overhead_path"))
    tail = {"median_s": s, "sigma": sigma, "fixed_s": 0.0, "source": f"lognormal around the p50, shape from {why} [measured]"}
    return Term("system stack", s, MEASURED, src + " [measured on this machine's live platform]", "stack", detail={"tail": tail})


def _dsa_like(platform, o):
    """The hw.dsa configuration a platform's compute runs on, or None (roofline devices)."""
    if platform == "dscs":
        return P.dsa_config(o["dsa_dram"])
    if platform in FPGAS and o["fpga"] == "dsa":
        return P.fpga_dsa_config(platform)
    return None


def _f1_compute(app, platform, batch, sz, o) -> Term:
    if platform == "cpu" and o["cpu_compute"] == MEASURED:
        return _measured(app, "f1", batch, o)
    if platform == "ns_arm" and o["arm_f1"] == "measured-x3":
        return _measured(app, "f1", batch, o, "accel", P.ARM_VS_THIS_CORE.value, P.ARM_VS_THIS_CORE.source)
    elements = sz["f1_out"] / 4 * batch  # f1 writes float32 tensors
    k = P.F1_OPS_PER_ELEMENT.value
    cfg = _dsa_like(platform, o)
    if cfg is not None:
        from nearfaas.hw.dsa.timing import preprocess_timing

        t = preprocess_timing(cfg, int(elements), k, int(sz["upload"] * batch), int(elements))
        detail = {"busy_s": t.seconds, "vpu_ops": elements * k, "dram_bytes": sz["upload"] * batch + elements, "cycles": t.cycles}
        return Term("compute", t.seconds, MODELLED, f"hw.dsa preprocess_timing on the VPU ({cfg.source}, {cfg.vpu_lanes} lanes), "
                    f"{k:g} ops/element [assumption]", "accel", detail=detail)
    d = P.device(platform)
    op = {"kind": "elementwise", "flops": elements * k, "bytes": (sz["upload"] + sz["f1_out"]) * batch,
          "dtype": "fp32" if "fp32" in d.peak_ops else d.default_dtype}
    return Term(
        "compute",
        d.latency(op),
        MODELLED,
        f"{d.name} roofline, element-wise op: {k:g} ops/output element [assumption], upload + tensor bytes",
        "host_cpu" if platform == "cpu" else "accel",
        detail={"busy_s": float(d.roofline(op)["busy_s"]), "cores": "all"},
    )


def _f2_compute(app, platform, batch, o) -> Term:
    model = APPS[app].model
    if platform == "cpu" and o["cpu_compute"] == MEASURED:
        return _measured(app, "f2", batch, o)
    cfg = _dsa_like(platform, o)
    if platform == "dscs":
        r = P.dsa_f2(model, cfg, batch=batch)
        detail = {"busy_s": r["latency_s"], "energy_j": r["energy_total_j"], "energy_dram_j": r["energy_dram_j"]}
        return Term("compute", r["latency_s"], MODELLED, f"nearfaas.hw dse.evaluate: dsa-mode timing, {cfg.source}, graph at batch {batch}",
                    "accel", detail=detail)
    if cfg is not None:
        r = P.fpga_dsa_f2(platform, model, batch)
        return Term("compute", r["latency_s"], MODELLED, f"nearfaas.hw dse.evaluate: the DSA design on the FPGA ({cfg.source}), "
                    f"graph at batch {batch}", "accel", detail={"busy_s": r["latency_s"]})
    d = P.device(platform)
    dt, fit = (o.get("dtype") if platform != "cpu" else None) or d.default_dtype, ""
    if o["memory_fit"] == "fit":
        dt, fit = P.fit_dtype(platform, float(profile(app)["params"]), dt)
        fit = f"; {fit}"
    r = P.roofline_f2(platform, model, dt, batch=batch)
    residual = P.CPU_ROOFLINE_RESIDUAL.value if platform == "cpu" else 1.0  # the validation's band, swept
    return Term(
        "compute",
        r["seconds"] * residual,
        MODELLED,
        f"{d.name} roofline per fused layer ({r['layers']} layers, {r['flops'] / 1e9:.3g} GFLOP, {r['bytes'] / 1e6:.3g} MB at {r['dtype']}) "
        f"+ launch_s per layer{fit}",
        "host_cpu" if platform == "cpu" else "accel",
        detail={"busy_s": r["busy_s"], "cores": "all", "dtype": r["dtype"]},
    )


def _check(app: str, platform: str, batch: int, link: str, baseline: str, opts: dict) -> dict:
    P.check_app(app)
    P.check_platform(platform)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}: must be a whole number >= 1")
    get_profile(link)
    bad = set(opts) - set(P.OPTIONS) - OTHER_OPTIONS
    if bad:
        raise ValueError(f"unknown option(s) {sorted(bad)}; valid options: {sorted(set(P.OPTIONS) | OTHER_OPTIONS)}")
    if opts.get("cpu_compute", MEASURED) not in CPU_MODES:
        raise ValueError(f"cpu_compute={opts['cpu_compute']!r}: use one of {', '.join(CPU_MODES)}")
    n = opts.get("requests", P95_REQUESTS)
    if isinstance(n, bool) or not isinstance(n, int) or n < 20:
        raise ValueError(f"requests={n!r}: give a whole number of at least 20 simulated requests")
    return P.resolve(baseline, **{k: v for k, v in opts.items() if k in P.OPTIONS}) | {k: v for k, v in opts.items() if k in OTHER_OPTIONS}


def _near_stages(app, platform, batch, sz, o) -> tuple[list[Term], list[Term]]:
    up, t1, t2 = (sz[k] * batch for k in ("upload", "f1_out", "f2_out"))
    f1 = [_stack(o), _driver(platform, o), _p2p("read upload (flash -> drive DRAM)", up), _f1_compute(app, platform, batch, sz, o),
          _p2p("write tensor (drive DRAM -> flash)", t1, write=True)]
    f2 = [_stack(o), _driver(platform, o), _p2p("read tensor (flash -> drive DRAM)", t1), _f2_compute(app, platform, batch, o),
          _p2p("write result (drive DRAM -> flash)", t2, write=True)]
    return f1, f2


def _traditional_stages(app, platform, batch, sz, o, ln) -> tuple[list[Term], list[Term]]:
    up, t1, t2 = (sz[k] * batch for k in ("upload", "f1_out", "f2_out"))
    pcie = P.host_link_bps(platform) is not None
    f1 = [_stack(o), _net(ln, "read upload (remote storage)", up, 1, input_=True)]
    if pcie:
        f1 += [_driver(platform), _pcie(platform, "upload host -> device", up)]
    f1.append(_f1_compute(app, platform, batch, sz, o))
    if pcie:
        f1.append(_pcie(platform, "tensor device -> host", t1))
    f1.append(_net(ln, "write tensor (remote storage)", t1, 1))
    f2 = [_stack(o), _net(ln, "read tensor (remote storage)", t1, 1)]
    if pcie:
        f2 += [_driver(platform), _pcie(platform, "tensor host -> device", t1)]
    f2.append(_f2_compute(app, platform, batch, o))
    if pcie:
        f2.append(_pcie(platform, "result device -> host", t2))
    f2.append(_net(ln, "write result (remote storage)", t2, 1))
    return f1, f2


def _inputs(app, platform, sz, ln, baseline, o) -> dict:
    constants = ("GEN3_X4_BPS", "FLASH_READ_BPS", "FLASH_WRITE_BPS", "FLASH_READ_LATENCY_S", "FLASH_WRITE_LATENCY_S",
                 "F1_OPS_PER_ELEMENT", "ARM_VS_THIS_CORE", "RESULT_RECORD_BYTES")
    return {
        "baseline": baseline,
        "options": o,
        "sizes_bytes": sz,
        "link": {"name": ln.name, "first_byte_median_s": ln.first_byte_median_s, "first_byte_p99_s": ln.first_byte_p99_s,
                 "bandwidth_bytes_per_s": ln.bandwidth_bytes_per_s, "source": ln.source},
        "device": P.PLATFORM_DEVICES[platform],
        "placement": P.placement(platform),
        "model": APPS[app].model,
        "cpu_compute": o["cpu_compute"],
        "stack": o["stack"],
        "constants": {k: getattr(P, k).to_dict() for k in constants},
        "accelerated": platform != "cpu",
    }


def end_to_end(app: str, platform: str, batch: int = 1, link: str = "s3-like", baseline: str = PAPER, **opts) -> Breakdown:
    """The modelled end-to-end latency of one request (``batch`` inputs) of ``app`` on ``platform``.

    ``baseline``: "paper" (default) or "measured-here" (module doc). opts: any choice of
    ``platforms.OPTIONS`` (e.g. ``latency="mean"``, ``cpu_compute="measured"``), ``overhead_path``
    (another invoke_overhead.json), ``dtype`` (f2's data type on roofline devices), ``requests``
    and ``request_seed`` (the p95's simulated requests, default 10,000 and 1)."""
    o = _check(app, platform, batch, link, baseline, opts)
    ln = P.link(link)
    sz = sizes(app)
    near = platform in P.NEAR_STORAGE
    where = {"cpu": "compute node CPU", "gpu": "GPU on a compute node", "fpga": "FPGA on a compute node"}.get(platform, "in the storage drive")
    f1, f2 = _near_stages(app, platform, batch, sz, o) if near else _traditional_stages(app, platform, batch, sz, o, ln)
    f3 = [
        _stack(o),
        _net(ln, "read result (remote storage)", sz["f2_out"] * batch, 1),
        _measured(app, "f3", batch, o),
        _net(ln, "write notification record", sz["f3_out"] * batch, 1),
    ]
    stages = [Stage("f1", where, f1), Stage("f2", where, f2), Stage("f3", "compute node CPU", f3)]
    bd = Breakdown(app, platform, batch, link, stages, _inputs(app, platform, sz, ln, baseline, o))
    if o["latency"] == "p95":
        return at_percentile(bd, PERCENTILE, o.get("requests", P95_REQUESTS), o.get("request_seed", 1))
    bd.inputs["latency"] = {"statistic": "mean", "note": "each term at its expected value (the stack at its measured p50)"}
    return bd


def hey_index(n: int, pct: float = PERCENTILE) -> int:
    """The index hey reports as the ``pct``-th percentile of ``n`` sorted latencies."""
    return min(n - 1, math.ceil(pct * n / 100))


def at_percentile(bd: Breakdown, pct: float = PERCENTILE, requests: int = P95_REQUESTS, seed: int = 1) -> Breakdown:
    """``bd`` (terms at their expected values) as its ``pct``-th percentile request: ``requests``
    sequential requests are simulated, each drawing every tailed term (``detail["tail"]``: the
    link's first byte, the system stack) from its lognormal, the others fixed; the request hey
    would report as the percentile is returned, term by term (so the terms still sum to it).
    The draws depend on (seed, app, batch) only: platforms sharing a path share its draws."""
    tailed = [(i, t) for i, t in enumerate(bd.terms) if t.detail.get("tail")]
    fixed = sum(t.value_s for t in bd.terms if not t.detail.get("tail"))
    tails = tuple(tuple(sorted(t.detail["tail"].items())) for _, t in tailed)
    vals, r, stats = _request_at(list(APPS).index(bd.app), bd.batch, seed, requests, pct, tails, fixed)
    # A copy of what changes below (the terms, their details, the inputs); the rest is shared. A
    # deepcopy of the whole breakdown was a third of `twin report`'s time.
    out = replace(bd, inputs=dict(bd.inputs),
                  stages=[replace(st, terms=[replace(t, detail=dict(t.detail)) for t in st.terms]) for st in bd.stages])
    terms = out.terms
    for j, (i, _) in enumerate(tailed):
        terms[i].detail["mean_s"] = terms[i].value_s
        terms[i].value_s = float(vals[r, j])
        terms[i].source += f"; sampled: the p{pct:g} request of {requests:,}"
    if pct == PERCENTILE and "options" in out.inputs:
        out.inputs["options"] = {**out.inputs["options"], "latency": "p95"}
    out.inputs["latency"] = {"statistic": f"p{pct:g}", "requests": requests, "seed": seed, "rule": HEY_RULE, **stats,
                             "tailed_terms": [t.name for _, t in tailed]}
    return out


@lru_cache(maxsize=256)
def _tail_draws(app_index: int, batch: int, seed: int, requests: int, tails: tuple) -> np.ndarray:
    """Every request's draw of each tailed term: (requests x terms). A pure function of its
    arguments, cached because an uncertainty study evaluates the same path with the same tails
    many times (one `twin report --quick`: 9,352 percentile requests, 1,248 distinct draws)."""
    rng = np.random.default_rng([seed, app_index, batch])
    z = rng.standard_normal((requests, len(tails)))
    vals = np.empty_like(z)
    for j, tail in enumerate(tails):
        tl = dict(tail)
        vals[:, j] = tl["fixed_s"] + tl["median_s"] * np.exp(tl["sigma"] * z[:, j])
    vals.setflags(write=False)
    return vals


@lru_cache(maxsize=4096)
def _request_at(app_index: int, batch: int, seed: int, requests: int, pct: float, tails: tuple, fixed: float):
    """The draws, the index of the request hey reports as the ``pct``-th percentile, and the
    latency statistics of the ``requests`` simulated requests (cached: see _tail_draws)."""
    vals = _tail_draws(app_index, batch, seed, requests, tails)
    totals = fixed + vals.sum(axis=1)
    order = np.argsort(totals, kind="stable")
    srt = totals[order]
    stats = {"mean_s": float(totals.mean()), "p50_s": float(srt[hey_index(requests, 50)]),
             f"p{pct:g}_s": float(srt[hey_index(requests, pct)]), "p99_s": float(srt[hey_index(requests, 99)])}
    return vals, int(order[hey_index(requests, pct)]), stats


# ------------------------------------------------------------------ evaluation


def _summary(values: dict[str, float]) -> dict[str, float]:
    v = list(values.values())
    out = dict(values)
    out["mean"] = sum(v) / len(v)
    out["geomean"] = geomean(v)
    return out


def evaluate(
    apps=None, platforms=None, batch: int = 1, link: str = "s3-like", network_energy: bool = False, cost_opts: dict | None = None,
    baseline: str = PAPER, **opts
) -> dict:
    """Speedup, energy reduction and cost efficiency of every platform against ``cpu``.

    Returns {"mode", "label", "speedup_vs_cpu": {platform: {app: x, "mean", "geomean"}},
    "energy_reduction_vs_cpu": (same), "cost_efficiency_vs_cpu": {platform: x},
    "cost_efficiency_vs_cpu_per_app": (as speedup), "cost_efficiency": {platform: record},
    "breakdowns": {platform: {app: Breakdown.to_dict()}}, "energy": {platform: {app: parts}},
    "inputs": {...}}. The CPU baseline is always evaluated."""
    from . import cost, power

    apps = list(APPS) if apps is None else [P.check_app(a) for a in apps]
    platforms = list(P.PLATFORMS) if platforms is None else [P.check_platform(p) for p in platforms]
    if not apps or not platforms:
        raise ValueError("evaluate needs at least one app and one platform")
    every = list(dict.fromkeys(["cpu", *platforms]))
    bds = {p: {a: end_to_end(a, p, batch, link, baseline, **opts) for a in apps} for p in every}
    en = {p: {a: power.energy(bds[p][a], network=network_energy) for a in apps} for p in every}
    ce = {p: cost.platform_cost_efficiency(p, bds[p], en[p], **(cost_opts or {})) for p in every}
    speed = {p: _summary({a: bds["cpu"][a].total_s / bds[p][a].total_s for a in apps}) for p in platforms}
    ered = {p: _summary({a: en["cpu"][a]["total_j"] / en[p][a]["total_j"] for a in apps}) for p in platforms}
    cev = {p: ce[p]["requests_per_usd"] / ce["cpu"]["requests_per_usd"] for p in platforms}
    ce_app = {p: _summary({a: ce[p]["per_app"][a]["requests_per_usd"] / ce["cpu"]["per_app"][a]["requests_per_usd"] for a in apps})
              for p in platforms}
    o = bds["cpu"][apps[0]].options
    return {
        "mode": baseline,
        "label": f"modelled (nearfaas twin, {P.MODE_LABELS[baseline]})",
        "speedup_vs_cpu": speed,
        "energy_reduction_vs_cpu": ered,
        "cost_efficiency_vs_cpu": cev,
        "cost_efficiency_vs_cpu_per_app": ce_app,
        "cost_efficiency": ce,
        "energy": en,
        "breakdowns": {p: {a: bds[p][a].to_dict() for a in apps} for p in every},
        "inputs": {
            "mode": baseline,
            "apps": apps,
            "platforms": platforms,
            "batch": batch,
            "link": link,
            "network_energy": network_energy,
            "options": o,
            "option_reasons": {k: v[1] for k, v in P.OPTIONS.items()},
            "cost": cost.params(**(cost_opts or {})),
            "power": power.params(),
            "profiles": str(_profiles().path),
            "overhead_file": str(opts.get("overhead_path") or OVERHEAD_FILE),
        },
    }
