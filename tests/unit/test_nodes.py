"""NodeDirectory.call reports a node's bad answer as a NodeError, never a bare exception."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from nearfaas.gateway.nodes import Node, NodeDirectory, NodeError


async def _scenario():
    async def text_500(request):
        return web.Response(status=500, text="500 Internal Server Error\n\nServer got itself in trouble")

    async def ok(request):
        return web.json_response({"fine": True})

    app = web.Application()
    app.router.add_get("/text", text_500)
    app.router.add_get("/ok", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    directory = NodeDirectory([Node("n0", "storage", "standard", f"http://127.0.0.1:{port}")])
    directory.session = aiohttp.ClientSession()
    try:
        assert await directory.call("n0", "GET", "/ok") == {"fine": True}
        with pytest.raises(NodeError) as caught:
            await directory.call("n0", "GET", "/text")
        return caught.value
    finally:
        await directory.session.close()
        await runner.cleanup()


def test_non_json_answer_is_a_502_node_error():
    error = asyncio.run(_scenario())
    assert error.status == 502 and error.layer == "node" and error.node == "n0"
    assert "answered 500 with a non-JSON body" in str(error) and "Server got itself in trouble" in str(error)
