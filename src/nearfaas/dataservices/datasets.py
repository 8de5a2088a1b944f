"""Synthetic stand-ins for the thesis's three reference datasets (§4.4.3), generated in code.

The real datasets (TrackML, OpenSky, NOAA AIS) cannot be downloaded here, so each generator
copies what matters to the partitioning and compression experiments: the published schema
(field count and types), an ID field whose low bits are as diverse — or not — as the thesis
found, and value distributions with realistic redundancy. Everything else is our choice and
listed below; none of it is tuned to a result.

| dataset | fields | ID field | low ID bits (the thesis's finding) | how we get it |
|---|---|---|---|---|
| ``particles`` (TrackML) | 10 numeric | ``particle_id`` | poorly diverse: a 4-bit split fills 3 parts | the low 4 bits carry a generation code in {0, 1, 2} (60/30/10%) under a random barcode |
| ``planes`` (OpenSky) | 16 mixed | ``icao24`` | diverse: equal parts | a uniformly drawn 24-bit ICAO address per aircraft, ~uniform rows per aircraft |
| ``ships`` (NOAA AIS) | 17 mixed | ``mmsi`` | uneven parts | MMSIs by country code; rows per ship Zipf(1.3)-distributed, so a few ships dominate |

Schemas: TrackML's particles file (particle_id, vx, vy, vz, px, py, pz, q, nhits) plus the truth
``weight``; OpenSky's state-vector columns (16); NOAA's AIS CSV columns (17).

Sizes: ``target_bytes`` (default 64 MB) is the Arrow in-memory size; rows are added until the
table reaches it (up to 1 GB). A seed makes every table reproducible.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_BYTES = 64 * 1000 * 1000
MAX_BYTES = 1000 * 1000 * 1000
ID_FIELD = {"particles": "particle_id", "planes": "icao24", "ships": "mmsi"}
NAMES = tuple(ID_FIELD)


class DatasetError(ValueError):
    pass


def _strings(rng, vocab_size: int, length: int, alphabet: str, index: np.ndarray) -> pa.Array:
    """A string column drawn from a fixed vocabulary (names and call signs repeat per entity)."""
    letters = np.array(list(alphabet))
    vocab = ["".join(w) for w in letters[rng.integers(0, len(letters), (vocab_size, length))]]
    return pa.DictionaryArray.from_arrays(pa.array(index, pa.int32()), pa.array(vocab)).dictionary_decode()


def _particles(rng, rows: int) -> pa.Table:
    generation = rng.choice(np.array([0, 1, 2], np.uint64), rows, p=[0.6, 0.3, 0.1])
    barcode = rng.integers(1, 2**40, rows, dtype=np.uint64)
    momentum = rng.lognormal(0.0, 1.0, (3, rows)) * rng.choice([-1.0, 1.0], (3, rows))
    return pa.table({
        "particle_id": (barcode << np.uint64(4)) | generation,
        "vx": rng.normal(0, 0.01, rows), "vy": rng.normal(0, 0.01, rows), "vz": rng.normal(0, 50.0, rows),
        "px": momentum[0], "py": momentum[1], "pz": momentum[2],
        "q": rng.choice(np.array([-1, 1], np.int8), rows),
        "nhits": rng.poisson(11, rows).astype(np.int32),
        "weight": rng.exponential(1e-5, rows).astype(np.float32),
    })


def _planes(rng, rows: int) -> pa.Table:
    fleet = max(256, rows // 100)  # ~100 state vectors per aircraft in a capture
    craft = rng.integers(0, fleet, rows)
    icao = rng.integers(0, 2**24, fleet, dtype=np.uint32)
    t0 = 1_650_000_000
    return pa.table({
        "time": np.sort(rng.integers(t0, t0 + 3600, rows)).astype(np.int64),
        "icao24": icao[craft].astype(np.uint64),
        "lat": rng.uniform(-60, 70, fleet)[craft] + rng.normal(0, 0.5, rows),
        "lon": rng.uniform(-180, 180, fleet)[craft] + rng.normal(0, 0.5, rows),
        "velocity": np.round(rng.uniform(60, 280, rows), 2),
        "heading": np.round(rng.uniform(0, 360, rows), 2),
        "vertrate": np.round(rng.normal(0, 5, rows), 2),
        "callsign": _strings(rng, fleet, 7, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", craft),
        "onground": rng.random(rows) < 0.05,
        "alert": rng.random(rows) < 0.01,
        "spi": rng.random(rows) < 0.001,
        "squawk": _strings(rng, 4096, 4, "01234567", rng.integers(0, 4096, rows)),
        "baroaltitude": np.round(rng.uniform(0, 12000, rows), 1),
        "geoaltitude": np.round(rng.uniform(0, 12500, rows), 1),
        "lastposupdate": rng.uniform(t0, t0 + 3600, rows),
        "lastcontact": rng.uniform(t0, t0 + 3600, rows),
    })


def _ships(rng, rows: int) -> pa.Table:
    fleet = max(256, rows // 200)
    weights = 1.0 / np.arange(1, fleet + 1) ** 1.3  # Zipf: a few ships report far more often
    ship = rng.choice(fleet, rows, p=weights / weights.sum())
    mid = rng.choice(np.array([366, 367, 368, 369, 303, 338, 636, 538]), fleet)  # US first, then flags of convenience
    mmsi = (mid * 1_000_000 + rng.integers(0, 1_000_000, fleet)).astype(np.uint64)
    t0 = np.datetime64("2023-01-01T00:00:00", "s").astype(np.int64)
    return pa.table({
        "mmsi": mmsi[ship],
        "base_date_time": pa.array(np.sort(rng.integers(t0, t0 + 86400, rows)), pa.timestamp("s")),
        "lat": rng.uniform(24, 49, fleet)[ship] + rng.normal(0, 0.05, rows),
        "lon": rng.uniform(-125, -66, fleet)[ship] + rng.normal(0, 0.05, rows),
        "sog": np.round(rng.gamma(2.0, 4.0, rows), 1),
        "cog": np.round(rng.uniform(0, 360, rows), 1),
        "heading": rng.integers(0, 360, rows).astype(np.int16),
        "vessel_name": _strings(rng, fleet, 12, "ABCDEFGHIJKLMNOPQRSTUVWXYZ ", ship),
        "imo": pa.array(np.where(rng.random(fleet) < 0.6, rng.integers(1_000_000, 9_999_999, fleet), 0)[ship], pa.int32()),
        "call_sign": _strings(rng, fleet, 6, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", ship),
        "vessel_type": rng.choice(np.array([30, 31, 37, 52, 60, 70, 80, 90], np.int16), fleet)[ship],
        "status": rng.choice(np.array([0, 1, 5, 8, 15], np.int8), rows),
        "length": rng.integers(10, 400, fleet).astype(np.int16)[ship],
        "width": rng.integers(3, 60, fleet).astype(np.int16)[ship],
        "draft": np.round(rng.uniform(1, 15, fleet), 1)[ship],
        "cargo": rng.choice(np.array([0, 30, 70, 80], np.int16), fleet)[ship],
        "transceiver_class": _strings(rng, 2, 1, "AB", rng.integers(0, 2, fleet)[ship]),
    })


_MAKERS = {"particles": _particles, "planes": _planes, "ships": _ships}


def generate(name: str, target_bytes: int = DEFAULT_BYTES, seed: int = 0) -> pa.Table:
    """A table of about ``target_bytes`` (Arrow in-memory size) in dataset ``name``'s shape."""
    if name not in _MAKERS:
        raise DatasetError(f"unknown dataset {name!r}; choose from {', '.join(NAMES)}")
    if not isinstance(target_bytes, int) or not 1 <= target_bytes <= MAX_BYTES:
        raise DatasetError(f"size must be 1 byte .. {MAX_BYTES // 10**6} MB, got {target_bytes!r}")
    probe = _MAKERS[name](np.random.default_rng(seed), 4096)
    rows = max(1, round(target_bytes / (probe.nbytes / probe.num_rows)))
    return _MAKERS[name](np.random.default_rng(seed), rows)


def ids(table: pa.Table, field: str) -> np.ndarray:
    """The ID column as uint64 (the partitioner's key); a clear error when it is not one."""
    if field not in table.column_names:
        raise DatasetError(f"the table has no ID field {field!r} (columns: {', '.join(table.column_names)}); pass --key")
    col = table.column(field)
    if not pa.types.is_integer(col.type):
        raise DatasetError(f"ID field {field!r} is {col.type}, not an integer; pass --key with an integer column")
    if col.null_count:
        raise DatasetError(f"ID field {field!r} has {col.null_count} null values; every particle needs an ID")
    return pc.cast(col, pa.uint64(), safe=False).to_numpy()
