"""POST /system/query: SQL over the tabular objects under an S3 prefix, answered as a table;
GET /system/stats?source=s3://bucket/prefix: their column statistics, merged.

    POST /system/query  {"sql": "SELECT id, x FROM particles WHERE x > 0.9",
                         "source": "s3://bucket/runs/2026-11/", "format": "arrow"}
    (or {"substrait": "<a Substrait Plan, serialized, base64>", "source": …}: DataFusion turns it
    into SQL, dataservices/substrait.py, answered with X-Nearfaas-Sql saying what ran)
    -> 200, the result as an Arrow IPC stream (or "parquet", "csv", "jsonl"),
       X-Nearfaas-Placement: offload:11, push-back:1, X-Nearfaas-Objects: 12, X-Nearfaas-Rows: ?/431

A prefix's objects are one table (the thesis's multi-source queries): their schemas must agree,
and the query names that table by any one name (``FROM particles``, ``FROM S3Object``). Every
failure is a 4xx naming the cause: SQL that does not parse (line and column), a join, an
unknown column, an object that is not tabular or whose schema differs, a source that is not
``s3://bucket/prefix``, a prefix with no objects, or one over the limits below.

Each object's part runs where the decision engine says (gateway/select_planner.py), and the
``X-Nearfaas-Placement`` header counts each choice:
* **offload**: the whole query on the storage node holding the object — only for a query whose
  answer over a union of objects is the union of its answers per object (filters, projections);
* **partial**: the query's cut (dataservices/partial.py): the WHERE and the needed columns on the
  node, the rest here over the intermediates. This is how an aggregate, GROUP BY or LIMIT over a
  prefix runs near the data: every object's filtered rows come here and the rest runs once;
* **push-back**: the object fetched whole and its part run here.
A node that cannot answer (gone, overloaded, a 404) falls back to push-back for that object.

Known caveats:
* Aggregates are not split into partial aggregates on the nodes (a sum of per-object sums): for
  a GROUP BY the intermediates are the filtered rows, not the groups.
* Without a planner (no storage nodes) the objects are fetched and the query runs here, read
  whole: at most ``MAX_OBJECTS`` objects and ``MAX_BYTES`` bytes per query.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp
from aiohttp import web

from nearfaas.gateway.api.common import error, json_body
from nearfaas.gateway.nodes import NodeError
from nearfaas.gateway.select_planner import load_engine
from nearfaas.s3.errors import S3Error

# The engine (pyarrow, sqlglot: a second of the gateway's start-up, most of it) is loaded by the
# first query, off the event loop (select_planner.load_engine); the functions that use it import it
# where they use it. A gateway that serves no query never loads it.
if TYPE_CHECKING:
    import pyarrow as pa

MAX_OBJECTS = 1000
MAX_BYTES = 1 << 30
CONTENT_TYPES = {"arrow": "application/vnd.apache.arrow.stream", "parquet": "application/vnd.apache.parquet",
                 "csv": "text/csv", "jsonl": "application/x-ndjson"}


class QueryError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class QueryAPI:
    def __init__(self, backend, nodes=None):
        self.backend, self.nodes = backend, nodes

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_post("/system/query", self.query)
        r.add_get("/system/stats", self.stats)

    async def stats(self, request: web.Request) -> web.Response:
        """The storage nodes' sketches of the objects under ``source`` (node/tabular_stats.py),
        the current version of each, merged into one table's statistics."""
        try:
            _, bucket, prefix, _ = _arguments({"sql": "-", "source": request.query.get("source")})
            await load_engine()
            current = {info.key: info.etag for info in await self._listing(bucket, prefix)}
        except QueryError as exc:
            return error(exc.status, str(exc))
        found: dict[str, dict] = {}
        for node in self.nodes.storage_nodes(healthy_only=True):
            try:
                body = await self.nodes.call(node.name, "GET", f"/_nearfaas/stats?bucket={quote(bucket)}&prefix={quote(prefix)}")
            except NodeError:
                continue  # its replicas' statistics come from the other nodes, or count as missing
            for doc in body.get("objects", []):
                if current.get(doc["key"]) == doc.get("etag"):
                    found[doc["key"]] = doc
        try:
            summary = await asyncio.to_thread(_summary, [found[k] for k in sorted(found)])
        except ValueError as exc:
            return error(400, f"source: {exc}")
        missing = sorted(set(current) - set(found))
        return web.json_response({"source": f"s3://{bucket}/{prefix}", "objects": len(current), "objects_with_stats": len(found),
                                  "missing": missing[:20], **summary,
                                  "label": "modelled: sketch estimates (KLL quantiles, Theta distinct counts)"})

    async def _listing(self, bucket: str, prefix: str) -> list:
        out, after = [], ""
        try:
            while True:
                page = await self.backend.list_objects(bucket, prefix=prefix, max_keys=1000, start_after=after)
                out += page.contents
                if len(out) > MAX_OBJECTS:
                    raise QueryError(413, f"source: s3://{bucket}/{prefix} holds more than {MAX_OBJECTS} objects; "
                                          "name a narrower prefix")
                if not page.is_truncated or not page.contents:
                    return out
                after = page.next_marker or page.contents[-1].key
        except S3Error as exc:
            raise QueryError(exc.status if exc.status < 500 else 503, f"source: {exc.code}: {exc.message}") from None

    async def query(self, request: web.Request) -> web.Response:
        started = time.monotonic()
        body = await json_body(request)
        await load_engine()
        try:
            if "substrait" in body:
                body = {**body, "sql": await asyncio.to_thread(_substrait_sql, body.get("substrait"))}
            text, bucket, prefix, fmt = _arguments(body)
            tree = _parse(text)
            placed_result = None
            if getattr(self.backend, "planner", None) is not None:
                placed_result = await self._per_object(bucket, prefix, tree)
            predicted = None
            if placed_result is not None:
                result, placed, n, predicted = placed_result
                rows_in = "?"
            else:
                tables = await self._tables(bucket, prefix)
                result, table = await asyncio.to_thread(_run, tree, tables)
                placed, n, rows_in = {"push-back": len(tables)}, len(tables), table.num_rows
        except QueryError as exc:
            return error(exc.status, str(exc))
        from nearfaas.dataservices import objects

        payload = objects.write_table(result, "arrow-stream" if fmt == "arrow" else fmt)
        headers = {"X-Nearfaas-Placement": ", ".join(f"{k}:{v}" for k, v in sorted(placed.items())),
                   "X-Nearfaas-Objects": str(n), "X-Nearfaas-Rows": f"{rows_in}/{result.num_rows}",
                   "X-Nearfaas-Elapsed-Ms": f"{(time.monotonic() - started) * 1000:.1f}; measured"}
        if predicted:
            headers["X-Nearfaas-Predicted"] = predicted
        if "substrait" in body:  # what the plan became, so the caller can see what ran
            headers["X-Nearfaas-Sql"] = quote(tree.sql(), safe=" ()*,.<>=!+-/'\"_")[:2000]
        return web.Response(body=payload, headers=headers, content_type=CONTENT_TYPES[fmt])

    async def _per_object(self, bucket: str, prefix: str, tree):
        """(result, placements, objects), each object's part placed by the decision engine; None
        when the query cannot be placed per object (an aggregate, and no object's columns known
        to cut it by): the caller runs it all here."""
        listing = await self._listing(bucket, prefix)
        if not listing:
            raise QueryError(404, f"source: no objects under s3://{bucket}/{prefix}")
        whole, planner = _distributive(tree), self.backend.planner
        nodes = [await self.backend.query_node(bucket, info.key) for info in listing]
        gate, placed = asyncio.Semaphore(4), {}  # at most 4 objects' calls to the nodes at once

        async def plan(key: str, node: str | None):
            async with gate:
                return await planner.plan_query(bucket, key, node, tree, whole) if node else await _no_plan()

        plans = await asyncio.gather(*(plan(info.key, node) for info, node in zip(listing, nodes, strict=True)))
        cut = next((c for _, c in plans if c is not None), None)
        if not whole and cut is None:
            return None

        async def one(key: str, node: str | None, choice: str) -> pa.Table:
            async with gate:
                if choice == "partial" and cut is None:
                    choice = "offload"  # distributive, and nothing known to cut by: the whole query there
                part = None
                if node is not None and choice != "push-back":
                    part = await self._offload(node, bucket, key, tree if choice == "offload" else cut.node)
                if part is None:
                    choice = "push-back"
                    table = (await self._fetch(bucket, [key]))[0][1]
                    part = await asyncio.to_thread(_execute, tree if whole else cut.node, table)
                elif choice == "partial" and whole:
                    part = await asyncio.to_thread(_execute, cut.host, part)
                placed[choice] = placed.get(choice, 0) + 1
                return part

        parts = await asyncio.gather(*(one(info.key, node, pred.choice)
                                       for info, node, (pred, _) in zip(listing, nodes, plans, strict=True)))
        import pyarrow as pa

        try:
            result = pa.concat_tables(parts, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise QueryError(400, f"source: the objects' answers have different column types: {exc}") from None
        if not whole:  # every object's filtered rows are here: the rest of the query runs once
            result = await asyncio.to_thread(_execute, cut.host, result)
        return result, placed, len(parts), _predicted([pred for pred, _ in plans])

    async def _offload(self, node: str, bucket: str, key: str, tree) -> pa.Table | None:
        """The query on ``node``'s copy of the object; None when the node cannot answer (the
        caller pushes back instead); a 4xx for a query or an object the node refuses. Counted in
        the planner's queue for the node while it runs (the push-back storm guard sees it)."""
        import pyarrow as pa

        url = f"{self.nodes.nodes[node].url}/_nearfaas/query"
        inflight = self.backend.planner.inflight
        inflight[node] += 1
        try:
            async with self.nodes.session.post(url, json={"bucket": bucket, "key": key, "sql": tree.sql()}) as resp:
                body = await resp.read()
                if resp.status == 200:
                    return pa.ipc.open_stream(body).read_all()
                if 400 <= resp.status < 500 and resp.status != 404:
                    raise QueryError(400, f"source: s3://{bucket}/{key} on {node}: {body.decode(errors='replace')[:300]}")
        except (OSError, TimeoutError, aiohttp.ClientError):
            pass
        finally:
            inflight[node] -= 1
        return None

    async def _tables(self, bucket: str, prefix: str) -> list[tuple[str, pa.Table]]:
        listing = await self._listing(bucket, prefix)
        if sum(info.size for info in listing) > MAX_BYTES:
            raise QueryError(413, f"source: s3://{bucket}/{prefix} holds more than {MAX_BYTES} bytes; query a narrower prefix")
        if not listing:
            raise QueryError(404, f"source: no objects under s3://{bucket}/{prefix}")
        return await self._fetch(bucket, [info.key for info in listing])

    async def _fetch(self, bucket: str, keys: list[str]) -> list[tuple[str, pa.Table]]:
        from nearfaas.dataservices import objects

        try:
            tables = []
            for key in keys:
                stream = await self.backend.get_object(bucket, key)
                chunks = [c async for c in stream.body]
                try:
                    tables.append((key, await asyncio.to_thread(objects.read_table, b"".join(chunks), None, key)))
                except objects.ObjectFormatError as exc:
                    raise QueryError(400, f"source: s3://{bucket}/{key}: {exc}") from None
        except S3Error as exc:
            raise QueryError(exc.status if exc.status < 500 else 503, f"source: {exc.code}: {exc.message}") from None
        return tables


def _summary(docs: list[dict]) -> dict:
    from nearfaas.dataservices.sketches import TableStats

    if not docs:
        return {"rows": 0, "columns": {}}
    merged = None
    for doc in docs:
        stats = TableStats.from_json(doc["stats"])
        if merged is not None and set(stats.columns) != set(merged.columns):
            raise ValueError(f"{doc['key']} has columns {sorted(stats.columns)}, unlike the objects before it "
                             f"({sorted(merged.columns)}); statistics are per schema: name a narrower prefix")
        merged = stats if merged is None else merged.merge(stats)
    columns = {}
    for name, col in merged.columns.items():
        entry = {"numeric": col.numeric, "distinct": round(col.distinct(), 1)}
        if col.numeric and col.kll is not None and not col.kll.is_empty():
            lo, hi = col.bounds()
            ranks = (0.01, 0.25, 0.5, 0.75, 0.99)
            entry |= {"min": lo, "max": hi, "quantiles": dict(zip([f"p{int(q * 100):02d}" for q in ranks],
                                                                  col.kll.get_quantiles(list(ranks)), strict=True))}
        columns[name] = entry
    return {"rows": merged.rows, "columns": columns}


def _substrait_sql(value) -> str:
    """The SQL a base64 Substrait plan computes (dataservices/substrait.py); a 400 naming the fault."""
    import base64
    import binascii

    from nearfaas.dataservices.substrait import SubstraitError, plan_to_sql

    if not isinstance(value, str) or not value:
        raise QueryError(400, "substrait: a Substrait Plan, serialized (protobuf) and base64-encoded, as a string")
    try:
        plan = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise QueryError(400, "substrait: not valid base64; encode the serialized plan with base64") from None
    try:
        return plan_to_sql(plan)
    except SubstraitError as exc:
        raise QueryError(400, str(exc)) from None


def _arguments(body: dict) -> tuple[str, str, str, str]:
    text, source, fmt = body.get("sql"), body.get("source"), body.get("format", "arrow")
    if not isinstance(text, str) or not text.strip():
        raise QueryError(400, "sql: required, the query as a string (e.g. SELECT * FROM t WHERE x > 1)")
    if not isinstance(source, str) or not source.startswith("s3://") or len(source) <= 5:
        raise QueryError(400, "source: required, s3://bucket/prefix (the objects the query reads as one table)")
    if fmt not in CONTENT_TYPES:
        raise QueryError(400, f"format: one of {', '.join(CONTENT_TYPES)}, got {fmt!r}")
    bucket, _, prefix = source[5:].partition("/")
    return text, bucket, prefix, fmt


def _distributive(tree) -> bool:
    """Whether the query's answer over a union of objects is the union of its answers per object:
    one SELECT of rows (filters, projections), no aggregate, GROUP BY, LIMIT or UNION."""
    from nearfaas.dataservices import sql

    return (isinstance(tree, sql.exp.Select) and tree.args.get("group") is None and tree.args.get("limit") is None
            and not any(e.find(*sql.AGGREGATES) for e in tree.expressions)
            and isinstance((tree.args.get("from_") or tree.args.get("from")).this, sql.exp.Table))


def _predicted(preds: list) -> str:
    """X-Nearfaas-Predicted for a query over many objects: the engine's choices and reasons
    counted, and the predicted time of the chosen sides summed where it predicted one."""
    def counts(values):
        return ",".join(f"{k}:{v}" for k, v in sorted(Counter(values).items()))

    chosen = [{"offload": p.offload_s, "partial": p.partial_s, "push-back": p.pushback_s}.get(p.choice) for p in preds]
    known = [c for c in chosen if c is not None]
    total = f"; predicted_ms={sum(known) * 1e3:.2f} ({len(known)}/{len(preds)} objects)" if known else ""
    return f"modelled; choices={counts(p.choice for p in preds)}; reasons={counts(p.reason for p in preds)}{total}"


async def _no_plan():
    """No node holds the object: fetch it (push-back), nothing known to cut the query by."""
    from nearfaas.dataservices.decision import Prediction

    return Prediction("push-back", "no-node"), None


def _execute(tree, table: pa.Table) -> pa.Table:
    """``tree`` over one table (named as the query names it); a 4xx for what the engine refuses."""
    from nearfaas.dataservices import sql

    name = next(iter(tree.find_all(sql.exp.Table))).name
    try:
        return sql.execute(tree, {name: table})
    except sql.QueryError as exc:
        raise QueryError(400, f"sql: {exc}") from None


def _parse(text: str):
    from nearfaas.dataservices import sql

    try:
        tree = sql.parse(text)
    except sql.QueryError as exc:
        raise QueryError(400, f"sql: {exc}") from None
    names = {t.name for t in tree.find_all(sql.exp.Table)}
    if len(names) != 1:
        raise QueryError(400, f"sql: name exactly one table (the source's objects), got {sorted(names) or 'none'}")
    return tree


def _run(tree, tables: list[tuple[str, pa.Table]]):
    import pyarrow as pa

    first_key, first = tables[0]
    for key, t in tables[1:]:
        if t.schema.names != first.schema.names:
            raise QueryError(400, f"source: {key} has columns {t.schema.names}, but {first_key} has "
                                  f"{first.schema.names}; one query reads objects of one schema")
    try:  # int64 in one CSV and double in another is one column
        table = pa.concat_tables([t for _, t in tables], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise QueryError(400, f"source: the objects' column types do not agree: {exc}") from None
    return _execute(tree, table), table
