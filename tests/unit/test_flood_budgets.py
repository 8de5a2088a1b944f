"""Budgets against floods (issue 39, finding 6), the parts that need no cluster:
tests/integration/test_attacks_floods.py runs the attacks themselves."""

from __future__ import annotations

import asyncio
import contextlib
import base64
import json
import socket
import time
import types

import pytest

from nearfaas.apps import APPS
from nearfaas.apps.stack import stack_for
from nearfaas.gateway.api.invoke import InvokeAPI
from nearfaas.gateway.errors import CallError
from nearfaas.gateway.webhooks import _Ring, declared_by
from nearfaas.gateway.worker_client import ResponseTooLarge, WorkerClient
from nearfaas.jobs.apps import webhook_url
from nearfaas.runtime import s3proxy


async def _answer_with(head: bytes, body: bytes = b"", max_response: int = 1024):
    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + body)
        await writer.drain()
        await asyncio.sleep(1)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = WorkerClient(max_response)
    try:
        return await client.request("127.0.0.1", port, {}, b"", 5)
    finally:
        client.close()
        server.close()


def test_a_worker_answer_over_the_cap_is_refused_unread_and_names_it():
    with pytest.raises(ResponseTooLarge, match=r"1000000000000 bytes, over the gateway's limit of 1024 bytes \(gateway.max_response\)"):
        asyncio.run(_answer_with(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n", b"x" * 4096))
    with pytest.raises(ResponseTooLarge, match="Transfer-Encoding"):
        asyncio.run(_answer_with(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"))
    status, _, body = asyncio.run(_answer_with(b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n", b"y" * 1024))
    assert (status, len(body)) == (200, 1024)


def test_a_client_holds_at_most_its_slots_and_gets_them_back():
    api = InvokeAPI(types.SimpleNamespace(invoker=None), None, None, None, 1)
    api.max_per_client = 2
    one, other = types.SimpleNamespace(remote="10.0.0.1"), types.SimpleNamespace(remote="10.0.0.2")
    with api._client_slot(one), api._client_slot(one):
        with pytest.raises(CallError, match=r"gateway.max_inflight_per_client=2") as refused:
            with api._client_slot(one):
                pass
        assert refused.value.status == 429
        with api._client_slot(other):  # another client is not affected
            assert api.per_client == {"10.0.0.1": 2, "10.0.0.2": 1}
    assert api.per_client == {}  # released, and the table does not grow with clients gone


def test_webhook_events_are_kept_within_the_byte_budget_newest_first():
    ring = _Ring()
    for i in range(10):
        ring.add(json.dumps({"i": i, "pad": "x" * 90}).encode(), keep_bytes=350)
    kept = json.loads(ring.as_json())
    assert [e["event"]["i"] for e in kept] == [7, 8, 9] and ring.bytes <= 350
    big = _Ring()
    big.add(b'"' + b"x" * 1000 + b'"', keep_bytes=10)  # one event over the budget is still the newest
    assert len(big.events) == 1


def test_the_notification_stages_webhook_is_declared_by_its_deployment():
    gateway = "http://127.0.0.1:8080"
    for key in APPS:
        stack = stack_for(key, webhook_url=webhook_url(gateway, key))
        declared = {declared_by(f.get("environment")) for f in stack["functions"].values()} - {None}
        assert declared == {key.replace("_", "-")}, (key, declared)
    assert declared_by({"WEBHOOK_URL": "https://hooks.example.com/notify"}) is None
    assert declared_by({"WEBHOOK_URL": "http://x/system/webhooks/Bad_Name"}) is None


def test_strangers_connections_give_way_to_the_functions_own(monkeypatch):
    monkeypatch.setattr(s3proxy._Handler, "timeout", 0.5)  # STRANGER_TIMEOUT_S, shortened
    endpoint = s3proxy.S3Endpoint(s3proxy.Calls(None))
    endpoint.start()
    port = int(endpoint.url.rsplit(":", 1)[1])
    try:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(s3proxy.MAX_CONNECTIONS)]
        deadline = time.monotonic() + 5
        while len(endpoint.server._open) < s3proxy.MAX_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        # A newcomer is served (an unsigned request: 403 from the endpoint, not a reset).
        with socket.create_connection(("127.0.0.1", port), timeout=5) as newcomer:
            newcomer.sendall(b"GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n")
            assert newcomer.recv(64).startswith(b"HTTP/1.1 403"), "the newcomer got no slot"
        assert endpoint.server.evicted >= 1
        # And strangers that say nothing are hung up on after the stranger timeout.
        for s in idle:
            s.settimeout(5)
            assert s.recv(1) == b""
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()


def test_the_sink_refuses_undeclared_names_without_credentials_and_caps_the_rest():
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from nearfaas.gateway.webhooks import WebhookSink

    async def authenticate(request):  # as a SigV4 check does: it hashes the body it reads
        body = await request.read()
        return None if request.headers.get("Authorization") == f"ok {len(body)}" else "no credentials"

    async def scenario():
        sink = WebhookSink(declared=["open"], max_names=1, deployed=lambda: [{"environment": {"WEBHOOK_URL": "http://g/system/webhooks/fn"}}],
                           authenticate=authenticate)
        app = web.Application()
        sink.routes(app)
        async with TestClient(TestServer(app)) as client:
            codes = {}
            for name, headers in (("open", {}), ("fn", {}), ("other", {}), ("other", {"Authorization": "ok 8"}),
                                  ("third", {"Authorization": "ok 8"})):
                resp = await client.post(f"/system/webhooks/{name}", data=b'{"n": 1}', headers=headers)
                codes.setdefault(name, []).append((resp.status, (await resp.json()).get("error", "")))
            listed = await (await client.get("/system/webhooks/other")).json()
        return codes, listed

    codes, listed = asyncio.run(scenario())
    assert codes["open"][0][0] == 202 and codes["fn"][0][0] == 202
    assert codes["other"][0][0] == 403 and "not declared" in codes["other"][0][1]
    assert codes["other"][1][0] == 202  # the body the credentials were checked over is the one stored
    assert codes["third"][0][0] == 429 and "webhook_max_names=1" in codes["third"][0][1]
    assert [e["event"] for e in listed] == [{"n": 1}]


def test_every_name_together_holds_at_most_the_total_oldest_first():
    # Red team round 6 (R4): each deployed function's WEBHOOK_URL declares a name with its own
    # ring, open to anonymous posts, so 300 tenant lambdas grew the gateway by 300 MiB. All rings
    # together hold gateway.webhook_total_bytes; past it the sink's oldest event goes first.
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from nearfaas.gateway.webhooks import WebhookSink

    names = [f"fn{i}" for i in range(30)]
    event = b'{"pad": "' + b"x" * 1000 + b'"}'  # 1012 bytes

    async def scenario():
        sink = WebhookSink(keep_bytes=4096, total_bytes=20_000,
                           deployed=lambda: [{"environment": {"WEBHOOK_URL": f"http://g/system/webhooks/{n}"}} for n in names])
        app = web.Application()
        sink.routes(app)
        async with TestClient(TestServer(app)) as client:
            for round_ in range(3):
                for n in names:  # 90 anonymous posts of 1 KB: 90 KB asked, 20 KB kept
                    assert (await client.post(f"/system/webhooks/{n}", data=event)).status == 202
            listed = {n: await (await client.get(f"/system/webhooks/{n}")).json() for n in names}
        return sink, listed

    sink, listed = asyncio.run(scenario())
    held = sum(r.bytes for r in sink.events.values())
    assert held == sink.held <= 20_000, (held, sink.held)
    assert held > 20_000 - 1012  # it drops only what it must
    kept = [n for n in names if listed[n]]
    # The newest events survive: the last names posted in the last round, one event each.
    assert kept == names[-len(kept):] and all(len(listed[n]) == 1 for n in kept), {n: len(v) for n, v in listed.items()}


# -- issue 39 red-team round 1: async bodies (F1) and per-client budgets by identity (F2) ----------

def _async_item(call_id: str, size: int, client: str = "") -> dict:
    return {"name": "fn", "path": "/", "query": "", "headers": {}, "body": b"x" * size, "call_id": call_id,
            "callback": None, "client": client}


def test_queued_async_bodies_are_held_within_the_byte_budget_global_and_per_client(tmp_path):
    from nearfaas.gateway.async_queue import AsyncQueue, BudgetSpent, Call
    from nearfaas.telemetry.metrics import GatewayMetrics

    async def scenario():
        q = AsyncQueue(types.SimpleNamespace(), GatewayMetrics(), tmp_path, max_bytes=4000)
        q.journal.load(Call.from_records, Call.record)  # the journal, without consumers: calls stay queued
        try:
            for i in range(3):  # a client's share is 1000 bytes: 3 x 300 fit, the 4th does not
                await q.submit(_async_item(f"a{i}", 300, "10.0.0.1"))
            with pytest.raises(BudgetSpent, match=r"share, 1000 bytes .*gateway.async_max_bytes=4000") as refused:
                await q.submit(_async_item("a3", 300, "10.0.0.1"))
            assert refused.value.status == 429 and q.client_bytes == {"10.0.0.1": 900}
            for n in range(2, 5):  # other clients fill the rest of the global budget
                await q.submit(_async_item(f"c{n}", 1000, f"10.0.0.{n}"))
            with pytest.raises(BudgetSpent, match=r"gateway.async_max_bytes=4000"):
                await q.submit(_async_item("c5", 200, "10.0.0.5"))
            with pytest.raises(BudgetSpent):  # triggers (no client) count against the global budget
                q.submit_nowait(_async_item("t", 200))
            assert q.bytes == 3900
            for call in list(q.pending.values()):  # as calls run and are done, their bytes come back
                q._forget(call)
            assert q.bytes == 0 and q.client_bytes == {}
            await q.submit(_async_item("again", 1000, "10.0.0.1"))
        finally:
            await q.journal.close()

    asyncio.run(scenario())


def test_an_authenticated_caller_has_its_own_budget_and_a_reserve_of_forwarding_slots():
    api = InvokeAPI(types.SimpleNamespace(invoker=None), None, None, None, 1, max_inflight=8)
    api.max_per_client = 2

    async def identify(request):
        return "admin" if request.headers.get("Authorization") == "good" else None

    api.identify = identify
    anon = types.SimpleNamespace(remote="127.0.0.1", headers={})
    wrong = types.SimpleNamespace(remote="127.0.0.1", headers={"Authorization": "bad"})
    admin = types.SimpleNamespace(remote="127.0.0.1", headers={"Authorization": "good"})
    assert asyncio.run(api._client(anon)) == ("loopback", False)  # every loopback address is one client
    assert asyncio.run(api._client(wrong)) == ("loopback", False)  # wrong credentials: anonymous
    assert asyncio.run(api._client(admin)) == ("admin", True)
    with api._client_slot(anon, "127.0.0.1"), api._client_slot(anon, "127.0.0.1"):
        with pytest.raises(CallError, match="max_inflight_per_client"), api._client_slot(anon, "127.0.0.1"):
            pass
        with api._client_slot(admin, "admin"):  # the same address, another budget
            pass
    assert api.anon_limit() == 6  # 3/4 of max_inflight; the rest is kept for authenticated calls
    api.identify = None
    assert api.anon_limit() == 8  # unsigned mode: nobody is identified, nothing to keep


def test_identity_is_verified_from_the_headers_alone():
    from nearfaas.auth.admin import AdminGuard
    from nearfaas.gateway.client_identity import identify

    guard = AdminGuard({"access_key": "AK", "secret_key": "sekret"})

    def request(authorization: str | None):
        headers = {"Authorization": authorization} if authorization else {}

        async def read():  # identify must not read the body
            raise AssertionError("the body was read")

        return types.SimpleNamespace(headers=headers, read=read, raw_path="/function/x", method="POST")

    basic = "Basic " + base64.b64encode(b"admin:sekret").decode()
    assert asyncio.run(identify(guard, request(basic))) == "admin"
    assert asyncio.run(identify(guard, request("Basic " + base64.b64encode(b"admin:nope").decode()))) is None
    assert asyncio.run(identify(guard, request("AWS4-HMAC-SHA256 Credential=AK/x, Signature=00"))) is None  # no s3 auth, no hash header
    assert asyncio.run(identify(guard, request(None))) is None
    assert asyncio.run(identify(AdminGuard(None), request(basic))) is None  # unsigned mode: everyone is anonymous


def test_one_anonymous_client_holds_half_the_anonymous_share_and_loopback_is_one_client():
    # Red team round 8 (G2): one anonymous address held all 24 slots of the anonymous share (its
    # per-client limit was 24 as well), and every other anonymous caller got 429; round 7 showed
    # that a local process is as many addresses as it likes (127.0.0.2, .3, ...). An anonymous
    # client now holds at most half of the share, and all of loopback is one client.
    api = InvokeAPI(types.SimpleNamespace(invoker=None), None, None, None, 1, max_inflight=32)
    api.max_per_client = 24

    async def identify(request):
        return None

    api.identify = identify
    assert api.anon_limit() == 24 and api.per_client_limit(False) == 12 and api.per_client_limit(True) == 24
    local = [types.SimpleNamespace(remote=f"127.0.0.{n}", headers={}) for n in range(1, 14)]
    clients = [asyncio.run(api._client(r))[0] for r in local]
    assert set(clients) == {"loopback"}
    with contextlib.ExitStack() as held:
        for r, c in zip(local[:12], clients[:12]):
            held.enter_context(api._client_slot(r, c, verified=False))
        with pytest.raises(CallError, match="half the share of calls that are not the operator"):
            with api._client_slot(local[12], clients[12], verified=False):
                pass
        remote = types.SimpleNamespace(remote="10.0.0.7", headers={})
        with api._client_slot(remote, asyncio.run(api._client(remote))[0], verified=False):
            pass  # another (remote) client still has room


def test_a_key_other_than_the_clusters_is_its_own_client_without_the_operators_reserve():
    # Red team round 9 (H2): a tenant's bucket-only key counted as an authenticated caller: 24
    # calls and the operator's reserve; with anonymous calls it filled every forwarding slot.
    api = InvokeAPI(types.SimpleNamespace(invoker=None), None, None, None, 1, max_inflight=32)
    api.max_per_client = 24

    async def identify(request):
        return request.headers.get("who")

    api.identify = identify
    tenant = types.SimpleNamespace(remote="127.0.0.1", headers={"who": "key:NKTENANTB"})
    admin = types.SimpleNamespace(remote="127.0.0.1", headers={"who": "admin"})
    assert asyncio.run(api._client(tenant)) == ("key:NKTENANTB", False)  # its own budget, not the operator's
    assert asyncio.run(api._client(admin)) == ("admin", True)
    assert api.per_client_limit(False) == 12 and api.per_client_limit(True) == 24


def test_a_signature_by_the_clusters_own_key_is_the_operator_and_another_key_is_not():
    from nearfaas.auth.admin import AdminGuard
    from nearfaas.gateway.client_identity import identify

    class _S3Auth:  # a signature that verifies, by the key the Credential names
        def authenticate(self, method, path, query, headers):
            return types.SimpleNamespace(access_key=headers["Authorization"].split("Credential=")[1].split("/")[0])

    guard = AdminGuard({"access_key": "AKCLUSTER", "secret_key": "sekret"}, s3_auth=_S3Auth())

    def signed(key):
        return types.SimpleNamespace(headers={"Authorization": f"AWS4-HMAC-SHA256 Credential={key}/x, Signature=00",
                                              "x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
                                     raw_path="/function/x", method="POST")

    assert asyncio.run(identify(guard, signed("AKCLUSTER"))) == "admin"
    assert asyncio.run(identify(guard, signed("NKTENANTB"))) == "key:NKTENANTB"
