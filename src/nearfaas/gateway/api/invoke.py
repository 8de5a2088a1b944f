"""/function/<name> and /async-function/<name>: calls, and the S3 triggers that queue them.

A synchronous call is forwarded (gateway/chains.py runs a chain's stages); an async one is made
durable in the journal before its 202 (gateway/async_queue.py); a fast-path lambda goes to the
executor by its ID (gateway/fastpath.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import re
import time

from aiohttp import web
from multidict import CIMultiDict

from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.gateway.api.common import error, is_fastpath, new_call_id
from nearfaas.gateway.stream import is_stream
from nearfaas.gateway.stream import status_name as stream_status
from nearfaas.gateway.fastpath import STATUS_HTTP, STATUS_NAMES
from nearfaas.gateway.client_identity import peer_address
from nearfaas.gateway.errors import CallError

# The share of gateway.max_inflight that calls without verified credentials may hold at once.
ANON_SHARE = 0.75


def anonymous_client(remote: str | None) -> str:
    """The budget key of a caller without credentials: its address, except that every loopback
    address is one client (any local process may bind 127.0.0.2, 127.0.0.3, ...: red team round
    7 multiplied per-address shares that way)."""
    if not remote:
        return "unknown"
    try:
        return "loopback" if ipaddress.ip_address(remote).is_loopback else remote
    except ValueError:
        return remote


class InvokeAPI:
    def __init__(self, calls, fastpath, queue, metrics, invoke_max_body: int, max_inflight: int = 0, read_timeout: float = 60.0):
        self.calls, self.invoker, self.fastpath, self.queue, self.metrics = calls, calls.invoker, fastpath, queue, metrics
        self.invoke_max_body = invoke_max_body
        self.max_inflight = max_inflight  # calls forwarded at once, all functions together (0 = no cap)
        self.inflight = 0
        # Calls one client has open at once, body reading included (0 = no cap): one client's
        # slow bodies or slow calls cannot take every slot (docs/security.md). A client is the
        # identity its headers prove (gateway/client_identity.py), else its peer address, so
        # anonymous callers from 127.0.0.1 cannot lock out the operator calling from there.
        self.max_per_client = 0
        self.per_client: dict[str, int] = {}
        self.identify = None  # async (request) -> verified identity or None; app.py sets it when auth is on
        # Forwarding slots anonymous calls hold: while identities are checked they may take at
        # most ANON_SHARE of max_inflight, so the rest stays for authenticated callers.
        self.anon_inflight = 0
        self.read_timeout = read_timeout
        self.namespaces = Namespaces()  # the cluster's, set by OpenFaaSAPI

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/system/fastpath", self.fastpath_status)
        r.add_route("*", "/function/{name}", self.invoke)
        r.add_route("*", "/function/{name}/{path:.*}", self.invoke)
        r.add_post("/async-function/{name}", self.invoke_async)
        r.add_post("/async-function/{name}/{path:.*}", self.invoke_async)

    async def _run_for_host(self, name: str, body: bytes) -> tuple[int, bytes]:
        """A fast-path miss: the function of that lambda ID on its normal path."""
        result = await self.calls.invoke(name, "POST", "/", "", CIMultiDict({"Content-Type": "application/octet-stream"}), body)
        return result.status, result.body

    async def fastpath_status(self, request):
        table = [{"name": n, "lambdaId": i, "target": (self.invoker.functions[n].spec.get("x") or {}).get("target", "worker")}
                 for n, i in sorted(self.fastpath.ids.items(), key=lambda kv: kv[1]) if n in self.invoker.functions]
        try:
            executor = await self.fastpath.stats()
        except CallError as exc:
            executor = {"running": False, "error": str(exc)}
        return web.json_response({"table": table, "executor": executor})

    def object_created(self, request: web.Request, bucket: str, key: str, info) -> None:
        """S3 event notifications, Lambda style: a new object under a function's
        ``x-nearfaas.triggers`` prefix queues an async call of it with the object as its input.
        A function's own writes, and those of every stage of its chain, never trigger it (the
        simplest recursive loops)."""
        caller = request.headers.get("X-Nearfaas-Caller", "")
        event = {"type": "s3:ObjectCreated:" + ("Put" if request.method == "PUT" else "CompleteMultipartUpload"),
                 "size": info.size, "etag": info.etag}
        for name, state in self.invoker.functions.items():
            if name == caller or not state.options.triggered_by(bucket, key):
                continue
            call_id = new_call_id()
            body = json.dumps({"input": {"bucket": bucket, "key": key}, "event": event}).encode()
            try:
                self.queue.submit_nowait({"name": name, "path": "/", "query": "", "headers": {"Content-Type": "application/json"},
                                          "body": body, "call_id": call_id, "callback": None})
            except (asyncio.QueueFull, CallError) as exc:
                print(json.dumps({"event": "trigger-dropped", "function": name, "object": f"s3://{bucket}/{key}",
                                  "reason": str(exc) or "async queue full"}), flush=True)
                continue
            self.metrics.triggers.labels(name).inc()

    def requires_auth(self, name: str) -> bool:
        """Whether calls of function ``name`` (or ``name.namespace``) need the cluster's
        credentials (x-nearfaas.auth)."""
        internal = self.namespaces.resolve(name)
        state = self.invoker.functions.get(internal) if isinstance(internal, str) else None
        return state is not None and state.options.auth

    async def _client(self, request: web.Request) -> tuple[str, bool]:
        """Whose budgets the request counts against, and whether it is the operator's (the
        admin, by basic auth or the cluster's own key): only the operator has the reserve of
        forwarding slots and the full per-client budget; another verified key is a client of its
        own, held like an anonymous one."""
        if self.identify is not None:
            who = await self.identify(request)
            if who:
                return who, who == "admin"
        return anonymous_client(peer_address(request)), False

    def anon_limit(self) -> int:
        """Forwarding slots anonymous calls may hold at once (max_inflight when nobody is identified)."""
        if self.identify is None or not self.max_inflight:
            return self.max_inflight
        return max(1, int(self.max_inflight * ANON_SHARE))

    def per_client_limit(self, verified: bool) -> int:
        """Calls one client may have open: ``gateway.max_inflight_per_client``, and for a client
        that is not the operator at most half of the share kept for them too (red team round 8:
        one anonymous address held all 24 slots of the share, and every other anonymous caller
        got 429; round 9: a tenant's key did the same with the operator's reserve). 0: no cap."""
        if verified or self.identify is None or not self.max_inflight:
            return self.max_per_client
        half = max(1, self.anon_limit() // 2)
        return min(self.max_per_client, half) if self.max_per_client else half

    @contextlib.contextmanager
    def _client_slot(self, request: web.Request, client: str | None = None, verified: bool = True):
        """One of the calling client's slots for the whole request, body included; 429 when it has
        its limit open (``per_client_limit``). ``client`` defaults to the peer address."""
        client = client or anonymous_client(peer_address(request))
        held = self.per_client.get(client, 0)
        limit = self.per_client_limit(verified)
        if limit and held >= limit:
            raise CallError(429, f"this client ({client}) already has {held} calls open, its limit "
                                 f"(gateway.max_inflight_per_client={self.max_per_client}"
                                 f"{'' if verified else ', and half the share of calls that are not the operator'}"
                                 "'s); retry when one ends",
                            "gateway", {"Retry-After": "1"})
        self.per_client[client] = held + 1
        try:
            yield
        finally:
            left = self.per_client[client] - 1
            if left:
                self.per_client[client] = left
            else:
                del self.per_client[client]

    async def _read_invocation_body(self, request) -> bytes:
        if request.content_length is not None and request.content_length > self.invoke_max_body:
            raise CallError(413, f"request body of {request.content_length} bytes exceeds the {self.invoke_max_body}-byte limit "
                                 f"for invocations; put large data in an object and pass an object reference {{\"bucket\": ..., \"key\": ...}}", "gateway")
        # Read to EOF (StreamReader.read(n) returns whatever has arrived, not n bytes), counting
        # as we go so a chunked body cannot exceed the limit either.
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.read_timeout):
                async for chunk in request.content.iter_any():
                    size += len(chunk)
                    if size > self.invoke_max_body:
                        raise CallError(413, f"request body exceeds the {self.invoke_max_body}-byte limit for invocations; "
                                             f"pass an object reference instead", "gateway")
                    chunks.append(chunk)
        except TimeoutError:
            raise CallError(408, f"the request body did not arrive within read_timeout={self.read_timeout:g}s", "gateway") from None
        return b"".join(chunks)

    @staticmethod
    def _raw_target(request: web.Request) -> tuple[str, str]:
        """The sub-path after /function/<name> and the query, both still percent-encoded: the
        worker decodes them, and an encoded CR or LF can never split a forwarded header."""
        raw_path, _, raw_query = request.raw_path.partition("?")
        parts = raw_path.split("/", 3)  # ['', 'function', '<name>', '<rest>']
        return "/" + (parts[3] if len(parts) > 3 else ""), raw_query

    async def invoke(self, request: web.Request) -> web.Response:
        name = self.namespaces.resolve(request.match_info["name"])  # NAME or NAME.NAMESPACE
        if isinstance(name, web.Response):
            return name
        try:
            client, verified = await self._client(request)
            with self._client_slot(request, client, verified):
                # The body first, under read_timeout: a slow sender holds only its own client's
                # slot, never one of the gateway's forwarding slots.
                body = await self._read_invocation_body(request)
                if self.max_inflight and self.inflight >= self.max_inflight:
                    return error(429, f"the gateway is forwarding its limit of {self.max_inflight} calls (gateway.max_inflight); "
                                      "retry", headers={"Retry-After": "1"})
                if not verified and self.max_inflight and self.anon_inflight >= self.anon_limit():
                    return error(429, f"the gateway is forwarding {self.anon_inflight} calls that are not the operator's (anonymous, "
                                      f"or signed by another key), their share of gateway.max_inflight={self.max_inflight} (the rest "
                                      "is kept for the operator); retry",
                                 headers={"Retry-After": "1"})
                self.inflight += 1
                self.anon_inflight += not verified
                try:
                    return await self._forward(request, name, body)
                finally:
                    self.inflight -= 1
                    self.anon_inflight -= not verified
        except CallError as exc:
            return error(exc.status, str(exc), exc.layer, exc.headers)

    async def _forward(self, request: web.Request, name: str, body: bytes) -> web.Response:
        try:
            state = self.invoker.functions.get(name)
            started = time.time()  # OpenFaaS's gateway sends it to the function and back: unix nanoseconds
            if state is not None and is_fastpath(state.spec):
                return await self._invoke_fastpath(name, body)
            if state is not None and is_stream(state.spec):
                return await self._invoke_stream(name, body)
            path, query = self._raw_target(request)
            headers = CIMultiDict(request.headers)
            headers["X-Start-Time"] = str(int(started * 1e9))
            result = await self.calls.invoke(name, request.method, path, query, headers, body, request.get("call_id"))
        except CallError as exc:
            return error(exc.status, str(exc), exc.layer, exc.headers)
        answer = CIMultiDict(result.headers)  # repeated headers (Set-Cookie) stay repeated
        answer["X-Start-Time"] = headers["X-Start-Time"]
        return web.Response(status=result.status, headers=answer, body=result.body)

    async def _invoke_fastpath(self, name: str, body: bytes) -> web.Response:
        lambda_id = self.fastpath.ids.get(name)  # before the await: a delete meanwhile must not make this a 500
        status, payload = await self.fastpath.call(name, body)
        headers = {"X-Nearfaas-Target": "fastpath", "X-Nearfaas-Fastpath-Status": STATUS_NAMES.get(status, str(status)),
                   "X-Nearfaas-Lambda-Id": str(lambda_id)}
        return web.Response(status=STATUS_HTTP.get(status, 502), body=payload, headers=headers)

    async def _invoke_stream(self, name: str, body: bytes) -> web.Response:
        """The body through the function's stream pipeline; the reply's elements as the body."""
        status, payload = await self.fastpath.call_stream(name, body)
        headers = {"X-Nearfaas-Target": "stream", "X-Nearfaas-Stream-Status": stream_status(status)}
        return web.Response(status=STATUS_HTTP.get(status, 502), body=payload, headers=headers)

    async def invoke_async(self, request: web.Request) -> web.Response:
        name = self.namespaces.resolve(request.match_info["name"])
        if isinstance(name, web.Response):
            return name
        if name not in self.invoker.functions:
            return error(404, f"function {name!r} not found")
        callback = request.headers.get("X-Callback-Url")
        if callback and not re.match(r"^https?://[^\s/]+", callback):
            return error(400, "X-Callback-Url must be an absolute http(s) URL")
        try:
            client, verified = await self._client(request)
            with self._client_slot(request, client, verified):
                body = await self._read_invocation_body(request)
            path, query = self._raw_target(request)
            # ``client``: whose share of gateway.async_max_bytes the queued body counts against.
            await self.queue.submit({"name": name, "path": path, "query": query, "headers": dict(request.headers), "body": body,
                                     "call_id": request["call_id"], "callback": callback, "client": client})  # on disk before the 202
        except CallError as exc:
            return error(exc.status, str(exc), exc.layer, exc.headers)
        except asyncio.QueueFull:
            return error(429, "the async queue is full; retry later", headers={"Retry-After": "1"})
        return web.Response(status=202, text=f"accepted {request['call_id']}\n")
