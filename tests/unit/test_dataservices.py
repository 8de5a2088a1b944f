"""Data services (issue 17), first slice: the SQL engine over Arrow agrees with DuckDB, the
cardinality estimator's rewrite rules and combination laws hold (property tests), it is exact
where the thesis's is (aggregates, bounded group keys), sketches merge, and bad queries get
errors that name the problem."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.dataservices import cardinality, sql
from nearfaas.dataservices.particles import PARTICLES, particles
from nearfaas.dataservices.sketches import TableStats, table_stats
from nearfaas.dataservices.table54 import QUERIES

ROWS = 60_000


@pytest.fixture(scope="module")
def table():
    return particles(ROWS, seed=3)


@pytest.fixture(scope="module")
def stats(table):
    return {"particles": table_stats(table)}


def est(q, stats):
    return cardinality.estimate(q, stats).rows


@pytest.mark.parametrize("qid", ["Q1", "Q2", "Q3", "Q6", "Q7", "Q8"])
def test_arrow_engine_returns_what_duckdb_returns(qid, table):
    text = dict((q, s) for q, s, _ in QUERIES)[qid]
    ours = sql.execute(sql.parse(text), {"particles": table})
    con = duckdb.connect()
    con.register("particles", table)
    theirs = con.sql(text).to_arrow_table()
    assert ours.num_rows == theirs.num_rows
    if qid in ("Q1", "Q2"):
        assert sorted(ours.column("id").to_pylist()) == sorted(theirs.column("id").to_pylist())
    if qid == "Q6":
        assert list(ours.to_pylist()[0].values()) == list(theirs.to_pylist()[0].values())


def test_sqrt_of_a_negative_matches_nothing_as_in_arrow():
    t = pa.table({"vy": [-900.0, 100.0, 900.0]})
    got = sql.execute(sql.parse("select * from p where sqrt(vy) > 20"), {"p": t})
    assert got.column("vy").to_pylist() == [900.0]  # DuckDB would also return -900 (NaN > 20)
    st_ = {"p": table_stats(t)}
    assert est("select * from p where sqrt(vy) > 20", st_) == pytest.approx(1.0, abs=0.01)


def test_aggregates_and_bounded_group_keys_are_exact(stats):
    by_id = {q: s for q, s, _ in QUERIES}
    assert est(by_id["Q6"], stats) == 1.0
    assert est(by_id["Q7"], stats) == pytest.approx(16.0, abs=1e-6)
    assert est("select count(*) from particles group by particle_id", stats) == pytest.approx(PARTICLES, rel=0.03)


def test_filters_are_close_on_uniform_data(stats, table):
    for q in ("select * from particles where x >= 0.7 and y < 0.3",
              "select * from particles where x >= 0.7 and power(vx, 2) + power(vy, 2) + power(vz, 2) <= 10591.0",
              "select * from particles where 3 + vx * 2 <= 100 or sqrt(vy) > 20"):
        actual = sql.execute(sql.parse(q), {"particles": table}).num_rows
        assert est(q, stats) == pytest.approx(actual, rel=0.04), q


@settings(max_examples=40, deadline=None)
@given(c=st.floats(-120, 120), d=st.floats(-120, 120))
def test_range_estimates_are_monotone_and_complementary(stats, c, d):
    lo, hi = min(c, d), max(c, d)
    below_lo = est(f"select * from particles where vx < {lo}", stats)
    below_hi = est(f"select * from particles where vx < {hi}", stats)
    assert below_lo <= below_hi + 1e-9
    assert below_lo + est(f"select * from particles where vx >= {lo}", stats) == pytest.approx(ROWS, rel=1e-9)
    both = est(f"select * from particles where vx >= {lo} and vx < {hi}", stats)
    assert both == pytest.approx(below_hi - below_lo, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(c=st.floats(0.5, 99))
def test_rewrites_equal_their_base_field_ranges(stats, c):
    base = est(f"select * from particles where vx > {-c} and vx < {c}", stats)
    assert est(f"select * from particles where abs(vx) < {c}", stats) == pytest.approx(base)
    assert est(f"select * from particles where power(vx, 2) < {c * c}", stats) == pytest.approx(base, rel=1e-6, abs=1e-6)
    assert est(f"select * from particles where 3 + vx * 2 <= {3 + 2 * c}", stats) == pytest.approx(
        est(f"select * from particles where vx <= {c}", stats))
    assert est(f"select * from particles where -vx >= {-c}", stats) == pytest.approx(
        est(f"select * from particles where vx <= {c}", stats))


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0, 1), b=st.floats(0, 1))
def test_and_never_exceeds_or_and_either_side(stats, a, b):
    p = est(f"select * from particles where x < {a}", stats)
    q = est(f"select * from particles where y < {b}", stats)
    both = est(f"select * from particles where x < {a} and y < {b}", stats)
    either = est(f"select * from particles where x < {a} or y < {b}", stats)
    assert both <= min(p, q) + 1e-6 and either >= max(p, q) - 1e-6 and either <= ROWS + 1e-6


def test_statistics_merge_and_round_trip(table):
    a, b = table.slice(0, 25_000), table.slice(25_000)
    merged = table_stats(a).merge(table_stats(b))
    whole = table_stats(table)
    assert merged.rows == whole.rows == ROWS
    for col in ("x", "vz"):
        for v in (0.1, 0.5, -50.0):
            assert merged.column(col).rank(v, True) == pytest.approx(whole.column(col).rank(v, True), abs=0.005)
    assert merged.column("particle_id").distinct() == pytest.approx(PARTICLES, rel=0.03)
    again = TableStats.from_json(json.loads(json.dumps(merged.to_json())))
    assert again.rows == ROWS and again.column("y").rank(0.3, False) == merged.column("y").rank(0.3, False)


@pytest.mark.parametrize("query, match", [
    ("select * from particles where x >", "SQL syntax error at line 1"),
    ("select * from particles a join particles b on a.id = b.id", "joins are not supported"),
    ("select nope from particles", "no column 'nope'"),
    ("select * from elsewhere", "no table 'elsewhere'"),
    ("delete from particles", "only SELECT"),
])
def test_bad_queries_name_the_problem(query, match, table):
    with pytest.raises(sql.QueryError, match=match):
        sql.execute(sql.parse(query), {"particles": table})


def test_cli_prints_table_5_4_as_json():
    from nearfaas.cli import main

    result = CliRunner().invoke(main, ["dataservices", "cardinality", "--scale", "0.005", "--repeats", "1", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output[result.output.index("["):])
    assert [r["id"] for r in rows] == [q for q, _, _ in QUERIES]
    by = {r["id"]: r for r in rows}
    assert by["Q6"]["diff_pct"] == 0 and by["Q7"]["diff_pct"] == pytest.approx(0, abs=1e-6)
    assert all(r["cost_pct"] > 0 and r["label"].startswith("measured") for r in rows)


def test_limit_aggregate_names_and_group_keys():
    t = pa.table({"a": list(range(10)), "g": [i % 3 for i in range(10)]})
    run = lambda q: sql.execute(sql.parse(q), {"t": t})  # noqa: E731
    assert run("select * from t where a > 2 limit 3").column("a").to_pylist() == [3, 4, 5]
    assert run("select count(*) from t limit 0").num_rows == 0
    assert run("select count(*) as n, max(a) from t").to_pylist() == [{"n": 10, "_2": 9}]
    assert sorted(run("select g, count(a) as n from t group by g").to_pylist(), key=lambda r: r["g"]) == [
        {"g": 0, "n": 4}, {"g": 1, "n": 3}, {"g": 2, "n": 3}]
    with pytest.raises(sql.QueryError, match="LIMIT takes a non-negative integer"):
        run("select * from t limit -1")
    with pytest.raises(sql.QueryError, match="neither an aggregate nor a GROUP BY key"):
        run("select a, count(*) from t group by g")


def test_cli_trains_saves_and_evaluates_the_cost_models(tmp_path):
    from nearfaas.cli import main

    out = tmp_path / "models"
    result = CliRunner().invoke(main, ["dataservices", "train", "--samples", "20", "--max-rows", "3000", "--queries", "2",
                                       "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    assert len(doc["table56"]) == 2 and {"serialized_size_mape_pct", "query_time_mean_abs_diff_pct"} <= set(doc)
    assert (out / "models.pkl").exists() and (out / "facts.json").exists()
