"""Validation of the twin's CPU roofline against real measurements on THIS machine (issue 15, item 3).

The twin's modelled CPU baseline (``cpu-xeon-8275cl``, ``twin.platforms.roofline_f2``) times f2
(ONNX inference) layer by layer: ``busy = max(flops / (peak x eff_c[kind]), bytes / (bw x
eff_b[kind]))`` over the DSA compiler's fusion groups (``platforms.layers``: FLOPs and operand
bytes from the ONNX graphs), plus ``launch_s`` per layer. There is no Xeon here, so the FORM is
checked on the machine the stage times were measured on: ``nearfaas.hw.devices.host`` describes
this CPU in the same form with every parameter from micro-benchmarks that are not the apps
(clock, FMA, STREAM triad, one-op ONNX Runtime graphs; see that module). Nothing is fitted to the
app times being predicted.

Compared, per app, at batch 1:

* ``predicted`` = the roofline's f2 on the host device: sum over layers of busy + ``launch_s``,
  plus the device's ``driver_s`` once (the measured per-call cost of ``InferenceSession.run``).
* ``measured``  = the time inside ONNX Runtime of f2. At 1 thread it is the HOT LOOP
  (``validate_apps.measure_apps_hot``: the app's own f2 code path on its seed-0 f1 output, median
  thread CPU time of the repeats), the same wrapper and estimator as the held-out networks; the
  one-off figures are reported beside it (apps.json's ``stages.f2.batch1.model_wall_s``, measured on
  the machine apps.json names, and the same one-off machinery re-measured here:
  ``vs_remeasured_now``). One-off minus hot is the one-off call cost (cold caches after the
  handler's work), which a roofline of the network does not model. At other thread counts: measured
  here with ``apps.profiles.LocalApp`` (``intra_op_num_threads`` = threads), the BEST repeat (a
  multi-thread run needs both vCPUs of this shared machine at once: an upper bound of the
  uncontended time).
* ``error`` = predicted / measured - 1. ``geomean_abs_error`` = exp(mean(ln |error|)) over the
  apps (the geometric mean of the absolute relative errors); the arithmetic mean of |error| and the
  geometric-mean ratio error exp(mean |ln(predicted/measured)|) - 1 are given too.
* The whole f2 STAGE (handler included: tensor decode, summary, output write) is compared as well
  (``per_app_error_stage``): the roofline does not model that Python glue, which matters only for
  credit_risk (a 201-parameter model whose stage is ~6x its inference).
* f1: the twin's modelled-CPU f1 (an element-wise roofline op of F1_OPS_PER_ELEMENT [assumption]
  per output element over upload + tensor bytes) is evaluated on the host device vs apps.json's
  measured f1, at 1 thread (f1 is single-threaded Python/Pillow code). f3 is not modelled by the
  twin on any platform (measured f3 is used everywhere), so it is not validated.

Four forms are reported (``nearfaas.twin.cpu_model``). ``catalog``: exactly the Xeon's form (op kinds of ``platforms.layers``,
one efficiency per kind). ``refined``: the same roofline with three changes of FORM, each
parameter still from a micro-benchmark: GEMMs and convolutions (lowered to GEMMs, im2col) take the
efficiency of their own (M, K, N) from a fixed generic MatMul grid (``host.gemm_efficiency``);
depthwise/grouped convolutions get their own class (the depthwise micro-benchmark); and the
element-wise ops fused into a conv/GEMM group (activations) are charged at the element-wise
class's rate, not the GEMM's. ``runtime``: ``refined`` plus what ONNX Runtime runs that the
graph does not show, read from ORT's own optimised graph: one dispatch per node ORT runs and each
NCHWc layout reorder at a measured per-element rate (one-op ReorderInput/ReorderOutput graphs).
``runtime2`` (``nearfaas.twin.cpu_kernels``): ``runtime`` with kernel micro-benchmarks for what the
first held-out check named as missing: GEMV (M < 16) weight streaming, small batched
activation MatMuls, Softmax/LayerNorm/Transpose at small sizes, convs and depthwise convs inside
NCHWc chains (reorders cancel instead of being subtracted), the interior reorder rate.
``form`` (default ``catalog``, the form the Xeon baseline uses) heads the result and gives the
band; the others are reported beside it.

Held-out checks: ``refined`` was designed after seeing the eight apps, so they cannot test it.
``nearfaas.twin.heldout`` builds eleven other networks in code (MLPs, CNNs, MobileNet-like, a
ResNet block stack, transformer encoders), measured here (hot loop, thread CPU time at 1 thread)
and predicted through the same compiler layers: ``held_out_*``. ``runtime2`` was planned after
those eleven had been looked at, so they are now the "seen" set; ``nearfaas.twin.heldout_fresh``
fixes twelve more (other sizes), defined before they were measured: ``held_out_fresh_*``.
``goal_held_out`` (<= 10 % geomean on the apps and on the fresh set, no app or fresh network worse
than 25 %, at 1 thread) is judged per form on the apps and the FRESH set (``judged_on``);
``pass_with_seen_set`` adds the seen set.

The band: measured/predicted over the apps (every validated thread count), as a multiplicative
range ``[lo, hi]``. Use: a modelled-Xeon f2 time ``t`` is reported as ``[t x lo, t x hi]`` (the
spread of the roofline's residual on real hardware; it assumes the Xeon's residual is like this
machine's, which is the only evidence there is). ``band_compute_bound`` leaves out the apps the
prediction itself says are overhead-bound (busy < 10x the fixed per-call + per-layer cost).

    from nearfaas.twin.validate import validate
    r = validate()                       # cached measurements; measures what is missing
    r["cpu"]["per_app_error"], r["cpu"]["geomean_abs_error"], r["cpu"]["band"]
    validate(measure=False)              # cache only (~1 s); ValueError if it lacks something

    python -m nearfaas.twin.validate [--json] [--refresh] [--no-measure] [--threads 1,2] [--form catalog|refined|runtime|runtime2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from nearfaas.stats import geomean
from nearfaas.twin.cpu_model import FORMS  # ("catalog", "refined", "runtime", "runtime2")
from nearfaas.twin.validate_apps import fresh_inputs, measure_apps_hot, measure_f2, predict_as_fed  # measuring: split out for size
from nearfaas.twin.validate_report import parameters, table  # reporting: split out for size

TARGET_APP_ABS = 0.20
TARGET_GEOMEAN_ABS = 0.10
TARGET_THREADS = 1
TARGET_WORST_ABS = 0.25  # no model (app or held-out) worse than 25 %
RESULT_NAME = "cpu_validation"
LABEL = "measured vs modelled"
BATCH = 1
COMPUTE_BOUND = 10.0  # an app is "overhead-bound" when its predicted busy time < 10x its predicted fixed cost
FORM_DOC = {
    "catalog": "the Xeon's form: platforms.layers op kinds, one measured efficiency per kind, launch_s per layer, driver_s per call",
    "refined": ("catalog + GEMM/conv efficiency from a generic MatMul grid at each layer's lowered (M, K, N); depthwise/grouped "
                "convs as their own class; fused element-wise ops at the element-wise rate (every parameter from micro-benchmarks)"),
    "runtime": ("refined + what ONNX Runtime runs that the graph does not show, from ORT's own optimised graph: one dispatch "
                "(launch_s) per node ORT runs, each NCHWc reorder's elements at the measured reorder rate, the depthwise class net "
                "of its micro-benchmark's own reorders (nearfaas.twin.cpu_model)"),
    "runtime2": ("runtime with kernel micro-benchmarks (nearfaas.twin.cpu_kernels) in place of the terms they measure: GEMV "
                 "(M < 16) weight streaming at the rate of the network's weight bytes, activation x activation MatMuls from "
                 "small batched MatMuls, Softmax/LayerNorm/Transpose per element at their size, convs and depthwise convs from "
                 "the interior of NCHWc chains, reorders at the interior (chain) rate"),
}
HELD_OUT_NOTE = ("networks built in code (nearfaas.twin.heldout: MLPs, VGG-like CNNs, MobileNet v1/v2-like, a ResNet block stack, "
                 "transformer encoders), none of them an app; measured here through nearfaas's InferenceSession, hot loop, 1 thread: "
                 "median thread CPU time of the repeats, more threads: best single-run wall time. No form or parameter was chosen "
                 "by looking at these errors")
ONE_OFF_NOTE = ("apps.json's f2: the median of ONE-OFF calls (one per request, the handler's work in between: cold caches), "
                "measured on the machine named in apps.json (machine.cpu_model), which may not be this one. one-off minus "
                "hot-loop time is the one-off call cost, which a roofline of the network does not model: reported, not judged")
# What the roofline does not see (from the graphs and ONNX Runtime's behaviour, not fitted): why an app can miss.
NOT_CAPTURED = {
    "one_off_call_cost": ("the apps' one-off f2 (apps.json: one call per request, the handler's work in between) is slower than "
                          "the hot loop the error is taken on: cold caches and the handler's footprint. That cost depends on "
                          "the handler, not the network, and no app-free micro-benchmark gives it (see one_off): not modelled"),
    "separate_activation_passes": ("activations ORT runs as separate passes (QuickGelu for SiLU) get only their compute, not "
                                   "the extra pass over memory (content_moderation)"),
    "per_node_overhead_real_tensors": ("per-node cost beyond the op's own work is the 16-element dispatch; the Relu-chain scan "
                                       "(overhead.N.relu_chain_per_node) shows the per-node time at larger tensors"),
    "shapes_outside_microbenchmarks": ("runtime2 interpolates its kernel scans and clamps outside them (GEMV weights < 1 MiB or "
                                       "> 256 MiB, batched MatMuls outside 2x16x32x16 .. 12x256x64x256); 5x5 and strided "
                                       "depthwise convs take the 3x3 stride-1 chain's efficiency"),
    "caches": ("operand bytes are charged at the DRAM stream rate; only the GEMV rate depends on the working set (the "
               "network's weight bytes)"),
}


def default_path() -> Path:
    """``$NEARFAAS_BENCH_RESULTS/cpu_validation.json`` (as the benchmark drivers honour it), else
    this checkout's ``benchmarks/results/cpu_validation.json``."""
    root = os.environ.get("NEARFAAS_BENCH_RESULTS")
    return (Path(root) if root else Path(__file__).resolve().parents[3] / "benchmarks" / "results") / f"{RESULT_NAME}.json"


