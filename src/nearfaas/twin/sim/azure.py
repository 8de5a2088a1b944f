"""The Azure Functions 2019 trace (https://github.com/Azure/AzurePublicDataset,
AzureFunctionsDataset2019.md) for the rack-scale simulation: invocation counts, durations and
memory, in the dataset's own layout and in the replay toolkits' layouts.

Columns are recognised by name, in any order:

- invocations (``invocations_per_function_md.anon.dNN.csv``; a toolkit's ``invocations.csv``):
  ``HashOwner``, ``HashApp``, ``HashFunction``, optional ``Trigger``, then the minute columns
  ``1, 2, ..., N`` in order (or ``minute_1, minute_2, ...``). The dataset writes
  ``HashOwner,HashApp,HashFunction,Trigger,1,...``; the replay toolkit
  ``HashFunction,HashApp,HashOwner,1,...`` (no Trigger); the InVitro toolkit's samples
  ``HashFunction,HashApp,HashOwner,minute_1,...`` in ``<name>_inv.csv`` beside
  ``<name>_run.csv`` (durations) and ``<name>_mem.csv`` (memory).
- durations (``function_durations_percentiles.anon.dNN.csv``; ``durations.csv``), milliseconds:
  ``HashFunction`` (``HashOwner``, ``HashApp`` optional), optional ``Average``, ``Count``,
  ``Minimum``, ``Maximum`` and ``percentile_Average_<p>`` columns; at least Average or one
  percentile.
- memory (``app_memory_percentiles.anon.dNN.csv``; ``memory.csv``), MB: ``HashApp``
  (``HashOwner``, ``HashFunction`` optional), optional ``SampleCount``, ``AverageAllocatedMb``
  and ``AverageAllocatedMb_pct<p>`` columns; at least one value column.

Other columns are ignored (and listed). A malformed file raises ``WorkloadError`` naming the
file, the line and the column, and what to do about it.

A trace function's call draws its duration from the function's percentiles and its memory
footprint from its app's (``Percentiles``: inverse-CDF sampling, linear between the published
points), seeded: a replay is a pure function of the files, ``minutes`` and ``seed``.
"""

from __future__ import annotations

import bisect
import csv
import hashlib
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nearfaas.twin.sim.workload import APP_KEYS, WorkloadError

ID_COLUMNS = ("HashOwner", "HashApp", "HashFunction")
INVOCATIONS_HELP = ("HashOwner, HashApp, HashFunction (any order), optional Trigger, then minute columns 1, 2, ..., N "
                    "(or minute_1, minute_2, ..., as the InVitro toolkit's samples name them)")
_MINUTE = re.compile(r"^(?:minute_)?(\d+)$")
DURATIONS_HELP = ("HashFunction (HashOwner, HashApp optional), Average and/or percentile_Average_<p> columns in ms "
                  "(Count, Minimum, Maximum optional)")
MEMORY_HELP = "HashApp (HashOwner, HashFunction optional), AverageAllocatedMb and/or AverageAllocatedMb_pct<p> columns in MB"
_DUR_PCT = re.compile(r"^percentile_Average_(\d+(?:\.\d+)?)$")
_MEM_PCT = re.compile(r"^AverageAllocatedMb_pct(\d+(?:\.\d+)?)$")


def app_for_function(owner: str, app: str, function: str, apps: Sequence[str] = APP_KEYS) -> str:
    """How a trace function maps to one of the apps (its chain and accelerator in the twin):
    blake2b-64 of ``owner/app/function``, modulo the number of apps (stable across runs)."""
    digest = hashlib.blake2b(f"{owner}/{app}/{function}".encode(), digest_size=8).digest()
    return apps[int.from_bytes(digest, "big") % len(apps)]


