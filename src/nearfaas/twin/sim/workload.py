"""Workloads for the rack-scale simulation: Poisson arrivals with a rate schedule (here), and
replay of Azure Functions 2019 traces (twin/sim/azure.py).

A workload is an iterator of ``(time_s, app_key)`` or ``(time_s, app_key, (service_s, memory_mb))``
in non-decreasing time order (the third item: a call's own duration and footprint, either None);
the simulator pulls one arrival at a time, so a trace of millions of calls never sits in memory
as events.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

APP_KEYS = ("credit_risk", "asset_damage", "ppe_detection", "clinical_analysis", "content_moderation", "chatbot",
            "translation", "remote_sensing")


class WorkloadError(ValueError):
    """A workload that cannot be run: a bad rate, an unknown app, a malformed trace file."""


def check_schedule(schedule: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A rate schedule ``[(start_s, rate_per_s), ...]``: starts increasing from 0, rates >= 0."""
    out = []
    for i, item in enumerate(schedule):
        try:
            start, rate = float(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError):
            raise WorkloadError(f"rate schedule entry {i}: expected (start_s, rate_per_s), got {item!r}") from None
        if rate < 0 or rate != rate:
            raise WorkloadError(f"rate schedule entry {i}: negative rate {rate} per second at t={start}s; rates must be >= 0")
        if start < 0 or (out and start <= out[-1][0]):
            raise WorkloadError(f"rate schedule entry {i}: start {start}s must be >= 0 and after the previous entry's start")
        out.append((start, rate))
    if not out:
        raise WorkloadError("empty rate schedule")
    if out[0][0] != 0.0:
        out.insert(0, (0.0, 0.0))
    return out


def check_weights(weights: Mapping[str, float] | None, known: Sequence[str]) -> tuple[list[str], list[float]]:
    weights = dict(weights) if weights else {k: 1.0 for k in known}
    for key, w in weights.items():
        if key not in known:
            raise WorkloadError(f"unknown app {key!r}; known: {', '.join(known)}")
        if not w >= 0:
            raise WorkloadError(f"app {key!r}: weight {w} must be >= 0")
    keys = [k for k in weights if weights[k] > 0]
    if not keys:
        raise WorkloadError("every app weight is 0")
    return keys, [float(weights[k]) for k in keys]


def poisson(schedule: Sequence[tuple[float, float]], duration_s: float, seed: int = 0,
            weights: Mapping[str, float] | None = None, apps: Sequence[str] = APP_KEYS,
            max_requests: int | None = None) -> Iterator[tuple[float, str]]:
    """Poisson arrivals whose rate is piecewise constant (``schedule``) until ``duration_s``
    (or ``max_requests``); each arrival samples an app by ``weights`` (default: equal)."""
    sched = check_schedule(schedule)
    keys, w = check_weights(weights, apps)
    if duration_s < 0:
        raise WorkloadError(f"duration {duration_s}s must be >= 0")
    return _poisson(sched, float(duration_s), random.Random(seed), keys, w, max_requests)


def _poisson(sched, duration_s, rng, keys, w, max_requests):
    single = keys[0] if len(keys) == 1 else None
    cum = []
    total = 0.0
    for x in w:
        total += x
        cum.append(total)
    expo, rand = rng.expovariate, rng.random
    n = 0
    for i, (start, rate) in enumerate(sched):
        end = sched[i + 1][0] if i + 1 < len(sched) else duration_s
        end = min(end, duration_s)
        if rate <= 0 or start >= end:
            continue
        t = start  # memoryless: restarting the clock at a rate change is exact
        while True:
            t += expo(rate)
            if t >= end:
                break
            if single is not None:
                yield t, single
            else:
                x, j = rand() * total, 0
                while cum[j] <= x:
                    j += 1
                yield t, keys[j]
            n += 1
            if max_requests is not None and n >= max_requests:
                return