def machine_facts() -> dict:
    """The facts benchmarks/ records with a result (the twin may not import nearfaas.bench)."""
    import platform

    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu_model": cpu, "cpu_count": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "machine": platform.machine(), "loadavg_at_write": list(os.getloadavg()),
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


# ------------------------------------------------------------------ error arithmetic


def relative_error(predicted: float, measured: float) -> float:
    """predicted / measured - 1 (positive: the model is slower than reality)."""
    if not (measured > 0 and math.isfinite(measured)) or not (predicted >= 0 and math.isfinite(predicted)):
        raise ValueError(f"predicted={predicted!r}, measured={measured!r}: need predicted >= 0 and measured > 0")
    return predicted / measured - 1.0


def geomean_abs(errors: Iterable[float]) -> float:
    """Geometric mean of |error| (0 if any error is exactly 0)."""
    xs = [abs(float(e)) for e in errors]
    if not xs:
        raise ValueError("no errors to average")
    if min(xs) == 0.0:
        return 0.0
    return geomean(xs)


def ratio_geomean_error(errors: Iterable[float]) -> float:
    """exp(mean |ln(predicted/measured)|) - 1: the typical factor by which the model is off."""
    xs = [float(e) for e in errors]
    return math.exp(sum(abs(math.log1p(e)) for e in xs) / len(xs)) - 1.0


