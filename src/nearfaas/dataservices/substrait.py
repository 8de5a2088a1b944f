"""Substrait plans in and out, through Apache DataFusion.

A query may arrive as a Substrait plan (the portable form other engines and front ends produce)
instead of SQL. DataFusion consumes it into a logical plan and unparses that into SQL, which then
runs exactly as typed SQL does: the same engine (``sql``), the same sketches and cost models, the
same offload / partial / push-back decision. Going through SQL keeps one path for both inputs;
Arrow Acero's own Substrait consumer refuses DataFusion's plans (``ReadRel::projection`` is not
implemented there), so it is not used.

    plan = sql_to_plan("SELECT id FROM particles WHERE x > 0.5", schema)   # bytes (protobuf)
    plan_to_sql(plan) -> 'SELECT "particles"."id" FROM "particles" WHERE ("particles"."x" > 0.5)'

The tables a plan reads are registered, empty, from the plan's own ``ReadRel`` base schemas, so a
plan needs nothing from the caller but itself.

Known caveats:
* Only what the SQL engine runs runs: a plan with a join, a sort or a window function is refused
  with the same error as the SQL would be.
* Types in a base schema are mapped for the kinds tabular objects hold here (integers, floats,
  booleans, strings, dates, timestamps); another type is refused by name.
"""

from __future__ import annotations

import json

import pyarrow as pa

_TYPES = {"bool": pa.bool_(), "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(),
          "fp32": pa.float32(), "fp64": pa.float64(), "string": pa.string(), "varchar": pa.string(),
          "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us"),
          "precisionTimestamp": pa.timestamp("us")}
# DataFusion marks unsigned integers with type variation 1 (its extension, not core Substrait)
_UNSIGNED = {"i8": pa.uint8(), "i16": pa.uint16(), "i32": pa.uint32(), "i64": pa.uint64()}
MAX_PLAN_BYTES = 1 << 20


class SubstraitError(ValueError):
    """A plan that is not Substrait, or one this platform cannot run; the message says which part."""


def plan_to_sql(plan: bytes) -> str:
    """The SQL a Substrait plan (serialized protobuf) computes."""
    import datafusion.unparser as unparser
    from datafusion import SessionContext
    from datafusion import substrait as ds

    if not isinstance(plan, (bytes, bytearray)) or not plan:
        raise SubstraitError("substrait: expected a serialized Substrait Plan (protobuf bytes), got nothing")
    if len(plan) > MAX_PLAN_BYTES:
        raise SubstraitError(f"substrait: the plan is {len(plan):,} bytes; at most {MAX_PLAN_BYTES:,} are accepted")
    try:
        parsed = ds.Serde.deserialize_bytes(bytes(plan))
        doc = json.loads(parsed.to_json())
    except Exception as exc:  # the binding raises its own exception types for malformed protobuf
        raise SubstraitError(f"substrait: not a Substrait Plan: {_short(exc)}") from None
    ctx = SessionContext()
    for name, schema in _read_tables(doc).items():
        ctx.register_record_batches(name, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    try:
        logical = ds.Consumer.from_substrait_plan(ctx, parsed)
        text = unparser.Unparser(unparser.Dialect.duckdb()).plan_to_sql(logical)
    except Exception as exc:
        raise SubstraitError(f"substrait: DataFusion cannot read this plan: {_short(exc)}") from None
    return _flatten(text)


def _flatten(text: str) -> str:
    """``SELECT … FROM (SELECT <columns> FROM t WHERE p) [GROUP BY …]`` as ``SELECT … FROM t WHERE
    p [GROUP BY …]``: the unparser writes a filter under an aggregate as a subquery, which hides
    the filter from the partial push-back cut (``partial.split`` does not cut inside a subquery)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except sqlglot.errors.ParseError:
        return text  # the SQL engine reports it
    src = tree.args.get("from_") or tree.args.get("from") if isinstance(tree, exp.Select) else None
    inner = src.this.this if src is not None and isinstance(src.this, exp.Subquery) else None
    if (not isinstance(inner, exp.Select) or tree.args.get("where") is not None
            or any(inner.args.get(k) is not None for k in ("group", "limit", "having"))
            or not all(isinstance(e, exp.Column) for e in inner.expressions)):
        return text
    inner_src = inner.args.get("from_") or inner.args.get("from")
    if inner_src is None or not isinstance(inner_src.this, exp.Table):
        return text
    flat = tree.copy()
    flat.set("from_" if "from_" in tree.args else "from", inner_src.copy())
    if inner.args.get("where") is not None:
        flat.set("where", inner.args["where"].copy())
    return flat.sql(dialect="duckdb")


def sql_to_plan(text: str, schema: pa.Schema, table: str = "particles") -> bytes:
    """A Substrait plan (serialized protobuf) for ``text`` over a table ``table`` of ``schema``."""
    from datafusion import SessionContext
    from datafusion import substrait as ds

    ctx = SessionContext()
    ctx.register_record_batches(table, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    try:
        return bytes(ds.Serde.serialize_bytes(text, ctx))
    except Exception as exc:
        raise SubstraitError(f"sql: DataFusion cannot plan this query: {_short(exc)}") from None


def _read_tables(doc) -> dict[str, pa.Schema]:
    """{table name: schema} of every named-table read in a plan's JSON form."""
    found: dict[str, pa.Schema] = {}
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            read = node.get("read")
            if isinstance(read, dict) and "namedTable" in read:
                names = read["namedTable"].get("names") or []
                if not names:
                    raise SubstraitError("substrait: a ReadRel names no table")
                found[names[-1]] = _schema(read.get("baseSchema") or {}, names[-1])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _schema(base: dict, table: str) -> pa.Schema:
    names, types = base.get("names") or [], (base.get("struct") or {}).get("types") or []
    if len(names) != len(types):
        raise SubstraitError(f"substrait: table {table!r}: {len(names)} column names for {len(types)} types "
                             "(nested types are not supported)")
    fields = []
    for name, kind in zip(names, types, strict=True):
        key = next(iter(kind), "?")
        if key not in _TYPES:
            raise SubstraitError(f"substrait: table {table!r} column {name!r} has type {key!r}; supported: "
                                 f"{', '.join(sorted(_TYPES))}")
        unsigned = key in _UNSIGNED and (kind.get(key) or {}).get("typeVariationReference") == 1
        fields.append(pa.field(name, _UNSIGNED[key] if unsigned else _TYPES[key]))
    return pa.schema(fields)


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]
