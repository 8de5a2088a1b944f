"""The gateway -> worker hop: pooled keep-alive connections and how each failure is reported."""

from __future__ import annotations

import asyncio
import socket

import pytest

from nearfaas.gateway import worker_client
from nearfaas.gateway.worker_client import WorkerClient, WorkerFailed, WorkerUnreachable


class Worker:
    """A tiny HTTP/1.1 server on 127.0.0.1 that answers like a nearfaas worker.

    ``mode`` picks its behaviour per request: "echo" answers with the body, "close" takes the
    request and closes without a byte, "die" sends half a response and closes, "hang" never
    answers (and counts the client hanging up), "garbage" sends a status line that is not HTTP.
    """

    def __init__(self, mode: str = "echo"):
        self.mode = mode
        self.connections = 0
        self.requests = 0
        self.hung_up = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Worker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()
        for writer in self.writers:
            writer.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                body = await reader.readexactly(length)
                self.requests += 1
                if self.mode == "close":
                    break
                if self.mode == "die":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a little")
                    await writer.drain()
                    break
                if self.mode == "hang":  # answer nothing; wait for the client to hang up
                    await reader.read()
                    self.hung_up += 1
                    break
                if self.mode == "garbage":
                    writer.write(b"NOT-HTTP\r\n\r\n")
                    await writer.drain()
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nX-Echo: yes\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(test):
    """No asyncio plugin here: run each async test in its own event loop."""

    def sync() -> None:
        asyncio.run(test())

    sync.__name__ = sync.__qualname__ = test.__name__
    sync.__doc__ = test.__doc__
    return sync


def _recording(client: WorkerClient) -> list:
    """Keep every connection the client opens (also so that none is closed by garbage collection)."""
    opened = []
    connect = client._connect

    async def record(host, port, unix=None):
        opened.append(await connect(host, port, unix))
        return opened[-1]

    client._connect = record
    return opened


async def _until(condition, timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _idle(client: WorkerClient, port: int) -> list:
    return client._idle.get(("127.0.0.1", port), [])


@run
async def test_round_trip_and_reuse_of_a_pooled_connection():
    client = WorkerClient()
    async with Worker() as worker:
        status, headers, body = await client.request("127.0.0.1", worker.port, {"X-Test": "1"}, b"hello", timeout=5)
        assert (status, headers["X-Echo"], body) == (200, "yes", b"hello")
        assert len(_idle(client, worker.port)) == 1
        assert (await client.request("127.0.0.1", worker.port, {}, b"", timeout=5))[2] == b""
        assert worker.connections == 1 and worker.requests == 2
        client.close()


@run
async def test_worker_closing_an_idle_connection_is_retried_transparently():
    client = WorkerClient()
    async with Worker() as worker:
        await client.request("127.0.0.1", worker.port, {}, b"one", timeout=5)
        for writer in worker.writers:  # the worker drops its keep-alive connection
            writer.close()
        await asyncio.sleep(0.05)
        assert (await client.request("127.0.0.1", worker.port, {}, b"two", timeout=5))[2] == b"two"
        assert worker.connections == 2
        client.close()


@run
async def test_pooled_connection_closed_as_the_request_arrives_is_retried_once():
    client = WorkerClient()
    async with Worker() as worker:
        await client.request("127.0.0.1", worker.port, {}, b"one", timeout=5)
        worker.mode = "close"  # takes the next request on the pooled connection, answers nothing
        # The retry on a fresh connection meets the same worker: the second EOF is a failure.
        with pytest.raises(WorkerFailed):
            await client.request("127.0.0.1", worker.port, {}, b"two", timeout=5)
        assert worker.requests == 3 and worker.connections == 2
        assert not _idle(client, worker.port)
        client.close()


@run
async def test_worker_dying_mid_response_is_a_failure_not_a_retry():
    client = WorkerClient()
    async with Worker("die") as worker:
        with pytest.raises(WorkerFailed):
            await client.request("127.0.0.1", worker.port, {}, b"x", timeout=5)
        assert worker.requests == 1
        assert not _idle(client, worker.port)


@run
async def test_malformed_response_is_a_failure_and_the_connection_is_closed():
    client = WorkerClient()
    async with Worker("garbage") as worker:
        with pytest.raises(WorkerFailed, match="malformed"):
            await client.request("127.0.0.1", worker.port, {}, b"x", timeout=5)
        assert not _idle(client, worker.port)


@run
async def test_unreachable_port():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(WorkerUnreachable):
        await WorkerClient().request("127.0.0.1", port, {}, b"x", timeout=5)


@run
async def test_timeout_closes_the_connection_instead_of_pooling_it():
    client = WorkerClient()
    opened = _recording(client)
    async with Worker("hang") as worker:
        with pytest.raises(TimeoutError):
            await client.request("127.0.0.1", worker.port, {}, b"x", timeout=0.2)
        assert not _idle(client, worker.port)
        assert len(opened) == 1 and opened[0].writer.is_closing()
        await _until(lambda: worker.hung_up)


@run
async def test_cancellation_closes_the_connection():
    client = WorkerClient()
    opened = _recording(client)
    async with Worker("hang") as worker:
        task = asyncio.ensure_future(client.request("127.0.0.1", worker.port, {}, b"x", timeout=30))
        await _until(lambda: worker.requests)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _idle(client, worker.port)
        assert len(opened) == 1 and opened[0].writer.is_closing()
        await _until(lambda: worker.hung_up)


@run
async def test_connect_counts_against_the_timeout():
    client = WorkerClient()

    async def never_accepted(host, port, unix=None):  # a worker whose listen backlog is full
        await asyncio.sleep(3600)

    client._connect = never_accepted
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.request("127.0.0.1", 1, {}, b"x", timeout=0.1), 3)
    assert loop.time() - started < 2  # the call's own timeout fired, not the test's backstop


