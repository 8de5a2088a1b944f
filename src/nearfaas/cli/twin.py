"""``nearfaas twin``: the datacenter twin from the command line (every result is modelled; the
measured inputs it is built on are named in each output).

nearfaas twin report [--baseline paper|measured-here] [--out DIR] [--json] [--quick] [--apps a,b] [--platforms p,q]
                     [--trace CSV [--durations CSV|auto|none] [--memory CSV|auto|none]] [--minutes N] [--size-rack fixed|auto]
                     [--ray ADDRESS|auto]
nearfaas twin e2e APP [--baseline paper|measured-here] [--platform dscs] [--batch 1] [--link s3-like] [--json]
nearfaas twin availability [--cluster FILE] [--r-m 0.1] [--json]
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nearfaas.cli.common import WIDTH, common_gateway, common_state, console, err, fail
from nearfaas.present import print_speedups


@click.group("twin", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def twin() -> None:
    """Project the eight DSCS apps onto the seven Table 2 platforms, one node and a whole rack.

    \b
    nearfaas twin report --quick           # the whole evaluation in ~45 s: PNGs, report.html, results.json
    nearfaas twin report --out twin-report # full size: a 200-node rack, 4,000 sensitivity samples, 200 uncertainty draws
    nearfaas twin e2e asset_damage --platform dscs   # one app's end-to-end breakdown, term by term

    All results are MODELLED from public specs, stated assumptions and a few inputs measured on
    this machine (gateway overhead, f3's time, runtime start, object sizes); docs/results.md
    lists every one with its source. By default they follow the paper's method (paper mode,
    docs/methodology.md); --baseline measured-here shows the earlier view built on this VM's
    measured CPU stage times instead.
    """


BASELINE = click.option(
    "--baseline", type=click.Choice(["paper", "measured-here"]), default="paper", show_default=True,
    help="paper: DSCS §6.1 / Table 2 method (Xeon 8275CL baseline, p95 of 10,000 sampled requests, Table 2 DSA); "
    "measured-here: CPU stages measured on this VM, mean latencies (not the paper's method)")


ENERGY = click.option(
    "--energy", type=click.Choice(["instrument", "active-only", "twin"]), default=None,
    help="energy reading [default: the mode's; paper: instrument]: instrument = each component's power over the whole request "
    "as RAPL/NVPModel/Vivado read it (idle floors while it waits); active-only = nothing charged while waiting (the earlier "
    "reading, kept to compare); twin = instrument + flash per bit")
STACK = click.option(
    "--stack", type=click.Choice(["openfaas-k8s", "measured-here", "gateway-minus-worker"]), default=None,
    help="system stack per stage [default: the mode's; paper: openfaas-k8s]: openfaas-k8s = the paper's OpenFaaS on Kubernetes "
    "(gateway, service routing, watchdog, template; sourced ranges, twin/stack.py); measured-here = this machine's warm call "
    "through our gateway; gateway-minus-worker = our gateway's own overhead")


def _mode_options(energy: str | None, stack: str | None) -> dict:
    """The single choices given on the command line (the mode's own where not given)."""
    return {k: v for k, v in (("energy", energy), ("stack", stack)) if v is not None}


def _csv(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@twin.command("report")
@click.option("--out", "out_dir", default="twin-report", show_default=True, type=click.Path(file_okay=False),
              help="folder for the PNGs, report.html and results.json")
@click.option("--json", "as_json", is_flag=True, help="print results.json's headline blocks on stdout")
@click.option("--quick", is_flag=True, help="a 20-node rack and 1,000 Monte Carlo samples (seconds, not minutes)")
@click.option("--apps", "apps_spec", default=None, help="comma-separated app keys [default: all eight]")
@click.option("--platforms", "platforms_spec", default=None, help="comma-separated platform keys [default: all seven]")
@click.option("--link", default="s3-like", show_default=True, help="link profile between compute nodes and storage")
@click.option("--nodes", type=int, default=None,
              help="compute platforms in the simulated rack (paper: of each kind; measured-here: split in half) [default: 200, --quick 20]")
@click.option("--rate", type=float, default=None, help="base arrival rate, requests/s [default: 0.75 per node]")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="replay an Azure Functions 2019 invocations CSV instead of the bursty Poisson trace: the dataset's layout "
              "(HashOwner,HashApp,HashFunction,Trigger,1..1440) or a replay toolkit's (e.g. HashFunction,HashApp,HashOwner,1..1440); "
              "columns are found by name")
@click.option("--durations", default="auto", show_default=True, metavar="CSV|auto|none",
              help="the trace's durations file (function_durations_percentiles.anon.dNN.csv, ms): each call's service time is "
              "drawn from its function's percentiles. auto: the same day's file beside --trace when there is one "
              "(function_durations_percentiles.anon.dNN.csv beside invocations_per_function_md.anon.dNN.csv, or durations.csv "
              "beside invocations.csv); none: the twin's model stage times")
@click.option("--memory", default="auto", show_default=True, metavar="CSV|auto|none",
              help="the trace's memory file (app_memory_percentiles.anon.dNN.csv, MB): each call's footprint, drawn from its app's "
              "percentiles, occupies its simulated node's memory (Table 2: 4 GB per DSCS node, 32 GB per CPU server). auto: "
              "app_memory_percentiles.anon.dNN.csv (or memory.csv) beside --trace when there is one; none: no footprints")
@click.option("--minutes", type=click.IntRange(min=1), default=None,
              help="replay only the first N minutes of the trace (of the Poisson trace without --trace)")
@click.option("--size-rack", "size_rack", type=click.Choice(["fixed", "auto"]), default="fixed", show_default=True,
              help="fixed: the rack of --nodes; auto: the smallest rack whose every resource carries the mean offered load at "
              "<= 70% utilisation (30% headroom) and the busiest minute's at <= 100%, under every policy")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--no-progress", is_flag=True, help="no progress display (it goes to stderr)")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
              help="run the independent points (the uncertainty study's evaluations, the sensitivity studies' points, the "
              "rack simulation's policies) as Ray tasks on the cluster at host:port (e.g. 10.0.0.5:6379, started with "
              "`ray start --head`), or auto: the cluster running here, else a local Ray on this machine's cores (local: always a fresh local Ray). "
              "results.json is the same as without --ray (its measured wall_s/seconds and generated time aside)")
