"""Offload, partial push-back or push back, measured: the decision engine
(``dataservices.decision``) beside always-offload, always-push-back and the oracle over random
template queries, and the thesis's two case studies (Ch. 5.4, Table 5.9) in its shape. Every
output says measured or modelled; the printout and the plot are in ``dataservices_report``.

Method:
* **Tables** (untimed): particle tables of log-spaced sizes, 10^4 rows to ``max_rows`` (plus the
  case studies' 6,177,731 rows when in range), each written once as an Arrow IPC file in a
  scratch folder (/dev/shm when it has room) that the host and the storage node both
  memory-map; their sketches (``table_stats``) are built once.
* **Cost models**: ``costmodels.load_or_train(max_rows=<largest table>)``: the saved default
  models when trained here up to that size, else the benchmark's own in a folder beside them
  named by size and samples (trained once, then loaded); the result records which and the
  training config and time.
* **Storage node** (offload side, measured): a worker process capped at ``storage_cpus`` cores
  by a cgroup made for it (v1 ``cpu.cfs_quota_us`` under this process's ``cpu`` group, or v2
  ``cpu.max``) with the nodes' period (``node.capacity.PERIOD_US``), removed at the end, also
  on error; with no writable cgroup it runs uncapped and ``storage_cap`` says ``none: <why>``.
  It runs each query with ``sql.execute`` on one Arrow thread and serializes the result as an
  IPC stream. **Host** (push-back side, measured): this process, one Arrow thread, uncapped.
* **Transfers** (measured loopback + modelled link): zero-filled payloads of the right size over
  loopback TCP (``costmodels.LoopbackSink``: connect, send, ack), a 256 MiB send scaled linearly
  above that, plus the profile's expected first byte and bytes / bandwidth. An object's
  transfer does not depend on the query: it is measured once per table.
* **Per query** (a random T1–T10 instance on a random table):
  offload   = node opens the file + node exec + serialize + transfer(result) + host deserializes
  partial   = node opens the file + node exec of the cut's node half (``partial.split``) +
              serialize + transfer(intermediate) + host deserializes + host exec of the rest
              (queries with no cut, ``SELECT *``, have no partial side)
  push-back = transfer(object) + host opens the file + host exec
  measured once and priced under both link profiles (only the link terms differ). Every time is
  ``costmodels.timeit``, min of 3, as the models were trained: the first run of a query after a
  larger one pays the kernel for fresh pages (measured here up to 19x a warm run on the capped
  node: 2.4 s against 0.13 s), which neither the models nor a warm server see. Opening and
  deserializing are zero-copy here.
* **Engine** (modelled): ``OffloadPolicy(models).decide(query_view(tree, stats, object bytes,
  link=profile, node_cpus=storage_cpus))``, from the sketches only. **Oracle**: the faster
  measured side (ties as the engine's: offload, partial, push-back). The issue's targets,
  reported and never tuned to: the engine picks the oracle's side in ≥ 90% of queries; its
  total is ≤ 5% over.
* **Push-back storm**: a case query behind k queued queries: the engine sees ``node_queue=k``;
  the measured offload side adds k × its measured node exec (a queue of identical queries), the
  partial side k × its node half's.

Known caveats:
* A CFS quota caps CPU per period, not speed: a query needing less than ``cpus × period`` of CPU
  (50 ms at 0.5 core and the nodes' 100 ms) runs at full speed on an idle node, where the engine
  models every query 1/cpus slower; ``node_slowdown`` in the result shows how much it matters.
* The node and the host take turns on this machine's two cores (the host waits while the node
  works); the loopback transfer uses both. A busy machine moves every number.
* One Arrow thread on each side, where the thesis ran 6 (SmartNIC) and 32 (host) threads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nearfaas.dataservices import costmodels as cm
from nearfaas.dataservices import sql
from nearfaas.dataservices.decision import OffloadPolicy, query_view
from nearfaas.dataservices.partial import split
from nearfaas.dataservices.particles import particles
from nearfaas.dataservices.sketches import table_stats
from nearfaas.dataservices.templates import IDS, instantiate
from nearfaas.link.profiles import get_profile
from nearfaas.node.capacity import PERIOD_US
from nearfaas import cgroups as cg
from nearfaas.cgroups import CGROUP_ROOT

PROFILES = ("dc-25g", "s3-like")
POLICIES = ("always-offload", "always-push-back", "engine", "oracle")
SIDES = ("offload", "partial", "push-back")
CASE_ROWS = 6_177_731
CASES = {"5.3": "select * from particles where x >= 0.7 and y < 0.3 and z <= 0.1",
         "5.4": "select * from particles where x >= 0.5 and y < 0.55 and z <= 0.67"}
STORM_K = (0, 2, 4, 8, 16, 32)
TARGETS = {"correct_pct": 90.0, "over_oracle_pct": 5.0}
TRANSFER_CAP, REPEATS = 256 * 2**20, 3
SRC = Path(__file__).resolve().parents[2]  # this checkout's src/, for the worker
MEASURED = "measured here (one Arrow thread per side; the node capped by its cgroup)"
LINKED = "measured loopback + modelled link (profile first byte + bytes / bandwidth)"
MODELLED = "modelled (cost models + link profile, from the sketches)"


# ---- the storage node: a capped worker process -------------------------------------------------

class StorageCap:
    """A CPU quota for the storage worker: a cgroup of its own, made here, removed by ``remove``."""

    def __init__(self, cpus: float, period_us: int = PERIOD_US, root: str = CGROUP_ROOT):
        self.cpus, self.group, self.method, self.why = cpus, "", "", ""
        name, quota = f"nearfaas-bench-{os.getpid()}", int(cpus * period_us)
        v2 = cg.is_v2(root)  # v2 under the root, as node/capacity.py
        files = {"cpu.max": f"{quota} {period_us}"} if v2 else {"cpu.cfs_period_us": period_us, "cpu.cfs_quota_us": quota}
        try:
            if v2:
                cg.enable(root, "+cpu")
            own = "" if v2 else os.path.join("cpu", cg.own_cgroups().get("cpu", "/").lstrip("/"))
            cg.verify(os.path.join(root, own))  # a plain folder there would take a plain "group"
            os.mkdir(os.path.join(root, own, name))  # ours alone: an existing one is someone else's
            self.group = cg.make_cpu_group(os.path.join(root, own), name, cpus, v2, period_us)
            self.method = f"cgroup {'v2' if v2 else 'v1'} " + ", ".join(f"{k} = {v}" for k, v in files.items())
        except OSError as exc:
            self.fail(f"no writable CPU cgroup: {exc}")

    def fail(self, why: str) -> None:
        self.why, self.method = why, ""
        self.remove()

    def join(self, pid: int) -> None:
        try:
            cg.join(self.group, pid)
        except OSError as exc:
            self.fail(f"could not move the worker into {self.group}: {exc}")

    def cpu_stat(self) -> dict:
        return cg.cpu_stat(self.group)

    def remove(self) -> bool:
        """rmdir the group (retrying while an exiting worker still counts in it); True once gone."""
        for _ in range(100):
            try:
                return not self.group or os.rmdir(self.group) is None
            except FileNotFoundError:
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def describe(self) -> str:
        return f"{self.method} ({self.cpus:g} core) at {self.group}" if self.method else f"none: {self.why}"


def _open(path: str):
    import pyarrow as pa

    return pa.ipc.open_file(pa.memory_map(path)).read_all()


def _warm(table) -> None:
    """Touch every page of a memory-mapped table once (untimed), so no timing pays first faults."""
    import pyarrow.compute as pc

    for col in table.columns:
        pc.min_max(col)


def _timed(fn, repeats: int) -> tuple[float, object]:
    """(``costmodels.timeit`` seconds of ``fn``, its last value)."""
    last = {}
    return cm.timeit(lambda: last.__setitem__("v", fn()), repeats), last["v"]


def worker_main() -> None:
    """The storage node's loop (a process of its own): pickled ("open", name, path) and
    ("query", name, sql, repeats) on stdin, pickled answers on stdout."""
    inp, out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    tables = {}
    with cm.one_thread():
        while (msg := pickle.load(inp))[0] != "stop":
            try:
                if msg[0] == "open":
                    tables[msg[1]] = _open(msg[2])
                    _warm(tables[msg[1]])
                    reply = {"open_s": cm.timeit(lambda path=msg[2]: _open(path), 3)}
                else:
                    src, tree, repeats = {"particles": tables[msg[1]]}, sql.parse(msg[2]), msg[3]
                    exec_s, result = _timed(lambda: sql.execute(tree, src), repeats)  # noqa: B023 (called here)
                    serialize_s, buf = _timed(lambda: cm.ipc_stream(result), repeats)  # noqa: B023
                    reply = {"exec_s": exec_s, "serialize_s": serialize_s, "result_bytes": buf.size, "rows": result.num_rows}
                    del result, buf
            except Exception as exc:  # reported to the caller, which stops the run
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            pickle.dump(reply, out)
            out.flush()


class StorageNode:
    """The worker, moved into its capped group before its first request; ``close`` stops it and
    removes the group. A plain subprocess, not multiprocessing: nothing of the caller's main
    module is re-imported in it."""

    def __init__(self, cpus: float | None, period_us: int = PERIOD_US):
        self.cap = StorageCap(cpus, period_us) if cpus else None
        boot = f"import sys; sys.path.insert(0, {str(SRC)!r}); import nearfaas.bench.dataservices as d; d.worker_main()"
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError:
            self.cap and self.cap.remove()
            raise
        if self.cap and self.cap.group:
            self.cap.join(self.proc.pid)
        self.facts: dict = {}

    def ask(self, *msg) -> dict:
        try:
            pickle.dump(msg, self.proc.stdin)
            self.proc.stdin.flush()
            reply = pickle.load(self.proc.stdout)
        except (OSError, EOFError) as exc:
            raise RuntimeError(f"storage node gone (exit {self.proc.poll()}): {exc}") from None
        if "error" in reply:
            raise RuntimeError(f"storage node: {reply['error']}")
        return reply

    def close(self) -> dict:
        if not self.facts:
            try:
                pickle.dump(("stop",), self.proc.stdin)
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
            self.proc.stdout.close()
            cap = self.cap
            self.facts = {"storage_cap": cap.describe() if cap else "none: no --storage-cpus", "cpus": cap and cap.cpus,
                          "group": cap.group if cap else "", "cpu_stat": cap.cpu_stat() if cap and cap.method else {},
                          "group_removed": cap.remove() if cap else True}
        return self.facts


# ---- the pool, the models, the measurements ----------------------------------------------------

def pool_sizes(max_rows: int, quick: bool = False) -> list[int]:
    """Log-spaced sizes from 10^4 to ``max_rows`` (10^6 at most with ``quick``: 7 sizes, else 9),
    plus the case studies' 6,177,731 rows when the range reaches it."""
    top = min(max_rows, 10**6) if quick else max_rows
    sizes = {int(round(v)) for v in np.logspace(4, math.log10(top), 7 if quick else 9)} if top > 10**4 else {int(top)}
    return sorted(sizes | ({CASE_ROWS} if top >= CASE_ROWS else set()))


