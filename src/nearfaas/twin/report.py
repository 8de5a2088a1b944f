"""``nearfaas twin report``: the whole evaluation set in one ``results.json`` (and, through
``twin.render``, PNGs and one self-contained HTML page).

``build(quick=False, baseline="paper", progress=None, **choices) -> dict``: the single-node
comparison (``e2e.evaluate``: speedup, runtime breakdown, energy, cost efficiency), the same
headline in the other mode as a labelled alternative, the four sensitivity studies, and the
rack-scale simulation of the same apps under a bursty 20-minute trace (or a replayed Azure
trace, with its durations and memory files: twin/sim/azure.py) with the live placement policies,
the offered load against the rack and a warning where it exceeds it (twin/rackload.py).
``results["mode"]`` names the mode ("paper" or "measured-here", ``twin.platforms.MODES``);
every block carries a ``label``.

``headline(evaluate_fn, **kwargs)``: the per-platform, per-app headline (speedup, energy
reduction, cost efficiency) from any ``e2e.evaluate``-like callable: the hook a Monte Carlo over
perturbed constants re-runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import platform as host
import time
from collections.abc import Callable

from nearfaas.apps.catalog import APPS
from nearfaas.fanout import run_points
from nearfaas.link.profiles import get_profile

from . import e2e, rackload, sensitivity
from . import platforms as P
from .sim import AzureTrace, SimConfig, Simulator, dscs_apps, load_azure_trace, poisson
from .sim.azure import companion

SIM_POLICIES = ("near-data", "compute-only")
SIM_DURATION_S = 1200.0  # 20 minutes, as the trace
SERVICE_SIGMA = 0.25  # assumption: lognormal spread of a stage's service time around the model's value
LOAD_PER_NODE = 0.75  # requests/s per node at the base rate (200 nodes -> 150 requests/s)
BURSTS = ((300.0, 2.0), (360.0, 1.0), (720.0, 3.0), (780.0, 1.0))  # (start_s, x base rate): two bursts
SIM_SLOTS = 4  # CPU slots per simulated compute node
SIZE_RACK = ("fixed", "auto")  # --size-rack: the rack as given (--nodes), or sized to the workload (rackload.SIZING_RULE)


def burst_schedule(base_rate: float) -> list[tuple[float, float]]:
    """The bursty trace: base rate, 2x for a minute at 5 min, 3x for a minute at 12 min."""
    if not base_rate > 0:
        raise ValueError(f"rate={base_rate!r}: the base arrival rate must be a positive number of requests/s")
    return [(0.0, base_rate)] + [(t, k * base_rate) for t, k in BURSTS]


def load_trace(trace, durations=None, memory=None, minutes: int | None = None) -> AzureTrace:
    """An Azure trace read and checked (a malformed file is reported with its line and column),
    with its durations and memory files: each a path, "auto" (the same-day sibling of the
    invocations file, when present) or None/"none"; what was chosen is in ``info["notes"]``."""
    if isinstance(trace, AzureTrace):
        return trace
    dpath, dnote = companion(trace, durations, "durations")
    mpath, mnote = companion(trace, memory, "memory")
    tr = load_azure_trace(trace, dpath, mpath, minutes)
    tr.info["notes"] = [n for n in (dnote, mnote) if n]
    return tr


def check_rack(nodes, rate, duration_s: float = SIM_DURATION_S, trace=None, seed: int = 1, durations=None, memory=None,
               minutes: int | None = None, size_rack: str = "fixed"):
    """Validate the simulation's inputs up front (before minutes of other work): returns the base
    rate, the Poisson schedule (None when replaying ``trace``), the simulated duration (the
    first ``minutes`` of it) and the loaded ``AzureTrace`` (None without ``trace``)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise ValueError(f"nodes={nodes!r}: the rack needs a whole number of at least 2 nodes (half storage, half compute)")
    if not duration_s > 0:
        raise ValueError(f"duration={duration_s!r}: give a positive number of seconds")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1):
        raise ValueError(f"minutes={minutes!r}: give a whole number of minutes >= 1")
    if size_rack not in SIZE_RACK:
        raise ValueError(f"size_rack={size_rack!r}: use one of {', '.join(SIZE_RACK)}")
    rate = LOAD_PER_NODE * nodes if rate is None else rate
    if trace is None:
        for name, value in (("durations", durations), ("memory", memory)):
            if value is not None and value not in ("auto", "none"):
                raise ValueError(f"--{name} {value}: a {name} file goes with an Azure trace; pass --trace INVOCATIONS.csv too")
        if minutes is not None:
            duration_s = min(duration_s, 60.0 * minutes)
        return rate, burst_schedule(rate), duration_s, None
    return rate, None, duration_s, load_trace(trace, durations, memory, minutes)


