"""Stream functions at the gateway (``x-nearfaas: {target: stream, stream: {fn: topk, k: 16}}``):
what the executor is told to install, and how an HTTP call reaches one.

A stream function is one stage of the fast-path executor's per-connection pipeline
(docs/fastpath.md, "Stream functions"): the executor feeds a TCP connection's bytes through the
stages as they arrive and answers once the payload has ended. Functions chained with
``x-nearfaas.chain`` (parse -> filter -> topk) are installed as ONE pipeline under the head's
stream ID: no intermediate socket, no intermediate object.

Worked example: ``parse`` chains to ``filter`` which chains to ``topk``; deploying ``parse``
installs stages [parse, filter(min=100), topk(k=16)] under parse's ID. A client streams text
numbers to the executor's stream port with that ID and gets the 16 largest values >= 100.
``POST /function/parse`` does the same through the gateway (the body is the payload).

Known caveats:
- The pipeline is composed when the head is deployed: redeploy the head after changing a
  later stage.
- Through the gateway the body is read whole first (the invoke path's limit applies); clients
  that need arrival-time streaming connect to the stream port directly.
"""

from __future__ import annotations

import asyncio
import struct

from nearfaas.fastpath import wire
from nearfaas.gateway.errors import CallError

REQUEST_HEAD = wire.STREAM_HEAD  # stream id (u64), payload length (u64 max: until the client half-closes)
REPLY_HEAD = struct.Struct("<BI")  # status, element count
ELEMENT_BYTES = {"topk": 4, "filter": 4, "parse": 4, "frequent": 8}  # bytes per reply element of the last stage
STREAM_TIMEOUT_S = 30.0


def is_stream(spec: dict) -> bool:
    return (spec.get("x") or {}).get("target") == "stream"


def stages_of(spec: dict, lookup) -> list[dict]:
    """The pipeline the head function ``spec`` installs: its stage, then each chained stream
    function's, in order. ``lookup(name)`` gives a deployed function's spec (or None)."""
    stages, current, seen = [], spec, set()
    while True:
        stages.append(_stage(current))
        chain = (current.get("x") or {}).get("chain") or []
        if not chain:
            return stages
        if len(chain) > 1:
            raise CallError(400, f"stream function {current['name']!r} chains to {len(chain)} functions; a stream pipeline is a "
                                 "line: chain it to one stream function", "spec")
        nxt = lookup(chain[0])
        if nxt is None or not is_stream(nxt):
            raise CallError(400, f"stream function {current['name']!r} chains to {chain[0]!r}, which is not a deployed stream "
                                 "function; deploy it first (with target: stream)", "spec")
        if nxt["name"] in seen:
            raise CallError(400, f"the stream chain from {spec['name']!r} loops back to {nxt['name']!r}", "spec")
        seen.add(nxt["name"])
        current = nxt


def _stage(spec: dict) -> dict:
    """The executor's stage for one function: a WebAssembly stage names its module by path."""
    stage = dict((spec.get("x") or {})["stream"])
    if stage.get("fn") == "wasm":
        stage["path"] = f"{spec['handler_dir']}/{stage.pop('module')}"
    return stage


async def call(addr: tuple[str, int] | str, stream_id: int, payload: bytes, timeout: float = STREAM_TIMEOUT_S) -> tuple[int, bytes]:
    """One request to the executor's stream port (``addr``: host and port, or the path of the
    gateway's own unix socket): (status, the reply's elements as bytes)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await (asyncio.open_unix_connection(addr) if isinstance(addr, str) else asyncio.open_connection(*addr))
            try:
                writer.write(REQUEST_HEAD.pack(stream_id, len(payload)) + payload)
                await writer.drain()
                status, count = REPLY_HEAD.unpack(await reader.readexactly(REPLY_HEAD.size))
                return status, await reader.read()
            finally:
                writer.close()
    except TimeoutError:
        raise CallError(504, f"the stream function gave no answer within {timeout:g}s", "fastpath") from None
    except (OSError, asyncio.IncompleteReadError) as exc:
        raise CallError(502, f"the fast-path executor's stream port failed: {exc!r}", "fastpath") from None


def status_name(status: int) -> str:
    return wire.STATUS.get(status, str(status))
