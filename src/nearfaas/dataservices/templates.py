"""Table 5.5's query templates T1–T10, as SQL with placeholders, and random instances of them.

The thesis trained its query-time model on templates (C++ logical plans with placeholders)
instantiated with random constants over random particle tables; these are its SQL forms. The
SQL is the thesis's as printed, including its reuse of a placeholder in two places (T8's and
T9's ``k1``) and T9's missing ``k5``: a reused placeholder gets one value in both places.

Each placeholder has a range that makes sense for what it meets (Table 5.3: x, y, z in [0, 1),
vx, vy, vz in [-100, 100)): a constant compared with a position lies in [0, 1), one compared
with a velocity in [-100, 100), a multiplier in [0.5, 2), so instances span selectivities from
~0 to ~1 rather than all keeping everything or nothing.

Worked example::

    >>> import random
    >>> instantiate("T1", random.Random(0))
    'select * from particles where x >= 0.844422 and y < 0.757954 and z <= 0.420572'

Known caveats:
* Constants are drawn independently: in T3 ``power(vz, 2) * k1 > k2`` keeps between ~0% and
  ~100% of the rows depending on both draws; the spread is wanted (the model must see it), the
  distribution of selectivities is not uniform.
* Values are rounded to 6 decimals so the SQL text stays short and exact to re-read.
"""

from __future__ import annotations

import re

POS = (0.0, 1.0)
VEL = (-100.0, 100.0)
MUL = (0.5, 2.0)

#: id -> (SQL with {k1}.. placeholders, {placeholder: (low, high)}).
TEMPLATES: dict[str, tuple[str, dict[str, tuple[float, float]]]] = {
    "T1": ("select * from particles where x >= {k1} and y < {k2} and z <= {k3}",
           {"k1": POS, "k2": POS, "k3": POS}),
    "T2": ("select * from particles where vy > {k1} or (vx * {k2}) <= {k3}",
           {"k1": VEL, "k2": MUL, "k3": (-200.0, 200.0)}),
    "T3": ("select * from particles where power(vz, 2) * {k1} > {k2}",
           {"k1": MUL, "k2": (0.0, 15000.0)}),
    "T4": ("select * from particles where power(x, 2) <= {k1} or z * {k2} < {k3} or vz > {k4}",
           {"k1": (0.0, 0.5), "k2": MUL, "k3": (0.0, 1.0), "k4": (0.0, 100.0)}),
    "T5": ("select count(*) from particles where x < {k1}", {"k1": POS}),
    "T6": ("select particle_id, power(vx, 2) + power(vy, 2) + power(vz, 2) from particles where x >= {k1}",
           {"k1": POS}),
    "T7": ("select particle_id, x * {k1}, y * {k2}, z * {k3} from particles where x >= {k4} and y < {k5} and z <= {k6}",
           {"k1": MUL, "k2": MUL, "k3": MUL, "k4": POS, "k5": POS, "k6": POS}),
    "T8": ("select particle_id, x + {k1}, y - {k2}, z - {k3} from particles where z > {k1} and z <= {k4}",
           {"k1": POS, "k2": POS, "k3": POS, "k4": POS}),
    "T9": ("select particle_id, (vx + {k1}) * {k2}, (vy - {k3}) * {k4}, (vz + vy + vz) * {k6} from particles "
           "where (vx + vy + vz) > {k1}",
           {"k1": (-150.0, 150.0), "k2": MUL, "k3": VEL, "k4": MUL, "k6": MUL}),
    "T10": ("select particle_id, x + y - z, vx - vy + vz from particles where x > {k1} and y < {k2} and z > {k3}",
            {"k1": POS, "k2": POS, "k3": POS}),
}

IDS = tuple(TEMPLATES)


def placeholders(template_id: str) -> list[str]:
    """The placeholders a template's SQL names, in order of first appearance."""
    text, _ = TEMPLATES[template_id]
    return list(dict.fromkeys(re.findall(r"\{(k\d+)\}", text)))


def instantiate(template_id: str, rng) -> str:
    """The template's SQL with each placeholder replaced by a draw from its range; ``rng`` is a
    ``random.Random`` or a numpy ``Generator`` (anything with ``uniform(low, high)``)."""
    try:
        text, ranges = TEMPLATES[template_id]
    except KeyError:
        raise ValueError(f"unknown template {template_id!r}; choose one of: {', '.join(IDS)}") from None
    values = {k: round(float(rng.uniform(*ranges[k])), 6) for k in placeholders(template_id)}
    return text.format(**{k: repr(v) for k, v in values.items()})