# -- percentiles --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Percentiles:
    """A distribution given by published percentiles: ``q`` (0..1, increasing) and ``v``
    (non-decreasing). ``sample(u)`` is its inverse CDF, linear between the points and flat
    beyond the first and last (a file without a 0th or 100th percentile is not extrapolated)."""

    q: tuple[float, ...]
    v: tuple[float, ...]

    @classmethod
    def of(cls, points: dict[float, float]) -> Percentiles:
        """From ``{percent: value}``; values are made non-decreasing (running maximum), since the
        published percentiles are of 30 s or 1 min averages and a row may not be monotone."""
        qs, vs, top = [], [], float("-inf")
        for p in sorted(points):
            top = max(top, points[p])
            qs.append(p / 100.0)
            vs.append(top)
        return cls(tuple(qs), tuple(vs))

    def sample(self, u: float) -> float:
        q, v = self.q, self.v
        k = bisect.bisect_right(q, u)
        if k == 0:
            return v[0]
        if k == len(q):
            return v[-1]
        q0, q1 = q[k - 1], q[k]
        return v[k - 1] + (v[k] - v[k - 1]) * (u - q0) / (q1 - q0)

    @property
    def mean(self) -> float:
        """The mean of what ``sample`` draws (the integral of the inverse CDF over 0..1)."""
        q, v = self.q, self.v
        total = v[0] * q[0] + v[-1] * (1.0 - q[-1])
        for k in range(1, len(q)):
            total += (q[k] - q[k - 1]) * (v[k] + v[k - 1]) / 2.0
        return total


# -- reading CSV files --------------------------------------------------------------------------

def _err(path, line, col, name, msg) -> WorkloadError:
    return WorkloadError(f"{path}: line {line}, column {col} ({name}): {msg}")


def _lines(path):
    """The file's CSV rows, with errors of the file itself (missing, binary, compressed, bad
    quoting) as WorkloadErrors naming it."""
    try:
        f = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 (closed by the with below, after the checks)
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise WorkloadError(f"{path}: a folder, not a CSV file") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    reader = csv.reader(f)
    with f:
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except UnicodeDecodeError:
                raise WorkloadError(f"{path}: line {reader.line_num + 1}: not a UTF-8 text CSV file (is it still compressed? "
                                    "extract azurefunctions-dataset2019.tar.xz first)") from None
            except csv.Error as exc:
                raise WorkloadError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
            yield reader.line_num, row


def _header(path, lines, what: str, expected: str) -> list[str]:
    first = next(lines, None)
    if first is None:
        raise WorkloadError(f"{path}: line 1: empty file; an Azure {what} file starts with a header row: {expected}")
    header = [c.strip() for c in first[1]]
    seen: dict[str, int] = {}
    for col, name in enumerate(header):
        if name and name in seen:
            raise _err(path, 1, col + 1, name, f"duplicate column (also column {seen[name] + 1}); keep one")
        seen[name] = col
    return header


def _find(path, header: list[str], what: str, expected: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, int]:
    """Positions of the named columns; a missing required one is an error that shows the header."""
    pos = {name: col for col, name in enumerate(header)}
    for name in required:
        if name not in pos:
            shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
            raise WorkloadError(f"{path}: line 1: missing column {name!r} (the header has: {shown}); an Azure {what} file "
                                f"needs {expected}")
    return {name: pos[name] for name in (*required, *optional) if name in pos}


def _rows(path, lines, header: list[str]):
    """(line number, row) of every non-empty row, each checked to have the header's width."""
    for line, row in lines:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            col = min(len(row), len(header)) + 1
            name = header[col - 1] if col - 1 < len(header) else "extra"
            raise _err(path, line, col, name, f"{'missing column' if len(row) < len(header) else 'extra column'}: "
                                              f"{len(row)} fields, the header has {len(header)}")
        yield line, row


def _ids(path, line, row, header, cols: dict[str, int]) -> dict[str, str]:
    out = {}
    for name in ID_COLUMNS:
        if name in cols:
            value = row[cols[name]].strip()
            if not value:
                raise _err(path, line, cols[name] + 1, name, f"empty {name}; every row needs its id")
            out[name] = value
    return out


def _number(path, line, col, name, text: str, integer: bool = False, blank_ok: bool = True):
    text = text.strip()
    if not text:
        if blank_ok:
            return None
        raise _err(path, line, col + 1, name, "empty cell; give a number")
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise _err(path, line, col + 1, name, f"{text!r} is not {'an integer' if integer else 'a number'}") from None
    if not value >= 0 or value == float("inf"):
        raise _err(path, line, col + 1, name, f"{'negative' if value < 0 else 'invalid'} value {text}; must be a finite number >= 0")
    return value


