"""Text tables for ``nearfaas hw dse`` and ``nearfaas hw report`` (every number is modelled)."""

from __future__ import annotations

from .dse import SweepResult


def report_table(rep: dict) -> str:
    dp = rep["design_point"]
    lines = [
        f"design point {dp['name']} ({dp['rows']}x{dp['cols']} PEs, {dp['sram_kib'] / 1024:g} MiB SRAM, "
        f"{dp['dram'].upper()} {dp['dram_gbps']:g} GB/s, {dp['clock_ghz']:g} GHz, {dp['technology_nm']:g} nm, "
        f"{dp['dtype']}, batch {dp['batch']}, {dp['dataflow']}) — {rep['label']}",
        f"area {dp['area_mm2']:.2f} mm² (modelled); peak accelerator power {dp['peak_accel_w']:.2f} W (TDP-style: all PEs and lanes busy, no DRAM; modelled)",
        f"{'model':<13} {'throughput':>22} {'latency ms':>11} {'accel W':>8} {'DRAM W':>8} {'total W':>8} {'energy/inf mJ':>14} {'of it DRAM':>10}",
    ]
    for r in rep["models"]:
        tp = f"{r['throughput']:,.1f} {r['throughput_unit']}"
        lines.append(
            f"{r['model']:<13} {tp:>22} {r['latency_s'] * 1e3:>11.4f} {r['accel_w']:>8.3f} {r['dram_w']:>8.3f} "
            f"{r['total_w']:>8.3f} {r['energy_total_j'] * 1e3:>14.4f} {r['energy_dram_j'] * 1e3:>10.4f}"
        )
    lines.append("all values modelled (nearfaas.hw: dsa-mode timing, aladdin energy and area), not measured")
    return "\n".join(lines)


def dse_summary(res: SweepResult) -> str:
    lines = [
        f"swept {len(res.configs)} configs x {len(res.models)} models = {len(res.points)} points (modelled)",
        f"feasibility and the power axis use the {res.power} accelerator power (DRAM not counted)",
        f"power-throughput Pareto frontier: {len(res.power_frontier)} configs; area-throughput: {len(res.area_frontier)} configs",
    ]
    for b, o in res.budgets.items():
        if o is None:
            lines.append(f"budget {b}: no feasible configuration")
        else:
            lines.append(
                f"budget {b}: best {o['name']} geomean {o['geomean_inferences_per_s']:,.1f} inf/s, "
                f"accel peak {o['peak_accel_w']:.2f} W / batch-1 average {o['max_accel_w']:.2f} W (max over models), DRAM {o['max_dram_w']:.2f} W, area {o['area_mm2']:.1f} mm²"
            )
    if res.optimum:
        o = res.optimum
        lines.append(f"chosen optimum ({res.budget_w:g} W): {o['name']} — {res.reason}")
        lines.append(f"  on power frontier: {o['on_power_frontier']}, on area frontier: {o['on_area_frontier']}")
        lines.append("  per model: " + ", ".join(f"{m} {o[f'{m}_per_s']:,.1f}" for m in res.models))
    else:
        lines.append(res.reason)
    return "\n".join(lines)
