"""Credit records (f1 of credit_risk): loan applications → exactly 200 float32 features each.

The schema is the Statlog German Credit data set's (Hofmann, UCI, 1994): 20 attributes, 7
numeric and 13 categorical. Categorical values are given as the data set's codes (``A11``) or
as the readable names below (``lt_0``); both are accepted, case-insensitively.

Records arrive as

* JSON lines (one object per line, keys as in ``ATTRIBUTES``) or a JSON array of objects;
* CSV with a header row naming the attributes (any order; extra columns are ignored);
* the original ``german.data`` layout: 20 (or 21, with the class) space-separated codes.

Features, in this order (``FEATURES`` = 200):

* ``[0:7]``    the 7 numeric attributes standardised, ``(x - mean) / std``, with the data set's
               mean and standard deviation (``NUMERIC``);
* ``[7:63]``   one-hot codes of the 13 categorical attributes (56 columns);
* ``[63:200]`` hashed second-order crosses of the categorical attributes (78 pairs, signed
               feature hashing into 137 buckets, as in Vowpal Wabbit's quadratic features),
               divided by sqrt(78) so that the block has unit scale.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass

import numpy as np

from .errors import BAD_REQUEST, UNPROCESSABLE, UNSUPPORTED, StageError

FEATURES = 200
MAX_RECORDS = 10_000


@dataclass(frozen=True)
class Numeric:
    name: str
    description: str
    mean: float
    std: float
    low: float
    high: float
    integer: bool = True


@dataclass(frozen=True)
class Categorical:
    name: str
    description: str
    values: tuple[tuple[str, str, str], ...]  # (code, name, meaning)

    def index(self, value) -> int | None:
        text = str(value).strip().lower()
        for i, (code, name, _) in enumerate(self.values):
            if text in (code.lower(), name):
                return i
        return None


# Mean and standard deviation of the 1000 records of the Statlog German Credit data.
NUMERIC: tuple[Numeric, ...] = (
    Numeric("duration", "duration of the credit in months", 20.903, 12.0588, 1, 120),
    Numeric("credit_amount", "credit amount (Deutsche Mark)", 3271.258, 2822.7369, 1, 1_000_000, integer=False),
    Numeric("installment_rate", "instalment rate in percent of disposable income (1-4)", 2.973, 1.1187, 1, 4),
    Numeric("residence_since", "present residence since (years, 1-4)", 2.845, 1.1037, 1, 4),
    Numeric("age", "age in years", 35.546, 11.3755, 18, 120),
    Numeric("existing_credits", "number of existing credits at this bank", 1.407, 0.5777, 1, 10),
    Numeric("num_dependents", "number of people liable to provide maintenance for", 1.155, 0.3621, 0, 10),
)

CATEGORICAL: tuple[Categorical, ...] = (
    Categorical("checking_status", "status of existing checking account", (
        ("A11", "lt_0", "< 0 DM"), ("A12", "0_to_200", "0 <= ... < 200 DM"),
        ("A13", "ge_200", ">= 200 DM / salary assignments for at least 1 year"), ("A14", "none", "no checking account"))),
    Categorical("credit_history", "credit history", (
        ("A30", "no_credits", "no credits taken / all credits paid back duly"),
        ("A31", "all_paid_here", "all credits at this bank paid back duly"),
        ("A32", "existing_paid", "existing credits paid back duly till now"),
        ("A33", "delayed_past", "delay in paying off in the past"),
        ("A34", "critical", "critical account / other credits existing (not at this bank)"))),
    Categorical("purpose", "purpose of the credit", (
        ("A40", "car_new", "car (new)"), ("A41", "car_used", "car (used)"), ("A42", "furniture", "furniture/equipment"),
        ("A43", "radio_tv", "radio/television"), ("A44", "appliances", "domestic appliances"), ("A45", "repairs", "repairs"),
        ("A46", "education", "education"), ("A47", "vacation", "vacation"), ("A48", "retraining", "retraining"),
        ("A49", "business", "business"), ("A410", "other", "others"))),
    Categorical("savings", "savings account/bonds", (
        ("A61", "lt_100", "< 100 DM"), ("A62", "100_to_500", "100 <= ... < 500 DM"), ("A63", "500_to_1000", "500 <= ... < 1000 DM"),
        ("A64", "ge_1000", ">= 1000 DM"), ("A65", "unknown", "unknown / no savings account"))),
    Categorical("employment", "present employment since", (
        ("A71", "unemployed", "unemployed"), ("A72", "lt_1", "< 1 year"), ("A73", "1_to_4", "1 <= ... < 4 years"),
        ("A74", "4_to_7", "4 <= ... < 7 years"), ("A75", "ge_7", ">= 7 years"))),
    Categorical("personal_status", "personal status and sex", (
        ("A91", "male_divorced", "male: divorced/separated"), ("A92", "female_married", "female: divorced/separated/married"),
        ("A93", "male_single", "male: single"), ("A94", "male_married", "male: married/widowed"), ("A95", "female_single", "female: single"))),
    Categorical("other_debtors", "other debtors / guarantors", (
        ("A101", "none", "none"), ("A102", "co_applicant", "co-applicant"), ("A103", "guarantor", "guarantor"))),
    Categorical("property", "property", (
        ("A121", "real_estate", "real estate"), ("A122", "savings_insurance", "building society savings agreement / life insurance"),
        ("A123", "car_other", "car or other"), ("A124", "none", "unknown / no property"))),
    Categorical("other_installment_plans", "other instalment plans", (
        ("A141", "bank", "bank"), ("A142", "stores", "stores"), ("A143", "none", "none"))),
    Categorical("housing", "housing", (("A151", "rent", "rent"), ("A152", "own", "own"), ("A153", "free", "for free"))),
    Categorical("job", "job", (
        ("A171", "unskilled_nonresident", "unemployed / unskilled - non-resident"), ("A172", "unskilled_resident", "unskilled - resident"),
        ("A173", "skilled", "skilled employee / official"), ("A174", "management", "management / self-employed / highly qualified employee / officer"))),
    Categorical("own_telephone", "telephone", (("A191", "no", "none"), ("A192", "yes", "yes, registered under the customer's name"))),
    Categorical("foreign_worker", "foreign worker", (("A201", "yes", "yes"), ("A202", "no", "no"))),
)

# The data set's column order (german.data): attribute 1 ... attribute 20.
ATTRIBUTES: tuple[str, ...] = (
    "checking_status", "duration", "credit_history", "purpose", "credit_amount", "savings", "employment",
    "installment_rate", "personal_status", "other_debtors", "residence_since", "property", "age",
    "other_installment_plans", "housing", "existing_credits", "job", "num_dependents", "own_telephone", "foreign_worker",
)
_NUMERIC = {n.name: n for n in NUMERIC}
_CATEGORICAL = {c.name: c for c in CATEGORICAL}
ONE_HOT = sum(len(c.values) for c in CATEGORICAL)  # 56
DENSE = len(NUMERIC) + ONE_HOT                      # 63
HASHED = FEATURES - DENSE                           # 137
_PAIRS = [(a, b) for i, a in enumerate(CATEGORICAL) for b in CATEGORICAL[i + 1:]]
_CROSS_SCALE = np.float32(1.0 / math.sqrt(len(_PAIRS)))
_MEANS = np.array([n.mean for n in NUMERIC], dtype=np.float64)
_STDS = np.array([n.std for n in NUMERIC], dtype=np.float64)


def _bucket(a: str, va: int, b: str, vb: int) -> tuple[int, float]:
    digest = hashlib.blake2b(f"{a}={va}&{b}={vb}".encode(), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    return h % HASHED, (1.0 if (h >> 63) & 1 else -1.0)


# Every (pair, value, value) bucket and sign, computed once: featurising is then a table lookup.
_CROSS_TABLE = {(a.name, i, b.name, j): _bucket(a.name, i, b.name, j)
                for a, b in _PAIRS for i in range(len(a.values)) for j in range(len(b.values))}


def feature_names() -> list[str]:
    names = [f"{n.name}_z" for n in NUMERIC]
    names += [f"{c.name}={name}" for c in CATEGORICAL for _, name, _ in c.values]
    names += [f"cross_hash_{i}" for i in range(HASHED)]
    return names


# ---------------------------------------------------------------- parsing

def parse_records(data) -> list[dict]:
    """Records from JSON lines, a JSON array, CSV with a header, or german.data lines."""
    if data is None or len(data) == 0:
        raise StageError(BAD_REQUEST, "the input object is empty (0 bytes); expected loan applications",
                         "upload JSON lines or CSV with the 20 attributes: " + ", ".join(ATTRIBUTES))
    try:
        text = bytes(data).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StageError(UNSUPPORTED, f"the records are not UTF-8 text (byte {exc.start})",
                         "send JSON lines or CSV encoded as UTF-8", accepted=["application/x-ndjson", "text/csv"]) from None
    text = text.strip()
    if not text:
        raise StageError(BAD_REQUEST, "the input holds only whitespace; expected loan applications",
                         "upload JSON lines or CSV with the 20 attributes")
    if text[0] in "{[":
        records = _json_records(text)
    else:
        first = text.splitlines()[0]
        if any(name in first for name in ATTRIBUTES):
            records = _csv_records(text)
        else:
            records = _german_data_records(text)
    if not records:
        raise StageError(UNPROCESSABLE, "no records found in the input", "send at least one loan application")
    if len(records) > MAX_RECORDS:
        raise StageError(UNPROCESSABLE, f"{len(records)} records in one object; at most {MAX_RECORDS} are scored per call",
                         "split the file")
    return records


def _json_records(text: str) -> list[dict]:
    if text[0] == "[":
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise StageError(UNPROCESSABLE, f"the JSON array cannot be parsed: {exc}", "send valid JSON") from None
        lines = list(enumerate(items if isinstance(items, list) else [items], 1))
    else:
        lines = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                lines.append((number, json.loads(line)))
            except ValueError as exc:
                raise StageError(UNPROCESSABLE, f"line {number} is not a JSON object: {exc}",
                                 "write one JSON object per line (JSON lines)") from None
    out = []
    for number, item in lines:
        if not isinstance(item, dict):
            raise StageError(UNPROCESSABLE, f"record {number} is a JSON {type(item).__name__}, not an object",
                             "write each application as an object with the 20 attributes")
        out.append(item)
    return out


def _csv_records(text: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text))
    return [{k.strip(): v for k, v in row.items() if k is not None} for row in reader if any((v or "").strip() for v in row.values())]


def _german_data_records(text: str) -> list[dict]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (20, 21):
            raise StageError(UNPROCESSABLE, f"line {number} has {len(parts)} fields and no header row names them",
                             "send CSV with a header row, JSON lines, or german.data lines of 20 codes")
        out.append(dict(zip(ATTRIBUTES, parts[:20], strict=True)))
    return out


# ---------------------------------------------------------------- features

def validate(record: dict, number: int = 1) -> tuple[list[float], list[int]]:
    """The numeric values and categorical indexes of one record; StageError (422) naming the
    record and the attribute for anything missing or out of range."""
    missing = [name for name in ATTRIBUTES if record.get(name) in (None, "")]
    if missing:
        raise StageError(UNPROCESSABLE, f"record {number} lacks {', '.join(missing)}",
                         "give all 20 attributes: " + ", ".join(ATTRIBUTES))
    numbers = []
    for spec in NUMERIC:
        raw = record[spec.name]
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise StageError(UNPROCESSABLE, f"record {number}: {spec.name} must be a number, got {raw!r}",
                             f"give {spec.description} as a number") from None
        if isinstance(raw, bool) or not math.isfinite(value) or not spec.low <= value <= spec.high:
            raise StageError(UNPROCESSABLE, f"record {number}: {spec.name}={raw!r} is outside {spec.low:g}..{spec.high:g}",
                             f"give {spec.description} within {spec.low:g}..{spec.high:g}")
        numbers.append(value)
    indexes = []
    for spec in CATEGORICAL:
        i = spec.index(record[spec.name])
        if i is None:
            allowed = ", ".join(f"{code}/{name}" for code, name, _ in spec.values)
            raise StageError(UNPROCESSABLE, f"record {number}: {spec.name}={record[spec.name]!r} is not a known value",
                             f"use one of {allowed}")
        indexes.append(i)
    return numbers, indexes


def featurize(records: list[dict]) -> np.ndarray:
    """(N, 200) float32: standardised numerics, one-hot codes, hashed crosses."""
    out = np.zeros((len(records), FEATURES), dtype=np.float32)
    for row, record in enumerate(records):
        numbers, indexes = validate(record, row + 1)
        out[row, : len(NUMERIC)] = (np.asarray(numbers) - _MEANS) / _STDS
        column = len(NUMERIC)
        for spec, i in zip(CATEGORICAL, indexes, strict=True):
            out[row, column + i] = 1.0
            column += len(spec.values)
        chosen = dict(zip((c.name for c in CATEGORICAL), indexes, strict=True))
        for a, b in _PAIRS:
            bucket, sign = _CROSS_TABLE[(a.name, chosen[a.name], b.name, chosen[b.name])]
            out[row, DENSE + bucket] += sign * _CROSS_SCALE
    return out


def records_to_features(data) -> tuple[np.ndarray, dict]:
    """The f1 step: parse, validate and featurise; also a summary for the stage's answer."""
    records = parse_records(data)
    features = featurize(records)
    return features, {"records": len(records), "features": FEATURES,
                      "layout": {"numeric_standardised": [0, len(NUMERIC)], "one_hot": [len(NUMERIC), DENSE],
                                 "hashed_crosses": [DENSE, FEATURES]}}
