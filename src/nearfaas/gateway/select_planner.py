"""Where an S3 Select runs: the decision engine (dataservices/decision.py) in the live gateway.

For each SelectObjectContent the gateway asks ``SelectPlanner.plan``: it fetches the object's
column sketches from the storage node that would run the query (node/tabular_stats.py; cached
per ETag), builds the query's operations vector from them, and lets ``OffloadPolicy`` compare
offload (run on that node, at its CPU capacity, behind its queue of selects) with push-back
(move the object to the gateway and run there) over the cluster's link profile. The prediction
rides back as ``X-Nearfaas-Predicted`` beside the measured outcome, and every decision is
counted in ``/metrics`` (``nearfaas_dataservices_decisions_total{choice,reason}``).

The ladder, before the engine: no cost models on this machine (``nearfaas dataservices train``
makes them; ``NEARFAAS_DATASERVICES_MODELS`` points elsewhere) → offload ("no-models"); no
statistics for this version of the object (not tabular, or not sketched yet) → offload
("no-statistics"); a query the estimator cannot read → offload ("unestimated"; the node answers
its error).

Known caveats:
* The node's queue counted is this gateway's selects in flight on it, not other work there.
* Sketches may come from another replica than the one that runs the query; a replica that is a
  version behind can lend the older version's sketches (they steer a placement, never an answer).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from nearfaas.gateway.nodes import NodeError

# The engine (sqlglot, pyarrow, datasketches: a second of the gateway's start-up, most of it) is
# loaded by the first select or query (``load_engine``), off the event loop; a gateway that serves
# none never loads it. The functions that use it import it where they use it.
if TYPE_CHECKING:
    from nearfaas.dataservices.decision import OffloadPolicy, Prediction
    from nearfaas.dataservices.sketches import TableStats

MODELS_ENV = "NEARFAAS_DATASERVICES_MODELS"
_ENGINE = ("pyarrow", "nearfaas.dataservices.sql", "nearfaas.dataservices.objects", "nearfaas.dataservices.decision",
           "nearfaas.dataservices.partial", "nearfaas.dataservices.select_request", "nearfaas.dataservices.sketches",
           "nearfaas.dataservices.select")


async def load_engine() -> None:
    """Import the query engine in a thread, once: a second of imports on the event loop would
    stall every request (and the health polls) the gateway is serving."""
    if not all(name in sys.modules for name in _ENGINE):
        await asyncio.to_thread(lambda: [importlib.import_module(name) for name in _ENGINE])


def load_models():
    """This machine's cost models, or None (not trained here, or trained on another machine)."""
    from nearfaas.dataservices import costmodels

    folder = Path(os.environ.get(MODELS_ENV) or costmodels.DEFAULT_PATH)
    try:
        models = costmodels.load(folder)
    except (OSError, ValueError, EOFError, ImportError, AttributeError):
        return None
    return None if costmodels.stale(models.facts) else models


