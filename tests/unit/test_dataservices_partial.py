"""Partial push-back's cut (dataservices/partial.py): the host half over the node half's result
is the whole query's answer, for every template and for aliases, aggregates and LIMIT."""

from __future__ import annotations

import functools
import random

import numpy as np
import pyarrow as pa
import pytest

from nearfaas.dataservices import partial, sql
from nearfaas.dataservices.particles import COLUMNS, particles
from nearfaas.dataservices.templates import IDS, instantiate

TABLE = particles(5_000, seed=3)


def _both_ways(text: str):
    tree = sql.parse(text)
    cut = partial.split(tree, list(COLUMNS))
    whole = sql.execute(tree, {"particles": TABLE})
    if cut is None:
        return whole, None, None
    inter = sql.execute(cut.node, {"particles": TABLE})
    assert inter.column_names == cut.columns
    return whole, sql.execute(cut.host, {"particles": inter}), cut


def _same(a, b):
    assert a.column_names == b.column_names and a.num_rows == b.num_rows
    for x, y in zip(a.columns, b.columns, strict=True):
        x, y = x.combine_chunks(), y.combine_chunks()
        if pa.types.is_floating(x.type):
            assert x.is_null().equals(y.is_null())
            assert np.allclose(x.drop_null().to_numpy(), y.drop_null().to_numpy(), rtol=1e-6, atol=1e-12, equal_nan=True)
        else:
            assert x.equals(y)


# T1-T4 are ``select *`` without aggregation: partial.split has no cut for them by design (the
# node half would be the whole query). Their instances are asserted uncut and checked whole
# against DuckDB; the cut is exercised on two variants of each instance with the same WHERE:
# every column listed (a projection, so a cut) and aggregates over it.
STAR = {"T1", "T2", "T3", "T4"}
INSTANCES = 8
VARIANTS = {"listed": f"select {', '.join(COLUMNS)} from particles",
            "aggregated": "select count(*), sum(x), min(vy), max(vz), avg(time) from particles"}


@functools.cache
def _duckdb_connection():
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("particles", TABLE)
    return con


def _duckdb(text: str) -> pa.Table:
    """The same query on DuckDB, an engine that shares no code with sql.execute."""
    return _duckdb_connection().sql(text).to_arrow_table()


def _same_rows(a: pa.Table, b: pa.Table):
    """The same rows, in any order, by position of column (names differ between engines)."""
    assert a.num_columns == b.num_columns and a.num_rows == b.num_rows
    names = [f"c{i}" for i in range(a.num_columns)]
    order = [(n, "ascending") for n in names]
    a, b = (t.rename_columns(names).sort_by(order) for t in (a, b))
    for x, y in zip(a.columns, b.columns, strict=True):
        x, y = x.to_pylist(), y.to_pylist()
        assert [v is None for v in x] == [v is None for v in y]
        x, y = [v for v in x if v is not None], [v for v in y if v is not None]
        if any(isinstance(v, float) for v in x + y):
            assert np.allclose(np.array(x, float), np.array(y, float), rtol=1e-9, atol=0, equal_nan=True)
        else:
            assert x == y


def _has_data(t: pa.Table, text: str) -> bool:
    """Rows to compare; for an aggregate (its first column is count(*)), a count above zero."""
    return t.num_rows > 0 and ("count(*)" not in text or t.column(0)[0].as_py() > 0)


@pytest.mark.parametrize("tid", IDS)
def test_every_template_cut_in_two_gives_the_same_rows(tid):
    """Every instance is checked, none skipped: the whole query against DuckDB, and the two
    halves of a cut against the whole, on the instance itself (T5-T10, which must all be cut) or
    on its listed-columns and aggregated variants (T1-T4, which must not be)."""
    rng = random.Random(7)
    compared, with_data = 0, 0
    for _ in range(INSTANCES):
        text = instantiate(tid, rng)
        whole, halves, cut = _both_ways(text)
        _same_rows(whole, _duckdb(text))
        if tid in STAR:
            assert cut is None, f"{tid}: select * without aggregation has no cut, got one: {text}"
            where = text[text.index(" where "):]
            cases = [VARIANTS[v] + where for v in VARIANTS]
        else:
            assert cut is not None, f"{tid}: no cut for {text}"
            cases = [text]
        for case in cases:
            whole, halves, cut = _both_ways(case)
            assert cut is not None, case
            _same(whole, halves)
            _same_rows(halves, _duckdb(case))
            compared += 1
            with_data += _has_data(whole, case)
    assert compared >= INSTANCES, (tid, compared)
    assert with_data >= 2, f"{tid}: only {with_data} of {compared} compared cases kept any row"


@pytest.mark.parametrize("text", [
    "select sqrt(x) as r, vx from particles where r > 0.5",  # an alias in the WHERE is inlined
    "select x as y from particles where y > 0.5",  # a column shadows the alias, as sql.evaluate does
    "select vx > 0 as up, count(*), avg(time) from particles where x < 0.5 group by up",
    "select count(*) from particles",
    "select particle_id, x * 2 from particles where z < 0.3 limit 7",
    "select min(x), max(vy) from particles where x > 2",  # nothing kept
])
def test_aliases_aggregates_and_limits_survive_the_cut(text):
    whole, halves, cut = _both_ways(text)
    assert cut is not None
    _same(whole, halves)


def test_the_node_half_moves_only_the_columns_the_rest_reads():
    cut = partial.split(sql.parse("select particle_id, power(vx, 2) from particles where x >= 0.9"), list(COLUMNS))
    assert cut.columns == ["particle_id", "vx"]
    assert cut.node.args["where"] is not None and cut.host.args.get("where") is None


@pytest.mark.parametrize("text", ["select * from particles where x > 0.5",
                                  "select x from particles union all select y from particles",
                                  "select a from (select x as a from particles) where a > 1"])
def test_no_cut_where_the_node_half_would_be_the_whole_or_inside_a_subquery(text):
    assert partial.split(sql.parse(text), list(COLUMNS)) is None
