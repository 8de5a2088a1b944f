"""The CPU roofline's held-out check measured in PAIRED rounds, on sets of networks built in code.

Why paired. The second held-out check (``heldout_fresh``) missed its goal by one network:
``mlp_gemv_wide`` streams 134 MB of weights per call, so its time is DRAM bandwidth, and this host
is a shared VM whose DRAM bandwidth moved 2x between measurements minutes apart (the GEMV
micro-benchmark that predicts it and the network itself, run side by side, agreed to within 20 %).
A micro-benchmark measured at one moment predicts a run at another only as well as the host is
steady, so here the two are measured TOGETHER: in each of ``ROUNDS`` rounds the kernel
micro-benchmarks that feed ``runtime2`` (``cpu_kernels.measure_kernels``: GEMV and small-M weight
GEMMs, batched MatMuls, scans, conv chains, per-node and per-call costs) run first, then every app's
f2 in a hot loop (``validate_apps.measure_apps_hot``), then every network of every set below; each
round's prediction uses that round's kernels, and a model's error is the MEDIAN over the rounds of
predicted/measured - 1. From the sixth attempt on, the host micro-benchmarks (clock, FMA peak,
triad, one-op classes, MatMul grid) are measured in each round as well. No parameter is chosen from
an error.

The sets: twelve networks each, of the same four families (MLP, CNN, depthwise CNN, transformer
encoder) at sizes no earlier set or app uses, each fixed in code before any of it was measured.
Each attempt judges the goal on a set nothing was shaped on (``JUDGED``); the earlier sets stay
in the rounds, reported, not judged:

* third (seeds 301-312): the third attempt, the protocol alone; its misses (credit_risk's per-call
  cost from another day, mlp_batch8's 8-row GEMM charged as a GEMV) shaped the fourth attempt;
* fourth (401-412): small-M runs at M = 2, 4, 8 and per-call costs paired; its misses (mlp_rows12
  interpolated toward the unpaired grid's M = 16, credit_risk's f2 call path) shaped the fifth;
* fifth (501-512): small-M runs reach M = 16; the apps' f2 call path is measured; its apps ran
  10-20 % slower than the round before against cached compute figures, and credit_risk's tiny GEMM
  was charged nothing for its set-up: these shaped the sixth;
* sixth (601-612): every round measures the host micro-benchmarks too (``bench``: nothing measured
  is cached any more, only ORT's optimised graphs, which are derived), and the GEMV runs reach 1 KiB;
  its repeat missed on credit_risk's few-microsecond call, which shaped the seventh;
* seventh (701-712): single ops net of a graph with as many inputs, small-M runs from 1 KiB, the
  apps predicted at the rows they feed; two tiny MLPs whose time is set-up and call costs.
* eighth (801-812): convs charged at their NCHWc-padded channels; five rounds instead of three
  (the seventh run's apps moved up to 25 points between rounds: chatbot -29 % .. -4 %).

    record = measure_rounds()                       # ~15 min, 1 thread
    evaluate(bench, overhead, runtime_graphs, record, build_all(), 0.10, 0.25)   # geomean and worst-model targets

Known caveats: the rounds follow one another (two to three minutes apart), so drift WITHIN a round
still separates a network from its kernels; five rounds bound, not remove, that. The families
are the earlier sets' families.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from nearfaas.twin import heldout
from nearfaas.twin.heldout import mlp, mobilenet_v1, mobilenet_v2, resnet_blocks, transformer, vgg

ROUNDS = 5  # three until the seventh attempt: its apps moved up to 25 points between rounds
FORM = "runtime2"  # the form whose kernel micro-benchmarks are paired

# name -> (family, builder). Seeds 301-312: no weights shared with the earlier sets (101-111, 201-212).
NETWORKS: dict[str, tuple[str, Callable]] = {
    "mlp_gemv_deep": ("mlp", lambda: mlp("mlp_gemv_deep", 1, (1024, 3072, 3072, 1024), 301)),
    "mlp_gemv_narrow": ("mlp", lambda: mlp("mlp_gemv_narrow", 1, (384, 1536, 384, 50), 302)),
    "mlp_batch8": ("mlp", lambda: mlp("mlp_batch8", 8, (1024, 2048, 1024, 100), 303)),
    "mlp_batch128": ("mlp", lambda: mlp("mlp_batch128", 128, (512, 1024, 512, 20), 304)),
    "cnn_vgg48": ("cnn", lambda: vgg("cnn_vgg48", 48, ((32, 2), (64, 2), (128, 3)), 50, 305)),
    "cnn_vgg112": ("cnn", lambda: vgg("cnn_vgg112", 112, ((24, 1), (48, 2), (96, 2), (192, 2)), 200, 306)),
    "resnet_blocks_56": ("cnn", lambda: resnet_blocks("resnet_blocks_56", 56, 128, 3, 307)),
    "dwcnn_v1_w1_96": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w1_96", 96, 1.0, 308)),
    "dwcnn_v2_128": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_128", 128, 309)),
    "transformer_seq32": ("transformer", lambda: transformer("transformer_seq32", 32, 192, 3, 2, 768, 310)),
    "transformer_seq128": ("transformer", lambda: transformer("transformer_seq128", 128, 256, 4, 2, 1024, 311)),
    "transformer_seq256": ("transformer", lambda: transformer("transformer_seq256", 256, 384, 6, 1, 1536, 312)),
}

# The fourth set (seeds 401-412), fixed in code before any of it was measured, after the third
# set's result shaped runtime2's small-M and per-call terms: so the third set is no longer held
# out, and the goal is judged on this one. Three of its MLPs have a few rows (2, 4, 12: the
# small-M term's range, at weight sizes it was not measured at; 12 lies between its M = 8 and the grid).
FOURTH: dict[str, tuple[str, Callable]] = {
    "mlp_rows2": ("mlp", lambda: mlp("mlp_rows2", 2, (768, 3072, 768, 10), 401)),
    "mlp_rows4": ("mlp", lambda: mlp("mlp_rows4", 4, (1536, 1536, 1536, 100), 402)),
    "mlp_rows12": ("mlp", lambda: mlp("mlp_rows12", 12, (1024, 4096, 256), 403)),
    "mlp_gemv_tall": ("mlp", lambda: mlp("mlp_gemv_tall", 1, (4096, 2048, 512, 20), 404)),
    "mlp_batch32": ("mlp", lambda: mlp("mlp_batch32", 32, (640, 1280, 640, 10), 405)),
    "cnn_vgg80": ("cnn", lambda: vgg("cnn_vgg80", 80, ((40, 2), (80, 2), (160, 2)), 30, 406)),
    "resnet_blocks_96": ("cnn", lambda: resnet_blocks("resnet_blocks_96", 96, 80, 2, 407)),
    "dwcnn_v1_w05_192": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w05_192", 192, 0.5, 408)),
    "dwcnn_v2_96": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_96", 96, 409)),
    "transformer_seq48": ("transformer", lambda: transformer("transformer_seq48", 48, 160, 4, 2, 640, 410)),
    "transformer_seq96": ("transformer", lambda: transformer("transformer_seq96", 96, 320, 5, 2, 1280, 411)),
    "transformer_seq192": ("transformer", lambda: transformer("transformer_seq192", 192, 448, 7, 1, 1792, 412)),
}
# The fifth set (seeds 501-512), fixed in code before any of it was measured, after the fourth set's
# result shaped two more terms (the small-M runs now reach M = 16; an app's f2 call path is measured):
# the goal is judged on this one. Four MLPs have a few rows (3, 6, 10, 14: none a measured M).
FIFTH: dict[str, tuple[str, Callable]] = {
    "mlp_rows3": ("mlp", lambda: mlp("mlp_rows3", 3, (1280, 2560, 640, 40), 501)),
    "mlp_rows6": ("mlp", lambda: mlp("mlp_rows6", 6, (896, 3584, 896), 502)),
    "mlp_rows10": ("mlp", lambda: mlp("mlp_rows10", 10, (2048, 1024, 1024, 64), 503)),
    "mlp_rows14": ("mlp", lambda: mlp("mlp_rows14", 14, (768, 2304, 2304, 12), 504)),
    "mlp_gemv_wide2": ("mlp", lambda: mlp("mlp_gemv_wide2", 1, (1536, 6144, 768), 505)),
    "cnn_vgg64": ("cnn", lambda: vgg("cnn_vgg64", 64, ((32, 1), (64, 2), (128, 2), (256, 1)), 100, 506)),
    "resnet_blocks_72": ("cnn", lambda: resnet_blocks("resnet_blocks_72", 72, 112, 2, 507)),
    "dwcnn_v1_w075_128": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w075_128", 128, 0.75, 508)),
    "dwcnn_v2_112": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_112", 112, 509)),
    "transformer_seq24": ("transformer", lambda: transformer("transformer_seq24", 24, 128, 2, 3, 512, 510)),
    "transformer_seq80": ("transformer", lambda: transformer("transformer_seq80", 80, 288, 6, 2, 1152, 511)),
    "transformer_seq160": ("transformer", lambda: transformer("transformer_seq160", 160, 512, 8, 1, 2048, 512)),
}
# The sixth set (seeds 601-612), fixed in code before any of it was measured, after the fifth
# attempt's result shaped two more things: the host micro-benchmarks (clock, FMA, triad, one-op
# classes, MatMul grid) are measured in every round too (the apps ran 10-20 % slower than the round
# before while those figures stayed the cached ones), and the GEMV runs reach down to 1 KiB of
# weights (a tiny weight GEMM costs its set-up, which the 1 MiB clamp charged as streaming).
SIXTH: dict[str, tuple[str, Callable]] = {
    "mlp_rows5": ("mlp", lambda: mlp("mlp_rows5", 5, (1152, 2304, 1152, 30), 601)),
    "mlp_rows7": ("mlp", lambda: mlp("mlp_rows7", 7, (640, 2560, 2560, 16), 602)),
    "mlp_rows11": ("mlp", lambda: mlp("mlp_rows11", 11, (1792, 896, 448), 603)),
    "mlp_gemv_tiny": ("mlp", lambda: mlp("mlp_gemv_tiny", 1, (96, 48, 24, 2), 604)),
    "mlp_batch48": ("mlp", lambda: mlp("mlp_batch48", 48, (384, 768, 384, 25), 605)),
    "cnn_vgg56": ("cnn", lambda: vgg("cnn_vgg56", 56, ((48, 2), (96, 2), (192, 1)), 40, 606)),
    "resnet_blocks_64": ("cnn", lambda: resnet_blocks("resnet_blocks_64", 64, 144, 2, 607)),
    "dwcnn_v1_w05_160": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w05_160", 160, 0.5, 608)),
    "dwcnn_v2_80": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_80", 80, 609)),
    "transformer_seq40": ("transformer", lambda: transformer("transformer_seq40", 40, 224, 7, 2, 896, 610)),
    "transformer_seq112": ("transformer", lambda: transformer("transformer_seq112", 112, 352, 11, 1, 1408, 611)),
    "transformer_seq208": ("transformer", lambda: transformer("transformer_seq208", 208, 256, 4, 2, 1024, 612)),
}
# The seventh set (seeds 701-712), fixed in code before any of it was measured, after the sixth
# attempt's repeat missed on credit_risk (-25.55 %) and showed why: a single op's micro-benchmark was
# net of a 2-input graph though it had one input (~1 us lost per tiny op), the small-M runs stopped
# at 4 MiB, and credit_risk's f2 runs 6 rows where it was predicted at 1. Two of its MLPs are tiny
# (a few KiB of weights, several rows: set-up and per-call costs, not streaming, are their time).
SEVENTH: dict[str, tuple[str, Callable]] = {
    "mlp_rows9": ("mlp", lambda: mlp("mlp_rows9", 9, (1408, 2816, 704, 20), 701)),
    "mlp_rows13": ("mlp", lambda: mlp("mlp_rows13", 13, (896, 1792, 1792, 8), 702)),
    "mlp_tiny_rows6": ("mlp", lambda: mlp("mlp_tiny_rows6", 6, (160, 1), 703)),
    "mlp_tiny_rows3": ("mlp", lambda: mlp("mlp_tiny_rows3", 3, (64, 32, 4), 704)),
    "mlp_batch24": ("mlp", lambda: mlp("mlp_batch24", 24, (768, 1536, 768, 50), 705)),
    "cnn_vgg72": ("cnn", lambda: vgg("cnn_vgg72", 72, ((36, 2), (72, 2), (144, 2)), 60, 706)),
    "resnet_blocks_48": ("cnn", lambda: resnet_blocks("resnet_blocks_48", 48, 160, 2, 707)),
    "dwcnn_v1_w075_96": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w075_96", 96, 0.75, 708)),
    "dwcnn_v2_144": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_144", 144, 709)),
    "transformer_seq56": ("transformer", lambda: transformer("transformer_seq56", 56, 192, 6, 2, 768, 710)),
    "transformer_seq144": ("transformer", lambda: transformer("transformer_seq144", 144, 320, 8, 1, 1280, 711)),
    "transformer_seq320": ("transformer", lambda: transformer("transformer_seq320", 320, 256, 4, 1, 1024, 712)),
}
# The eighth set (seeds 801-812), fixed in code before any of it was measured, after the seventh
# attempt missed on cnn_vgg72 (-27 %): ORT runs a conv in NCHWc blocks of 16 channels here, so its
# 36-channel convs cost what 48-channel ones do (measured: a 36-, 40-, 44- and 48-channel chain took
# the same time). Its CNNs have channel counts off the block (20, 40, 88, 104; width 0.625).
EIGHTH: dict[str, tuple[str, Callable]] = {
    "mlp_rows15": ("mlp", lambda: mlp("mlp_rows15", 15, (1024, 2048, 512, 10), 801)),
    "mlp_rows6_wide": ("mlp", lambda: mlp("mlp_rows6_wide", 6, (2560, 1280, 640), 802)),
    "mlp_rows10_deep": ("mlp", lambda: mlp("mlp_rows10_deep", 10, (512, 1024, 1024, 1024, 16), 803)),
    "mlp_tiny_rows5": ("mlp", lambda: mlp("mlp_tiny_rows5", 5, (48, 24, 1), 804)),
    "mlp_gemv_mid2": ("mlp", lambda: mlp("mlp_gemv_mid2", 1, (2048, 1024, 256, 8), 805)),
    "cnn_vgg88": ("cnn", lambda: vgg("cnn_vgg88", 88, ((20, 2), (40, 2), (88, 2)), 25, 806)),
    "resnet_blocks_40": ("cnn", lambda: resnet_blocks("resnet_blocks_40", 40, 104, 2, 807)),
    "dwcnn_v1_w0625_128": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_w0625_128", 128, 0.625, 808)),
    "dwcnn_v2_176": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2_176", 176, 809)),
    "transformer_seq72": ("transformer", lambda: transformer("transformer_seq72", 72, 240, 6, 2, 960, 810)),
    "transformer_seq176": ("transformer", lambda: transformer("transformer_seq176", 176, 384, 6, 1, 1536, 811)),
    "transformer_seq288": ("transformer", lambda: transformer("transformer_seq288", 288, 192, 4, 1, 768, 812)),
}
SETS = {"third": NETWORKS, "fourth": FOURTH, "fifth": FIFTH, "sixth": SIXTH, "seventh": SEVENTH, "eighth": EIGHTH}  # "<set>:<name>"
JUDGED = "eighth"  # the set the goal is judged on (with the apps): the one nothing was shaped on


def set_of(name: str) -> str:
    return next(k for k, v in SETS.items() if name in v)


def build(name: str):
    """The ONNX model of one network of a paired set (deterministic: seeded weights)."""
    return heldout.build(name, {k: v for nets in SETS.values() for k, v in nets.items()}, "paired held-out")


def build_all(sets: tuple[str, ...] = tuple(SETS)) -> dict:
    return {n: build(n) for k in sets for n in SETS[k]}


def measure_rounds(rounds: int = ROUNDS, threads: int = 1, progress=None, apps: tuple[str, ...] | None = None,
                   networks: tuple[str, ...] | None = None) -> dict:
    """``rounds`` rounds of (kernel micro-benchmarks, the apps' hot-loop f2, both sets' f2), one
    after the other (module docstring). JSON-able; cached in cpu_validation.json."""
    from nearfaas.hw.devices import host
    from nearfaas.twin.cpu_kernels import measure_kernels
    from nearfaas.twin.validate_apps import measure_apps_hot

    if rounds < 1:
        raise ValueError(f"rounds={rounds!r}: measure at least one round (3 by default)")
    say = progress or (lambda m: None)
    models = {n: build(n) for n in networks} if networks else build_all()
    out = []
    for r in range(1, rounds + 1):
        t0 = time.time()
        say(f"paired round {r}/{rounds}: host micro-benchmarks (clock, FMA, triad, one-op classes, MatMul grid)")
        bench = host.measure((threads,), progress=say, rounds=1)
        say(f"paired round {r}/{rounds}: kernel micro-benchmarks")
        kern = measure_kernels(threads, progress=say)
        say(f"paired round {r}/{rounds}: the apps' f2 (hot loop)")
        hot = measure_apps_hot(threads, apps, progress=say)
        say(f"paired round {r}/{rounds}: the paired sets ({', '.join(SETS)})")
        nets = heldout.measure(threads, models, progress=say)
        out.append({"round": r, "started": t0, "seconds": round(time.time() - t0, 1), "bench": bench, "kernels": kern, "apps": hot,
                    "networks": nets})
    return {"threads": threads, "form": FORM, "rounds": out,
            "digests": {n: heldout.digest(m) for n, m in models.items()},
            "protocol": "each round: host.measure (1 round), cpu_kernels.measure_kernels, then validate_apps.measure_apps_hot, then heldout.measure of "
                        f"the {' and '.join(SETS)} sets; a model's error = median over rounds of (runtime2 with that round's "
                        "kernels) / measured - 1"}


def inputs(cached: dict, threads: tuple[int, ...], rounds: int, do_measure: bool, say) -> tuple[dict | None, dict, dict, bool]:
    """What ``validate`` needs for the paired check: (the rounds' record or None, the built sets,
    their runtime graphs, changed). ``rounds`` > 0 measures them now (replacing the cached record);
    0 uses the cached one, if any, at a thread count being validated."""
    record = cached.get("held_out_paired_measured")
    changed = False
    if rounds:
        if not do_measure:
            raise ValueError("--paired-rounds measures; it cannot go with --no-measure")
        record, changed = measure_rounds(rounds, 1, say), True
    if record is None or int(record["threads"]) not in threads:
        return None, {}, {}, changed
    measured = set(record.get("digests") or {})
    models, rts = {}, {}
    for k, nets in SETS.items():
        ms = {n: build(n) for n in nets if n in measured}
        got, changed_k = heldout.runtime_graphs(ms, cached.get("runtime_graphs") or {}, k, say)
        models.update(ms)
        rts.update(got)
        changed = changed or changed_k
    return record, models, rts, changed


def evaluate(bench: dict, overhead: dict, rts: dict, record: dict, models: dict, geo_target: float, worst_target: float) -> dict:
    """Paired errors of the apps and of each set (module docstring), and, beside them, the same
    measurements predicted with the cached (unpaired) kernels, to show what pairing moves. The
    goal is judged on the apps and the ``JUDGED`` set. ``overhead``: the cached overhead record at
    the record's thread count (its kernels are the unpaired ones); ``rts``: runtime graphs with
    "zoo:<model>" and "<set>:<name>" keys."""
    from nearfaas.apps import APPS
    from nearfaas.twin import cpu_model as C
    from nearfaas.twin.cpu_kernels import graph_input_count
    from nearfaas.twin.validate_apps import predict_as_fed

    t = int(record["threads"])
    stale = [n for n, d in record.get("digests", {}).items() if n in models and heldout.digest(models[n]) != d]
    if stale:
        raise ValueError(f"the paired record measured other builds of {', '.join(stale)}; measure the rounds again")
    sks = {n: C.skeleton_of(m) for n, m in models.items()}
    net_rt = {n: {**(rts.get(f"{set_of(n)}:{n}") or {}), "inputs": graph_input_count(m)} for n, m in models.items()}

    def predict(kind: str, name: str, ov: dict, b: dict, m: dict) -> float:
        if kind == "app":  # measured through the app's f2 call path (validate_apps.measure_apps_hot), at the rows it fed
            model = APPS[name].model
            rt = rts.get(f"zoo:{model}")
            return predict_as_fed(C.predict, m, bench=b, threads=t, model=model, form=FORM, overhead=ov,
                                  rt={**rt, "call_path": "f2"} if rt else None)["seconds"]
        return C.predict(b, t, sks[name], FORM, overhead=ov, rt=net_rt[name])["seconds"]

    ratios: dict[tuple[str, str], list[float]] = {}
    measured: dict[tuple[str, str], list[float]] = {}
    fed: dict[tuple[str, str], dict] = {}
    for rnd in record["rounds"]:
        ov, b = {**overhead, "kernels": rnd["kernels"]}, rnd.get("bench") or bench  # rounds before the sixth attempt: cached host figures
        for kind, group in (("app", rnd["apps"]), ("net", rnd["networks"])):
            for name, m in group.items():
                if kind == "net" and name not in models:
                    continue
                ratios.setdefault((kind, name), []).append(predict(kind, name, ov, b, m) / float(m["value_s"]))
                measured.setdefault((kind, name), []).append(float(m["value_s"]))
                fed[(kind, name)] = m
    unpaired = {k: predict(k[0], k[1], overhead, bench, fed[k]) / statistics.median(v) - 1 for k, v in measured.items()}
    paired = {k: statistics.median(v) - 1 for k, v in ratios.items()}

    def summ(errors: dict, group: str) -> dict | None:
        e = {n: x for (k, n), x in errors.items() if (k == "app" if group == "apps" else k == "net" and set_of(n) == group)}
        if not e:
            return None
        st = heldout.summary_stats(e)
        over = sorted(k for k, x in e.items() if abs(x) > worst_target)
        return {"per_model_error": {k: round(x, 4) for k, x in e.items()}, **st, "over_worst_target": over,
                "pass": st["geomean_abs_error"] <= geo_target and not over}

    groups = ("apps", *SETS)
    res = {g: summ(paired, g) for g in groups}
    judged = (res["apps"], res[JUDGED])
    spread = {f"{k}:{n}": [round(min(v) - 1, 4), round(max(v) - 1, 4)] for (k, n), v in ratios.items()}
    return {"form": FORM, "threads": t, "rounds": len(record["rounds"]), "networks": sum(1 for k, _ in paired if k == "net"),
            "apps": res["apps"], **{f"{k}_set": res[k] for k in SETS}, "judged_on": ["apps", f"{JUDGED}_set"],
            "pass": all(x is not None and x["pass"] for x in judged),
            "error_range_over_rounds": spread,
            "unpaired": {**{("apps" if g == "apps" else f"{g}_set"): summ(unpaired, g) for g in groups},
                         "note": "the same measurements (median over rounds) predicted with the cached kernels, measured at another time"},
            "protocol": record.get("protocol", ""),
            "kernel_gemv_rate_bytes_s_by_round": [[round(g["bytes_s"]) for g in rnd["kernels"]["gemv"]] for rnd in record["rounds"]],
            "host_bench_paired": all("bench" in rnd for rnd in record["rounds"])}


__all__ = ["EIGHTH", "FIFTH", "FOURTH", "JUDGED", "SEVENTH", "SIXTH", "NETWORKS", "ROUNDS", "SETS", "build", "build_all", "evaluate", "inputs", "measure_rounds", "set_of"]
