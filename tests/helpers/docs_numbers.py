"""Find the numbers the docs attribute to benchmark result files, and look them up there.

The convention this implements is written down in tests/unit/test_docs_numbers.py (and in
docs/benchmarks.md, "Numbers in the docs"). ``python tests/helpers/docs_numbers.py [-v]`` lists
every cited number that is not found (with -v: every cited number and what it matched).
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def docs(root: Path = ROOT) -> list[Path]:
    return sorted((root / "docs").glob("*.md")) + [root / "README.md"]


# unit -> the factors a leaf v is multiplied by to give the number shown in that unit
UNITS: dict[str, tuple[float, ...]] = {
    "": (1.0, 1e3),  # a table cell whose column names no unit: as is, or seconds shown in ms
    "ms": (1.0, 1e3),
    "µs": (1.0, 1e3, 1e6),
    "us": (1.0, 1e3, 1e6),
    "ns": (1.0, 1e3, 1e6, 1e9),
    "s": (1.0, 1e-3),
    "min": (1.0, 1 / 60),
    "%": (1.0, 100.0),
    "×": (1.0,),
    "x": (1.0,),
    "req/s": (1.0,),
    "events/s": (1.0,),
    "ops/s": (1.0,),
    "MB/s": (1.0, 1e-6, 2.0**-20),
    "GB/s": (1.0, 1e-9, 2.0**-30),
    "B": (1.0, 1e-9),  # bytes, or billions (of parameters)
    "kB": (1.0, 1e-3, 2.0**-10),
    "KB": (1.0, 1e-3, 2.0**-10),
    "MB": (1.0, 1e-6, 2.0**-20),
    "GB": (1.0, 1e-9, 2.0**-30),
    "M": (1.0, 1e-6),  # millions
    "W": (1.0,),
    "J": (1.0, 1e3, 1e-3),
    "mJ": (1.0, 1e3),
}
RATIO_UNITS = ("×", "x")
SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB")  # sizes a benchmark is configured with: not checked
SAMPLES = 10  # a list of more numbers than this holds raw samples; the docs cite their summaries

_UNIT_RE = "|".join(re.escape(u) for u in sorted([*UNITS, *SIZE_UNITS], key=len, reverse=True) if u)
NUMBER = re.compile(
    r"(?<![\w.,/@#:$^])"  # not the tail of a word, a version, a path or an anchor
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?!\.\d|,\d{3})"  # nor the head of a version (3.11.7)
    r"(?:(?P<space>[ \u00a0]?)(?P<unit>" + _UNIT_RE + r"))?"
    r"(?!\w)"  # 88734e7, 25g, 3x3: not numbers
)
_HEADER_UNITS = [u for u in sorted(UNITS, key=len, reverse=True) if u and u not in ("x", "B", "M", "W", "J")]
HEADER_UNIT = re.compile(r"(?<![\w/])(" + "|".join(re.escape(u) for u in _HEADER_UNITS) + r")(?![\w/])")
JOINER = re.compile(r"^\s*(?:[–—-]|/|to|vs\.?)\s*$")  # "a–b ms", "a / b / c ms", "a vs b s"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T[\d:.]+Z?)?")
CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
UNCHECKED = re.compile(r"<!--\s*unchecked:\s*(.*?)\s*-->", re.S)
# file.json, file.json@commit, and either with #a.b.c: only the leaves under that dict path (a big
# record's numbers are found where the doc says they are, not anywhere in it by chance)
CITE = re.compile(r"(?<![\w/.-])(?:benchmarks/results/)?([A-Za-z0-9_.-]+\.json)(?:@([0-9a-f]{7,40}))?(?:#([A-Za-z0-9_.]+))?")
SEPARATOR_ROW = re.compile(r"\s*\|[\s|:-]*\|?\s*")


# ---------------------------------------------------------------- result files


class NoHistory(Exception):
    """This checkout has no git history to read a committed result file from."""


@functools.cache
def load_result(results: Path, name: str, commit: str | None) -> object:
    if commit is None:
        return json.loads((results / name).read_text())
    repo = results.parents[1]
    if not (repo / ".git").exists():
        raise NoHistory(f"{name}@{commit}: not a git checkout")
    try:
        run = subprocess.run(
            ["git", "show", f"{commit}:{results.relative_to(repo).as_posix()}/{name}"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except FileNotFoundError as e:  # no git
        raise NoHistory(f"{name}@{commit}: {e}") from None
    if run.returncode != 0:
        raise FileNotFoundError(f"{name}@{commit}: {run.stderr.strip()}")
    return json.loads(run.stdout)


def leaves(obj, path=()):
    """(path, value) of every numeric leaf but those of raw-sample lists (> SAMPLES numbers);
    a path is a tuple of dict keys and list indices."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, (*path, k))
    elif isinstance(obj, list):
        if len(obj) > SAMPLES and all(isinstance(v, (int, float)) for v in obj):
            return
        for i, v in enumerate(obj):
            yield from leaves(v, (*path, i))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):
        yield path, float(obj)


