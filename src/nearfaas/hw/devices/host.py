"""THIS machine's CPU as a roofline device, from micro-benchmarks run here (not from the apps).

The catalog's CPU (``catalog.xeon_8275cl``) is modelled from specs. To check that roofline form
against real measurements, this module describes the machine the twin's CPU stage times were
measured on in the SAME form (``Device``: ``busy = max(flops / (peak x eff_c[kind]),
bytes / (bw x eff_b[kind]))`` per layer, plus ``launch_s`` per layer), with every figure
measured here by a micro-benchmark that is NOT one of the applications:

* ``clock``   a dependent chain of register-register integer adds (1 cycle each) in C: cycles per
              second (not add-immediate: Intel Golden Cove and later run those at the renamer, which
              read ~6x the clock on this project's Intel host);
* ``fma``     12 independent AVX-512 (and AVX2) FMA chains in C: the FLOP/s the core reaches,
              a cross-check of the derived peak;
* ``stream``  a STREAM-style triad a = b + s*c over 3 x 64 MiB per thread in C (pthreads):
              the memory bandwidth (bytes read + written, no write-allocate, as STREAM counts);
* ``ort``     ONNX Runtime (the apps' runtime, same session options) on one-op graphs of fixed,
              generic shapes chosen before any comparison (square MatMuls, three convs, a
              depthwise conv, element-wise ops, softmax/layer-norm/reduce, transposes), giving
              each op class's fraction of peak compute and of the stream bandwidth; a chain of
              100 Add nodes gives the per-node dispatch cost, a one-node graph the per-call cost;
              a generic MatMul grid (M in 16/128/1024, K and N in 64/512/4096) gives the
              shape-aware GEMM efficiency (``gemm_efficiency``) of the validation's refined form.

Peak FLOP/s is DERIVED, not fitted: measured clock x FP32 FLOP/cycle, where FLOP/cycle =
2 (FMA) x SIMD lanes (from /proc/cpuinfo flags) x vector FMA issues per cycle at that width
(microarchitecture table below; the FMA micro-benchmark must agree to within 15 %, else the
measured FLOP/cycle, rounded to a power of two, is used and says so).

The machine is shared (other engineers' tests run on its 2 vCPUs), so compute kernels are timed
by CPU time (what the core does while it runs, immune to time slicing: C clock/FMA, median of
sustained runs; ONNX Runtime at 1 thread, median thread CPU time of the repeats, as the apps'
1-thread profile is CPU time too), and what needs the cores at once (the triad, ONNX Runtime at
> 1 thread) by the best wall time of many short repeats (interference only slows a repeat).
Results are JSON-able dicts; ``device(bench, threads)`` turns them into a ``Device`` whose specs
are ``Sourced`` with status ``ran`` (measured here by a named micro-benchmark) or ``derived``
(arithmetic on those, shown). No figure is fitted to the applications' measured times.

    bench = measure(threads=(1, 2))        # ~2-3 min; JSON-able (quick=True: seconds, for tests)
    d = device(bench, threads=1)           # nearfaas.hw.devices.Device, label "this machine (measured)"
"""

from __future__ import annotations

import json
import math
import statistics

from ..sourced import Sourced
from .host_bench import (  # noqa: F401  (re-exported: the public names live on here)
    C_SOURCE,
    GRID_KN,
    GRID_M,
    _combine,
    _dispatch,
    _gemm_grid,
    _graph,
    _numpy_stream,
    _ort_case,
    _read,
    _session,
    _suite,
    _time_run,
    _uarch,
    _ub,
    _ub_binary,
    _vi,
    cpu_facts,
    measure,
    ort_cases,
)
from .model import Device, Efficiency

LABEL = "this machine's CPU: roofline parameters measured here by micro-benchmarks (not by the applications)"

# Vector FMA instructions issued per cycle at the widest SIMD width, per microarchitecture.
# AMD Zen 4 (family 0x19, models 0x10-0x1f, 0x60-0x7f, 0xa0-0xaf): two 256-bit FMA pipes; a
# 512-bit FMA is executed in two halves, so 1 zmm FMA/cycle = 16 fp32 FMA/cycle [mem: AMD
# Software Optimization Guide for Zen 4, "double-pumped" AVX-512]. Intel server cores with two
# 512-bit FMA units (Skylake-SP/Cascade Lake Gold/Platinum, Ice Lake-SP): 2 [mem].
FMA_ISSUE = {
    ("AuthenticAMD", 0x19, "zen4"): {"zmm": 1, "ymm": 2, "source": "AMD Zen 4: 2x256-bit FMA pipes, AVX-512 double-pumped [mem]"},
    ("AuthenticAMD", 0x19, "zen3"): {"ymm": 2, "source": "AMD Zen 3: 2x256-bit FMA pipes [mem]"},
    ("AuthenticAMD", 0x17, "zen2"): {"ymm": 2, "source": "AMD Zen 2: 2x256-bit FMA pipes [mem]"},
}

# ------------------------------------------------------------------------------ the device

