"""`nearfaas query`: SQL over the tabular objects under an S3 prefix (docs/dataservices.md)."""

from __future__ import annotations

import sys

import click

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, gateway_url, http

FORMATS = ("csv", "jsonl", "arrow", "parquet")


@click.command()
@click.argument("sql")
@click.argument("source")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True,
              help="the result's format (arrow: an Arrow IPC stream)")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="write the result to this file (default: standard output; binary formats need -o)")
@common_state
@common_gateway
def query(sql, source, fmt, output, state, gateway):
    """Run SQL over the Parquet, Arrow, CSV or JSON-lines objects under SOURCE (s3://bucket/prefix),
    read as one table; name it by any one name in FROM.

    \b
      nearfaas query "SELECT particle_id, x FROM p WHERE x > 0.99" s3://runs/2026-11/
      nearfaas query "SELECT count(*) FROM p" s3://runs/ --format jsonl
      nearfaas query "SELECT * FROM p WHERE vz < -99" s3://runs/ --format parquet -o fast.parquet
    """
    if not source.startswith("s3://"):
        fail(f"{source!r} is not an s3://bucket/prefix URI")
    if fmt in ("arrow", "parquet") and output is None and sys.stdout.isatty():
        fail(f"--format {fmt} is binary: give -o FILE")
    url = gateway_url(state, gateway)
    with err.status(f"querying {source}…"):
        resp = http(state, "POST", f"{url}/system/query", {"sql": sql, "source": source, "format": fmt}, timeout=600)
    if resp.status_code != 200:
        fail(f"query refused ({resp.status_code}): {resp.text.strip()}")
    rows = resp.headers.get("X-Nearfaas-Rows", "?")
    err.print(f"{rows} rows in/out over {resp.headers.get('X-Nearfaas-Objects', '?')} objects, "
              f"ran at {resp.headers.get('X-Nearfaas-Placement', '?')}, {resp.headers.get('X-Nearfaas-Elapsed-Ms', '?')} ms")
    if output:
        with open(output, "wb") as f:
            f.write(resp.content)
        console.print(f"wrote {len(resp.content)} bytes to {output}")
    else:
        sys.stdout.buffer.write(resp.content)


COMMANDS = (query,)