class AzureTable(dict):
    """Rows of a durations or memory file keyed by their id columns (``id_columns``, canonical
    order: HashOwner, HashApp, HashFunction, those the file has); ``lookup`` finds a trace
    function's row (memory: its own row if the file is per function, else its app's)."""

    def __init__(self, path, id_columns: tuple[str, ...], ignored: list[str], app_fallback: bool = False):
        super().__init__()
        self.path, self.id_columns, self.ignored, self.app_fallback = str(path), id_columns, ignored, app_fallback
        self._by_app: dict | None = None

    def lookup(self, owner: str, app: str, function: str):
        ids = {"HashOwner": owner, "HashApp": app, "HashFunction": function}
        hit = self.get(tuple(ids[c] for c in self.id_columns))
        if hit is None and self.app_fallback and "HashFunction" in self.id_columns:
            # a per-function memory file without this function: the first row of its app
            if self._by_app is None:
                self._by_app = {}
                for rec in self.values():
                    self._by_app.setdefault((rec.owner, rec.app), rec)
            hit = self._by_app.get((owner if "HashOwner" in self.id_columns else "", app))
        return hit


# -- invocations --------------------------------------------------------------------------------

@dataclass
class AzureFunctionCounts:
    owner: str
    app: str
    function: str
    trigger: str  # "" where the layout has no Trigger column
    counts: list[int]  # invocations per minute, minute 1 first


def read_azure_invocations(path, minutes: int | None = None) -> list[AzureFunctionCounts]:
    """An invocation-count file in either layout (module docstring). ``minutes``: keep (and
    check) only the first ``minutes`` minute columns."""
    rows, _ = _read_invocations(path, minutes)
    return rows


def _read_invocations(path, minutes: int | None):
    lines = _lines(path)
    header = _header(path, lines, "invocations", INVOCATIONS_HELP)
    cols = _find(path, header, "invocations", INVOCATIONS_HELP, ID_COLUMNS, ("Trigger",))
    minute_cols = [c for c, name in enumerate(header) if _MINUTE.match(name)]
    if not minute_cols:
        raise WorkloadError(f"{path}: line 1: no minute columns; an Azure invocations file needs {INVOCATIONS_HELP}")
    for k, c in enumerate(minute_cols):
        if int(_MINUTE.match(header[c]).group(1)) != k + 1:
            raise _err(path, 1, c + 1, header[c], f"expected minute column '{k + 1}', got {header[c]!r}; minute columns must be "
                                                  "1, 2, ..., N (or minute_1, minute_2, ...) in order")
    total = len(minute_cols)
    if minutes is not None:
        minute_cols = minute_cols[:minutes]
    ignored = [h for c, h in enumerate(header) if c not in cols.values() and not _MINUTE.match(h)]
    lo, hi = minute_cols[0], minute_cols[-1] + 1
    contiguous = hi - lo == len(minute_cols)
    out = []
    for line, row in _rows(path, lines, header):
        ids = _ids(path, line, row, header, cols)
        cells = row[lo:hi] if contiguous else [row[c] for c in minute_cols]
        try:
            counts = list(map(int, cells))
            bad = min(counts, default=0) < 0
        except ValueError:
            bad = True
        if bad:  # find and name the first bad cell
            for c in minute_cols:
                text = row[c].strip()
                try:
                    value = int(text)
                except ValueError:
                    raise _err(path, line, c + 1, header[c], f"invocation count {text!r} is not an integer") from None
                if value < 0:
                    raise _err(path, line, c + 1, header[c], f"negative invocation count {value}")
        trigger = row[cols["Trigger"]].strip() if "Trigger" in cols else ""
        out.append(AzureFunctionCounts(ids["HashOwner"], ids["HashApp"], ids["HashFunction"], trigger, counts))
    return out, {"minutes_in_file": total, "layout": _layout(header, cols), "ignored_columns": ignored}


def _layout(header, cols) -> str:
    order = [header[c] for c in sorted(cols.values())]
    if order == ["HashOwner", "HashApp", "HashFunction", "Trigger"]:
        return "AzurePublicDataset (HashOwner,HashApp,HashFunction,Trigger,1..N)"
    return f"by column name ({','.join(order)},1..N)"


