"""The decision engine's inputs and models (issue 17, the thesis's Ch. 5.4): the operations vector
counts exactly what the engine runs on queries whose cardinality the sketches know exactly,
grows with the table, every Table 5.5 template runs, and the cost models train, predict,
persist, notice a changed machine and evaluate in Table 5.6's shape. Small tables and sample
counts only: the real run is ``python -m nearfaas.dataservices.costmodels``."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from nearfaas.dataservices import costmodels as cm
from nearfaas.dataservices import sql
from nearfaas.dataservices.operations import FEATURES, operations, vector
from nearfaas.dataservices.particles import COLUMNS, particles
from nearfaas.dataservices.sketches import table_stats
from nearfaas.dataservices.templates import IDS, TEMPLATES, instantiate, placeholders
from nearfaas.link.profiles import get_profile

N = 2000  # below the KLL sketch's exact size: single-column selectivities are exact


@pytest.fixture(scope="module")
def table():
    return particles(N, seed=7)


@pytest.fixture(scope="module")
def stats(table):
    return {"particles": table_stats(table)}


def expect(**counts):
    return {k: float(counts.get(k, 0.0)) for k in FEATURES}


def test_filter_and_projection_counts_are_exact(table, stats):
    x = table.column("x").to_numpy()
    kept = int(((x >= 0.25) & (x < 0.75)).sum())
    got = operations("select x, y * 2 from particles where x >= 0.25 and x < 0.75", stats)
    assert got == pytest.approx(expect(table_rows=N, output_rows=kept, greater_equal=N, less=N, and_kleene=N, fill_null=N,
                                       filter=N, select=kept * len(COLUMNS), multiply=kept))


def test_aggregate_alias_and_plain_counts_are_exact(table, stats):
    x = table.column("x").to_numpy()
    half = int((x < 0.5).sum())
    got = operations("select count(*) from particles where x < 0.5", stats)
    assert got == pytest.approx(expect(table_rows=N, output_rows=1, less=N, fill_null=N + half, filter=N,
                                       select=half * len(COLUMNS), count=half))
    # An alias named in WHERE is evaluated there over every row, and again in the projection.
    got = operations("select x * 2 as d from particles where d < 1", stats)
    assert got == pytest.approx(expect(table_rows=N, output_rows=half, multiply=N + half, less=N, fill_null=N, filter=N,
                                       select=half * len(COLUMNS)))
    assert operations("select * from particles", stats) == expect(table_rows=N, output_rows=N)
    assert operations("select power(vx, 2) + 1 from particles limit 5", stats) == expect(
        table_rows=N, output_rows=5, power=N, add=N)


def test_counts_grow_with_the_table():
    small, big = particles(1000, seed=1), particles(8000, seed=2)
    s_small, s_big = {"particles": table_stats(small)}, {"particles": table_stats(big)}
    rng = random.Random(3)
    for tid in IDS:
        q = instantiate(tid, rng)
        a, b = operations(q, s_small), operations(q, s_big)
        assert all(b[k] >= a[k] for k in FEATURES), (tid, q)
        assert b["table_rows"] == 8 * a["table_rows"]


def test_every_template_parses_runs_and_is_counted(table, stats):
    rng = np.random.default_rng(5)
    for tid in IDS:
        assert placeholders(tid) and all(k in TEMPLATES[tid][1] for k in placeholders(tid))
        for _ in range(3):
            q = instantiate(tid, rng)
            assert "{" not in q
            out = sql.execute(sql.parse(q), {"particles": table})
            ops = operations(q, stats)
            assert set(ops) == set(FEATURES) and all(v >= 0 for v in ops.values())
            assert ops["table_rows"] == N and ops["filter"] == N
            if tid == "T5":
                assert out.num_rows == ops["output_rows"] == 1
            else:  # the estimate is close to the truth on uniform data
                assert abs(ops["output_rows"] - out.num_rows) <= 0.05 * N, (q, ops["output_rows"], out.num_rows)
    with pytest.raises(ValueError, match="unknown template"):
        instantiate("T11", rng)


@pytest.fixture(scope="module")
def models():
    return cm.train(samples=16, seed=0, min_rows=500, max_rows=3000, tables=12, transfers=6, repeats=1, trees=8)


def test_a_tiny_training_run_fits_and_predicts_positive_values(models, stats):
    ops = operations("select * from particles where x < 0.3", stats)
    assert len(vector(ops)) == len(FEATURES)
    assert models.predict_query_time(ops) > 0
    assert models.predict_size(1000, 9, 72) > 0
    assert models.predict_serialization_time(1000, 9, 72) > 0
    assert models.predict_transfer_time(10_000) > 0
    assert models.config["samples"] == 16 and models.config["training_s"] > 0


def test_transfer_time_adds_the_link_profile(models):
    base = models.predict_transfer_time(10**6)
    assert models.transfer_time(10**6, "local") == pytest.approx(base)
    s3 = get_profile("s3-like")
    assert cm.transfer_time(10**6, "s3-like", models) == pytest.approx(base + s3.expected_first_byte_s() + 10**6 / 90e6)
    with pytest.raises(ValueError, match="unknown link profile"):
        models.transfer_time(1, "carrier-pigeon")


def test_save_load_and_stale(models, tmp_path):
    folder = cm.save(models, tmp_path / "m")
    facts = json.loads((folder / "facts.json").read_text())
    assert facts["facts"] == models.facts and facts["config"]["samples"] == 16
    back = cm.load(folder)
    assert back.predict_size(1234, 3, 24) == models.predict_size(1234, 3, 24)
    assert not cm.stale(models.facts)
    assert cm.stale({**models.facts, "cpu_model": "BlueField-2 Arm A72"})
    assert cm.stale({**models.facts, "pyarrow": "1.0"})
    assert cm.load_or_train(folder).config == models.config  # fresh: loaded, not retrained
    facts["facts"]["cpu_model"] = "another machine"
    (folder / "facts.json").write_text(json.dumps(facts))
    again = cm.load_or_train(folder, samples=8, min_rows=500, max_rows=1000, tables=4, transfers=3, repeats=1, trees=4)
    assert again.config["samples"] == 8 and not cm.stale(json.loads((folder / "facts.json").read_text())["facts"])


def test_evaluate_returns_table_5_6s_shape(models):
    result = cm.evaluate(models, n_queries=3, seed=4, n_tables=4, n_transfers=3)
    rows = result["table56"]
    assert [r["id"] for r in rows] == ["R1", "R2", "R3"]
    for r in rows:
        assert set(FEATURES) <= set(r)
        assert r["num_threads"] == 1 and r["predicted_s"] > 0 and r["actual_s"] > 0
        assert r["abs_diff_pct"] == pytest.approx(abs(r["predicted_s"] - r["actual_s"]) / r["actual_s"] * 100)
    for k in cm.TARGETS:
        assert result[k] >= 0 and isinstance(result["targets_met"][k], bool)
    text = cm.report(result)
    assert "abs_diff(%)" in text and "serialized_size_mape_pct" in text


def test_measurement_uses_one_thread_and_restores_it():
    before = pa.cpu_count(), pa.io_thread_count()
    with cm.one_thread():
        assert (pa.cpu_count(), pa.io_thread_count()) == (1, 1)
    assert (pa.cpu_count(), pa.io_thread_count()) == before


def test_ipc_size_and_bytes_per_row():
    t = particles(100, seed=0).select(["id", "x"])
    assert cm.bytes_per_row(t.schema) == 16
    assert cm.ipc_stream(t).size > 100 * 16
