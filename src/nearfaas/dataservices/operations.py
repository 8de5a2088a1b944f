"""The operations vector of a query (the thesis's Ch. 5.4, Fig. 5.14): how many elements each
Arrow compute kernel will process when ``sql.execute`` runs the query, from the sketches alone.

Why a vector of counts: a query's execution time depends on which kernels run and over how many
elements (a ``power`` costs ~25x a ``multiply`` per element here), and the element counts depend
on the cardinalities of the conditions. The counts are the job size; a model
(``costmodels``) turns them into seconds. Nothing here touches the data: row counts come from
``cardinality.estimate`` over the tables' KLL/Theta statistics.

The counts mirror what ``sql.py`` does, so they describe our engine's real work:

* The whole WHERE is evaluated over all N input rows (each comparison, ``and_kleene``, arithmetic
  node counts N), then ``fill_null`` on the mask (N), then one ``table.filter``: ``filter`` is N
  (Arrow turns the mask into selection indices once per table, not once per column: filtering 9
  columns at 0.1% selectivity took 0.08 ms here against 0.03 ms for one column, while the
  comparison that made the mask took 0.4 ms), and ``select`` is the estimated output rows times
  the columns the filter copies, which is *every* column of the input: the engine filters before
  it projects.
* The SELECT list is evaluated after the filter, over the estimated output rows; a bare column
  is zero-copy and counts nothing; a constant is broadcast (``broadcast``).
* An alias named in the WHERE is evaluated again there (as ``sql.evaluate`` does).
* Aggregates: the key and argument expressions over the filtered rows, then ``count`` / ``min``
  / ``max`` / ``sum`` / ``mean`` over them, or ``group_by`` = rows × (keys + aggregates).
* ``LIMIT`` slices the finished result (no work saved); ``output_rows`` is capped by it.

Where this differs from the thesis: its optimized plan splits a conjunction into successive
filters, so the second condition's kernels count only the rows the first kept (Eq. 5.2's
discussion); our engine has no such split, so every condition counts N. And its ``select`` is
rows × *projected* columns (Table 5.7 even shows rows alone for ``select *``); ours is rows ×
input columns, since the copy happens before the projection.

Worked example (Table 5.7's query on N = 1,048,580 uniform rows, 9 columns):
``select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1`` →
greater_equal N, less N, less_equal N, and_kleene 2N, fill_null N, filter N,
select ≈ 9,437 × 9 ≈ 84,900, output_rows ≈ 9,437, table_rows N; everything else 0.

Known caveats:
* Counts are elements, not bytes: a uint64 and a double column weigh the same, and the
  ``cast`` to float64 before ``power``/``sqrt``/``/`` is not counted (the statistics carry no
  types; on Table 5.3's double columns the cast is a no-op).
* Counts inherit the estimator's errors (independence between columns, defaults for unknown
  conditions); an estimate of the filtered rows that is off by 10% moves ``select`` by 10%.
* UNION DISTINCT's de-duplication is counted as a ``group_by`` over the summed branch rows.
"""

from __future__ import annotations

from sqlglot import exp

from nearfaas.dataservices import cardinality
from nearfaas.dataservices.sql import AGGREGATES, QueryError, aliases, parse

_ARITH = {exp.Add: "add", exp.Sub: "subtract", exp.Mul: "multiply", exp.Div: "divide", exp.BitwiseAnd: "bit_wise_and"}
_COMPARE = {exp.GT: "greater", exp.GTE: "greater_equal", exp.LT: "less", exp.LTE: "less_equal",
            exp.EQ: "equal", exp.NEQ: "not_equal"}
_UNARY = {exp.Neg: "negate", exp.Not: "invert", exp.Pow: "power", exp.Sqrt: "sqrt", exp.Abs: "abs", exp.Round: "round"}

#: The vector's keys, in a fixed order (the models' feature order).
FEATURES: tuple[str, ...] = (
    "table_rows", "output_rows", "filter", "select", "fill_null",
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
    "and_kleene", "or_kleene", "invert",
    "add", "subtract", "multiply", "divide", "power", "sqrt", "abs", "negate", "round", "bit_wise_and",
    "count", "min", "max", "sum", "mean", "group_by", "broadcast",
)


def operations(sql_or_tree, stats: dict) -> dict[str, float]:
    """Elements each kernel processes for this query over tables with ``stats``
    ({name: TableStats}); keys are ``FEATURES``, all present."""
    tree = parse(sql_or_tree) if isinstance(sql_or_tree, str) else sql_or_tree
    ops = dict.fromkeys(FEATURES, 0.0)
    rows, _ = _query(tree, stats, ops)
    ops["output_rows"] = rows
    return ops


def output_shape(sql_or_tree, stats: dict) -> tuple[float, list[str]]:
    """(estimated output rows, output column names) of a query, from the sketches."""
    tree = parse(sql_or_tree) if isinstance(sql_or_tree, str) else sql_or_tree
    return _query(tree, stats, dict.fromkeys(FEATURES, 0.0))


def vector(ops: dict) -> list[float]:
    """``ops`` as a list in ``FEATURES`` order."""
    return [float(ops.get(k, 0.0)) for k in FEATURES]


def _limit(tree) -> float | None:
    limit = tree.args.get("limit")
    if limit is None:
        return None
    n = limit.expression if isinstance(limit, exp.Limit) else limit
    return float(n.this) if isinstance(n, exp.Literal) and n.is_int else None


