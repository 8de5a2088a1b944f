"""`nearfaas econ rpwu`: stress-ng micro-operations on each node class's CPU quota, normalised to a
reference run (thesis section 4.2; econ/rpwu.py does the measuring, this the options, the
tables and the box plot)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nearfaas.cli.common import console, err, fail

NO_PLOT = ("", "none", "off", "-")


def _class_capacities(cluster: Path | None) -> dict[str, float | None]:
    """Each class of the cluster file -> its nodes' ``cpus`` (None: the whole machine)."""
    from nearfaas.spec.cluster import load_cluster
    from nearfaas.spec.errors import SpecError

    try:
        spec = load_cluster(cluster)
    except SpecError as exc:
        fail(f"--cluster {cluster}: {exc}")
    seen: dict[str, set] = {}
    for node in spec.nodes:
        seen.setdefault(node.cls, set()).add(node.cpus)
    mixed = {c: v for c, v in seen.items() if len(v) > 1}
    if mixed:
        c, v = next(iter(mixed.items()))
        fail(f"class {c} has nodes with different cpus ({', '.join(str(x) for x in sorted(v, key=str))}); "
             f"measure one at a time with --class {c}=CPUS")
    return {c: next(iter(v)) for c, v in seen.items()}


def _wanted_classes(values: tuple[str, ...], known: dict[str, float | None]) -> dict[str, float | None]:
    from nearfaas.econ.rpwu import HOST

    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        return {**known, HOST: None}
    out: dict[str, float | None] = {}
    for name in names:
        if "=" in name:  # an ad-hoc class: NAME=CPUS, e.g. pi=0.25
            label, _, cpus = name.partition("=")
            try:
                out[label.strip()] = float(cpus)
                if not 0.01 <= out[label.strip()] <= 1024:
                    raise ValueError
            except ValueError:
                raise click.BadParameter(f"{name!r}: CPUS must be a number of cores from 0.01 to 1024, e.g. pi=0.25",
                                         param_hint="--class") from None
        elif name == HOST or name in known:
            out[name] = None if name == HOST else known[name]
        else:
            raise click.BadParameter(f"no class {name!r}; valid: {', '.join([*known, HOST])}, or NAME=CPUS",
                                     param_hint="--class")
    return out


