"""Errors and warnings for the stack and cluster spec loaders, and the low-level readers
(YAML text, scalars, mappings, lists) both loaders share to turn bad input into problems.

A spec file is usually wrong in more than one place, and fixing one problem per run is
tedious, so the loaders collect every `Problem` and raise one `SpecError` at the end.
Each problem names the YAML path of the offending field (`functions.resize.environment.
exec_timeout`) and says how to fix it, because the reader is a person editing a file.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import math
import re
import reprlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where (YAML path), what, and how to fix it."""

    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = self.path or "(spec)"
        return f"{where}: {self.message}" + (f" (fix: {self.fix})" if self.fix else "")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class SpecWarning(Problem):
    """Something we accept but ignore or guess about (an unknown field, a missing version).

    A record rather than a `warnings.warn` category: the CLI prints them and the gateway
    returns them in its deploy answer, and neither wants Python's warning filters involved.
    """

    def __str__(self) -> str:
        return "warning: " + super().__str__()


class SpecError(Exception):
    """A spec that cannot be used; carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem] | Problem) -> None:
        if isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        # Passing the list to Exception keeps the error picklable (args rebuild it), which
        # matters when a loader runs in a worker process and the error crosses back.
        super().__init__(self.problems)

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON body for an HTTP 400 answer from the gateway's deploy endpoints."""
        return {"error": "invalid spec", "problems": [p.to_dict() for p in self.problems]}


def join_path(base: str, key: object) -> str:
    """Extend a YAML path: ints become `[i]` (list items), anything else `.key`."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """A 'did you mean "x"?' hint for a typo, or '' when nothing is close enough."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f'did you mean "{close[0]}"?' if close else ""


@dataclass
class Collector:
    """Accumulates problems and warnings while a loader walks a spec."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[SpecWarning] = field(default_factory=list)

    def error(self, path: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(path, message, fix))

    def warn(self, path: str, message: str, fix: str = "") -> None:
        self.warnings.append(SpecWarning(path, message, fix))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SpecError(self.problems)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 2, 60, 60, 4, 4


def short_repr(value: object) -> str:
    """repr() bounded in size: YAML aliases can make a value that prints exponentially."""
    return _REPR.repr(value)


def type_name(value: object) -> str:
    """How a YAML reader would describe a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (bytes, bytearray)):
        return "binary data"
    return f"a {type(value).__name__}"


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_INT = re.compile(r"[+-]?\d{1,18}")  # signed, so callers can say "must not be negative"
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E)?")
_MEM_FACTOR = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
               "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


# ---------------------------------------------------------------- value parsers (ValueError)

def parse_duration(value: object) -> float:
    """OpenFaaS/Go duration ("10s", "1m30s", "500ms") or a plain number, to seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration, got {type_name(value)}")
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        else:
            seconds, pos = 0.0, 0
            for m in _DURATION_PART.finditer(text):
                if m.start() != pos:
                    break
                seconds += float(m.group(1)) * _UNIT_S[m.group(2)]
                pos = m.end()
            if not text or pos != len(text):
                raise ValueError("expected a number with a unit (ns, us, ms, s, m, h), or plain seconds")
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError("duration is too large") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("must be finite and not negative")
    return seconds


def parse_int(value: object) -> int:
    """An int from YAML, where labels and env values often arrive as strings ("3")."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip())
    raise ValueError(f"expected a whole number, got {type_name(value)}")


def parse_bool(value: object) -> bool:
    """A YAML boolean, or the strings "true"/"false" that OpenFaaS labels use."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {short_repr(value)}")


def parse_memory(value: str) -> int:
    """Kubernetes memory quantity ("128Mi", "1G", "1048576") to bytes."""
    m = _MEMORY.fullmatch(value.strip()) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"{short_repr(value)} is not a memory quantity")
    return int(float(m.group(1)) * _MEM_FACTOR[m.group(2)])


def scalar_str(value: object) -> str:
    """YAML scalar to the string OpenFaaS would see (true -> "true", 60 -> "60", null -> "")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, (_dt.date, _dt.datetime)):  # YAML turns 2024-01-01 into a date
        return value.isoformat()
    raise ValueError(f"expected a string, got {type_name(value)}")


