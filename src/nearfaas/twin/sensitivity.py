"""The four sensitivity studies of the datacenter twin (DSCS §6.2's questions, our models).

* ``batch_sweep``: speedup vs the CPU at batch 1 … 64. Devices are timed on the model graph
  with its batch dimension fixed (weights read once per call, activations per item); the CPU
  baseline is MEASURED at batch 1 and 8 and read off the line through them elsewhere.
* ``tail_sweep``: each transfer of one component (PCIe host copies, P2P flash <-> drive DRAM,
  the network) takes its modelled time x X, X lognormal with median 1 and p99/p50 = r; the
  speedup at the end-to-end p50 and p99 (Monte Carlo, seeded). The other components stay at
  their modelled (mean) times, so each sweep isolates one part of the data path: this study
  always starts from the mean breakdowns (``latency="mean"``), its own tail model replacing
  the paper mode's p95 sampling.
* ``accelerated_functions``: 1 … 4 accelerated functions per app (f2 duplicated: each copy
  reads f1's tensor and writes a result, as f2 does), f3 unchanged.
* ``cold_start``: every stage pays a cold start: the runtime start MEASURED on the live
  platform (benchmarks/results/cold_start.json) and, for f2, loading its model: the weights
  (the built model file's size) over the link and PCIe (traditional) or P2P from the drive
  (near-storage), plus building the inference session (MEASURED here; x the A57 slowdown on
  ARM-hosted platforms; the DSA's program is compiled at deploy time).

Every result is MODELLED (built from the measured inputs named in its ``inputs``) and carries
``label``; ``opts`` (``baseline="paper" | "measured-here"`` and single choices) select the mode
as in ``e2e.end_to_end``. The batch, accelerated-functions and cold-start studies use the mode's
latency statistic (paper: each chain's p95 request, re-sampled for the longer chains). See
docs/results.md.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np

from . import platforms as P
from .e2e import MEASURED, MODELLED, P95_REQUESTS, Breakdown, Stage, Term, _net, _p2p, _pcie, _profiles, at_percentile, end_to_end, profile
from nearfaas.fanout import run_points
from nearfaas.stats import geomean

BATCHES = (1, 2, 4, 8, 16, 32, 64)
TAIL_RATIOS = (1, 2, 4, 8, 16)
TAIL_COMPONENTS = ("pcie", "p2p", "network")
ACCELERATED_FUNCTIONS = (1, 2, 3, 4)
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile
COLD_START_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "cold_start.json"
ARM_HOSTED = ("ns_arm", "ns_mobile_gpu")  # an A57 complex builds the session (TX2, NS-ARM)
LABEL = "modelled (twin sensitivity study; measured inputs named in inputs)"
POINTS = len(BATCHES) + len(TAIL_COMPONENTS) + len(ACCELERATED_FUNCTIONS) + 1  # all_studies' independent points


def _apps_platforms(apps, platforms) -> tuple[list[str], list[str]]:
    apps = list(P.APP_KEYS) if apps is None else [P.check_app(a) for a in apps]
    platforms = list(P.PLATFORMS) if platforms is None else [P.check_platform(p) for p in platforms]
    if not apps or not platforms:
        raise ValueError("a sensitivity study needs at least one app and one platform")
    return apps, platforms


def _check_values(name: str, values, lo: float, whole: bool = True) -> list:
    values = list(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and v != int(v)) or not v >= lo]
    if not values or bad:
        kind = "whole numbers" if whole else "numbers"
        raise ValueError(f"{name}={bad or values!r}: give one or more {kind} >= {lo}")
    return [int(v) if whole else float(v) for v in values]


def _speedups(bds: dict[str, dict[str, Breakdown]], platforms, apps) -> dict[str, float]:
    return {p: geomean(bds["cpu"][a].total_s / bds[p][a].total_s for a in apps) for p in platforms}


# ------------------------------------------------------------------ batch


def batch_sweep(batches=BATCHES, apps=None, platforms=None, link: str = "s3-like", **opts) -> dict:
    """Geomean speedup vs the CPU at each batch size, and items/s of one run-to-completion
    instance (batch / end-to-end latency)."""
    apps, platforms = _apps_platforms(apps, platforms)
    batches = _check_values("batches", batches, 1)
    every = list(dict.fromkeys(["cpu", *platforms]))
    speed, items = {p: {} for p in platforms}, {p: {} for p in every}
    for b in batches:
        bds = {p: {a: end_to_end(a, p, b, link, **opts) for a in apps} for p in every}
        for p, v in _speedups(bds, platforms, apps).items():
            speed[p][str(b)] = v
        for p in every:
            items[p][str(b)] = geomean(b / bds[p][a].total_s for a in apps)
    return {
        "label": LABEL,
        "batches": batches,
        "speedup_vs_cpu": speed,
        "items_per_s": items,
        "inputs": {
            "apps": apps,
            "link": link,
            "cpu": "measured at batch 1 and 8 (apps.json); other batches on the line through them (Profiles.compute_s)",
            "devices": "roofline / DSA timing of the graph at that batch (weights once per call); f1 and data bytes x batch",
        },
    }


# ------------------------------------------------------------------ tail latency


def _sample_totals(bd: Breakdown, component: str, ratio: float, n: int, rng: np.random.Generator) -> np.ndarray:
    vals = np.array([t.value_s for t in bd.terms])
    hit = np.array([t.component == component for t in bd.terms])
    fixed = float(vals[~hit].sum())
    if not hit.any() or ratio == 1:
        return np.full(n, fixed + float(vals[hit].sum()))
    sigma = math.log(ratio) / _Z99
    stretch = np.exp(sigma * rng.standard_normal((n, int(hit.sum()))))
    return fixed + stretch @ vals[hit]


def tail_sweep(
    ratios=TAIL_RATIOS, components=TAIL_COMPONENTS, apps=None, platforms=None, samples: int = 4000, seed: int = 0, link: str = "s3-like", **opts
) -> dict:
    """Speedup vs the CPU at the end-to-end p50 and p99 when one component's transfer times
    have a tail: {component: {platform: {ratio: {"p50", "p99"}}}} (geomeans over apps)."""
    apps, platforms = _apps_platforms(apps, platforms)
    ratios = _check_values("ratios", ratios, 1, whole=False)
    bad = [c for c in components if c not in TAIL_COMPONENTS]
    if bad or not components:
        raise ValueError(f"components={list(components)!r}: use one or more of {', '.join(TAIL_COMPONENTS)}")
    samples = _check_values("samples", [samples], 100)[0]
    out = {comp: _tail_component(ci, comp, ratios, apps, platforms, samples, seed, link, opts) for ci, comp in enumerate(components)}
    return _tail_result(ratios, out, apps, link, samples, seed)


def _tail_component(ci: int, comp: str, ratios: list, apps: list, platforms: list, samples: int, seed: int, link: str,
                    opts: dict) -> dict:
    """{platform: {ratio: {"p50", "p99"}}} of one swept component (the ``ci``-th): its draws come
    from generators seeded by (seed, ci, ratio, platform, app) only, so a component computes the
    same alone (a Ray task) as in the loop."""
    every = list(dict.fromkeys(["cpu", *platforms]))
    mean = {**opts, "latency": "mean"}  # this study's own tail model replaces the p95 sampling
    bds = {p: {a: end_to_end(a, p, 1, link, **mean) for a in apps} for p in every}
    out: dict = {p: {} for p in platforms}
    for ri, r in enumerate(ratios):
        # One generator per (component, ratio): adding a platform never changes another's numbers.
        pct = {}
        for pi, p in enumerate(every):
            for ai, a in enumerate(apps):
                rng = np.random.default_rng([seed, ci, ri, pi, ai])
                pct[p, a] = np.percentile(_sample_totals(bds[p][a], comp, r, samples, rng), [50, 99])
        for p in platforms:
            out[p][f"{r:g}"] = {
                "p50": geomean(pct["cpu", a][0] / pct[p, a][0] for a in apps),
                "p99": geomean(pct["cpu", a][1] / pct[p, a][1] for a in apps),
            }
    return out


def _tail_result(ratios: list, out: dict, apps: list, link: str, samples: int, seed: int) -> dict:
    return {
        "label": LABEL + "; Monte Carlo",
        "ratios": ratios,
        "components": out,
        "inputs": {
            "apps": apps,
            "link": link,
            "samples": samples,
            "seed": seed,
            "model": "each transfer of the swept component takes its modelled time x X, X ~ lognormal(median 1, p99/p50 = ratio), "
            "independent per transfer; other terms at their modelled (mean) values (latency='mean' in either mode)",
        },
    }


# ------------------------------------------------------------------ accelerated functions


def with_accelerated_functions(bd: Breakdown, k: int) -> Breakdown:
    """``bd`` with f2 run ``k`` times in a row (the copies f2.2 … f2.k before f3)."""
    k = _check_values("accelerated functions", [k], 1)[0]
    f1, f2, *rest = bd.stages
    copies = [Stage(f"f2.{i}", f2.where, copy.deepcopy(f2.terms)) for i in range(2, k + 1)]
    out = copy.copy(bd)
    out.stages = [f1, f2, *copies, *rest]
    out.inputs = {**bd.inputs, "accelerated_functions": k}
    return out


def accelerated_functions(counts=ACCELERATED_FUNCTIONS, apps=None, platforms=None, link: str = "s3-like", **opts) -> dict:
    """Geomean speedup vs the CPU with 1 … 4 accelerated functions per app, and the share of
    the end-to-end time spent moving data (network, PCIe, P2P)."""
    apps, platforms = _apps_platforms(apps, platforms)
    counts = _check_values("counts", counts, 1)
    every = list(dict.fromkeys(["cpu", *platforms]))
    base = {p: {a: end_to_end(a, p, 1, link, **{**opts, "latency": "mean"}) for a in apps} for p in every}
    p95 = P.resolve(opts.get("baseline", P.PAPER), **{k: v for k, v in opts.items() if k in P.OPTIONS})["latency"] == "p95"

    def chain(bd, k):  # the longer chain at the mode's statistic (its own p95 request)
        more = with_accelerated_functions(bd, k)
        return at_percentile(more, requests=opts.get("requests", P95_REQUESTS), seed=opts.get("request_seed", 1)) if p95 else more

    speed, share = {p: {} for p in platforms}, {p: {} for p in every}
    for k in counts:
        bds = {p: {a: chain(base[p][a], k) for a in apps} for p in every}
        for p, v in _speedups(bds, platforms, apps).items():
            speed[p][str(k)] = v
        for p in every:
            moved = [sum(v for c, v in bds[p][a].by_component().items() if c in ("network", "pcie", "p2p")) / bds[p][a].total_s for a in apps]
            share[p][str(k)] = sum(moved) / len(moved)
    return {
        "label": LABEL,
        "counts": counts,
        "speedup_vs_cpu": speed,
        "data_movement_share": share,
        "inputs": {"apps": apps, "link": link, "model": "f2 duplicated k times (each copy reads f1's tensor and writes its result)"},
    }


# ------------------------------------------------------------------ cold starts


def runtime_start(path: str | None = None) -> tuple[float, str]:
    """Seconds to start a function's runtime with no pre-warmed interpreter (MEASURED)."""
    p = Path(path) if path else COLD_START_FILE
    try:
        s = json.loads(p.read_text())["systems"]["prewarm-off"]["cold_start_p50_ms"] / 1e3
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{p}: no systems.prewarm-off.cold_start_p50_ms ({e}); run benchmarks/cold_start.py") from e
    return s, f"{p.name}: prewarm-off cold_start_p50 {s * 1e3:.1f} ms (fresh interpreter + runtime, measured on this machine)"


