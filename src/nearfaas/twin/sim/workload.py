"""Workloads for the rack-scale simulation: Poisson arrivals with a rate schedule, and replay of
Azure Functions 2019 traces (per-function per-minute invocation counts, and durations).

A workload is an iterator of ``(time_s, app_key)`` in non-decreasing time order; the simulator
pulls one arrival at a time, so a trace of millions of calls never sits in memory as events.
"""

from __future__ import annotations

import csv
import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

APP_KEYS = ("credit_risk", "asset_damage", "ppe_detection", "clinical_analysis", "content_moderation", "chatbot",
            "translation", "remote_sensing")

AZURE_ID_COLUMNS = ("HashOwner", "HashApp", "HashFunction", "Trigger")
AZURE_DURATION_COLUMNS = ("HashOwner", "HashApp", "HashFunction", "Average", "Count", "Minimum", "Maximum")


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


def app_for_function(owner: str, app: str, function: str, apps: Sequence[str] = APP_KEYS) -> str:
    """How a trace function maps to one of the apps: blake2b-64 of ``owner/app/function``, modulo
    the number of apps (stable across runs, machines and Python versions)."""
    digest = hashlib.blake2b(f"{owner}/{app}/{function}".encode(), digest_size=8).digest()
    return apps[int.from_bytes(digest, "big") % len(apps)]


@dataclass
class AzureFunctionCounts:
    owner: str
    app: str
    function: str
    trigger: str
    counts: list[int]  # invocations per minute, minute 1 first


def _err(path, line, col, name, msg) -> WorkloadError:
    return WorkloadError(f"{path}: line {line}, column {col} ({name}): {msg}")


def _header(path, reader, columns: tuple, rest: str) -> list[str]:
    """The header row, checked to start with ``columns`` (named, with the column number, if not)."""
    header = next(reader, None)
    if header is None:
        raise WorkloadError(f"{path}: line 1: empty file; expected a header {','.join(columns)}{rest}")
    for col, name in enumerate(columns):
        if col >= len(header) or header[col].strip() != name:
            got = header[col] if col < len(header) else "nothing"
            raise _err(path, 1, col + 1, name, f"missing column: expected {name!r}, got {got!r}")
    return header


def _rows(path, reader, header: list[str]):
    """(line number, row) of every non-empty row, each checked to have the header's width."""
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            col = min(len(row), len(header)) + 1
            name = header[col - 1] if col - 1 < len(header) else "extra"
            raise _err(path, reader.line_num, col, name, f"{'missing column' if len(row) < len(header) else 'extra column'}: "
                                                         f"{len(row)} fields, the header has {len(header)}")
        yield reader.line_num, row


def read_azure_invocations(path) -> list[AzureFunctionCounts]:
    """The public dataset's ``invocations_per_function_md.anon.d*.csv`` format:
    ``HashOwner,HashApp,HashFunction,Trigger,1,2,...,1440`` (any number of minutes >= 1)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = _header(path, reader, AZURE_ID_COLUMNS, ",1,2,...")
        minutes = header[4:]
        if not minutes:
            raise _err(path, 1, 5, "1", "missing column: no minute columns after Trigger")
        for i, m in enumerate(minutes):
            if m.strip() != str(i + 1):
                raise _err(path, 1, i + 5, m, f"expected minute column {str(i + 1)!r}, got {m!r}")
        rows = []
        for line, row in _rows(path, reader, header):
            counts = []
            for col in range(4, len(row)):
                text = row[col].strip()
                try:
                    value = int(text)
                except ValueError:
                    raise _err(path, line, col + 1, header[col], f"invocation count {text!r} is not an integer") from None
                if value < 0:
                    raise _err(path, line, col + 1, header[col], f"negative invocation count {value}")
                counts.append(value)
            rows.append(AzureFunctionCounts(row[0], row[1], row[2], row[3], counts))
        return rows


@dataclass
class AzureDurations:
    owner: str
    app: str
    function: str
    average_ms: float
    count: int
    minimum_ms: float
    maximum_ms: float
    percentiles_ms: dict  # "percentile_Average_0" -> ms, ...


def read_azure_durations(path) -> dict[tuple[str, str, str], AzureDurations]:
    """The ``function_durations_percentiles.anon.d*.csv`` format: ``HashOwner,HashApp,HashFunction,
    Average,Count,Minimum,Maximum,percentile_Average_0,...`` (milliseconds)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = _header(path, reader, AZURE_DURATION_COLUMNS, ",...")
        for col in range(len(AZURE_DURATION_COLUMNS), len(header)):
            if not header[col].startswith("percentile_Average_"):
                raise _err(path, 1, col + 1, header[col], "expected a percentile_Average_<p> column")
        out = {}
        for line, row in _rows(path, reader, header):
            values = []
            for col in range(3, len(row)):
                text = row[col].strip()
                try:
                    value = int(text) if col == 4 else float(text)
                except ValueError:
                    kind = "an integer" if col == 4 else "a number"
                    raise _err(path, line, col + 1, header[col], f"{text!r} is not {kind}") from None
                if not value >= 0:
                    raise _err(path, line, col + 1, header[col], f"negative value {value}")
                values.append(value)
            pct = {header[c]: values[c - 3] for c in range(7, len(row))}
            out[(row[0], row[1], row[2])] = AzureDurations(row[0], row[1], row[2], values[0], values[1], values[2], values[3], pct)
        return out


def azure_replay(invocations_path, seed: int = 0, apps: Sequence[str] = APP_KEYS,
                 minutes: int | None = None) -> Iterator[tuple[float, str]]:
    """Replay an Azure invocation-count file: each minute's invocations of each function are
    spread uniformly (seeded) within the minute; each function maps to an app by
    ``app_for_function``. The file is read and checked completely before the first arrival."""
    rows = read_azure_invocations(invocations_path)
    mapped = [(app_for_function(r.owner, r.app, r.function, apps), r.counts) for r in rows]
    n_minutes = max((len(c) for _, c in mapped), default=0)
    if minutes is not None:
        n_minutes = min(n_minutes, minutes)
    return _replay(mapped, n_minutes, random.Random(seed))


def _replay(mapped, n_minutes, rng):
    rand = rng.random
    for m in range(n_minutes):
        base = m * 60.0
        batch = []
        for app, counts in mapped:
            for _ in range(counts[m] if m < len(counts) else 0):
                batch.append((base + 60.0 * rand(), app))
        batch.sort()
        yield from batch