# ---------------------------------------------------------------- YAML reading

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys: a second `resize:` silently replacing the
    first is the kind of mistake nobody finds by reading the file."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], yaml.Node] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    ident = (key_node.tag, key_node.value)
                    if ident in seen:
                        first = seen[ident].start_mark.line + 1
                        raise yaml.constructor.ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"found duplicate key {short_repr(key_node.value)} (first given on line {first})",
                            key_node.start_mark)
                    seen[ident] = key_node
        return super().construct_mapping(node, deep)  # type: ignore[arg-type]


# (fragments of PyYAML's message, the fix to suggest); the first match wins.
_YAML_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("\\t", "tab"), "indent with spaces; YAML does not allow tab characters"),
    (("duplicate key",), "remove or rename one of the two entries"),
    (("mapping values are not allowed",), "quote values that contain ': ', and check the line is indented like its siblings"),
    (("<block end>", "block mapping"), "this line is indented differently from its siblings; line up keys at the same level"),
    (("<stream end>", "end of stream"), "the file ends inside an open bracket, brace or quote; close it"),
    (("expected ':'", "could not find expected"), "write every entry as `key: value` with a space after the colon, and close quotes and brackets"),
    (("could not determine a constructor",), "remove the `!tag`; only plain YAML values (text, numbers, lists, mappings) are read"),
    (("unhashable key",), "keys must be plain text, not lists or mappings"),
    (("special characters are not allowed", "non-printable"), "remove the control character; save the file as plain UTF-8 text"),
)


def _yaml_hint(what: str) -> str:
    for fragments, hint in _YAML_HINTS:
        if any(f in what for f in fragments):
            return hint
    return "check the indentation (spaces only) near that line and quote values containing ':', '#', '[' or '{'"


def load_yaml_text(text: str, where: str) -> Any:
    """Parse YAML, turning every failure into a SpecError at `where` with line and column."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        what = str(getattr(exc, "problem", None) or getattr(exc, "reason", None) or exc)
        if mark is not None:
            at = f" at line {mark.line + 1}, column {mark.column + 1}"
        elif getattr(exc, "position", None) is not None:
            at = f" at character {exc.position}"  # type: ignore[attr-defined]
        else:
            at = ""
        # The context ("while scanning a quoted scalar") and where it began often point
        # at the real mistake, e.g. an unclosed quote many lines above the reported spot.
        context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and cmark is not None and cmark is not mark:
            what += f" ({context} that starts at line {cmark.line + 1}, column {cmark.column + 1})"
        raise SpecError(Problem(where, f"YAML syntax error{at}: {what}", _yaml_hint(what))) from None
    except (ValueError, OverflowError) as exc:  # e.g. `2024-13-45` read as a bad timestamp
        raise SpecError(Problem(where, f"YAML value could not be read: {exc}",
                                "quote values that look like dates or numbers but are not")) from None
    except RecursionError:
        raise SpecError(Problem(where, "YAML is nested too deeply", "flatten the structure")) from None


MAX_SPEC_BYTES = 4 * 1024 * 1024


def read_text_file(path: Path, where: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """Read a UTF-8 text file, turning OS and decoding failures into a SpecError.

    Only regular files of modest size: a stack can name any path in environment_file, and
    /dev/zero or a FIFO there must not hang or exhaust the gateway."""
    try:
        st = path.stat()
        if path.is_dir():
            raise SpecError(Problem(where, f"{path} is a directory", "name the YAML file itself"))
        if not path.is_file():
            raise SpecError(Problem(where, f"{path} is not a regular file", "name a YAML file"))
        if st.st_size > max_bytes:
            raise SpecError(Problem(where, f"{path} is {st.st_size} bytes; the limit is {max_bytes}",
                                    "split the file or remove what is not configuration"))
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise SpecError(Problem(where, f"file not found: {path}", "check the path and the working directory")) from None
    except UnicodeDecodeError as exc:
        raise SpecError(Problem(where, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                                "save the file as UTF-8")) from None
    except (OSError, ValueError) as exc:
        raise SpecError(Problem(where, f"cannot read {path}: {exc}", "check the path and its permissions")) from None


# ---------------------------------------------------------------- structure readers

def read_mapping(value: Any, path: str, c: Collector) -> dict[str, Any] | None:
    """A mapping (null counts as empty), or None after reporting what else it was.

    Non-string keys are reported and dropped, so the caller still checks the other keys."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        c.error(path, f"must be a mapping of `key: value` lines, got {type_name(value)}",
                "indent the entries under the key, one `name: value` per line")
        return None
    for k in value:
        if not isinstance(k, str):
            c.error(join_path(path, short_repr(k)), f"keys must be strings, got {type_name(k)}",
                    f'quote the key: "{short_repr(k)}"')
    return {k: v for k, v in value.items() if isinstance(k, str)}


