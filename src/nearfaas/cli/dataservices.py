"""`nearfaas dataservices …`: Arrow data services next to the data (issue 17; docs/dataservices.md)."""

from __future__ import annotations

import json

import click
from rich.table import Table

from nearfaas.cli.common import console, err


@click.group()
def dataservices():
    """Queries on tabular objects, their statistics, and the offload decision's estimates."""


@dataservices.command("cardinality")
@click.option("--scale", type=click.FloatRange(min=1e-4, max=4.0), default=1.0, show_default=True,
              help="fraction of the thesis's table sizes to generate (1.0: 0.7M–5M rows per query)")
@click.option("--repeats", type=click.IntRange(1, 50), default=5, show_default=True, help="timed repeats per query (medians)")
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON")
def cardinality_cmd(scale, repeats, as_json):
    """The thesis's Table 5.4 re-run here: each query's output rows estimated from KLL and Theta
    sketches alone vs the rows it really returns (Arrow compute over uniform particle tables of
    Table 5.3's schema), and the estimator's CPU time as a share of the query's.

    Estimates are modelled; actual rows and CPU times are measured on this machine."""
    from nearfaas.dataservices import table54

    with err.status("generating particle tables…") as status:
        rows = table54.run(scale=scale, repeats=repeats, progress=lambda m: status.update(m))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    t = Table(title="Cardinality estimation (thesis Table 5.4's queries): estimate modelled, actual and CPU measured")
    for col in ("ID", "Total input rows", "Estimated rows", "Actual rows", "Diff (%)", "Cost (%)", "Estimator us",
                "First call us", "Thesis diff (%)"):
        t.add_column(col, justify="right" if col != "ID" else "left")
    for r in rows:
        t.add_row(r["id"], f"{r['input_rows']:,}", f"{r['estimated_rows']:,.1f}", f"{r['actual_rows']:,}",
                  f"{r['diff_pct']:.2f}", f"{r['cost_pct']:.2f}", f"{r['estimator_cpu_s'] * 1e6:.1f}",
                  f"{r['estimator_first_call_cpu_s'] * 1e6:.1f}", f"{r['thesis_diff_pct']:.2f}")
    console.print(t)
    for r in rows:
        console.print(f"{r['id']}: {r['sql']}", markup=False, highlight=False)
        if r["defaults"]:
            console.print(f"   conditions without a rule (default selectivity): {r['defaults']}", markup=False)
    console.print("Cost = the estimator's CPU time per call (steady state, over a loop of calls) / the query's CPU time "
                  "(Arrow compute, this process), medians; the first, cold call is shown apart; the sketches are built "
                  "when the object arrives and are not counted.", markup=False)


@dataservices.command("train")
@click.option("--samples", type=click.IntRange(20, 100_000), default=300, show_default=True,
              help="training queries (template instances on random particle tables), result tables and transfers")
@click.option("--max-rows", type=click.IntRange(1000, 10**8), default=10**6, show_default=True,
              help="largest training table (rows are log-uniform from 1,000)")
@click.option("--queries", type=click.IntRange(1, 10_000), default=16, show_default=True,
              help="held-out template queries for the Table 5.6 evaluation")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="where to keep the models (default ~/.cache/nearfaas/dataservices-models)")
@click.option("--json", "as_json", is_flag=True, help="print the evaluation as JSON")
def train_cmd(samples, max_rows, queries, seed, out, as_json):
    """Fit the decision engine's cost models on this machine (the thesis's Ch. 5.4): random forests
    for query execution time (from the operations vector), result size, serialization time and
    transfer time, then evaluate them on held-out tables and queries in Table 5.6's shape.

    Training times are measured here; predictions are modelled. The models are saved with this
    machine's facts and refit when those change."""
    from nearfaas.dataservices import costmodels

    with err.status("training…") as status:
        models = costmodels.train(samples=samples, seed=seed, max_rows=max_rows, progress=lambda m: status.update(str(m)))
        path = costmodels.save(models, out)
        result = costmodels.evaluate(models, n_queries=queries, seed=seed + 1, progress=lambda m: status.update(str(m)))
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
        return
    console.print(costmodels.report(result), markup=False, highlight=False)
    console.print(f"models saved to {path}", markup=False)


COMMANDS = (dataservices,)
