"""Render ``twin.report.build()``'s results: PNG figures, one self-contained HTML page (figures
inlined as data URIs, no external assets) and ``results.json``."""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt

from . import report

COMPONENTS = ("host_cpu", "accel", "network", "pcie", "p2p", "driver", "stack")


def _bars(ax, block: dict, ylabel: str, log: bool = True) -> None:
    platforms = list(block)
    keys = [k for k in next(iter(block.values())) if k not in ("mean", "geomean")] + ["geomean"]
    width = 0.8 / len(platforms)
    for i, p in enumerate(platforms):
        ax.bar([x + i * width for x in range(len(keys))], [block[p][k] for k in keys], width, label=p)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))], keys, rotation=30, ha="right", fontsize=8)
    ax.axhline(1.0, color="black", lw=0.6)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=4)


def _breakdown(ax, bd: dict) -> None:
    platforms = list(bd)
    apps = list(next(iter(bd.values())))
    bottom = [0.0] * len(platforms)
    for comp in COMPONENTS:
        # Mean over apps of each component's share of the end-to-end time.
        share = [sum(bd[p][a]["by_component_s"].get(comp, 0.0) / bd[p][a]["total_s"] for a in apps) / len(apps) for p in platforms]
        ax.bar(platforms, share, bottom=bottom, label=comp)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_ylabel("share of end-to-end time (mean over apps)")
    ax.legend(fontsize=7, ncol=4)


def _lines(ax, block: dict, xlabel: str, ylabel: str, logx: bool = False) -> None:
    for p, row in block.items():
        xs = [float(k) for k in row]
        ax.plot(xs, list(row.values()), marker="o", ms=3, label=p)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=4)


def _tail(fig, tail: dict) -> None:
    comps = list(tail["components"])
    for i, comp in enumerate(comps):
        ax = fig.add_subplot(1, len(comps), i + 1)
        for p, row in tail["components"][comp].items():
            if p == "cpu":
                continue
            xs = [float(r) for r in row]
            line = ax.plot(xs, [v["p50"] for v in row.values()], marker="o", ms=3, label=f"{p} p50")[0]
            ax.plot(xs, [v["p99"] for v in row.values()], ls="--", color=line.get_color(), label=f"{p} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{comp} transfer tail", fontsize=9)
        ax.set_xlabel("p99 / p50 of each transfer")
        if i == 0:
            ax.set_ylabel("speedup vs cpu (geomean)")
    fig.axes[-1].legend(fontsize=6, ncol=2)


def _sim(fig, sim: dict, key: str, ylabel: str, scale: float = 1.0) -> None:
    ax = fig.add_subplot(1, 1, 1)
    for policy, run in sim["runs"].items():
        s = run["series"]
        ax.plot(s["t"], [v * scale if v == v else math.nan for v in s[key]], label=policy)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def figures(results: dict) -> dict[str, tuple[str, callable]]:
    """name -> (caption, draw(fig)). Captions say measured or modelled, and the mode."""
    s = results["sensitivity"]
    sim = results["simulation"]
    mode = report.mode_caption(results)
    cpu = "Xeon 8275CL roofline baseline, p95 latency" if results.get("mode") == "paper" else "CPU stages measured here"
    figs = {
        "speedup": (f"Speedup vs the CPU baseline per app (modelled; {cpu})",
                    lambda f: _bars(f.add_subplot(1, 1, 1), results["speedup_vs_cpu"], "speedup vs cpu")),
        "breakdown": ("Runtime breakdown: share of end-to-end time per component (modelled)",
                      lambda f: _breakdown(f.add_subplot(1, 1, 1), results["runtime_breakdown_s"])),
        "energy": ("Energy reduction vs the CPU baseline (modelled; network energy excluded)",
                   lambda f: _bars(f.add_subplot(1, 1, 1), results["energy_reduction_vs_cpu"], "energy reduction vs cpu")),
        "cost": ("Cost efficiency (requests per dollar, 3 years) vs the CPU baseline (modelled)",
                 lambda f: _cost(f.add_subplot(1, 1, 1), results["cost_efficiency_vs_cpu"])),
        "queue": ("Rack simulation: queue length over time per placement policy (modelled)",
                  lambda f: _sim(f, sim, "queue_len", "calls waiting (time-weighted mean per bin)")),
        "latency": ("Rack simulation: end-to-end latency over time, p95 per bin (modelled)",
                    lambda f: _sim(f, sim, "latency_p95", "p95 latency (ms)", 1e3)),
        "batch": ("Sensitivity: speedup vs batch size (modelled)",
                  lambda f: _lines(f.add_subplot(1, 1, 1), s["batch"]["speedup_vs_cpu"], "batch", "speedup vs cpu (geomean)", True)),
        "tail": ("Sensitivity: speedup at p50 (solid) and p99 (dashed) vs the tail of PCIe, P2P and network transfers (modelled, Monte Carlo)",
                 lambda f: _tail(f, s["tail"])),
        "accelerated_functions": ("Sensitivity: speedup vs accelerated functions per app (modelled)",
                                  lambda f: _lines(f.add_subplot(1, 1, 1), s["accelerated_functions"]["speedup_vs_cpu"],
                                                   "accelerated functions per app", "speedup vs cpu (geomean)")),
        "cold_start": ("Sensitivity: speedup with warm and cold instances (modelled; runtime start and session build measured here)",
                       lambda f: _cold(f.add_subplot(1, 1, 1), s["cold_start"])),
    }
    return {name: (f"{caption} [{mode}]", draw) for name, (caption, draw) in figs.items()}


