"""Does the tier model predict a slowdown it did not see? DRAM latency raised on purpose, measured,
and each graph kernel's slowdown under it compared with ``tiersim.slowdown``'s prediction.

Method (everything measured here unless labelled modelled):
* **Raising latency.** ``membench load`` on the other core writes a 2 GiB buffer with
  non-temporal stores for ``step`` % of every millisecond (0 = no co-runner): it takes DRAM
  bandwidth, so every load that misses the caches waits longer, while it leaves the last-level
  cache alone (a co-runner that reads would evict the kernel's lines and change its miss count,
  which is not what a slower tier does). The kernel is pinned to core 0, the co-runner to core 1.
* **Measuring latency.** At each step, ``membench chase`` over ``CHASE_MIB`` on core 0 (a
  dependent pointer chase: one memory latency a step, page walks included) → lat(step).
  Δ(step) = lat(step) - lat(0) is the step's extra latency; fast = lat(0).
* **Measuring slowdowns.** Each kernel's plain time on core 0 at each step; slowdown(step) =
  median time(step) / median time(0) - 1. Rounds visit the steps in a rotated order, so drift
  over the run is spread over the steps instead of landing on the last.
* **Predicting** (modelled): ``tiersim.slowdown(boundness, 1.0, Δ, fast)``: all of the kernel's
  memory is "slow" at a step, so slow_share = 1; boundness is the one ``bench/porter.py``
  measures (cachegrind/callgrind LL data misses × fast / plain time), measured once, at step 0.

    rec = run(("native-pagerank", "native-bfs"), scale=1/4, rounds=3)
    rec["rows"]  # {workload, step, latency_ns, delta_ns, measured_slowdown, predicted_slowdown, relative_error}

Known caveats:
* **On this VM the co-runner does not raise the latency** (docs/memory.md, "The latency
  experiment"): at up to 18.6 GB/s, in either mode, the chase's medians move less than their
  own spread, so no step here tests the model; where a second NUMA node exists, binding the
  kernel's memory to it is the experiment to run instead.
* The co-runner's traffic also takes memory bandwidth the kernel may need: a streaming kernel is
  slowed by that, which a latency-only model does not price (the issue the experiment exists to
  find, not to hide).
* One machine, a shared VM: the other tenants move both the latency and the kernels' times;
  rounds and medians bound that, they do not remove it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path

from nearfaas.bench import memory_workloads as workloads
from nearfaas.bench import porter
from nearfaas.memory import tiersim

STEPS = (0, 30, 60, 100)  # the co-runner's busy share of each millisecond, %
CHASE_MIB = 1024
CHASE_STEPS = 2_000_000
LOAD_MIB = 2048
KERNEL_CPU, LOAD_CPU = 0, 1
TARGET_RELATIVE_ERROR = 0.20  # the graph kernels' goal: |predicted - measured| / measured slowdown


def pinned(cpu: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *argv]


class CoRunner:
    """``membench load`` at ``percent`` on ``LOAD_CPU`` for the ``with`` block (0: none); its
    record (achieved GB/s, busy share) is ``.record`` after the block."""

    def __init__(self, percent: int, mode: str = "nt"):
        self.percent, self.mode, self.proc, self.record = percent, mode, None, None

    def __enter__(self):
        if self.percent:
            argv = pinned(LOAD_CPU, [str(porter.membench()), "load", str(LOAD_MIB), str(self.percent), self.mode])
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self

    def __exit__(self, exc_type, *exc):
        if self.proc is None:
            return False
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # never left running behind the experiment
            out, err = self.proc.communicate()
        if exc_type is not None:
            return False  # the block's own error is the one to see, not the co-runner's end
        if self.proc.returncode != 0 or not out.strip():
            raise RuntimeError(f"the co-runner failed (exit {self.proc.returncode}): {err.strip()[-300:]}")
        self.record = json.loads(out.strip().splitlines()[-1])
        return False


def latency_ns() -> float:
    out = subprocess.run(pinned(KERNEL_CPU, [str(porter.membench()), "chase", str(CHASE_MIB), str(CHASE_STEPS)]),
                         capture_output=True, text=True, timeout=300, check=True)
    return float(json.loads(out.stdout)["ns_per_access"])


def kernel_s(name: str, scale: float) -> float:
    out = subprocess.run(pinned(KERNEL_CPU, workloads.command(name, scale)), capture_output=True, text=True, timeout=1800,
                         check=False)
    if out.returncode != 0:
        raise RuntimeError(f"workload {name} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def rows(times: dict, lats: dict, bound: dict) -> list[dict]:
    """The validation table from medians: per workload and step, measured and predicted slowdown.
    ``times``: {name: {step: [s, ...]}}; ``lats``: {step: [ns, ...]}; ``bound``: {name: boundness}."""
    lat = {k: statistics.median(v) for k, v in lats.items()}
    fast = lat[0]
    out = []
    for name, by_step in times.items():
        base = statistics.median(by_step[0])
        for step, ts in sorted(by_step.items()):
            if step == 0:
                continue
            measured = statistics.median(ts) / base - 1
            delta = max(lat[step] - fast, 0.0)
            b = bound.get(name)
            predicted = tiersim.slowdown(b, 1.0, delta, fast) if b is not None else None
            out.append({"workload": name, "step_pct": step, "latency_ns": round(lat[step], 2), "delta_ns": round(delta, 2),
                        "measured_slowdown": round(measured, 4),
                        "predicted_slowdown": None if predicted is None else round(predicted, 4),
                        "relative_error": None if predicted is None or measured <= 0 else round((predicted - measured) / measured, 4),
                        "within_target": None if predicted is None or measured <= 0
                        else abs(predicted - measured) <= TARGET_RELATIVE_ERROR * measured})
    return out


def run(names=("native-pagerank", "native-bfs"), scale: float = 0.25, rounds: int = 3, steps=STEPS, boundness: bool = True,
        mode: str = "nt", progress=None) -> dict:
    """The experiment (module docstring). Needs two CPUs and taskset."""
    say = progress or (lambda m: None)
    if (os.cpu_count() or 1) < 2:
        raise RuntimeError("the latency experiment needs two CPUs: the kernel on one, the co-runner on the other")
    if mode not in ("nt", "rw"):
        raise ValueError(f"mode={mode!r}: nt (non-temporal stores, the default) or rw (reads and writes through the caches)")
    if 0 not in steps:
        raise ValueError("steps must include 0 (no co-runner): the slowdowns are relative to it")
    times: dict[str, dict[int, list[float]]] = {n: {s: [] for s in steps} for n in names}
    lats: dict[int, list[float]] = {s: [] for s in steps}
    load: dict[int, list[dict]] = {s: [] for s in steps}
    for r in range(rounds):
        order = list(steps[r % len(steps):]) + list(steps[: r % len(steps)])
        for step in order:
            say(f"round {r + 1}/{rounds}: co-runner at {step} %")
            with CoRunner(step, mode) as co:
                lats[step].append(latency_ns())
                for name in names:
                    times[name][step].append(kernel_s(name, scale))
            if co.record:
                load[step].append(co.record)
    fast = statistics.median(lats[0])
    bound: dict[str, float | None] = {}
    detail: dict[str, dict] = {}
    if boundness:
        folder = Path(tempfile.mkdtemp(prefix="nearfaas-latency-"))
        for name in names:
            say(f"{name}: memory-boundness (cache simulation)")
            detail[name] = porter.boundness(name, scale, fast, statistics.median(times[name][0]), folder)
            bound[name] = detail[name]["boundness"]
    return {"benchmark": "porter_latency", "scale": scale, "rounds": rounds, "steps_pct": list(steps), "co_runner_mode": mode,
            "graph_scale": {n: workloads.native_graph_scale(n, scale) for n in names if n in workloads.NATIVE},
            "latency_ns_by_step": {str(k): v for k, v in lats.items()}, "kernel_s_by_step": {n: {str(k): v for k, v in t.items()} for n, t in times.items()},
            "co_runner_by_step": {str(k): v for k, v in load.items() if v}, "boundness": detail,
            "rows": rows(times, lats, bound), "target_relative_error": TARGET_RELATIVE_ERROR,
            "labels": {"latency_ns_by_step": "measured: pointer chase on the kernel's core, co-runner on the other",
                       "kernel_s_by_step": "measured: the kernel's own timer, pinned to one core",
                       "measured_slowdown": "measured: median time at the step / median time with no co-runner - 1",
                       "predicted_slowdown": "modelled: tiersim.slowdown(boundness, 1.0, delta, fast) with the measured boundness"}}
