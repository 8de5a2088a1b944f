"""S3 Select (SelectObjectContent) over one object: request XML in, event-stream bytes out.

Runs wherever it is called: on the storage node that holds the object (the gateway sends the
query there: "offload"), or on the gateway after fetching the object ("push-back"). Both call
``select_object_stream`` with the object's ObjectStream, so the answer is the same bytes either
way; only the ``X-Nearfaas-Placement`` header says where it ran.

Flow: parse the request (``select_request``) → read the object whole (at most
``MAX_OBJECT_BYTES``) → Arrow table (``objects``) → the query (``sql``, Arrow compute, in a
worker thread so the node's event loop keeps serving) → CSV or JSON records → Records events of
≤ 1 MiB, a Stats event, an End event (``s3.eventstream``).

Every failure before the first byte is an S3Error (a 4xx naming the problem): bad XML, a query
that does not parse (with its line and column), an unknown column, a join, an object that is
not tabular or is too large. Queries run one at a time per process (``_SLOTS``); while
``MAX_WAITING`` more wait, a further one is refused with SlowDown (503) rather than queued
without bound, so a storm of queries on one node cannot take its memory.

Known caveats:
* The object is read whole into memory (Parquet and Arrow need random access); objects over
  ``MAX_OBJECT_BYTES`` are refused, not streamed.
* ScanRange is parsed but not applied: the whole object is scanned.
"""

from __future__ import annotations

import asyncio
import threading

from nearfaas.dataservices import objects, sql
from nearfaas.dataservices.select_request import SelectRequestError, parse_select_request, to_engine_sql
from nearfaas.s3 import eventstream
from nearfaas.s3.backend import ObjectStream, SelectResult, aclose
from nearfaas.s3.errors import S3Error

MAX_OBJECT_BYTES = 256 << 20
MAX_WAITING = 8
_SLOTS = threading.BoundedSemaphore(1)
_waiting = 0
_lock = threading.Lock()


def parse_request(request_xml: bytes):
    """The request, or S3Error 400 with the request's own error code."""
    try:
        return parse_select_request(request_xml)
    except SelectRequestError as exc:
        raise S3Error(exc.code, str(exc)) from None


def run(data: bytes, req, key: str = "") -> tuple[list[bytes], dict]:
    """The event-stream messages answering ``req`` over the object bytes ``data``, and counts."""
    fmt = req.input_format
    if fmt == "parquet" and not data.startswith(b"PAR1"):
        # S3 Select has no Arrow input type: an Arrow IPC object asked for as Parquet is read as
        # what its magic bytes say it is.
        fmt = objects.sniff(data[:64], key) or fmt
    try:
        table = objects.read_table(data, fmt=fmt, key=key, csv_header=req.csv_header,
                                   csv_delimiter=req.csv_delimiter)
    except objects.ObjectFormatError as exc:
        raise S3Error("InvalidObjectFormat", f"s3 object {key!r}: {exc}") from None
    try:
        tree = sql.parse(to_engine_sql(req.expression, table.column_names))
        result = sql.execute(tree, {"S3Object": table})
    except SelectRequestError as exc:
        raise S3Error(exc.code, f"SelectObjectContent expression: {exc}") from None
    except sql.QueryError as exc:
        raise S3Error(_query_code(str(exc)), f"SelectObjectContent expression: {exc}") from None
    payload = objects.write_records(result, req.output_format, field_delimiter=req.output_csv_delimiter,
                                    record_delimiter=req.output_record_delimiter, quote_fields=req.output_quote_fields)
    messages = list(eventstream.split_records(payload)) if payload else []
    messages += [eventstream.stats_event(len(data), len(data), len(payload)), eventstream.end_event()]
    return messages, {"rows_in": table.num_rows, "rows_out": result.num_rows, "bytes_returned": len(payload)}


def _query_code(message: str) -> str:
    """An S3 Select error code for a query the engine refused (AWS's list of Select error codes)."""
    if message.startswith("SQL syntax error"):
        return "ParseUnexpectedToken"
    if "joins are not supported" in message:
        return "ParseMalformedJoin"
    if message.startswith("no column"):
        return "InvalidColumnIndex"
    return "UnsupportedSqlOperation"


def _run_in_slot(data: bytes, req, key: str):
    return _in_slot(run, data, req, key)


async def select_object_stream(stream: ObjectStream, request_xml: bytes, key: str, placement: str) -> SelectResult:
    """Answer a SelectObjectContent over the object ``stream`` (closed here)."""
    global _waiting
    req = parse_request(request_xml)
    try:
        if stream.info.size > MAX_OBJECT_BYTES:
            raise S3Error("ObjectTooLarge", f"S3 Select here reads an object whole; {stream.info.size} bytes is over the "
                          f"limit of {MAX_OBJECT_BYTES}. Split the object (a query over a prefix unites its objects).")
        chunks = []
        async for chunk in stream.body:
            chunks.append(chunk)
    finally:
        await aclose(stream.body)
    with _lock:
        if _waiting >= MAX_WAITING:
            raise S3Error("SlowDown", f"{MAX_WAITING} queries are already waiting on this node; retry shortly.",
                          headers={"Retry-After": "1"})
        _waiting += 1
    messages, counts = await asyncio.to_thread(_run_in_slot, b"".join(chunks), req, key)

    async def body():
        for m in messages:
            yield m

    headers = {"X-Nearfaas-Placement": placement, "X-Nearfaas-Rows": f"{counts['rows_in']}/{counts['rows_out']}"}
    return SelectResult(headers=headers, body=body())


async def query_local_object(backend, bucket: str, key: str, text: str) -> tuple[int, bytes | str]:
    """One part of a prefix query, on this node's copy: (200, Arrow IPC stream) or (4xx, why).
    Shares the node's query slot with S3 Select (one at a time, a bounded wait)."""
    global _waiting
    try:
        stream = await backend.get_object(bucket, key)
    except S3Error as exc:
        return exc.status, f"{exc.code}: {exc.message}"
    try:
        if stream.info.size > MAX_OBJECT_BYTES:
            return 413, f"s3://{bucket}/{key} is over {MAX_OBJECT_BYTES} bytes"
        data = b"".join([c async for c in stream.body])
    finally:
        await aclose(stream.body)
    with _lock:
        if _waiting >= MAX_WAITING:
            return 503, f"{MAX_WAITING} queries are already waiting on this node"
        _waiting += 1
    try:
        return 200, await asyncio.to_thread(_in_slot, _query_bytes, data, key, text)
    except (objects.ObjectFormatError, sql.QueryError) as exc:
        return 400, f"s3://{bucket}/{key}: {exc}"


def _query_bytes(data: bytes, key: str, text: str) -> bytes:
    table = objects.read_table(data, key=key)
    tree = sql.parse(text)
    name = next(iter(tree.find_all(sql.exp.Table))).name
    return objects.write_table(sql.execute(tree, {name: table}), "arrow-stream")


def _in_slot(fn, *args):
    global _waiting
    with _SLOTS:
        with _lock:
            _waiting -= 1
        return fn(*args)