# -- durations and memory -----------------------------------------------------------------------

@dataclass
class AzureDurations:
    owner: str  # "" where the file has no such column
    app: str
    function: str
    average_ms: float | None
    count: int | None
    minimum_ms: float | None
    maximum_ms: float | None
    percentiles_ms: dict  # "percentile_Average_0" -> ms, ... (the cells given)
    dist: Percentiles = field(repr=False, default=None)  # what a call's duration is drawn from (ms)


@dataclass
class AzureMemory:
    owner: str
    app: str
    function: str  # "" unless the file is per function
    sample_count: int | None
    average_mb: float | None
    percentiles_mb: dict  # "AverageAllocatedMb_pct1" -> MB, ...
    dist: Percentiles = field(repr=False, default=None)  # what a call's footprint is drawn from (MB)


def _values(path, line, row, header, cols: dict[str, int], integers=()) -> dict[str, float | int | None]:
    return {name: _number(path, line, c, name, row[c], integer=name in integers) for name, c in cols.items()}


def read_azure_durations(path) -> AzureTable:
    """A durations file in either layout (module docstring), keyed by its id columns."""
    lines = _lines(path)
    header = _header(path, lines, "durations", DURATIONS_HELP)
    ids = _find(path, header, "durations", DURATIONS_HELP, ("HashFunction",), ("HashOwner", "HashApp"))
    stats = _find(path, header, "durations", DURATIONS_HELP, (), ("Average", "Count", "Minimum", "Maximum"))
    pcts = {h: c for c, h in enumerate(header) if _DUR_PCT.match(h)}
    _need_values(path, header, "durations", DURATIONS_HELP, "Average" in stats or pcts, "Average or percentile_Average_<p>")
    table = AzureTable(path, tuple(c for c in ID_COLUMNS if c in ids), _ignored(header, ids, stats, pcts))
    for line, row in _rows(path, lines, header):
        key = _ids(path, line, row, header, ids)
        s = _values(path, line, row, header, stats, integers=("Count",))
        p = {k: v for k, v in _values(path, line, row, header, pcts).items() if v is not None}
        points = {float(_DUR_PCT.match(k).group(1)): v for k, v in p.items()}
        if points:
            if 0.0 not in points and s.get("Minimum") is not None:
                points[0.0] = s["Minimum"]
            if 100.0 not in points and s.get("Maximum") is not None:
                points[100.0] = s["Maximum"]
        elif s.get("Average") is not None:
            points = {50.0: s["Average"]}
        else:
            raise WorkloadError(f"{path}: line {line}: no duration (Average and every percentile_Average_<p> cell empty); "
                                "fill one or drop the row")
        rec = AzureDurations(key.get("HashOwner", ""), key.get("HashApp", ""), key["HashFunction"], s.get("Average"), s.get("Count"),
                             s.get("Minimum"), s.get("Maximum"), p, Percentiles.of(points))
        table[tuple(key[c] for c in table.id_columns)] = rec
    return table


def read_azure_memory(path) -> AzureTable:
    """A memory file in either layout (module docstring), keyed by its id columns (per app; per
    function where the file has a HashFunction column)."""
    lines = _lines(path)
    header = _header(path, lines, "memory", MEMORY_HELP)
    ids = _find(path, header, "memory", MEMORY_HELP, ("HashApp",), ("HashOwner", "HashFunction"))
    stats = _find(path, header, "memory", MEMORY_HELP, (), ("SampleCount", "AverageAllocatedMb"))
    pcts = {h: c for c, h in enumerate(header) if _MEM_PCT.match(h)}
    _need_values(path, header, "memory", MEMORY_HELP, "AverageAllocatedMb" in stats or pcts, "AverageAllocatedMb or AverageAllocatedMb_pct<p>")
    table = AzureTable(path, tuple(c for c in ID_COLUMNS if c in ids), _ignored(header, ids, stats, pcts), app_fallback=True)
    for line, row in _rows(path, lines, header):
        key = _ids(path, line, row, header, ids)
        s = _values(path, line, row, header, stats, integers=("SampleCount",))
        p = {k: v for k, v in _values(path, line, row, header, pcts).items() if v is not None}
        points = {float(_MEM_PCT.match(k).group(1)): v for k, v in p.items()}
        if not points:
            if s.get("AverageAllocatedMb") is None:
                raise WorkloadError(f"{path}: line {line}: no memory (AverageAllocatedMb and every AverageAllocatedMb_pct<p> cell "
                                    "empty); fill one or drop the row")
            points = {50.0: s["AverageAllocatedMb"]}
        rec = AzureMemory(key.get("HashOwner", ""), key["HashApp"], key.get("HashFunction", ""), s.get("SampleCount"),
                          s.get("AverageAllocatedMb"), p, Percentiles.of(points))
        table[tuple(key[c] for c in table.id_columns)] = rec
    return table


