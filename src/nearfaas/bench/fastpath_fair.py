"""Fairness in the fast path, measured (issue 25): a light lambda's latency alone and beside a
heavy lambda that keeps the one worker busy, under three schedulers side by side —

  drr+slices   deficit round-robin, wasm calls preempted every `slice_us` (fastpath/src/slice.rs)
  drr          deficit round-robin, calls run to completion (`--slice-us 0`)
  fifo         one queue in arrival order, calls run to completion

— and what slicing costs a call that never needs it (`slice_cost`). Every number is measured.

The heavy lambdas differ in what makes the light one wait: gray's calls are short (tens of µs)
but its 64 KiB datagrams queue in the one UDP socket ahead of the light request (ingress the
scheduler cannot reorder); web2's cost no more than the light lambda's, 256 at a time; burn's
run for milliseconds each, the case slicing exists for.
"""

from __future__ import annotations

import threading
import time

from nearfaas.bench.fastpath_load import BURN_TIMEOUT_MS, PAYLOAD_BYTES, WASM, deploy_all, load, num, summarize
from nearfaas.fastpath.executor import Executor

#: The slice of the sliced configuration (the executor's default, fastpath/src/slice.rs).
SLICE_US = 50
#: The slices `slice_sweep` compares beside burn: shorter slices bound the light lambda's wait
#: more tightly and cost the heavy lambda more yields.
SWEEP_US = (20, 50, 100, 0)
SCHEDULERS = {"drr+slices": {"sched": "drr", "slice_us": SLICE_US},
              "drr": {"sched": "drr", "slice_us": 0},
              "fifo": {"sched": "fifo", "slice_us": 0}}
#: burn's payload: 20,000 rounds over 64 bytes, about 2 ms of one core per call (measured in
#: `slice_cost`); the load generator sends it as text.
BURN_PAYLOAD = b"20000 " + b"nearfaas-fairness-burn-" * 2 + b"0123456789abcdefgh"

# The heavy lambda keeps the one worker busy all the time. Its outstanding count also sets how many
# of its datagrams can sit ahead of a light request in the executor's one UDP socket.
HEAVY = {"gray16k@16": {"id": WASM["gray"], "outstanding": 16, "payload_bytes": 16_000,
                        "what": "gray on 16,000-byte UDP payloads (4,000 pixels each), 16 outstanding"},
         "gray64k@64": {"id": WASM["gray"], "outstanding": 64, "payload_bytes": 65_000,
                        "what": "gray on 65,000-byte UDP payloads (16,250 pixels each), 64 outstanding"},
         "web2@256": {"id": WASM["web2"], "outstanding": 256, "payload_bytes": PAYLOAD_BYTES,
                      "what": "web2 with 256 outstanding (the same cost per request as the light lambda)"},
         "burn@4": {"id": WASM["burn"], "outstanding": 4, "payload": BURN_PAYLOAD,
                    "what": "burn, about 2 ms of compute per call, 4 outstanding (long calls: what slicing is for)"}}


def _heavy_load(ex: Executor, h: dict, seconds: float, poll: str) -> dict:
    return load(ex.udp_addr, [h["id"]], h["outstanding"], seconds, 0.0, payload=h.get("payload"),
                payload_bytes=h.get("payload_bytes", PAYLOAD_BYTES), match="fifo",
                timeout_ms=BURN_TIMEOUT_MS if h["id"] == WASM["burn"] else 1000, poll=poll)


def fairness(dur: float, warm: float, reps: int, progress, heavy_poll: str = "block", light_poll: str = "block",
             executor_poll: str = "adaptive") -> dict:
    """This measures the executor's scheduling, so both load generators block for their
    replies, as before issue 25: on two cores a spinning light client takes the CPU that the
    worker and the heavy client need (measured: light p99 beside web2@256 went from about 45 µs
    with blocking clients to 400–900 µs with a spinning light client)."""
    out: dict = {"light": "web (wasm), 1 outstanding", "label": "measured", "heavy_client_poll": heavy_poll,
                 "light_client_poll": light_poll, "schedulers": {k: dict(v) for k, v in SCHEDULERS.items()}}
    for name, cfg in SCHEDULERS.items():
        with Executor(workers=1, queue_depth=1024, poll=executor_poll, **cfg) as ex:
            deploy_all(ex, None)
            per: dict = {"isolated": _isolated(ex, dur, warm, reps, light_poll)}
            for hname, h in HEAVY.items():
                per[f"under_{hname}"] = _beside(ex, h, dur, warm, reps, heavy_poll, light_poll, per["isolated"])
                s = per[f"under_{hname}"]
                progress(f"fairness {name:<10}: light alone p50/p99 {num(per['isolated']['p50_us'], '.1f')}/"
                         f"{num(per['isolated']['p99_us'], '.1f')} us, beside {hname} {num(s['p50_us'], '.1f')}/"
                         f"{num(s['p99_us'], '.1f')} us (p99 {num(s['p99_x_isolated'], '.1f')}x); "
                         f"heavy {num(s['heavy_req_per_s'], ',.0f')} req/s")
            stats = ex.stats()
            per["slice_yields"] = (stats.get("slice") or {}).get("yields", 0)
            out[name] = per
    return out


