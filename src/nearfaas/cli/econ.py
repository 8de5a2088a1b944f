"""`nearfaas econ`: is offloading worth it? The thesis's cost-benefit metrics and its
data-availability model (issue 20; docs/econ.md). Subcommands: availability, mbwu, rpwu, headroom."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import click
from rich.table import Table

from nearfaas.cli.common import console, fail


@click.group("econ", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def econ() -> None:
    """Is offloading to storage nodes worth it? Cost-benefit metrics and availability models.

    \b
      nearfaas econ availability --m 10 --n 4 --c 4 --f 2 --w 4   # thesis eq. 3.12 (modelled)
      nearfaas econ availability --sweep --out avail/              # Figures 3.13-3.18 as CSV + PNG
      nearfaas econ mbwu                                          # RocksDB + YCSB-A, 3 landscapes (measured)
      nearfaas econ rpwu                                          # stress-ng, normalised (measured)
      nearfaas econ headroom --target 1Gbit                       # CPU left at an ingest rate (measured)
      nearfaas twin availability --cluster cluster.yml            # the model on your own cluster

    Every number is labelled measured (on this machine) or modelled.
    """


def _model(m, n, c, f, w, r_m):
    from nearfaas.econ.availability import Model

    try:
        return Model(m, n, c, f, w, r_m)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@click.command("availability")
@click.option("--m", "m", type=int, default=10, show_default=True, help="general-purpose servers (at least 3)")
@click.option("--n", "n", type=int, default=4, show_default=True, help="storage devices per server (at least 2)")
@click.option("--c", "c", type=float, default=None, help="embedded nodes per server (at least 1; default: n, as many nodes as server devices)")
@click.option("--f", "f", type=float, default=2.0, show_default=True, help="device / server failure-rate ratio: 2 for HDDs, 0.06 for SSDs")
@click.option("--w", "w", type=int, default=4, show_default=True, help="copyset scatter width (even)")
@click.option("--r-m", "r_m", type=float, default=0.1, show_default=True,
              help="expected server failures in the period before repair (an input; the thesis leaves it free)")
@click.option("--general", is_flag=True, help="also every failure count, not only exactly three: exact enumeration "
              "over generated copysets (small clusters) or Monte-Carlo")
@click.option("--trials", type=click.IntRange(1000, 50_000_000), default=200_000, show_default=True, help="Monte-Carlo draws for --general")
@click.option("--sweep", is_flag=True, help="sweep m, n and c like the thesis's Figures 3.13-3.18 (HDD f=2 and SSD f=0.06)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("availability"), show_default=True,
              help="where --sweep writes its CSV and PNGs")
@click.option("--json", "as_json", is_flag=True, help='print {"p_gp", "p_es", "relative_benefit", ...}')
def availability(m, n, c, f, w, r_m, general, trials, sweep, out_dir, as_json):
    """How much less often embedded storage nodes lose data than servers (thesis section 3.2).

    Compares m servers with n devices each against c*m embedded nodes with one device each,
    both under 3-way copyset replication with scatter width w, failures independent and
    Poisson. The answer is the thesis's equation 3.12 (exactly three failures); --general adds
    every failure count. All of it is modelled.
    """
    from nearfaas.econ import availability as av

    model = _model(m, n, float(n if c is None else c), f, w, r_m)
    if sweep:
        return _sweep(out_dir, w, r_m, as_json)
    result = av.three_failures(model)
    result["inputs"] = {"m": m, "n": n, "c": model.c, "f": f, "w": w, "r_m": r_m}
    if general:
        result["general"] = _general(model, trials, quiet=as_json)
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    t = Table(title=f"Data loss, exactly three failures (modelled, thesis eq. 3.12): m={m}, n={n}, c={model.c:g}, "
              f"f={f:g}, w={w}, R_m={r_m:g}", box=None)
    for col in ("System", "Nodes", "Copysets", "P(loss)"):
        t.add_column(col, justify="left" if col == "System" else "right")
    t.add_row("servers (GP)", f"{m} x {n} devices", f"{result['terms_gp']['copysets']:.2f}", f"{result['p_gp']:.3e}")
    t.add_row("embedded (ES)", f"{model.m_es} x 1 device", f"{result['terms_es']['copysets']:.2f}", f"{result['p_es']:.3e}")
    console.print(t)
    console.print(f"relative benefit P_gp / P_es = [bold]{result['relative_benefit']:.2f}[/bold] (modelled)")
    if general:
        g = result["general"]
        for system in ("gp", "es"):
            s = g[system]
            console.print(f"  {system}: every failure count, {s['method']}: P(loss) = {s['p']:.3e}"
                          + (f" (95% CI {s['ci95'][0]:.2e}..{s['ci95'][1]:.2e})" if "ci95" in s else ""))


def _general(model, trials: int, quiet: bool) -> dict:
    """Both systems over generated copysets: exact enumeration while the combinations are few,
    Monte-Carlo (with a progress bar) past that."""
    from rich.progress import Progress

    from nearfaas.econ import availability as av

    out = {}
    with Progress(console=console, disable=quiet, transient=True) as bar:
        for system, servers, n in (("gp", model.m, model.n), ("es", model.m_es, 1)):
            try:
                masks, _ = av.copysets_for(servers, model.w)
            except ValueError as exc:
                out[system] = {"method": "not computed", "why": str(exc)}
                continue
            if servers * n <= 24:
                out[system] = {"method": "exact enumeration up to 6 failures",
                               "p": av.union_probability(masks, servers, n, model.r_m, model.r_d, max_failures=6)["p"],
                               "thesis_eq": av.thesis_probability(masks, servers, n, model.r_m, model.r_d, max_failures=6)}
                continue
            task = bar.add_task(f"Monte-Carlo, {system}", total=trials)
            r = av.monte_carlo(masks, servers, n, r_m=model.r_m, r_d=model.r_d, trials=trials,
                               progress=lambda t, task=task: bar.update(task, completed=t))
            out[system] = {"method": f"Monte-Carlo, {trials:,} draws", **r}
    return out


def _sweep(out_dir: Path, w: int, r_m: float, as_json: bool) -> None:
    from nearfaas.econ import availability as av
    from nearfaas.econ import availability_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    ms, ns, cs = list(range(3, 31)), [2, 4, 6, 8, 10, 12], [1, 2, 4, 6, 8, 10, 12]
    try:
        rows = [*av.sweep(ms, ns, [None], [2.0, 0.06], [w], r_m), *av.sweep(ms, [12], cs, [2.0, 0.06], [w], r_m)]
    except ValueError as exc:
        fail(str(exc))
    path = out_dir / "availability.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    pngs = availability_plots.figures(rows, out_dir)
    if as_json:
        click.echo(json.dumps({"csv": str(path), "pngs": [str(p) for p in pngs], "rows": len(rows),
                               "label": "modelled: thesis eq. 3.12"}, indent=1))
    else:
        console.print(f"wrote {path} ({len(rows)} rows, modelled) and " + ", ".join(str(p) for p in pngs))


@click.command("mbwu")
@click.option("--records", type=click.IntRange(1000, 1_000_000), default=200_000, show_default=True,
              help="YCSB records of 1 KB loaded into each store (bigger than the 8 MiB block cache)")
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=10.0, show_default=True, help="measured seconds per run")
@click.option("--repeats", type=click.IntRange(1, 20), default=3, show_default=True, help="runs of each landscape and platform (median)")
@click.option("--batch", type=click.IntRange(1, 10_000), default=64, show_default=True, help="operations per function call")
@click.option("--link", default="dc-25g", show_default=True, help="emulated link of the network and disaggregated landscapes")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="platform cost / power / volume inputs (YAML; default examples/econ/platforms.yml)")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("mbwu.png"), show_default=True,
              help="PNG of the MBWUs and cuts ('none' for no plot)")
@click.option("--json", "as_json", is_flag=True, help="print {mbwu_ops_s, landscapes: {integrated, network, disaggregated: ...}}")
def mbwu_cmd(records, seconds, repeats, batch, link, profile_path, plot_path, as_json):
    """What a key-value function's throughput costs on a storage node against a host (thesis
    section 3.1): RocksDB as a nearfaas function under YCSB-A, in the integrated, network and
    disaggregated landscapes, normalised to this disk's own MBWU. Starts a private cluster;
    minutes. Throughput measured; $/kWh/m³ modelled from the profile's inputs.
    """
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from nearfaas.bench import mbwu as harness
    from nearfaas.econ.mbwu import load_profile
    from nearfaas.link.profiles import get_profile

    try:
        get_profile(link)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--link") from None
    path = profile_path or Path(harness.KV_HANDLER).parent / "platforms.yml"
    try:
        platforms = load_profile(path)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--profile") from None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, disable=as_json) as bar:
        task = bar.add_task("starting a private cluster", total=None)
        try:
            result = harness.run(records=records, seconds=seconds, repeats=repeats, batch=batch, link=link, platforms=platforms,
                                 progress=lambda m: bar.update(task, description=m))
        except RuntimeError as exc:  # the link file system would not mount (no FUSE), or the function failed
            fail(f"the MBWU run stopped: {exc}")
    result["mbwu_ops_s"] = result["medium"]["mbwu_ops_s"]
    result["profile"] = {"path": str(path), "label": "inputs, not measured"}
    if str(plot_path) != "none":
        result["plot"] = str(harness.plot(result, plot_path))
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        console.print(harness.table(result), highlight=False)
        if result.get("plot"):
            console.print(f"plot: {result['plot']}")


def _commands():
    from nearfaas.cli.econ_headroom import headroom
    from nearfaas.cli.econ_rpwu import rpwu

    return [availability, mbwu_cmd, rpwu, headroom]


COMMANDS = _commands()
for _command in COMMANDS:
    econ.add_command(_command)
