"""The sifting pipeline (``sifting.Plan``) on Ray: processing elements are Ray actors, ranks are
Ray tasks, published parts travel through Ray's object store (issue 19; thesis §5.3.2).

    driver (Sifter) ── inject: rank tasks sample + serialize ──▶ PE actors (stage 1)
                    ── compact(stage) on each PE ──▶ parts (objects owned by the driver)
                    ── absorb(next stage, label, part) on the pool member ──▶ … ──▶ final PEs

* Endpoints: every PE is a named actor ``sift-pe-<i>`` with a stable index, and reports its
  node, process and actor IDs (``endpoints``). PEs are spread round robin over the cluster's
  alive nodes (``NodeAffinitySchedulingStrategy``), so a two-node cluster holds PEs on both.
* Accumulation: the driver keeps each PE's per-stage particle count; a PE that crosses the
  threshold is compacted at once, the rest when the stage drains (the thesis's impulse test).
* Failures: PE actors restart (``max_restarts=-1``) but lose their memory. The driver keeps a
  ledger of what each PE was sent and has not yet compacted (object refs it owns, so the data
  outlives the PE's process); when a call fails with the actor gone, it waits for the restart,
  replays that PE's ledger (labels make re-delivery idempotent) and retries. A particle is
  therefore never lost nor duplicated by a PE crash — the tests SIGKILL a PE mid-run to show it.
  Losing a whole node loses the objects in its store: the run stops with a clear error.

Worked example: ``Sifter(Plan(8, 4, threshold)).run(ranks=4, particles=1_000_000)`` starts 8
PEs, 4 rank tasks inject 250,000 particles each into PEs 0-3, stage 1 splits each PE's data
4 ways into pools of 2, stage 2 splits 2 ways into single PEs; ``verify`` then reads every PE.

Known caveats:
- The driver is the ledger's only copy: losing the driver loses the run (Ray's own
  owner-death semantics); rerun it.
- Measured times include Ray's scheduling and object-store copies on this machine; the twin
  (``twin.sifting``) is where other devices and 100 nodes are projected.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import numpy as np

from nearfaas.dataservices.sifting import Label, Plan, SiftError, inject_pe

KEY = "id"


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - make setup installs ray
        raise SiftError("sifting runs on Ray: run `make setup` (pip install ray)") from e
    return ray


def connect(address: str | None = None, num_cpus: int | None = None):
    """Join the Ray cluster at ``address`` (host:port), or start a local one. An unreachable
    address is a clear error after a 3 s TCP probe, not a minute-long hang. The connecting is
    ``nearfaas.fanout.connect``'s (shared with ``--ray`` of ``hw dse`` and ``twin report``);
    ``auto`` here stays strict: it joins a running cluster or fails."""
    _ray()
    from nearfaas.fanout import FanoutError
    from nearfaas.fanout import connect as fanout_connect

    try:
        return fanout_connect(address, num_cpus, option="--ray-address", auto_local=False)
    except FanoutError as e:
        raise SiftError(str(e)) from None


def _serialize(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _deserialize(buf):
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(buf)).read_all()


def _rank_sample(rank: int, particles: int, first_id: int, seed: int) -> tuple[bytes, dict]:
    """A simulation rank's step: sample its particles (IDs from ``first_id``) and serialize them (measured)."""
    from nearfaas.dataservices.particles import particles as make

    c0 = time.thread_time()
    table = make(particles, seed=seed + rank, first_id=first_id)
    c1 = time.thread_time()
    buf = _serialize(table)
    # CPU seconds of this thread (the machine's other work, and Ray's own threads, do not count)
    return buf, {"rows": table.num_rows, "sample_s": c1 - c0, "serialize_s": time.thread_time() - c1}


def _rows(value) -> int | None:
    """Rows a PE answered with: a compaction's summary or a holdings array."""
    if isinstance(value, dict) and "rows" in value:
        return sum(value["rows"])
    if isinstance(value, np.ndarray):
        return len(value)
    return None


