"""The record's parameter list and the text tables of ``nearfaas.twin.validate`` (split out of
that module to keep it under the size limit; it re-exports both names).

``parameters`` lists every parameter of the host device(s) and of the forms with its value, its
source and its status (ran: measured here by a named micro-benchmark; derived: arithmetic on
those); a unit test checks that no source says fitted or calibrated. ``table`` prints the apps
(hot loop, and the one-off figures beside), the seen held-out set and the fresh held-out set.
"""

from __future__ import annotations

from collections.abc import Iterable

from nearfaas.twin.cpu_model import FORMS


def parameters(bench: dict, threads: Iterable[int], overhead: dict | None = None) -> list[dict]:
    """Every parameter of the host device(s) with its value, source and status (for the record)."""
    from nearfaas.hw.devices import host
    from nearfaas.twin import cpu_model

    out = []
    for t in threads:
        d = host.device(bench, t)
        for k, s in d.specs.items():
            out.append({"threads": t, "name": k, "value": s.value, "source": s.source, "status": s.status})
        for k, e in d.efficiency.items():
            out.append({"threads": t, "name": f"efficiency.{k}", "value": {"compute": e.compute, "bandwidth": e.bandwidth},
                        "source": e.why, "status": "ran" if e.why.startswith("ran") else "derived"})
        dw = host.class_efficiency(bench, t)["dwconv"]
        out.append({"threads": t, "name": "efficiency.dwconv (refined form)", "value": {"compute": dw["compute"], "bandwidth": dw["bandwidth"]},
                    "source": dw["why"], "status": "ran"})
        rec = bench["threads"][str(t)]
        if rec.get("gemm_grid"):
            peak = host.peak_flops(bench, t)[0]
            out.append({"threads": t, "name": "gemm_grid efficiency (refined form)",
                        "value": {f"{g['M']}x{g['K']}x{g['N']}": round(g["flops"] / g["net_s"] / peak, 4) for g in rec["gemm_grid"]},
                        "source": (f"ran: ONNX Runtime MatMul [M,K]x[K,N] initializer, {t} thread(s), fraction of the derived peak "
                                   f"(net of the 1-node call cost); median over {bench.get('rounds', 1)} round(s)"), "status": "ran"})
        for k in ("launch_s", "driver_s"):
            s = getattr(d, k)
            out.append({"threads": t, "name": k, "value": s.value, "source": s.source, "status": s.status})
        if overhead and str(t) in overhead:
            o = overhead[str(t)]
            out.append({"threads": t, "name": "reorder_s_per_elem (runtime form)", "value": o["reorder_s_per_elem"], "source": o["source"],
                        "status": "ran"})
            e, why = cpu_model.dwconv_efficiency_net(bench, o, t)
            out.append({"threads": t, "name": "efficiency.dwconv net of reorders (runtime form)", "value": e, "source": why, "status": "ran"})
            if o.get("kernels"):
                out += kernel_parameters(bench, o, t)
    return out


def kernel_parameters(bench: dict, overhead: dict, t: int) -> list[dict]:
    """The runtime2 form's parameters (``nearfaas.twin.cpu_kernels``), each with how it was measured."""
    from nearfaas.hw.devices import host
    from nearfaas.twin import cpu_kernels as K

    k = overhead["kernels"]
    peak = host.peak_flops(bench, t)[0]
    src = k["source"]
    rr, rr_src = K.reorder_rate(overhead)
    return [
        {"threads": t, "name": "gemv weight-streaming rate, bytes/s by weight bytes (runtime2)",
         "value": {f"{g['weight_bytes'] / 2**20:g} MiB": round(g["bytes_s"]) for g in k["gemv"]},
         "source": f"{src}: MatMul [1,K]x[K,N] initializer, K x N in {[(g['K'], g['N']) for g in k['gemv']]}", "status": "ran"},
        {"threads": t, "name": "batched activation MatMul efficiency by h x M x K x N (runtime2)",
         "value": {f"{b['h']}x{b['M']}x{b['K']}x{b['N']}": round(b["flops"] / b["net_s"] / peak, 4) for b in k["bmm"]},
         "source": f"{src}: MatMul of two activations [h,M,K] x [h,K,N], fraction of the derived peak", "status": "ran"},
        *[{"threads": t, "name": f"{op} seconds per element by elements (runtime2)",
           "value": {str(x["elems"]): x["s_per_elem"] for x in k["scan"][op]},
           "source": f"{src}: one-op {op} graphs, square rows x cols (Transpose: a [1,r,4,c/4] head permute)", "status": "ran"}
          for op in K.SCAN_OPS],
        {"threads": t, "name": "efficiency.dwconv interior (runtime2)", "value": round(K.dwconv_interior_efficiency(peak, k), 4),
         "source": f"{src}: ({K.CHAIN_K} - 1) interior depthwise convs of a chain, (t_{K.CHAIN_K} - t_1) / {K.CHAIN_K - 1}, "
                   "reorders cancel", "status": "ran"},
        {"threads": t, "name": "direct NCHWc conv factor vs the MatMul grid (runtime2)",
         "value": round(K.direct_conv_factor(bench, t, k), 4),
         "source": f"{src}: median over the plain conv chains of interior conv efficiency / grid efficiency at the lowered M, K, N",
         "status": "derived"},
        {"threads": t, "name": "reorder_s_per_elem interior (runtime2)", "value": rr, "source": rr_src, "status": "ran"},
    ]