def _plot(result: dict, path: Path) -> Path:
    """The thesis's Figure 4.2 for this run: per stressor, one box per target over the repeats."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(result["targets"])
    stressors = list(result["stressors"])
    width = 0.8 / len(targets)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(stressors) + 2), 4.5))
    for i, name in enumerate(targets):
        rows = result["targets"][name]["stressors"]
        data = [(j, rows[s]["rpwu"]) for j, s in enumerate(stressors) if rows[s]["rpwu"]]
        if not data:
            continue
        boxes = ax.boxplot([d for _, d in data], positions=[j - 0.4 + width * (i + 0.5) for j, _ in data], widths=width * 0.9,
                           patch_artist=True, showfliers=True, manage_ticks=False)
        colour = plt.get_cmap("tab10")(i % 10)
        for box in boxes["boxes"]:
            box.set_facecolor(colour)
        for median in boxes["medians"]:
            median.set_color("black")
        boxes["boxes"][0].set_label(name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log")  # ratios: 0.5 and 2 lie equally far from the reference
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xticks(range(len(stressors)), stressors, rotation=45, ha="right")
    ax.set_ylabel(f"RPWU (bogo-ops/s relative to {result['reference']['target']})")
    ax.set_title(f"stress-ng micro-operations, {result['duration_s']} s x {result['repeats']} repeats (measured)")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _resolve_reference(reference: str | None, targets) -> tuple[str | None, dict]:
    """(target name of this run, {}) or (None, the loaded reference from a saved --json file)."""
    from nearfaas.econ import rpwu as lib

    if reference is None:
        names = [t.name for t in targets if lib.HOST in t.classes]
        return (names[0] if names else targets[0].name), {}
    path, wanted = Path(reference), None
    if not path.is_file() and ":" in reference and Path(reference.rsplit(":", 1)[0]).is_file():
        path, wanted = Path(reference.rsplit(":", 1)[0]), reference.rsplit(":", 1)[1]
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise click.BadParameter(f"{path}: not readable JSON ({exc})", param_hint="--reference") from None
        try:
            name, rates, facts = lib.reference_from_file(data, wanted, str(path))
        except lib.RpwuError as exc:
            raise click.BadParameter(str(exc), param_hint="--reference") from None
        return None, {"file": str(path), "name": name, "rates": rates, **facts}
    for t in targets:
        if reference == t.name or reference in t.classes:
            return t.name, {}
    raise click.BadParameter(f"{reference!r} is neither a file nor a measured class; valid: "
                             f"{', '.join(c for t in targets for c in t.classes)}, FILE or FILE:TARGET", param_hint="--reference")


@click.command("rpwu")
@click.option("--class", "classes", multiple=True, metavar="NAME[,NAME]",
              help="a class of the cluster file, `host` (the unrestricted machine) or NAME=CPUS (e.g. pi=0.25); repeat or "
                   "comma-separate [default: every class in the cluster file, and host]")
@click.option("--cluster", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="cluster file whose classes' cpus set the quotas [default: the built-in cluster, storage 0.5 CPU]")
@click.option("--stressors", metavar="A,B,C", help="stress-ng stressors [default: the curated subset in econ/rpwu.py]")
@click.option("--duration", type=click.IntRange(1, 600), default=2, show_default=True, help="seconds per stressor run")
@click.option("--repeats", type=click.IntRange(1, 100), default=3, show_default=True, help="runs per stressor and class")
@click.option("--instances", type=click.IntRange(0, 1024), default=1, show_default=True,
              help="stress-ng workers per run; 0 = one per online CPU, as the thesis ran")
@click.option("--reference", metavar="CLASS|FILE[:TARGET]",
              help="what RPWU divides by: a class of this run, or a saved --json output (e.g. from a Raspberry Pi) [default: host]")
@click.option("--plot", "plot_path", default="rpwu.png", show_default=True, help="box plot PNG; `none` for no plot")
@click.option("--json", "as_json", is_flag=True, help="print the whole result (rates, RPWUs, ranks, class averages) as JSON")
def rpwu(classes, cluster, stressors, duration, repeats, instances, reference, plot_path, as_json):
    """How fast each node class does stress-ng's micro-operations, relative to a reference
    (thesis section 4.2, "RPWU"). Each class runs inside a CPU quota of its cluster-file
    `cpus` (cgroup; refused if none can be enforced); all numbers are measured here.

    \b
      nearfaas econ rpwu                                    # every class + host, ~3 min
      nearfaas econ rpwu --class dscs --stressors cpu,udp --duration 1 --repeats 3
      nearfaas econ rpwu --class host --json > mine.json    # save a reference device's run
      nearfaas econ rpwu --reference pi.json                # normalise to a Raspberry Pi run
    """
    from nearfaas.econ import rpwu as lib

    try:
        binary = lib.find_stress_ng()
        valid = lib.available_stressors(binary)
    except lib.RpwuError as exc:
        fail(str(exc))
    if stressors:
        try:
            chosen = lib.check_stressors([s.strip() for s in stressors.split(",") if s.strip()], valid)
        except lib.RpwuError as exc:
            raise click.BadParameter(str(exc), param_hint="--stressors") from None
    else:
        chosen = [s for s in lib.DEFAULT_STRESSORS if s in valid]
    targets = lib.plan_targets(_wanted_classes(classes, _class_capacities(cluster)))
    ref_target, ref_file = _resolve_reference(reference, targets)
    total = len(targets) * len(chosen) * repeats
    if not as_json:
        err.print(f"{total} stress-ng runs of {duration} s: about {math.ceil(total * (duration + 0.2))} s")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=as_json) as progress:
        task = progress.add_task("stress-ng", total=total)
        step = lambda t, s, r: progress.update(task, advance=1, description=f"{s} on {t.name} (repeat {r + 1})")  # noqa: E731
        try:
            raw = lib.measure(binary, targets, chosen, duration, repeats, instances, progress=step)
        except lib.RpwuError as exc:
            fail(str(exc))
    if ref_file:
        ref = (f"{ref_file['name']} ({ref_file['file']})", ref_file["rates"])
    else:
        ref = (ref_target, raw["rates"][ref_target])
    result = lib.build_result(raw, targets, chosen, lib.stressor_classes(binary), ref, ref_file,
                              lib.machine_facts(binary), duration, repeats, instances)
    if plot_path.strip().lower() not in NO_PLOT:
        result["plot"] = str(_plot(result, Path(plot_path)))
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    _print(result)


def _print(result: dict) -> None:
    ref = result["reference"]
    for name, t in result["targets"].items():
        is_ref = name == ref["target"]  # 1 by construction: its spread is run-to-run noise, its order meaningless
        title = (f"{name}: the reference, RPWU 1 by construction (measured; min..max is run-to-run noise)" if is_ref else
                 f"{name}: stressors best to worst, RPWU vs {ref['target']} (measured; thesis Table 4.2)")
        table = Table(title=title, box=None)
        for col in ("Rank", "Stressor", "stress-ng classes", "RPWU mean", "min..max", "bogo-ops/s", "Among systems"):
            table.add_column(col, justify="left" if col in ("Stressor", "stress-ng classes") else "right")
        for s in [s for s in t["stressors"] if s in t["ranking"]] if is_ref else t["ranking"]:
            r = t["stressors"][s]
            table.add_row("" if is_ref else str(r["rank"]), s, " ".join(r["classes"]), f"{r['rpwu_mean']:.3f}",
                          f"{r['rpwu_min']:.3f}..{r['rpwu_max']:.3f}", f"{sum(r['bogo_ops_per_s']) / len(r['bogo_ops_per_s']):,.1f}",
                          r.get("rank_among_systems", ""))
        console.print(table)
        for s, r in t["stressors"].items():
            if s not in t["ranking"]:
                console.print(f"  {s}: no RPWU ({r.get('skipped') or r.get('why_no_rpwu')})")
        e = t["enforcement"]
        stat = e.get("cpu_stat") or {}
        throttled = f"; throttled in {stat['nr_throttled']} of {stat['nr_periods']} periods" if "nr_periods" in stat else ""
        console.print(f"  CPU capacity: {e['method']}{throttled}\n")
    classes = sorted({c for t in result["targets"].values() for c in t["class_averages"]})
    table = Table(title="Mean RPWU per stress-ng class (measured; thesis class results)", box=None)
    table.add_column("Class")
    for name in result["targets"]:
        table.add_column(name, justify="right")
    for c in classes:
        cells = [result["targets"][n]["class_averages"].get(c) for n in result["targets"]]
        table.add_row(c, *(f"{a['mean']:.3f} ({len(a['stressors'])})" if a else "" for a in cells))
    console.print(table)
    m = result["machine"]
    console.print(f"reference: {ref['target']} ({ref['source']}); {result['duration_s']} s x {result['repeats']} repeats, "
                  f"{result['instances'] or 'one per CPU'} instance(s), stress-ng {m['stress_ng']} on {m['cpu_model']} "
                  f"({m['cpus_online']} CPUs)")
    for w in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")
    if result.get("plot"):
        console.print(f"box plot: {result['plot']}")
