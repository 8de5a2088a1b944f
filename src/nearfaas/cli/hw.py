"""``nearfaas hw``: the DSA model from the command line (every number is modelled).

nearfaas hw simulate -c scale.cfg -t topology.csv [--gemm] [--mode scalesim|dsa] [--json]
nearfaas hw compile resnet50 --config dsa.yml [--batch 1] [--mode dsa|scalesim] [--json]
nearfaas hw dse [--budget-w 25] [--models all|a,b] [--out DIR] [--json] [--ray ADDRESS|auto]
nearfaas hw report [--json]
"""

from __future__ import annotations

import json

import click

from nearfaas.hw.dsa.config import DSAConfig, load_config
from nearfaas.hw.dsa.errors import HwError
from nearfaas.hw.dsa.scalesim_io import read_cfg, read_topology
from nearfaas.hw.dsa.timing import gemm_timing, scalesim_cycles

LABEL = "modelled"


@click.group("hw", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def hw() -> None:
    """Model the DSCS in-storage DSA (systolic MPU + SIMD VPU). All numbers are modelled."""


def simulate_layers(cfg_path: str, topo_path: str, gemm: bool | None, mode: str, base: DSAConfig | None = None) -> dict:
    sc = read_cfg(cfg_path)
    layers = read_topology(topo_path, gemm=gemm)
    dsa = sc.to_dsa(base) if mode == "dsa" else None
    rows = []
    for layer in layers:
        g = layer.gemm
        row = {"name": layer.name, "M": g.M, "N": g.N, "K": g.K, "macs": g.macs}
        if mode == "scalesim":
            row["compute_cycles"] = scalesim_cycles(g.M, g.N, g.K, sc.rows, sc.cols, sc.dataflow)
            # SCALE-Sim's 'Overall Util %' (exact when there are no stalls)
            row["util_pct"] = 100.0 * g.macs / (row["compute_cycles"] * sc.rows * sc.cols)
        else:
            t, tl = gemm_timing(g, dsa)
            row.update(
                compute_cycles=t.cycles, mpu_cycles=t.mpu_cycles, dram_in=t.dram_in, dram_out=t.dram_out, tiles=t.tiles, bound=t.bound
            )
        rows.append(row)
    return {
        "label": f"{LABEL} ({mode} mode)",
        "run_name": sc.run_name,
        "array": [sc.rows, sc.cols],
        "dataflow": sc.dataflow,
        "mode": mode,
        "layers": rows,
        "total_cycles": sum(r["compute_cycles"] for r in rows),
    }


@hw.command()
@click.option("-c", "--config", "cfg_path", required=True, type=click.Path(dir_okay=False), help="SCALE-Sim .cfg file")
@click.option("-t", "--topology", "topo_path", required=True, type=click.Path(dir_okay=False), help="SCALE-Sim topology CSV")
@click.option("--gemm", is_flag=True, default=None, help="rows are GEMM (name, M, N, K) [default: detected]")
@click.option(
    "--mode",
    type=click.Choice(["scalesim", "dsa"]),
    default="scalesim",
    show_default=True,
    help="scalesim: SCALE-Sim v3's compute cycles exactly; dsa: the DSA model (DRAM from --dram)",
)
@click.option("--dram", default="ddr5", show_default=True, help="dsa mode: ddr4, ddr5, hbm2 or GB/s")
@click.option("--json", "as_json", is_flag=True, help="print JSON {layers, total_cycles}")
def simulate(cfg_path, topo_path, gemm, mode, dram, as_json):
    """Per-layer and total compute cycles of a SCALE-Sim config + topology (modelled)."""
    try:
        base = DSAConfig(dram=_dram(dram), source="--dram").validated()
        out = simulate_layers(cfg_path, topo_path, gemm, mode, base)
    except HwError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{out['run_name']}: {out['array'][0]}x{out['array'][1]} {out['dataflow']} — {out['label']}")
    click.echo(f"{'layer':<28} {'M':>8} {'N':>6} {'K':>6} {'cycles':>12}")
    for r in out["layers"]:
        click.echo(f"{r['name']:<28} {r['M']:>8} {r['N']:>6} {r['K']:>6} {r['compute_cycles']:>12}")
    click.echo(f"{'total':<28} {'':>8} {'':>6} {'':>6} {out['total_cycles']:>12}")


def _dram(value: str):
    try:
        return float(value)
    except ValueError:
        return value.lower()


@hw.command("compile")
@click.argument("model")
@click.option("--config", "cfg_path", default=None, type=click.Path(dir_okay=False), help="dsa.yml [default: the paper's design point]")
@click.option("--batch", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--mode", type=click.Choice(["dsa", "scalesim"]), default="dsa", show_default=True)
@click.option("--all", "show_all", is_flag=True, help="also list metadata-only ops (Reshape, Constant, ...)")
@click.option("--json", "as_json", is_flag=True, help="print the whole program as JSON")
def compile_cmd(model, cfg_path, batch, mode, show_all, as_json):
    """Compile MODEL (a zoo key such as resnet50, or an .onnx path) into a per-layer DSA program."""
    try:
        cfg = load_config(cfg_path)
        from nearfaas.hw.dsa.compiler import compile_model  # imports ONNX: only when compiling

        prog = compile_model(model, cfg, batch=batch, mode=mode)
    except HwError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(prog.to_dict(), indent=2))
        return
    d = prog.to_dict()
    c = prog.config
    click.echo(
        f"{prog.model} batch {prog.batch} on DSA {c.rows}x{c.cols} {c.dataflow} @ {c.clock_ghz} GHz, {c.dram_gbps} GB/s DRAM — {d['label']}"
    )
    click.echo(
        f"{'layer':<24} {'unit':<4} {'GEMM MxNxK(xcount)':<24} {'folds':>6} {'tiles':>6} {'DRAM in':>10} "
        f"{'DRAM out':>9} {'MPU cyc':>10} {'VPU cyc':>9} {'cycles':>10} bound   fused"
    )
    for x in prog.layers:
        if x.unit == "none" and not show_all:
            continue
        gm = ",".join(f"{g['M']}x{g['N']}x{g['K']}" + (f"x{g['count']}" if g["count"] > 1 else "") for g in x.gemms)
        fused = "+".join(f.split(":")[0] for f in x.fused)
        click.echo(
            f"{x.name[:24]:<24} {x.unit:<4} {gm[:24]:<24} {x.folds:>6} {x.tiles:>6} {x.dram_in:>10} "
            f"{x.dram_out:>9} {x.mpu_cycles:>10} {x.vpu_cycles:>9} {x.cycles:>10} {x.bound:<7} {fused}"
        )
    t = d["totals"]
    click.echo(
        f"total: {t['cycles']} cycles = {t['latency_ms']:.3f} ms at {c.clock_ghz} GHz ({LABEL}); "
        f"{t['macs'] / 1e9:.3f} GMACs, MPU utilisation {t['mpu_utilisation']:.1%}, "
        f"DRAM {(t['dram_bytes_in'] + t['dram_bytes_out']) / 1e6:.1f} MB, "
        f"{t['memory_bound_layers']} memory-bound layers"
    )
    for n, op, unit in prog.unsupported:
        click.echo(f"unsupported: {op} ({n}) -> {unit}")


@hw.command("dse")
@click.option("--budget-w", default=25.0, show_default=True, type=float, help="accelerator power budget in W (DRAM not counted)")
@click.option("--models", "models_spec", default="all", show_default=True, help="all, or a comma-separated list of zoo keys")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False), help="write CSVs and Pareto PNGs here")
@click.option("--json", "as_json", is_flag=True, help="print the frontiers and the optimum as JSON")
@click.option(
    "--power",
    type=click.Choice(["peak", "average"]),
    default="peak",
    show_default=True,
    help="accelerator power for feasibility: peak (TDP-style) or the max batch-1 average over the models",
)
@click.option("--no-progress", is_flag=True, help="no progress bar (it goes to stderr)")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
              help="run the configs as Ray tasks on the cluster at host:port (e.g. 10.0.0.5:6379, started with "
              "`ray start --head`), or auto: the cluster running here, else a local Ray on this machine's cores (local: always a fresh local Ray). "
              "The results are the same as without --ray, byte for byte")
