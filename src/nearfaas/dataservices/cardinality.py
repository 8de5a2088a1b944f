"""Cardinality estimation from sketches alone: how many rows a query returns, before running it.

The thesis's estimator (Ch. 5.4), rebuilt. The ladder, for each condition of a WHERE clause:

1. **One column, reducible**: the condition is rewritten onto the column's own range and read
   from its KLL sketch as a difference of ranks. Rewrites: linear (`3 + vx * 2 <= 100` →
   `vx <= 48.5`), `sqrt` (`sqrt(vy) > 20` → `vy > 400`; sqrt of a negative is NaN and matches
   nothing), even powers and `abs` (`power(x, 2) < 0.3` → `-0.548 < x < 0.548`), negation.
   Conditions on the same column combine exactly (an AND intersects ranges, an OR unites them).
2. **Several columns, not reducible** (`power(vx, 2) + power(vy, 2) + power(vz, 2) <= 1310`): the
   fraction of a stratified sample (Latin hypercube, ``SAMPLES`` points) drawn from the columns'
   marginals (their KLL inverse CDFs) that satisfies it, columns taken as independent.
3. **Between columns**: AND multiplies, OR is p + q − pq (independence), NOT is 1 − p.

Group-by: the Theta sketch's distinct count of each key (`col & mask` has at most 2^popcount(mask)
values; `round(col, d)` at most (max − min)·10^d + 1), multiplied across keys, and thinned for
a filter: with N rows of D values, n of them kept at random, a value survives with probability
1 − (1 − n/N)^(N/D). An aggregate without GROUP BY is one row. A UNION sums its branches, each
estimated against its own table's statistics with the outer conditions applied.

Worked example (Table 5.4's Q1 on 1,048,580 uniform rows): rank(x < 0.7) ≈ 0.700 so x ≥ 0.7 keeps
0.300; y < 0.3 keeps 0.300; z ≤ 0.1 keeps 0.100; independence: 1,048,580 × 0.009 ≈ 9,437 rows.

Known caveats:
* Independence between columns: correlated data (not the thesis's uniform tables) breaks it.
* A condition the rules do not know (a string compare, an unknown function) counts as keeping
  ``DEFAULT_SELECTIVITY`` of the rows, as PostgreSQL's defaults do, and is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from sqlglot import exp

from nearfaas.dataservices.sketches import TableStats
from nearfaas.dataservices.sql import AGGREGATES, QueryError, aliases, parse

SAMPLES = 4096
DEFAULT_SELECTIVITY = 1 / 3
INF = math.inf


@dataclass
class Estimate:
    rows: float
    #: Per WHERE condition estimated with a default (no rule applied).
    defaults: list[str] = field(default_factory=list)


# ---- interval sets on one column -------------------------------------------------------------

# An interval set is a list of (lo, lo_closed, hi, hi_closed), disjoint.

def _interval(op: type, c: float) -> list:
    return {exp.GT: [(c, False, INF, False)], exp.GTE: [(c, True, INF, False)],
            exp.LT: [(-INF, False, c, False)], exp.LTE: [(-INF, False, c, True)],
            exp.EQ: [(c, True, c, True)],
            exp.NEQ: [(-INF, False, c, False), (c, False, INF, False)]}[op]


def _intersect(a: list, b: list) -> list:
    out = []
    for lo1, lc1, hi1, hc1 in a:
        for lo2, lc2, hi2, hc2 in b:
            lo, lc = max((lo1, lc1), (lo2, lc2), key=lambda t: (t[0], not t[1]))
            hi, hc = min((hi1, hc1), (hi2, hc2), key=lambda t: (t[0], t[1]))
            if lo < hi or (lo == hi and lc and hc):
                out.append((lo, lc, hi, hc))
    return out


def _complement(a: list) -> list:
    out = [(-INF, False, INF, False)]
    for lo, lc, hi, hc in a:
        out = _intersect(out, [(-INF, False, lo, not lc), (hi, not hc, INF, False)])
    return out


def _union(a: list, b: list) -> list:
    return _complement(_intersect(_complement(a), _complement(b)))


def _mass(col, iset: list) -> float:
    total = 0.0
    for lo, lc, hi, hc in iset:
        upper = 1.0 if hi == INF else col.rank(hi, inclusive=hc)
        lower = 0.0 if lo == -INF else col.rank(lo, inclusive=not lc)
        total += max(0.0, upper - lower)
    return min(1.0, total)


def _const(node) -> float | None:
    if isinstance(node, exp.Paren):
        return _const(node.this)
    if isinstance(node, exp.Literal) and not node.is_string:
        return float(node.this)
    if isinstance(node, exp.Neg):
        v = _const(node.this)
        return None if v is None else -v
    return None


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _preimage(node, iset: list, names: dict):
    """(column, interval set on it) such that node ∈ iset ⇔ column ∈ result; None if not reducible."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        if node.name in names:
            return _preimage(names[node.name], iset, names)
        return node.name, iset
    if isinstance(node, exp.Neg):
        return _preimage(node.this, [(-hi, hc, -lo, lc) for lo, lc, hi, hc in iset], names)
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        a, b = _const(node.this), _const(node.expression)
        if (a is None) == (b is None):
            return None
        k, other = (a, node.expression) if a is not None else (b, node.this)
        const_left = a is not None
        if isinstance(node, exp.Add):
            return _preimage(other, [(lo - k, lc, hi - k, hc) for lo, lc, hi, hc in iset], names)
        if isinstance(node, exp.Sub):
            if const_left:  # k - x ∈ S ⇔ x ∈ k - S
                return _preimage(other, [(k - hi, hc, k - lo, lc) for lo, lc, hi, hc in iset], names)
            return _preimage(other, [(lo + k, lc, hi + k, hc) for lo, lc, hi, hc in iset], names)
        if isinstance(node, exp.Div) and const_left:
            return None  # k / x: not monotone across 0
        scale = k if isinstance(node, exp.Mul) else 1.0 / k if k else None
        if not scale:
            return None
        mapped = [(lo / scale, lc, hi / scale, hc) if scale > 0 else (hi / scale, hc, lo / scale, lc)
                  for lo, lc, hi, hc in iset]
        return _preimage(other, mapped, names)
    if isinstance(node, exp.Sqrt):
        # sqrt(x) is NaN (matching nothing) for x < 0, and increasing on x >= 0.
        out = []
        for lo, lc, hi, hc in _intersect(iset, [(0.0, True, INF, False)]):
            out.append((lo * lo, lc, INF if hi == INF else hi * hi, hc))
        return _preimage(node.this, out, names)
    if isinstance(node, (exp.Abs, exp.Pow)):
        if isinstance(node, exp.Pow):
            p = _const(node.expression)
            if p != 2:
                return None
            root = math.sqrt
        else:
            def root(v):
                return v
        out = []
        for lo, lc, hi, hc in _intersect(iset, [(0.0, True, INF, False)]):
            rlo, rhi = root(lo), (INF if hi == INF else root(hi))
            out = _union(out, [(rlo, lc, rhi, hc)])
            out = _union(out, [(-rhi, hc, -rlo, lc)])
        return _preimage(node.this, out, names)
    return None


