"""Table 5.4 of the thesis, re-run here: each query's estimated vs actual output rows over uniform
particle tables of the thesis's sizes, and the estimator's CPU time as a share of the query's.

Both the estimate and the run start from the parsed plan (the thesis's estimator works on the
logical plan too): parsing is shared, so it is in neither's cost. The estimator's CPU time is
per call over a loop of calls lasting ≥ 20 ms (a steady state; the first, cold call — which also
builds the sketches' cached inverse CDFs — is reported apart as ``estimator_first_call_cpu_s``);
the query's is one run per repeat; both are medians over the repeats.

The SQL is the thesis's, written so an engine takes it (its Q6/Q7 row shows two statements run
together; Q6 here is the first, Q7 the grouped second). Actual rows and the query's CPU time come
from running the query with Arrow compute (``sql.execute``, one process); the estimate from the
tables' sketches alone (``cardinality.estimate``), which are built beforehand, as a storage node
builds them when the object arrives, and not counted in the cost.
"""

from __future__ import annotations

import time

from nearfaas.dataservices import cardinality, sql
from nearfaas.dataservices.particles import particles
from nearfaas.dataservices.sketches import table_stats

# (id, SQL, input rows per table: the thesis's "Total Input Rows")
QUERIES = (
    ("Q1", "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1", 1048580),
    ("Q2", "select * from particles where x >= 0.7 and power(vx, 2) + power(vy, 2) + power(vz, 2) <= 10591.0", 5044220),
    ("Q3", "select x, power(vx, 2) + power(vy, 2) + power(vz, 2) as square_of_velocity from particles "
           "where square_of_velocity <= 1310.0", 685359),
    ("Q4", "select * from particles where 3 + vx * 2 <= 100 or sqrt(vy) > 20", 1761670),
    ("Q5", "select * from (select * from particles_1 where x >= 0.7 union all select * from particles_2 where y < 0.3) "
           "where z <= 0.1", 786432),
    ("Q6", "select count(id), min(x), max(x) from particles", 1373630),
    ("Q7", "select count(column_id), min(column_round_x), max(column_round_x) from (select id as column_id, "
           "round(x, 2) as column_round_x, particle_id & 15 as column_bit_wise_and_particle_id from particles) "
           "group by column_bit_wise_and_particle_id", 2146820),
    ("Q8", "select count(id) as column_hash_count_id from particles where x >= 0.7 and y < 0.3 and z <= 0.1 "
           "group by particle_id", 1555010),
)

#: The thesis's Table 5.4 Diff (%) per query, printed beside ours for comparison (not a target
#: we tune to: nothing here reads it except the report).
THESIS_DIFF = {"Q1": 1.03, "Q2": 0.64, "Q3": 9.02, "Q4": 0.26, "Q5": 0.38, "Q6": 0.0, "Q7": 0.0, "Q8": 20.27}


def _tables(qid: str, rows: int, seed: int) -> dict:
    if qid == "Q5":  # two sources of half the rows each
        half = rows // 2
        return {"particles_1": particles(half, seed), "particles_2": particles(rows - half, seed + 1, first_id=half)}
    return {"particles": particles(rows, seed)}


def _per_call(fn, *args, at_least_s: float = 0.02) -> float:
    """CPU seconds per call of ``fn``, over enough calls to last ``at_least_s``: a single call of
    ~30 µs is below what one process_time reading resolves well, and its cost is the steady
    state a node serving many queries sees (the cold first call is reported apart)."""
    calls, t0 = 0, time.process_time()
    while True:
        fn(*args)
        calls += 1
        spent = time.process_time() - t0
        if spent >= at_least_s:
            return spent / calls


def run(scale: float = 1.0, seed: int = 1, repeats: int = 3, progress=None) -> list[dict]:
    """One row per query: input rows, estimate, actual, |diff| %, cost % (medians of repeats for times)."""
    say = progress or (lambda msg: None)
    out = []
    for qid, text, rows in QUERIES:
        n = max(1, int(rows * scale))
        tables = _tables(qid, n, seed)
        say(f"{qid}: sketching {n:,} rows")
        stats = {name: table_stats(t) for name, t in tables.items()}
        tree = sql.parse(text)
        t0 = time.process_time()
        est = cardinality.estimate(tree, stats)  # on the plan, as the thesis's estimator is
        first_call = time.process_time() - t0
        est_cpu, run_cpu = [], []
        for _ in range(repeats):
            est_cpu.append(_per_call(cardinality.estimate, tree, stats))
            t0 = time.process_time()
            result = sql.execute(tree, tables)
            run_cpu.append(time.process_time() - t0)
        actual = result.num_rows
        say(f"{qid}: estimated {est.rows:,.1f}, actual {actual:,}")
        diff = abs(est.rows - actual) / actual * 100 if actual else (0.0 if est.rows == 0 else float("inf"))
        out.append({"id": qid, "sql": text, "input_rows": sum(t.num_rows for t in tables.values()),
                    "estimated_rows": est.rows, "actual_rows": actual, "diff_pct": diff,
                    "cost_pct": sorted(est_cpu)[len(est_cpu) // 2] / max(sorted(run_cpu)[len(run_cpu) // 2], 1e-9) * 100,
                    "estimator_cpu_s": sorted(est_cpu)[len(est_cpu) // 2], "query_cpu_s": sorted(run_cpu)[len(run_cpu) // 2],
                    "estimator_first_call_cpu_s": first_call,
                    "defaults": est.defaults, "thesis_diff_pct": THESIS_DIFF[qid],
                    "label": "measured (actual rows, CPU times); modelled (estimate)"})
    return out