def read_str_map(value: Any, path: str, c: Collector, *, env: bool = False) -> dict[str, str] | None:
    """labels/annotations/environment: names to scalars, stringified as OpenFaaS would."""
    m = read_mapping(value, path, c)
    if m is None:
        return None
    out: dict[str, str] = {}
    for k, v in m.items():
        p = join_path(path, k)
        try:
            out[k] = scalar_str(v)
        except ValueError as exc:
            c.error(p, str(exc), 'give a single value; quote it to keep it literal, e.g. "a,b"')
            continue
        if env and ("=" in k or "\0" in k or not k.strip()):
            c.error(p, "is not a usable environment variable name", "use letters, digits and underscores")
        elif env and "\0" in out[k]:
            c.error(p, "contains a NUL character, which an environment variable cannot hold")
    return out


def read_str_list(value: Any, path: str, c: Collector, *, allow_single: bool = False) -> list[str] | None:
    """A list of non-empty strings (null counts as empty); None after reporting otherwise."""
    if value is None:
        return []
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        c.error(path, f"must be a list of strings, got {type_name(value)}", "write one `- item` per line")
        return None
    out: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item.strip():
            out.append(item.strip())
        else:
            c.error(join_path(path, i), f"must be a non-empty string, got {type_name(item)} {short_repr(item)}",
                    "quote the item")
    return out if len(out) == len(value) else None


def check_unknown_keys(m: dict[str, Any], known: set[str], path: str, c: Collector, *, error: bool = False) -> None:
    """Unknown keys: a warning (foreign files we only partly use) or an error (our own blocks,
    where a typo would silently drop a setting). Either way with a did-you-mean hint."""
    for k in m:
        if k in known:
            continue
        hint = did_you_mean(k, known)
        if error:
            c.error(join_path(path, k), "is not a known option", hint or f"known options: {', '.join(sorted(known))}")
        else:
            c.warn(join_path(path, k), "unknown field, ignored", hint)


class WireReader:
    """Typed getters for JSON wire records (dicts must map str to str, lists hold str), which
    report a wrong field to the Collector instead of failing later with a TypeError."""

    def __init__(self, data: dict[Any, Any], base: str, c: Collector) -> None:
        self.data, self.base, self.c = data, base, c

    def get(self, key: str, kind: type, default: Any = ...) -> Any:
        path = join_path(self.base, key)
        if key not in self.data:
            if default is ...:
                self.c.error(path, "is missing")
                return None
            return copy.copy(default)  # a fresh {} or [] per record, never a shared default
        v = self.data[key]
        ok = isinstance(v, kind) and not (kind is not bool and isinstance(v, bool))
        if kind is float and isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                v = float(v)
                ok = math.isfinite(v) and v >= 0
            except OverflowError:  # an int too large for a float
                ok = False
        elif kind is int and ok:
            ok = v >= 0
        elif kind is dict and ok:
            ok = all(isinstance(k, str) and isinstance(val, str) for k, val in v.items())
        elif kind is list and ok:
            ok = all(isinstance(item, str) for item in v)
        if not ok:
            self.c.error(path, f"has the wrong type or value ({type_name(v)})",
                         f"send what to_dict() produces for {key}")
            return None if default is ... else default
        return dict(v) if kind is dict else list(v) if kind is list else v