def _query(tree, stats, ops) -> tuple[float, list[str]]:
    """(estimated output rows, output column names) of ``tree``; adds its work to ``ops``."""
    if isinstance(tree, exp.Subquery):
        rows, cols = _query(tree.this, stats, ops)
    elif isinstance(tree, exp.Union):
        r1, c1 = _query(tree.this, stats, ops)
        r2, c2 = _query(tree.expression, stats, ops)
        rows, cols = r1 + r2, c1 + [c for c in c2 if c not in c1]
        if tree.args.get("distinct"):
            ops["group_by"] += rows * len(cols)
    elif isinstance(tree, exp.Select):
        rows, cols = _select(tree, stats, ops)
    else:
        raise QueryError(f"{type(tree).__name__} is not supported here")
    limit = _limit(tree)
    return (min(rows, limit) if limit is not None else rows), cols


def _select(sel: exp.Select, stats, ops) -> tuple[float, list[str]]:
    src = sel.args.get("from_") or sel.args.get("from")
    if src is None:
        raise QueryError("a query needs FROM <table>")
    node = src.this
    if isinstance(node, exp.Table):
        if node.name not in stats:
            raise QueryError(f"no statistics for table {node.name!r}")
        in_rows, cols = float(stats[node.name].rows), list(stats[node.name].columns)
        ops["table_rows"] += in_rows
    elif isinstance(node, exp.Subquery):
        in_rows, cols = _query(node.this, stats, ops)
    else:
        raise QueryError(f"FROM {type(node).__name__} is not supported")
    names = aliases(sel)
    rows = in_rows
    where = sel.args.get("where")
    if where is not None:
        _expr(where.this, in_rows, cols, names, ops)
        rows = _filtered_rows(sel, stats)
        ops["fill_null"] += in_rows
        ops["filter"] += in_rows
        ops["select"] += rows * len(cols)
    group = sel.args.get("group")
    if group is not None or any(e.find(*AGGREGATES) for e in sel.expressions):
        return _aggregate(sel, rows, cols, names, group.expressions if group is not None else [], stats, ops)
    if any(isinstance(e, exp.Star) for e in sel.expressions):
        return rows, cols
    out = []
    for i, e in enumerate(sel.expressions):
        if not _expr(e.this if isinstance(e, exp.Alias) else e, rows, cols, names, ops):
            ops["broadcast"] += rows
        out.append(e.alias_or_name or f"_{i + 1}")
    return rows, out


def _filtered_rows(sel: exp.Select, stats) -> float:
    """Rows the WHERE keeps: the estimate of the same query without aggregation or limit."""
    plain = sel.copy()
    plain.set("group", None)
    plain.set("limit", None)
    for e in plain.expressions:
        for agg in list(e.find_all(*AGGREGATES)):
            agg.replace(exp.Literal.number(1))
    return cardinality.estimate(plain, stats).rows


def _aggregate(sel, rows, cols, names, keys, stats, ops) -> tuple[float, list[str]]:
    specs = 0
    for k in keys:
        if not _expr(k, rows, cols, names, ops):
            ops["broadcast"] += rows
    out = []
    for i, e in enumerate(sel.expressions):
        out.append(e.alias_or_name or f"_{i + 1}")
        inner = e.this if isinstance(e, exp.Alias) else e
        fn = next((f for t, f in AGGREGATES.items() if isinstance(inner, t)), None)
        if fn is None:
            continue  # a GROUP BY key, already evaluated
        specs += 1
        arg = inner.this
        if isinstance(arg, exp.Star) or arg is None:
            ops["fill_null"] += rows  # count(*): a column of ones, then counted
            fn = "count"
        elif not _expr(arg, rows, cols, names, ops):
            ops["broadcast"] += rows
        if not keys:
            ops[fn] += rows
    if keys:
        ops["group_by"] += rows * (len(keys) + specs)
        plain = sel.copy()
        plain.set("limit", None)
        return cardinality.estimate(plain, stats).rows, out
    return 1.0, out


def _expr(node, rows: float, cols: list[str], names: dict, ops: dict) -> bool:
    """Adds the kernels ``sql.evaluate`` runs for ``node`` over ``rows`` rows; True when the
    result is an array (False: a scalar, whose kernels count one element)."""
    if isinstance(node, exp.Paren):
        return _expr(node.this, rows, cols, names, ops)
    if isinstance(node, exp.Column):
        if node.name in cols:
            return True
        if node.name in names:
            return _expr(names[node.name], rows, cols, names, ops)
        raise QueryError(f"no column {node.name!r}; the table has {', '.join(cols)}")
    if isinstance(node, (exp.Literal, exp.Boolean)):
        return False
    kernel, args = None, []
    for table in (_ARITH, _COMPARE):
        for kind, name in table.items():
            if isinstance(node, kind):
                kernel, args = name, [node.this, node.expression]
    if isinstance(node, exp.And):
        kernel, args = "and_kleene", [node.this, node.expression]
    elif isinstance(node, exp.Or):
        kernel, args = "or_kleene", [node.this, node.expression]
    for kind, name in _UNARY.items():
        if isinstance(node, kind):
            kernel = name
            args = [node.this] + ([node.expression] if isinstance(node, exp.Pow) else [])
    if kernel is None:
        raise QueryError(f"{node.sql()!r}: {type(node).__name__} is not supported here")
    array = any([_expr(a, rows, cols, names, ops) for a in args])  # every argument is evaluated
    ops[kernel] += rows if array else 1.0
    return array
