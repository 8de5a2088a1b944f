"""A figure with its source: the one record type for cited numbers in ``nearfaas.hw`` and the twin.

``Sourced(value, source, status="src", sweep=None)``; ``status`` is one of

* ``src``        a named public source,
* ``mem``        an unverified recollection (verify before it reaches a results table),
* ``ran``        computed with a named tool on this machine kind,
* ``derived``    arithmetic on other cited figures, shown in ``source``,
* ``assumption`` our choice; ``sweep`` gives the range to sweep.

Validation (at construction, the message names the field and the fix):

* ``source`` is a non-empty string (a citation, or ``"assumption: why"``);
* ``value`` is a finite, non-negative number, ``None`` (not applicable: ``source`` says why), or a
  dict of such numbers / labels (e.g. peak ops per dtype, a host link record). Every figure these
  tables hold is a magnitude (a rate, a power, a price, a count, a time), so negative values are
  rejected;
* ``sweep`` is ``(lo, hi)`` with finite ``0 <= lo <= hi`` that contains a numeric ``value``.

>>> Sourced(38.4, "DDR5-4800 x 64 bit").value
38.4
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

STATUSES = ("src", "mem", "ran", "derived", "assumption")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_number(v: Any, where: str) -> None:
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}={v!r}: must be a finite, non-negative number")


def _check_value(v: Any, where: str) -> None:
    if v is None:
        return
    if _is_number(v):
        _check_number(v, where)
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} must be a string")
            if x is None or isinstance(x, str):
                continue
            if not _is_number(x):
                raise ValueError(f"{where}[{k!r}]={x!r}: must be a number, a string label or None")
            _check_number(x, f"{where}[{k!r}]")
        return
    raise ValueError(f"{where}={v!r}: must be a number, None (not applicable) or a dict of numbers/labels")


@dataclass(frozen=True)
class Sourced:
    """One figure with where it came from (see the module docstring for the rules)."""

    value: Any
    source: str
    status: str = "src"
    sweep: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("Sourced.source: every figure needs a source (a citation or 'assumption: why')")
        if self.status not in STATUSES:
            raise ValueError(f"Sourced.status={self.status!r}: use one of {list(STATUSES)}")
        _check_value(self.value, "Sourced.value")
        if self.sweep is not None:
            s = self.sweep
            if not isinstance(s, tuple) or len(s) != 2 or not all(_is_number(x) for x in s):
                raise ValueError(f"Sourced.sweep={s!r}: give a (lo, hi) pair of numbers")
            for x in s:
                _check_number(x, "Sourced.sweep")
            if s[0] > s[1]:
                raise ValueError(f"Sourced.sweep={s!r}: lo must be <= hi")
            if not _is_number(self.value):
                raise ValueError(f"Sourced.sweep={s!r}: a sweep needs a numeric value (got {self.value!r})")
            if not s[0] <= self.value <= s[1]:
                raise ValueError(f"Sourced.sweep={s!r}: must contain the value {self.value!r}")

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source, "status": self.status, "sweep": self.sweep}


__all__ = ["STATUSES", "Sourced"]