def dse_cmd(budget_w, models_spec, out_dir, as_json, power, no_progress, ray_address):
    """Design-space exploration: 690 DSA configs x the zoo models under a power budget (modelled).

    \b
    nearfaas hw dse --budget-w 25 --out dse          # here, one process
    nearfaas hw dse --ray auto --json                # the 690 configs fanned out over a (local) Ray
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from nearfaas.fanout import FanoutError, connect
    from nearfaas.hw import dse
    from nearfaas.hw.report import dse_summary

    try:
        dse.check_budget(budget_w)
        models = dse.parse_models(models_spec)
        if ray_address:
            connect(ray_address)  # an unreachable or malformed address fails now, before any work
        configs = dse.default_space()
        console = Console(stderr=True)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=no_progress,
            transient=True,
        ) as bar:
            load = bar.add_task("importing models", total=len(models))
            sks = dse.load_skeletons(models, progress=lambda _k: bar.advance(load))
            where = f" on Ray ({ray_address})" if ray_address else ""
            task = bar.add_task(f"sweeping configs{where}", total=len(configs))
            res = dse.sweep(configs, models, budget_w, skeletons=sks, advance=lambda n: bar.advance(task, n), power=power,
                            ray_address=ray_address)
        files = dse.write_outputs(res, out_dir) if out_dir else {}
    except (HwError, FanoutError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(_dse_json(res, files))
        return
    click.echo(dse_summary(res))
    for path in files.values():
        click.echo(f"wrote {path}")


def _dse_json(res, files: dict) -> str:
    """`hw dse --json`: the frontiers, the optimum and the files written."""
    from nearfaas.hw.dse import LABEL

    keep = (
        "config_id",
        "name",
        "rows",
        "cols",
        "sram_kib",
        "dram",
        "area_mm2",
        "power_w",
        "peak_accel_w",
        "max_accel_w",
        "max_dram_w",
        "geomean_inferences_per_s",
    )
    return json.dumps(
        {
            "label": LABEL,
            "configs": len(res.configs),
            "models": res.models,
            "points": len(res.points),
            "budget_w": res.budget_w,
            "power_metric": res.power,
            "optimum": res.optimum,
            "reason": res.reason,
            "optimum_per_budget": res.budgets,
            "power_frontier": [{k: r[k] for k in keep} for r in res.power_frontier],
            "area_frontier": [{k: r[k] for k in keep} for r in res.area_frontier],
            "files": files,
        },
        indent=2,
    )


@hw.command("report")
@click.option("--models", "models_spec", default="all", show_default=True, help="all, or a comma-separated list of zoo keys")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def report_cmd(models_spec, as_json):
    """Per-model numbers of the design point 128x128 / 4 MiB / DDR5 / 1 GHz / 14 nm (modelled)."""
    from nearfaas.hw import dse
    from nearfaas.hw.report import report_table

    try:
        rep = dse.report(dse.parse_models(models_spec))
    except HwError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(rep, indent=2) if as_json else report_table(rep))