def subtree(results: Path, name: str, commit: str | None, under: str | None = None) -> object:
    """The record, or the part of it at the dotted dict path ``under`` (a missing key: nothing)."""
    obj = load_result(results, name, commit)
    for key in (under.split(".") if under else ()):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


@functools.cache
def values(results: Path, name: str, commit: str | None, under: str | None = None) -> list[float]:
    return sorted({abs(v) for _, v in leaves(subtree(results, name, commit, under))})


@functools.cache
def like_for_like_ratios(results: Path, name: str, commit: str | None, under: str | None = None) -> list[float]:
    """a / b for two leaves whose paths differ in exactly one dict key, nothing else."""
    groups: dict[tuple, set[float]] = {}
    for path, v in leaves(subtree(results, name, commit, under)):
        if v == 0:
            continue
        for i, part in enumerate(path):
            if isinstance(part, str):
                groups.setdefault((i, path[:i], path[i + 1 :]), set()).add(abs(v))
    return sorted({a / b for vals in groups.values() if len(vals) > 1 for a in vals for b in vals if a != b})


def _near(sorted_values: list[float], target: float, tol: float) -> bool:
    i = bisect.bisect_left(sorted_values, target - tol)
    return i < len(sorted_values) and sorted_values[i] <= target + tol


# ---------------------------------------------------------------- docs


@dataclass(frozen=True)
class Cited:
    doc: str
    line: int
    text: str  # as written; a unit in [brackets] was taken from the column or the run
    value: float
    decimals: int
    sig: int
    unit: str
    files: tuple[tuple[str, str | None, str | None], ...]  # (file, commit, dict path within it)
    context: str

    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def sources(self) -> str:
        return ", ".join(label(*f) for f in self.files)


def label(name: str, commit: str | None, under: str | None = None) -> str:
    return name + (f"@{commit}" if commit else "") + (f"#{under}" if under else "")


@dataclass
class Block:
    kind: str  # "heading" | "para" | "item" | "table"
    start: int  # its first line, 1-based
    lines: list[str]
    level: int = 0  # a heading's


def cited_files(text: str, results: Path) -> list[tuple[str, str | None]]:
    out = []
    for m in CITE.finditer(text):
        name, commit, under = m.group(1), m.group(2), m.group(3)
        if (commit or (results / name).is_file()) and (name, commit, under) not in out:
            out.append((name, commit, under))
    return out


def blocks(text: str) -> list[Block]:
    """Headings, paragraphs, list items and tables, in order; fenced code is left out."""
    out: list[Block] = []
    cur: Block | None = None
    fenced = False
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            fenced, cur = not fenced, None
            continue
        if fenced:
            continue
        if not s:
            cur = None
            continue
        if s.startswith("#"):
            out.append(Block("heading", no, [line], len(s) - len(s.lstrip("#"))))
            cur = None
            continue
        kind = "table" if s.startswith("|") else "item" if re.match(r"\s*(?:[-*+]|\d+\.)\s", line) else "para"
        if cur is not None and (cur.kind == kind == "table" or (cur.kind != "table" and kind == "para")):
            cur.lines.append(line)
            continue
        cur = Block(kind, no, [line])
        out.append(cur)
    return out


def unchecked_items(text: str) -> tuple[set[str], set[str]]:
    """The numbers (as plain digits) and column names listed in ``<!-- unchecked: a; b -->``."""
    numbers, columns = set(), set()
    for m in UNCHECKED.finditer(text):
        for item in (i.strip() for i in m.group(1).split(";")):
            n = re.fullmatch(r"[+\-−~]?(\d[\d,]*(?:\.\d+)?)\s*(?:" + _UNIT_RE + r")?", item)
            if n:
                numbers.add(n.group(1).replace(",", ""))
            elif item:
                columns.add(item)
    return numbers, columns


def _clean(text: str) -> str:
    """The text without code spans, comments, link targets, dates and emphasis."""
    text = COMMENT.sub(" ", text)
    text = CODE.sub(" ", text)
    text = LINK_TARGET.sub("]", text)
    text = DATE.sub(" ", text)
    return text.replace("**", "").replace("\\", "")


def sig_digits(num: str) -> int:
    digits = num.replace(",", "")
    if "." in digits:
        return len(digits.replace(".", "").lstrip("0"))
    return len(digits.strip("0")) or 1


def header_unit(name: str) -> str:
    """The unit a column header names ("p50 ms", "CPU-µs per request"), if exactly one."""
    found = {m.group(1) for m in HEADER_UNIT.finditer(_clean(name))}
    return found.pop() if len(found) == 1 else ""


