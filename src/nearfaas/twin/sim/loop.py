"""One run of the simulator (``Simulator.run``): the event heap and its three handlers (arrival,
finish, keep-alive expiry), the placement of each stage through the live policy, the warm pools,
slots and queues, and the time-weighted accounting that becomes the ``SimResult``.

Events are plain tuples ``(time, seq, kind, a, b)``; ``seq`` breaks ties, so a run is a pure
function of its config, workload and seed. The order of every random draw and every ``seq`` is
part of that contract (the golden files in tests/golden/twin/ pin it). See docs/twin-sim.md.
"""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from nearfaas.placement.policy import Invocation, NoNodeAvailable
from nearfaas.twin.sim.workload import WorkloadError

if TYPE_CHECKING:
    from nearfaas.twin.sim.engine import Simulator

INTERMEDIATES = "nearfaas-intermediates"
ARRIVAL, FINISH, EXPIRE, ROUTED = 0, 1, 2, 3
# A job is a list: arrival time, chain (function indices), stage, refs, node, target, queued-at,
# waited, app, the call's own duration (None: the service samplers), its memory footprint (MB).
_ARRIVED, _CHAIN, _STAGE, _REFS, _NODE, _TARGET, _QUEUED_AT, _WAITED, _APP, _SVC, _MEM = range(11)


@dataclass
class SimResult:
    arrivals: int
    completed: int
    rejected: int
    events: int
    sim_time_s: float  # simulated time at which the last call finished (the trace drained)
    wall_s: float
    latency: dict  # mean, p50, p95, p99 (seconds, end to end)
    mean_wait_s: float  # time in queues per completed call (summed over its stages)
    time_avg_in_system: float  # L: calls in the system, time-averaged over [0, sim_time_s]
    cold_starts: int
    placements: dict  # "target;reason" -> count
    series: dict  # t, queue_len, instances_busy, instances_alive, latency_mean, latency_p95 per bin
    memory: dict | None = None  # memory occupancy and memory rejections, where calls have footprints or nodes a limit
    gateway: dict | None = None  # the gateway tier's utilisation and queueing, when it is modelled (SimConfig.gateways)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def throughput(self) -> float:
        return self.completed / self.sim_time_s if self.sim_time_s > 0 else 0.0

    def summary(self) -> dict:
        return ({k: v for k, v in self.__dict__.items() if k != "series" and not (k in ("memory", "gateway") and v is None)}
                | {"events_per_s": self.events_per_s})