@BASELINE
@ENERGY
@STACK
def report_cmd(out_dir, as_json, quick, apps_spec, platforms_spec, link, nodes, rate, trace, durations, memory, minutes, size_rack, seed,
               no_progress, ray_address, baseline, energy, stack):
    """Regenerate the whole evaluation: speedup, runtime breakdown, energy, cost efficiency,
    queue and latency over time, and the four sensitivity studies (modelled).

    The rack simulation warns (stderr, and "warnings" in the JSON) when the workload's offered
    load exceeds the rack; --size-rack auto sizes the rack to it instead.

    \b
    nearfaas twin report --quick --ray auto          # the Monte Carlo and studies on a (local) Ray
    nearfaas twin report --ray 10.0.0.5:6379         # on a cluster started with `ray start --head`
    """
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from nearfaas.fanout import FanoutError, connect
    from nearfaas.twin import render, report

    if size_rack == "auto" and nodes is not None:
        raise click.UsageError("--size-rack auto picks the number of nodes itself: drop --nodes (or use --size-rack fixed)")
    if trace is None and (durations not in ("auto", "none") or memory not in ("auto", "none")):
        raise click.UsageError("--durations and --memory files go with an Azure trace: pass --trace INVOCATIONS.csv too")
    try:
        if ray_address:
            connect(ray_address)  # an unreachable or malformed address fails now, before any work
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), TextColumn("{task.fields[count]}"),
                      TimeElapsedColumn(), console=Console(stderr=True, width=WIDTH), disable=no_progress, transient=True) as bar:
            task = bar.add_task("twin report", total=None, count="")
            # Piped or logged (stderr not a terminal), rich draws nothing: say each step as a line
            # instead, so a long replay is not silent until it ends.
            plain = not no_progress and not bar.console.is_terminal

            def say(message: str) -> None:
                if plain:
                    bar.console.print(f"twin report: {message}", highlight=False, markup=False, soft_wrap=True)

            def step(message: str) -> None:
                bar.update(task, description=message)
                say(message)

            def counted(description: str, total: int):
                """A counted step's bar: advances as its points finish (here or on Ray), then hides."""
                t, done = bar.add_task(description, total=total, count=f"0/{total}"), [0]
                say(f"{description}: {total} points")

                def advance(n: int) -> None:
                    done[0] += n
                    bar.update(t, advance=n, count=f"{done[0]}/{total}", visible=done[0] < total)
                    if done[0] >= total:
                        say(f"{description}: done")
                return advance

            results = report.build(quick=quick, apps=_csv(apps_spec), platforms=_csv(platforms_spec), link=link, nodes=nodes,
                                   trace=trace, rate=rate, seed=seed, progress=step, baseline=baseline,
                                   durations=durations if trace else None, memory=memory if trace else None, minutes=minutes,
                                   size_rack=size_rack, ray_address=ray_address, counted=counted, options=_mode_options(energy, stack))
            step("writing figures and report.html")
            paths = render.write(results, out_dir)
    except (ValueError, KeyError, OSError, FanoutError) as exc:  # WorkloadError and unknown keys are ValueErrors naming the input
        raise click.ClickException(str(exc).strip("'\"")) from None
    sim = results["simulation"]
    for note in sim["notes"]:
        err.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    for warning in sim["warnings"]:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    if as_json:
        keep = ("mode", "label", "headline", "speedup_vs_cpu", "energy_reduction_vs_cpu", "cost_efficiency_vs_cpu",
                "cost_efficiency_vs_cpu_per_app")
        click.echo(json.dumps({**{k: results[k] for k in keep}, "simulation": _sim_json(sim), "warnings": sim["warnings"],
                               "files": {k: str(v) for k, v in paths.items()}}, indent=1))
        return
    print_speedups(results, console)
    for policy, r in sim["summary"].items():
        lat = r["latency_ms"]
        console.print(f"rack ({sim['inputs']['nodes']} platforms, {results['mode']} mode) {policy}: {r['requests']:,} requests, p50/p95/p99 "
                      f"{lat['p50']:.1f}/{lat['p95']:.1f}/{lat['p99']:.1f} ms, rejected {r['rejected']:,} ({r['rejected_share']:.1%}) "
                      f"(modelled; simulated in {sim['runs'][policy]['wall_s']:.1f} s)")
    console.print(f"report: {paths['html'].resolve()}  (results.json and {len(paths) - 2} PNGs beside it; built in {results['wall_s']:.1f} s)")


