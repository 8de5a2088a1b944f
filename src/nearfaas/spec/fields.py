"""Readers of the cluster file's scalar fields, shared by spec/cluster.py and the sections kept in
modules of their own (spec/budgets.py): each reports a bad value to the Collector, naming the
field and an example, and keeps the default.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import Collector, join_path, parse_int, parse_memory, read_str_list, short_repr, type_name

NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # node, webhook and function names


def read_int(m: dict[str, Any], key: str, path: str, c: Collector, default: int, lo: int, hi: int | None,
         example: str) -> int:
    if key not in m:
        return default
    try:
        n = parse_int(m[key])
    except ValueError as exc:
        c.error(join_path(path, key), f"bad value {short_repr(m[key])}: {exc}", f"write e.g. {key}: {example}")
        return default
    if n < lo or (hi is not None and n > hi):
        span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        c.error(join_path(path, key), f"must be {span}, got {n}", f"write e.g. {key}: {example}")
        return default
    return n


def read_str(m: dict[str, Any], key: str, path: str, c: Collector, default: str, example: str) -> str:
    if key not in m:
        return default
    v = m[key]
    if not isinstance(v, str) or not v.strip() or "\0" in v:
        c.error(join_path(path, key), f"must be a non-empty string, got {type_name(v)} {short_repr(v)}",
                f"write e.g. {key}: {example}")
        return default
    return v.strip()


def parse_size(value: Any) -> int:
    """Bytes from an int or a quantity such as "5Gi", "5GiB" or "100M"."""
    if isinstance(value, str) and re.fullmatch(r"\s*[\d.]+\s*[KMGTPE]i?B\s*", value):
        value = value.strip()[:-1]  # "5GiB" -> "5Gi": people write the B, Kubernetes does not
    if isinstance(value, str):
        return parse_memory(value.replace(" ", ""))
    return parse_int(value)


def read_names(value: Any, path: str, c: Collector, what: str, example: str) -> list[str]:
    """A list of names (NAME: lower-case letters, digits, '-'); each bad one reported by its index."""
    names = read_str_list(value, path, c, allow_single=True) or []
    for i, name in enumerate(names):
        if not NAME.fullmatch(name):
            c.error(join_path(path, i), f"{short_repr(name)} is not a {what} name",
                    f"use lower-case letters, digits and '-', e.g. {example}")
    return [n for n in names if NAME.fullmatch(n)]


def read_sizes(m: dict[str, Any], keys, target, path: str, c: Collector, examples: str, zero_ok=()) -> None:
    """Set each of ``keys`` present in ``m`` on ``target`` as a byte count (``parse_size``): at least
    1, or 0 too for the keys in ``zero_ok`` (where 0 means no cap)."""
    for key in keys:
        if key not in m:
            continue
        try:
            size = parse_size(m[key])
            if size < (0 if key in zero_ok else 1):
                raise ValueError("must be at least 1 byte")
            setattr(target, key, size)
        except ValueError as exc:
            c.error(join_path(path, key), f"bad size {short_repr(m[key])}: {exc}",
                    f"write a byte count or a quantity such as {examples}")
