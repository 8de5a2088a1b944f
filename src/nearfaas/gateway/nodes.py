"""The gateway's picture of its nodes: addresses, health, and their internal API.

Health is polled (not pushed) so a node that dies is noticed without it having to say so; the
same poll carries each node's worker list, which is how the gateway learns that a worker exited.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
import yarl

from nearfaas.auth import function_keys, internal
from nearfaas.placement.replicas import StorageNode

# A node that stops answering leaves placement within HEALTH_INTERVAL_S + HEALTH_TIMEOUT_S
# (1.5 s), inside the 2 s bound; a refused connection is noticed at the next poll (0.5 s).
HEALTH_INTERVAL_S = 0.5
HEALTH_TIMEOUT_S = 1.0


@dataclass
class Node:
    name: str
    kind: str
    cls: str
    url: str
    healthy: bool = False
    last_seen: float = 0.0
    last_error: str = ""
    last_answer: float = 0.0  # event-loop time a call to it last returned an answer (replica_calls.unless_down: busy, not down)
    status: dict = field(default_factory=dict)
    # backend: ray: what Ray says of the node's actor (gateway/ray_nodes.py); an actor Ray does
    # not find alive keeps the node out of placement whatever its old URL answers.
    actor: dict | None = None
    actor_down: str = ""


def _origin(url: str) -> str:
    return str(yarl.URL(url).origin())


class NodeError(Exception):
    def __init__(self, node: str, status: int, message: str, layer: str = "node"):
        super().__init__(message)
        self.node, self.status, self.layer = node, status, layer


class NodeDirectory:
    def __init__(self, nodes: list[Node], secret: str | None = None, owner: str = "gw"):
        self.nodes = {n.name: n for n in nodes}
        self.owner = owner  # this gateway's identity, given to the workers it starts (gateway/peers.py)
        self.secret = secret  # the cluster secret: signs every internal call (auth/internal.py)
        self.session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task | None = None
        self.on_poll = []  # callbacks(node) after each successful poll
        self.origins: set[str] = set()  # where internal calls are signed for: the nodes' URLs (relocate keeps it current)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, enable_cleanup_closed=True)
        # No total (an S3 body may stream for long), but a node that stalls without dying must not
        # hang a request forever: the S3 NodeClients share this session. sock_read counts only
        # while waiting on the node (from the end of the request body, and paused while the
        # gateway itself is not reading). Calls that pass their own timeout replace this one.
        # Every call to a node's internal API is signed on its way out; S3 calls to nodes are
        # signed with SigV4 by their NodeClients.
        self.origins.update(_origin(n.url) for n in self.nodes.values() if n.url)
        middlewares = (internal.client_middleware(self.secret, "/_nearfaas/", self.origins),) if self.secret else ()
        # auto_decompress off: an object stored with Content-Encoding: gzip / deflate / br is relayed
        # as its stored bytes, never decoded on its way through the gateway (S3's semantics).
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=120),
                                             middlewares=middlewares, auto_decompress=False)
        await self.poll_all()
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self.session:
            await self.session.close()

    def storage_nodes(self, healthy_only: bool = False) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "storage" and (n.healthy or not healthy_only)]

    def storage_ring(self) -> list[StorageNode]:
        # Replica placement is over *all* storage nodes, healthy or not: a node that is down for a
        # moment must not move every key it owns.
        return [StorageNode(n.name, n.cls) for n in self.storage_nodes()]

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            await self.poll_all()

    async def poll_all(self) -> None:
        await asyncio.gather(*(self._poll(n) for n in self.nodes.values()))

    def relocate(self, name: str, url: str) -> None:
        """A node now serves at ``url`` (backend: ray: its actor moved or restarted elsewhere)."""
        node = self.nodes[name]
        if node.url != url:
            if node.url and all(n.url != node.url for n in self.nodes.values() if n is not node):
                self.origins.discard(_origin(node.url))
            node.url = url
            self.origins.add(_origin(url))

    async def _poll(self, node: Node) -> None:
        if node.actor_down or not node.url:
            node.healthy, node.last_error = False, node.actor_down or "not located yet"
        else:
            try:
                async with self.session.get(f"{node.url}/_nearfaas/health", timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as resp:
                    node.status = await resp.json()
                node.healthy, node.last_seen, node.last_error = True, time.time(), ""
            except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                node.healthy, node.last_error = False, f"{type(exc).__name__}: {exc}"
        for callback in self.on_poll:  # told either way: a node that went down takes its workers with it
            callback(node)

    async def probe(self, name: str) -> bool:
        """Poll one node now (a call to it just failed): is it still there?"""
        await self._poll(self.nodes[name])
        return self.nodes[name].healthy

    # -- internal API ----------------------------------------------------------------------------
    async def call(self, node_name: str, method: str, path: str, *, json=None, timeout: float = 30.0):
        node = self.nodes[node_name]
        if not node.url:  # backend: ray, before Ray said where it is
            raise NodeError(node_name, 503, f"node {node_name} has no known address yet", "node")
        try:
            async with self.session.request(method, f"{node.url}{path}", json=json,
                                            timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                try:
                    body = await resp.json(content_type=None)
                except ValueError:  # e.g. aiohttp's own text 500: say what came back, not a bare 500
                    text = (await resp.text(errors="replace"))[:200]
                    raise NodeError(node_name, 502, f"node {node_name} answered {resp.status} with a non-JSON body: {text}", "node") from None
                if resp.status >= 400:
                    message = body.get("error", str(body)) if isinstance(body, dict) else str(body)
                    raise NodeError(node_name, resp.status, message, (body or {}).get("layer", "node") if isinstance(body, dict) else "node")
                return body
        except TimeoutError:
            raise NodeError(node_name, 504, f"node {node_name} did not answer {method} {path} within {timeout:g}s", "node") from None
        except aiohttp.ClientError as exc:
            # Health comes from probes, never from one failed call (it may be overload): ask now.
            asyncio.ensure_future(self._poll(node))
            raise NodeError(node_name, 503, f"node {node_name} is unreachable: {exc}", "node") from None

    async def start_worker(self, node_name: str, spec: dict, timeout: float) -> dict:
        if self.secret and "uid" in spec:  # the worker's own S3 key, scoped to its function (never the cluster's)
            spec = spec | {"credentials": function_keys.credentials(self.secret, spec["name"], spec["uid"])}
        return await self.call(node_name, "POST", f"/_nearfaas/functions/{spec['name']}/workers?owner={self.owner}", json=spec,
                               timeout=timeout)

    async def stop_worker(self, node_name: str, worker_id: str) -> None:
        try:
            await self.call(node_name, "DELETE", f"/_nearfaas/workers/{worker_id}", timeout=10)
        except NodeError:
            pass  # already gone, or the node is down: either way it serves no more calls

    async def stop_function(self, name: str) -> None:
        async def stop(node):
            try:
                await self.call(node, "DELETE", f"/_nearfaas/functions/{name}", timeout=10)
            except NodeError:
                pass

        await asyncio.gather(*(stop(n) for n in self.nodes))

    async def logs(self, name: str, since: float, tail: int) -> list[dict]:
        async def fetch(node):
            try:
                return await self.call(node, "GET", f"/_nearfaas/logs/{name}?since={since}&tail={tail}", timeout=10)
            except NodeError:
                return []

        records = [r for chunk in await asyncio.gather(*(fetch(n) for n in self.nodes)) for r in chunk]
        records.sort(key=lambda r: r.get("timestamp", 0))
        return records[-tail:] if tail else records