def band(errors: Iterable[float]) -> list[float]:
    """[lo, hi] of measured/predicted = 1 / (1 + error): multiply a prediction by it."""
    r = [1.0 / (1.0 + float(e)) for e in errors]
    return [min(r), max(r)]


def summarise(errors: dict[str, float], app_target: float = TARGET_APP_ABS, geo_target: float = TARGET_GEOMEAN_ABS) -> dict:
    g = geomean_abs(errors.values())
    misses = sorted(k for k, e in errors.items() if abs(e) > app_target)
    return {
        "per_app_error": {k: round(e, 4) for k, e in errors.items()},
        "geomean_abs_error": round(g, 4),
        "mean_abs_error": round(statistics.fmean(abs(e) for e in errors.values()), 4),
        "ratio_geomean_error": round(ratio_geomean_error(errors.values()), 4),
        "apps_over_target": misses,
        "pass": not misses and g <= geo_target,
    }


# ------------------------------------------------------------------ the roofline on the host device


def predict_f2(bench: dict, threads: int, model, form: str = "catalog", batch: int = BATCH, *,
               overhead: dict | None = None, rt: dict | None = None) -> dict:
    """The roofline's f2 for ``model`` (zoo key or ONNX ModelProto) on this machine at ``threads``:
    seconds and its parts (``nearfaas.twin.cpu_model.predict``)."""
    from nearfaas.twin import cpu_model

    return cpu_model.predict(bench, threads, model, form, overhead=overhead, rt=rt, batch=batch)


def predict_f1(bench: dict, app_entry: dict, threads: int = 1) -> dict:
    """The twin's modelled-CPU f1 (``e2e._f1_compute`` for a roofline CPU) on the host device."""
    from nearfaas.hw.devices import host
    from nearfaas.twin import platforms as P

    d = host.device(bench, threads)
    upload = float(app_entry["input"]["bytes"][0])
    f1_out = float(app_entry["stages"]["f1"]["batch1"]["output_bytes"])
    elements = f1_out / 4
    op = {"kind": "elementwise", "flops": elements * float(P.F1_OPS_PER_ELEMENT.value), "bytes": upload + f1_out, "dtype": "fp32"}
    return {"seconds": d.latency(op), "ops_per_element": float(P.F1_OPS_PER_ELEMENT.value),
            "ops_per_element_source": P.F1_OPS_PER_ELEMENT.source}


