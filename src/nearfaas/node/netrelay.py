"""The node's side of a jailed worker's network: the only ways in and out of its namespace.

A jailed Python worker lives in a network namespace with loopback only (node/netns.py), so it
can reach nothing on the host: no node port, no fast path, no other worker. What it needs, the
node relays through unix sockets in a folder of the instance's own,
``/run/nearfaas-net/<node hash>/<instance hash>`` (0710, root and the function's group; unix
sockets found by path do not care about network namespaces; a socket's path must fit in 108
bytes, which a folder under a deep state directory may not):

- inbound: the worker's HTTP server answers on ``serve.sock``, which it binds itself inside its
  namespace (as root, 0600: only root connects). The gateway, root on the same host, learns its
  path from the node's answer and connects to it directly (gateway/worker_client.py): a call
  crosses no relay. For any other local caller holding the instance's token (a benchmark, the
  admin API's instance ``url``) the node also listens on ``127.0.0.1:<port>`` and splices each
  connection into ``serve.sock``;
- outbound: for each address the worker may reach (the gateway, which is also its S3 endpoint's
  upstream and ``OPENFAAS_URL``; on a storage node, the node's own S3 endpoint) the node serves
  ``to-<port>.sock`` and splices each connection to that one address. Inside the namespace the
  worker listens on the same ``host:port`` on its loopback and splices into that socket, so
  user code (``requests.get(os.environ["OPENFAAS_URL"] + ...)``, boto3) is unchanged.

Worked example: gateway ``http://127.0.0.1:8080``, instance ``echo-compute-0-1a2b``: the node
serves ``/run/nearfaas-net/<hash>/<hash>/to-8080.sock`` (-> 127.0.0.1:8080) and, once the worker
says ``READY 0``, listens on 127.0.0.1:41234 (-> ``serve.sock``); it answers the gateway
``{"port": 41234, "socket": "/run/nearfaas-net/<hash>/<hash>/serve.sock", ...}`` and the gateway
calls the socket. Inside, ``connect(127.0.0.1:8080)`` reaches the gateway and
``connect(127.0.0.1:<storage-0's port>)`` is refused; ``connect`` to any ``serve.sock``, its own
or another function's, is EACCES.

Why no socket created on the host is ever handed to the worker: a TCP socket keeps the
namespace it was made in, and even a listening one can be turned back into a client
(``shutdown(SHUT_RD)``, then ``connect``) that reaches the whole host.

Known caveats: every byte a worker sends out (its S3 calls, ``OPENFAAS_URL``) crosses the node's
event loop once more, and so does a call through the TCP port (not the gateway's: measured in
benchmarks/results/sandbox_cost.json); a gateway that cannot open ``serve.sock`` (not root, or
on another host) falls back to that port (gateway/instances.serving_socket); the gateway as a
whole (its public API, `/system`, its S3 endpoint) stays reachable, as it is from anywhere, with
the checks it applies to everyone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

CHUNK = 256 * 1024
ROOT = Path("/run/nearfaas-net")


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def node_folder(node_dir: Path) -> Path:
    """Where a node's instances' relay folders live; the node sweeps it when it starts."""
    return ROOT / _short(str(Path(node_dir).resolve()))


def instance_folder(node_dir: Path, instance: str) -> Path:
    return node_folder(node_dir) / _short(instance)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # a half-closed request still gets its answer
    except (ConnectionError, OSError, RuntimeError):
        writer.transport.abort()


async def splice(a: tuple[asyncio.StreamReader, asyncio.StreamWriter], b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Copy both ways until both sides are done, then close both. One home for every relay here
    and in node/netns.py."""
    try:
        await asyncio.gather(_copy(a[0], b[1]), _copy(b[0], a[1]))
    finally:
        for _, writer in (a, b):
            writer.close()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def address_of(url: str) -> tuple[str, int]:
    """``http://host:port`` -> (IPv4 address, port) that the worker binds inside its namespace."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = ipaddress.ip_address(socket.gethostbyname(host))
    if ip.version != 4:
        raise ValueError(f"{url}: a jailed worker reaches the cluster over IPv4 only; give the gateway an IPv4 address")
    return str(ip), port


class Relay:
    """One jailed instance's relays (see the module doc). ``plan`` goes into its jail plan."""

    def __init__(self, folder: Path, gid: int, targets: list[str]):
        self.folder, self.gid = Path(folder), gid
        self.targets = sorted({address_of(url) for url in targets if url})
        self.servers: list[asyncio.AbstractServer] = []
        self.open: set[asyncio.StreamWriter] = set()  # both ends of every relayed connection
        self.port = 0

    @property
    def serve_path(self) -> str:
        return str(self.folder / "serve.sock")

    @property
    def plan(self) -> dict:
        return {"folder": str(self.folder), "serve": self.serve_path,
                "forward": [{"host": h, "port": p, "socket": str(self.folder / f"to-{p}.sock")} for h, p in self.targets]}

    async def start(self) -> dict:
        """The outbound sockets, before the worker can want them; returns ``plan``."""
        shutil.rmtree(self.folder, ignore_errors=True)
        ROOT.mkdir(parents=True, exist_ok=True, mode=0o711)  # names only, and those are hashes
        self.folder.parent.mkdir(exist_ok=True, mode=0o711)
        self.folder.mkdir(mode=0o710)
        os.chown(self.folder, 0, self.gid)  # the function's group may traverse it, no one else
        for entry in self.plan["forward"]:
            server = await asyncio.start_unix_server(lambda r, w, h=entry["host"], p=entry["port"]: self._out(r, w, h, p),
                                                     entry["socket"], backlog=256)
            self.servers.append(server)
            os.chown(entry["socket"], 0, self.gid)
            os.chmod(entry["socket"], 0o660)
        return self.plan

    async def listen(self, host: str = "127.0.0.1") -> int:
        """A TCP port relayed into ``serve.sock``, for local callers other than the gateway (which
        connects to ``serve.sock`` itself)."""
        server = await asyncio.start_server(self._in, host, 0, backlog=1024)
        self.servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def _relay(self, outer, connect) -> None:
        writer = outer[1]
        try:
            inner = await connect()
        except OSError:
            writer.close()  # the other side is gone: a closed connection, as without the relay
            return
        ends = {writer, inner[1]}
        self.open |= ends
        _nodelay(writer)
        _nodelay(inner[1])
        try:
            await splice(outer, inner)
        finally:
            self.open -= ends

    async def _in(self, reader, writer) -> None:
        await self._relay((reader, writer), lambda: asyncio.open_unix_connection(self.serve_path, limit=CHUNK))

    async def _out(self, reader, writer, host: str, port: int) -> None:
        await self._relay((reader, writer), lambda: asyncio.open_connection(host, port, limit=CHUNK))

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for writer in list(self.open):  # ends the splices (their copies see the abort), no cancelled tasks to log
            writer.transport.abort()
        self.servers = []
        with contextlib.suppress(OSError):
            await asyncio.to_thread(shutil.rmtree, self.folder, True)
