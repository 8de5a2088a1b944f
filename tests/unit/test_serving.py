"""The connection guard in front of aiohttp (serving.py): idle and trickling connections are
closed, a full server evicts idle connections before refusing, real clients are served."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import requests
from aiohttp import web

from nearfaas import serving

pytestmark = pytest.mark.timeout(60)


class Server:
    """A tiny aiohttp app behind serving.serve, on its own loop in a thread."""

    def __init__(self, max_connections: int, head_timeout: float):
        self.loop = asyncio.new_event_loop()
        self.release = asyncio.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.guard = None
        asyncio.run_coroutine_threadsafe(self._start(max_connections, head_timeout), self.loop).result(10)

    async def _start(self, max_connections, head_timeout):
        app = web.Application()

        async def ok(request):
            return web.Response(text="ok")

        async def slow(request):
            await self.release.wait()
            return web.Response(text="late")

        app.router.add_get("/", ok)
        app.router.add_get("/slow", slow)
        self.runner = web.AppRunner(app, keepalive_timeout=serving.KEEPALIVE_TIMEOUT_S)
        await self.runner.setup()
        self.server, self.guard = await serving.serve(self.runner, "127.0.0.1", 0, max_connections=max_connections,
                                                      head_timeout=head_timeout)
        self.port = self.server.sockets[0].getsockname()[1]

    def stop(self):
        async def _stop():
            self.release.set()
            self.server.close()
            await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def server(request):
    cap, timeout = getattr(request, "param", (64, 0.5))
    srv = Server(cap, timeout)
    yield srv
    srv.stop()


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closes ``sock`` (None if still open after ``seconds``)."""
    sock.settimeout(seconds)
    started = time.monotonic()
    try:
        while sock.recv(4096):
            pass
        return time.monotonic() - started
    except ConnectionResetError:
        return time.monotonic() - started
    except TimeoutError:
        return None


def test_a_silent_connection_is_closed_after_the_head_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        waited = _closed_within(sock, 5)
    assert waited is not None and 0.3 < waited < 3, waited
    assert server.guard.head_timeouts >= 1


def test_a_trickled_head_is_closed_too(server):
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\n":
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)  # 1.3 s in all, past the 0.5 s deadline
        waited = _closed_within(sock, 5)
    assert waited is not None


def test_real_clients_are_served_and_keep_their_connection(server):
    with requests.Session() as session:
        for _ in range(20):
            assert session.get(server.url, timeout=5).text == "ok"
    assert server.guard.head_timeouts == 0


@pytest.mark.parametrize("server", [(8, 30.0)], indirect=True)
def test_a_full_server_evicts_idle_connections_for_a_real_client(server):
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
    try:
        time.sleep(0.2)
        assert server.guard.stats()["connections"] == 8
        assert requests.get(server.url, timeout=5).text == "ok"  # takes the oldest idle slot
        assert server.guard.evicted >= 1
        assert _closed_within(idle[0], 2) is not None, "the oldest idle connection was the one evicted"
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.parametrize("server", [(4, 30.0)], indirect=True)
def test_when_every_connection_is_busy_a_newcomer_is_refused_not_queued(server):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        busy = [pool.submit(requests.get, server.url + "/slow", timeout=10) for _ in range(4)]
        deadline = time.monotonic() + 5
        while server.guard.stats()["awaiting_head"] or server.guard.stats()["connections"] < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(requests.ConnectionError):
            requests.get(server.url, timeout=5)
        assert server.guard.refused == 1
        server.loop.call_soon_threadsafe(server.release.set)
        assert [f.result().text for f in busy] == ["late"] * 4
    # Their connections may linger idle (keep-alive): a newcomer evicts one and is served.
    assert requests.get(server.url, timeout=5).text == "ok"


@pytest.mark.parametrize("server", [(50, 0.5)], indirect=True)
def test_an_idle_flood_is_cleared_and_does_not_lock_out_clients(server):
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
    try:
        for _ in range(5):
            assert requests.get(server.url, timeout=5).text == "ok"
        assert server.guard.stats()["connections"] <= 50
        time.sleep(1.0)
        assert server.guard.stats()["awaiting_head"] == 0  # the survivors timed out
    finally:
        for sock in flood:
            sock.close()
