"""Namespaces added over the API (faas-cli namespace create) outlive a gateway restart, and the
cluster file's stay whatever the file of added ones says (gateway/api/namespaces.py)."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nearfaas.gateway.api.namespaces import Namespaces


def _serve(namespaces: Namespaces, steps):
    async def go():
        app = web.Application()
        namespaces.routes(app.router)
        async with TestClient(TestServer(app)) as client:
            return [await step(client) for step in steps]

    return asyncio.run(go())


def test_an_added_namespace_is_kept_across_a_restart_and_a_configured_one_cannot_be_removed(tmp_path):
    first = Namespaces(["openfaas-fn"], tmp_path)

    async def create(client):
        resp = await client.post("/system/namespace/", json={"name": "team-a", "labels": {"team": "a"}})
        return resp.status

    async def remove_configured(client):
        return (await client.delete("/system/namespace/openfaas-fn")).status

    assert _serve(first, [create, create, remove_configured]) == [201, 409, 409]
    stored = json.loads((tmp_path / "gateway" / "namespaces.json").read_text())
    assert stored["team-a"]["labels"] == {"team": "a"}

    restarted = Namespaces(["openfaas-fn"], tmp_path)  # a gateway started again on the same state
    assert restarted.names == ["openfaas-fn", "team-a"] and restarted.default == "openfaas-fn"

    async def get(client):
        return await (await client.get("/system/namespace/team-a")).json()

    async def remove(client):
        return (await client.delete("/system/namespace/team-a")).status

    got, removed = _serve(restarted, [get, remove])
    assert got == {"name": "team-a", "labels": {"team": "a"}, "annotations": {}} and removed == 200
    assert Namespaces(["openfaas-fn"], tmp_path).names == ["openfaas-fn"]


def test_a_namespace_that_holds_something_is_not_removed_and_bad_bodies_are_400(tmp_path):
    namespaces = Namespaces(["openfaas-fn"], tmp_path)
    namespaces.holdings = lambda ns: ["function resize"] if ns == "team-b" else []

    async def create(client):
        return (await client.post("/system/namespace/", json={"name": "team-b"})).status

    async def remove(client):
        resp = await client.delete("/system/namespace/team-b")
        return resp.status, await resp.text()

    async def bad_labels(client):
        return (await client.put("/system/namespace/team-b", json={"labels": {"a": 1}})).status

    async def bad_name(client):
        return (await client.post("/system/namespace/", json={"name": "a.b"})).status

    async def rename(client):
        return (await client.put("/system/namespace/team-b", json={"name": "team-c"})).status

    created, (status, text), labels, name, renamed = _serve(namespaces, [create, remove, bad_labels, bad_name, rename])
    assert created == 201 and status == 409 and "function resize" in text
    assert labels == 400 and name == 400 and renamed == 400
    assert "team-b" in namespaces.names
