"""`nearfaas bench placement | fastpath`: benchmarks on private clusters of their own."""

from __future__ import annotations

import json

import click
from rich.table import Table

from nearfaas.cli.common import console, err, fail


@click.group()
def bench():
    """Benchmarks that run on private clusters of their own (all numbers measured here)."""


@bench.command("placement")
@click.option("--quick", is_flag=True, help="two input sizes over the s3-like link (about a minute)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (per policy: link_bytes, p50_ms)")
def bench_placement(quick, as_json):
    """The same 3-stage chain under near-data and compute-only placement, side by side.

    Each input size runs over each link profile under both policies (5 measured calls each, 3
    with --quick) on a private cluster; outputs are checked to be byte-identical."""
    from rich.progress import Progress

    from nearfaas.bench.placement import run, steps

    with Progress(console=err, transient=as_json) as progress:
        task = progress.add_task("starting clusters...", total=steps(quick))
        result = run(quick, progress=lambda m: progress.update(task, advance=1, description=m))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    table = Table("link", "input", "near-data p50 ms", "link MB", "compute-only p50 ms", "link MB", "data share", "speedup",
                  title="placement (measured; link delays injected from the profiles)")
    for profile, sizes in result["results"].items():
        for size, p in sizes.items():
            nd, co = p["near-data"], p["compute-only"]
            table.add_row(profile, f"{int(size) // 1024} KiB", f"{nd['p50_ms']:.1f}", f"{nd['link_bytes'] / 1e6:.2f}",
                          f"{co['p50_ms']:.1f}", f"{co['link_bytes'] / 1e6:.2f}", f"{co['data_share']:.0%}",
                          f"{co['p50_ms'] / nd['p50_ms']:.2f}x")
    console.print(table)


@bench.command("fastpath")
@click.option("--quick", is_flag=True, help="one repeat of each measurement, the web lambda first (under a minute)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (fastpath_p50_us, forking_p50_us, threading_p50_us, ...)")
def bench_fastpath(quick, as_json):
    """The fast path against λ-NIC's baselines re-implemented here, side by side on the same inputs.

    The executor with WebAssembly lambdas and with native ones; B1, a Python ForkingUDPServer
    that forks per request; B2, a ThreadingUDPServer; B3, the gateway with a warm Python
    worker. Every number is measured on this machine (docs/fastpath.md)."""
    from nearfaas.bench.fastpath import run

    with err.status("building and starting the fast path...") as status:
        try:
            result = run(quick, progress=lambda m: status.update(m))
        except RuntimeError as exc:  # not built, memcached missing, ...: say what to do
            fail(str(exc))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    console.print_json(json.dumps({k: v for k, v in result.items() if k.endswith("_us") or k.endswith("_per_s")}))


@bench.command("stream")
@click.option("--quick", is_flag=True, help="100 requests per size, one repeat, N in 1, 4, 16, 64")
@click.option("--json", "as_json", is_flag=True,
              help="print stream_p50_us, baremetal_p50_us, serverless_p50_us (per size), per_request_ratio_n64, "
                   "and the Rust client's executor and bare-TCP floor p50s, per connection and kept alive")
def bench_stream(quick, as_json):
    """Streaming Top-K (K=16, u32) side by side, a connection per request: the executor's stream
    target, a bare-metal stdlib HTTP server behind an interceptor, and a warm function through the
    gateway; then the executor and this machine's bare-TCP floor timed by the Rust client, per
    connection and on a kept-alive connection (benchmarks/stream_topk.py has the full run; every
    number is measured here)."""
    from nearfaas.bench.stream import headline, run, table

    with err.status("starting the Top-K systems...") as status:
        try:
            result = run(quick, progress=lambda m: status.update(m))
        except (RuntimeError, ValueError) as exc:
            fail(str(exc))
    if as_json:
        click.echo(json.dumps(headline(result), indent=2))
        return
    console.print(table(result), markup=False, highlight=False)


COMMANDS = (bench,)