# ------------------------------------------------------------------ measuring f2 at N threads


# ------------------------------------------------------------------ the cache file


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------ validate


def _inputs(threads: tuple[int, ...], p: Path, cached: dict, measure: bool, say) -> tuple[dict, dict, bool]:
    """The micro-benchmarks and N-thread f2 measurements: cached, or measured when missing."""
    from nearfaas.apps import APPS
    from nearfaas.hw.devices import host

    bench = cached.get("microbench") or {}
    need = [t for t in threads if str(t) not in bench.get("threads", {})]
    changed = False
    if need:
        if not measure:
            raise ValueError(f"{p}: no micro-benchmarks for {need} thread(s); run validate(measure=True)")
        new = host.measure(tuple(need), progress=say)
        if bench:
            bench["threads"].update(new["threads"])
        else:
            bench = new
        changed = True
    f2_cache = cached.get("f2_measured") or {}
    for t in threads:  # at 1 thread: a re-measurement now, only to show the drift from apps.json
        have = f2_cache.get(str(t)) or {}
        missing = [k for k in APPS if k not in have]
        if missing:
            if not measure:
                raise ValueError(f"{p}: no {t}-thread f2 measurement for {missing}; run validate(measure=True)")
            have.update(measure_f2(t, missing, progress=say))
            f2_cache[str(t)] = have
            changed = True
    return bench, f2_cache, changed


def _thread_summary(bench: dict, t: int, prof, f2_cache: dict, form: str, p: Path,
                    overhead_bound: set[str], overhead: dict, rts: dict, hot: dict) -> tuple[dict, dict[str, dict[str, float]]]:
    """The per-app errors at ``t`` threads, summarised: (summary, {form: {app: error}}). At 1 thread
    the measured f2 is the hot loop (``hot``, as the held-out networks); the one-off figures
    (apps.json, and re-measured here) are compared beside it."""
    from nearfaas.apps import APPS

    rows: dict[str, dict] = {}
    err: dict[str, dict[str, float]] = {f: {} for f in FORMS}
    err_one: dict[str, dict[str, float]] = {f: {} for f in FORMS}  # vs apps.json's one-off median (1 thread)
    err_stage: dict[str, float] = {}
    err_now: dict[str, dict[str, float]] = {f: {} for f in FORMS}  # vs the one-off median re-measured here
    for key, card in APPS.items():
        entry = prof.for_app(key)
        if not entry:
            continue
        one_off = None
        if t == 1:
            f2 = entry["stages"]["f2"]["batch1"]
            one_off, stage = float(f2["model_wall_s"]), float(f2["cpu_s"])
            if key not in hot:
                raise ValueError(f"{p}: no hot-loop f2 measurement of {key}; run validate(measure=True)")
            fed = hot[key]
            meas, src = float(fed["value_s"]), f"{p.name} f2_hot_measured.1 ({fed['estimator']} of hot-loop repeats)"
        else:
            fed = f2_cache[str(t)][key]
            meas, stage, src = float(fed["value_s"]), float(fed["stage_value_s"]), f"{p.name} f2_measured.{t} ({fed['estimator']})"
        pred = {f: predict_as_fed(predict_f2, fed, bench=bench, threads=t, model=card.model, form=f, overhead=overhead.get(str(t)),
                                  rt=rts.get(f"zoo:{card.model}")) for f in FORMS}
        now = (f2_cache.get(str(t)) or {}).get(key) if t == 1 else None
        for f in FORMS:
            err[f][key] = relative_error(pred[f]["seconds"], meas)
            if one_off is not None:
                err_one[f][key] = relative_error(pred[f]["seconds"], one_off)
            if now:
                err_now[f][key] = relative_error(pred[f]["seconds"], float(now["value_s"]))
        err_stage[key] = relative_error(pred[form]["seconds"], stage)
        fixed = pred["catalog"]["launch_s"] + pred["catalog"]["call_s"]
        if pred["catalog"]["busy_s"] < COMPUTE_BOUND * fixed:
            overhead_bound.add(key)
        rows[key] = {"model": card.model, "measured_s": meas, "measured_stage_s": stage, "measured_source": src,
                     **({"measured_one_off_apps_json_s": one_off, "one_off_minus_hot_s": round(one_off - meas, 9),
                         **{f"error_one_off_{f}": round(err_one[f][key], 4) for f in FORMS}} if one_off is not None else {}),
                     **({"remeasured_now_s": now["value_s"], "drift_now_vs_apps_json": round(now["value_s"] / one_off - 1, 4),
                         "error_now": round(err_now[form][key], 4)} if now and one_off else {}),
                     **{f"predicted_{f}_s": round(pred[f]["seconds"], 9) for f in FORMS},
                     **{f"error_{f}": round(err[f][key], 4) for f in FORMS},
                     "error_stage": round(err_stage[key], 4),
                     **{f: {k: (round(v, 9) if isinstance(v, float) else v) for k, v in pred[f].items()} for f in FORMS}}
    s = summarise(err[form])
    s["measured"] = ("hot loop: median thread CPU time (nearfaas.models InferenceSession, as the held-out networks)" if t == 1
                     else "best of one-off repeats")
    s["band"] = [round(x, 4) for x in band(err[form].values())]
    s["per_app_error_stage"] = {k: round(e, 4) for k, e in err_stage.items()}
    if err_one[form]:
        s["one_off_apps_json"] = {**{f: {k: summarise(err_one[f])[k] for k in ("per_app_error", "geomean_abs_error")} for f in FORMS},
                                  "note": ONE_OFF_NOTE}
    if err_now[form]:
        s["vs_remeasured_now"] = {**summarise(err_now[form]), "by_form": {f: summarise(err_now[f])["geomean_abs_error"] for f in FORMS},
                                  "note": ("the same prediction against f2's one-off calls re-measured here (median, the apps.json "
                                           "machinery: LocalApp, one call per request) on THIS machine")}
    for f in FORMS:
        if f != form:
            s[f] = {**summarise(err[f]), "band": [round(x, 4) for x in band(err[f].values())]}
    s["apps"] = rows
    return s, err