def node_memory_mb() -> tuple[float, float]:
    """Memory per (dscs storage, compute) node for calls' footprints: Table 2's (DSCS 4 GB, CPU
    server 32 GB), in MB of 10^6 bytes."""
    return float(P.MEMORY_BYTES["dscs"].value) / 1e6, float(P.MEMORY_BYTES["cpu"].value) / 1e6


def sim_services(link: str = "s3-like", **opts) -> tuple[dict, dict]:
    """Service-time specs per (function, target) from the end-to-end model: a stage on a dscs
    node (target ``dscs``) takes the DSCS platform's stage time; on a CPU (target ``cpu``) the
    CPU baseline's (compute + remote reads). Lognormal with sigma SERVICE_SIGMA around each
    stage's mean (``latency="mean"``: the simulator draws its own spread)."""
    services, means = {}, {}
    mean = {**opts, "latency": "mean"}
    for app in APPS:
        slug = app.replace("_", "-")
        cpu = e2e.end_to_end(app, "cpu", 1, link, **mean)
        dscs = e2e.end_to_end(app, "dscs", 1, link, **mean)
        for i, fn in enumerate((f"{slug}-pre", f"{slug}-infer", f"{slug}-notify")):
            for target, bd in (("cpu", cpu), ("dscs", dscs)):
                if i == 2 and target == "dscs":  # f3 always runs on a compute node's CPU
                    continue
                s = bd.stages[i].total_s
                services[(fn, target)] = ("lognormal", s, SERVICE_SIGMA)
                means[f"{fn};{target}"] = s
    return services, means


RACK_NOTES = {
    P.PAPER: "paper mode: `nodes` compute platforms of each kind (DSCS §6.1: 200); near-data = that many DSCS-Drives, each with "
    "its compute server (f3 runs on a CPU); compute-only = the same compute servers",
    P.MEASURED_HERE: "measured-here mode: `nodes` split into half DSCS storage nodes and half compute nodes, for both policies",
}


def rack(nodes: int, baseline: str = P.PAPER) -> tuple[int, int]:
    """(dscs storage nodes, compute nodes) of the rack. Paper mode: ``nodes`` compute platforms
    of each kind (DSCS §6.1: at most 200 DSCS-Serverless or Baseline (CPU) platforms): a DSCS
    platform is a DSCS-Drive with its compute server (f3 runs on a CPU), so near-data has
    ``nodes`` drives and ``nodes`` servers, compute-only the same ``nodes`` servers.
    Measured-here: ``nodes`` split in half, as before."""
    if P.check_baseline(baseline) == P.PAPER:
        return nodes, nodes
    return nodes // 2, nodes - nodes // 2