def cold_terms(app: str, platform: str, stage: str, link: str, runtime: tuple[float, str]) -> list[Term]:
    """What a cold instance of ``stage`` pays before its first call."""
    terms = [Term("cold: runtime start", runtime[0], MEASURED, runtime[1], "stack")]
    if stage != "f2":
        return terms

    e = profile(app)
    weights = float(e["model_file_bytes"])
    session = float(e["load"]["cpu_s"])
    src = f"apps.json load.cpu_s {session * 1e3:.1f} ms: ONNX Runtime session of the full model, measured on this machine"
    if platform in P.NEAR_STORAGE:
        terms.append(_p2p("cold: weights (flash -> drive DRAM)", weights))
    else:
        terms.append(_net(P.link(link), "cold: weights (remote storage)", weights, 1))
        if P.host_link_bps(platform) is not None:
            terms.append(_pcie(platform, "cold: weights host -> device", weights))
    if platform in ARM_HOSTED:
        k = P.ARM_VS_THIS_CORE.value
        terms.append(Term("cold: build session", session * k, MODELLED, f"{src} x {k:g} ({P.ARM_VS_THIS_CORE.source})", "host_cpu"))
    elif platform != "dscs":
        terms.append(Term("cold: build session", session, MEASURED, src, "host_cpu"))
    return terms