class _PE:
    """One processing element: per-stage inboxes of Arrow tables, deduplicated by label."""

    def __init__(self, index: int, plan: Plan):
        self.index, self.plan = index, plan
        self.inbox: dict[int, list] = defaultdict(list)
        self.seen: dict[int, set[str]] = defaultdict(set)  # per stage: labels absorbed

    def endpoint(self) -> dict:
        import ray

        ctx = ray.get_runtime_context()
        return {"pe": self.index, "node": ctx.get_node_id(), "pid": os.getpid(), "actor": ctx.get_actor_id()}

    def absorb(self, stage: int, label: str, buf: bytes) -> dict:
        c0 = time.thread_time()
        if label not in self.seen[stage]:
            self.seen[stage].add(label)
            self.inbox[stage].append(_deserialize(buf))
        return {"held": sum(t.num_rows for t in self.inbox[stage]), "absorb_s": time.thread_time() - c0}

    def reset(self, stage: int) -> None:
        """Forget a stage's data and labels: the driver is about to replay its ledger."""
        self.inbox.pop(stage, None)
        self.seen.pop(stage, None)

    def compact(self, stage: int, parts: int):
        """Split the stage's data on its next ID bits; return each part serialized, then a
        summary. The parts are returned (owned by the caller), never kept here."""
        import pyarrow as pa

        t0 = time.thread_time()  # CPU seconds of this thread: what the twin calibrates on
        tables = self.inbox.pop(stage, [])
        table = pa.concat_tables(tables) if tables else None
        out = [b""] * parts
        rows = [0] * parts
        if table is not None and table.num_rows:
            ids = table.column(KEY).to_numpy()
            part = self.plan.split_ids(stage, ids)
            order = np.argsort(part, kind="stable")
            counts = np.bincount(part, minlength=parts)
            taken = table.take(pa.array(order))
            t1 = time.thread_time()
            start = 0
            for p in range(parts):
                if counts[p]:
                    out[p] = _serialize(taken.slice(start, int(counts[p])))
                rows[p] = int(counts[p])
                start += int(counts[p])
            t2 = time.thread_time()
        else:
            t1 = t2 = time.thread_time()
        return (*out, {"rows": rows, "split_s": t1 - t0, "serialize_s": t2 - t1})

    def holdings(self, stage: int) -> np.ndarray:
        tables = self.inbox.get(stage, [])
        if not tables:
            return np.zeros(0, np.uint64)
        return np.concatenate([t.column(KEY).to_numpy() for t in tables])