def table(result: dict) -> str:
    """The per-app and per-held-out-network error tables as text (every form, every thread count)."""
    cpu = result["cpu"]
    ts = list(cpu["threads"])
    head = "".join(f" | {t}t meas ms" + "".join(f" {f[:8]:>8} err" for f in FORMS) for t in ts)
    lines = [f"{'app':<19}{head}"]

    def row(name: str, rs: list[dict]) -> str:
        return f"{name:<19}" + "".join(f" | {r['measured_s'] * 1e3:10.3f}" + "".join(
            f" {r[f'error_{f}']:+12.1%}" if f"error_{f}" in r else " " * 13 for f in FORMS) for r in rs)
    for a in cpu["threads"][ts[0]]["apps"]:
        lines.append(row(a, [cpu["threads"][t]["apps"][a] for t in ts]))
    fm = cpu["form"]
    lines.append(f"{'one-off (1 t)':<19} | apps.json ms | one-off here ms | hot ms | {fm} error vs each")
    for a, r in cpu["threads"][ts[0]]["apps"].items():
        if "measured_one_off_apps_json_s" in r:
            lines.append(f"{a:<19} | {r['measured_one_off_apps_json_s'] * 1e3:10.3f} | {(r.get('remeasured_now_s') or float('nan')) * 1e3:10.3f} | "
                         f"{r['measured_s'] * 1e3:10.3f} | {r[f'error_one_off_{fm}']:+.1%} / "
                         f"{r.get('error_now', float('nan')):+.1%} / {r[f'error_{fm}']:+.1%}")
    lines.append(f"{'held-out (seen)':<19}")
    for n in cpu["held_out_models"][ts[0]]:
        lines.append(row(n, [cpu["held_out_models"][t][n] for t in ts]))
    fresh = cpu.get("held_out_fresh_models") or {}
    if fresh:
        lines.append(f"{'held-out (fresh)':<19}")
        for n in fresh[next(iter(fresh))]:
            lines.append(row(n, [fresh[t][n] for t in fresh]))
    for t in ts:
        s, h = cpu["threads"][t], cpu["held_out"][t]
        for f in FORMS:
            x = s if f == cpu["form"] else s.get(f)
            y = h if f == cpu["form"] else h["forms"].get(f)
            if x and y:
                lines.append(f"{t} thread(s), {f}: apps geomean |error| {x['geomean_abs_error']:.1%} (over 20 %: "
                             f"{', '.join(x['apps_over_target']) or 'none'}); held-out geomean {y['geomean_abs_error']:.1%}, "
                             f"worst {y['worst_abs_error']:.1%} ({y['worst']})")
    if cpu.get("held_out_fresh"):
        for f, y in {cpu["form"]: cpu["held_out_fresh"], **cpu["held_out_fresh"]["forms"]}.items():
            lines.append(f"fresh set, {f}: geomean {y['geomean_abs_error']:.1%}, worst {y['worst_abs_error']:.1%} ({y['worst']})")
    paired = cpu.get("held_out_paired")
    if paired:
        groups = [k for k in ("apps", *(x for x in paired if x.endswith("_set"))) if paired.get(k)]
        lines.append(f"paired rounds ({paired['rounds']}, {paired['form']}, error = median over rounds; judged on "
                     f"{' + '.join(paired.get('judged_on', groups))}): "
                     + "; ".join(f"{k} geomean {paired[k]['geomean_abs_error']:.1%}, worst {paired[k]['worst_abs_error']:.1%} "
                                 f"({paired[k]['worst']})" for k in groups)
                     + f" -> {'PASS' if paired['pass'] else 'miss'}; unpaired (cached kernels): "
                     + "; ".join(f"{k} {paired['unpaired'][k]['geomean_abs_error']:.1%} / worst {paired['unpaired'][k]['worst_abs_error']:.1%}"
                                 for k in groups if paired["unpaired"].get(k)))
        for k in groups[1:]:
            for n, e in paired[k]["per_model_error"].items():
                lo, hi = paired["error_range_over_rounds"][f"net:{n}"]
                lines.append(f"  {k[:-4]:<6} {n:<19} {e:+.1%} (rounds {lo:+.1%} .. {hi:+.1%})")
    lines.append(f"goal (judged on {cpu['goal_held_out'].get('judged_on', 'apps + held-out')}): "
                 + "; ".join(f"{f} {'PASS' if g['pass'] else 'miss'}" for f, g in cpu["goal_held_out"]["by_form"].items()))
    lines.append(f"band on the Xeon f2 ({cpu['form']} form, all thread counts): {cpu['band']}; compute-bound apps only: "
                 f"{cpu['band_compute_bound']} (overhead-bound: {', '.join(cpu['overhead_bound_apps']) or 'none'}); gpu: {result['gpu']}")
    return "\n".join(lines)


