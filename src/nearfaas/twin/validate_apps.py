"""The apps' measured f2 for ``nearfaas.twin.validate``: one-off calls (as benchmarks/apps.py) and
hot-loop calls (as the held-out networks), and the fresh held-out set's inputs.

Why two measurements of the same stage: ``benchmarks/results/apps.json`` times f2 by ONE call per
request with the handler's work (tensor decode, summary, output write) in between, so each call
starts with caches the handler has disturbed, on a machine other work shares. The held-out
networks are timed in a hot loop by thread CPU time. A roofline of the network models neither the
cold caches nor the handler, so the apps' error is taken on the hot-loop figure
(``measure_apps_hot``: the same wrapper and estimator as ``heldout.measure``), and the one-off
figures are reported beside it: their difference is the one-off call cost.

    hot = measure_apps_hot(1)              # {app: {"value_s": median thread CPU time, ...}}
    one_off = measure_f2(1)                # {app: {"value_s": median of one-off calls, ...}}

Known caveats: the hot loop feeds the app's real seed-0 f1 output, so data-dependent work (none in
these graphs) would be the seed's; ``measure_apps_hot`` builds every full-size model (gpt2_xl: 6 GB).
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

HOT_REPS = (11, 5)  # hot-loop repeats: under / from HOT_SLOW_S per call (a multi-second call needs fewer for a stable median)
HOT_SLOW_S = 0.5


def _each_app(threads: int, keys: Iterable[str] | None, cache: Path | None, say, what: str) -> Iterator:
    """(key, card, app) for each app: its full-size model built (cached) and loaded in a
    ``LocalApp`` at ``threads``, closed and collected before the next loads (two full-size models
    at once would not fit beside gpt2_xl). Use under ``contextlib.closing``, so that an error
    closes the app in hand at once."""
    from nearfaas.apps import APPS
    from nearfaas.apps.profiles import LocalApp
    from nearfaas.models import build, default_cache_dir

    for key in keys or APPS:
        card = APPS[key]
        say(f"{what} at {threads} thread(s): {key} (build/load {card.model})")
        path = build(card.model, "full", cache_dir=cache or default_cache_dir())
        app = LocalApp(key, path, "full", threads=threads)
        try:
            yield key, card, app
        finally:
            app.close()
            del app
            gc.collect()


def measure_apps_hot(threads: int = 1, keys: Iterable[str] | None = None, cache: Path | None = None, progress=None) -> dict:
    """f2 of each app in a hot loop, as the held-out networks are measured: the app's own f2 code
    path (``Inference._run``: ``nearfaas.models.runtime.InferenceSession`` with its feed checks, a
    fixed-batch-1 model row by row) on the app's seed-0 f1 output, timed by ``host_bench._time_run``
    (1 thread: median thread CPU time of the repeats; more: best single-run wall time)."""
    from nearfaas.apps import make_input, tensors
    from nearfaas.hw.devices.host_bench import _time_run

    out = {}
    with contextlib.closing(_each_app(threads, keys, cache, progress or (lambda m: None), "hot-loop f2")) as apps:
        for key, card, app in apps:
            pre = app.pre(make_input(key, 0)[0])
            inf = app.inference
            feeds = inf._feeds(tensors.load(pre.output)[0])
            wanted = [n for n in inf.card.outputs if n in inf.session.output_names] or None
            t0 = time.perf_counter()
            inf._run(feeds, wanted)
            one = time.perf_counter() - t0
            reps = HOT_REPS[0] if one < HOT_SLOW_S else HOT_REPS[1]
            load0 = list(os.getloadavg())
            r = _time_run(lambda inf=inf, f=feeds, w=wanted: inf._run(f, w), 0.01, reps, threads)
            out[key] = {"model": card.model, "threads": threads, **rows_fed(inf, feeds), "value_s": r["value_s"], "estimator": r["estimator"], "inner": r["inner"],
                        "reps": r["reps"], "wall_median_s": r["median_s"], "wall_best_s": r["best_s"], "first_call_s": round(one, 6),
                        "loadavg_before": load0, "loadavg_after": list(os.getloadavg())}
    return out


def rows_fed(inf, feeds: dict) -> dict:
    """What one f2 call runs: ``batch`` rows per ONNX Runtime call, ``calls`` calls (``Inference._run``
    feeds a batch-1 model row by row). An app's seed-0 input can hold several rows (credit_risk: 6
    applicants), and the model is predicted at the batch it ran (seventh attempt; before it, at 1)."""
    first = next(iter(feeds.values()))
    rows = int(first.shape[0]) if getattr(first, "ndim", 0) >= 1 else 1
    if len(feeds) == 1 and inf._fixed_batch_one() and rows > 1:
        return {"batch": 1, "calls": rows}
    return {"batch": rows, "calls": 1}


def predict_as_fed(predict: Callable[..., dict], entry: dict, **kw) -> dict:
    """``predict(batch=..., **kw)`` at the rows an app's measurement ran (``rows_fed``; a record from
    before the seventh attempt says nothing: batch 1, one call), its seconds times the calls."""
    batch, calls = int(entry.get("batch", 1)), int(entry.get("calls", 1))
    p = predict(batch=batch, **kw)
    return {**p, "seconds": p["seconds"] * calls, "batch": batch, "calls": calls}


def measure_f2(threads: int, keys: Iterable[str] | None = None, cache: Path | None = None, progress=None,
               repeats: tuple[int, int] | None = None) -> dict:
    """f2 of each app at ``threads`` intra-op threads, measured here as benchmarks/apps.py does it
    (full-size model, ``LocalApp``, seed-0 input through f1, one warm chain, then f2 repeated
    ``repeats`` = (under 1 s, from 1 s) times: (7, 5) at 1 thread, (11, 9) at more). ``value_s``: at 1 thread the median (as apps.json), at more threads
    the BEST repeat (a multi-thread run needs both vCPUs at once; on this shared machine any other
    process stretches it, so the fastest repeat is the estimate of the uncontended time)."""
    from nearfaas.apps import make_input, tensors

    out = {}
    with contextlib.closing(_each_app(threads, keys, cache, progress or (lambda m: None), "f2")) as apps:
        for key, card, app in apps:
            load0 = list(os.getloadavg())
            data = make_input(key, 0)[0]
            first = app.chain(data)
            pre = app.pre(data)
            fed = rows_fed(app.inference, app.inference._feeds(tensors.load(pre.output)[0]))
            fast, slow = repeats or ((7, 5) if threads == 1 else (11, 9))
            n = slow if first[1].wall_s >= 1.0 else fast
            runs = [app.infer(pre.output, pre.answer) for _ in range(n)]
            model = [float(r.extra["model_wall_s"]) for r in runs]
            wall = [r.wall_s for r in runs]
            cpu = [r.cpu_s for r in runs]
            pick = statistics.median if threads == 1 else min
            out[key] = {"model": card.model, "threads": threads, **fed, "repeats": n,
                        "value_s": round(pick(model), 6), "stage_value_s": round(pick(wall), 6),
                        "estimator": "median" if threads == 1 else "best of the repeats",
                        "model_wall_s": round(statistics.median(model), 6), "model_wall_min_s": round(min(model), 6),
                        "stage_wall_s": round(statistics.median(wall), 6), "stage_cpu_s": round(statistics.median(cpu), 6),
                        "model_wall_samples_s": [round(x, 6) for x in model], "loadavg_before": load0,
                        "loadavg_after": list(os.getloadavg())}
    return out




def fresh_inputs(threads: tuple[int, ...], cached: dict, do_measure: bool, say, names: tuple[str, ...] | None = None
                 ) -> tuple[dict, dict, dict, bool]:
    """The fresh held-out set (``heldout_fresh``): ORT's optimised graphs ("fresh:<name>", derived,
    no timing), its measured f2 per thread (``held_out_fresh_measured`` in the cache; a measurement
    of another build of a network is stale and measured again), and the built models:
    (runtime graphs to add, measured, models, changed). ValueError when a measurement is missing
    and not ``do_measure``."""
    from nearfaas.twin import heldout, heldout_fresh

    names = tuple(names or heldout_fresh.NETWORKS)
    models = {n: heldout_fresh.build(n) for n in names}
    rts, changed = heldout.runtime_graphs(models, cached.get("runtime_graphs") or {}, "fresh", say)
    held = {t: dict(v) for t, v in (cached.get("held_out_fresh_measured") or {}).items()}
    for t in threads:
        have = held.setdefault(str(t), {})
        missing = {n: m for n, m in models.items() if (have.get(n) or {}).get("digest") != heldout.digest(m)}
        if missing:
            if not do_measure:
                raise ValueError(f"no {t}-thread measurement of the fresh held-out networks {', '.join(missing)}; run validate(measure=True)")
            have.update(heldout.measure(t, missing, progress=say))
            changed = True
    return rts, held, models, changed
