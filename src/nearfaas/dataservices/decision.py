"""Offload or push back: the thesis's decision engine (Ch. 5.4), one object for the live gateway
and the benchmark.

``OffloadPolicy.decide(view) -> Prediction``: given what a query will do (its operations vector,
estimated from the object's sketches: ``operations``), the object's size, the storage node's CPU
capacity and queue, and the link between the node and the host, it predicts the end-to-end time
of both placements with the cost models (``costmodels``) and picks the smaller. Like the
placement policies (placement/policy.py) it reads only its argument: no clock, no I/O.

The ladder:
1. **No cost models** (never trained here): offload — near the data is the platform's default,
   and a query's result is never larger than its input. Reason ``no-models``.
2. **Predict both**:
   offload   = queue + exec(ops) / node speed + serialize(result) + transfer(result bytes, link)
   push-back = transfer(object bytes, link) + exec(ops) / host speed
   where exec is the query-time forest (one Arrow thread at a full core, as it was trained); on a
   node of ``cpus`` < 1 core the query and its serialization run under a CFS quota, so work that
   fits in one period's quota (cpus × 100 ms) runs at full speed and longer work slows towards
   1/cpus (``quota_time``); the queue is the node's queries ahead of this one × this query's
   time there. A forest
   cannot extrapolate: beyond the largest table (or transfer) it was trained on, it is asked at
   that size and its answer scaled linearly (Arrow's kernels are linear in elements).
   partial   = queue + (exec(node ops) + serialize(intermediate)) at node speed
               + transfer(intermediate bytes, link) + exec(host ops) / host speed
   where the node part is the WHERE and the columns the rest reads, the host part the rest
   (``partial.split``); the host part's operations are its operations over the whole table
   scaled to the intermediate's estimated rows. A query with no cut (``SELECT *``, a UNION) has
   no partial side, and one that cannot run whole per object (an aggregate over a prefix of
   objects: ``offload_whole=False``) has no offload side.
3. **Pick the smallest**; ties go to offload, then partial (less data moves).

Worked example (this machine's models, `nearfaas dataservices train` defaults; a storage node of
0.5 core; dc-25g): Q 5.3 on 6,177,731 rows (55k kept, estimated) — offload 11.4 ms (8.8 exec,
which fits in one period's 50 ms quota and so runs at full speed, + 0.2 to serialize + 2.5 to
move 3.7 MB) against push-back 272.5 ms (263.7 to move the 445 MB table + 8.8 exec) → offload,
and still offload with 16 queries queued on the node (154.8 ms). Q 5.4 (18% kept, 75 MB of
result): offload 145.6 ms (101.2 for the query and its serialization under the quota + 44.4 to
move the result) against 302.0 ms → offload; with 2 queries queued ahead on the node its offload
side is 348.0 ms and it is pushed back: the "push-back storm" guard.

Known caveats:
* Result rows are estimates (``cardinality``); a wrong estimate moves the serialize and transfer
  terms, not the exec term (which already counts the filter over every row).
* Bytes per output row assume 8-byte columns (the particle schema's); strings are not modelled.
* The host part's operations are scaled from the whole table's, so a GROUP BY's groups are the
  whole table's estimate, not the filtered rows'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlglot import exp

from nearfaas.dataservices.operations import operations, output_shape
from nearfaas.dataservices.partial import split

BYTES_PER_COLUMN = 8


@dataclass(frozen=True)
class PartialView:
    """The two halves of a partial push-back, as the models see them."""
    node_ops: dict  # the node part's operations vector
    rows: float  # the intermediate's estimated rows
    columns: int  # and columns
    host_ops: dict  # the host part's operations over the intermediate


@dataclass(frozen=True)
class QueryView:
    ops: dict  # operations vector (operations.operations)
    output_rows: float
    output_columns: int
    object_bytes: int  # what a push-back moves
    link: str = "local"  # link profile name between the node and the host
    node_cpus: float | None = None  # the storage node's capacity (None: a full core or more)
    host_cpus: float | None = None
    node_queue: int = 0  # queries already running or waiting on the node
    partial: PartialView | None = None  # None: no cut (partial push-back is not a choice)
    offload_whole: bool = True  # False: the whole query cannot run on one node (aggregate over many objects)


@dataclass(frozen=True)
class Prediction:
    choice: str  # "offload" | "partial" | "push-back"
    reason: str
    offload_s: float | None = None
    pushback_s: float | None = None
    parts: dict = field(default_factory=dict)
    partial_s: float | None = None  # None: partial push-back was not a choice

    def header(self) -> str:
        """The X-Nearfaas-Predicted value: modelled, with each side in milliseconds."""
        if self.pushback_s is None:
            return f"modelled; choice={self.choice}; reason={self.reason}"
        sides = [("offload_ms", self.offload_s), ("partial_ms", self.partial_s), ("push_back_ms", self.pushback_s)]
        shown = "; ".join(f"{k}={v * 1e3:.2f}" for k, v in sides if v is not None)
        return f"modelled; choice={self.choice}; {shown}; reason={self.reason}"


#: The CFS bandwidth period a node's CPU quota is written with (node/capacity.py uses it).
CFS_PERIOD_S = 0.1


def quota_time(cpu_s: float, cpus: float | None) -> float:
    """Wall time of ``cpu_s`` seconds of one thread's work under a CFS quota of ``cpus`` cores:
    it runs at full speed for cpus × period in each period, then waits for the next one. Work
    that fits in one period's quota is not slowed at all (measured here: a 0.5-core node ran
    small queries at the host's speed, large ones at about half)."""
    if cpus is None or cpus >= 1 or cpu_s <= 0:
        return max(cpu_s, 0.0)
    quota = cpus * CFS_PERIOD_S
    full = math.ceil(cpu_s / quota) - 1  # quota slices used up before the last one
    return full * CFS_PERIOD_S + (cpu_s - full * quota)


