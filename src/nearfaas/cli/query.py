"""`nearfaas query` and `nearfaas stats`: SQL over the tabular objects under an S3 prefix, and
their column statistics (docs/dataservices.md)."""

from __future__ import annotations

import sys

import click

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, gateway_url, http

FORMATS = ("csv", "jsonl", "arrow", "parquet")


@click.command()
@click.argument("sql", metavar="[SQL]")
@click.argument("source", required=False)
@click.option("--substrait", "plan", type=click.File("rb"), default=None,
              help="run this Substrait plan (a serialized protobuf Plan file) instead of SQL; give SOURCE only")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True,
              help="the result's format (arrow: an Arrow IPC stream)")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="write the result to this file (default: standard output; binary formats need -o)")
@common_state
@common_gateway
def query(sql, source, plan, fmt, output, state, gateway):
    """Run SQL over the Parquet, Arrow, CSV or JSON-lines objects under SOURCE (s3://bucket/prefix),
    read as one table; name it by any one name in FROM. Each object's part runs where the
    decision engine says: on its storage node (offload), filtered there and finished here
    (partial), or fetched (push-back); stderr says how many of each.

    \b
      nearfaas query "SELECT particle_id, x FROM p WHERE x > 0.99" s3://runs/2026-11/
      nearfaas query "SELECT count(*) FROM p" s3://runs/ --format jsonl
      nearfaas query "SELECT * FROM p WHERE vz < -99" s3://runs/ --format parquet -o fast.parquet
      nearfaas query --substrait plan.bin s3://runs/
    """
    body = {"sql": sql}
    if plan is not None:
        if source is not None:
            fail("with --substrait give only SOURCE (the plan is the query)")
        import base64

        source, body = sql, {"substrait": base64.b64encode(plan.read()).decode()}
    elif source is None:
        fail("give SQL and SOURCE, e.g. nearfaas query \"SELECT * FROM p\" s3://bucket/prefix/")
    if not source.startswith("s3://"):
        fail(f"{source!r} is not an s3://bucket/prefix URI")
    if fmt in ("arrow", "parquet") and output is None and sys.stdout.isatty():
        fail(f"--format {fmt} is binary: give -o FILE")
    url = gateway_url(state, gateway)
    with err.status(f"querying {source}…"):
        resp = http(state, "POST", f"{url}/system/query", {**body, "source": source, "format": fmt}, timeout=600)
    if resp.status_code != 200:
        fail(f"query refused ({resp.status_code}): {resp.text.strip()}")
    rows = resp.headers.get("X-Nearfaas-Rows", "?")
    err.print(f"{rows} rows in/out over {resp.headers.get('X-Nearfaas-Objects', '?')} objects, "
              f"ran at {resp.headers.get('X-Nearfaas-Placement', '?')}, {resp.headers.get('X-Nearfaas-Elapsed-Ms', '?')} ms")
    if "X-Nearfaas-Sql" in resp.headers:
        from urllib.parse import unquote

        err.print(f"the plan ran as: {unquote(resp.headers['X-Nearfaas-Sql'])}", markup=False, highlight=False)
    if output:
        with open(output, "wb") as f:
            f.write(resp.content)
        console.print(f"wrote {len(resp.content)} bytes to {output}")
    else:
        sys.stdout.buffer.write(resp.content)


@click.command()
@click.argument("source")
@click.option("--json", "as_json", is_flag=True, help="print the statistics as JSON")
@common_state
@common_gateway
def stats(source, as_json, state, gateway):
    """Column statistics of the tabular objects under SOURCE (s3://bucket/prefix), merged: rows,
    distinct values, min/max and quantiles per column. The storage nodes sketch each object when
    it is written (KLL and Theta sketches), so the numbers are estimates (modelled) and cost no scan.

    \b
      nearfaas stats s3://runs/2026-11/
    """
    import json

    from rich.table import Table

    if not source.startswith("s3://"):
        fail(f"{source!r} is not an s3://bucket/prefix URI")
    url = gateway_url(state, gateway)
    resp = http(state, "GET", f"{url}/system/stats?source={source}")
    if resp.status_code != 200:
        fail(f"stats refused ({resp.status_code}): {resp.text.strip()}")
    doc = resp.json()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    console.print(f"{doc['source']}: {doc['objects']} objects, {doc['objects_with_stats']} with statistics, "
                  f"{doc['rows']:,} rows ({doc['label']})", markup=False)
    if doc["missing"]:
        err.print(f"no statistics yet for: {', '.join(doc['missing'])} (not tabular, or still being sketched)", markup=False)
    t = Table()
    for col in ("column", "distinct", "min", "p25", "p50", "p75", "max"):
        t.add_column(col, justify="left" if col == "column" else "right")
    for name, c in doc["columns"].items():
        q = c.get("quantiles", {})
        cells = [c.get("min"), q.get("p25"), q.get("p50"), q.get("p75"), c.get("max")]
        t.add_row(name, f"{c['distinct']:,.0f}", *("" if v is None else f"{v:.6g}" for v in cells))
    console.print(t)


COMMANDS = (query, stats)
