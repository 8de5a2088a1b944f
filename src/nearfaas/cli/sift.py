"""`nearfaas sift …`: the thesis's distributed particle sifting on Ray (issue 19; docs/bitar.md)."""

from __future__ import annotations

import json

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nearfaas.cli.common import Quantity, console, err, fail
from nearfaas.cli.partition import histogram


@click.group()
def sift():
    """Sort particles across processing elements (Ray actors) by their ID bits, stage by stage."""


@sift.command("run")
@click.option("--pes", type=int, default=8, show_default=True, help="processing elements (a power of two)")
@click.option("--split", type=int, default=4, show_default=True, help="parts per compaction (a power of two >= 2)")
@click.option("--particles", type=Quantity(), default="1M", show_default=True, help="particles injected in all (e.g. 1M, 250K)")
@click.option("--ranks", type=click.IntRange(1, 4096), default=4, show_default=True, help="simulation ranks injecting them")
@click.option("--threshold", type=Quantity(), default=None,
              help="particles a PE accumulates before it compacts [default: never early: drain stage by stage]")
@click.option("--ray-address", help="host:port of a running Ray cluster [default: start a local one]")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True,
              help='print {"particles_in", "particles_out", "duplicates", "misplaced", "stages", "per_stage_s", ...}')
def run_cmd(pes, split, particles, ranks, threshold, ray_address, seed, as_json):
    """Inject particles from simulation ranks, sift them through the PEs, and check that every
    PE ends with exactly the IDs of its bit prefix (the thesis's §5.3.2, measured on Ray).

    \b
      nearfaas sift run --pes 8 --split 4 --particles 1M
      nearfaas sift run --pes 16 --split 16 --particles 4M --threshold 500K --json
      nearfaas sift run --ray-address 10.0.0.5:6379 --pes 64 --split 16   # a multi-node cluster
    """
    from nearfaas.dataservices import sift_ray
    from nearfaas.dataservices.sifting import Plan, SiftError

    try:
        plan = Plan(pes, split, threshold if threshold is not None else 2**62)
    except SiftError as e:
        fail(str(e))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=as_json) as progress:
        tasks = {}

        def advance(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = progress.add_task(what, total=total)
            progress.update(tasks[what], completed=done, total=total)

        start = progress.add_task("starting Ray and the PEs", total=None)
        try:
            out = sift_ray.run(plan, ranks, particles, ray_address, seed, progress=advance)
        except SiftError as e:
            fail(str(e))
        progress.remove_task(start)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    ok = out["particles_out"] == out["particles_in"] and not out["duplicates"] and not out["misplaced"]
    console.print(f"{out['particles_in']:,} particles in, {out['particles_out']:,} out, {out['duplicates']} duplicates, "
                  f"{out['misplaced']} misplaced — {'sorted' if ok else 'NOT sorted'}; {out['pes']} PEs on "
                  f"{len(out['nodes'])} Ray node(s), split {out['split']}, {out['stages']} stage(s)", markup=False)
    t = Table(title="Timing breakdown (measured on this Ray cluster, wall clock)")
    for col in ("Step", "Seconds", "Compactions", "Split wall s", "Split+serialize CPU s (sum)", "Publish wall s"):
        t.add_column(col, justify="left" if col == "Step" else "right")
    inj = out["inject"]
    t.add_row("inject: sample + serialize", f"{inj['sample_serialize_s']:.3f}", "", "", "", "")
    t.add_row("inject: deliver to PEs", f"{inj['deliver_s']:.3f}", "", "", "", "")
    for s in out["stages_detail"]:
        t.add_row(f"stage {s['stage']} drain", f"{s['wall_s']:.3f}", str(s["compactions"]), f"{s['split_wall_s']:.3f}",
                  f"{s['split_s_sum']:.3f}", f"{s['publish_s']:.3f}")
    console.print(t)
    console.print("Particles per PE:")
    console.print(histogram(out["per_pe"], "PE", "particles"))
    if not ok:
        raise SystemExit(1)


COMMANDS = [sift]
