"""The thesis's particle tables (Table 5.3), generated in code: uniform values, as the thesis's were.

| field | type | values here |
|---|---|---|
| id | uint64 | the row number (unique) |
| time | uint64 | the time step: row // PARTICLES |
| particle_id | uint64 | which particle: row % PARTICLES (so each particle appears once per step) |
| x, y, z | double | uniform in [0, 1) |
| vx, vy, vz | double | uniform in [-100, 100) |

The thesis gives only the ranges of x..vz; how ids, times and particle ids are laid out is our
choice, made to look like a simulation's output (a fixed population observed at every step).
"""

from __future__ import annotations

import numpy as np

PARTICLES = 16384
POSITION = (0.0, 1.0)
VELOCITY = (-100.0, 100.0)
COLUMNS = ("id", "time", "particle_id", "x", "y", "z", "vx", "vy", "vz")


def particles(rows: int, seed: int = 0, first_id: int = 0):
    """A pyarrow Table of ``rows`` particle records."""
    import pyarrow as pa

    if not isinstance(rows, int) or rows < 0:
        raise ValueError(f"rows must be a non-negative integer, got {rows!r}")
    rng = np.random.default_rng(seed)
    row = np.arange(first_id, first_id + rows, dtype=np.uint64)
    cols = {"id": row, "time": row // PARTICLES, "particle_id": row % PARTICLES}
    for name in ("x", "y", "z"):
        cols[name] = rng.uniform(*POSITION, rows)
    for name in ("vx", "vy", "vz"):
        cols[name] = rng.uniform(*VELOCITY, rows)
    return pa.table(cols)
