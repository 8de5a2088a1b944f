"""node/build_net.py: which index hosts a build may reach, and the proxy that holds it to them."""

from __future__ import annotations

import asyncio
import os

import pytest

from nearfaas.node import build_net
from nearfaas.node.build_net import IndexProxy, index_hosts, index_urls


def test_the_index_is_the_nodes_pip_configuration_and_pypi_by_default(tmp_path):
    none = tmp_path / "none.conf"
    assert index_hosts(index_urls({}, none)) == {("pypi.org", 443), ("files.pythonhosted.org", 443)}
    env = {"PIP_INDEX_URL": "http://127.0.0.1:9999/simple", "PIP_EXTRA_INDEX_URL": "https://extra.example/s https://more.example:8443/s"}
    assert index_hosts(index_urls(env, none)) == {("127.0.0.1", 9999), ("extra.example", 443), ("more.example", 8443)}
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\n[install]\nextra-index-url = http://lan.example:81/x\n")
    assert index_hosts(index_urls({}, conf)) == {("mirror.example", 443), ("lan.example", 81)}
    assert index_hosts(index_urls({"PIP_INDEX_URL": "https://env.example/s"}, conf)) == {("env.example", 443), ("lan.example", 81)}
    conf.write_text("not an ini file [")
    assert ("pypi.org", 443) in index_hosts(index_urls({}, conf))  # unreadable: pip's default


@pytest.fixture
def upstream():
    """An HTTP server on loopback, on a thread of its own, that answers with the request line it
    received; yields (its port, the request heads it saw)."""
    import threading

    seen: list[str] = []

    async def handle(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.decode())
        line = head.split(b"\r\n")[0]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(line), line))
        await writer.drain()
        writer.close()

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield server.sockets[0].getsockname()[1], seen
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def _ask(proxy: IndexProxy, request: bytes) -> bytes:
    async def go():
        await proxy.start()
        try:
            reader, writer = await asyncio.open_unix_connection(proxy.plan["forward"][0]["socket"])
            writer.write(request)
            await writer.drain()
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            await proxy.close()

    return asyncio.run(go())


def _proxy(tmp_path, allowed) -> IndexProxy:
    return IndexProxy(tmp_path / "relay", os.getgid(), frozenset(allowed))


@pytest.mark.skipif(os.geteuid() != 0, reason="the relay's folder is root's and the function's group's")
def test_a_plain_get_to_the_index_goes_on_in_origin_form_and_anything_else_is_403(tmp_path, upstream):
    p, seen = upstream
    ok = _ask(_proxy(tmp_path, {("127.0.0.1", p)}),
              f"GET http://127.0.0.1:{p}/simple/six/ HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nProxy-Connection: keep-alive\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200") and ok.endswith(b"GET /simple/six/ HTTP/1.1"), ok
    assert "Connection: close" in seen[0] and "Proxy-Connection" not in seen[0]
    for request in (f"GET http://127.0.0.1:{p + 1}/ HTTP/1.1\r\n\r\n",      # another port of the host
                    f"CONNECT 127.0.0.1:{p + 1} HTTP/1.1\r\n\r\n",
                    "CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
                    "GET /relative HTTP/1.1\r\n\r\n",                        # not a proxy request
                    f"GET https://127.0.0.1:{p}/ HTTP/1.1\r\n\r\n"):           # https goes by CONNECT
        proxy = _proxy(tmp_path, {("127.0.0.1", p)})
        answer = _ask(proxy, request.encode())
        assert answer.startswith(b"HTTP/1.1 403") and proxy.refused, (request, answer)
    assert len(seen) == 1  # none of them reached the server
    tunnel = _ask(_proxy(tmp_path, {("127.0.0.1", p)}), f"CONNECT 127.0.0.1:{p} HTTP/1.1\r\n\r\nGET /tunnelled HTTP/1.1\r\n\r\n".encode())
    assert tunnel.startswith(b"HTTP/1.1 200 Connection established") and tunnel.endswith(b"GET /tunnelled HTTP/1.1")


def test_the_proxy_variables_point_at_the_port_inside_the_namespace():
    env = build_net.proxy_env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://127.0.0.1:{build_net.PROXY_PORT}" and env["NO_PROXY"] == ""