def _usable(folder: Path) -> dict | None:
    """The saved models' facts.json when they exist and were trained on this machine."""
    if not (folder / "facts.json").exists() or not (folder / "models.pkl").exists():
        return None
    doc = json.loads((folder / "facts.json").read_text())
    return None if cm.stale(doc["facts"]) else doc


def cost_models(max_rows: int, samples: int = 300, say=print) -> tuple[object, dict]:
    """The saved default models if they cover ``max_rows`` here; else the benchmark's own."""
    saved = _usable(cm.DEFAULT_PATH)
    have = saved["config"].get("max_rows", 0) if saved else 0
    own = cm.DEFAULT_PATH.parent / f"dataservices-models-rows{max_rows}-samples{samples}"
    folder = cm.DEFAULT_PATH if have >= max_rows else own
    why = (f"the saved default models were trained here up to {have:,} rows" if saved else "no saved default models here")
    trained_now, t0 = _usable(folder) is None, time.perf_counter()
    models = cm.load_or_train(folder, progress=say, samples=samples, max_rows=max_rows)
    return models, {"path": str(folder), "why": why, "trained_now": trained_now,
                    "load_or_train_s": round(time.perf_counter() - t0, 2), "config": models.config}


def _scratch(nbytes: int) -> str | None:
    try:
        return "/dev/shm" if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free > 1.25 * nbytes else None
    except OSError:
        return None


