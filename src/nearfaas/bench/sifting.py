"""The sifting benchmark (issue 19): measured runs on a Ray cluster, then the twin's projection.

1. **Measured** (this Ray cluster): for each split (4, 16, 128 by default) the pipeline injects
   ``particles`` from ``ranks`` ranks into ``pes`` PE actors and drains stage by stage;
   recorded per run: injection throughput, and per stage the split wall time (compactions in
   parallel) and the publish wall time (every part absorbed by its next PE). Each run is also
   verified (particles out, duplicates, misplaced): a benchmark of a wrong answer is worthless.
2. **Calibration**: per-particle costs from those runs (medians): sample+serialize at a rank,
   split, serialize, absorb; bytes per serialized particle.
3. **Modelled** (``twin.sifting``): the thesis's 100 nodes, 10 M / 100 M / 1,000 M particles,
   host (factor 1) and SmartNIC (factor 4), the shape of Figs. 5.8-5.10.
"""

from __future__ import annotations

import statistics
import time

from nearfaas.dataservices import sift_ray
from nearfaas.dataservices.sifting import Plan
from nearfaas.twin import sifting as twin

SPLITS = (4, 16, 128)


def _per_particle(pairs) -> float:
    vals = [s / n for n, s in pairs if n > 0]
    return statistics.median(vals) if vals else 0.0


def measure(split: int, pes: int, particles: int, ranks: int, ray_address=None, seed: int = 0) -> dict:
    sifter = sift_ray.Sifter(Plan(pes, split, 2**62), ray_address)
    try:
        t0 = time.perf_counter()
        sifter.inject(ranks, particles, seed)
        inject_s = time.perf_counter() - t0
        sifter.drain()
        check = sifter.verify()
        inj = sifter.stats["inject"]
        log = sifter.compaction_log
        return {
            "split": split, "pes": pes, "particles": particles, "ranks": ranks, "stages": sifter.plan.stages,
            "inject_s": inject_s, "inject_particles_per_s": particles / inject_s,
            "sample_serialize_s": inj["sample_serialize_s"], "deliver_s": inj["deliver_s"],
            "per_stage": [{k: s[k] for k in ("stage", "compactions", "wall_s", "split_wall_s", "publish_s")}
                          for s in sifter.stats["stages"]],
            "check": {k: check[k] for k in ("particles_out", "duplicates", "misplaced")},
            "_costs": {
                "inject_s": _per_particle((m["rows"], m["sample_s"] + m["serialize_s"]) for m in inj["per_rank"]),
                "split_s": _per_particle((sum(m["rows"]), m["split_s"]) for m in log),
                "serialize_s": _per_particle((sum(m["rows"]), m["serialize_s"]) for m in log),
                "absorb_s": _per_particle((rows, s) for _stage, rows, s in sifter.absorbs),
            },
        }
    finally:
        sifter.close()


def bytes_per_particle(rows: int = 100_000) -> float:
    from nearfaas.dataservices.particles import particles

    return len(sift_ray._serialize(particles(rows))) / rows


def kpass_select_s(rows: int = 400_000, parts: int = 16, repeats: int = 3) -> float:
    """CPU seconds per particle per part of the thesis's k-pass split (one filter per part)."""
    from nearfaas.dataservices.particles import particles
    from nearfaas.dataservices.partition import split

    table = particles(rows)
    samples = []
    for _ in range(repeats):
        c0 = time.process_time()
        split(table, parts, "id", "kpass")
        samples.append((time.process_time() - c0) / (rows * parts))
    return statistics.median(samples)


def run(splits=SPLITS, pes: int = 32, particles: int = 2_000_000, ranks: int = 4, repeats: int = 3,
        ray_address=None, nodes: int = 100, progress=None) -> dict:
    say = progress or (lambda m: None)
    runs = []
    for split in splits:
        for i in range(repeats):
            say(f"split {split}: run {i + 1}/{repeats} ({pes} PEs, {particles:,} particles)")
            runs.append(measure(split, pes, particles, ranks, ray_address, seed=i))
    costs = {k: statistics.median(r["_costs"][k] for r in runs) for k in runs[0]["_costs"]}
    say("calibrating the thesis's k-pass split")
    cal = twin.Calibration(**costs, bytes_per_particle=bytes_per_particle(), kpass_select_s=kpass_select_s())
    for r in runs:
        r.pop("_costs")
    measured = {}
    for split in splits:
        mine = [r for r in runs if r["split"] == split]
        stages = len(mine[0]["per_stage"])
        measured[str(split)] = {
            "stages": stages,
            "inject_particles_per_s": statistics.median(r["inject_particles_per_s"] for r in mine),
            "per_stage": [{"stage": s + 1,
                           "split_wall_s": statistics.median(r["per_stage"][s]["split_wall_s"] for r in mine),
                           "publish_s": statistics.median(r["per_stage"][s]["publish_s"] for r in mine),
                           "wall_s": statistics.median(r["per_stage"][s]["wall_s"] for r in mine)} for s in range(stages)],
            "total_s_median": statistics.median(r["inject_s"] + sum(s["wall_s"] for s in r["per_stage"]) for r in mine),
            "all_verified": all(r["check"]["particles_out"] == particles and not r["check"]["duplicates"]
                                and not r["check"]["misplaced"] for r in mine)}
    say(f"twin: projecting {nodes} nodes")
    return {"benchmark": "sifting", "pes": pes, "particles": particles, "ranks": ranks, "repeats": repeats,
            "measured": measured, "runs": runs, "calibration": cal.__dict__,
            "projection": twin.project(cal, nodes=nodes),
            "labels": {"measured": "measured on this Ray cluster (wall clock, medians over repeats)",
                       "projection": "modelled: twin.sifting over the calibration"}}


