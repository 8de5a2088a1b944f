"""SQL over Arrow tables: parsed by sqlglot, evaluated with Arrow compute kernels.

The subset the thesis's queries use: SELECT of columns, expressions and aliases (``*`` too);
FROM a table, a subquery, or a UNION [ALL] of selects; WHERE, whose conditions may name the
SELECT's aliases (as DuckDB allows); aggregates count/min/max/sum/avg, with or without GROUP BY;
LIMIT (S3 Select's common `SELECT * FROM S3Object LIMIT 5`).
Arithmetic + - * /, power, sqrt, abs, round, bitwise and; comparisons; and/or/not.

Semantics are Arrow's, as on the thesis's device: sqrt of a negative number is NaN, and NaN
compares false with everything (DuckDB, by contrast, orders NaN above every number).

Known caveats:
* Joins, window functions, ORDER BY and DISTINCT aggregates are refused with an error that
  names them (``QueryError``), not half-supported.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

AGGREGATES = {exp.Count: "count", exp.Min: "min", exp.Max: "max", exp.Sum: "sum", exp.Avg: "mean"}
_ARITH = {exp.Add: pc.add, exp.Sub: pc.subtract, exp.Mul: pc.multiply, exp.Div: pc.divide}
_COMPARE = {exp.GT: pc.greater, exp.GTE: pc.greater_equal, exp.LT: pc.less, exp.LTE: pc.less_equal,
            exp.EQ: pc.equal, exp.NEQ: pc.not_equal}


class QueryError(ValueError):
    """A query this engine cannot run; the message names the construct and, where known, the
    position in the SQL text."""


def parse(sql: str) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.ParseError as e:
        err = e.errors[0] if e.errors else {}
        where = f" at line {err.get('line')}, column {err.get('col')}" if err else ""
        raise QueryError(f"SQL syntax error{where}: {err.get('description', str(e))}") from None
    if not isinstance(tree, (exp.Select, exp.Union)):
        raise QueryError(f"only SELECT queries run here, got {type(tree).__name__.upper()}")
    for node in tree.walk():
        if isinstance(node, exp.Join):
            raise QueryError("joins are not supported: query one table or a prefix of objects with the same schema")
        if isinstance(node, (exp.Window, exp.Order)):
            raise QueryError(f"{type(node).__name__.upper()} is not supported here")
    return tree


def execute(tree: exp.Expression, tables: dict) -> pa.Table:
    """Run a parsed query over ``tables`` ({name: pyarrow Table})."""
    limit = tree.args.get("limit")
    if limit is not None:
        n = limit.expression if isinstance(limit, exp.Limit) else limit
        try:
            count = int(n.this) if isinstance(n, exp.Literal) and n.is_int else None
        except ValueError:
            count = None
        if count is None or count < 0:
            raise QueryError(f"LIMIT takes a non-negative integer, got {n.sql()!r}")
        return _execute(tree, tables).slice(0, count)
    return _execute(tree, tables)


def _execute(tree: exp.Expression, tables: dict) -> pa.Table:
    if isinstance(tree, exp.Union):
        parts = [execute(tree.this, tables), execute(tree.expression, tables)]
        out = pa.concat_tables(parts, promote_options="default")
        if tree.args.get("distinct"):
            out = out.group_by(out.column_names).aggregate([])
        return out
    if isinstance(tree, exp.Subquery):
        return execute(tree.this, tables)
    return _select(tree, tables)


def source_of(select: exp.Select, tables: dict) -> pa.Table:
    src = select.args.get("from_") or select.args.get("from")
    if src is None:
        raise QueryError("a query needs FROM <table>")
    node = src.this
    if isinstance(node, exp.Table):
        name = node.name
        if name not in tables:
            raise QueryError(f"no table {name!r}; known: {', '.join(sorted(tables)) or 'none'}")
        return tables[name]
    if isinstance(node, exp.Subquery):
        return execute(node.this, tables)
    raise QueryError(f"FROM {type(node).__name__} is not supported")


def aliases(select: exp.Select) -> dict[str, exp.Expression]:
    return {e.alias: e.this for e in select.expressions if isinstance(e, exp.Alias)}


def _select(select: exp.Select, tables: dict) -> pa.Table:
    table = source_of(select, tables)
    names = aliases(select)
    where = select.args.get("where")
    if where is not None:
        mask = evaluate(where.this, table, names)
        table = table.filter(pc.fill_null(mask, False))
    group = select.args.get("group")
    has_agg = any(e.find(*AGGREGATES) for e in select.expressions)
    if group is not None or has_agg:
        return _aggregate(select, table, names, group.expressions if group is not None else [])
    if any(isinstance(e, exp.Star) for e in select.expressions):
        return table
    cols = {_name(e, i): evaluate(e.this if isinstance(e, exp.Alias) else e, table, names)
            for i, e in enumerate(select.expressions)}
    return pa.table({k: _as_array(v, table.num_rows) for k, v in cols.items()})


def _aggregate(select: exp.Select, table: pa.Table, names: dict, keys: list) -> pa.Table:
    """Aggregates (per group when ``keys``), as columns in the SELECT list's order and names."""
    work, key_of, specs, outputs = {}, {}, [], []
    for i, k in enumerate(keys):
        work[f"__key{i}"] = _as_array(evaluate(k, table, names), table.num_rows)
        key_of[k.sql()] = f"__key{i}"
        if isinstance(k, exp.Column) and k.name in names:
            key_of[names[k.name].sql()] = f"__key{i}"
    for i, e in enumerate(select.expressions):
        inner = e.this if isinstance(e, exp.Alias) else e
        agg = next((f for t, f in AGGREGATES.items() if isinstance(inner, t)), None)
        if agg is None:
            key = key_of.get(inner.sql()) or key_of.get(e.alias_or_name)
            if key is None:
                raise QueryError(f"{e.sql()!r} is neither an aggregate nor a GROUP BY key")
            outputs.append((_name(e, i), key))
            continue
        arg, col = inner.this, f"__arg{i}"
        if isinstance(arg, exp.Star) or arg is None:
            work[col] = pa.nulls(table.num_rows, pa.int8()).fill_null(1)
            specs.append((col, "count", pc.CountOptions(mode="all")))
        else:
            work[col] = _as_array(evaluate(arg, table, names), table.num_rows)
            specs.append((col, agg))
        outputs.append((_name(e, i), f"{col}_{specs[-1][1]}"))
    frame = pa.table(work) if work else pa.table({"__n": pa.nulls(table.num_rows, pa.int8())})
    if keys:
        result = frame.group_by([f"__key{i}" for i in range(len(keys))]).aggregate(specs)
    else:
        fns = {"count": pc.count, "min": pc.min, "max": pc.max, "sum": pc.sum, "mean": pc.mean}
        result = pa.table({f"{s[0]}_{s[1]}": [fns[s[1]](frame[s[0]], options=s[2] if len(s) > 2 else None).as_py()]
                           for s in specs})
    return pa.table({name: result.column(src) for name, src in outputs})