def simulate(
    nodes: int = 200,
    policies=SIM_POLICIES,
    trace=None,
    rate: float | None = None,
    duration_s: float = SIM_DURATION_S,
    seed: int = 1,
    link: str = "s3-like",
    progress: Callable[[str], None] | None = None,
    baseline: str = P.PAPER,
    durations=None,
    memory=None,
    minutes: int | None = None,
    size_rack: str = "fixed",
    ray_address: str | None = None,
    advance: Callable[[int], None] | None = None,
    **opts,
) -> dict:
    """The rack under one trace, once per placement policy: dscs storage nodes and compute
    nodes (4 slots) as ``rack`` composes them. ``trace``: an Azure invocations file (or a loaded
    ``AzureTrace``) with optional ``durations`` and ``memory`` files (``load_trace``), replayed for
    its first ``minutes``; without it the bursty Poisson trace. ``size_rack="auto"``: the rack
    sized to the workload's offered load (rackload.SIZING_RULE) instead of ``nodes``. Returns the
    simulation block of results.json, with per-policy ``summary``, the offered ``load`` and
    ``warnings`` where the rack is undersized. ``ray_address``: the policies run as
    Ray tasks (``nearfaas.fanout``), with the same runs; ``advance(n)``: n policies done."""
    rate, schedule, duration_s, tr = check_rack(nodes, rate, duration_s, trace, seed, durations, memory, minutes, size_rack)
    services, means = sim_services(link, baseline=baseline, **opts)
    runtime = sensitivity.runtime_start()
    weights_s = sorted(sensitivity.cold_terms(a, "dscs", "f2", link, runtime)[1].value_s for a in APPS)
    apps = dscs_apps()
    mem_caps = node_memory_mb() if tr is not None and tr.memory_path else (None, None)
    classes = rackload.trace_classes(tr) if tr is not None else rackload.poisson_classes(schedule, duration_s, list(apps))
    demand = rackload.demand(classes, apps, {tuple(k.split(";")): v for k, v in means.items()}, policies)

    def rack_for(n: int) -> rackload.Rack:
        return rackload.Rack(*rack(n, baseline), SIM_SLOTS, *mem_caps)

    suggest = rackload.size(demand, rack_for)
    requested = nodes
    if size_rack == "auto":
        nodes = suggest
    storage, compute = rack(nodes, baseline)
    load = rackload.against(demand, rack_for(nodes))
    where = f"{nodes} nodes: {storage} dscs storage + {compute} compute, {baseline} mode"
    warnings = rackload.warnings(load, rack_for(nodes), None if size_rack == "auto" else suggest, where)
    notes = list(tr.info.get("notes", [])) if tr is not None else []
    if size_rack == "auto":
        notes.append(f"--size-rack auto: {nodes} nodes ({where}) for the offered load, instead of {requested}: {rackload.SIZING_RULE}")
    runs, summary = {}, {}
    base = {"storage_nodes": storage, "compute_nodes": compute, "compute_slots": SIM_SLOTS, "apps": apps, "services": services,
            "keep_alive_s": 600.0, "image_pull_s": 0.0, "model_load_s": runtime[0] + weights_s[len(weights_s) // 2], "link": link,
            "bin_s": 10.0, "seed": seed, "queue_in_view": True, "storage_memory_mb": mem_caps[0], "compute_memory_mb": mem_caps[1]}
    shared = {"config": base, "schedule": schedule, "duration_s": duration_s, "trace": tr, "seed": seed}
    if ray_address:  # every policy's run at once, as Ray tasks (each seeded alike: the same runs as here)
        if progress:
            progress(f"{', '.join(policies)} on Ray")
        done = run_points(policy_run, list(policies), shared=shared, ray_address=ray_address, progress=advance,
                          description="rack-scale simulation")
    else:
        done = []
        for policy in policies:
            if progress:
                progress(policy)
            done.append(policy_run(shared, policy))
            if advance:
                advance(1)
    for policy, (run, head) in zip(policies, done, strict=True):
        runs[policy], summary[policy] = run, head
    return {
        "mode": baseline,
        "label": "modelled (discrete-event simulation; placements by the live nearfaas.placement policy objects; wall_s measured)",
        "summary": summary,
        "warnings": warnings,
        "notes": notes,
        "load": {"label": rackload.LABEL, "by_policy": load},
        "runs": runs,
        "inputs": {
            "nodes": nodes,
            "requested_nodes": requested,
            "size_rack": {"mode": size_rack, "nodes_for_the_load": suggest, "rule": rackload.SIZING_RULE},
            "rack": RACK_NOTES[baseline],
            "dscs_storage_nodes": storage,
            "compute_nodes": compute,
            "compute_slots": SIM_SLOTS,
            "node_memory_mb": ({"dscs_storage": mem_caps[0], "compute": mem_caps[1], "label": "src",
                                "source": f"{P.MEMORY_BYTES['dscs'].source} (DSCS); {P.MEMORY_BYTES['cpu'].source} (CPU server)"}
                               if mem_caps[0] else "not modelled (no memory file)"),
            "trace": tr.describe() if tr is not None else {"kind": "poisson", "schedule": schedule, "duration_s": duration_s},
            "trace_service_times": ("a call's duration D from the durations file is its time on a CPU (the trace was recorded on "
                                    "Azure's CPU workers); stage i of its app's chain on target T takes D x mean_i(T) / sum_j "
                                    "mean_j(cpu) (the model's split and accelerator speedup) [assumption]; a call's memory "
                                    "footprint is held on its node while each stage runs, and a stage waits for it there"),
            "seed": seed,
            "service_means_s": means,
            "service_distribution": f"lognormal, sigma {SERVICE_SIGMA} [assumption] around the end-to-end model's mean stage time",
            "cold_start_s": {
                "runtime": {"value_s": runtime[0], "label": "measured", "source": runtime[1]},
                "model_load": {"value_s": weights_s[len(weights_s) // 2], "label": "modelled", "source": "median app's weights over P2P"},
                "image_pull": {"value_s": 0.0, "label": "assumption", "source": "images cached on every node (no container images here)"},
            },
            "cumulative_processing_s": "derived: completed x (mean latency - mean wait)",
            "keep_alive_s": 600.0,
            "queue_in_view": "True: a node's waiting calls count as its load (a simulated node has 4 slots; a live node runs "
            "every call at once, so the gateway sees the same calls as in flight)",
            "queue_depth": 10_000,
        },
    }


def policy_run(shared: dict, policy: str) -> tuple[dict, dict]:
    """One placement policy's simulation of the rack (module level: a Ray task with --ray). Returns
    its ``runs`` entry and its ``summary`` (``policy_summary``)."""
    cfg = SimConfig(policy=policy, **shared["config"])
    tr, seed = shared["trace"], shared["seed"]
    wl = poisson(shared["schedule"], shared["duration_s"], seed=seed) if tr is None else tr.replay(seed)
    r = Simulator(cfg).run(wl)
    # DSCS §6.2.2's metric: the cumulative wall-clock time the platforms take to process the
    # requests (each request's time in service: its latency less its queueing).
    busy = r.completed * (r.latency["mean"] - r.mean_wait_s) if r.completed else 0.0
    return {**r.summary(), "cumulative_processing_s": busy, "series": r.series}, policy_summary(r)


def policy_summary(r) -> dict:
    """One policy's headline of a run: p50/p95/p99 end-to-end latency and rejections (modelled)."""
    lat = {k: r.latency[k] for k in ("p50", "p95", "p99")}
    out = {"label": "modelled", "requests": r.arrivals, "completed": r.completed, "rejected": r.rejected,
           "rejected_share": r.rejected / r.arrivals if r.arrivals else 0.0, "latency_s": lat,
           "latency_ms": {k: v * 1e3 for k, v in lat.items()}}
    if r.memory is not None:
        out["memory"] = r.memory
    return out


HEADLINE_KEYS = (("speedup", "speedup_vs_cpu"), ("energy_reduction", "energy_reduction_vs_cpu"),
                 ("cost_efficiency", "cost_efficiency_vs_cpu_per_app"))


def headline_from(ev: dict) -> dict:
    """{"mode", "label", "per_app": {platform: {app: {speedup, energy_reduction, cost_efficiency}}},
    "summary": {platform: {speedup_geomean, energy_reduction_geomean, cost_efficiency}}} of one
    ``e2e.evaluate`` result (cost efficiency per app: at that app's throughput and power; the
    platform's: the cost model's platform figure)."""
    per_app = {p: {a: {k: ev[src][p][a] for k, src in HEADLINE_KEYS} for a in row if a not in ("mean", "geomean")}
               for p, row in ev["speedup_vs_cpu"].items()}
    summary = {p: {"speedup_geomean": ev["speedup_vs_cpu"][p]["geomean"],
                   "energy_reduction_geomean": ev["energy_reduction_vs_cpu"][p]["geomean"],
                   "cost_efficiency": ev["cost_efficiency_vs_cpu"][p]} for p in per_app}
    return {"mode": ev["mode"], "label": ev["label"], "per_app": per_app, "summary": summary}


def headline(evaluate_fn: Callable[..., dict] | None = None, **kwargs) -> dict:
    """The headline of ``evaluate_fn(**kwargs)`` (default ``e2e.evaluate``). An uncertainty study
    passes a callable that evaluates with perturbed constants and collects these dicts."""
    return headline_from((evaluate_fn or e2e.evaluate)(**kwargs))


def build(
    quick: bool = False,
    apps=None,
    platforms=None,
    link: str = "s3-like",
    nodes: int | None = None,
    trace=None,
    rate: float | None = None,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
    baseline: str = P.PAPER,
    durations=None,
    memory=None,
    minutes: int | None = None,
    size_rack: str = "fixed",
    ray_address: str | None = None,
    counted: Callable[[str, int], Callable[[int], None]] | None = None,
    options: dict | None = None,
) -> dict:
    """Every number of the report in ``baseline``'s mode. ``quick``: a 20-node rack and 1,000
    Monte Carlo samples. ``trace``, ``durations``, ``memory``, ``minutes``, ``size_rack``: the
    rack simulation's workload and rack (``simulate``).

    ``ray_address`` (host:port or ``auto``): the independent points — the uncertainty study's
    evaluations, the sensitivity studies' points, the rack simulation's policies — run as Ray
    tasks (``nearfaas.fanout``); every point is seeded by its own inputs, so the results are the
    local run's (the measured ``wall_s``/``seconds``/``generated`` fields aside).
    ``counted(description, total)``: starts a counted step, returns its ``advance(n)``.
    ``options``: single choices of ``platforms.OPTIONS`` over the mode's (``energy``, ``stack``,
    ...), for the headline, its uncertainty and the sensitivity studies."""
    step = progress or (lambda _m: None)
    t0 = time.perf_counter()
    P.check_baseline(baseline)
    apps = None if apps is None else [P.check_app(a) for a in apps]
    platforms = None if platforms is None else [P.check_platform(p) for p in platforms]
    nodes = nodes if nodes is not None else (20 if quick else 200)
    get_profile(link)
    tr = check_rack(nodes, rate, trace=trace, seed=seed, durations=durations, memory=memory, minutes=minutes, size_rack=size_rack)[3]
    step(f"single node ({baseline} mode): end-to-end, energy, cost")
    P.resolve(baseline, **(options or {}))  # an unknown choice fails now, naming the option
    opts = {"baseline": baseline, "request_seed": seed, **(options or {})}
    ev = e2e.evaluate(apps, platforms, link=link, **opts)
    other = next(b for b in P.BASELINES if b != baseline)
    alt = e2e.evaluate(apps, platforms, link=link, baseline=other, request_seed=seed)
    on = f" on Ray ({ray_address})" if ray_address else ""

    def count(description: str, total: int):
        return counted(description + on, total) if counted else None

    step(f"uncertainty: the headline over the assumption/mem constants' ranges (Monte Carlo){on}")
    ranges = headline_uncertainty(apps, platforms, link, opts, samples=UNCERTAINTY_SAMPLES[quick], seed=seed, ray_address=ray_address,
                                  progress=count("uncertainty: evaluations", uncertainty_evaluations(UNCERTAINTY_SAMPLES[quick])))
    step(f"sensitivity: batch, tail, accelerated functions, cold start{on}")
    sens = sensitivity.all_studies(apps, platforms, link=link, samples=1000 if quick else 4000, seed=seed, ray_address=ray_address,
                                   progress=count("sensitivity: points", sensitivity.POINTS), **opts)
    step(f"rack-scale simulation{on}")
    sim = simulate(nodes, trace=tr, rate=rate, seed=seed, link=link, baseline=baseline, minutes=minutes, size_rack=size_rack,
                   progress=lambda p: step(f"rack-scale simulation: {p}"), ray_address=ray_address,
                   advance=count("rack-scale simulation: policies", len(SIM_POLICIES)))
    return _results(ev, alt, sens, sim, quick, sim["inputs"]["nodes"], seed, t0, ranges)


# Monte Carlo samples of the constants (report --quick / full). Each sample evaluates every
# platform and app at the headline's own 10,000 requests per p95: the energy ratio's p95 moves by
# ~12% between 2,000 and 10,000 requests, so fewer would shift the nominal itself.
UNCERTAINTY_SAMPLES = {True: 40, False: 200}


def headline_uncertainty(apps, platforms, link: str, opts: dict, samples: int, seed: int, ray_address: str | None = None,
                         progress: Callable[[int], None] | None = None) -> dict:
    """The headline ratios' ranges when every ``assumption``/``mem`` constant with a documented
    range is drawn within it (twin/uncertainty.py), with a one-at-a-time tornado. With
    ``ray_address`` the evaluations run as Ray tasks (the callable is pickled to the workers)."""
    from nearfaas.twin import uncertainty

    evaluate = functools.partial(e2e.evaluate, apps, platforms, link=link, **opts)
    return uncertainty.headline_ranges(evaluate, samples=samples, seed=seed, ray_address=ray_address, progress=progress)


def uncertainty_evaluations(samples: int) -> int:
    """Evaluations the uncertainty study fans out: two per swept constant, then the samples."""
    from nearfaas.twin import uncertainty

    return 2 * len(uncertainty.uncertain_constants()) + samples


def _results(ev, alt, sens, sim, quick, nodes, seed, t0, ranges) -> dict:
    breakdown = {
        p: {a: {"total_s": b["total_s"], "by_component_s": b["by_component_s"]} for a, b in row.items()} for p, row in ev["breakdowns"].items()
    }
    keys = ("speedup_vs_cpu", "energy_reduction_vs_cpu", "cost_efficiency_vs_cpu", "cost_efficiency_vs_cpu_per_app")
    return {
        "title": f"nearfaas datacenter twin: DSCS-Serverless evaluation ({ev['mode']} mode)",
        "mode": ev["mode"],
        "label": ev["label"],
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **{k: ev[k] for k in keys},
        "headline": {**headline_from(ev), "ranges": ranges["headlines"], "ranges_label": ranges["label"]},
        "uncertainty": ranges,
        "runtime_breakdown_s": breakdown,
        "alternative_mode": {"mode": alt["mode"], "label": f"alternative, NOT this report's mode: {alt['label']}",
                             **{k: alt[k] for k in keys}},
        "cost_efficiency": ev["cost_efficiency"],
        "energy_j": ev["energy"],
        "sensitivity": sens,
        "simulation": sim,
        "warnings": sim["warnings"],
        "measured_here": _measured_inputs(ev["mode"]),
        "inputs": {**ev["inputs"], "quick": quick, "nodes": nodes, "seed": seed},
        "machine": {"python": host.python_version(), "machine": host.machine(), "system": host.system()},
        "wall_s": time.perf_counter() - t0,
    }


def _measured_inputs(mode: str) -> dict:
    out = {
        "cpu_stage_seconds": "benchmarks/results/apps.json (f1/f2/f3 per app, 1 ONNX Runtime thread, this 2-core VM)",
        "system_stack_s": "benchmarks/results/invoke_overhead.json (gateway overhead per stage)",
        "runtime_start_s": "benchmarks/results/cold_start.json (prewarm-off)",
        "object_sizes": "benchmarks/results/apps.json (make_input seed 0, stage outputs)",
        "model_file_bytes_and_session_build": "benchmarks/results/apps.json (full models built in code)",
    }
    if mode == P.PAPER:
        out["cpu_stage_seconds"] = "benchmarks/results/apps.json f3 wall_s only (f1/f2 are the Xeon 8275CL roofline in paper mode)"
        out["system_stack_s"] = ("not an input in paper mode: the paper's OpenFaaS on Kubernetes is modelled (twin/stack.py); "
                                 "--stack measured-here reads benchmarks/results/invoke_overhead.json (warm no-op call, p50 and p99)")
    return out


def mode_caption(results: dict) -> str:
    """The mode a table was computed in, for its title."""
    mode = results.get("mode", P.MEASURED_HERE)
    return f"{mode} mode" + ("" if mode == P.PAPER else ": NOT the paper's method")


def speedup_table(results: dict, key: str = "speedup_vs_cpu") -> list[list[str]]:
    """Rows of the speedup table (platform, each app, mean, geomean) as strings."""
    block = results[key]
    cols = [c for c in next(iter(block.values())) if c not in ("mean", "geomean")] + ["mean", "geomean"]
    rows = [["platform", *cols]]
    for p, row in block.items():
        rows.append([p, *(f"{row[c]:.2f}" for c in cols)])
    return rows


def summary_table(results: dict) -> list[list[str]]:
    """Rows of the geomean table: platform, speedup, energy reduction, cost efficiency vs the CPU,
    each with its 5th-95th percentile over the constants' ranges when the report has them."""
    ranges = (results.get("headline") or {}).get("ranges") or {}
    suffix = ", p5-p95" if ranges else ""
    rows = [["platform", f"speedup (geomean){suffix}", f"energy reduction (geomean){suffix}", f"cost efficiency{suffix}"]]

    def cell(metric: str, platform: str, value: float) -> str:
        band = ((ranges.get(metric) or {}).get(platform) or {}).get("geomean")
        return f"{value:.2f}" + (f" [{band['p5']:.2f}-{band['p95']:.2f}]" if band else "")

    for p, row in results["speedup_vs_cpu"].items():
        rows.append([p, cell("speedup_vs_cpu", p, row["geomean"]),
                     cell("energy_reduction_vs_cpu", p, results["energy_reduction_vs_cpu"][p]["geomean"]),
                     cell("cost_efficiency_vs_cpu", p, results["cost_efficiency_vs_cpu"][p])])
    return rows