def cold(bd: Breakdown, runtime: tuple[float, str] | None = None) -> Breakdown:
    """``bd`` with every stage starting cold (its cold-start terms first)."""
    runtime = runtime or runtime_start()
    out = copy.copy(bd)
    out.stages = [
        Stage(s.name, s.where, cold_terms(bd.app, bd.platform, s.name.split(".")[0], bd.link, runtime) + s.terms)
        for s in bd.stages
    ]
    out.inputs = {**bd.inputs, "cold": True}
    return out


def cold_start(apps=None, platforms=None, link: str = "s3-like", cold_start_path: str | None = None, **opts) -> dict:
    """Geomean speedup vs the CPU with warm and with cold instances (CPU cold vs CPU cold), the
    end-to-end latency of each, and each platform's cold-start penalty per app."""
    apps, platforms = _apps_platforms(apps, platforms)
    runtime = runtime_start(cold_start_path)
    every = list(dict.fromkeys(["cpu", *platforms]))
    warm = {p: {a: end_to_end(a, p, 1, link, **opts) for a in apps} for p in every}
    chilled = {p: {a: cold(warm[p][a], runtime) for a in apps} for p in every}
    return {
        "label": LABEL,
        "speedup_vs_cpu": {"warm": _speedups(warm, platforms, apps), "cold": _speedups(chilled, platforms, apps)},
        "latency_s": {
            kind: {p: geomean(bds[p][a].total_s for a in apps) for p in every} for kind, bds in (("warm", warm), ("cold", chilled))
        },
        "cold_penalty_s": {p: {a: chilled[p][a].total_s - warm[p][a].total_s for a in apps} for p in every},
        "inputs": {
            "apps": apps,
            "link": link,
            "runtime_start": {"value_s": runtime[0], "label": MEASURED, "source": runtime[1]},
            "model_bytes": {a: profile(a)["model_file_bytes"] for a in apps},
            "profiles": str(_profiles().path),
            "model": "every stage starts a runtime; f2 also loads its model: weights over the link (+PCIe) or P2P, and "
            "builds its session (measured; x A57 slowdown on ARM hosts; none on the DSA, compiled at deploy)",
        },
    }


