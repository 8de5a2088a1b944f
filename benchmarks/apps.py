#!/usr/bin/env python3
"""Per-stage CPU time of the eight applications at full size, batch 1 and 8 (measured).

Each application's model is built at size `full` (cached) and its three stages are run in this
process, as a worker calls them (`nearfaas.apps.profiles.LocalApp`: the stage code, the
environment `stack_for` gives each function, an in-memory object client, f2's model loaded once
with ONE intra-op thread, no webhook), on inputs from `nearfaas.apps.make_input(key, seed)`.
For every stage call both CPU time (`time.process_time`) and wall time are taken around the
stage function alone.

- f1 pre-processing, batch 1: the seed-0 input; batch 8: the inputs of seeds 0..7 processed
  one after another (total and per item).
- f2 inference, batch 1: f1's seed-0 tensor; batch 8: the 8 tensors stacked on the batch axis
  in one call (a model whose graph has a fixed batch of 1 runs 8 calls instead; the JSON says
  so under `fixed_batch_1`, `runs`).
- f3 notification, batch 1 (WEBHOOK_URL unset; the record goes to the in-memory store).

One chain call first warms everything up (kept as `first_call`, not in the medians). Batch 1
repeats 5 times when a call takes under a second, else 3 (median and min reported); batch 8
repeats 3 times when 8 batch-1 calls would take at most 5 s, 2 up to 20 s, else once (recorded
as `repeats`). One model is loaded at a time and freed before the next (GPT-2 XL: ~6.3 GB).

The result, `benchmarks/results/apps.json` (machine facts inside), is the profile that
`nearfaas.apps.profiles.load()` reads for the twin and the `auto` placement policy. With
`--apps`, the measured apps replace their entries in the existing file and the others are
kept. `--quick` runs the tiny models (a smoke run) and writes only where `--out` says.

    python benchmarks/apps.py [--apps a,b] [--quick] [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import os

# One thread everywhere, as a worker runs f2 (ORT's intra-op threads are set per session; this
# keeps NumPy's BLAS, which f1 and the post-processing may call, on one thread too).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.pop("WEBHOOK_URL", None)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.apps import APPS, make_input  # noqa: E402
from nearfaas.apps.profiles import LABEL, LocalApp, StageRun, stack_payloads  # noqa: E402
from nearfaas.bench.results import machine_facts, results_dir, write_result  # noqa: E402
from nearfaas.stats import median  # noqa: E402
from nearfaas.models import build, cached_path, default_cache_dir, param_count  # noqa: E402

BATCH = 8
STEPS = ("build", "load", "warm-up", "f1 batch 1", "f1 batch 8", "f2 batch 1", "f2 batch 8", "f3 batch 1")


def repeats_batch1(first_wall_s: float, quick: bool) -> int:
    return 3 if quick or first_wall_s >= 1.0 else 5


def repeats_batch8(batch1_wall_s: float, quick: bool) -> int:
    estimate = BATCH * batch1_wall_s
    if quick:
        return 1
    return 3 if estimate <= 5.0 else 2 if estimate <= 20.0 else 1


def r6(x: float) -> float:
    return round(float(x), 6)


def one_call(run: StageRun) -> dict:
    return {"cpu_s": r6(run.cpu_s), "wall_s": r6(run.wall_s)}


def batch1(runs: list[StageRun]) -> dict:
    cpu, wall = [r.cpu_s for r in runs], [r.wall_s for r in runs]
    out = {"cpu_s": r6(median(cpu)), "wall_s": r6(median(wall)), "cpu_min_s": r6(min(cpu)), "wall_min_s": r6(min(wall)),
           "repeats": len(runs), "cpu_samples_s": [r6(x) for x in cpu], "wall_samples_s": [r6(x) for x in wall]}
    if runs[0].output is not None:
        out["output_bytes"] = len(runs[0].output)
    model = [r.extra["model_wall_s"] for r in runs if r.extra.get("model_wall_s") is not None]
    if model:
        out["model_wall_s"] = r6(median(model))  # of wall_s, the time inside the ONNX Runtime session
    return out


def batch8(totals: list[tuple[float, float]], **extra) -> dict:
    cpu, wall = [t[0] for t in totals], [t[1] for t in totals]
    total = {"cpu_s": r6(median(cpu)), "wall_s": r6(median(wall))}
    return {"total": total, "per_item": {k: r6(v / BATCH) for k, v in total.items()}, "repeats": len(totals),
            "cpu_samples_s": [r6(x) for x in cpu], "wall_samples_s": [r6(x) for x in wall], **extra}


class Steps:
    """The progress bar: one step per (app, phase)."""

    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def start(self, key: str, step: str, note: str = "") -> None:
        self.bar.update(self.task, description=f"{key}: {step}{note}")

    def done(self) -> None:
        self.bar.advance(self.task)


def pre_batch8(app: LocalApp, inputs: list, repeats: int) -> tuple[list, list, list]:
    """f1 on the BATCH inputs one after another, ``repeats`` times: (cpu, wall) totals per repeat,
    and the last repeat's payloads and answers (f2's batch-8 inputs)."""
    totals, payloads, answers = [], [], []
    for _ in range(repeats):
        runs = [app.pre(data, name=f"seed-{seed}") for seed, (data, _, _) in enumerate(inputs)]
        totals.append((sum(r.cpu_s for r in runs), sum(r.wall_s for r in runs)))
        payloads, answers = [r.output for r in runs], [r.answer for r in runs]
    return totals, payloads, answers


def infer_batch8(app: LocalApp, payloads: list, answers: list, stacked: bytes | None, repeats: int) -> tuple[list, list]:
    """f2 on the batch, ``repeats`` times: one call on ``stacked``, or, for a graph with a fixed
    batch of 1 (``stacked`` None), one call per payload. (cpu, wall) totals and model wall time."""
    totals, model = [], []
    for _ in range(repeats):
        if stacked is None:
            runs = [app.infer(p, a) for p, a in zip(payloads, answers, strict=True)]
        else:
            runs = [app.infer(stacked, answers[0])]
        totals.append((sum(r.cpu_s for r in runs), sum(r.wall_s for r in runs)))
        model.append(sum(r.extra.get("model_wall_s") or 0.0 for r in runs))
    return totals, model


def measure_app(key: str, size: str, cache: Path, steps: Steps, quick: bool) -> dict:
    card = APPS[key]
    f1, f2, f3 = card.functions
    steps.start(key, "build")
    cached = cached_path(card.model, size, cache).is_file()
    t0 = time.perf_counter()
    model_path = build(card.model, size, cache_dir=cache)
    build_s = time.perf_counter() - t0
    file_bytes = sum(p.stat().st_size for p in model_path.parent.iterdir() if p.is_file())
    params = param_count(card.model, size)
    inputs = [make_input(key, seed) for seed in range(BATCH)]
    steps.done()

    steps.start(key, "load")
    app = LocalApp(key, model_path, size, threads=1)
    steps.done()
    try:
        steps.start(key, "warm-up")
        first = app.chain(inputs[0][0])
        fixed = app.fixed_batch_one
        steps.done()

        steps.start(key, "f1 batch 1")
        pre1 = [app.pre(inputs[0][0]) for _ in range(repeats_batch1(first[0].wall_s, quick))]
        steps.done()

        n8 = repeats_batch8(median([r.wall_s for r in pre1]), quick)
        steps.start(key, "f1 batch 8", f" ×{n8}")
        pre8_totals, payloads, pre8_answers = pre_batch8(app, inputs, n8)
        steps.done()

        steps.start(key, "f2 batch 1")
        payload1, answer1 = pre1[0].output, pre1[0].answer
        infer1 = [app.infer(payload1, answer1) for _ in range(repeats_batch1(first[1].wall_s, quick))]
        steps.done()

        n8 = repeats_batch8(median([r.wall_s for r in infer1]), quick)
        steps.start(key, "f2 batch 8", f" ×{n8}")
        stacked = None if fixed else stack_payloads(payloads)
        infer8_totals, model8 = infer_batch8(app, payloads, pre8_answers, stacked, n8)
        steps.done()

        steps.start(key, "f3 batch 1")
        result1, result_answer = infer1[0].output, infer1[0].answer
        notify1 = [app.notify(result1, result_answer) for _ in range(repeats_batch1(first[2].wall_s, quick))]
        steps.done()

        f2_mode = (f"{BATCH} calls, one input each: the model's graph has a fixed batch of 1" if fixed
                   else f"one call on the {BATCH} tensors stacked on the batch axis")
        entry = {
            "title": card.title, "model": card.model, "size": size, "params": params, "functions": list(card.functions),
            "model_file_bytes": file_bytes, "build": {"seconds": r6(build_s), "cached": cached},
            "load": {"cpu_s": r6(app.load_cpu_s), "wall_s": r6(app.load_wall_s)},
            "input": {"kind": card.input_kind, "content_type": inputs[0][1], "bytes": [len(d) for d, _, _ in inputs],
                      "seeds": list(range(BATCH))},
            "fixed_batch_1": fixed,
            "stages": {
                "f1": {"function": f1, "role": "pre", "first_call": one_call(first[0]), "batch1": batch1(pre1),
                       "batch8": batch8(pre8_totals, mode=f"the {BATCH} inputs (seeds 0..{BATCH - 1}) one after another",
                                        output_bytes=sum(len(p) for p in payloads))},
                "f2": {"function": f2, "role": "infer", "first_call": one_call(first[1]), "batch1": batch1(infer1),
                       "batch8": batch8(infer8_totals, mode=f2_mode, runs=BATCH if fixed else 1, fixed_batch_1=fixed,
                                        model_wall_s=r6(median(model8)), input_bytes=len(stacked) if stacked else None,
                                        summary_covers="the first item (f2 summarises item 0 of a batch)")},
                "f3": {"function": f3, "role": "notify", "first_call": one_call(first[2]), "batch1": batch1(notify1),
                       "webhook": "none (WEBHOOK_URL unset); the record is written to an in-memory object store"},
            },
        }
        return entry
    finally:
        app.close()
        del app
        gc.collect()


def print_table(apps: dict, out) -> None:
    print(f"{'app':<19} {'model':<13} {'f1 ms':>8} {'f2 ms':>10} {'f3 ms':>7} {'f2 b8 ms':>10} {'f2 b8/item':>10}  cpu/wall f2",
          file=out)
    for key, a in apps.items():
        s = a["stages"]
        f2b8 = s["f2"]["batch8"]
        print(f"{key:<19} {a['model']:<13} {s['f1']['batch1']['cpu_s'] * 1e3:>8.2f} {s['f2']['batch1']['cpu_s'] * 1e3:>10.1f} "
              f"{s['f3']['batch1']['cpu_s'] * 1e3:>7.2f} {f2b8['total']['cpu_s'] * 1e3:>10.1f} {f2b8['per_item']['cpu_s'] * 1e3:>10.1f}"
              f"  {s['f2']['batch1']['cpu_s'] / max(s['f2']['batch1']['wall_s'], 1e-9):.2f}", file=out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", default="", help="comma-separated app keys (default: all eight)")
    parser.add_argument("--quick", action="store_true", help="tiny models, fewer repeats: a smoke run (writes only with --out)")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: nearfaas.models.default_cache_dir())")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: benchmarks/results/apps.json)")
    args = parser.parse_args()
    keys = [k.strip().replace("-", "_") for k in args.apps.split(",") if k.strip()] or list(APPS)
    unknown = [k for k in keys if k not in APPS]
    if unknown:
        parser.error(f"unknown app {', '.join(unknown)}; the apps are {', '.join(APPS)}")
    size = "tiny" if args.quick else "full"
    cache = args.cache or default_cache_dir()
    machine = machine_facts()
    from importlib.metadata import version

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.perf_counter()
    results: dict[str, dict] = {}
    with Progress(TextColumn("{task.description:<34}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not sys.stderr.isatty()) as bar:  # fmt: skip
        steps = Steps(bar, bar.add_task("starting", total=len(keys) * len(STEPS)))
        for key in keys:
            t0 = time.perf_counter()
            results[key] = measure_app(key, size, cache, steps, args.quick)
            s = results[key]["stages"]
            bar.console.print(f"{key}: f1 {s['f1']['batch1']['cpu_s'] * 1e3:.2f} ms, f2 {s['f2']['batch1']['cpu_s'] * 1e3:.1f} ms "
                              f"(batch 8: {s['f2']['batch8']['total']['cpu_s'] * 1e3:.1f} ms), f3 {s['f3']['batch1']['cpu_s'] * 1e3:.2f} ms "
                              f"CPU; {time.perf_counter() - t0:.1f} s", highlight=False, soft_wrap=True)
    wall = time.perf_counter() - started
    print_table(results, sys.stdout)
    print(f"measured {len(results)} apps at size {size} in {wall:.1f} s")

    result = {"benchmark": "apps", "label": LABEL, "size": size, "batch": BATCH, "machine": machine,
              "settings": {"intra_op_threads": 1, "inter_op_threads": 1, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                           "onnxruntime": version("onnxruntime"), "numpy": version("numpy"), "pillow": version("pillow"),
                           "quick": args.quick, "seconds": round(wall, 1)},
              "apps": results}
    if args.quick and args.out is None:
        print("--quick: nothing written (give --out FILE to keep the result)")
        return 0
    target = args.out or results_dir() / "apps.json"
    if set(keys) != set(APPS) and target.is_file():  # a partial run refreshes its apps and keeps the others
        try:
            previous = json.loads(target.read_text())
        except ValueError:
            previous = {}
        if previous.get("size") == size and isinstance(previous.get("apps"), dict):
            merged = {k: v for k, v in previous["apps"].items() if k in APPS}
            merged.update(results)
            result["apps"] = {k: merged[k] for k in APPS if k in merged}
            result["merged_from_previous"] = sorted(set(merged) - set(results))
    if args.out is None:
        path = write_result("apps", result)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
        path = args.out
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