CLASS_KINDS = ("gemm", "conv", "dwconv", "elementwise", "reduction", "layout")


def flop_per_cycle(bench: dict) -> tuple[float, str, str]:
    """FP32 FLOP per cycle per core: (value, source, status)."""
    cpu = bench["cpu"]
    lanes = cpu["fp32_simd_lanes"]
    width = "zmm" if lanes == 16 else "ymm"
    entry = FMA_ISSUE.get((cpu["vendor"], cpu["family"], cpu["microarchitecture"]))
    t1 = bench["threads"].get("1") or next(iter(bench["threads"].values()))
    measured = None
    if t1.get("fma_flops") and t1["fma_flops"].get(width):
        measured = t1["fma_flops"][width]["value"] / t1["clock_hz"]["value"]
    if entry and width in entry:
        v = 2.0 * lanes * entry[width]
        src = (f"derived: 2 (FMA) x {lanes} fp32 lanes ({cpu['fp32_simd_lanes_source']}) x {entry[width]} {width} FMA/cycle "
               f"({entry['source']})")
        if measured is not None:
            src += f"; FMA micro-benchmark gives {measured:.1f} FLOP/cycle"
            if abs(measured / v - 1) > 0.15:
                p = 2.0 ** round(math.log2(measured))
                return p, src + f", >15 % off: using the measured value rounded to {p:g}", "ran"
        return v, src, "derived"
    if measured is not None:
        p = 2.0 ** round(math.log2(measured))
        return p, f"ran: FMA micro-benchmark {measured:.1f} FLOP/cycle rounded to a power of two (no table entry)", "ran"
    return 2.0 * lanes, f"derived: 2 x {lanes} lanes x 1 FMA/cycle (no table entry, no measurement)", "derived"


def class_efficiency(bench: dict, threads: int) -> dict[str, dict]:
    """Each op class's measured fraction of peak compute and of stream bandwidth at ``threads``:
    {class: {"compute": x, "bandwidth": y, "cases": [...], "why": str}} (median over the class's
    cases; clamped to (0, 1] as the Device needs, the raw value kept)."""
    rec = bench["threads"][str(threads)]
    peak = peak_flops(bench, threads)[0]
    bw = rec["stream_triad_bytes_s"]["value"]
    out = {}
    for kind in CLASS_KINDS:
        comp = [(c["case"], c["flops"] / c["net_s"] / peak) for c in rec["ort"] if c["class"] == kind and c["role"] == "compute"]
        band = [(c["case"], c["bytes"] / c["net_s"] / bw) for c in rec["ort"] if c["class"] == kind and c["role"] == "bandwidth"]
        raw_c = statistics.median([x for _, x in comp]) if comp else None
        raw_b = statistics.median([x for _, x in band]) if band else None
        out[kind] = {"compute_raw": raw_c, "bandwidth_raw": raw_b, "compute_cases": dict(comp), "bandwidth_cases": dict(band)}
    for e in out.values():
        c = e["compute_raw"]
        b = e["bandwidth_raw"] if e["bandwidth_raw"] is not None else 1.0
        e["compute"] = min(max(c, 1e-4), 1.0)
        e["bandwidth"] = min(max(b, 1e-4), 1.0)
        cases = ", ".join(f"{n}: {x:.3f}" for n, x in e["compute_cases"].items())
        bcases = ", ".join(f"{n}: {x:.3f}" for n, x in e["bandwidth_cases"].items())
        e["why"] = (f"ran: ONNX Runtime {threads}-thread micro-benchmarks, median fraction of peak over [{cases}]"
                    + (f"; of stream bandwidth [{bcases}]" if bcases else
                       "; bandwidth fraction 1.0 of the measured stream (dense operands stream at the triad rate)")
                    + ("; clamped to 1.0 (the measured rate exceeds the derived peak)" if c > 1.0 or (e["bandwidth_raw"] or 0) > 1.0 else ""))
    return out