# ---- selectivity -----------------------------------------------------------------------------

def _comparison(node):
    for kind in _FLIP:
        if isinstance(node, kind):
            return kind
    return None


def _reduce(node, names: dict):
    """(column, interval set) for a condition on one column; None otherwise."""
    while isinstance(node, exp.Paren):
        node = node.this
    op = _comparison(node)
    if op is not None:
        lhs, rhs = node.this, node.expression
        c = _const(rhs)
        if c is None:
            c, lhs, op = _const(lhs), rhs, _FLIP[op]
        if c is None:
            return None
        return _preimage(lhs, _interval(op, c), names)
    if isinstance(node, (exp.And, exp.Or)):
        a, b = _reduce(node.this, names), _reduce(node.expression, names)
        if a and b and a[0] == b[0]:
            combine = _intersect if isinstance(node, exp.And) else _union
            return a[0], combine(a[1], b[1])
        return None
    if isinstance(node, exp.Not):
        a = _reduce(node.this, names)
        return (a[0], _complement(a[1])) if a else None
    return None


def selectivity(node, stats: TableStats, names: dict, defaults: list) -> float:
    """The fraction of the table's rows a condition keeps."""
    while isinstance(node, exp.Paren):
        node = node.this
    reduced = _reduce(node, names)
    if reduced is not None:
        col = stats.column(reduced[0])
        if col.numeric:
            return _mass(col, reduced[1])
    if isinstance(node, exp.And):
        return _and(node, stats, names, defaults)
    if isinstance(node, exp.Or):
        p, q = selectivity(node.this, stats, names, defaults), selectivity(node.expression, stats, names, defaults)
        return p + q - p * q
    if isinstance(node, exp.Not):
        return 1.0 - selectivity(node.this, stats, names, defaults)
    sampled = _sampled(node, stats, names)
    if sampled is not None:
        return sampled
    defaults.append(node.sql())
    return DEFAULT_SELECTIVITY


def _and(node, stats, names, defaults) -> float:
    """Conjuncts on the same column intersect exactly; the groups multiply (independence)."""
    conjuncts = list(node.flatten()) if isinstance(node, exp.And) else [node]
    by_column: dict[str, list] = {}
    p = 1.0
    for c in conjuncts:
        reduced = _reduce(c, names)
        if reduced is not None and stats.column(reduced[0]).numeric:
            col, iset = reduced
            by_column[col] = _intersect(by_column[col], iset) if col in by_column else iset
        else:
            p *= selectivity(c, stats, names, defaults)
    for col, iset in by_column.items():
        p *= _mass(stats.column(col), iset)
    return p


