"""The Porter benchmark's pictures (bench/porter.py makes the numbers): the paper's Figure 2
(all-CXL slowdown per workload, with memory-boundness), Figure 4 (access heat maps) and Figure 7
(colocation, DRAM vs the slow tier). Each returns the PNG's path, or None without matplotlib or
without rows to draw."""

from __future__ import annotations

from pathlib import Path

from nearfaas.bench.porter import SLOW_BW_RATIOS


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, title: str, path: Path) -> Path:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def slowdowns(result: dict, path: Path) -> Path | None:
    """Figure 2: all-CXL slowdown at delta = 70 ns per workload, sorted, with each workload's
    memory-boundness as a line."""
    plt = _pyplot()
    rows = sorted((r for r in result["workloads"] if "tiers" in r),
                  key=lambda r: r["tiers"]["by_delta"]["70"]["all-cxl"]["slowdown"])
    if plt is None or not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(8, 0.7 * len(rows)), 4))
    xs = range(len(rows))
    ax.bar(xs, [r["tiers"]["by_delta"]["70"]["all-cxl"]["slowdown"] * 100 for r in rows], color="#1f77b4",
           label="all on the slow tier, delta 70 ns (modelled)")
    ax.set_xticks(list(xs), [r["name"] for r in rows], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("slowdown vs all-DRAM (%)")
    twin = ax.twinx()
    twin.plot(list(xs), [r["boundness"]["boundness"] for r in rows], "o-", color="#d62728", label="memory-boundness")
    twin.set_ylabel("memory-boundness (modelled from measured misses)")
    twin.set_ylim(0, 1)
    fig.legend(loc="upper left", fontsize=8)
    return _save(plt, fig, "Figure 2's shape, on this machine (access-sampled traces)", path)


def colocation(result: dict, path: Path) -> Path | None:
    """Figure 7 (modelled): slowdown beside each neighbour, DRAM vs the slow tier."""
    plt = _pyplot()
    table = result["summary"].get("colocation", {}).get("by_ratio", {}).get(str(SLOW_BW_RATIOS[0]), {})
    bars = [(f"{name}+{other}", cell) for name, row in table.items() for other, cell in row["with"].items()]
    if plt is None or not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(bars)), 4))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [c["dram"] * 100 for _, c in bars], 0.4, label="both on DRAM")
    ax.bar([x + 0.2 for x in xs], [c["slow"] * 100 for _, c in bars], 0.4,
           label=f"both on the slow tier (+70 ns, {SLOW_BW_RATIOS[0]:g}x DRAM bandwidth)")
    ax.set_xticks(list(xs), [b for b, _ in bars], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("slowdown vs alone on DRAM (%)")
    ax.set_yscale("symlog", linthresh=10)
    ax.legend(fontsize=8)
    return _save(plt, fig, "Figure 7's shape, modelled (shared-bandwidth queue over measured traffic)", path)


def heat_maps(result: dict, path: Path) -> Path | None:
    """Figure 4: per workload, accesses per address bin (rows, in address order) per sampling
    period (columns), from the measured access sample."""
    plt = _pyplot()
    rows = [r for r in result["workloads"] if r.get("heat_map", {}).get("rows")]
    if plt is None or not rows:
        return None
    cols = min(7, len(rows))
    grid = -(-len(rows) // cols)
    fig, axes = plt.subplots(grid, cols, figsize=(2.6 * cols, 3.2 * grid), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, r in zip(axes.flat, rows, strict=False):
        ax.imshow(r["heat_map"]["rows"], aspect="auto", cmap="magma", interpolation="nearest", origin="lower")
        ax.set_title(r["name"], fontsize=8)
        ax.set_xlabel(f"period ({result['sample_ms']} ms)", fontsize=7)
        ax.set_ylabel(f"address bin ({r['heat_map']['pages_per_row']} sampled pages)", fontsize=7)
    return _save(plt, fig, "Figure 4's heat maps, on this machine (measured: the shim's access sample)", path)