def gemm_efficiency(bench: dict, threads: int, m: int, k: int, n: int) -> tuple[float, str]:
    """Fraction of peak of an (M x K) . (K x N) GEMM at ``threads``: trilinear interpolation in
    log2(M), log2(K), log2(N) of the measured MatMul grid, clamped to its range and to (0, 1]."""
    rec = bench["threads"][str(threads)]
    grid = rec.get("gemm_grid") or []
    if not grid:
        e = class_efficiency(bench, threads)["gemm"]["compute"]
        return e, "no grid measured: the gemm class's efficiency"
    peak = peak_flops(bench, threads)[0]
    table = {(g["M"], g["K"], g["N"]): g["flops"] / g["net_s"] / peak for g in grid}
    axes = [sorted({key[i] for key in table}) for i in range(3)]

    def bracket(axis, v):
        lv = math.log2(max(v, 1))
        if lv <= math.log2(axis[0]):
            return axis[0], axis[0], 0.0
        if lv >= math.log2(axis[-1]):
            return axis[-1], axis[-1], 0.0
        for lo, hi in zip(axis, axis[1:], strict=False):
            if math.log2(lo) <= lv <= math.log2(hi):
                return lo, hi, (lv - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return axis[-1], axis[-1], 0.0

    (m0, m1, fm), (k0, k1, fk), (n0, n1, fn) = bracket(axes[0], m), bracket(axes[1], k), bracket(axes[2], n)
    e = 0.0
    for mi, wm in ((m0, 1 - fm), (m1, fm)):
        for ki, wk in ((k0, 1 - fk), (k1, fk)):
            for ni, wn in ((n0, 1 - fn), (n1, fn)):
                e += wm * wk * wn * table[(mi, ki, ni)]
    return min(max(e, 1e-4), 1.0), "ran: ONNX Runtime MatMul grid, trilinear in log2 M, K, N"


def peak_flops(bench: dict, threads: int) -> tuple[float, str]:
    rec = bench["threads"][str(threads)]
    fpc, src, _ = flop_per_cycle(bench)
    clk = rec["clock_hz"]["value"]
    return threads * fpc * clk, (f"derived: {threads} core(s) x {fpc:g} FP32 FLOP/cycle x measured clock {clk / 1e9:.3f} GHz "
                                 f"(add-chain micro-benchmark, {threads} thread(s)); FLOP/cycle {src}")


def device(bench: dict, threads: int = 1) -> Device:
    """This machine at ``threads`` ONNX Runtime intra-op threads as a roofline ``Device``. The
    depthwise-conv class is not one of the Device's op kinds; ``class_efficiency`` carries it
    for the refined form in ``nearfaas.twin.validate``."""
    rec = bench["threads"][str(threads)]
    peak, peak_src = peak_flops(bench, threads)
    eff = class_efficiency(bench, threads)
    bw = rec["stream_triad_bytes_s"]["value"]
    disp = rec["dispatch"]
    rnd = f"; median over {bench.get('rounds', 1)} round(s)"
    efficiency = {k: Efficiency(eff[k]["compute"], eff[k]["bandwidth"], eff[k]["why"] + rnd)
                  for k in ("gemm", "conv", "elementwise", "reduction", "layout")}
    efficiency["other"] = Efficiency(eff["elementwise"]["compute"], eff["elementwise"]["bandwidth"],
                                     "derived: the element-wise class's measured efficiencies (catch-all)")
    cpu = bench["cpu"]
    return Device(
        name=f"host-{threads}t",
        label=f"this machine ({cpu['model_name']}), {threads} ONNX Runtime thread(s): measured",
        kind="cpu",
        placement="traditional",
        default_dtype="fp32",
        specs={
            "units": Sourced(threads, f"ran: ONNX Runtime intra_op_num_threads={threads} of {cpu['logical_cpus']} vCPUs "
                             f"(lscpu: {cpu['threads_per_core']} thread(s) per core)", "ran"),
            "clock_hz": Sourced(rec["clock_hz"]["value"], f"ran: dependent integer-add chain in C, {threads} thread(s), cycles per "
                                f"CPU-second, median of {rec['clock_hz']['runs']} sustained runs{rnd} (nominal /proc/cpuinfo {cpu['nominal_mhz']:.0f} MHz)", "ran"),
            "node_nm": Sourced(None, "not applicable: validation device, no technology scaling", "derived"),
            "peak_ops": Sourced({"fp32": peak}, peak_src, "derived"),
            "mem_bw_bytes_s": Sourced(bw, f"ran: STREAM-style triad in C, 3 x 64 MiB per thread, {threads} thread(s), "
                                      f"best wall span of {rec['stream_triad_bytes_s']['runs']} one-pass repeats{rnd}", "ran"),
            "tdp_w": Sourced(None, "not applicable: energy is not validated here", "derived"),
            "idle_w": Sourced(None, "not applicable: energy is not validated here", "derived"),
            "host_link": Sourced({"kind": "none"}, "not applicable", "derived"),
            "price_usd": Sourced(None, "not applicable", "derived"),
        },
        efficiency=efficiency,
        launch_s=Sourced(disp["per_node_s"], f"ran: ONNX Runtime per-node dispatch, ({disp['chain_nodes']}-Add chain - 1 Add) / "
                         f"{disp['chain_nodes'] - 1}, 16-element tensors, {threads} thread(s){rnd}", "ran"),
        driver_s=Sourced(disp["per_call_s"], f"ran: one call of a 1-node graph through nearfaas.models.InferenceSession.run "
                         f"(feed checks + session.run), {threads} thread(s), minus one node's dispatch{rnd}", "ran"),
        active_power_fraction=Sourced(1.0, "not applicable: energy is not validated here", "derived"),
    )


if __name__ == "__main__":  # pragma: no cover - a manual run prints the measured record
    import sys

    b = measure(quick="--quick" in sys.argv, progress=lambda m: print(m, file=sys.stderr))
    print(json.dumps(b, indent=1))
    for t in b["threads"]:
        print(json.dumps(device(b, int(t)).describe(), indent=1))
