"""OpenFaaS autoscaling: a function's ``replicas`` follow its load between
``com.openfaas.scale.min`` and ``com.openfaas.scale.max``, as OpenFaaS users configure it.

Labels (OpenFaaS's names): ``com.openfaas.scale.type`` is ``rps`` (calls per second, the
default, what OpenFaaS CE's alert rule watches), ``capacity`` (calls in flight) or ``cpu`` (CPU
used, in millicores as OpenFaaS Pro reads it: 1000 = one core busy); ``com.openfaas.scale.target``
is the load one replica should carry (default 5 for rps, CE's alert threshold, 1 for capacity,
1000 for cpu); ``com.openfaas.scale.target-proportion`` (default 0.9) scales up before replicas
are quite full. A scale by hand (``POST /system/scale-function``) stands until load measured
after it says otherwise. ``com.openfaas.scale.zero`` / ``zero-duration`` stay the idler's
(gateway/instances.py ``reap_idle``); a function at zero stays there until a call arrives.

Every ``interval_s`` the load over the last ``window_s`` is measured (the gateway's own counts:
calls started less those answered 5xx, as OpenFaaS CE's rule counts only code 200, so a function
failing fast is not scaled up by its failures; and calls in flight or queued; for ``cpu``, the CPU time its instances' cgroups
report in the nodes' health answers, every 0.5 s) and the wanted replicas are
``ceil(load / (target * proportion))`` clamped to [min, max]. Up at once; down only once the
wanted count has stayed lower for ``down_after_s`` (no flapping on a pause between bursts), or
for the function's ``x-nearfaas.keep_alive`` when that is shorter (the idle time it allows a
surplus instance).
The pool then starts or drains instances (``InstancePool.scale``); ``replicas`` in the REST API
is the desired count, ``availableReplicas`` the warm ones.

Worked example: min 1, max 4, type rps, target 5: 10 calls/s for 5 s -> load 10 -> wants
ceil(10 / 4.5) = 3 -> replicas 3 within a tick; the load stops -> wants 1 -> after 10 s at 1,
replicas 1 and two instances drain.

Metrics: ``nearfaas_autoscale_desired_replicas{function_name}`` and
``nearfaas_autoscale_decisions_total{function_name,direction}`` (measured).

Known caveats:
- Calls that go straight to the fast-path executor are not workers' load: such functions are
  never scaled here.
- ``cpu`` needs each instance in a cgroup of its own (isolation on, or an image function's
  container): unjailed Python workers report no CPU time, so a cpu-scaled function there never
  scales up on load. The CPU an instance used between its node's last report and its end is
  not counted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

from prometheus_client import Counter, Gauge

LABEL_TYPE = "com.openfaas.scale.type"
LABEL_TARGET = "com.openfaas.scale.target"
LABEL_PROPORTION = "com.openfaas.scale.target-proportion"
TYPES = {"rps": 5.0, "capacity": 1.0, "cpu": 1000.0}  # type -> default target per replica (cpu: millicores)


def check_labels(labels: dict) -> str | None:
    """What is wrong with a deployment's scaling labels (for a 400 naming the label), or None."""
    kind = labels.get(LABEL_TYPE, "rps")
    if kind not in TYPES:
        return f"labels.{LABEL_TYPE}: {kind!r} is not a scaling type here; use rps, capacity or cpu"
    for label, low in ((LABEL_TARGET, 0.0), (LABEL_PROPORTION, 0.0)):
        if label in labels:
            try:
                value = float(labels[label])
            except (TypeError, ValueError):
                value = -1.0
            if not value > low or (label == LABEL_PROPORTION and value > 1.0):
                bound = "a number in (0, 1]" if label == LABEL_PROPORTION else "a positive number"
                return f"labels.{label}: must be {bound}, not {labels[label]!r}"
    return None


def wanted(load: float, labels: dict, low: int, high: int) -> int:
    kind = labels.get(LABEL_TYPE, "rps")
    target = float(labels.get(LABEL_TARGET, TYPES.get(kind, 5.0))) * float(labels.get(LABEL_PROPORTION, 0.9))
    return max(low, min(high, math.ceil(load / target) if load > 0 else low))


class Autoscaler:
    def __init__(self, pool, registry, *, interval_s: float = 1.0, window_s: float = 5.0, down_after_s: float = 10.0):
        self.pool = pool
        self.interval_s, self.window_s, self.down_after_s = interval_s, window_s, down_after_s
        self.desired = Gauge("nearfaas_autoscale_desired_replicas", "Replicas the autoscaler wants per function",
                             ["function_name"], registry=registry)
        self.decisions = Counter("nearfaas_autoscale_decisions", "Scaling decisions by direction (measured load)",
                                 ["function_name", "direction"], registry=registry)
        self._samples: dict[str, deque] = {}  # name -> (time, calls started, calls in flight or queued)
        self._lower_since: dict[str, float] = {}

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.tick()

    def load(self, state, now: float) -> float:
        samples = self._samples.setdefault(state.name, deque())
        while samples and samples[0][0] < state.scaled_by_hand:  # scaled by hand: what came before is no guide
            samples.popleft()
        busy = sum(i.inflight for i in state.instances.values()) + state.waiting
        counted = state.invocations - state.failed  # calls that are load: not those answered 5xx
        samples.append((now, counted, busy, state.cpu_seconds))
        while len(samples) > 2 and now - samples[1][0] >= self.window_s:
            samples.popleft()
        kind = state.spec.get("labels", {}).get(LABEL_TYPE, "rps")
        if kind == "capacity":
            return sum(s[2] for s in samples) / len(samples)
        first = samples[0]
        span = now - first[0]
        if span <= 0:
            return 0.0
        if kind == "cpu":
            return (state.cpu_seconds - first[3]) / span * 1000.0  # millicores
        return (counted - first[1]) / span

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for name in [n for n in self._samples if n not in self.pool.functions]:
            del self._samples[name]
            self._lower_since.pop(name, None)
        for state in list(self.pool.functions.values()):
            if (state.spec.get("x") or {}).get("target") in ("fastpath", "stream"):
                continue
            load = self.load(state, now)
            if load == 0 and state.desired == 0:
                continue  # scaled to zero by the idler: a call brings it back, not the autoscaler
            low, high = max(int(state.spec.get("scale_min", 1)), 1), int(state.spec.get("scale_max", 5))
            want = wanted(load, state.spec.get("labels") or {}, low, high)
            self.desired.labels(state.name).set(want if want > state.desired else state.desired)
            if want > state.desired:
                self._decide(state, want, "up")
            elif want < state.desired and state.scaling_up():
                # A scale-up still bringing instances up (by hand or by load: its reconciliation
                # holds the function's scaling lock) is not undone before it is done: with
                # keep_alive 1 s a loaded host's slow cold starts had a hand-made scale to 3
                # taken back to 1 while the instances were still starting.
                self._lower_since.pop(state.name, None)
            elif want < state.desired:
                since = self._lower_since.setdefault(state.name, now)
                # x-nearfaas.keep_alive, when shorter, says how long surplus idle instances may stay
                if now - since >= min(self.down_after_s, state.options.keep_alive):
                    self._decide(state, want, "down")
                    self.desired.labels(state.name).set(want)
            else:
                self._lower_since.pop(state.name, None)

    def _decide(self, state, want: int, direction: str) -> None:
        self._lower_since.pop(state.name, None)
        self.decisions.labels(state.name, direction).inc()
        asyncio.get_running_loop().create_task(self.pool.scale(state.name, want))
        state.desired = want  # what GET /system/function reports at once