def _f1(bench: dict, prof) -> dict:
    """f1 (1 thread only: single-threaded Python/Pillow code): predicted vs measured per app."""
    from nearfaas.apps import APPS

    f1 = {}
    for key in APPS:
        entry = prof.for_app(key)
        if entry and entry["stages"]["f1"]["batch1"].get("output_bytes") is not None:
            pf = predict_f1(bench, entry, 1)
            meas = float(entry["stages"]["f1"]["batch1"]["cpu_s"])
            f1[key] = {"predicted_s": round(pf["seconds"], 7), "measured_s": meas, "error": round(relative_error(pf["seconds"], meas), 4)}
    return f1


def _cpu_result(bench: dict, threads: tuple[int, ...], form: str, per_thread: dict, residual: dict, residual_cb: dict,
                overhead_bound: set[str], f1: dict, held_out: dict, fresh: dict) -> dict:
    """The ``cpu`` part of ``validate``'s result."""
    f1_errors = {k: v["error"] for k, v in f1.items()}
    head = per_thread.get(str(TARGET_THREADS)) or per_thread[str(threads[0])]
    ho = held_out.get(str(TARGET_THREADS)) or held_out[str(threads[0])]
    other = [f for f in FORMS if f != form]
    worst = max(abs(e) for e in head["per_app_error"].values())
    fr = fresh.get(str(TARGET_THREADS)) or fresh[str(threads[0])]

    def pick(x: dict, f: str) -> dict:  # a summary's figures of form f (the heading form sits at the top level)
        return x if f == form else (x.get(f) or x["forms"][f])
    goal = {}
    for f in FORMS:
        x, y, z = pick(head, f), pick(ho, f), pick(fr, f)
        g = {"apps_geomean": x["geomean_abs_error"], "apps_worst": round(max(abs(e) for e in x["per_app_error"].values()), 4),
             "held_out_geomean": y["geomean_abs_error"], "held_out_worst": y["worst_abs_error"],
             "held_out_fresh_geomean": z["geomean_abs_error"], "held_out_fresh_worst": z["worst_abs_error"]}
        # judged on the apps (hot loop) and the FRESH set; the seen set is reported, not judged (it shaped runtime2)
        g["pass"] = (max(g["apps_geomean"], g["held_out_fresh_geomean"]) <= TARGET_GEOMEAN_ABS
                     and max(g["apps_worst"], g["held_out_fresh_worst"]) <= TARGET_WORST_ABS)
        g["pass_with_seen_set"] = g["pass"] and g["held_out_geomean"] <= TARGET_GEOMEAN_ABS and g["held_out_worst"] <= TARGET_WORST_ABS
        goal[f] = g
    return {
        "label": LABEL,
        "device": f"this machine: {bench['cpu']['model_name']} ({bench['cpu']['microarchitecture']}), roofline parameters from "
                  "micro-benchmarks (nearfaas.hw.devices.host); the Xeon 8275CL itself is not available here",
        "form": form,
        "forms": FORM_DOC,
        "stage": "f2 (ONNX inference), batch 1; measured = time inside ONNX Runtime (1 thread: hot loop, median thread CPU time, "
                 "as the held-out networks; the one-off figures beside it; more threads: best of one-off repeats, measured now); "
                 "predicted = the roofline of `form` on the host device",
        "error_definition": "error = predicted/measured - 1; geomean_abs_error = exp(mean(ln|error|)) over the apps",
        "targets": {"per_app_abs": TARGET_APP_ABS, "geomean_abs": TARGET_GEOMEAN_ABS, "threads": TARGET_THREADS},
        "threads": per_thread,
        "per_app_error": head["per_app_error"],
        "geomean_abs_error": head["geomean_abs_error"],
        "pass": head["pass"],
        "apps_over_target": head["apps_over_target"],
        "worst_abs_error": round(worst, 4),
        "held_out_geomean_abs_error": ho["geomean_abs_error"],
        "held_out_worst_abs_error": ho["worst_abs_error"],
        "held_out_per_model_error": ho["per_model_error"],
        "held_out": {t: {k: v for k, v in h.items() if k != "models"} for t, h in held_out.items()},
        "held_out_models": {t: h["models"] for t, h in held_out.items()},
        "held_out_note": HELD_OUT_NOTE,
        "held_out_fresh_geomean_abs_error": fr["geomean_abs_error"],
        "held_out_fresh_worst_abs_error": fr["worst_abs_error"],
        "held_out_fresh_worst": fr["worst"],
        "held_out_fresh_per_model_error": fr["per_model_error"],
        "held_out_fresh": {k: v for k, v in fr.items() if k != "models"},
        "held_out_fresh_by_thread": {t: {k: v for k, v in h.items() if k != "models"} for t, h in fresh.items()},
        "held_out_fresh_models": {t: h["models"] for t, h in fresh.items()},
        "held_out_fresh_note": ("a second held-out set (nearfaas.twin.heldout_fresh, 12 networks), defined in code before it was "
                                "measured and after the first set (held_out_*, now 'seen') had been looked at; measured as the first"),
        "goal_held_out": {"target": f"geomean |error| <= {TARGET_GEOMEAN_ABS:.0%} on the apps AND on the held-out set, no model worse "
                                   f"than {TARGET_WORST_ABS:.0%}, at {TARGET_THREADS} thread",
                          "judged_on": "apps (hot-loop f2) + the fresh held-out set (held_out_fresh_*); the seen set "
                                       "(held_out_*) is reported in pass_with_seen_set, not judged: runtime2 was planned after seeing it",
                          "by_form": goal},
        "band": [round(x, 4) for x in band(residual[form])],
        "band_compute_bound": [round(x, 4) for x in band(residual_cb[form])],
        "overhead_bound_apps": sorted(overhead_bound),
        **{f: {**{k: head[f][k] for k in ("per_app_error", "geomean_abs_error", "pass", "apps_over_target")},
               "band": [round(x, 4) for x in band(residual[f])], "band_compute_bound": [round(x, 4) for x in band(residual_cb[f])]}
           for f in other},
        "band_use": (f"multiply a modelled-Xeon f2 time (platforms.roofline_f2('cpu', ...), the catalog form) by [lo, hi] for its "
                     f"uncertainty range: lo/hi = min/max over the apps and thread counts {','.join(map(str, threads))} of "
                     f"measured/predicted of the {form} form on this machine (the residual of the form, assumed to carry over to "
                     "the Xeon: the only real-hardware evidence available here). band_compute_bound leaves out the apps whose "
                     f"predicted busy time is under {COMPUTE_BOUND:g}x their fixed per-call + per-layer cost (overhead_bound_apps, "
                     "decided from the prediction, not the measurement): use it for models with real compute, band for all"),
        "f1": {"per_app_error": f1_errors, "geomean_abs_error": round(geomean_abs(f1_errors.values()), 4) if f1_errors else None,
               "apps": f1, "threads": 1,
               "note": ("the twin's modelled-CPU f1 = one element-wise roofline op, F1_OPS_PER_ELEMENT [assumption] ops per f1 output "
                        "element over upload + tensor bytes; f1 is JPEG/PNG decode, resize, tokenizing in Python/Pillow, which that op "
                        "does not describe: reported, not part of the pass/fail")},
        "one_off": {"apps_json": head.get("one_off_apps_json"), "here": head.get("vs_remeasured_now"), "note": ONE_OFF_NOTE},
        "f3": "not modelled: the twin uses the measured f3 on every platform (no CPU roofline for f3)",
        "pre_post_processing": "f2's handler (tensor decode, summary, output write) is not modelled: see threads.N.per_app_error_stage",
        "not_captured": NOT_CAPTURED,
    }


