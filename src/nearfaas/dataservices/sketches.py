"""Per-column statistics of a table: KLL quantile sketches and Theta distinct-count sketches.

The thesis (Ch. 5.4) keeps, for every column of a partition staged on the device, a histogram
(a KLL sketch) and a distinct-count summary (a Theta sketch), and updates them as data arrives;
the cardinality estimator (``cardinality``) reads only these. Both sketches merge, so the
statistics of a prefix are the merge of its objects' statistics, and an object that arrives in
parts (multipart) is the merge of its parts'.

Why these parameters: a filter's selectivity is read as a difference of two normalized ranks, so
the rank error of the KLL sketch is the estimate's absolute error per condition. K = 4096 gives a
normalized rank error of 0.07% (99% confidence; `kll_doubles_sketch.get_normalized_rank_error`),
so a 10%-selective condition is within ~0.7% of its own selectivity. It costs ~60 KB per numeric
column in memory once the column has more than ~12,000 values (exact below that), a small price
beside the 8 bytes × rows of the column itself. Theta with lg_k = 14 (16,384 entries) has a
relative standard error of ~0.8% for distinct counts.

Known caveats:
* KLL sketches here are over doubles: a uint64 column above 2^53 loses precision in its
  quantiles (not its distinct count).
* String columns get a Theta sketch only (no ordering statistics): conditions on them are
  estimated with the defaults in ``cardinality``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import numpy as np

KLL_K = 4096
THETA_LG_K = 14
#: Points of the inverse CDF kept per column for sampling expressions over several columns.
CDF_POINTS = 2049


@dataclass
class ColumnStats:
    name: str
    numeric: bool
    kll: object | None  # datasketches.kll_doubles_sketch
    theta: object  # datasketches.update_theta_sketch or compact_theta_sketch
    _inverse_cdf: np.ndarray | None = field(default=None, repr=False)

    def rank(self, value: float, inclusive: bool) -> float:
        """Fraction of the column's values <= value (inclusive) or < value."""
        if self.kll is None or self.kll.is_empty():
            return 0.0
        return float(self.kll.get_rank(float(value), inclusive))

    def distinct(self) -> float:
        return float(self.theta.get_estimate())

    def bounds(self) -> tuple[float, float]:
        return float(self.kll.get_min_value()), float(self.kll.get_max_value())

    def inverse_cdf(self) -> np.ndarray:
        """Quantiles at CDF_POINTS evenly spaced ranks (cached): sampling the column's marginal."""
        if self._inverse_cdf is None:
            ranks = np.linspace(0.0, 1.0, CDF_POINTS)
            self._inverse_cdf = np.asarray(self.kll.get_quantiles(ranks.tolist()), dtype=float)
        return self._inverse_cdf


@dataclass
class TableStats:
    rows: int
    columns: dict[str, ColumnStats]
    # Stratified samples of the columns' marginals, per set of columns (cardinality._sampled):
    # derived from the sketches alone, so built once per TableStats and reused by every query.
    samples: dict = field(default_factory=dict, repr=False, compare=False)

    def column(self, name: str) -> ColumnStats:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"no column {name!r}; the table has {', '.join(self.columns)}") from None

    def merge(self, other: TableStats) -> TableStats:
        """The statistics of both tables together (same columns)."""
        import datasketches as ds

        if set(self.columns) != set(other.columns):
            raise ValueError(f"cannot merge statistics of different schemas: {sorted(self.columns)} vs {sorted(other.columns)}")
        merged = {}
        for name, a in self.columns.items():
            b = other.columns[name]
            kll = None
            if a.numeric:
                kll = ds.kll_doubles_sketch(KLL_K)
                kll.merge(a.kll)
                kll.merge(b.kll)
            union = ds.theta_union(THETA_LG_K)
            union.update(a.theta)
            union.update(b.theta)
            merged[name] = ColumnStats(name, a.numeric, kll, union.get_result())
        return TableStats(self.rows + other.rows, merged)

    def to_json(self) -> dict:
        return {"rows": self.rows, "kll_k": KLL_K, "theta_lg_k": THETA_LG_K,
                "columns": {n: {"numeric": c.numeric,
                                "kll": base64.b64encode(c.kll.serialize()).decode() if c.kll is not None else None,
                                "theta": base64.b64encode(_compact(c.theta).serialize()).decode()}
                            for n, c in self.columns.items()}}

    @classmethod
    def from_json(cls, doc: dict) -> TableStats:
        import datasketches as ds

        cols = {}
        for n, c in doc["columns"].items():
            kll = ds.kll_doubles_sketch.deserialize(base64.b64decode(c["kll"])) if c["kll"] else None
            cols[n] = ColumnStats(n, c["numeric"], kll, ds.compact_theta_sketch.deserialize(base64.b64decode(c["theta"])))
        return cls(int(doc["rows"]), cols)


def _compact(theta):
    return theta.compact() if hasattr(theta, "compact") else theta


def table_stats(table) -> TableStats:
    """KLL and Theta sketches of every column of a pyarrow Table."""
    import datasketches as ds
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = {}
    for name in table.column_names:
        col = table.column(name)
        numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
        theta = ds.update_theta_sketch(THETA_LG_K)
        kll = None
        if numeric:
            kll = ds.kll_doubles_sketch(KLL_K)
            values = col.drop_null().to_numpy().astype(np.float64, copy=False)
            values = values[~np.isnan(values)]
            if len(values):
                kll.update(values)
        # Distinct counting sees each value once: the unique values are enough (and far fewer).
        uniques = pc.unique(col.drop_null()).to_pylist()
        for v in uniques:
            theta.update(v if isinstance(v, (int, float, str)) else str(v))
        cols[name] = ColumnStats(name, numeric, kll, theta)
    return TableStats(table.num_rows, cols)