class SelectPlanner:
    def __init__(self, nodes, link: str = "local", models=None, registry=None):
        self.nodes, self.link, self._models = nodes, link, models
        self.inflight: dict[str, int] = defaultdict(int)
        self._stats: dict[tuple, TableStats | None] = {}
        self.decisions = None
        if registry is not None:
            from prometheus_client import Counter

            self.decisions = Counter("nearfaas_dataservices_decisions", "S3 Select placements chosen by the decision engine "
                                     "(modelled predictions)", ["choice", "reason"], registry=registry)

    @functools.cached_property
    def policy(self) -> OffloadPolicy:
        from nearfaas.dataservices.decision import OffloadPolicy

        return OffloadPolicy(self._models)

    async def plan(self, bucket: str, key: str, node: str, request) -> Prediction:
        """Where an S3 Select (``request``: its parsed XML) on the object runs."""
        await load_engine()
        from nearfaas.dataservices import sql
        from nearfaas.dataservices.select_request import to_engine_sql

        return await self._count(await self._plan(bucket, key, node, lambda cols: (
            sql.parse(to_engine_sql(request.expression, cols)), "S3Object")))

    async def plan_query(self, bucket: str, key: str, node: str, tree, whole: bool = True):
        """(where one object's part of a /system/query runs, the query's cut for partial
        push-back or None): ``tree`` is the parsed SQL; ``whole=False`` when the query cannot run
        whole per object (an aggregate over a prefix), so offload is not a choice."""
        await load_engine()
        from nearfaas.dataservices import sql
        from nearfaas.dataservices.decision import Prediction
        from nearfaas.dataservices.partial import split

        name = next(iter(tree.find_all(sql.exp.Table))).name
        cut: list = [None]

        def make(cols):
            cut[0] = split(tree, cols)
            return tree, name

        pred = await self._plan(bucket, key, node, make, partial=True, offload_whole=whole)
        if pred.choice == "offload" and not whole:  # a ladder answer (no models, no statistics)
            pred = Prediction("partial", pred.reason)
        return await self._count(pred), cut[0]

    async def _count(self, pred: Prediction) -> Prediction:
        if self.decisions is not None:
            self.decisions.labels(pred.choice, pred.reason).inc()
        return pred

    async def _plan(self, bucket: str, key: str, node: str, make_tree, **view_args) -> Prediction:
        from nearfaas.dataservices import sql
        from nearfaas.dataservices.decision import Prediction, query_view
        from nearfaas.dataservices.select_request import SelectRequestError

        if self.policy.models is None and not view_args.get("partial"):
            return Prediction("offload", "no-models")
        found = await self._statistics(bucket, key, node)  # a partial cut needs the columns, models or not
        if found is None:
            return Prediction("offload", "no-statistics")
        stats, size = found
        try:
            tree, name = make_tree(list(stats.columns))
            if self.policy.models is None:
                return Prediction("offload", "no-models")
            view = query_view(tree, {name: stats}, size, link=self.link, node_cpus=self._cpus(node),
                              node_queue=self.inflight[node], **{"partial": False, **view_args})
        except (sql.QueryError, SelectRequestError, KeyError, ValueError):
            return Prediction("offload", "unestimated")
        return self.policy.decide(view)

    def _cpus(self, node: str) -> float | None:
        capacity = (self.nodes.nodes[node].status or {}).get("capacity") or {}
        return capacity.get("cpus")

    async def _statistics(self, bucket: str, key: str, node: str):
        """The object's sketches: from the node that would run the query, else from another
        replica (a node sketches after the write, one object at a time, so one may be behind)."""
        others = [n.name for n in self.nodes.storage_nodes(healthy_only=True) if n.name != node]
        doc = None
        for name in [node, *others]:
            try:
                body = await self.nodes.call(name, "GET", f"/_nearfaas/stats?bucket={quote(bucket)}&prefix={quote(key)}",
                                             timeout=5)
            except NodeError:
                continue
            doc = next((d for d in body.get("objects", []) if d.get("key") == key and "size" in d), None)
            if doc is not None:
                break
        if doc is None:
            return None
        from nearfaas.dataservices.sketches import TableStats

        cache_key = (bucket, key, doc["etag"])
        if cache_key not in self._stats:
            if len(self._stats) > 1024:
                self._stats.clear()
            self._stats[cache_key] = TableStats.from_json(doc["stats"])
        return self._stats[cache_key], int(doc["size"])

    def track(self, node: str, body) -> _Tracked:
        """``body`` (an async iterator) counted as one select in flight on ``node`` until it ends
        or is closed, whichever comes first (also when it is closed before it starts)."""
        self.inflight[node] += 1
        return _Tracked(self.inflight, node, body)


class _Tracked:
    def __init__(self, inflight: dict, node: str, body):
        self._inflight, self._node, self._body, self._open = inflight, node, body, True

    def __aiter__(self):
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._body.__anext__()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._inflight[self._node] -= 1
            close = getattr(self._body, "aclose", None)
            if close is not None:
                await close()
