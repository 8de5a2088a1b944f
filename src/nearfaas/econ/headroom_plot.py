"""The headroom search as a figure (PNG): step 1's sweep (the thesis's Figures 4.3 and 4.5) and
step 2's delay search (Figures 4.4 and 4.6). Every point is a measured run."""

from __future__ import annotations

from pathlib import Path

from nearfaas.econ.headroom import Step1, Step2, fmt_rate


def figure(step1: Step1, step2: Step2, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    series: dict[tuple[int, int], list] = {}
    for r in step1.runs:
        series.setdefault((r.knobs.threads, r.knobs.burst), []).append((r.knobs.size, r.delivered_bps / 1e9))
    for (threads, burst), pts in sorted(series.items()):
        pts.sort()
        a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{threads} thr, burst {burst}")
    c = step1.chosen.knobs
    a.scatter([c.size], [step1.chosen.delivered_bps / 1e9], s=160, facecolors="none", edgecolors="k", zorder=5,
              label="chosen (minimum config)")
    a.set_xscale("log", base=2)
    a.set_xlabel("packet size (bytes)")
    a.set_ylabel("delivered throughput (Gbit/s, measured)")
    a.set_title("step 1: sweep at delay 0")
    a.legend(fontsize=7)

    # Points, not a line: the search samples where it needs to, and nothing is known in between.
    runs = [step2.base, *step2.runs]
    for kept, colour in ((True, "tab:green"), (False, "tab:red")):
        pts = [(r.knobs.delay_ns / 1000, r.delivered_bps / 1e9) for r in runs if (r.delivered_bps >= step2.floor_bps) == kept]
        b.scatter([p[0] for p in pts], [p[1] for p in pts], color=colour, zorder=4,
                  label=f"runs that {'kept' if kept else 'lost'} the rate (measured)")
    b.axhline(step2.floor_bps / 1e9, color="grey", ls="--", label=f"rate to keep {fmt_rate(step2.floor_bps)}")
    b.axvline(step2.t_burst_ns / 1000, color="tab:red", ls=":", label=f"t_burst {step2.t_burst_ns / 1000:.1f} us")
    b.axvline(step2.max_delay_ns / 1000, color="k", ls="-.",
              label=f"max delay {step2.max_delay_ns / 1000:.1f} us -> headroom {100 * step2.headroom:.1f}%")
    b.set_xlabel("delay per burst (us)")
    b.set_ylabel("delivered throughput (Gbit/s, measured)")
    b.set_title(f"step 2: delay search ({step2.base.knobs.label()})")
    b.legend(fontsize=7)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