class EventLoop:
    """The state of one run over ``workload``; ``run()`` returns its ``SimResult``. The per-node
    state the views are built from (busy, alive, accelerator calls, queues, dirty rows) lives on
    the Simulator, which ``Simulator.reset_state`` sets up fresh."""

    def __init__(self, sim: Simulator, workload: Iterable[tuple[float, str]]):
        self.sim = sim
        c = self.config = sim.config
        sim.reset_state()
        nN, nF = len(sim.names), len(sim.functions)
        self.busy, self.alive, self.dirty, self.accel, self.waitq = sim.busy, sim.alive, sim.dirty, sim.accel_inflight, sim.waitq
        self.node_busy = sim.node_busy
        self.idle = [[deque() for _ in range(nN)] for _ in range(nF)]  # per function and node: finish times of idle instances
        self.expiring = [[False] * nN for _ in range(nF)]  # an expiry event is pending
        self.free = [c.storage_cpu_slots if st else c.compute_slots for st in sim.is_storage]  # free CPU slots per node
        self.keep_alive, self.cold_s, self.depth, self.bin_s = c.keep_alive_s, c.image_pull_s + c.model_load_s, c.queue_depth, c.bin_s
        self.expire_on = self.keep_alive != float("inf")
        self.pool_n = max(1, c.intermediate_pool)
        self.rand = sim.rng.random
        self.heap: list = []
        self.seq = 0
        self.first_stage: dict = {}  # (function, refs) -> (Invocation, replicas) of a first stage
        self.placements: Counter = Counter()
        self.lat_t, self.lat_v = array("d"), array("d")  # completion time, latency
        self.bq, self.bb, self.ba = [], [], []  # per-bin areas: queued, busy instances, alive instances
        self.st = {"queued": 0, "busy": 0, "alive": 0, "system": 0, "rejected": 0, "cold": 0, "wait": 0.0}
        self.area_sys = 0.0
        # Memory: free MB per node (inf: unlimited), in use over the rack, its time-weighted area.
        self.mem_free = list(sim.mem_cap)
        self.mem = {"used": 0.0, "area": 0.0, "peak_node": 0.0, "peak_rack": 0.0, "rejected_too_big": 0, "waited": 0, "calls": 0}
        self.mem_on = any(m != float("inf") for m in sim.mem_cap)
        self.last = 0.0
        self.run_id = 0
        self.arrivals = self.completed = self.events = 0
        self.it = iter(workload)
        # The gateway tier (SimConfig.gateways): free gateways, calls waiting for one, accounting.
        self.gw_free, self.gw_queue = c.gateways, deque()
        self.gw = {"busy_s": 0.0, "wait_s": 0.0, "routed": 0, "max_queue": 0}

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> SimResult:
        heap, pop = self.heap, heapq.heappop
        advance, finish, arrive, expire = self._advance, self._finish, self._arrive, self._expire
        self._next_arrival()
        wall0 = time.perf_counter()
        events = 0
        while heap:
            now, _, kind, a, b = pop(heap)
            events += 1
            if now > self.last:
                advance(now)
            if kind == FINISH:
                finish(a, now)
            elif kind == ARRIVAL:
                arrive(a, b, now)
            elif kind == EXPIRE:
                expire(a, b, now)
            else:
                self._routed(a, now)
        self.events = events
        return self._result(time.perf_counter() - wall0)

    def _push(self, t: float, kind: int, a, b) -> None:
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))
        self.seq += 1

    def _next_arrival(self) -> None:
        try:
            item = next(self.it)
        except StopIteration:
            return
        t, app = item[0], item[1]
        if app not in self.sim.chains:
            raise WorkloadError(f"unknown app {app!r} in the workload; known: {', '.join(self.sim.app_keys)}")
        call = item[2] if len(item) > 2 else None
        if call is not None:
            svc, mb = call
            if (svc is not None and not svc >= 0) or (mb is not None and not mb >= 0):
                raise WorkloadError(f"call at t={t}s of app {app!r}: service {svc!r} s and memory {mb!r} MB must be >= 0 (or None)")
        self._push(t, ARRIVAL, app, call)

    def _advance(self, now: float) -> None:
        """Time-weighted areas from the last event to ``now``, split at bin edges."""
        dt = now - self.last
        st, bq, bb, ba, bin_s = self.st, self.bq, self.bb, self.ba, self.bin_s
        self.area_sys += st["system"] * dt
        self.mem["area"] += self.mem["used"] * dt
        q, bz, al = st["queued"], st["busy"], st["alive"]
        last = self.last
        k = int(last / bin_s)
        if now < (k + 1) * bin_s and int(now / bin_s) < len(bq):
            # The common case: the same bin as the last event, and it exists already
            # (the general loop below would do exactly this in one turn).
            bq[k] += q * dt
            bb[k] += bz * dt
            ba[k] += al * dt
        else:
            while len(bq) <= int(now / bin_s):
                bq.append(0.0)
                bb.append(0.0)
                ba.append(0.0)
            t0 = last
            while True:
                edge = (k + 1) * bin_s
                t1 = now if now < edge else edge
                span = t1 - t0
                bq[k] += q * span
                bb[k] += bz * span
                ba[k] += al * span
                if t1 >= now:
                    break
                t0, k = t1, k + 1
        self.last = now

    # -- the three events ------------------------------------------------------------------------
    def _arrive(self, app: str, call, now: float) -> None:
        self.arrivals += 1
        self.st["system"] += 1
        objs = self.sim.objects[app]
        ref = objs[int(self.rand() * len(objs))]
        svc, mb = call if call is not None else (None, None)
        job = [now, self.sim.chains[app], 0, (ref,), -1, "", 0.0, 0.0, app, svc, mb or 0.0]
        if mb:
            self.mem["calls"] += 1
        self._next_arrival()
        if self.config.gateways:
            self._to_gateway(job, now)
        else:
            self._place(job, now, None)

    # -- the gateway tier (SimConfig.gateways) ---------------------------------------------------
    def _to_gateway(self, job: list, now: float) -> None:
        """A call reaches the gateways: a free one routes it, else it waits its turn (FIFO). A
        chain's stages are each routed by a gateway (the chain runner lives there); their work is
        charged at the call's entry, one service draw per stage."""
        if self.gw_free > 0:
            self.gw_free -= 1
            self._gateway_serve(job, now)
        else:
            self.gw_queue.append((job, now))
            self.gw["max_queue"] = max(self.gw["max_queue"], len(self.gw_queue))

    def _gateway_serve(self, job: list, now: float) -> None:
        mean, rand = self.config.gateway_service_s, self.rand
        busy = sum(-mean * math.log(1.0 - rand()) for _ in job[_CHAIN])
        self.gw["busy_s"] += busy
        self._push(now + busy, ROUTED, job, None)

    def _routed(self, job: list, now: float) -> None:
        """A gateway is done routing ``job``: it takes the next waiting call; the job is placed."""
        self.gw["routed"] += 1
        if self.gw_queue:
            nxt, since = self.gw_queue.popleft()
            self.gw["wait_s"] += now - since
            self.st["wait"] += now - since
            nxt[_WAITED] += now - since
            self._gateway_serve(nxt, now)
        else:
            self.gw_free += 1
        self._place(job, now, None)

    def _finish(self, job: list, now: float) -> None:
        """A stage finished: its instance goes idle (and expires later), its CPU slot passes on,
        its inputs are consumed; the chain's next stage is placed, or the request completes."""
        chain, stage, ni, target = job[_CHAIN], job[_STAGE], job[_NODE], job[_TARGET]
        fi = chain[stage]
        self.busy[fi][ni] -= 1
        self._load_step(ni, -1)
        self.st["busy"] -= 1
        self.idle[fi][ni].append(now)
        if self.expire_on and not self.expiring[fi][ni]:
            self.expiring[fi][ni] = True
            self._push(now + self.keep_alive, EXPIRE, fi, ni)
        mb = job[_MEM]
        if mb:
            self.mem_free[ni] += mb
            self.mem["used"] -= mb
        if target == "cpu":
            self.free[ni] += 1
        if self.waitq[ni]:
            self._drain(ni, now)
        located = self.sim.located
        for ref in job[_REFS]:
            located.pop(ref, None)  # consumed (the gateway deletes intermediates after the chain)
        if stage + 1 < len(chain):
            self._next_stage(job, now)
        else:
            if target == "dscs":
                self._accel_step(ni, -1)
            self.completed += 1
            self.st["system"] -= 1
            self.lat_t.append(now)
            self.lat_v.append(now - job[_ARRIVED])

    def _expire(self, fi: int, ni: int, now: float) -> None:
        """Drop instances idle past keep_alive; re-arm for the next oldest."""
        pool = self.idle[fi][ni]
        self.expiring[fi][ni] = False
        n0 = len(pool)
        keep_alive = self.keep_alive
        while pool and pool[0] + keep_alive <= now:
            pool.popleft()
        if len(pool) != n0:
            self.alive[fi][ni] -= n0 - len(pool)
            self.st["alive"] -= n0 - len(pool)
            self.dirty[fi].add(ni)
        if pool:
            self.expiring[fi][ni] = True
            self._push(pool[0] + keep_alive, EXPIRE, fi, ni)

    # -- a finished stage's follow-ups -----------------------------------------------------------
    def _drain(self, ni: int, now: float) -> None:
        """A slot or memory of node ``ni`` came free: the node's waiting calls start in FIFO
        order while the first one's needs are met (a CPU call: a slot and its memory; an
        accelerator call, which holds its accelerator already: its memory)."""
        wq, free, mem_free = self.waitq[ni], self.free, self.mem_free
        while wq:
            nxt = wq[0]
            cpu = nxt[_TARGET] == "cpu"
            if (cpu and free[ni] <= 0) or nxt[_MEM] > mem_free[ni]:
                return
            wq.popleft()
            if cpu:
                free[ni] -= 1
            self.st["queued"] -= 1
            self.st["wait"] += now - nxt[_QUEUED_AT]
            nxt[_WAITED] += now - nxt[_QUEUED_AT]
            if self.config.queue_in_view:
                self.sim._touch_node(ni)
            self._start(nxt, now)

    def _next_stage(self, job: list, now: float) -> None:
        """Write the stage's output (node-local on a storage node, else hashed through the
        cluster) and place the next stage; a dscs chain holds its accelerator across the step."""
        sim = self.sim
        chain, stage, ni, target = job[_CHAIN], job[_STAGE], job[_NODE], job[_TARGET]
        nf = sim.functions[chain[stage + 1]]
        sname = sim.functions[chain[stage]].name
        if sim.is_storage[ni]:  # a local intermediate: one copy where it was made
            self.run_id += 1
            ref = (INTERMEDIATES, f"{job[_APP]}/{self.run_id}/{sname}")
            sim.located[ref] = [sim.names[ni]]
        else:  # written through the cluster: where hashing puts it
            ref = (INTERMEDIATES, f"{job[_APP]}/pool-{int(self.rand() * self.pool_n)}/{sname}")
        held = sim.names[ni] if target == "dscs" and nf.accelerator == "dscs" else None
        if target == "dscs" and held is None:
            self._accel_step(ni, -1)
        job[_STAGE] = stage + 1
        job[_REFS] = (ref,)
        self._place(job, now, held)
        if held is not None:  # the hold passes to the next stage (or ends) in the same step
            self._accel_step(ni, -1)

    # -- placing and starting a stage ------------------------------------------------------------
    def _load_step(self, ni: int, delta: int) -> None:
        """A call starts (+1) or ends (-1) on a node: every function's view of that node shows the
        node's load (node_view), so every row of it goes stale."""
        self.node_busy[ni] += delta
        for d in self.dirty:
            d.add(ni)

    def _accel_step(self, ni: int, delta: int) -> None:
        """Take (+1) or give back (-1) a node's accelerator. A row's NodeView shows it only as
        busy or not (node_view: accel_inflight > 0 when not held), so every function's row goes
        stale only when that flips (a chain's hold passing to its next stage on the same node
        goes 1 -> 2 -> 1: nothing to rebuild). test_incremental_views_equal_views_built_from_scratch
        checks this against views built from scratch."""
        accel = self.accel
        was = accel[ni] > 0
        accel[ni] += delta
        if (accel[ni] > 0) is not was:
            for d in self.dirty:
                d.add(ni)

    def _decide(self, job: list, now: float, held: str | None):
        """One decision through the policy on the view the gateway would build (None: no node)."""
        sim = self.sim
        fi, refs = job[_CHAIN][job[_STAGE]], job[_REFS]
        f = sim.functions[fi]
        if job[_STAGE] == 0:
            # A first stage reads an object of the app's bounded input catalog, never a
            # located intermediate: its Invocation and replica map are the same every time,
            # so they are built once per (function, object) and shared (both are read-only).
            hit = self.first_stage.get((fi, refs))
            if hit is None:
                hit = self.first_stage[(fi, refs)] = (Invocation(f.name, f.accelerator, f.placement, refs, f.input_bytes),
                                                      {ref: sim.replicas(ref) for ref in refs})
            inv, replicas = hit
        else:
            inv, replicas = Invocation(f.name, f.accelerator, f.placement, refs, f.input_bytes), None
        v = sim.view(fi, refs, held, replicas)
        try:
            d = sim.policy.place(inv, v)
        except NoNodeAvailable:
            d = None
        if sim.recorder is not None:
            sim.recorder.append({"t": now, "invocation": inv, "view": v, "decision": d, "held": held, "state": sim._snapshot(fi, refs)})
        return d

    def _place(self, job: list, now: float, held: str | None) -> None:
        """One decision through the policy, then the gateway's bookkeeping: mark the
        accelerator busy in the same step, take a slot or queue (bounded) or reject."""
        d = self._decide(job, now, held)
        if d is None:
            self._reject(job)
            return
        self.placements[d.target + ";" + d.reason] += 1
        ni = self.sim.index[d.node]
        job[_NODE], job[_TARGET] = ni, d.target
        mb = job[_MEM]
        if mb > self.sim.mem_cap[ni]:  # can never fit this node: rejected (the policy does not see memory)
            self.mem["rejected_too_big"] += 1
            self._reject(job)
            return
        fits = mb <= self.mem_free[ni]
        if d.target == "dscs":
            self._accel_step(ni, 1)
            if fits:
                self._start(job, now)  # the policy hands an accelerator out only when free (or held by this chain)
                return
        elif self.free[ni] > 0 and fits and not self.waitq[ni]:
            self.free[ni] -= 1
            self._start(job, now)
            return
        if self.st["queued"] < self.depth:
            if not fits:
                self.mem["waited"] += 1
            job[_QUEUED_AT] = now
            self.waitq[ni].append(job)
            self.st["queued"] += 1
            if self.config.queue_in_view:
                self.sim._touch_node(ni)
        else:
            if d.target == "dscs":
                self._accel_step(ni, -1)
            self._reject(job)

    def _reject(self, job: list) -> None:
        self.st["rejected"] += 1
        self.st["system"] -= 1
        for ref in job[_REFS]:
            self.sim.located.pop(ref, None)

    def _start(self, job: list, now: float) -> None:
        """Run the stage on its node: a warm instance if one is idle and alive, else a cold one."""
        fi, ni = job[_CHAIN][job[_STAGE]], job[_NODE]
        st, alive = self.st, self.alive
        pool = self.idle[fi][ni]
        warm = False
        while pool:
            if pool.pop() + self.keep_alive > now:
                warm = True
                break
            alive[fi][ni] -= 1 + len(pool)  # the rest are older: expired too
            st["alive"] -= 1 + len(pool)
            pool.clear()
        extra = 0.0
        if not warm:
            alive[fi][ni] += 1
            st["alive"] += 1
            st["cold"] += 1
            extra = self.cold_s
        self.busy[fi][ni] += 1
        self._load_step(ni, 1)
        st["busy"] += 1
        mb = job[_MEM]
        if mb:
            self._take_memory(ni, mb)
        svc = job[_SVC]
        if svc is None:
            service = self.sim.samplers[fi][job[_TARGET]]()
        else:
            service = svc * self.sim.shares[job[_APP]][job[_STAGE]][job[_TARGET]]
        self._push(now + extra + service, FINISH, job, None)

    def _take_memory(self, ni: int, mb: float) -> None:
        self.mem_free[ni] -= mb
        m = self.mem
        m["used"] += mb
        if m["used"] > m["peak_rack"]:
            m["peak_rack"] = m["used"]
        cap = self.sim.mem_cap[ni]
        used = (cap - self.mem_free[ni]) if cap != float("inf") else None
        if used is not None and used > m["peak_node"]:
            m["peak_node"] = used

    # -- the result ------------------------------------------------------------------------------
    def _series(self, lv: np.ndarray, lt: np.ndarray) -> dict:
        """Per bin: time-averaged queue length and instances, and the latency of the calls that
        completed in it (mean, p95; NaN where none did)."""
        bin_s, n_bins = self.bin_s, len(self.bq)
        lat_mean, lat_p95 = [float("nan")] * n_bins, [float("nan")] * n_bins
        if lv.size and n_bins:
            order = np.argsort(lt, kind="stable")
            lt_s, lv_s = lt[order], lv[order]
            edges = np.searchsorted(lt_s, np.arange(n_bins + 1) * bin_s, side="left")
            for k in range(n_bins):
                seg = lv_s[edges[k]:edges[k + 1]]
                if seg.size:
                    lat_mean[k] = float(seg.mean())
                    lat_p95[k] = float(np.percentile(seg, 95))
        return {"bin_s": bin_s, "t": [k * bin_s for k in range(n_bins)],
                "queue_len": [x / bin_s for x in self.bq], "instances_busy": [x / bin_s for x in self.bb],
                "instances_alive": [x / bin_s for x in self.ba], "latency_mean": lat_mean, "latency_p95": lat_p95}

    def _result(self, wall: float) -> SimResult:
        lat_t, lat_v, st, completed = self.lat_t, self.lat_v, self.st, self.completed
        end = max((lat_t[-1] if lat_t else 0.0), 0.0)
        lv = np.frombuffer(lat_v, dtype=np.float64) if lat_v else np.zeros(0)
        lt = np.frombuffer(lat_t, dtype=np.float64) if lat_t else np.zeros(0)
        pct = np.percentile(lv, [50, 95, 99]) if lv.size else [float("nan")] * 3
        return SimResult(
            arrivals=self.arrivals, completed=completed, rejected=st["rejected"], events=self.events, sim_time_s=end, wall_s=wall,
            latency={"mean": float(lv.mean()) if lv.size else float("nan"), "p50": float(pct[0]), "p95": float(pct[1]),
                     "p99": float(pct[2])},
            mean_wait_s=st["wait"] / completed if completed else float("nan"),
            time_avg_in_system=self.area_sys / end if end > 0 else 0.0, cold_starts=st["cold"],
            placements=dict(self.placements), series=self._series(lv, lt), memory=self._memory(end), gateway=self._gateway(end))

    def _gateway(self, end: float) -> dict | None:
        c, g = self.config, self.gw
        if not c.gateways:
            return None
        return {"gateways": c.gateways, "service_s_per_stage": c.gateway_service_s, "routed": g["routed"],
                "utilisation": g["busy_s"] / (c.gateways * end) if end > 0 else 0.0,
                "mean_wait_s": g["wait_s"] / g["routed"] if g["routed"] else 0.0, "max_queue": g["max_queue"]}

    def _memory(self, end: float) -> dict | None:
        """Memory occupancy (calls' footprints while they run), where calls had footprints or
        nodes a limit: None otherwise (the result then has no memory block)."""
        m = self.mem
        if not self.mem_on and not m["calls"]:
            return None
        caps = self.sim.mem_cap
        finite = [c for c in caps if c != float("inf")]
        return {"calls_with_footprint": m["calls"], "time_avg_used_mb": m["area"] / end if end > 0 else 0.0,
                "peak_used_mb": m["peak_rack"], "peak_node_used_mb": m["peak_node"] if finite else None,
                "capacity_mb": sum(finite) if len(finite) == len(caps) else None,
                "waited_for_memory": m["waited"], "rejected_over_node_memory": m["rejected_too_big"]}