def all_studies(apps=None, platforms=None, link: str = "s3-like", samples: int = 4000, seed: int = 0, ray_address: str | None = None,
                progress=None, **opts) -> dict:
    """The four studies as ``results.json``'s ``sensitivity`` block.

    Their independent points (each batch size, each tail component, each count of accelerated
    functions, the cold-start study) run here one after another, or as Ray tasks with
    ``ray_address`` (host:port or ``auto``; ``nearfaas.fanout``): each point is a pure function of
    its inputs (the tail draws are seeded per component, ratio, platform and app), and the parts
    are joined in the same order, so both give the same block. ``progress``: advance(n) as
    points finish (or True for a bar)."""
    apps_, _ = _apps_platforms(apps, platforms)
    samples = _check_values("samples", [samples], 100)[0]
    points = ([("batch", b) for b in BATCHES] + [("tail", (ci, c)) for ci, c in enumerate(TAIL_COMPONENTS)]
              + [("accelerated_functions", k) for k in ACCELERATED_FUNCTIONS] + [("cold_start", None)])
    shared = {"apps": apps, "platforms": platforms, "link": link, "samples": samples, "seed": seed, "opts": opts}
    parts = run_points(study_point, points, shared=shared, ray_address=ray_address, progress=progress,
                       description="sensitivity studies")
    got = dict(zip(points, parts, strict=True))
    batch = [got["batch", b] for b in BATCHES]
    accel = [got["accelerated_functions", k] for k in ACCELERATED_FUNCTIONS]
    return {
        "batch": {**batch[0], "batches": list(BATCHES),
                  "speedup_vs_cpu": _joined(r["speedup_vs_cpu"] for r in batch), "items_per_s": _joined(r["items_per_s"] for r in batch)},
        "tail": _tail_result(list(map(float, TAIL_RATIOS)), {c: got["tail", (ci, c)] for ci, c in enumerate(TAIL_COMPONENTS)},
                             apps_, link, samples, seed),
        "accelerated_functions": {**accel[0], "counts": list(ACCELERATED_FUNCTIONS),
                                  "speedup_vs_cpu": _joined(r["speedup_vs_cpu"] for r in accel),
                                  "data_movement_share": _joined(r["data_movement_share"] for r in accel)},
        "cold_start": got["cold_start", None],
    }


def _joined(blocks) -> dict:
    """{platform: {key: value}} blocks of single-point runs, merged in order."""
    out: dict = {}
    for block in blocks:
        for p, row in block.items():
            out.setdefault(p, {}).update(row)
    return out


def study_point(shared: dict, point: tuple) -> dict:
    """One point of ``all_studies``: a batch size, a tail component, a count of accelerated
    functions, or the cold-start study (module level, so Ray can run it on a worker)."""
    kind, arg = point
    apps, platforms, link, opts = shared["apps"], shared["platforms"], shared["link"], shared["opts"]
    if kind == "batch":
        return batch_sweep([arg], apps=apps, platforms=platforms, link=link, **opts)
    if kind == "tail":
        ci, comp = arg
        apps_, platforms_ = _apps_platforms(apps, platforms)
        ratios = _check_values("ratios", TAIL_RATIOS, 1, whole=False)
        return _tail_component(ci, comp, ratios, apps_, platforms_, shared["samples"], shared["seed"], link, opts)
    if kind == "accelerated_functions":
        return accelerated_functions([arg], apps=apps, platforms=platforms, link=link, **opts)
    if kind == "cold_start":
        return cold_start(apps=apps, platforms=platforms, link=link, **opts)
    raise ValueError(f"unknown sensitivity point {point!r}")
