"""How many gateways a rack needs: the rack simulation with a gateway tier of measured capacity.

Mechanism. ``benchmarks/gateways.py`` measures one gateway's throughput on this machine (warm
calls per second through one gateway process, label: measured). Every stage of a call passes a
gateway (the chain runner lives there), so one gateway routes ``capacity / 3`` three-stage DSCS
calls per second. ``project`` runs the rack simulation (twin/sim, the default 200-node rack:
100 ``dscs`` storage nodes and 100 compute nodes, the eight DSCS apps) at offered loads set
against that capacity, with 1, 4 and 16 gateways in front (``SimConfig.gateways``), and reports
per case the end-to-end latency, the gateway tier's utilisation and queueing, and whether the
tier or the nodes are the bottleneck (label: modelled).

Worked example: a gateway that routes 900 stages/s routes 300 calls/s. At 1,000 calls/s one
gateway is 333% loaded and its queue grows for the whole run (p99 in the seconds and rising);
four gateways are 83% loaded and add milliseconds; sixteen are 21% loaded, and what is left of
the latency is the nodes'.

Known caveats:
- Each gateway is one server of exponential service per stage: the measured capacity includes
  the proxying of the answer, and a gateway's concurrency (an event loop overlaps waiting on
  nodes) is folded into that capacity rather than modelled.
- The stages' gateway work is charged when the call arrives, not between stages: utilisation and
  queueing are right, the moment within a call they happen is not.
- The capacity was measured on this machine's cores, which the gateways shared with the nodes
  and the load generator; a gateway on a core of its own routes more.
"""

from __future__ import annotations

import math

from nearfaas.twin.sim import SimConfig, poisson, simulate
from nearfaas.twin.sim.engine import APP_KEYS

STAGES = 3  # every DSCS app is pre-processing -> inference -> notification
GATEWAY_COUNTS = (1, 4, 16)
LOAD_FACTORS = (0.7, 2.8, 11.2)  # offered load as a share of one gateway's call capacity: 70% of 1, 4 and 16 gateways
LABEL = ("modelled: the rack simulation (twin/sim) with a gateway tier whose per-stage service time is one over the "
         "measured capacity of one gateway")


def _bottleneck(result, tier: dict) -> str:
    """Where calls wait 10 ms or more on average: "gateways" (their queue), "nodes" (their
    queues, or calls rejected past the queue depth), both ("gateways+nodes"), or "none"."""
    node_wait = result.mean_wait_s - tier["mean_wait_s"]
    where = (["gateways"] if tier["mean_wait_s"] >= 0.01 else []) + (["nodes"] if result.rejected or node_wait >= 0.01 else [])
    return "+".join(where) or "none"


def project(stages_per_s: float, requests: int = 20_000, seed: int = 1, counts=GATEWAY_COUNTS,
            factors=LOAD_FACTORS, on_case=lambda case: None) -> dict:
    """The table for a gateway that routes ``stages_per_s`` (measured)."""
    if not stages_per_s > 0:
        raise ValueError(f"a gateway's capacity must be > 0 stages/s, got {stages_per_s}")
    calls_per_s = stages_per_s / STAGES
    cases = []
    for factor in factors:
        load = calls_per_s * factor
        for gateways in counts:
            cfg = SimConfig(gateways=gateways, gateway_service_s=1.0 / stages_per_s, keep_alive_s=math.inf, bin_s=60.0, seed=seed)
            r = simulate(poisson([(0, load)], 1e9, seed=seed, apps=APP_KEYS, max_requests=requests), cfg)
            tier = r.gateway
            case = {"offered_calls_per_s": round(load, 1), "gateways": gateways,
                    # rho: the work offered to the tier over what it can do (past 1 its queue only grows)
                    "gateway_offered_utilisation": round(load * STAGES / (gateways * stages_per_s), 3),
                    "gateway_utilisation": round(tier["utilisation"], 3),  # busy share over the whole run, drain included
                    "gateway_wait_ms_mean": round(tier["mean_wait_s"] * 1e3, 2), "gateway_queue_max": tier["max_queue"],
                    "latency_ms": {k: round(v * 1e3, 1) for k, v in r.latency.items()},
                    "completed": r.completed, "rejected": r.rejected,
                    "bottleneck": _bottleneck(r, tier)}
            cases.append(case)
            on_case(case)
    return {"label": LABEL, "rack": {"storage_nodes": 100, "compute_nodes": 100, "apps": list(APP_KEYS), "stages": STAGES},
            "gateway_stages_per_s": round(stages_per_s, 1), "gateway_calls_per_s": round(calls_per_s, 1),
            "requests_per_case": requests, "cases": cases}