def _sim_json(sim: dict) -> dict:
    """The simulation block of ``twin report --json``: per policy p50/p95/p99 and rejections
    (modelled), the offered load against the rack, warnings and notes, and the rack and trace."""
    inputs = sim["inputs"]
    rack = {k: inputs[k] for k in ("nodes", "requested_nodes", "size_rack", "dscs_storage_nodes", "compute_nodes", "compute_slots",
                                   "node_memory_mb")}
    return {"label": sim["label"], "mode": sim["mode"], "policies": sim["summary"], "warnings": sim["warnings"], "notes": sim["notes"],
            "load": sim["load"], "rack": rack, "trace": inputs["trace"]}


@twin.command("e2e")
@click.argument("app")
@click.option("--platform", default="dscs", show_default=True, help="cpu, gpu, fpga, ns_arm, ns_mobile_gpu, ns_fpga or dscs")
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--link", default="s3-like", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the whole breakdown as JSON")
@BASELINE
@ENERGY
@STACK
def e2e_cmd(app, platform, batch, link, as_json, baseline, energy, stack):
    """One request of APP on one platform, stage by stage and term by term (modelled; paper
    mode: the p95 request of 10,000, its sampled terms marked)."""
    from nearfaas.twin.e2e import end_to_end

    try:
        bd = end_to_end(app, platform, batch, link, baseline=baseline, **_mode_options(energy, stack))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(bd.to_dict(), indent=1))
        return
    stat = bd.inputs["latency"]["statistic"]
    t = Table(title=f"{app} on {platform}, batch {batch}, link {link}: {bd.total_s * 1e3:.2f} ms end to end ({stat}; {baseline} mode)",
              title_justify="left")
    for c in ("stage", "term", "ms", "label", "source"):
        t.add_column(c, justify="right" if c == "ms" else "left", overflow="fold")
    for s in bd.stages:
        for term in s.terms:
            t.add_row(s.name, term.name, f"{term.value_s * 1e3:.3f}", term.label, escape(term.source))  # "[assumption]" is text
    console.print(t)
    err.print("labels: measured = on this machine; modelled = from the specs and assumptions in docs/results.md")