def _loopback_s(sink, payload, nbytes: int, repeats: int) -> float:
    """Measured loopback seconds for ``nbytes`` (a 256 MiB send scaled linearly above that)."""
    n = min(nbytes, len(payload))
    return cm.timeit(lambda: sink.send(payload[:n]), repeats) * nbytes / n


def link_s(nbytes: float, profile: str) -> float:
    """Modelled: the profile's expected first byte plus bytes / bandwidth."""
    return get_profile(profile).expected_transfer_s(nbytes)


def build_pool(sizes, folder: str, seed: int, node: StorageNode, sink, say) -> tuple[list[dict], memoryview]:
    """Write, sketch and map (both processes) each table; time its per-object costs."""
    import pyarrow as pa

    pool = []
    for i, rows in enumerate(sizes):
        t0, table = time.perf_counter(), particles(int(rows), seed=seed * 1000 + i)
        stats, path = table_stats(table), os.path.join(folder, f"particles-{rows}.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        del table
        mapped = _open(path)
        _warm(mapped)
        with cm.one_thread():
            open_s = cm.timeit(lambda path=path: _open(path), 3)
        pool.append({"name": f"t{i}", "rows": int(rows), "path": path, "bytes": os.path.getsize(path), "stats": stats,
                     "table": mapped, "host_open_s": open_s, "node_open_s": node.ask("open", f"t{i}", path)["open_s"]})
        say(f"table {i + 1}/{len(sizes)}: {rows:,} rows, {pool[-1]['bytes'] / 1e6:.1f} MB ({time.perf_counter() - t0:.1f} s)")
    payload = memoryview(bytes(min(TRANSFER_CAP, max(e["bytes"] for e in pool))))
    for e in pool:
        e["object_loopback_s"] = _loopback_s(sink, payload, e["bytes"], 3)
    return pool, payload


def sides(m: dict, object_bytes: int, profile: str) -> dict:
    """{side: seconds}: the measured parts + the profile's modelled link terms (None: no cut)."""
    o, q, p = m["offload"], m.get("partial"), m["pushback"]
    out = {"offload": (o["raw_deserialize_s"] + o["exec_s"] + o["serialize_s"] + o["transfer_loopback_s"]
                       + link_s(o["result_bytes"], profile) + o["deserialize_s"]),
           "partial": None,
           "push-back": p["transfer_loopback_s"] + link_s(object_bytes, profile) + p["deserialize_s"] + p["exec_s"]}
    if q is not None:
        out["partial"] = (o["raw_deserialize_s"] + q["node_exec_s"] + q["serialize_s"] + q["transfer_loopback_s"]
                          + link_s(q["intermediate_bytes"], profile) + q["deserialize_s"] + q["host_exec_s"])
    return out


def _choice(times: dict) -> str:
    """The fastest side; ties go to the earlier one (offload, partial, push-back), as the engine's."""
    return min((v, i, k) for i, (k, v) in enumerate(times.items()) if v is not None)[2]


def _host_side(tree, entry: dict, repeats: int) -> tuple[dict, object, object]:
    """The push-back side's host exec, the host's result, and the query's cut (None: no cut)."""
    src = {"particles": entry["table"]}
    with cm.one_thread():
        exec_s, result = _timed(lambda: sql.execute(tree, src), repeats)
    return {"transfer_loopback_s": entry["object_loopback_s"], "deserialize_s": entry["host_open_s"],
            "exec_s": exec_s}, result, split(tree, list(entry["stats"].columns))


def _partial_side(cut, entry: dict, node: StorageNode, sink, payload, repeats: int) -> dict:
    """Both halves measured: the node half on the capped node, the rest here over its result."""
    import pyarrow as pa

    half = node.ask("query", entry["name"], cut.node.sql(), repeats)
    with cm.one_thread():
        inter = sql.execute(cut.node, {"particles": entry["table"]})
        buf = cm.ipc_stream(inter)
        deser_s = cm.timeit(lambda: pa.ipc.open_stream(buf).read_all(), 3)
        host_s, _ = _timed(lambda: sql.execute(cut.host, {"particles": inter}), repeats)
    return {"node_sql": cut.node.sql(), "node_exec_s": half["exec_s"], "serialize_s": half["serialize_s"],
            "intermediate_bytes": half["result_bytes"], "intermediate_rows": half["rows"],
            "transfer_loopback_s": _loopback_s(sink, payload, buf.size, repeats), "deserialize_s": deser_s,
            "host_exec_s": host_s}


def measure(text: str, entry: dict, node: StorageNode, sink, payload, policy, cpus, repeats: int = REPEATS) -> dict:
    """One query: every side measured (node first, while the host waits), priced per profile, and
    the engine's choice per profile (``_views`` keeps its views for the case studies)."""
    import pyarrow as pa

    off = node.ask("query", entry["name"], text, repeats)
    tree = sql.parse(text)
    pushback, result, cut = _host_side(tree, entry, repeats)
    buf = cm.ipc_stream(result)
    with cm.one_thread():
        deser_s = cm.timeit(lambda: pa.ipc.open_stream(buf).read_all(), 3)
    rec = {"sql": text, "table_rows": entry["rows"], "object_bytes": entry["bytes"], "repeats": repeats, "rows": result.num_rows,
           "offload": {"raw_deserialize_s": entry["node_open_s"], "exec_s": off["exec_s"], "serialize_s": off["serialize_s"],
                       "result_bytes": off["result_bytes"], "transfer_loopback_s": _loopback_s(sink, payload, buf.size, repeats),
                       "deserialize_s": deser_s},
           "pushback": pushback,
           "results_agree": off["rows"] == result.num_rows and off["result_bytes"] == buf.size, "profiles": {}, "_views": {}}
    if cut is not None:
        rec["partial"] = _partial_side(cut, entry, node, sink, payload, repeats)
    for prof in PROFILES:
        t0 = time.perf_counter()
        view = query_view(tree, {"particles": entry["stats"]}, entry["bytes"], link=prof, node_cpus=cpus)
        pred = policy.decide(view)
        times = sides(rec, entry["bytes"], prof)
        rec["profiles"][prof] = {"offload_s": times["offload"], "partial_s": times["partial"], "pushback_s": times["push-back"],
                                 "oracle": _choice(times), "engine": pred.choice,
                                 "predicted_offload_s": pred.offload_s, "predicted_partial_s": pred.partial_s,
                                 "predicted_pushback_s": pred.pushback_s, "decide_s": time.perf_counter() - t0}
        rec["estimated_rows"], rec["_views"][prof] = view.output_rows, (view, pred)
    return rec


def _side_s(r: dict, side: str) -> float:
    return r[{"offload": "offload_s", "partial": "partial_s", "push-back": "pushback_s"}[side]]


def summarize(records: list[dict], profile: str) -> dict:
    """One profile's totals per policy, correct picks and engine vs oracle, twice: over the three
    sides (offload, partial, push-back), and over offload vs push-back alone (the thesis's two,
    the engine then choosing between its two predictions)."""
    rs = [r["profiles"][profile] for r in records]
    two = [dict(r, engine=_choice({"offload": r["predicted_offload_s"], "push-back": r["predicted_pushback_s"]}),
                oracle=_choice({"offload": r["offload_s"], "push-back": r["pushback_s"]})) for r in rs]
    err = [abs(r[f"predicted_{s}_s"] - r[f"{s}_s"]) / r[f"{s}_s"] * 100 for r in rs for s in ("offload", "partial", "pushback")
           if r[f"{s}_s"] is not None and r[f"predicted_{s}_s"] is not None]
    out = {**_scores(rs, SIDES), "two_sides": _scores(two, ("offload", "push-back")),
           "prediction_median_abs_err_pct": statistics.median(err) if err else None,
           "label": f"totals: {LINKED}; engine picks: {MODELLED}"}
    return out


def _scores(rs: list[dict], sides_: tuple) -> dict:
    totals = {"always-offload": sum(r["offload_s"] for r in rs), "always-push-back": sum(r["pushback_s"] for r in rs),
              "engine": sum(_side_s(r, r["engine"]) for r in rs), "oracle": sum(_side_s(r, r["oracle"]) for r in rs)}
    correct = sum(r["engine"] == r["oracle"] for r in rs)
    # a pick within 5% of the fastest side: a near tie, which timing noise decides either way
    near = sum(_side_s(r, r["engine"]) <= 1.05 * _side_s(r, r["oracle"]) for r in rs)
    out = {"queries": len(rs), "sides": list(sides_), "totals_s": totals, "correct": correct,
           "correct_pct": 100.0 * correct / max(1, len(rs)), "within_5pct_of_fastest": near,
           "over_oracle_pct": (totals["engine"] / totals["oracle"] - 1) * 100 if totals["oracle"] else 0.0,
           "oracle_wins": {c: sum(r["oracle"] == c for r in rs) for c in sides_},
           "engine_picks": {c: sum(r["engine"] == c for r in rs) for c in sides_}}
    out["targets_met"] = {"correct_pct": out["correct_pct"] >= TARGETS["correct_pct"],
                          "over_oracle_pct": out["over_oracle_pct"] <= TARGETS["over_oracle_pct"]}
    return out


def case_table(rec: dict) -> list[dict]:
    """Table 5.9's rows for one case (dc-25g): estimated (modelled) vs actual (measured + link).
    Deserialization has no model term: its estimate is the measurement, as the thesis prints it."""
    e, o, p = rec["_views"]["dc-25g"][1].parts, rec["offload"], rec["pushback"]
    rows = [("Raw Data Deserialization", o["raw_deserialize_s"], o["raw_deserialize_s"], p["deserialize_s"], p["deserialize_s"]),
            ("Query Execution", e["offload_exec_s"], o["exec_s"], e["pushback_exec_s"], p["exec_s"]),
            ("Result Serialization", e["offload_serialize_s"], o["serialize_s"], None, None),
            ("Network Transfer", e["offload_transfer_s"], o["transfer_loopback_s"] + link_s(o["result_bytes"], "dc-25g"),
             e["pushback_transfer_s"], p["transfer_loopback_s"] + link_s(rec["object_bytes"], "dc-25g")),
            ("Result Deserialization", o["deserialize_s"], o["deserialize_s"], None, None)]
    out = []
    for label, *vals in [*rows, ["Sum"] + [sum(r[i] for r in rows if r[i] is not None) for i in range(1, 5)]]:
        us = [None if v is None else v * 1e6 for v in vals]
        diff = [None if a is None else abs(a - b) / b * 100 if b else 0.0 for a, b in ((us[0], us[1]), (us[2], us[3]))]
        out.append({"row": label, "offloaded": {"estimated_us": us[0], "actual_us": us[1], "abs_diff_pct": diff[0]},
                    "pushed_back": {"estimated_us": us[2], "actual_us": us[3], "abs_diff_pct": diff[1]}})
    return out


def storm(rec: dict, policy: OffloadPolicy) -> dict:
    """The case query behind k queued queries on the node (dc-25g): the engine's pick vs measured."""
    view, rows = rec["_views"]["dc-25g"][0], []
    times = sides(rec, rec["object_bytes"], "dc-25g")
    for k in STORM_K:
        pred = policy.decide(dataclasses.replace(view, node_queue=k))
        queued = dict(times, offload=times["offload"] + k * rec["offload"]["exec_s"])
        if times["partial"] is not None:
            queued["partial"] = times["partial"] + k * rec["partial"]["node_exec_s"]
        rows.append({"k": k, "engine": pred.choice, "reason": pred.reason, "predicted_offload_s": pred.offload_s,
                     "predicted_partial_s": pred.partial_s, "predicted_pushback_s": pred.pushback_s,
                     "offload_s": queued["offload"], "partial_s": queued["partial"], "pushback_s": queued["push-back"],
                     "oracle": _choice(queued)})
    return {"rows": rows, "flip_k": {w: next((r["k"] for r in rows if r[w] != "offload"), None) for w in ("engine", "oracle")},
            "label": f"queue: k x measured node exec; sides: {LINKED}; engine: {MODELLED}"}


def _median(xs):
    return statistics.median(xs) if xs else None


def run(quick: bool = False, queries: int | None = None, max_rows: int = 10**7, storage_cpus: float | None = 0.5,
        seed: int = 0, models=None, sizes=None, samples: int = 300, period_us: int = PERIOD_US, progress=None) -> dict:
    """The whole benchmark; a JSON-able dict (``table`` prints it). ``models`` skips training."""
    say, started = progress or (lambda msg: None), time.monotonic()
    queries = queries if queries is not None else (100 if quick else 300)
    sizes = sorted(sizes) if sizes else pool_sizes(max_rows, quick)
    case_rows = CASE_ROWS if CASE_ROWS in sizes else max(sizes)
    if models is None:
        models, model_info = cost_models(max(sizes), samples, say)
    else:
        model_info = {"path": "", "why": "given by the caller", "trained_now": False, "config": models.config}
    policy, rng = OffloadPolicy(models), np.random.default_rng(seed)
    folder = tempfile.mkdtemp(prefix="nearfaas-bench-ds-", dir=_scratch(sum(sizes) * 80))
    records, cases, node = [], {}, None
    try:
        node = StorageNode(storage_cpus, period_us)
        say(f"storage node: {node.cap.describe() if node.cap else 'uncapped'}")
        with cm.LoopbackSink() as sink:
            pool, payload = build_pool(sizes, folder, seed, node, sink, say)
            t0 = time.monotonic()
            for i in range(queries):
                entry, tid = pool[int(rng.integers(len(pool)))], IDS[int(rng.integers(len(IDS)))]
                records.append({"i": i, "template": tid,
                                **measure(instantiate(tid, rng), entry, node, sink, payload, policy, storage_cpus)})
                if (i + 1) % 25 == 0 or i + 1 == queries:
                    say(f"queries: {i + 1}/{queries} ({time.monotonic() - t0:.0f} s)")
            entry = next(e for e in pool if e["rows"] == case_rows)
            for cid, text in CASES.items():
                rec = measure(text, entry, node, sink, payload, policy, storage_cpus)
                cases[cid] = {"sql": text, "table_rows": case_rows, "rows": rec["rows"], "estimated_rows": rec["estimated_rows"],
                              "table59": case_table(rec), "storm": storm(rec, policy),
                              "choice": {w: rec["profiles"]["dc-25g"][w] for w in ("engine", "oracle")}}
    finally:
        storage = node.close() if node else {"storage_cap": "none: the worker did not start", "group_removed": True}
        shutil.rmtree(folder, ignore_errors=True)
    quota_s = (storage_cpus or 1) * period_us / 1e6
    for r in records:
        del r["_views"]  # the engine's views, kept for the case studies only
    slow = [(r["offload"]["exec_s"] / r["pushback"]["exec_s"], r["pushback"]["exec_s"] < quota_s) for r in records]
    return {"benchmark": "dataservices", "quick": quick, "seed": seed, "queries": queries, "sizes": sizes,
            "scratch": os.path.dirname(folder), "storage": storage, "storage_cap": storage["storage_cap"],
            "period_us": period_us,
            "models": model_info, "profiles": {p: summarize(records, p) for p in PROFILES}, "targets": TARGETS,
            "cases": cases, "case_rows": case_rows,
            "node_slowdown": {"modelled": 1 / storage_cpus if storage_cpus and storage_cpus < 1 else 1.0,
                              "measured_median": _median([x for x, _ in slow]),
                              "measured_median_within_one_period_quota": _median([x for x, short in slow if short]),
                              "measured_median_beyond_it": _median([x for x, short in slow if not short]),
                              "label": "measured node exec / host exec, per query"},
            "results_agree": sum(r["results_agree"] for r in records), "records": records,
            "labels": {"measured": MEASURED, "totals": LINKED, "engine": MODELLED},
            "elapsed_s": round(time.monotonic() - started, 1)}