def table(result: dict) -> str:
    lines = [f"Measured on this Ray cluster: {result['pes']} PEs, {result['particles']:,} particles, {result['ranks']} ranks, "
             f"medians of {result['repeats']}"]
    lines.append(f"{'split':>6} {'stages':>6} {'inject Mp/s':>12} {'stage':>6} {'split s':>9} {'publish s':>10} {'verified':>9}")
    for split, m in result["measured"].items():
        for s in m["per_stage"]:
            lines.append(f"{split:>6} {m['stages']:>6} {m['inject_particles_per_s'] / 1e6:12.2f} {s['stage']:>6} "
                         f"{s['split_wall_s']:9.3f} {s['publish_s']:10.3f} {str(m['all_verified']):>9}")
    cal = result["calibration"]
    lines.append("Calibration (measured CPU, ns per particle): " + ", ".join(
        f"{k} {cal[k] * 1e9:.1f}" for k in ("inject_s", "split_s", "serialize_s", "absorb_s", "kpass_select_s")) +
        f"; {cal['bytes_per_particle']:.1f} bytes per particle")
    p = result["projection"]
    lines.append(f"Projection (modelled): {p['nodes']} nodes, {p['pes']} PEs")
    lines.append(f"{'split':>6} {'particles':>14} {'where':>7} {'method':>7} {'inject s':>9} {'sift s':>9} {'total s':>9}")
    for r in p["rows"]:
        lines.append(f"{r['split']:>6} {r['particles']:>14,} {r['where']:>7} {r['method']:>7} {r['inject_s']:9.3f} "
                     f"{r['sift_s']:9.3f} {r['total_s']:9.3f}")
    return "\n".join(lines)


def plot(result: dict, path):
    """Figs. 5.8-5.10's shape (modelled, 100 nodes): split vs publish per stage for 100 M
    particles on the device; first-stage time host vs device; total time vs particles."""
    from nearfaas.bench.porter_plots import _pyplot, _save

    plt = _pyplot()
    if plt is None:
        return None
    rows = result["projection"]["rows"]
    method = "kpass" if any(r["method"] == "kpass" for r in rows) else "single"  # the thesis's split, when calibrated
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    dev100 = [r for r in rows if r["where"] == "device" and r["particles"] == 10**8 and r["method"] == method]
    x = 0
    ticks, labels = [], []
    for r in dev100:
        for s in r["per_stage"]:
            ax.bar(x, s["split_s"], color="tab:blue", label="split" if x == 0 else None)
            ax.bar(x, s["publish_s"], bottom=s["split_s"], color="tab:orange", label="publish" if x == 0 else None)
            ticks.append(x)
            labels.append(f"{r['split']}-way\nstage {s['stage']}")
            x += 1
        x += 0.5
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("seconds (modelled)")
    ax.set_title(f"Fig. 5.8 shape: SmartNIC sifting, 100 M particles ({method} split)", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    for (where, m), style in {("host", "single"): "o-g", ("device", "single"): "o-r",
                              ("host", "kpass"): "s--g", ("device", "kpass"): "s--r"}.items():
        pts = [(r["split"], r["per_stage"][0]["wall_s"]) for r in rows
               if r["where"] == where and r["particles"] == 10**8 and r["method"] == m]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{where}, {m}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("split")
    ax.set_ylabel("first stage, seconds (modelled)")
    ax.set_title("Fig. 5.9 shape: first-stage overhead, 100 M", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[2]
    for where, colour in (("host", "tab:green"), ("device", "tab:red")):
        pts = [(r["particles"], r["total_s"]) for r in rows if r["where"] == where and r["split"] == 16 and r["method"] == method]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=f"{where}, 16-way {method}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("particles")
    ax.set_ylabel("total seconds (modelled)")
    ax.set_title("Fig. 5.10 shape: total sifting time", fontsize=9)
    ax.legend(fontsize=7)
    return _save(plt, fig, f"Particle sifting on {result['projection']['nodes']} nodes (modelled from costs measured "
                           f"on Ray here; {result['pes']} PEs measured)", path)