def _cost(ax, block: dict) -> None:
    ax.bar(list(block), list(block.values()), color="tab:green")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_ylabel("cost efficiency vs cpu")


def _cold(ax, cold: dict) -> None:
    platforms = list(cold["speedup_vs_cpu"]["warm"])
    for i, kind in enumerate(("warm", "cold")):
        ax.bar([x + i * 0.4 for x in range(len(platforms))], [cold["speedup_vs_cpu"][kind][p] for p in platforms], 0.4, label=kind)
    ax.set_xticks([x + 0.2 for x in range(len(platforms))], platforms)
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_ylabel("speedup vs cpu (geomean)")
    ax.legend()


def _table_html(rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


def _sim_rows(sim: dict) -> list[list[str]]:
    rows = [["policy", "requests", "completed", "rejected", "p50 ms", "p95 ms", "p99 ms", "drained at s", "cold starts", "wall s (measured)"]]
    for policy, r in sim["runs"].items():
        lat = r["latency"]
        share = f" ({r['rejected'] / r['arrivals']:.1%})" if r["arrivals"] else ""
        rows.append([policy, f"{r['arrivals']:,}", f"{r['completed']:,}", f"{r['rejected']:,}{share}",
                     *(f"{lat[k] * 1e3:.1f}" for k in ("p50", "p95", "p99")), f"{r['sim_time_s']:.0f}", f"{r['cold_starts']:,}", f"{r['wall_s']:.2f}"])
    return rows


def _notes_html(sim: dict) -> str:
    """The simulation's warnings (an undersized rack, with the numbers) and notes (which trace
    files it used, a sized rack)."""
    items = [f"<li><b>warning:</b> {html.escape(w)}</li>" for w in sim.get("warnings", [])]
    items += [f"<li>{html.escape(n)}</li>" for n in sim.get("notes", [])]
    return f"<ul>{''.join(items)}</ul>" if items else ""


def write(results: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write the PNGs, report.html and results.json into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    sections = []
    for name, (caption, draw) in figures(results).items():
        fig = plt.figure(figsize=(13 if name == "tail" else 9, 4.2))
        draw(fig)
        fig.suptitle(caption, fontsize=9)
        fig.tight_layout()
        p = out / f"{name}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths[name] = p
        data = base64.b64encode(p.read_bytes()).decode()
        sections.append(f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'><figcaption>{html.escape(caption)}</figcaption></figure>")
    rj = out / "results.json"
    rj.write_text(json.dumps(results, indent=1, default=str) + "\n")
    paths["results"] = rj
    m = html.escape(report.mode_caption(results))
    alt = results.get("alternative_mode")
    tables = (
        f"<h2>Speedup vs CPU (modelled, {m})</h2>" + _table_html(report.speedup_table(results))
        + f"<h2>Energy reduction vs CPU (modelled, {m})</h2>" + _table_html(report.speedup_table(results, "energy_reduction_vs_cpu"))
        + f"<h2>Cost efficiency vs CPU (modelled, {m})</h2>"
        + _table_html([["platform", "vs cpu"], *([p, f"{v:.2f}"] for p, v in results["cost_efficiency_vs_cpu"].items())])
        + (f"<h2>Alternative: geomeans in {html.escape(report.mode_caption(alt))}</h2>" + _table_html(report.summary_table(alt)) if alt else "")
        + f"<h2>Rack-scale simulation (modelled latencies, measured wall time, {m})</h2>" + _table_html(_sim_rows(results["simulation"]))
        + _notes_html(results["simulation"])
    )
    measured = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in results["measured_here"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(results['title'])}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}img{{max-width:100%}}figcaption{{font-size:12px;color:#444}}</style></head>
<body><h1>{html.escape(results['title'])}</h1>
<p><b>Mode: {html.escape(str(results.get('mode')))}.</b> {html.escape(results['label'])}. Generated {html.escape(results['generated'])}; every input is in results.json.</p>
<p><b>Measured on this machine:</b></p><ul>{measured}</ul>
<p>Everything else is modelled from public specifications and stated assumptions (docs/results.md).</p>
{tables}
{''.join(sections)}
</body></html>
"""
    page_path = out / "report.html"
    page_path.write_text(page)
    paths["html"] = page_path
    return paths
