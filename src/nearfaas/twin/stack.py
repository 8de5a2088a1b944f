"""The paper's system stack: OpenFaaS on Kubernetes (DSCS §2.2, Fig. 4), per warm invocation.
Every number is MODELLED: sourced ranges, not measurements of this machine.

A warm call of one chain stage crosses four pieces of software between the caller and the
function's body, each a stage of its own here so that each can be swept:

1. the OpenFaaS gateway: a Go reverse proxy that forwards the call to the function's service;
2. Kubernetes service routing: kube-proxy's DNAT and the pod network hop (veth / overlay);
3. the function's watchdog (of-watchdog in HTTP mode: one more loopback reverse proxy into
   a warm process; the classic fork-per-request watchdog would reload the model every call and
   is not what an ML function runs);
4. the language template (python3-http: a Flask/waitress request around the handler).

``overhead() -> (median_s, source)``: the sum of the four medians; ``tail() -> dict``: its
lognormal shape for the p95 sampling (``e2e.at_percentile``), from ``P99_OVER_P50``.

Worked example (nominal): 0.6 + 0.15 + 0.3 + 1.0 = 2.05 ms per stage invocation, three stages
per chain: 6.2 ms of a request's latency, and the same time of one CPU core's power in energy.

Why not our own gateway's overhead (``stack=measured-here``, 0.64 ms on this VM): it is one
Python proxy hop with no container networking and no watchdog, so it is not the paper's stack.

Known caveats:

* No published per-stage figure for OpenFaaS on Kubernetes was found in reach (the studies that
  measure it: Mohanty et al., CloudCom 2018; Li et al., WoSC 2019; Palade et al., SERVICES 2019;
  Decker et al., Algorithms 2022 -- their tables were not readable here). The ranges are
  assumptions bounded by what was found: Nightcore (Jia & Witchel, ASPLOS 2021) calls the
  platforms' runtime overheads "millisecond-scale"; openfaas/faas issue #1029 measured 44 ms end
  to end against a 0.49 ms function body on a laptop VM (an upper bound inflated by the VM's NAT,
  not a datacenter figure); our own Python gateway hop measures 0.64 ms here.
* Low load only (the paper's ``hey`` runs 10,000 sequential requests): queueing in the gateway
  under concurrency (openfaas/faas PR #1039: p50 0.7 s at 1,500 concurrent) is not modelled.
* Cold starts are not part of a warm call (the cold-start study, ``twin/sensitivity.py``).
"""

from __future__ import annotations

import math

from nearfaas.hw.sourced import Sourced

GATEWAY_PROXY_S = Sourced(
    0.6e-3,
    "assumption: one Go reverse-proxy hop with pod networking; bounded below by our Python gateway's measured 0.64 ms "
    "hop (benchmarks/results/invoke_overhead.json) being of the same kind, above by Nightcore's 'millisecond-scale' "
    "(ASPLOS'21) for a whole platform",
    "assumption",
    (0.2e-3, 1.0e-3),
)
SERVICE_ROUTING_S = Sourced(
    0.15e-3,
    "assumption: kube-proxy DNAT is in-kernel (microseconds); the cost is a veth/overlay round trip, same node "
    "0.05 ms to across nodes 0.25 ms",
    "assumption",
    (0.05e-3, 0.25e-3),
)
WATCHDOG_S = Sourced(
    0.3e-3,
    "assumption: of-watchdog HTTP mode (docs.openfaas.com/architecture/watchdog: keeps the process warm) = one more "
    "loopback HTTP proxy hop",
    "assumption",
    (0.1e-3, 0.5e-3),
)
TEMPLATE_S = Sourced(
    1.0e-3,
    "assumption: python3-http template (Flask + waitress, named in the OpenFaaS docs' performance guide): request "
    "parsing and response framing around the handler",
    "assumption",
    (0.5e-3, 1.5e-3),
)
P99_OVER_P50 = Sourced(
    2.5,
    "assumption: a warm call's p99 over its p50 through the whole stack at low load (Go and Python GC, conntrack); "
    "Nightcore (ASPLOS'21) reports platforms' tails at a few times their medians",
    "assumption",
    (1.5, 3.5),
)
STAGES = (("gateway", "GATEWAY_PROXY_S"), ("service routing", "SERVICE_ROUTING_S"), ("watchdog", "WATCHDOG_S"),
          ("template", "TEMPLATE_S"))  # names, read at each call: the uncertainty study swaps the module's figures
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def overhead() -> tuple[float, str]:
    """Median seconds one warm stage invocation spends in the stack, and where it comes from."""
    parts = [(name, float(globals()[attr].value)) for name, attr in STAGES]
    total = sum(v for _, v in parts)
    shown = " + ".join(f"{name} {v * 1e3:.2f}" for name, v in parts)
    return total, f"OpenFaaS on Kubernetes (twin/stack.py): {shown} = {total * 1e3:.2f} ms [modelled, sourced ranges]"


def tail() -> dict:
    """The stack's lognormal shape around its median (``e2e.at_percentile`` samples it)."""
    ratio = float(P99_OVER_P50.value)
    return {"sigma": math.log(ratio) / _Z99, "source": f"lognormal, p99/p50 = {ratio:g} (twin/stack.py P99_OVER_P50) [modelled]"}


def params() -> dict:
    return {name: globals()[attr].to_dict() for name, attr in (*STAGES, ("p99_over_p50", "P99_OVER_P50"))}
