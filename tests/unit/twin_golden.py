"""The twin's headline tables, computed deterministically, and their golden files in tests/golden/twin/.

Every table is a plain JSON tree of numbers (rounded to SIG significant digits), built from the
same calls ``nearfaas twin report --quick`` makes (seed 1). ``check(name, table)`` compares a
fresh table with the checked-in file and lists every number that moved; with
``NEARFAAS_REGEN_GOLDEN=1`` in the environment it rewrites the file instead (then review the diff):

    NEARFAAS_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/test_twin_golden.py

The measured inputs (benchmarks/results/apps.json, invoke_overhead.json, cold_start.json) feed
these tables too: re-measuring them is a deliberate golden change like any other.
"""

from __future__ import annotations

import json
import math
import os
from functools import cache
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden" / "twin"
SIG = 6  # significant digits kept: float noise (summation order) passes, any model change fails
REGEN = os.environ.get("NEARFAAS_REGEN_GOLDEN", "") not in ("", "0")
SEED = 1  # the report's default seed
QUICK_SAMPLES = 1000  # the --quick Monte Carlo samples
QUICK_NODES = 20  # the --quick rack
_VOLATILE = {"label", "inputs", "wall_s", "events_per_s", "source", "generated", "machine"}


def sig(x: float, digits: int = SIG) -> float:
    return float(f"{x:.{digits - 1}e}")


def rounded(obj):
    """``obj`` as a JSON tree: floats to SIG digits (NaN -> None), tuples to lists, keys to str."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        return obj if math.isinf(obj) else sig(obj)
    if isinstance(obj, dict):
        return {str(k): rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalar
        return rounded(obj.item())
    raise TypeError(f"no golden form for {type(obj).__name__}")


def _numbers(obj, drop=_VOLATILE):
    """``obj`` without its labels, inputs and wall-clock fields (text and timing, not model numbers)."""
    if isinstance(obj, dict):
        return {k: _numbers(v, drop) for k, v in obj.items() if k not in drop}
    if isinstance(obj, (list, tuple)):
        return [_numbers(v, drop) for v in obj]
    return obj


# ------------------------------------------------------------------ the tables


@cache
def _evaluate(baseline: str = "paper") -> dict:
    from nearfaas.twin import e2e

    return e2e.evaluate(baseline=baseline)


def table_evaluate() -> dict:
    """The single-node headline in both modes (paper, the default, and measured-here): speedup,
    energy reduction and cost efficiency vs the CPU (per platform, and per app); requests per
    USD, CAPEX and energy per request."""
    out = {}
    for mode in ("paper", "measured-here"):
        ev = _evaluate(mode)
        out[mode.replace("-", "_")] = {
            "speedup_vs_cpu": ev["speedup_vs_cpu"],
            "energy_reduction_vs_cpu": ev["energy_reduction_vs_cpu"],
            "cost_efficiency_vs_cpu": ev["cost_efficiency_vs_cpu"],
            "cost_efficiency_vs_cpu_per_app": ev["cost_efficiency_vs_cpu_per_app"],
            "requests_per_usd": {p: r["requests_per_usd"] for p, r in ev["cost_efficiency"].items()},
            "capex_usd": {p: r["capex"]["total_usd"] for p, r in ev["cost_efficiency"].items()},
            "energy_j": {p: {a: {k: v for k, v in parts.items() if isinstance(v, float)} for a, parts in row.items()}
                         for p, row in ev["energy"].items()},
        }
    return rounded(out)


def table_breakdown() -> dict:
    """The runtime breakdown (results.json runtime_breakdown_s) and every term of every app on
    every platform (name, component, label, seconds, bytes): what ``nearfaas twin e2e`` prints
    (paper mode: the p95 request's terms)."""
    ev = _evaluate()
    out = {}
    for p, row in ev["breakdowns"].items():
        out[p] = {}
        for a, bd in row.items():
            out[p][a] = {
                "total_s": bd["total_s"],
                "by_component_s": bd["by_component_s"],
                "network_bytes": bd["network_bytes"],
                "stages": {s["name"]: [[t["name"], t["component"], t["label"], t["value_s"], t["bytes"]] for t in s["terms"]]
                           for s in bd["stages"]},  # a term per line: [name, component, label, seconds, bytes]
            }
    return rounded(out)


def table_sensitivity() -> dict:
    """The four sensitivity studies as ``twin report --quick`` runs them (paper mode, 1,000 samples, seed 1)."""
    from nearfaas.twin import sensitivity

    return rounded(_numbers(sensitivity.all_studies(samples=QUICK_SAMPLES, seed=SEED)))


def table_simulation() -> dict:
    """The rack-scale simulation of ``twin report --quick`` (paper mode): 20 platforms of each
    kind under the bursty 20-minute trace, both policies: the summary and the per-bin series."""
    from nearfaas.twin import report

    sim = report.simulate(QUICK_NODES, seed=SEED)
    return rounded({"service_means_s": sim["inputs"]["service_means_s"], "runs": _numbers(sim["runs"])})


def _engine_scenarios():
    from nearfaas.twin.sim import SimConfig, poisson

    svc = {("asset-damage-pre", "dscs"): ("exp", 0.2), ("asset-damage-pre", "cpu"): ("exp", 0.1),
           ("asset-damage-infer", "dscs"): ("lognormal", 0.3, 0.5), ("chatbot-infer", "cpu"): 0.4}
    return {
        # every policy decision path of a mixed rack: holds, fallbacks, a downed accelerator, expiry
        "auto-mixed": (SimConfig(storage_nodes=5, standard_nodes=1, compute_nodes=3, policy="auto", seed=7, keep_alive_s=3.0,
                                 services=svc, default_service=("exp", 0.2), accel_down=("storage-4",), link="dc-25g", bin_s=2.0,
                                 image_pull_s=0.1, model_load_s=0.2),
                       poisson([(0, 10), (10, 40)], 20, seed=7)),
        # overload: queues in the view, a bounded queue that rejects, an unhealthy node, cold starts
        "near-data-overload": (SimConfig(storage_nodes=4, compute_nodes=2, compute_slots=1, policy="near-data", seed=3,
                                         keep_alive_s=2.0, queue_in_view=True, queue_depth=15, default_service=("exp", 0.3),
                                         unhealthy=("compute-1",), accel_down=("storage-3",), image_pull_s=0.5, bin_s=1.0),
                               poisson([(0, 20), (10, 60)], 20, seed=3)),
        # no expiry (keep_alive inf), several CPU slots on storage nodes
        "compute-only-forever": (SimConfig(storage_nodes=3, compute_nodes=2, compute_slots=2, storage_cpu_slots=2,
                                           policy="compute-only", seed=11, keep_alive_s=math.inf, services=svc, bin_s=5.0),
                                 poisson([(0, 15), (5, 30), (15, 5)], 30, seed=11)),
    }


def table_sim_engine() -> dict:
    """The simulator engine alone on small racks that reach every branch of its event loop
    (queueing, rejection, keep-alive expiry, accelerator holds): summaries and series."""
    from nearfaas.twin.sim import Simulator

    out = {}
    for name, (cfg, wl) in _engine_scenarios().items():
        r = Simulator(cfg).run(wl)
        out[name] = {**_numbers(r.summary()), "series": r.series}
    return rounded(out)


TABLES = {
    "evaluate": table_evaluate,
    "breakdown": table_breakdown,
    "sensitivity": table_sensitivity,
    "simulation": table_simulation,
    "sim_engine": table_sim_engine,
}


# ------------------------------------------------------------------ files and comparison


def path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def load(name: str) -> dict:
    return json.loads(path(name).read_text())


def dumps(obj, indent: str = "") -> str:
    """JSON with one entry per line, and a list of plain values (a term, a series) on one line:
    a moved number is one line of the diff."""
    inner = indent + " "
    if isinstance(obj, dict) and obj:
        return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in obj.items()) + f"\n{indent}}}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in obj) + f"\n{indent}]"
    return json.dumps(obj)