@run
async def test_forget_closes_idle_connections():
    client = WorkerClient()
    async with Worker() as worker:
        await asyncio.gather(*(client.request("127.0.0.1", worker.port, {}, b"x", timeout=5) for _ in range(3)))
        pooled = list(_idle(client, worker.port))
        assert len(pooled) == 3
        client.forget("127.0.0.1", worker.port)
        assert not _idle(client, worker.port)
        assert all(conn.writer.is_closing() for conn in pooled)
        client.forget("127.0.0.1", worker.port)  # forgetting twice is harmless


@run
async def test_take_sweeps_stale_connections_and_reuses_the_newest():
    client = WorkerClient()
    async with Worker() as worker:
        await asyncio.gather(*(client.request("127.0.0.1", worker.port, {}, b"x", timeout=5) for _ in range(3)))
        pool = _idle(client, worker.port)
        old, middle, newest = pool
        old.last_used -= worker_client._IDLE_S + 1
        middle.last_used -= worker_client._IDLE_S + 1
        assert client._take(("127.0.0.1", worker.port)) is newest
        assert old.writer.is_closing() and middle.writer.is_closing()
        assert not _idle(client, worker.port)
        newest.close()


def test_a_unix_socket_worker_is_called_on_its_socket_and_pooled_by_path(tmp_path):
    """A jailed worker answers on its serving socket (node/netns.py): the gateway calls that
    path directly and pools its connections under it, never touching host:port."""
    asyncio.run(_unix_scenario(str(tmp_path)))


async def _unix_scenario(folder: str) -> None:
    path = folder + "/serve.sock"
    seen = []

    async def serve(reader, writer):
        seen.append(writer)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            body = await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(serve, path)
    client = WorkerClient()
    try:
        for body in (b"one", b"two"):  # port 9 (discard) is never used: it would refuse
            status, _, payload = await client.request("127.0.0.1", 9, {}, body, 5, unix=path)
            assert (status, payload) == (200, body)
        assert len(seen) == 1  # one pooled connection, keyed by the path
        client.forget("127.0.0.1", 9, path)
        assert not client._idle
        with pytest.raises(WorkerUnreachable):
            await client.request("127.0.0.1", 9, {}, b"x", 5, unix=folder + "/gone.sock")
    finally:
        client.close()
        server.close()
        await server.wait_closed()


def test_the_gateway_calls_only_a_serving_socket_in_the_relay_folder(tmp_path, monkeypatch):
    """A node names a jailed instance's socket; the gateway connects to it only when it is a
    ``serve.sock`` under the relay root (no other path, no symlinked folder), else it keeps to
    the relay's TCP port."""
    from nearfaas.gateway.instances import serving_socket
    from nearfaas.node import netrelay

    root = tmp_path / "run"
    monkeypatch.setattr(netrelay, "ROOT", root)
    folder = root / "node" / "instance"
    folder.mkdir(parents=True)
    good = folder / "serve.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(good))
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    socket.socket(socket.AF_UNIX).bind(str(tmp_path / "elsewhere" / "serve.sock"))
    try:
        assert serving_socket(str(good)) == str(good)
        assert serving_socket(str(tmp_path / "elsewhere" / "serve.sock")) == ""  # outside the relay root
        assert serving_socket(str(root / "link" / "serve.sock")) == ""           # a symlinked folder
        assert serving_socket(str(folder / ".." / "instance" / "serve.sock")) == ""
        assert serving_socket(str(folder / "gone" / "serve.sock")) == ""         # nothing there
        assert serving_socket(None) == "" and serving_socket(7) == ""
    finally:
        listener.close()