def numbers_in(text: str, *, cell: bool, unchecked: set[str] = frozenset(), column_unit: str = ""):
    """(as written, value, decimals, significant digits, unit) of each number to check.

    Prose (``cell=False``): only numbers with a unit. A table cell: every number; one without a
    unit of its own takes its column's.
    """
    clean = _clean(text)
    found = list(NUMBER.finditer(clean))
    units = [m.group("unit") or "" for m in found]
    for i in range(len(found) - 2, -1, -1):  # "a–b ms", "a / b ms", "a vs b ms": one unit for all
        if not units[i] and units[i + 1] and JOINER.match(clean[found[i].end() : found[i + 1].start()]):
            units[i] = units[i + 1]
    out = []
    for m, unit in zip(found, units, strict=True):
        num = m.group("num")
        plain = num.replace(",", "")
        if unit in SIZE_UNITS or (not unit and not cell):
            continue
        sig = sig_digits(num)
        if sig < 2 or plain in unchecked:
            continue
        if m.group("unit"):
            shown = num + (m.group("space") or "") + m.group("unit")
        else:
            unit = unit or column_unit
            shown = num + (f" [{unit}]" if unit else "")
        # the place of the last significant digit: 2 for 0.37, 0 for 273, -3 for 24,000
        decimals = len(plain.split(".")[1]) if "." in plain else -(len(plain) - len(plain.rstrip("0")))
        out.append((shown, float(plain), decimals, sig, unit))
    return out


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _union(*lists) -> tuple:
    out: list = []
    for ls in lists:
        out += [f for f in ls if f not in out]
    return tuple(out)


def cited_numbers(doc: Path, root: Path = ROOT, results: Path = RESULTS) -> list[Cited]:
    """Every number of one doc that a citation covers, with the files it must be found in."""
    rel = doc.relative_to(root).as_posix()
    out: list[Cited] = []
    headings: list[tuple[int, list]] = []  # (level, files) of the headings above
    prev: Block | None = None
    for b in blocks(doc.read_text()):
        if b.kind == "heading":
            while headings and headings[-1][0] >= b.level:
                headings.pop()
            headings.append((b.level, cited_files(b.lines[0], results)))
            prev = b
            continue
        section = [f for _, fs in headings for f in fs]
        if b.kind == "table":
            caption = "\n".join(prev.lines) if prev is not None and prev.kind != "table" else ""
            header = b.lines[0]
            table_files = _union(section, cited_files(caption, results), cited_files(header, results))
            t_numbers, t_columns = unchecked_items(caption + "\n" + header)
            names = _cells(header)
            for i, row in enumerate(b.lines[1:], 1):
                files = _union(table_files, cited_files(row, results))
                if SEPARATOR_ROW.fullmatch(row) or not files:
                    continue
                r_numbers, _ = unchecked_items(row)
                for col, cell in enumerate(_cells(row)):
                    name = _clean(names[col]).strip() if col < len(names) else ""
                    if col == 0 or name in t_columns:
                        continue  # the first column names the row
                    found = numbers_in(
                        cell,
                        cell=bool(table_files),  # a row that cites only itself reads as prose
                        unchecked=t_numbers | r_numbers,
                        column_unit=header_unit(name),
                    )
                    out += [Cited(rel, b.start + i, *n, files, row.strip()) for n in found]
        else:
            files = _union(section, cited_files("\n".join(b.lines), results))
            if files:
                exempt, _ = unchecked_items("\n".join(b.lines))
                for j, line in enumerate(b.lines):
                    out += [Cited(rel, b.start + j, *n, files, line.strip()) for n in numbers_in(line, cell=False, unchecked=exempt)]
        prev = b
    return out


def all_cited(root: Path = ROOT, results: Path = RESULTS) -> list[Cited]:
    return [n for doc in docs(root) for n in cited_numbers(doc, root, results)]


# ---------------------------------------------------------------- matching


def match(n: Cited, results: Path = RESULTS, x: float | None = None) -> str | None:
    """How the number (or x, shown as n is) is found in n's files, or None.

    Raises NoHistory when it is not found and a file it cites at a commit cannot be read.
    """
    x = n.value if x is None else x
    tol = 0.5 * 10.0**-n.decimals + 1e-9 * max(1.0, x)
    readable, missing_history = [], None
    for f in n.files:
        try:
            values(results, *f)
            readable.append(f)
        except NoHistory as e:
            missing_history = e
    for f in readable:
        for scale in UNITS[n.unit]:  # v * scale within tol of x <=> v within tol / scale of x / scale
            if _near(values(results, *f), x / scale, tol / scale):
                return f"{label(*f)} v×{scale:g}"
    if n.unit in RATIO_UNITS and n.sig >= 3:
        for f in readable:
            if _near(like_for_like_ratios(results, *f), x, tol):
                return f"{label(*f)} a/b"
    if missing_history is not None:
        raise missing_history
    return None


def main(argv: list[str]) -> int:
    numbers = all_cited()
    bad = 0
    for n in numbers:
        try:
            how = match(n)
        except NoHistory as e:
            how = f"(not checked: {e})"
        bad += how is None
        if how is None or "-v" in argv:
            print(f"{'ok ' if how else 'BAD'} {n.where():26} {n.text:>16}  {how or n.sources()}  | {n.context[:100]}")
    covered = sorted({n.doc for n in numbers})
    print(f"{len(numbers)} cited numbers in {len(covered)} docs ({', '.join(covered)}); {bad} not found")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