def write(name: str, table) -> None:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    path(name).write_text(dumps(table) + "\n")


def _close(new, old) -> bool:
    # Both rounded to SIG digits: equal, or one unit in the last digit apart where the raw value
    # sat on a rounding edge and float noise tipped it.
    if new == old:
        return True
    if isinstance(new, float) and isinstance(old, (int, float)) and not isinstance(old, bool):
        return abs(new - old) <= 1.0001 * 10 ** (math.floor(math.log10(abs(old) or 1e-300)) - SIG + 1)
    return False


def diff(new, old, where: str = "") -> list[str]:
    """Every place where ``new`` and ``old`` differ, as 'path: old -> new'."""
    if isinstance(new, dict) and isinstance(old, dict):
        out = [f"{where}/{k}: missing (golden has it)" for k in old if k not in new]
        out += [f"{where}/{k}: new key (not in golden)" for k in new if k not in old]
        for k in new:
            if k in old:
                out += diff(new[k], old[k], f"{where}/{k}")
        return out
    if isinstance(new, list) and isinstance(old, list):
        if len(new) != len(old):
            return [f"{where}: length {len(old)} -> {len(new)}"]
        return [d for i, (a, b) in enumerate(zip(new, old, strict=True)) for d in diff(a, b, f"{where}[{i}]")]
    return [] if _close(new, old) else [f"{where}: {old!r} -> {new!r}"]


def check(name: str, table) -> None:
    """Assert ``table`` equals the golden file ``name`` (or rewrite it when REGEN)."""
    if REGEN:
        write(name, table)
        return
    if not path(name).exists():
        raise AssertionError(f"no golden file {path(name)}: run with NEARFAAS_REGEN_GOLDEN=1 to create it")
    moved = diff(table, load(name))
    if moved:
        shown = "\n  ".join(moved[:40]) + (f"\n  ... and {len(moved) - 40} more" if len(moved) > 40 else "")
        raise AssertionError(f"{len(moved)} number(s) of the twin's {name!r} table differ from {path(name)} "
                             f"(golden -> now):\n  {shown}\nIf the change is intended, regenerate: "
                             f"NEARFAAS_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/unit/test_twin_golden.py")
