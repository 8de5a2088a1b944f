"""``nearfaas twin report``: the whole evaluation set in one ``results.json`` (and, through
``twin.render``, PNGs and one self-contained HTML page).

``build(quick=False, progress=None, **choices) -> dict``: the single-node comparison
(``e2e.evaluate``: speedup, runtime breakdown, energy, cost efficiency, also with the modelled
Xeon as the CPU), the four sensitivity studies, and the rack-scale simulation of the same apps
under a bursty 20-minute trace (or a replayed Azure trace) with the live placement policies.
Every block carries a ``label`` saying what is measured and what is modelled.
"""

from __future__ import annotations

import datetime as dt
import platform as host
import time
from collections.abc import Callable

from nearfaas.apps.catalog import APPS
from nearfaas.link.profiles import get_profile

from . import e2e, sensitivity
from . import platforms as P
from .sim import SimConfig, Simulator, azure_replay, dscs_apps, poisson

SIM_POLICIES = ("near-data", "compute-only")
SIM_DURATION_S = 1200.0  # 20 minutes, as the trace
SERVICE_SIGMA = 0.25  # assumption: lognormal spread of a stage's service time around the model's value
LOAD_PER_NODE = 0.75  # requests/s per node at the base rate (200 nodes -> 150 requests/s)
BURSTS = ((300.0, 2.0), (360.0, 1.0), (720.0, 3.0), (780.0, 1.0))  # (start_s, x base rate): two bursts


def burst_schedule(base_rate: float) -> list[tuple[float, float]]:
    """The bursty trace: base rate, 2x for a minute at 5 min, 3x for a minute at 12 min."""
    if not base_rate > 0:
        raise ValueError(f"rate={base_rate!r}: the base arrival rate must be a positive number of requests/s")
    return [(0.0, base_rate)] + [(t, k * base_rate) for t, k in BURSTS]


def check_rack(nodes, rate, duration_s: float = SIM_DURATION_S, trace: str | None = None, seed: int = 1):
    """Validate the simulation's inputs up front (before minutes of other work): returns the base
    rate and the Poisson schedule (None when replaying ``trace``, which is read through here so
    that a malformed file is reported with its line and column)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise ValueError(f"nodes={nodes!r}: the rack needs a whole number of at least 2 nodes (half storage, half compute)")
    if not duration_s > 0:
        raise ValueError(f"duration={duration_s!r}: give a positive number of seconds")
    rate = LOAD_PER_NODE * nodes if rate is None else rate
    schedule = burst_schedule(rate) if trace is None else None
    if trace is not None:
        list(azure_replay(trace, seed=seed))
    return rate, schedule


def sim_services(link: str = "s3-like", **opts) -> tuple[dict, dict]:
    """Service-time specs per (function, target) from the end-to-end model: a stage on a dscs
    node (target ``dscs``) takes the DSCS platform's stage time; on a CPU (target ``cpu``) the
    CPU baseline's (measured compute + remote reads). Lognormal with sigma SERVICE_SIGMA."""
    services, means = {}, {}
    for app in APPS:
        slug = app.replace("_", "-")
        cpu = e2e.end_to_end(app, "cpu", 1, link, **opts)
        dscs = e2e.end_to_end(app, "dscs", 1, link, **opts)
        for i, fn in enumerate((f"{slug}-pre", f"{slug}-infer", f"{slug}-notify")):
            for target, bd in (("cpu", cpu), ("dscs", dscs)):
                if i == 2 and target == "dscs":  # f3 always runs on a compute node's CPU
                    continue
                s = bd.stages[i].total_s
                services[(fn, target)] = ("lognormal", s, SERVICE_SIGMA)
                means[f"{fn};{target}"] = s
    return services, means