class OffloadPolicy:
    def __init__(self, models=None):
        self.models = models

    def _exec_s(self, ops: dict) -> float:
        top = float(self.models.config.get("max_rows") or 0)
        rows = float(ops.get("table_rows", 0))
        if top and rows > top:
            f = top / rows
            return self.models.predict_query_time({k: v * f for k, v in ops.items()}) / f
        return self.models.predict_query_time(ops)

    def _table_s(self, fn, rows: float, cols: int, row_bytes: float) -> float:
        """A size or serialization model, linear beyond the largest table it was trained on (in
        rows, and in bytes: a wide result reaches the training's largest bytes before its rows)."""
        if rows <= 0:
            return 0.0
        cfg = self.models.config
        limits = [float(cfg["max_rows"])] if cfg.get("max_rows") else []
        if cfg.get("max_bytes") and row_bytes > 0:
            limits.append(float(cfg["max_bytes"]) / row_bytes)
        top = min(limits) if limits else 0.0
        if top and rows > top:
            return fn(top, cols, row_bytes) * rows / top
        return fn(rows, cols, row_bytes)

    def _transfer_s(self, nbytes: float, link: str) -> float:
        from nearfaas.link.profiles import get_profile

        top = float(self.models.config.get("max_bytes") or 0)
        measured = self.models.predict_transfer_time(min(nbytes, top) if top else nbytes)
        if top and nbytes > top:
            measured *= nbytes / top
        return measured + get_profile(link).expected_transfer_s(nbytes)

    def _node_s(self, ops: dict, rows: float, cols: int, cpus: float | None) -> tuple[float, float, float, float]:
        """(exec at a full core, then exec, serialize and result bytes on a node of ``cpus``): the
        query and the serialization of its result share the node's CPU quota."""
        m = self.models
        exec_s = self._exec_s(ops)
        row_bytes = BYTES_PER_COLUMN * max(1, cols)
        nbytes = self._table_s(m.predict_size, rows, cols, row_bytes)
        serialize_s = self._table_s(m.predict_serialization_time, rows, cols, row_bytes)
        node_s = quota_time(exec_s + serialize_s, cpus)
        share = exec_s / (exec_s + serialize_s) if exec_s + serialize_s > 0 else 1.0
        return exec_s, node_s * share, node_s * (1 - share), nbytes

    def predict(self, q: QueryView) -> dict:
        full_s, exec_s, serialize_s, result_bytes = self._node_s(q.ops, q.output_rows, q.output_columns, q.node_cpus)
        parts = {
            "offload_queue_s": q.node_queue * (exec_s + serialize_s),
            "offload_exec_s": exec_s,
            "offload_serialize_s": serialize_s,
            "offload_transfer_s": self._transfer_s(result_bytes, q.link),
            "pushback_transfer_s": self._transfer_s(q.object_bytes, q.link),
            "pushback_exec_s": quota_time(full_s, q.host_cpus),
            "result_bytes": result_bytes,
        }
        parts["offload_s"] = sum(parts[k] for k in ("offload_queue_s", "offload_exec_s", "offload_serialize_s",
                                                     "offload_transfer_s"))
        parts["pushback_s"] = parts["pushback_transfer_s"] + parts["pushback_exec_s"]
        if q.partial is not None:
            p = q.partial
            _, node_exec, node_ser, inter_bytes = self._node_s(p.node_ops, p.rows, p.columns, q.node_cpus)
            parts |= {"partial_queue_s": q.node_queue * (node_exec + node_ser), "partial_node_exec_s": node_exec,
                      "partial_serialize_s": node_ser, "partial_transfer_s": self._transfer_s(inter_bytes, q.link),
                      "partial_host_exec_s": quota_time(self._exec_s(p.host_ops), q.host_cpus),
                      "intermediate_bytes": inter_bytes}
            parts["partial_s"] = sum(parts[k] for k in ("partial_queue_s", "partial_node_exec_s", "partial_serialize_s",
                                                         "partial_transfer_s", "partial_host_exec_s"))
        return parts

    def decide(self, q: QueryView) -> Prediction:
        if self.models is None:
            return Prediction("offload" if q.offload_whole else "partial", "no-models")
        p = self.predict(q)
        sides = {"offload": p["offload_s"] if q.offload_whole else None, "partial": p.get("partial_s"),
                 "push-back": p["pushback_s"]}
        choice = _smallest(sides)
        unqueued = _smallest({**sides, "offload": sides["offload"] and sides["offload"] - p["offload_queue_s"],
                              "partial": sides["partial"] and sides["partial"] - p["partial_queue_s"]})
        reason = "queue" if choice != unqueued else "cost"
        return Prediction(choice, reason, sides["offload"], p["pushback_s"], p, sides["partial"])