@twin.command("validate")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (per-app errors, geomean, band, gpu)")
@click.option("--threads", default="1,2", show_default=True, help="ONNX Runtime thread counts to validate at")
@click.option("--form", type=click.Choice(["catalog", "refined", "runtime", "runtime2"]), default="catalog", show_default=True,
              help="catalog: the roofline form the Xeon baseline uses; refined: per-shape GEMM efficiency; "
                   "runtime: refined + ONNX Runtime's per-node dispatch and NCHWc reorders; runtime2: runtime + kernel "
                   "micro-benchmarks (GEMV, small-M GEMM, small attention ops, convs inside NCHWc chains, per-call cost)")
@click.option("--refresh", is_flag=True, help="re-measure everything here (micro-benchmarks, N-thread f2; ~5 min)")
@click.option("--no-measure", is_flag=True, help="fail instead of measuring what benchmarks/results/cpu_validation.json lacks")
@click.option("--paired-rounds", type=click.IntRange(0, 20), default=0, show_default=True,
              help="measure the paired check now in N rounds (~3 min each; 5 is the protocol): the runtime2 kernels, the apps "
                   "and every paired set of networks side by side per round (nearfaas.twin.heldout_paired; the goal is judged "
                   "on the apps and the newest set); 0 uses the cached rounds, if any")
