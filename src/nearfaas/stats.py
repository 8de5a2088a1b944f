"""The summary statistics nearfaas reports (benchmarks, the twin, the DSE): one definition of each, so two results files
never disagree on what "p99" means.

``percentile`` is nearest-rank on the sorted samples (index ``round(q/100 * (n-1))``): it always
returns a value that was measured, never an interpolation between two.
"""

from __future__ import annotations

import math
import statistics

NAN = float("nan")


def percentile(values, q: float, default=NAN):
    """The ``q``-th percentile (0..100) of ``values``; ``default`` when there are none (NaN for
    arithmetic, None where the result goes to JSON, which has no NaN)."""
    ordered = sorted(values)
    if not ordered:
        return default
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def median(values, default=NAN):
    values = list(values)
    return statistics.median(values) if values else default


def mean(values, default=NAN):
    values = list(values)
    return statistics.fmean(values) if values else default


def geomean(values, default=NAN):
    """The geometric mean of positive ``values`` (speed-ups, ratios); ``default`` when empty."""
    values = list(values)
    return math.exp(math.fsum(math.log(x) for x in values) / len(values)) if values else default


def present(values) -> list:
    """``values`` without None and NaN: a repeat that measured nothing must not shift a median."""
    return [v for v in values if v is not None and v == v]