def _need_values(path, header, what, expected, ok, names) -> None:
    if not ok:
        shown = ", ".join(header[:8]) + (", ..." if len(header) > 8 else "")
        raise WorkloadError(f"{path}: line 1: no value column ({names}) (the header has: {shown}); an Azure {what} file needs {expected}")


def _ignored(header, *groups) -> list[str]:
    used = {c for g in groups for c in g.values()}
    return [h for c, h in enumerate(header) if c not in used]


# -- siblings -----------------------------------------------------------------------------------

SIBLINGS = {  # invocations file name pattern -> (durations name, memory name)
    re.compile(r"^invocations_per_function_md\.anon\.d(\d+)\.csv$"): ("function_durations_percentiles.anon.d{0}.csv",
                                                                       "app_memory_percentiles.anon.d{0}.csv"),
    re.compile(r"^invocations\.csv$"): ("durations.csv", "memory.csv"),
    re.compile(r"^(.+)_inv\.csv$"): ("{0}_run.csv", "{0}_mem.csv"),  # the InVitro sampler's <sample>_inv/_run/_mem.csv
}


def sibling(invocations_path, kind: str) -> Path | None:
    """The same day's durations (``kind="durations"``) or memory file beside an invocations file
    of a standard name, when it exists: ``invocations_per_function_md.anon.dNN.csv`` ->
    ``function_durations_percentiles.anon.dNN.csv`` / ``app_memory_percentiles.anon.dNN.csv``;
    a toolkit's ``invocations.csv`` -> ``durations.csv`` / ``memory.csv``; an InVitro sample's
    ``<name>_inv.csv`` -> ``<name>_run.csv`` / ``<name>_mem.csv``."""
    p = Path(invocations_path)
    for pattern, names in SIBLINGS.items():
        m = pattern.match(p.name)
        if m:
            cand = p.with_name(names[0 if kind == "durations" else 1].format(*m.groups()))
            return cand if cand.is_file() else None
    return None


def companion(invocations_path, value, kind: str) -> tuple[str | None, str | None]:
    """Which ``kind`` ("durations" or "memory") file goes with ``invocations_path``: ``value`` a
    path (that file), ``"auto"`` (the same day's ``sibling`` when there is one) or None /
    ``"none"`` (no file). Returns (path or None, a note on what was chosen, or None)."""
    if value is not None and str(value) not in ("auto", "none"):
        return str(value), None
    sib = sibling(invocations_path, kind)
    if value == "auto":
        if sib is None:
            return None, (f"--{kind} auto: no same-day {kind} file beside {invocations_path}; "
                          + ("service times are the twin's model stage times" if kind == "durations" else "calls have no memory footprint"))
        return str(sib), f"--{kind} auto: {sib} (the trace's same-day sibling; --{kind} none ignores it)"
    if sib is not None:
        return None, f"{sib} is beside the trace but not used (--{kind} auto or --{kind} FILE uses it)"
    return None, None


# -- the trace ----------------------------------------------------------------------------------

@dataclass
class TraceFunction:
    owner: str
    app: str
    function: str
    app_key: str  # the twin's app (chain, accelerator) by app_for_function
    counts: list[int]  # per replayed minute
    duration_ms: Percentiles | None  # None: the twin's model stage times
    memory_mb: Percentiles | None  # None: no footprint