def _smallest(sides: dict) -> str:
    """The side with the least time; ties go to the earlier key (offload, partial, push-back)."""
    return min((v, i, k) for i, (k, v) in enumerate(sides.items()) if v is not None)[2]


def query_view(tree, stats: dict, object_bytes: int, partial: bool = True, **kwargs) -> QueryView:
    """The QueryView of a parsed query over tables with ``stats`` ({name: TableStats});
    ``partial=False`` leaves partial push-back out of the choices."""
    ops = operations(tree, stats)
    rows, cols = output_shape(tree, stats)
    cut = partial_view(tree, stats) if partial else None
    return QueryView(ops=ops, output_rows=rows, output_columns=len(cols), object_bytes=object_bytes, partial=cut, **kwargs)


def partial_view(tree, stats: dict) -> PartialView | None:
    """The models' view of ``partial.split(tree)`` over one table with ``stats``; None: no cut."""
    name = next(iter(tree.find_all(exp.Table))).name
    if name not in stats:
        return None
    cut = split(tree, list(stats[name].columns))
    if cut is None:
        return None
    node_ops = operations(cut.node, stats)
    rows = node_ops["output_rows"]
    host_ops = operations(cut.host, stats)
    f = rows / host_ops["table_rows"] if host_ops["table_rows"] else 0.0
    scaled = {k: v * f for k, v in host_ops.items()}
    scaled["table_rows"], scaled["output_rows"] = rows, min(host_ops["output_rows"], rows)
    return PartialView(node_ops=node_ops, rows=rows, columns=len(cut.columns), host_ops=scaled)
