"""`nearfaas memory …`: a function's memory profile and Porter's tier hints (issue 18; docs/memory.md)."""

from __future__ import annotations

import json

import click
from rich.table import Table

from nearfaas.cli.common import common_gateway, common_state, console, fail, gateway_url, http


@click.group()
def memory():
    """Which allocations of a function are hot, and which memory tier each belongs on.

    \b
    A function profiled with x-nearfaas: {memory: {profile: true}} in its stack file runs with the
    allocation shim preloaded: its large allocations are logged with their call stacks and its
    writes and a sample of accesses every sample_ms (default 50 ms).
      nearfaas memory profile thumbnail     # per call stack: allocations, pages, heat
      nearfaas memory hints thumbnail       # Porter's hint: DRAM or slow tier per call stack
    """


def _fetch(name: str, state, gateway, dram_share: float = 0.5) -> dict:
    resp = http(state, "GET", f"{gateway_url(state, gateway)}/system/memory/{name}?dram_share={dram_share}")
    if resp.status_code != 200:
        fail(f"memory profile of {name!r} refused ({resp.status_code}): {resp.text.strip()}")
    return resp.json()


@memory.command("profile")
@click.argument("function")
@click.option("--json", "as_json", is_flag=True, help="print the profiles as JSON")
@common_state
@common_gateway
def profile_cmd(function, as_json, state, gateway):
    """The memory profile of FUNCTION's profiled workers, one per worker run (measured)."""
    doc = _fetch(function, state, gateway)
    if as_json:
        click.echo(json.dumps(doc["runs"], indent=2))
        return
    if not doc["runs"]:
        console.print(f"no profiled runs of {function} yet: invoke it, then ask again")
        return
    for run in doc["runs"]:
        if "error" in run:
            console.print(f"{run['node']}/{run['instance']}: {run['error']}", markup=False)
            continue
        prof = run["profile"]
        t = Table(title=f"{run['node']}/{run['instance']}: {prof['footprint_pages']:,} pages, {prof['periods']} periods "
                        f"of {doc['sample_ms']} ms (measured)")
        heat = "heat (accesses/sampled page/period)" if prof.get("heat_from", "").startswith("accesses") else \
            "heat (writes/page/period)"
        for col in ("call stack", "allocations", "MiB", "pages", heat, "size classes (log2 B)"):
            t.add_column(col)
        for s in prof["stacks"][:20]:
            t.add_row(s["stack"], str(s["allocations"]), f"{s['bytes'] / 2**20:.1f}", f"{s['pages']:,}", f"{s['heat']:.3f}",
                      ", ".join(map(str, s["size_classes"])))
        console.print(t)
        placed = run.get("placement") or {}
        if placed.get("placed"):
            console.print(f"placed (pages move only where a slow NUMA node exists; else recorded): {placed['fast_bytes'] / 2**20:.1f} MiB on DRAM, "
                          f"{placed['slow_bytes'] / 2**20:.1f} MiB on the slow tier; {placed['promotions']} promotions, "
                          f"{placed['demotions']} demotions")


@memory.command("hints")
@click.argument("function")
@click.option("--dram-share", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="share of the footprint the fast tier (DRAM) may hold")
@click.option("--json", "as_json", is_flag=True, help="print the hints as JSON")
@common_state
@common_gateway
def hints_cmd(function, dram_share, as_json, state, gateway):
    """Porter's hint for FUNCTION (modelled from its measured profiles): the hottest call stacks on
    DRAM until they fill --dram-share of the footprint, the rest on the slow tier; confidence is the
    share of profiled runs that agree. Keyed by call stack, so a larger input keeps its hint."""
    doc = _fetch(function, state, gateway, dram_share)
    if as_json:
        click.echo(json.dumps(doc["hints"], indent=2))
        return
    t = Table(title=f"{function}: tier hints from {len(doc['runs'])} profiled runs, DRAM <= {dram_share:.0%} of the "
                    "footprint (modelled)")
    for col in ("call stack", "tier", "confidence", "heat", "pages"):
        t.add_column(col)
    for h in doc["hints"]:
        t.add_row(h["stack"], h["tier"], f"{h['confidence']:.2f}", f"{h['heat']:.3f}", f"{h['pages']:,}")
    console.print(t)