def _isolated(ex: Executor, dur: float, warm: float, reps: int, poll: str) -> dict:
    """The light lambda alone on the executor."""
    return summarize([load(ex.udp_addr, [WASM["web"]], 1, dur, warm, poll=poll) for _ in range(reps)])


def _beside(ex: Executor, h: dict, dur: float, warm: float, reps: int, heavy_poll: str, light_poll: str,
            isolated: dict) -> dict:
    """The light lambda's latency while `h` saturates the worker (the heavy queue fills first)."""
    loaded, heavy_runs = [], []
    for _ in range(reps):
        box: dict = {}
        t = threading.Thread(target=lambda box=box: box.update(r=_heavy_load(ex, h, dur + warm + 0.5, heavy_poll)))
        t.start()
        time.sleep(0.3)
        loaded.append(load(ex.udp_addr, [WASM["web"]], 1, dur, warm, poll=light_poll))
        t.join()
        heavy_runs.append(box["r"])
    s, hs = summarize(loaded), summarize(heavy_runs)

    def ratio(key):
        return s[key] / isolated[key] if s[key] is not None and isolated[key] else None

    return s | {"heavy": h["what"], "heavy_req_per_s": hs["req_per_s"], "heavy_p50_us": hs["p50_us"],
                "heavy_statuses": hs["statuses"], "p99_x_isolated": ratio("p99_us"), "p50_x_isolated": ratio("p50_us")}


def slice_sweep(dur: float, warm: float, reps: int, progress, light_poll: str = "block") -> dict:
    """The trade-off behind the default slice: the light lambda's latency beside burn@4, and
    burn's throughput, for each slice in `SWEEP_US` (0: run to completion), DRR, one worker."""
    out: dict = {"label": "measured", "heavy": HEAVY["burn@4"]["what"], "light": "web (wasm), 1 outstanding"}
    for us in SWEEP_US:
        with Executor(workers=1, queue_depth=1024, sched="drr", slice_us=us) as ex:
            deploy_all(ex, None)
            iso = _isolated(ex, dur, warm, reps, light_poll)
            s = _beside(ex, HEAVY["burn@4"], dur, warm, reps, "block", light_poll, iso)
            out[f"slice_us={us}"] = {"isolated_p99_us": iso["p99_us"], "p50_us": s["p50_us"], "p99_us": s["p99_us"],
                                     "p99_x_isolated": s["p99_x_isolated"], "heavy_req_per_s": s["heavy_req_per_s"],
                                     "yields": (ex.stats().get("slice") or {}).get("yields", 0)}
            r = out[f"slice_us={us}"]
            progress(f"slice sweep {us:>4} us: light beside burn@4 p50/p99 {num(r['p50_us'], '.1f')}/{num(r['p99_us'], '.1f')} us "
                     f"(p99 {num(r['p99_x_isolated'], '.2f')}x), burn {num(r['heavy_req_per_s'], ',.0f')} req/s")
    return out


def slice_cost(dur: float, warm: float, reps: int, progress) -> dict:
    """What slicing costs when nothing needs preempting: the web lambda (shorter than a slice)
    and burn (2 ms, alone, so it never yields) with and without `--slice-us`, repeats interleaved."""
    runs: dict = {f"slice_us={s}": {"web": [], "burn": []} for s in (SLICE_US, 0)}
    for rep in range(reps):
        for s in ((SLICE_US, 0) if rep % 2 == 0 else (0, SLICE_US)):  # alternate which goes first
            with Executor(workers=1, slice_us=s) as ex:
                deploy_all(ex, None)
                r = runs[f"slice_us={s}"]
                r["web"].append(load(ex.udp_addr, [WASM["web"]], 1, dur, warm))
                r["burn"].append(load(ex.udp_addr, [WASM["burn"]], 1, dur, warm, payload=BURN_PAYLOAD,
                                      timeout_ms=BURN_TIMEOUT_MS))
    out: dict = {"label": "measured", "what": "one client, 1 outstanding, --workers 1 --sched drr"}
    for key, r in runs.items():
        out[key] = {lam: summarize(v) for lam, v in r.items()}
        progress(f"slice cost {key:<14}: web p50 {num(out[key]['web']['p50_us'], '.1f')} us, "
                 f"burn p50 {num(out[key]['burn']['p50_us'], '.0f')} us")
    sliced, plain = out[f"slice_us={SLICE_US}"], out["slice_us=0"]
    for lam in ("web", "burn"):
        a, b = sliced[lam]["p50_us"], plain[lam]["p50_us"]
        out[f"{lam}_p50_delta_us"] = None if a is None or b is None else round(a - b, 2)
    return out