def simulate(
    nodes: int = 200,
    policies=SIM_POLICIES,
    trace: str | None = None,
    rate: float | None = None,
    duration_s: float = SIM_DURATION_S,
    seed: int = 1,
    link: str = "s3-like",
    progress: Callable[[str], None] | None = None,
    **opts,
) -> dict:
    """The rack under one trace, once per placement policy: half the nodes are dscs storage
    nodes, half compute nodes (4 slots). Returns the simulation block of results.json."""
    rate, schedule = check_rack(nodes, rate, duration_s, trace, seed)
    services, means = sim_services(link, **opts)
    runtime = sensitivity.runtime_start()
    weights_s = sorted(sensitivity.cold_terms(a, "dscs", "f2", link, runtime)[1].value_s for a in APPS)
    storage, compute = nodes // 2, nodes - nodes // 2
    runs = {}
    for policy in policies:
        if progress:
            progress(policy)
        cfg = SimConfig(storage_nodes=storage, compute_nodes=compute, compute_slots=4, policy=policy, apps=dscs_apps(),
                        services=services, keep_alive_s=600.0, image_pull_s=0.0, model_load_s=runtime[0] + weights_s[len(weights_s) // 2],
                        link=link, bin_s=10.0, seed=seed, queue_in_view=True)
        wl = poisson(schedule, duration_s, seed=seed) if trace is None else azure_replay(trace, seed=seed)
        r = Simulator(cfg).run(wl)
        runs[policy] = {**r.summary(), "series": r.series}
    return {
        "label": "modelled (discrete-event simulation; placements by the live nearfaas.placement policy objects; wall_s measured)",
        "runs": runs,
        "inputs": {
            "nodes": nodes,
            "dscs_storage_nodes": storage,
            "compute_nodes": compute,
            "compute_slots": 4,
            "trace": trace or {"kind": "poisson", "schedule": schedule, "duration_s": duration_s},
            "seed": seed,
            "service_means_s": means,
            "service_distribution": f"lognormal, sigma {SERVICE_SIGMA} [assumption] around the end-to-end model's stage time",
            "cold_start_s": {
                "runtime": {"value_s": runtime[0], "label": "measured", "source": runtime[1]},
                "model_load": {"value_s": weights_s[len(weights_s) // 2], "label": "modelled", "source": "median app's weights over P2P"},
                "image_pull": {"value_s": 0.0, "label": "assumption", "source": "images cached on every node"},
            },
            "keep_alive_s": 600.0,
            "queue_in_view": "True: a node's waiting calls count as its load (a simulated node has 4 slots; a live node runs "
            "every call at once, so the gateway sees the same calls as in flight)",
            "queue_depth": 10_000,
        },
    }


def build(
    quick: bool = False,
    apps=None,
    platforms=None,
    link: str = "s3-like",
    nodes: int | None = None,
    trace: str | None = None,
    rate: float | None = None,
    seed: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Every number of the report. ``quick``: a 20-node rack and 1,000 Monte Carlo samples."""
    step = progress or (lambda _m: None)
    t0 = time.perf_counter()
    apps = None if apps is None else [P.check_app(a) for a in apps]
    platforms = None if platforms is None else [P.check_platform(p) for p in platforms]
    nodes = nodes if nodes is not None else (20 if quick else 200)
    get_profile(link)
    check_rack(nodes, rate, trace=trace, seed=seed)
    step("single node: end-to-end, energy, cost")
    ev = e2e.evaluate(apps, platforms, link=link)
    xeon = e2e.evaluate(apps, platforms, link=link, cpu_compute="modelled")
    step("sensitivity: batch, tail, accelerated functions, cold start")
    sens = sensitivity.all_studies(apps, platforms, link=link, samples=1000 if quick else 4000, seed=seed)
    step("rack-scale simulation")
    sim = simulate(nodes, trace=trace, rate=rate, seed=seed, link=link, progress=lambda p: step(f"rack-scale simulation: {p}"))
    breakdown = {
        p: {a: {"total_s": b["total_s"], "by_component_s": b["by_component_s"]} for a, b in row.items()} for p, row in ev["breakdowns"].items()
    }
    return {
        "title": "nearfaas datacenter twin: DSCS-Serverless evaluation",
        "label": ev["label"],
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "speedup_vs_cpu": ev["speedup_vs_cpu"],
        "energy_reduction_vs_cpu": ev["energy_reduction_vs_cpu"],
        "cost_efficiency_vs_cpu": ev["cost_efficiency_vs_cpu"],
        "runtime_breakdown_s": breakdown,
        "modelled_xeon_baseline": {
            "label": "modelled: the CPU baseline's f1/f2 from the Xeon 8275CL roofline instead of this machine's measured thread",
            "speedup_vs_cpu": xeon["speedup_vs_cpu"],
            "energy_reduction_vs_cpu": xeon["energy_reduction_vs_cpu"],
            "cost_efficiency_vs_cpu": xeon["cost_efficiency_vs_cpu"],
        },
        "cost_efficiency": ev["cost_efficiency"],
        "energy_j": ev["energy"],
        "sensitivity": sens,
        "simulation": sim,
        "measured_here": {
            "cpu_stage_seconds": "benchmarks/results/apps.json (f1/f2/f3 per app, 1 ONNX Runtime thread, this 2-core VM)",
            "system_stack_s": "benchmarks/results/invoke_overhead.json (gateway overhead per stage)",
            "runtime_start_s": "benchmarks/results/cold_start.json (prewarm-off)",
            "object_sizes": "benchmarks/results/apps.json (make_input seed 0, stage outputs)",
            "model_file_bytes_and_session_build": "benchmarks/results/apps.json (full models built in code)",
        },
        "inputs": {**ev["inputs"], "quick": quick, "nodes": nodes, "seed": seed},
        "machine": {"python": host.python_version(), "machine": host.machine(), "system": host.system()},
        "wall_s": time.perf_counter() - t0,
    }


def speedup_table(results: dict, key: str = "speedup_vs_cpu") -> list[list[str]]:
    """Rows of the speedup table (platform, each app, mean, geomean) as strings."""
    block = results[key]
    cols = [c for c in next(iter(block.values())) if c not in ("mean", "geomean")] + ["mean", "geomean"]
    rows = [["platform", *cols]]
    for p, row in block.items():
        rows.append([p, *(f"{row[c]:.2f}" for c in cols)])
    return rows