def _name(e: exp.Expression, i: int) -> str:
    """An output column's name: its alias or column name, else _<position> as S3 Select names them."""
    return e.alias_or_name or f"_{i + 1}"


def _as_array(value, rows: int):
    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()] * rows)
    return value


def evaluate(node: exp.Expression, table: pa.Table, names: dict):
    """An expression's value over ``table``: an Arrow array (or a scalar for constants)."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, table, names)
    if isinstance(node, exp.Column):
        name = node.name
        if name in table.column_names:
            return table.column(name)
        if name in names:
            return evaluate(names[name], table, names)
        raise QueryError(f"no column {name!r}; the table has {', '.join(table.column_names)}")
    if isinstance(node, exp.Literal):
        return pa.scalar(float(node.this) if not node.is_string and not node.is_int else
                         (int(node.this) if node.is_int else node.this))
    if isinstance(node, exp.Neg):
        return pc.negate(evaluate(node.this, table, names))
    if isinstance(node, exp.Boolean):
        return pa.scalar(node.this)
    for kind, fn in _ARITH.items():
        if isinstance(node, kind):
            a, b = evaluate(node.this, table, names), evaluate(node.expression, table, names)
            if kind is exp.Div:
                a = pc.cast(a, pa.float64())
            return fn(a, b)
    for kind, fn in _COMPARE.items():
        if isinstance(node, kind):
            return fn(evaluate(node.this, table, names), evaluate(node.expression, table, names))
    if isinstance(node, exp.And):
        return pc.and_kleene(evaluate(node.this, table, names), evaluate(node.expression, table, names))
    if isinstance(node, exp.Or):
        return pc.or_kleene(evaluate(node.this, table, names), evaluate(node.expression, table, names))
    if isinstance(node, exp.Not):
        return pc.invert(evaluate(node.this, table, names))
    if isinstance(node, exp.Pow):
        return pc.power(pc.cast(evaluate(node.this, table, names), pa.float64()), evaluate(node.expression, table, names))
    if isinstance(node, exp.Sqrt):
        return pc.sqrt(pc.cast(evaluate(node.this, table, names), pa.float64()))
    if isinstance(node, exp.Abs):
        return pc.abs(evaluate(node.this, table, names))
    if isinstance(node, exp.Round):
        digits = node.args.get("decimals")
        return pc.round(evaluate(node.this, table, names), int(digits.this) if digits is not None else 0)
    if isinstance(node, exp.BitwiseAnd):
        return pc.bit_wise_and(evaluate(node.this, table, names), evaluate(node.expression, table, names))
    raise QueryError(f"{node.sql()!r}: {type(node).__name__} is not supported here")
