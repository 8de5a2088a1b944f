"""What every part of the gateway's OpenFaaS API shares: error answers, JSON bodies, call ids."""

from __future__ import annotations

import datetime as dt
import itertools
import time
import uuid

from aiohttp import web


class SpecErrorResponse(Exception):
    """A deployment the API refuses: its message names the field and the fix (a 400)."""


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def error(status: int, message: str, layer: str = "gateway", headers: dict | None = None) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers={"X-Nearfaas-Layer": layer, **(headers or {})})


def locked_out(what: str, exc: TimeoutError, retry: str = "retry") -> web.Response:
    """The 503 of a change to a file the gateways share whose lock a stopped gateway holds
    (atomic.locked_async): nothing was changed; try again."""
    return error(503, f"{what}: {exc}; {retry}", "gateway", {"Retry-After": "1"})


async def json_body(request: web.Request) -> dict:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise web.HTTPBadRequest(text="request body must be a JSON object\n") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="request body must be a JSON object\n")
    return body


def is_fastpath(spec: dict) -> bool:
    return (spec.get("x") or {}).get("target") == "fastpath"


def on_executor(spec: dict) -> bool:
    """Run by the fast-path executor (a lambda or a stream function), never by workers."""
    return (spec.get("x") or {}).get("target") in ("fastpath", "stream")


# Call ids: a random per-process prefix and a counter. Unique across gateways and restarts, and
# far cheaper than a uuid4 (an os.urandom syscall) on every warm call.
_CALL_PREFIX = uuid.uuid4().hex[:12]
_call_counter = itertools.count(1)


def new_call_id() -> str:
    return f"{_CALL_PREFIX}-{next(_call_counter):08x}"


@web.middleware
async def stamp_calls(request: web.Request, handler):
    """Every response carries X-Call-Id and X-Duration-Seconds (set just before headers go out)."""
    request["t0"] = time.perf_counter()
    request["call_id"] = request.headers.get("X-Call-Id") or new_call_id()
    return await handler(request)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    if "t0" in request:
        response.headers.setdefault("X-Call-Id", request["call_id"])
        response.headers.setdefault("X-Duration-Seconds", f"{time.perf_counter() - request['t0']:.6f}")
