"""Partial push-back's cut (dataservices/partial.py): the host half over the node half's result
is the whole query's answer, for every template and for aliases, aggregates and LIMIT."""

from __future__ import annotations

import random

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
            assert x.to_pylist() == pytest.approx(y.to_pylist(), nan_ok=True)
        else:
            assert x.equals(y)


@pytest.mark.parametrize("tid", IDS)
def test_every_template_cut_in_two_gives_the_same_rows(tid):
    rng = random.Random(7)
    for _ in range(5):
        whole, halves, cut = _both_ways(instantiate(tid, rng))
        if cut is None:  # select * without aggregation: the node half would be the whole query
            continue
        _same(whole, halves)


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