def _sampled(node, stats: TableStats, names: dict) -> float | None:
    """Fraction of a Latin-hypercube sample of the columns' marginals that satisfies ``node``."""
    from nearfaas.dataservices.sql import evaluate  # the same evaluator the queries run with

    import pyarrow as pa

    cols = {c.name for c in _columns(node, names)}
    if not cols or any(not stats.column(c).numeric for c in cols):
        return None
    key = tuple(sorted(cols))
    table = stats.samples.get(key)
    if table is None:
        rng = np.random.default_rng(0x5eed)
        sample = {}
        for c in key:
            u = (rng.permutation(SAMPLES) + rng.random(SAMPLES)) / SAMPLES  # one point per stratum
            icdf = stats.column(c).inverse_cdf()
            sample[c] = np.interp(u * (len(icdf) - 1), np.arange(len(icdf)), icdf)
        table = stats.samples[key] = pa.table(sample)
    try:
        mask = evaluate(node, table, names)
    except QueryError:
        return None
    import pyarrow.compute as pc

    return float(pc.sum(pc.fill_null(mask, False)).as_py() or 0) / SAMPLES


def _columns(node, names: dict, seen=None):
    seen = set() if seen is None else seen
    for col in node.find_all(exp.Column):
        if col.name in names and col.name not in seen:
            seen.add(col.name)
            yield from _columns(names[col.name], names, seen)
        elif col.name not in names:
            yield col


# ---- whole queries ---------------------------------------------------------------------------

def estimate(sql_or_tree, stats: dict[str, TableStats]) -> Estimate:
    """Output rows of a query, from ``stats`` ({table name: TableStats}) alone."""
    tree = parse(sql_or_tree) if isinstance(sql_or_tree, str) else sql_or_tree
    defaults: list[str] = []
    rows = _rows(tree, stats, [], defaults)
    return Estimate(rows, defaults)


def _branches(tree, stats, outer: list):
    """(TableStats, conditions, alias map) per table the query reads, outer conditions included."""
    if isinstance(tree, exp.Subquery):
        yield from _branches(tree.this, stats, outer)
        return
    if isinstance(tree, exp.Union):
        yield from _branches(tree.this, stats, outer)
        yield from _branches(tree.expression, stats, outer)
        return
    src = (tree.args.get("from_") or tree.args.get("from")).this
    where = tree.args.get("where")
    conds = outer + ([(where.this, aliases(tree))] if where is not None else [])
    if isinstance(src, exp.Table):
        if src.name not in stats:
            raise QueryError(f"no statistics for table {src.name!r}")
        yield stats[src.name], conds, aliases(tree)
    else:
        inner_names = aliases(src.this) if isinstance(src.this, exp.Select) else {}
        # Outer conditions name the inner query's aliases: resolve them there.
        yield from _branches(src.this, stats, [(c, {**inner_names, **n}) for c, n in conds])


def _kept(st: TableStats, conds: list, defaults: list) -> float:
    p = 1.0
    same = [c for c, n in conds]
    names: dict = {}
    for _, n in conds:
        names.update(n)
    if same:
        node = same[0] if len(same) == 1 else exp.and_(*same)
        p = selectivity(node, st, names, defaults)
    return p


def _rows(tree, stats, outer: list, defaults: list) -> float:
    if isinstance(tree, exp.Select):
        group = tree.args.get("group")
        has_agg = any(e.find(*AGGREGATES) for e in tree.expressions)
        if group is None and has_agg:
            return 1.0
        if group is not None:
            return _groups(tree, group.expressions, stats, outer, defaults)
    return sum(st.rows * _kept(st, conds, defaults) for st, conds, _ in _branches(tree, stats, outer))


def _groups(tree, keys: list, stats, outer: list, defaults: list) -> float:
    total = 0.0
    for st, conds, names in _branches(tree, stats, outer):
        src = (tree.args.get("from_") or tree.args.get("from")).this
        if isinstance(src, exp.Subquery) and isinstance(src.this, exp.Select):
            names = {**aliases(src.this), **names}
        kept = st.rows * _kept(st, conds, defaults)
        groups = 1.0
        for k in keys:
            groups *= _key_distinct(k, st, names)
        groups = min(groups, st.rows) if st.rows else 0.0
        if groups <= 0 or st.rows == 0:
            continue
        # Each of `groups` values has rows/groups copies; one survives the filter with prob. 1 - (1 - kept/rows)^copies.
        frac = min(1.0, kept / st.rows)
        total += groups * (1.0 - (1.0 - frac) ** (st.rows / groups))
    return total


def _key_distinct(node, st: TableStats, names: dict) -> float:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Column):
        if node.name in names:
            return _key_distinct(names[node.name], st, names)
        return st.column(node.name).distinct()
    if isinstance(node, exp.BitwiseAnd):
        mask = _const(node.expression)
        inner = node.this
        if mask is None:
            mask, inner = _const(node.this), node.expression
        if mask is not None and mask >= 0:
            return min(2.0 ** bin(int(mask)).count("1"), _key_distinct(inner, st, names))
    if isinstance(node, exp.Round) and isinstance(node.this, exp.Column) and node.this.name not in names:
        col = st.column(node.this.name)
        digits = int(node.args["decimals"].this) if node.args.get("decimals") is not None else 0
        lo, hi = col.bounds()
        return min(col.distinct(), math.floor((hi - lo) * 10 ** digits) + 1)
    cols = list(_columns(node, names))
    if cols:
        return min(st.rows, math.prod(st.column(c.name).distinct() for c in cols))
    return 1.0
