"""Substrait in (dataservices/substrait.py): a plan DataFusion produced from SQL comes back as SQL
our engine runs to the same rows DuckDB computes from the original SQL; a filter under an
aggregate is flattened so the partial push-back cut sees it; bad plans are clear errors."""

from __future__ import annotations

import random

import duckdb
import pytest

from nearfaas.dataservices import partial, sql, substrait
from nearfaas.dataservices.particles import COLUMNS, particles
from nearfaas.dataservices.templates import IDS, instantiate

TABLE = particles(3_000, seed=5)


def _rows(table):
    return sorted(tuple(round(v, 9) if isinstance(v, float) else v for v in r.values()) for r in table.to_pylist())


@pytest.mark.parametrize("tid", IDS)
def test_a_template_through_substrait_gives_duckdbs_rows(tid):
    con = duckdb.connect()
    con.register("particles", TABLE)
    text = instantiate(tid, random.Random(11))
    back = substrait.plan_to_sql(substrait.sql_to_plan(text, TABLE.schema))
    got = sql.execute(sql.parse(back), {"particles": TABLE})
    want = con.sql(text).arrow()
    want = want.read_all() if hasattr(want, "read_all") else want
    assert got.num_rows == want.num_rows
    if "sqrt" not in text:  # NaN ordering differs between Arrow and DuckDB (sql.py's caveat)
        assert _rows(got.rename_columns(want.column_names)) == _rows(want)


def test_a_filter_under_an_aggregate_is_flattened_for_the_cut():
    text = "select vx > 0 as up, count(*) as n, avg(x) as m from particles where y < 0.2 group by vx > 0"
    back = substrait.plan_to_sql(substrait.sql_to_plan(text, TABLE.schema))
    tree = sql.parse(back)
    assert "(SELECT" not in back.upper().replace("( SELECT", "(SELECT")  # no subquery left
    assert partial.split(tree, list(COLUMNS)) is not None
    assert _rows(sql.execute(tree, {"particles": TABLE})) == _rows(sql.execute(sql.parse(text), {"particles": TABLE}))


@pytest.mark.parametrize("plan, words", [(b"", "got nothing"), (b"\xff\xfe garbage", "not a Substrait Plan"),
                                         (b"\x0a\x02\x08\x01", "cannot read this plan"),
                                         (b"x" * (substrait.MAX_PLAN_BYTES + 1), "at most")])
def test_bad_plans_say_what_is_wrong(plan, words):
    with pytest.raises(substrait.SubstraitError, match=words):
        substrait.plan_to_sql(plan)


def test_a_query_datafusion_cannot_plan_names_the_column():
    with pytest.raises(substrait.SubstraitError, match="nope"):
        substrait.sql_to_plan("select nope from particles", TABLE.schema)
