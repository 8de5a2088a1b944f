"""The cluster file's ``fastpath:`` section: the fast-path executor (docs/fastpath.md), started
with the cluster like a node. Kept apart from spec/cluster.py, which imports it, so each stays
small; the defaults live in ``FastpathSpec`` and default_cluster.yml documents each field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import Collector, check_unknown_keys, parse_memory, read_mapping, short_repr

FASTPATH_ENABLED = ("auto", "true", "false")
FASTPATH_SCHED = ("drr", "fifo")
FASTPATH_POLL = ("adaptive", "spin", "block")
# fastpath.memory's bounds: the executor's smallest pool (fastpath/src/lambda.rs Pool::MIN_MEMORY,
# 3 slots of 16 MiB for each of its 3 engines) and 1 TiB.
MIN_MEMORY = 3 * (16 << 20) * 3
MAX_MEMORY = 1 << 40
# The executor's memory besides its wasm instances' linear memory, on top of fastpath.memory in
# its cgroup's limit: TCP frames being read (256 connections x 2 MiB, --max-connections and
# --max-frame as the launcher passes them) and 256 MiB for compiled code, thread and fiber
# stacks, stream buffers and the rest.
EXECUTOR_HEADROOM = 256 * (2 << 20) + (256 << 20)


@dataclass
class FastpathSpec:
    """The fast-path executor (docs/fastpath.md), started with the cluster like a node."""

    enabled: str = "auto"            # auto: when its binary is built (make setup); true: required; false: never
    workers: int = 1                 # run-to-completion worker threads
    sched: str = "drr"               # weighted fair queueing between lambdas ("fifo" for comparisons)
    queue_depth: int = 1024          # per-lambda queue; beyond it requests are answered OVERLOADED
    pin: bool = True                 # pin each worker thread to a core (λ-NIC's cores run nothing else)
    poll: str = "adaptive"           # how idle workers wait: adaptive (spin a learnt budget, then block), spin, block
    slice_us: int = 50               # wasm calls run in slices of this many µs (fastpath/src/slice.rs); 0: to completion
    tcp_idle_ms: int = 5000          # a TCP connection with nothing in flight, silent this long, is closed (issue 39)
    max_connections_per_peer: int = 128  # TCP connections one peer IP may hold of the executor's 256 (issue 39)
    # A lambda's weight and timeout_ms are the deployer's wish and the operator's to grant: a
    # deployer's weight-1000, 60 s looping lambda took 1000 of every 1001 slices from every other
    # tenant's lambdas (red team, issue 39). Deploys asking for more are refused naming these.
    max_weight: int = 8
    max_timeout_ms: int = 1000
    # Memory (red team round 5, N2): every wasm lambda kept an instance of up to 16 MiB and the
    # executor, in no limited cgroup, grew by 16 MiB per lambda a tenant deployed and called.
    # ``memory`` sizes its instance pools (memory / 16 MiB slots, fastpath/src/lambda.rs Pool;
    # a full pool evicts an idle instance) and, with EXECUTOR_HEADROOM, limits its cgroup; the
    # nodes' default workers_memory leaves it out. A namespace may have at most
    # ``max_functions_per_namespace`` functions on the executor (lambdas and stream functions).
    memory: int = 1 << 30
    max_functions_per_namespace: int = 64

    def cgroup_limit(self) -> int:
        """The executor's memory cgroup limit: its pools' budget and its headroom."""
        return self.memory + EXECUTOR_HEADROOM


def read_fastpath(value: Any, c: Collector) -> FastpathSpec:
    m = read_mapping(value, "fastpath", c)
    spec = FastpathSpec()
    if m is None:
        return spec
    check_unknown_keys(m, {"enabled", "workers", "sched", "queue_depth", "pin", "poll", "slice_us", "tcp_idle_ms",
                           "max_connections_per_peer", "max_weight", "max_timeout_ms", "memory", "max_functions_per_namespace"},
                      "fastpath", c, error=True)
    poll = m.get("poll", spec.poll)
    if poll not in FASTPATH_POLL:
        c.error("fastpath.poll", f"must be adaptive, spin or block, got {short_repr(poll)}",
                "write poll: adaptive (spin a budget learnt from the gaps between requests, then block)")
    else:
        spec.poll = poll
    if "pin" in m:
        if not isinstance(m["pin"], bool):
            c.error("fastpath.pin", f"must be true or false, got {short_repr(m['pin'])}", "write pin: true")
        else:
            spec.pin = m["pin"]
    enabled = str(m.get("enabled", "auto")).lower()
    if enabled not in FASTPATH_ENABLED:
        c.error("fastpath.enabled", f"must be auto, true or false, got {short_repr(m.get('enabled'))}",
                "write enabled: auto (start it when it is built)")
    else:
        spec.enabled = enabled
    sched = m.get("sched", "drr")
    if sched not in FASTPATH_SCHED:
        c.error("fastpath.sched", f"must be drr or fifo, got {short_repr(sched)}", "write sched: drr (weighted fair queueing)")
    else:
        spec.sched = sched
    for key, lo, hi in (("workers", 1, 64), ("queue_depth", 1, 1_000_000), ("tcp_idle_ms", 1, 3_600_000),
                        ("max_connections_per_peer", 1, 256), ("max_weight", 1, 1000), ("max_timeout_ms", 1, 60_000),
                        ("max_functions_per_namespace", 1, 100_000)):
        if key in m:
            v = m[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                c.error(f"fastpath.{key}", f"must be a whole number from {lo} to {hi}, got {short_repr(v)}", f"write e.g. {key}: {getattr(spec, key)}")
            else:
                setattr(spec, key, v)
    if "slice_us" in m:
        v = m["slice_us"]
        if isinstance(v, bool) or not isinstance(v, int) or not (v == 0 or 10 <= v <= 1_000_000):
            c.error("fastpath.slice_us", f"must be 0 or a whole number of microseconds from 10 to 1000000, got {short_repr(v)}",
                    "write slice_us: 50 (a light lambda waits about one slice behind a heavy call), or 0 to run calls to completion")
        else:
            spec.slice_us = v
    if "memory" in m:
        _read_memory(m["memory"], spec, c)
    return spec


def _read_memory(value: Any, spec: FastpathSpec, c: Collector) -> None:
    try:
        size = parse_memory(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else -1
    except ValueError:
        size = -1
    if not MIN_MEMORY <= size <= MAX_MEMORY:
        c.error("fastpath.memory", f"must be a memory quantity from 144Mi to 1Ti, got {short_repr(value)}",
                "write e.g. memory: 1Gi (the wasm instances' memory, all together: 64 slots of 16 MiB; the executor's "
                "cgroup gets it and 768Mi more; the nodes' default workers_memory leaves both out)")
    else:
        spec.memory = size
