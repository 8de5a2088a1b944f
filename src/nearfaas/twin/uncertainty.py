"""Uncertainty of the twin's headline ratios (issue 15, item 4): every headline number with the
range produced by sweeping the constants marked ``assumption`` / ``mem`` over their documented
``sweep`` ranges (Monte Carlo, seeded), so a reader sees which conclusions are robust.

``uncertain_constants(targets=None) -> [Constant(module, name, sourced)]``: the swept constants.
``headline_ranges(evaluate=None, samples=SAMPLES, seed=1, modules=None) -> dict``: per headline
number nominal, p5, p50, p95, min, max and ``robust`` (ratio > 1 over the whole range); the
constants swept (with their ranges and distribution), those that do not reach the model, those
fixed for want of a range, a one-at-a-time tornado table, and the seed. Deterministic for a seed.
``python -m nearfaas.twin.uncertainty [samples] [seed]`` prints the geomean table.

Where the constants are found (``targets``: modules, or ``(label, object)`` pairs):

* module globals that are ``Sourced`` (twin.platforms, twin.power, twin.cost);
* ``Sourced`` inside module-level dicts and dataclass instances, two levels deep
  (``hw.memory.MEMORY[k].pj_per_bit``);
* the LIVE device records the twin reads: ``twin.platforms.device(p)`` is cached, so its
  ``Device`` objects (their ``specs`` dict and the ``launch_s`` / ``driver_s`` /
  ``active_power_fraction`` fields) are the ones the model uses; the catalog module itself keeps
  no ``Sourced`` at module level (they are built inside its builder functions).

Not covered (document, do not pretend): the roofline ``Efficiency`` fractions of the catalog
(plain floats with their range only in prose), ``Sourced`` built inside functions and not kept,
constants whose range is written in the source text but not in ``sweep`` (they are listed as
"fixed (no documented range)"), and constants with a ``sweep`` whose status is ``src`` or
``derived`` (e.g. ``power.CPU_SOCKET_SHARE``): those are listed under ``fixed`` with the reason.

Substitution: a constant is one ``Sourced`` object; every place it was found (module attribute,
dict entry, dataclass field -- frozen dataclasses through ``object.__setattr__``) is swapped to
a copy with the drawn value and restored in a ``finally``, even when ``evaluate`` raises.
A value read at import into another structure (``hw.energy.DRAM_PJ_PER_BIT`` copies
``hw.memory``), or a result kept in a ``functools.cache`` (``platforms.dsa_f2``), is not reached
by the swap. The one-at-a-time pass detects it: each constant is set to its range ends with a
read-tracing copy; a constant that moves no headline is reported as "not reaching the model"
(never read: captured at import or cached, or on a path this evaluation does not take) or
"read but moves no headline", and is not counted as swept. Only constants that move a headline
are sampled.

Distributions: the nominal is each constant's median: half of its draws fall uniformly between
``lo`` and the nominal, half between the nominal and ``hi`` (in log space where hi/lo > 10 and
lo > 0). A nominal off the middle of its range (a source's value with an uneven range around it)
so stays the centre of its distribution, and with every constant at its median a ratio's nominal
lies near its own median, inside its p5-p95 (tests/unit/test_twin_uncertainty.py checks the
report's). A swept constant's nominal must lie strictly inside its range. Each constant's draws
come from its own generator seeded by (seed, crc32 of its label), so adding a constant does not
change another's draws.

Fixed constants that reach the headline: one traced evaluation reads every ``assumption`` /
``mem`` constant that has no range; those read are listed as ``fixed_reaching`` (each a
finding: give it a range, or say in docs/methodology.md why it is fixed). ``min`` / ``max`` are over every evaluation run
(nominal, the one-at-a-time ends and the samples), so they always contain the nominal;
p5/p50/p95 are over the Monte Carlo samples only.

Timing (this 2-core VM): ``e2e.evaluate()`` takes ~35 ms warm; the default (200 samples +
~2 x 50 one-at-a-time runs) takes ~12 s. Everything is MODELLED.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
import types
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from nearfaas.fanout import run_points
from nearfaas.hw.sourced import Sourced

SAMPLES = 200
STATUSES = ("assumption", "mem")
LOG_SPAN = 10.0  # ranges with hi/lo above this are drawn log-uniformly
SUMMARY_KEY = "geomean"
REL_TOL = 1e-12  # a headline "moves" when it changes by more than this (relative)
LABEL = "modelled (twin headline ratios with Monte Carlo ranges over the assumption/mem constants' sweeps)"

REACHES = "reaches the model"
NOT_REACHING = "not reaching the model (captured at import or cached, or on a path this evaluation does not take)"
NO_EFFECT = "read but moves no headline"
FIXED = "fixed (no documented range)"


class Constant(NamedTuple):
    """One ``Sourced`` figure: where it lives (``module``: the module or holder label) and its
    path there (``name``: ``FLASH_READ_BPS``, ``MEMORY['ddr4'].pj_per_bit``, ``specs['idle_w']``)."""

    module: str
    name: str
    sourced: Sourced

    @property
    def label(self) -> str:
        return f"{self.module}:{self.name}"


@dataclasses.dataclass
class _Site:
    holder: Any
    key: Any
    kind: str  # attr | item | field
    original: Sourced

    def get(self) -> Any:
        return self.holder[self.key] if self.kind == "item" else getattr(self.holder, self.key)

    def set(self, v: Any) -> None:
        if self.kind == "item":
            self.holder[self.key] = v
        elif self.kind == "attr":
            setattr(self.holder, self.key, v)
        else:  # a dataclass field, frozen or not
            object.__setattr__(self.holder, self.key, v)


# ------------------------------------------------------------------ discovery


def default_targets() -> list:
    """The modules the twin's headline reads constants from, plus the live (cached) device
    records of every platform."""
    from nearfaas.hw import memory

    from . import cost, platforms, power, stack

    catalog = importlib.import_module("nearfaas.hw.devices.catalog")  # the package exports a function of that name

    out: list = [platforms, power, cost, stack, memory, catalog]
    for p in platforms.PLATFORMS:
        d = platforms.device(p)
        out.append((f"{catalog.__name__}:{d.name}", d))
    return out


def _walk(obj: Any, path: str, depth: int) -> Iterator[tuple[str, Any, Any, str, Sourced]]:
    """(path, holder, key, kind, Sourced) inside a dict or dataclass instance."""
    if depth < 0:
        return
    if isinstance(obj, dict):
        items = [(k, v, "item", f"{path}[{k!r}]") for k, v in obj.items()]
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type) and not isinstance(obj, Sourced):
        items = [(f.name, getattr(obj, f.name), "field", f"{path}.{f.name}" if path else f.name) for f in dataclasses.fields(obj)]
    else:
        return
    for k, v, kind, p in items:
        if isinstance(v, Sourced):
            yield p, obj, k, kind, v
        else:
            yield from _walk(v, p, depth - 1)


def _scan(targets: Iterable | None) -> tuple[list[Constant], list[Constant], dict[int, list[_Site]]]:
    """Every Sourced in ``targets``: (uncertain, other, sites by id of the Sourced object)."""
    targets = default_targets() if targets is None else list(targets)
    seen: dict[int, Constant] = {}
    sites: dict[int, list[_Site]] = {}
    for t in targets:
        if isinstance(t, types.ModuleType):
            label = t.__name__
            found = []
            for name, v in list(vars(t).items()):
                if name.startswith("__") or isinstance(v, (types.ModuleType, type)) or callable(v) and not isinstance(v, Sourced):
                    continue
                if isinstance(v, Sourced):
                    found.append((name, t, name, "attr", v))
                else:
                    found.extend(_walk(v, name, 2))
        else:
            label, obj = t if isinstance(t, tuple) else (type(t).__name__, t)
            found = list(_walk(obj, "", 2))
        for path, holder, key, kind, s in found:
            here = sites.setdefault(id(s), [])
            if not any(x.holder is holder and x.key == key for x in here):  # the same dict reached twice
                here.append(_Site(holder, key, kind, s))
            seen.setdefault(id(s), Constant(label, path.lstrip("."), s))
    uncertain = [c for c in seen.values() if c.sourced.status in STATUSES and c.sourced.sweep is not None]
    other = [c for c in seen.values() if not (c.sourced.status in STATUSES and c.sourced.sweep is not None)]
    return uncertain, other, sites


def uncertain_constants(modules=None) -> list[Constant]:
    """The ``Sourced`` constants with status ``assumption`` or ``mem`` and a ``sweep`` range in
    ``modules`` (modules or ``(label, object)`` pairs; default: ``default_targets()``)."""
    return _scan(modules)[0]


def fixed_constants(modules=None) -> list[dict]:
    """Constants with status assumption/mem but no ``sweep`` ("fixed (no documented range)"), and
    those with a ``sweep`` whose status is not swept (src/derived)."""
    return _fixed(_scan(modules)[1])


def _fixed(other: list[Constant]) -> list[dict]:
    out = []
    for c in other:
        s = c.sourced
        if s.status in STATUSES:
            why = FIXED
        elif s.sweep is not None:
            why = f"not swept: status {s.status!r} (has a sweep {s.sweep})"
        else:
            continue
        out.append({"module": c.module, "name": c.name, "value": s.value, "status": s.status, "why": why})
    return out


def distribution(sweep: tuple[float, float]) -> str:
    lo, hi = sweep
    return "log-uniform" if lo > 0 and hi / lo > LOG_SPAN else "uniform"


def draws(c: Constant, n: int, seed: int) -> np.ndarray:
    """``n`` values of ``c`` over its sweep, from its own generator (seed, crc32 of its label):
    half uniformly below its nominal, half above (module doc), so the nominal is the median."""
    lo, hi = c.sourced.sweep
    v = float(c.sourced.value)
    rng = np.random.default_rng([seed, zlib.crc32(c.label.encode())])
    u = rng.random(n)
    log = distribution((lo, hi)) == "log-uniform"
    lo, v, hi = (math.log(x) for x in (lo, v, hi)) if log else (lo, v, hi)
    x = np.where(u < 0.5, lo + (u / 0.5) * (v - lo), v + ((u - 0.5) / 0.5) * (hi - v))
    return np.exp(x) if log else x


# ------------------------------------------------------------------ substitution


_READS: set[int] = set()
_QUIET = [0]


class _Traced(Sourced):
    """A Sourced whose ``.value`` reads are recorded (outside ``to_dict``, which only reports)."""

    def __getattribute__(self, name):
        if name == "value" and not _QUIET[0]:
            _READS.add(id(self))
        return object.__getattribute__(self, name)

    def to_dict(self) -> dict:
        _QUIET[0] += 1
        try:
            return super().to_dict()
        finally:
            _QUIET[0] -= 1


def _copy(s: Sourced, value, traced: bool = False) -> Sourced:
    return (_Traced if traced else Sourced)(float(value) if _number(value) else value, s.source, s.status, s.sweep)


@contextmanager
def substituted(values, sites: dict[int, list[_Site]], traced: bool = False):
    """Swap each constant (``{Constant: value}``, or (Constant, value) pairs: a constant holding
    a dict is no dict key) at every place it was found; restore the original objects on exit,
    exceptions included. Yields [(Constant, the copy swapped in)]."""
    done: list[_Site] = []
    copies = []
    try:
        for c, v in (values.items() if isinstance(values, dict) else values):
            new = _copy(c.sourced, v, traced)
            copies.append((c, new))
            for site in sites[id(c.sourced)]:
                site.set(new)
                done.append(site)
        yield copies
    finally:
        for site in reversed(done):
            site.set(site.original)


def restored(sites: dict[int, list[_Site]]) -> bool:
    """True when every place holds its original object again."""
    return all(site.get() is site.original for ss in sites.values() for site in ss)


# ------------------------------------------------------------------ headline shape


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def headline_numbers(result: dict, baseline: str = "cpu") -> dict[tuple[str, str, str], float]:
    """The adapter from ``evaluate()``'s result to {(metric, platform, key): ratio}.

    Metrics are the top-level dicts whose key contains ``_vs_`` (``speedup_vs_cpu``,
    ``energy_reduction_vs_cpu``, ``cost_efficiency_vs_cpu``); without any, every top-level dict
    (an already-reduced {metric: {platform: ...}} shape). Under a metric, {platform: number}
    (one figure per platform, e.g. cost efficiency: already a geomean over apps) is read as
    key ``geomean``; {platform: {app | "mean" | "geomean": number}} as is. ``baseline``'s
    own entries (always 1) and non-numeric leaves are skipped."""
    metrics = {k: v for k, v in result.items() if isinstance(v, dict) and "_vs_" in k}
    if not metrics:
        metrics = {k: v for k, v in result.items() if isinstance(v, dict)}
    out: dict[tuple[str, str, str], float] = {}
    for m, per in metrics.items():
        for p, v in per.items():
            if p == baseline:
                continue
            if _number(v):
                out[(m, p, SUMMARY_KEY)] = float(v)
            elif isinstance(v, dict):
                for k, x in v.items():
                    if _number(x):
                        out[(m, p, k)] = float(x)
    return out


def _nest(flat: dict[tuple[str, str, str], Any]) -> dict:
    out: dict = {}
    for (m, p, k), v in flat.items():
        out.setdefault(m, {}).setdefault(p, {})[k] = v
    return out


def _moved(a: float, b: float) -> bool:
    return abs(a - b) > REL_TOL * max(abs(a), abs(b), 1e-300)


def _describe(c: Constant) -> dict:
    s = c.sourced
    return {
        "module": c.module,
        "name": c.name,
        "value": s.value,
        "sweep": list(s.sweep),
        "status": s.status,
        "distribution": distribution(s.sweep),
        "source": s.source,
    }


# ------------------------------------------------------------------ the study


def _fixed_reaching(other: list[Constant], sites: dict, evaluate, extract) -> list[dict]:
    """The ``assumption``/``mem`` constants without a range that one traced evaluation reads."""
    fixed = [c for c in other if c.sourced.status in STATUSES and c.sourced.sweep is None]
    if not fixed:
        return []
    _r, read = _evaluate_with([(c, c.sourced.value) for c in fixed], sites, evaluate, extract, True)
    return [{"module": c.module, "name": c.name, "value": c.sourced.value, "status": c.sourced.status, "why": FIXED}
            for c in fixed if c.label in read]


def default_evaluate() -> dict:
    from . import e2e

    return e2e.evaluate()


def _one_at_a_time(uncertain: list, run_many, nominal: dict, keys: list) -> tuple[dict, dict]:
    """One at a time: each constant at its range ends. Returns (oat, status)."""
    oat: dict[Constant, tuple[dict, dict]] = {}
    status: dict[Constant, str] = {}
    ends = run_many([({c: end}, True) for c in uncertain for end in c.sourced.sweep], "uncertainty: one at a time")
    for i, c in enumerate(uncertain):
        (r_lo, read_lo), (r_hi, read_hi) = ends[2 * i], ends[2 * i + 1]
        oat[c] = (r_lo, r_hi)
        if any(_moved(r_lo[k], nominal[k]) or _moved(r_hi[k], nominal[k]) for k in keys):
            status[c] = REACHES
        else:
            status[c] = NO_EFFECT if (read_lo or read_hi) else NOT_REACHING
    return oat, status


def _monte_carlo(swept: list, samples: int, seed: int, run_many, nominal: dict, keys: list):
    """Monte Carlo over the constants that reach the model: a (samples, keys) array. Sample i's
    values are row i of each constant's own seeded draws: no sample depends on another's run."""
    table = {c: draws(c, samples, seed) for c in swept}
    mc = np.empty((samples, len(keys)))
    if not swept:
        mc[:] = [nominal[k] for k in keys]
        return mc
    runs = run_many([({c: float(table[c][i]) for c in swept}, False) for i in range(samples)], "uncertainty: Monte Carlo")
    for i, (r, _) in enumerate(runs):
        mc[i] = [r[k] for k in keys]
    return mc


def _evaluate_with(values: dict, sites: dict, evaluate, extract, traced: bool) -> tuple[dict, set[str]]:
    """``extract(evaluate())`` with ``values`` ({Constant: value}) swapped in; the labels of the
    swapped constants that were read (``traced``)."""
    with substituted(values, sites, traced) as copies:
        _READS.clear()  # after the copies' own validation read their value
        try:
            r = extract(evaluate())
        except Exception as e:
            pairs = list(values.items() if isinstance(values, dict) else values)
            shown = ", ".join(f"{c.label}={v:.4g}" if _number(v) else f"{c.label}={v!r}" for c, v in pairs[:5])
            raise RuntimeError(f"evaluate() failed with {shown}{' ...' if len(values) > 5 else ''}: {e}") from e
        read = {c.label for c, cp in copies if id(cp) in _READS}
    return r, read


_WORKER: dict = {}  # a Ray worker's scan of the constants, per study (token)


def ray_point(shared: tuple, point: tuple) -> tuple[dict, set[str]]:
    """One evaluation on a Ray worker (``headline_ranges(ray_address=...)``): the worker scans
    the constants itself (their places are this process's objects) and, once per study, runs
    the nominal evaluation first, as the driver did, so its caches hold the nominal values
    before any swap. ``point``: ({label: value}, traced)."""
    token, evaluate, extract, modules = shared
    if _WORKER.get("token") != token:
        uncertain, _other, sites = _scan(modules)
        extract(evaluate())
        _WORKER.clear()
        _WORKER.update(token=token, by_label={c.label: c for c in uncertain}, sites=sites)
    values, traced = point
    by_label = _WORKER["by_label"]
    return _evaluate_with({by_label[k]: v for k, v in values.items()}, _WORKER["sites"], evaluate, extract, traced)


def _heads(keys: list, mc, nominal: dict, lo_env: dict, hi_env: dict) -> dict:
    """Each headline's nominal, percentiles, envelope and verdict."""
    heads = {}
    for j, k in enumerate(keys):
        p5, p50, p95 = (float(x) for x in np.percentile(mc[:, j], [5, 50, 95]))
        mn, mx = lo_env[k], hi_env[k]
        verdict = (
            "beats the baseline over the whole range"
            if mn > 1
            else "loses to the baseline over the whole range"
            if mx < 1
            else "depends on the constants (range straddles 1)"
        )
        heads[k] = {"nominal": nominal[k], "p5": p5, "p50": p50, "p95": p95, "min": mn, "max": mx, "robust": mn > 1, "verdict": verdict}
    return heads


def _tornado(keys: list, swept: list, oat: dict, nominal: dict, tornado_top: int | None) -> dict:
    """{metric: {platform: rows}} at SUMMARY_KEY, biggest one-at-a-time swing first: every
    swept constant that moves it (``tornado_top``: only the first that many)."""
    tornado: dict = {}
    for k in keys:
        if k[2] != SUMMARY_KEY:
            continue
        rows = []
        for c in swept:
            a, b = oat[c][0][k], oat[c][1][k]
            if _moved(a, nominal[k]) or _moved(b, nominal[k]):
                rows.append(
                    {"constant": c.label, "lo": c.sourced.sweep[0], "hi": c.sourced.sweep[1], "at_lo": a, "at_hi": b, "swing": abs(b - a)}
                )
        rows.sort(key=lambda x: -x["swing"])
        tornado.setdefault(k[0], {})[k[1]] = rows if tornado_top is None else rows[:tornado_top]
    return tornado


def headline_ranges(
    evaluate: Callable[[], dict] | None = None,
    samples: int = SAMPLES,
    seed: int = 1,
    modules=None,
    baseline: str = "cpu",
    extract: Callable[[dict], dict] | None = None,
    tornado_top: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Monte Carlo ranges of every headline ratio over the assumption/mem constants' sweeps.

    ``evaluate``: a zero-argument callable returning the headline dict (default:
    ``e2e.evaluate()``); ``extract``: its result -> {(metric, platform, key): ratio} (default
    ``headline_numbers``). Returns {"label", "seed", "samples", "headlines": {metric: {platform:
    {key: {"nominal", "p5", "p50", "p95", "min", "max", "robust", "verdict"}}}}, "swept",
    "no_effect", "not_reaching", "fixed", "tornado": {metric: {platform: [rows]}} (key
    ``geomean``, biggest swing first), "restored", "nominal_reproduced", "evaluations",
    "seconds"}.

    ``ray_address`` (host:port or ``auto``): the one-at-a-time and Monte Carlo evaluations run as
    Ray tasks (``nearfaas.fanout``; ``evaluate`` and ``extract`` are pickled to the workers, and
    ``modules`` must then be modules or None); each is a pure function of its drawn values, so
    the result equals the local one (timing aside). ``progress(n)``: n evaluations finished."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples={samples!r}: give a whole number >= 1")
    evaluate = evaluate or default_evaluate
    extract = extract or (lambda r: headline_numbers(r, baseline))
    t0 = time.perf_counter()
    uncertain, other, sites = _scan(modules)
    uncertain.sort(key=lambda c: c.label)
    nominal = extract(evaluate())  # also warms caches with the nominal values before any swap
    if not nominal:
        raise ValueError("evaluate() returned no headline numbers (no {metric: {platform: ...}} dicts); pass extract=")
    keys = list(nominal)
    lo_env = dict(nominal)
    hi_env = dict(nominal)
    n_eval = 1

    if ray_address and modules is not None and not all(isinstance(t, types.ModuleType) for t in modules):
        raise ValueError("with ray_address, modules must be modules (or None): a worker swaps its own live objects")
    shared = (uuid.uuid4().hex, evaluate, extract, modules)

    def local(point: tuple) -> tuple[dict, set[str]]:
        values, traced = point
        return _evaluate_with(values, sites, evaluate, extract, traced)

    def run_many(points: list[tuple[dict, bool]], description: str) -> list[tuple[dict, set[str]]]:
        nonlocal n_eval
        if ray_address:
            out = run_points(ray_point, [({c.label: v for c, v in values.items()}, traced) for values, traced in points],
                             shared=shared, ray_address=ray_address, progress=progress, description=description)
        else:
            out = run_points(local, points, progress=progress, description=description)
        for r, _read in out:  # in the points' order, wherever they ran
            n_eval += 1
            missing = set(keys) - set(r)
            if missing:
                raise RuntimeError(f"evaluate() changed its headline set under substitution: missing {sorted(missing)[:3]}")
            for k in keys:
                lo_env[k] = min(lo_env[k], r[k])
                hi_env[k] = max(hi_env[k], r[k])
        return out

    oat, status = _one_at_a_time(uncertain, run_many, nominal, keys)
    swept = [c for c in uncertain if status[c] == REACHES]
    mc = _monte_carlo(swept, samples, seed, run_many, nominal, keys)
    heads = _heads(keys, mc, nominal, lo_env, hi_env)
    tornado = _tornado(keys, swept, oat, nominal, tornado_top)

    fixed_reaching = _fixed_reaching(other, sites, evaluate, extract)
    again = extract(evaluate())
    n_eval += 2
    return {
        "label": LABEL,
        "seed": seed,
        "samples": samples,
        "method": (
            f"each swept constant drawn independently, its nominal the median: half uniform between lo and the nominal, half "
            f"between the nominal and hi (log space where hi/lo > {LOG_SPAN:g}); "
            "p5/p50/p95 over the samples, min/max over every evaluation (nominal, one-at-a-time ends, samples); "
            "robust = min > 1 (the platform beats the baseline over the whole range)"
        ),
        "headlines": _nest(heads),
        "swept": [_describe(c) for c in swept],
        "no_effect": [{**_describe(c), "why": NO_EFFECT} for c in uncertain if status[c] == NO_EFFECT],
        "not_reaching": [{**_describe(c), "why": NOT_REACHING} for c in uncertain if status[c] == NOT_REACHING],
        "fixed": _fixed(other),
        "fixed_reaching": fixed_reaching,
        "tornado": tornado,
        "restored": restored(sites),
        "nominal_reproduced": all(not _moved(again.get(k, math.nan), nominal[k]) for k in keys),
        "evaluations": n_eval,
        "seconds": time.perf_counter() - t0,
    }


def summary_lines(result: dict, key: str = SUMMARY_KEY) -> list[str]:
    """One line per (metric, platform) at ``key``: nominal [p5, p95] (min-max) and the verdict."""
    lines = []
    for m, per in result["headlines"].items():
        for p, ks in per.items():
            if key in ks:
                h = ks[key]
                lines.append(
                    f"{m:26s} {p:14s} {h['nominal']:9.3g}  p5-p95 {h['p5']:.3g}-{h['p95']:.3g}  "
                    f"min-max {h['min']:.3g}-{h['max']:.3g}  {'ROBUST' if h['robust'] else h['verdict']}"
                )
    return lines


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    r = headline_ranges(samples=int(args[0]) if args else SAMPLES, seed=int(args[1]) if len(args) > 1 else 1)
    print("\n".join(summary_lines(r)))
    print(
        f"swept {len(r['swept'])}, no effect {len(r['no_effect'])}, not reaching {len(r['not_reaching'])}, "
        f"fixed {len(r['fixed'])}; {r['evaluations']} evaluations in {r['seconds']:.1f} s; restored={r['restored']}"
    )


if __name__ == "__main__":
    main()