def validate_cmd(as_json, threads, form, refresh, no_measure, paired_rounds):
    """Check the CPU roofline against real f2 times measured on THIS machine (measured vs
    modelled): per-app error, the geometric mean of |error|, and the residual band the report
    propagates into the Xeon baseline. Targets: |error| <= 20 % per app, <= 10 % geomean at 1
    thread; at 1 thread the apps' f2 is the hot loop, the one-off figure beside it. Two held-out sets
    of networks built in code are checked too: the first, "seen" set (nearfaas.twin.heldout:
    held_out_geomean_abs_error, held_out_worst_abs_error, held_out_per_model_error) and the fresh
    set the goal is judged on (nearfaas.twin.heldout_fresh: held_out_fresh_*; goal_held_out.judged_on).
    The GPU roofline is validated only where a GPU is present."""
    from nearfaas.twin import validate as v

    try:
        counts = tuple(int(x) for x in threads.split(",") if x.strip())
    except ValueError:
        raise click.ClickException(f"--threads must be comma-separated integers, e.g. 1,2; got {threads!r}") from None
    try:
        result = v.validate(counts, form=form, refresh=refresh, measure=not no_measure, progress=lambda m: err.print(m),
                            paired_rounds=paired_rounds)
    except (ValueError, OSError, KeyError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        cpu = {k: val for k, val in result["cpu"].items() if k != "threads"}
        cpu["threads"] = {t: {k: val for k, val in s.items() if k != "apps"} for t, s in result["cpu"]["threads"].items()}
        cpu.pop("held_out_models", None)  # per-model detail; the errors stay in held_out_per_model_error and held_out.N
        cpu.pop("held_out_fresh_models", None)  # likewise: held_out_fresh_per_model_error and held_out_fresh_by_thread stay
        click.echo(json.dumps({"cpu": cpu, "gpu": result["gpu"]}, indent=1))
        return
    click.echo(v.table(result))


def _positive_ints(ctx, param, value: str) -> tuple[int, ...]:
    """'64,128' -> (64, 128); a negative, zero or non-integer entry is a click usage error naming it."""
    out = []
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            n = int(item)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not an integer (give comma-separated positive integers, e.g. 64,128)") from None
        if n <= 0:
            raise click.BadParameter(f"{n} must be a positive integer")
        out.append(n)
    if not out:
        raise click.BadParameter("give at least one positive integer")
    return tuple(out)


@twin.command("stream")
@click.option("--sizes", default="64,128,256,1024,2048,4096", show_default=True, callback=_positive_ints,
              help="request sizes in bytes, comma-separated")
@click.option("--concurrency", default="1,2,4,8,16,32,64", show_default=True, callback=_positive_ints,
              help="numbers of concurrent requests N, comma-separated (per-request time = batch latency / N)")
@click.option("--concurrency-size", type=click.IntRange(min=1), default=None,
              help="request size in bytes for the concurrency rows [default: the size the measured file names, else 64]")
@click.option("--results", "results_path", type=click.Path(dir_okay=False), default=None,
              help="measured software rows [default: benchmarks/results/stream_topk.json]")
@click.option("--no-ranges", is_flag=True, help="nominal only (min = max = nominal), no sweep over the assumptions")
@click.option("--json", "as_json", is_flag=True, help="print modelled_fpga, measured and constants as JSON")
def stream_cmd(sizes, concurrency, concurrency_size, results_path, no_ranges, as_json):
    """Streaming Top-K on a network-attached FPGA (Alveo U280 class, HLS TCP/IP at 100 Gb/s, P
    parallel pipelines): MODELLED latency per request size and per-request time per concurrency N,
    beside the MEASURED software rows of benchmarks/stream_topk.py. docs/stream-twin.md has the
    formula and every constant's source; each modelled value shows nominal [min-max over the sweeps]."""
    from nearfaas.twin import stream as st

    csize = concurrency_size or st.measured_concurrency_size(results_path) or 64
    m = st.model(sizes, concurrency, concurrency_size=csize, ranges=not no_ranges)
    meas = st.measured(sizes, concurrency, results_path)
    if as_json:
        click.echo(json.dumps(st.to_json(m, meas), indent=1))
        return

    def num(x: float) -> str:
        return f"{x:.3g}" if x < 1000 else f"{x:.0f}"

    def band_rows(t: Table, name: str, bands, keys, scale: float = 1.0) -> None:
        us = {k: bands[k].to_dict(1e6 * scale) for k in keys}
        t.add_row(name, "modelled", "nominal", *(num(us[k]["nominal"]) for k in keys))
        if not no_ranges:
            t.add_row("", "modelled", "min-max", *(f"{num(us[k]['min'])}-{num(us[k]['max'])}" for k in keys))

    def measured_rows(t: Table, key: str, keys) -> None:
        rows = {name: st.NOT_MEASURED for name in st.SYSTEMS} if isinstance(meas, str) else meas
        stat = "p50" if key == "p50_us" else "batch/N"
        for name, row in rows.items():
            cells = row if isinstance(row, str) else row[key]
            if isinstance(cells, str):
                t.add_row(name, "measured", stat, *(["not measured yet"] + ["-"] * (len(keys) - 1)))
            else:
                t.add_row(name, "measured", stat, *(num(cells[str(k)]) if cells[str(k)] is not None else "-" for k in keys))

    def missing() -> bool:
        return isinstance(meas, str) or any(isinstance(r, str) or any(isinstance(c, str) for c in r.values()) for r in meas.values())

    for title, key, keys, rows in (
        ("latency of one request per request size, us", "p50_us", sizes,
         [("fpga twin, warm", m["p50"], 1.0), ("fpga twin, cold (ms): + PR", m["cold"], 1e-3)]),
        (f"per-request time vs concurrency N = batch latency / N, us ({csize} B requests)", "per_request_us", concurrency,
         [("fpga twin, warm", m["per_request"], 1.0)]),
    ):
        t = Table(title=title, title_justify="left", caption=escape(st.NOT_MEASURED) if missing() else None, caption_justify="left")
        for c in ("system", "label", "stat"):
            t.add_column(c, overflow="fold")
        for k in keys:
            t.add_column(f"{k} B" if key == "p50_us" else f"N={k}", justify="right", overflow="fold")
        for name, bands, scale in rows:
            band_rows(t, name, bands, keys, scale)
        measured_rows(t, key, keys)
        console.print(t)
    err.print(escape("modelled = the stream twin (src/nearfaas/twin/stream.py, docs/stream-twin.md): nominal, and min-max "
                     "over every corner of the swept constants; measured = benchmarks/results/stream_topk.json (this machine)"))


@twin.command("tiers")
@click.argument("function")
@click.option("--delta-ns", type=click.FloatRange(0, 10_000), default=70.0, show_default=True,
              help="the slow tier's extra latency over DRAM (the paper sweeps 70, 150, 250 ns)")
@click.option("--dram-share", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="DRAM cap as a share of the function's footprint")
@click.option("--boundness", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="share of the function's time stalled on memory (benchmarks/porter.py measures it per workload)")
@click.option("--fast-ns", type=click.FloatRange(1, 10_000), default=200.0, show_default=True,
              help="DRAM latency of an LLC-missing access (benchmarks/porter.py calibrates it: ~200 ns here)")
@click.option("--json", "as_json", is_flag=True, help="print per policy {slowdown, slow_tier_bytes_share} as JSON")
@common_state
@common_gateway
def tiers_cmd(function, delta_ns, dram_share, boundness, fast_ns, as_json, state, gateway):
    """Project a deployed, profiled FUNCTION onto a slower memory tier (CXL): every tier policy
    (all-DRAM, all-CXL, first-touch, interleave, TPP-like, Porter hints with and without migration,
    oracle) replayed over its recorded runs' access samples (modelled).
    Profile it first: x-nearfaas: {memory: {profile: true}}."""
    from nearfaas.cli.common import fail, gateway_url, http

    query = f"delta_ns={delta_ns}&dram_share={dram_share}&boundness={boundness}&fast_ns={fast_ns}"
    resp = http(state, "GET", f"{gateway_url(state, gateway)}/system/memory/{function}/tiers?{query}")
    if resp.status_code != 200:
        fail(f"tiers of {function!r} refused ({resp.status_code}): {resp.text.strip()}")
    doc = resp.json()
    if as_json:
        click.echo(json.dumps(doc["policies"], indent=2))
        return
    t = Table(title=f"{function}: {doc['runs']} profiled runs, delta {delta_ns:g} ns, DRAM <= {dram_share:.0%} (modelled)")
    for col in ("policy", "slowdown vs all-DRAM", "bytes on the slow tier"):
        t.add_column(col)
    for p, v in doc["policies"].items():
        t.add_row(p, "-" if v["slowdown"] is None else f"{v['slowdown'] * 100:.2f}%",
                  "-" if v["slow_tier_bytes_share"] is None else f"{v['slow_tier_bytes_share'] * 100:.0f}%")
    console.print(t)


@twin.command("availability")
@click.option("--cluster", "cluster_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="a cluster file (default: the built-in cluster, spec/default_cluster.yml)")
@click.option("--r-m", "r_m", type=float, default=0.1, show_default=True,
              help="expected storage-node failures within one repair window (an input)")
@click.option("--objects", type=click.IntRange(1, 10_000_000), default=10_000, show_default=True,
              help="keys placed by the store's own rule to find the node sets data shares")
@click.option("--trials", type=click.IntRange(1000, 50_000_000), default=100_000, show_default=True,
              help="Monte-Carlo draws checking the exact answer")
@click.option("--scatter-width", type=click.IntRange(1, None), default=None,
              help="copyset scatter width to compare with (default: the cluster's, else 2 * (factor - 1))")
@click.option("--plot", "plot_path", default="availability.png", show_default=True,
              help="PNG of P(loss | k nodes fail) per scheme ('none' for no plot)")
@click.option("--json", "as_json", is_flag=True, help="print {scheme: {p_loss, loss_given_k_failures, ...}} as JSON")
def availability_cmd(cluster_file, r_m, objects, trials, scatter_width, plot_path, as_json):
    """How often your cluster's object store would lose data, under its replication scheme and
    the other one (thesis section 3.2, applied to nearfaas's own placement; modelled).

    Every storage node is one failure domain; failures are Poisson with R_m expected in a repair
    window. The node sets that data shares come from the store's own placement rule over
    --objects keys, so the dscs-replica rule is in the answer too.
    """
    from rich.progress import Progress

    from nearfaas.econ.availability import cluster_availability
    from nearfaas.placement.copysets import check_scatter_width
    from nearfaas.placement.replicas import Scheme, StorageNode
    from nearfaas.spec.cluster import load_cluster
    from nearfaas.spec.errors import SpecError

    if not r_m > 0:
        raise click.BadParameter("must be above 0, e.g. 0.1", param_hint="--r-m")
    try:
        spec = load_cluster(cluster_file)
    except SpecError as exc:
        fail(str(exc))
    ring = [StorageNode(n.name, n.cls) for n in spec.nodes if n.kind == "storage"]
    r = spec.replication
    w = scatter_width or r.effective_scatter_width
    if r.factor >= 2 and r.factor < len(ring):
        try:
            check_scatter_width(w, r.factor, len(ring))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--scatter-width") from None
    schemes = {"rendezvous": Scheme(), "copyset": Scheme("copyset", w)}
    out = {"cluster": cluster_file or "built-in", "storage_nodes": len(ring), "factor": r.factor, "r_m": r_m,
           "configured_scheme": r.scheme, "schemes": {}}
    with Progress(console=console, disable=as_json, transient=True) as bar:
        for name, scheme in schemes.items():
            task = bar.add_task(f"{name}: failure combinations", total=len(ring))
            out["schemes"][name] = cluster_availability(ring, r.factor, r.dscs_replica, scheme, r_m=r_m, objects=objects,
                                                        trials=trials, progress=lambda k, t=task: bar.update(t, completed=k))
    rv, cs = out["schemes"]["rendezvous"]["p_loss"], out["schemes"]["copyset"]["p_loss"]
    out["rendezvous_over_copyset"] = rv / cs if cs > 0 else None
    if plot_path != "none":
        from nearfaas.econ.availability_plots import cluster_figure

        out["plot"] = str(cluster_figure(out, Path(plot_path)))
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    t = Table(title=f"Data loss on {out['cluster']} ({len(ring)} storage nodes, {r.factor} copies, R_m={r_m:g}; modelled)", box=None)
    for col in ("Scheme", "Node sets", "P(loss | factor nodes fail)", "P(loss) exact", "Monte-Carlo (95% CI)"):
        t.add_column(col, justify="left" if col == "Scheme" else "right")
    for name, s in out["schemes"].items():
        mc = s["monte_carlo"]
        mark = " (configured)" if name == r.scheme else ""
        t.add_row(name + mark, str(s["replica_sets"]), f"{next(iter(s['loss_given_k_failures'].values())):.3f}",
                  f"{s['p_loss']:.3e}", f"{mc['p']:.2e} ({mc['ci95'][0]:.1e}..{mc['ci95'][1]:.1e})")
    console.print(t)
    if out["rendezvous_over_copyset"]:
        console.print(f"rendezvous loses data {out['rendezvous_over_copyset']:.1f}x as often as copyset (modelled)")
    if r.factor >= len(ring):
        console.print("with as many copies as storage nodes every object is on every node: the schemes cannot differ")
    if out.get("plot"):
        console.print(f"plot: {out['plot']}")