@dataclass
class AzureTrace:
    """An invocations file (with optional durations and memory files) read and checked
    completely, cut to ``minutes``; ``replay(seed)`` yields its arrivals."""

    path: str
    functions: list[TraceFunction]
    minutes: int  # replayed
    minutes_in_file: int
    durations_path: str | None = None
    memory_path: str | None = None
    info: dict = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return sum(sum(f.counts) for f in self.functions)

    def replay(self, seed: int = 0) -> Iterator[tuple]:
        """Each minute's invocations of each function spread uniformly (seeded) within the
        minute, in time order. Without durations and memory: ``(time_s, app_key)``, as
        ``azure_replay`` always did; with them: ``(time_s, app_key, (service_s, memory_mb))``,
        each drawn per call from the function's percentiles (None where it has none)."""
        calls = self.durations_path is not None or self.memory_path is not None
        return _replay(self.functions, self.minutes, random.Random(seed), calls)

    def describe(self) -> dict:
        fns, calls = self.functions, self.calls
        with_d = [f for f in fns if f.duration_ms is not None]
        with_m = [f for f in fns if f.memory_mb is not None]
        return {
            "path": self.path, "minutes_replayed": self.minutes, "minutes_in_file": self.minutes_in_file, "functions": len(fns),
            "calls": calls, **{k: v for k, v in self.info.items() if k != "notes"},
            "durations": self.durations_path, "memory": self.memory_path,
            "durations_coverage": {"functions": len(with_d), "calls": sum(sum(f.counts) for f in with_d)},
            "memory_coverage": {"functions": len(with_m), "calls": sum(sum(f.counts) for f in with_m)},
            "function_to_app": "blake2b-64 of owner/app/function modulo the eight apps (app_for_function): the chain and "
                               "accelerator a call uses; durations and memory from the files take precedence",
        }


def load_azure_trace(invocations_path, durations=None, memory=None, minutes: int | None = None,
                     apps: Sequence[str] = APP_KEYS) -> AzureTrace:
    """Read and check the invocations file (and the durations and memory files, paths or None),
    keeping the first ``minutes`` minutes (all when None)."""
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1):
        raise WorkloadError(f"minutes={minutes!r}: give a whole number of minutes >= 1")
    rows, info = _read_invocations(invocations_path, minutes)
    dur = read_azure_durations(durations) if durations is not None else None
    mem = read_azure_memory(memory) if memory is not None else None
    n = min(minutes, info["minutes_in_file"]) if minutes is not None else info["minutes_in_file"]
    fns = []
    for r in rows:
        d = dur.lookup(r.owner, r.app, r.function) if dur is not None else None
        m = mem.lookup(r.owner, r.app, r.function) if mem is not None else None
        fns.append(TraceFunction(r.owner, r.app, r.function, app_for_function(r.owner, r.app, r.function, apps), r.counts,
                                 d.dist if d is not None else None, m.dist if m is not None else None))
    if dur is not None:
        info["durations_ignored_columns"] = dur.ignored
    if mem is not None:
        info["memory_ignored_columns"] = mem.ignored
    return AzureTrace(str(invocations_path), fns, n, info.pop("minutes_in_file"), None if durations is None else str(durations),
                      None if memory is None else str(memory), info)


def azure_replay(invocations_path, seed: int = 0, apps: Sequence[str] = APP_KEYS, minutes: int | None = None,
                 durations=None, memory=None) -> Iterator[tuple]:
    """Replay an Azure invocation-count file (``AzureTrace.replay``); each function maps to an
    app by ``app_for_function``. The files are read and checked completely before the first
    arrival."""
    return load_azure_trace(invocations_path, durations, memory, minutes, apps).replay(seed)


def _replay(functions: list[TraceFunction], n_minutes: int, rng: random.Random, calls: bool):
    rand = rng.random
    for m in range(n_minutes):
        base = m * 60.0
        batch = []
        for f in functions:
            k = f.counts[m] if m < len(f.counts) else 0
            if not k:
                continue
            if not calls:
                for _ in range(k):
                    batch.append((base + 60.0 * rand(), f.app_key))
                continue
            dur, mem = f.duration_ms, f.memory_mb
            for _ in range(k):
                t = base + 60.0 * rand()
                svc = dur.sample(rand()) / 1e3 if dur is not None else None
                mb = mem.sample(rand()) if mem is not None else None
                batch.append((t, f.app_key, (svc, mb)))
        batch.sort(key=lambda x: (x[0], x[1]))
        yield from batch
