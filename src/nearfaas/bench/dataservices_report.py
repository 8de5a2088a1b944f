"""The data-services benchmark's outputs (``bench.dataservices``): its headline, the printed
tables (policies per profile, Table 5.9 per case study, the push-back storm) and the plot. Every
line says which numbers are measured and which modelled."""

from __future__ import annotations

from pathlib import Path

from nearfaas.bench.dataservices import LINKED, MODELLED, POLICIES, PROFILES, STORM_K, TARGETS


def headline(result: dict) -> dict:
    return {"storage_cap": result["storage_cap"], "queries": result["queries"],
            **{p: {**{k: s[k] for k in ("correct_pct", "over_oracle_pct", "totals_s", "oracle_wins", "targets_met")},
                   "two_sides": {k: s["two_sides"][k] for k in ("correct_pct", "over_oracle_pct", "targets_met")}}
               for p, s in result["profiles"].items()},
            "storm_flip_k": {c: v["storm"]["flip_k"] for c, v in result["cases"].items()}, "label": LINKED}


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _scores(sc: dict) -> list[str]:
    t, met = sc["totals_s"], {k: "met" if v else "NOT met" for k, v in sc["targets_met"].items()}
    lines = [f"  engine picks the fastest side in {sc['correct']}/{sc['queries']} = {sc['correct_pct']:.1f}% "
             f"(target >= {TARGETS['correct_pct']:.0f}%: {met['correct_pct']}; within 5% of the fastest: "
             f"{sc['within_5pct_of_fastest']}); engine total {sc['over_oracle_pct']:+.2f}% vs oracle "
             f"(target <= {TARGETS['over_oracle_pct']:.0f}%: {met['over_oracle_pct']})"]
    for pol in POLICIES:
        vs = (t[pol] / t["oracle"] - 1) * 100 if t["oracle"] else 0.0
        lines.append(f"    {pol:<17} {t[pol]:>10.3f} s  {vs:>+9.2f}% vs oracle")
    wins = ", ".join(f"{c} {sc['oracle_wins'][c]}" for c in sc["sides"])
    picks = ", ".join(f"{c} {sc['engine_picks'][c]}" for c in sc["sides"])
    return [*lines, f"    oracle wins: {wins}; engine picks: {picks}"]


def table(result: dict) -> str:
    """The policies per profile, Table 5.9 per case, and the push-back storm, as text."""
    m, ns, sizes = result["models"], result["node_slowdown"], result["sizes"]
    lines = [f"{result['queries']} random template queries on {len(sizes)} tables of {min(sizes):,}-{max(sizes):,} rows; "
             f"storage node: {result['storage_cap']}",
             f"cost models: {m['path'] or 'given'} ({m['why']}; these trained up to {m['config'].get('max_rows'):,} rows, "
             f"{m['config'].get('samples')} samples, training {m['config'].get('training_s')} s, "
             f"{'trained in this run' if m['trained_now'] else 'loaded'})", f"latency totals: {LINKED}; engine: {MODELLED}", ""]
    for prof, s in result["profiles"].items():
        for title, sc in ((f"{prof}, offload vs push-back (the thesis's two sides)", s["two_sides"]),
                          (f"{prof}, offload vs partial vs push-back", s)):
            lines += [f"{title}:", *_scores(sc)]
        lines.append(f"  median |modelled - measured| per side {_fmt(s['prediction_median_abs_err_pct'], '.1f')}%")
    lines.append(f"node slowdown (node exec / host exec, measured, median): {_fmt(ns['measured_median'], '.2f')}x; "
                 f"{_fmt(ns['measured_median_within_one_period_quota'], '.2f')}x for queries within one CFS period's quota, "
                 f"{_fmt(ns['measured_median_beyond_it'], '.2f')}x beyond it (modelled {ns['modelled']:.2f}x); "
                 f"results identical on both sides: {result['results_agree']}/{result['queries']}")
    for cid, c in result["cases"].items():
        lines += ["", f"Table 5.9, query {cid} on {c['table_rows']:,} rows, dc-25g: {c['sql']}",
                  f"  {c['rows']:,} rows out (estimated {c['estimated_rows']:,.1f}); engine: {c['choice']['engine']}, "
                  f"faster measured: {c['choice']['oracle']}",
                  "  estimated = modelled (deserialization: no model term, the measurement, as the thesis prints it); "
                  "actual = measured (+ modelled link)",
                  f"  {'':<26}{'Offloaded':<44}{'Pushed-back'}",
                  f"  {'':<26}" + f"{'Estimated (us)':>16}{'Actual (us)':>16}{'Abs Diff':>12}" * 2]
        for r in c["table59"]:
            cells = [(_fmt(x["estimated_us"], ",.1f"), _fmt(x["actual_us"], ",.1f"), _fmt(x["abs_diff_pct"], ".2f") + "%")
                     for x in (r["offloaded"], r["pushed_back"])]
            lines.append(f"  {r['row']:<26}" + "".join(f"{a:>16}{b:>16}{d.replace('-%', '-'):>12}" for a, b, d in cells))
        st = c["storm"]
        lines.append(f"  push-back storm ({st['label']}); offload / partial / push-back:")
        for r in st["rows"]:
            modelled = " / ".join(_fmt(r[f"predicted_{s}_s"] and r[f"predicted_{s}_s"] * 1e3, "9.2f")
                                  for s in ("offload", "partial", "pushback"))
            measured = " / ".join(_fmt(r[f"{s}_s"] and r[f"{s}_s"] * 1e3, "9.2f") for s in ("offload", "partial", "pushback"))
            lines.append(f"    k={r['k']:<3} engine {r['engine']:<9} ({modelled} ms modelled)   "
                         f"measured {r['oracle']:<9} ({measured} ms)")
        lines.append(f"    moves off the node at k = engine: {st['flip_k']['engine']}, measured: {st['flip_k']['oracle']} "
                     f"(None: not within k <= {STORM_K[-1]})")
    return "\n".join([*lines, f"\nelapsed {result['elapsed_s']} s"])


def plot(result: dict, path: Path) -> Path | None:
    """Totals per policy per profile, and modelled vs measured (push-back - offload) per query;
    red: the engine picked another side than the fastest measured one."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, len(PROFILES), figsize=(11, 8))
    for j, prof in enumerate(PROFILES):
        t, ax = result["profiles"][prof]["totals_s"], axes[1][j]
        axes[0][j].bar(["offload", "push-back", "engine", "oracle"], [t[p] for p in POLICIES],
                       color=["#888", "#aaa", "#1f77b4", "#2ca02c"])
        axes[0][j].set(title=f"{prof}: total latency", ylabel="seconds (measured loopback + modelled link)")
        for right, style in ((True, {"s": 10, "label": "engine right"}), (False, {"s": 14, "c": "red", "label": "wrong"})):
            rs = [q for q in (r["profiles"][prof] for r in result["records"]) if (q["engine"] == q["oracle"]) == right]
            ax.scatter([(q["pushback_s"] - q["offload_s"]) * 1e3 for q in rs],
                       [(q["predicted_pushback_s"] - q["predicted_offload_s"]) * 1e3 for q in rs], **style)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set(xlabel="measured push-back - offload (ms)", ylabel="modelled push-back - offload (ms)",
               title=f"{prof}: > 0: offload is faster")
        ax.axhline(0, color="k", lw=0.5)
        ax.axvline(0, color="k", lw=0.5)
        ax.legend()
    fig.suptitle(f"Offload vs push-back, {result['queries']} queries; storage node {result['storage']['cpus']} core "
                 f"({result['storage_cap'].split(' (')[0]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
