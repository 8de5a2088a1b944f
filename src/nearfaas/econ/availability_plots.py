"""The thesis's Figures 3.13-3.18 from a sweep of the availability model (econ/availability.py):
heat maps of the relative benefit over (m, n) with c = n and over (m, c) with n = 12, for HDDs
(f = 2) and SSDs (f = 0.06), and the m = 10 slices. All modelled."""

from __future__ import annotations

from pathlib import Path

FAILURE_RATIOS = {2.0: "HDD, f = 2", 0.06: "SSD, f = 0.06"}


def figures(rows: list[dict], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    for col, f in enumerate(FAILURE_RATIOS):
        _heat(axes[0][col], [r for r in rows if r["f"] == f and r["c"] == r["n"]], "n", f"c = n, {FAILURE_RATIOS[f]}", fig)
        _heat(axes[1][col], [r for r in rows if r["f"] == f and r["n"] == 12], "c", f"n = 12, {FAILURE_RATIOS[f]}", fig)
    fig.suptitle("Relative benefit P_gp / P_es of embedded storage nodes (modelled, thesis eq. 3.12)")
    out.append(out_dir / "availability_heatmaps.png")
    fig.savefig(out[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, axis, fixed in ((axes[0], "n", lambda r: r["c"] == r["n"]), (axes[1], "c", lambda r: r["n"] == 12)):
        for f, label in FAILURE_RATIOS.items():
            pts = sorted((r[axis], r["relative_benefit"]) for r in rows if r["m"] == 10 and r["f"] == f and fixed(r))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xlabel(axis + (" (c = n)" if axis == "n" else " (n = 12)"))
        ax.set_ylabel("relative benefit")
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.legend()
        ax.set_title(f"m = 10 (thesis Figure {'3.17' if axis == 'n' else '3.18'})")
    out.append(out_dir / "availability_m10.png")
    fig.savefig(out[-1], dpi=110)
    plt.close(fig)
    return out


def _heat(ax, rows: list[dict], y: str, title: str, fig) -> None:
    import matplotlib.colors as colors

    xs, ys = sorted({r["m"] for r in rows}), sorted({r[y] for r in rows})
    grid = [[next((r["relative_benefit"] for r in rows if r["m"] == x and r[y] == yy), float("nan")) for x in xs] for yy in ys]
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", norm=colors.LogNorm(),
                   extent=(xs[0] - 0.5, xs[-1] + 0.5, -0.5, len(ys) - 0.5))
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    ax.set_xlabel("m (servers)")
    ax.set_ylabel(y)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="P_gp / P_es")


def cluster_figure(result: dict, path: Path) -> Path:
    """`nearfaas twin availability`: P(loss | k storage nodes fail) per scheme (modelled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    for name, s in result["schemes"].items():
        ks = sorted(int(k) for k in s["loss_given_k_failures"])
        ax.plot(ks, [s["loss_given_k_failures"][str(k)] for k in ks], marker="o",
                label=f"{name}: {s['replica_sets']} node sets, P(loss) {s['p_loss']:.2e}")
    ax.set_xlabel("storage nodes failed at once")
    ax.set_ylabel("P(some object lost)")
    ax.set_ylim(0, 1.05)
    ax.legend()
    ax.set_title(f"{result['cluster']}: {result['storage_nodes']} storage nodes, {result['factor']} copies (modelled)")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