class Sifter:
    """Drives one sifting run on a Ray cluster; see the module's docstring."""

    def __init__(self, plan: Plan, ray_address: str | None = None, retry_s: float = 60.0):
        self.ray = connect(ray_address)
        ray = self.ray
        self.plan, self.retry_s = plan, retry_s
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
        if not nodes:
            raise SiftError("the Ray cluster has no alive node to place PEs on")
        actor = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0)(_PE)
        self.pes = [actor.options(name=f"sift-pe-{i}-{os.getpid()}-{id(self)}",
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=True)
                                  ).remote(i, plan) for i in range(plan.pes)]
        self.rank_task = ray.remote(num_cpus=0)(_rank_sample)
        self.ledger: dict[int, dict[int, dict[str, tuple]]] = defaultdict(lambda: defaultdict(dict))
        self.held = defaultdict(int)  # (pe, stage) -> particles delivered, not compacted
        self.labels: list[str] = []
        self.fanout: list[tuple[int, int, list[int]]] = []  # (stage, pe, destinations) per compaction
        self.recoveries = 0
        self.injections = 0
        self.compactions = defaultdict(int)  # (pe, stage) -> count: the driver numbers them, so a
        # restarted PE (whose memory is gone) can never reuse a label
        self.stats = {"inject": {}, "stages": []}
        self.absorbs: list[tuple[int, int, float]] = []  # (stage, rows, seconds) per delivery
        self.compaction_log: list[dict] = []  # each compaction's summary, with its stage and PE

    # ---- fault-tolerant calls --------------------------------------------------------------
    def _call(self, pe: int, method: str, *args, num_returns: int = 1, expect_rows: int | None = None):
        """Call a PE method and wait. If the PE died (the call fails) or came back empty (a
        restarted PE answers with fewer rows than the ledger says it holds), wait for Ray's
        restart, rebuild the PE from the ledger, and call again."""
        ray = self.ray
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                ref = getattr(self.pes[pe], method).options(num_returns=num_returns).remote(*args)
                refs = ref if isinstance(ref, list) else [ref]
                value = ray.get(refs[-1])
                if expect_rows is None or _rows(value) == expect_rows:
                    return refs
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                pass
            if time.monotonic() > deadline:
                raise SiftError(f"PE {pe} did not come back within {self.retry_s:.0f} s")
            self.recoveries += 1
            time.sleep(0.2)
            self._rebuild(pe, deadline)

    def _rebuild(self, pe: int, deadline: float) -> None:
        """Make the PE hold exactly its ledger again, stage by stage (labels dedupe)."""
        ray = self.ray
        while True:
            try:
                for stage, entries in sorted(self.ledger[pe].items()):
                    ray.get(self.pes[pe].reset.remote(stage))
                    ray.get([self.pes[pe].absorb.remote(stage, label, ref) for label, (ref, _rows) in entries.items()])
                return
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if time.monotonic() > deadline:
                    raise SiftError(f"PE {pe} did not come back within {self.retry_s:.0f} s") from None
                time.sleep(0.2)

    def _deliver(self, pe: int, stage: int, label: Label, ref, rows: int) -> None:
        self._deliver_many([(pe, stage, label, ref, rows)])

    def _deliver_many(self, items: list[tuple]) -> None:
        """Publish parts to their PEs, all at once; a PE that fails goes the recovering way."""
        ray = self.ray
        calls = []
        for pe, stage, label, ref, rows in items:
            key = str(label)
            self.labels.append(key)
            self.ledger[pe][stage][key] = (ref, rows)
            self.held[(pe, stage)] += rows
            calls.append((pe, stage, key, ref, rows, self.pes[pe].absorb.remote(stage, key, ref)))
        for pe, stage, _key, _ref, rows, call in calls:
            try:
                self.absorbs.append((stage, rows, ray.get(call)["absorb_s"]))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self.recoveries += 1  # the PE died: rebuild it from the ledger (this part included)
                self._rebuild(pe, time.monotonic() + self.retry_s)

    # ---- the run ----------------------------------------------------------------------------
    def inject(self, ranks: int, particles: int, seed: int = 0, progress=None) -> None:
        if ranks < 1 or particles < ranks:
            raise SiftError(f"need ranks >= 1 and particles >= ranks, got {ranks} ranks, {particles} particles")
        per = [particles // ranks + (1 if r < particles % ranks else 0) for r in range(ranks)]
        t0 = time.perf_counter()
        firsts = [sum(per[:r]) for r in range(ranks)]
        refs = [self.rank_task.options(num_returns=2).remote(r, per[r], firsts[r], seed) for r in range(ranks)]
        metas = self.ray.get([m for _, m in refs])
        t1 = time.perf_counter()
        self.injections += 1  # labels of a second inject() on this Sifter must differ from the first's
        for r, ((buf, _), meta) in enumerate(zip(refs, metas, strict=True)):
            pe = inject_pe(r, self.plan.pes)
            self._deliver(pe, 1, Label(1, 0, r, 0, self.injections, 0), buf, meta["rows"])
            if progress:
                progress("inject", r + 1, ranks)
            if self.held[(pe, 1)] >= self.plan.threshold:
                self._compact(pe, 1)
        self.stats["inject"] = {"ranks": ranks, "particles": particles, "wall_s": time.perf_counter() - t0,
                                "sample_serialize_s": t1 - t0, "deliver_s": time.perf_counter() - t1,
                                "per_rank": metas}

    def _compact(self, pe: int, stage: int) -> dict:
        """Compact one PE now (its stage crossed the threshold) and publish its parts."""
        return self._compact_many([pe], stage)[0]

    def _compact_many(self, pes: list[int], stage: int) -> list[dict]:
        """Compact ``pes`` at once, then publish every part at once: a stage's PEs work in
        parallel, as on separate devices. A PE that died, or answers with fewer particles than
        the ledger gave it, is rebuilt and compacted again (``_call``)."""
        ray, parts = self.ray, self.plan.parts(stage)
        started = {pe: self.pes[pe].compact.options(num_returns=parts + 1).remote(stage, parts) for pe in pes}
        metas, deliveries = [], []
        for pe, refs in started.items():
            expect = self.held[(pe, stage)]
            try:
                ok = _rows(ray.get(refs[-1])) == expect
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                ok = False
            if not ok:
                refs = self._call(pe, "compact", stage, parts, num_returns=parts + 1, expect_rows=expect)
            meta = ray.get(refs[-1])
            self.ledger[pe].pop(stage, None)
            self.held[(pe, stage)] = 0
            self.compactions[(pe, stage)] += 1
            seq = self.compactions[(pe, stage)]
            prefix = pe & ((1 << self.plan.matched_after(stage - 1)) - 1)
            dests = []
            for p in range(parts):
                if meta["rows"][p]:
                    matched = self.plan.matched_bits(stage, prefix, p)
                    dest = self.plan.destination(stage, pe, matched)
                    dests.append(dest)
                    deliveries.append((dest, stage + 1, Label(stage + 1, matched, pe, stage, seq, p), refs[p], meta["rows"][p]))
            self.fanout.append((stage, pe, dests))
            self.compaction_log.append(meta | {"stage": stage, "pe": pe})
            metas.append(meta)
        t0 = time.perf_counter()
        self._deliver_many(deliveries)
        publish = time.perf_counter() - t0
        for meta in metas:
            meta["publish_s"] = publish
        if stage < self.plan.stages:  # a PE of the next stage may have crossed its threshold
            full = sorted({d[0] for d in deliveries if self.held[(d[0], stage + 1)] >= self.plan.threshold})
            if full:
                self._compact_many(full, stage + 1)
        return metas

    def drain(self, progress=None, after_stage=None) -> None:
        """Compact every PE's remaining data, stage by stage (the thesis's impulse response)."""
        for stage in range(1, self.plan.stages + 1):
            t0 = time.perf_counter()
            todo = [pe for pe in range(self.plan.pes) if self.held[(pe, stage)]]
            if progress:
                progress(f"stage {stage}", 0, len(todo))
            metas = self._compact_many(todo, stage) if todo else []
            if progress:
                progress(f"stage {stage}", len(todo), len(todo))
            wall = time.perf_counter() - t0
            publish = max((m["publish_s"] for m in metas), default=0.0)
            self.stats["stages"].append({
                "stage": stage, "compactions": len(metas), "wall_s": wall,
                "split_s_max": max((m["split_s"] + m["serialize_s"] for m in metas), default=0.0),
                "split_s_sum": sum(m["split_s"] + m["serialize_s"] for m in metas),
                "split_wall_s": wall - publish, "publish_s": publish})
            if after_stage:
                after_stage(stage, self)

    def verify(self) -> dict:
        """Read every PE's final holdings: particles out, duplicates, misplaced, per-PE counts."""
        final = self.plan.stages + 1
        per_pe, all_ids, misplaced = {}, [], 0
        for pe in range(self.plan.pes):
            expected = sum(rows for _ref, rows in self.ledger[pe][final].values())
            refs = self._call(pe, "holdings", final, expect_rows=expected)
            ids = self.ray.get(refs[0])
            per_pe[pe] = int(len(ids))
            misplaced += int((self.plan.home(ids) != pe).sum())
            all_ids.append(ids)
        ids = np.concatenate(all_ids) if all_ids else np.zeros(0, np.uint64)
        return {"particles_out": int(len(ids)), "duplicates": int(len(ids) - len(np.unique(ids))),
                "misplaced": misplaced, "per_pe": per_pe}

    def endpoints(self) -> list[dict]:
        return [self.ray.get(self._call(pe, "endpoint")[0]) for pe in range(self.plan.pes)]

    def close(self) -> None:
        for pe in self.pes:
            self.ray.kill(pe, no_restart=True)
        self.pes = []


BYTES_PER_PARTICLE_IN_FLIGHT = 300  # ~72 B serialized; the rank's table, its IPC copy, a PE's inbox and its parts


def check_memory(particles: int) -> None:
    """Refuse a local run that cannot fit this machine's memory, before Ray starts."""
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return
    need = particles * BYTES_PER_PARTICLE_IN_FLIGHT
    if need > avail * 0.8:
        raise SiftError(f"{particles:,} particles need about {need / 1e9:.1f} GB here and {avail / 1e9:.1f} GB is available; "
                        "sift fewer particles, or pass --ray-address of a larger cluster")


def run(plan: Plan, ranks: int, particles: int, ray_address: str | None = None, seed: int = 0,
        progress=None, after_stage=None) -> dict:
    """One sifting run: inject, drain, verify. The summary the CLI prints (``--json``)."""
    if ray_address is None:
        check_memory(particles)
    ray = connect(ray_address)
    lost = (ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError, ray.exceptions.RayTaskError,
            ray.exceptions.RaySystemError)
    try:
        sifter = Sifter(plan, ray_address)
    except lost as e:
        raise SiftError(f"Ray could not start the PEs: {str(e).splitlines()[0]}") from None
    try:
        t0 = time.perf_counter()
        sifter.inject(ranks, particles, seed, progress)
        sifter.drain(progress, after_stage)
        wall = time.perf_counter() - t0
        check = sifter.verify()
        fan = max((len(set(d)) for _, _, d in sifter.fanout), default=0)
        return {"particles_in": particles, "particles_out": check["particles_out"], "duplicates": check["duplicates"],
                "misplaced": check["misplaced"], "stages": plan.stages,
                "per_stage_s": [s["wall_s"] for s in sifter.stats["stages"]],
                "pes": plan.pes, "split": plan.split, "threshold": plan.threshold, "ranks": ranks,
                "per_pe": check["per_pe"], "inject": {k: v for k, v in sifter.stats["inject"].items() if k != "per_rank"},
                "stages_detail": sifter.stats["stages"], "max_fanout": fan, "labels": len(sifter.labels),
                "unique_labels": len(set(sifter.labels)), "recoveries": sifter.recoveries,
                "nodes": sorted({e["node"] for e in sifter.endpoints()}), "wall_s": wall,
                "label": "measured on this Ray cluster (wall clock)"}
    except lost as e:  # a node (not just a PE) was lost with the parts in its object store
        raise SiftError(f"the run lost data Ray cannot rebuild (a node died?): {str(e).splitlines()[0]}; run it again") from None
    finally:
        sifter.close()