def _write(p: Path, bench: dict, f2_cache: dict, threads: tuple[int, ...], result: dict, extra: dict) -> None:
    """Rewrite the cached record at ``p``."""
    record = {"benchmark": RESULT_NAME, "label": "measured: micro-benchmarks and f2 at N threads on this machine; "
              "the result compares them with the modelled roofline", "machine": machine_facts(),
              "settings": {"threads": list(threads), "batch": BATCH, "size": "full",
                           "f2_measured": ("apps.profiles.LocalApp, full-size model, seed-0 input, one warm chain, then 7 repeats (5 if >= 1 s) "
                                           "at 1 thread, 11 (9) at more; value_s = median at 1 thread (a drift check against "
                                           "apps.json only), best repeat at more"),
                           "f2_hot_measured": ("validate_apps.measure_apps_hot: the app's own f2 code path (Inference._run, "
                                               "InferenceSession) on its seed-0 f1 output, hot loop, 1 thread: median thread CPU time of "
                                               "11 repeats of >= 10 ms (5 when one call >= 0.5 s), as the held-out networks")},
              "microbench": bench, "f2_measured": f2_cache, **extra, "parameters": parameters(bench, threads, extra["overhead"]),
              "result": result}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(record, indent=1))


def validate(threads: Iterable[int] = (1, 2), *, form: str = "catalog", path: str | os.PathLike | None = None, refresh: bool = False,
             measure: bool = True, write: bool = True, profiles_path: str | os.PathLike | None = None, progress=None,
             held_out: Iterable[str] | None = None, fresh: Iterable[str] | None = None, paired_rounds: int = 0) -> dict:
    """The CPU roofline vs this machine's measured f2, per app, at each thread count.

    Reads the cached micro-benchmarks and N-thread f2 measurements from ``path`` (default
    ``benchmarks/results/cpu_validation.json``); what is missing (or everything, ``refresh``) is
    measured when ``measure`` (micro-benchmarks ~2 min; f2 at 2 threads builds the full-size
    models and runs them, several minutes) and the file is rewritten when ``write``. 1-thread f2
    is the hot loop (``measure_apps_hot``, cached as ``f2_hot_measured``); apps.json (``profiles_path``)
    gives the one-off figure beside it. The held-out networks (``nearfaas.twin.heldout``, "seen";
    ``held_out`` names a subset) and the fresh set (``heldout_fresh``; ``fresh`` names a subset) are
    measured here at every thread count and cached too. ``paired_rounds`` > 0 measures the paired
    check (``heldout_paired``: kernels, apps, a third and a fourth set in interleaved rounds; cached as
    ``held_out_paired_measured``, and used from the cache after); where it exists the goal is judged
    on it. Returns::

        {"cpu": {"threads": {"1": {"per_app_error", "geomean_abs_error", "pass", ...}, "2": {...}},
                 "per_app_error": <1 thread>, "geomean_abs_error": <1 thread>, "pass": <1 thread>,
                 "band": [lo, hi], "band_use": str, "label": "measured vs modelled",
                 "held_out_geomean_abs_error", "held_out_worst_abs_error", "held_out_per_model_error", ...},
         "gpu": "skipped: no GPU"}
    """
    from nearfaas.apps import APPS
    from nearfaas.apps.profiles import load as load_profiles
    from nearfaas.twin import heldout, heldout_paired

    if form not in FORMS:
        raise ValueError(f"form={form!r}: use one of {', '.join(FORMS)}")
    threads = tuple(sorted({int(t) for t in threads}))
    if not threads or threads[0] < 1:
        raise ValueError(f"threads={threads!r}: give thread counts >= 1")
    p = Path(path) if path is not None else default_path()
    cached = {} if refresh else _load(p)
    say = progress or (lambda m: None)
    bench, f2_cache, changed = _inputs(threads, p, cached, measure, say)
    overhead, rts, held, models, changed_h = heldout.inputs(threads, cached, measure, say, tuple(held_out) if held_out else None,
                                                          tuple(dict.fromkeys(c.model for c in APPS.values())))
    rts_f, held_f, models_f, changed_f = fresh_inputs(threads, {**cached, "runtime_graphs": rts}, measure, say,
                                                      tuple(fresh) if fresh else None)
    rts.update(rts_f)
    paired_record, models_p, rts_p, changed_p = heldout_paired.inputs(cached, threads, paired_rounds, measure, say)
    rts.update(rts_p)
    hot = dict(cached.get("f2_hot_measured") or {}) if TARGET_THREADS in threads else {}
    missing = [k for k in APPS if k not in hot] if TARGET_THREADS in threads else []
    if missing:
        if not measure:
            raise ValueError(f"{p}: no hot-loop f2 measurement of {missing}; run validate(measure=True)")
        hot.update(measure_apps_hot(TARGET_THREADS, missing, progress=say))
    changed = changed or changed_h or changed_f or changed_p or bool(missing)

    prof = load_profiles(profiles_path)
    if not prof:
        raise ValueError("no measured profile (benchmarks/results/apps.json): run benchmarks/apps.py first")
    per_thread: dict[str, Any] = {}
    residual: dict[str, list[float]] = {f: [] for f in FORMS}
    residual_cb: dict[str, list[float]] = {f: [] for f in FORMS}  # compute-bound apps only (see COMPUTE_BOUND)
    overhead_bound: set[str] = set()
    for t in threads:
        s, err = _thread_summary(bench, t, prof, f2_cache, form, p, overhead_bound, overhead, rts, hot)
        per_thread[str(t)] = s
        for f in FORMS:
            residual[f] += list(err[f].values())
            residual_cb[f] += [e for k, e in err[f].items() if k not in overhead_bound]

    ho = {str(t): heldout.evaluate(bench, overhead[str(t)], t, held[str(t)], {k[8:]: v for k, v in rts.items() if k.startswith("heldout:")},
                                   models, form, TARGET_GEOMEAN_ABS, TARGET_WORST_ABS) for t in threads}
    ho_f = {str(t): heldout.evaluate(bench, overhead[str(t)], t, held_f[str(t)], {k[6:]: v for k, v in rts.items() if k.startswith("fresh:")},
                                     models_f, form, TARGET_GEOMEAN_ABS, TARGET_WORST_ABS) for t in threads}
    cpu = _cpu_result(bench, threads, form, per_thread, residual, residual_cb, overhead_bound, _f1(bench, prof), ho, ho_f)
    if paired_record is not None:
        t_p = str(paired_record["threads"])
        cpu["held_out_paired"] = heldout_paired.evaluate(bench, overhead[t_p], rts, paired_record, models_p, TARGET_GEOMEAN_ABS,
                                                         TARGET_WORST_ABS)
        judged = [k for k in cpu["held_out_paired"]["judged_on"] if cpu["held_out_paired"].get(k)]
        cpu["goal_held_out"]["paired"] = {"pass": cpu["held_out_paired"]["pass"], "form": heldout_paired.FORM,
                                          "judged_on": f"the paired rounds (heldout_paired): the apps and the {heldout_paired.JUDGED} "
                                                       "set, each round's kernels with that round's measurements",
                                          **{f"{k}_geomean": cpu["held_out_paired"][k]["geomean_abs_error"] for k in judged},
                                          **{f"{k}_worst": cpu["held_out_paired"][k]["worst_abs_error"] for k in judged}}
    result = {"cpu": cpu, "gpu": "skipped: no GPU"}
    if write and (changed or not cached or cached.get("result") != result):
        _write(p, bench, f2_cache, threads, result, {"overhead": overhead, "runtime_graphs": rts, "held_out_measured": held,
                                                     "held_out_fresh_measured": held_f, "f2_hot_measured": hot,
                                                     **({"held_out_paired_measured": paired_record} if paired_record else {}),
                                                     # earlier records' results (another CPU), kept verbatim while docs cite them
                                                     **({"previous_results": cached["previous_results"]} if cached.get("previous_results") else {})})
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nearfaas.twin.validate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--refresh", action="store_true", help="re-measure everything (micro-benchmarks and N-thread f2)")
    ap.add_argument("--no-measure", action="store_true", help="fail instead of measuring what the cache lacks")
    ap.add_argument("--path", default=None, help="cache file (default benchmarks/results/cpu_validation.json)")
    ap.add_argument("--held-out", default=None, help="comma-separated held-out networks (default: all)")
    ap.add_argument("--fresh", default=None, help="comma-separated fresh held-out networks (default: all)")
    ap.add_argument("--form", default="catalog", choices=FORMS, help="the form that heads the result and gives the band")
    ap.add_argument("--paired-rounds", type=int, default=0, help="measure the paired check in N rounds (heldout_paired; ~3 min each)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    r = validate(tuple(int(x) for x in a.threads.split(",") if x.strip()), form=a.form, path=a.path, refresh=a.refresh,
                 measure=not a.no_measure, progress=lambda m: print(m, file=sys.stderr, flush=True),
                 held_out=a.held_out.split(",") if a.held_out else None, fresh=a.fresh.split(",") if a.fresh else None,
                 paired_rounds=a.paired_rounds)
    if a.json:
        slim = {"cpu": {k: v for k, v in r["cpu"].items() if k != "threads"}, "gpu": r["gpu"]}
        slim["cpu"]["threads"] = {t: {k: v for k, v in s.items() if k != "apps"} for t, s in r["cpu"]["threads"].items()}
        slim["cpu"].pop("held_out_models", None)
        slim["cpu"].pop("held_out_fresh_models", None)
        print(json.dumps(slim, indent=1))
    else:
        print(table(r))
    print(f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
