"""The OpenFaaS REST API of the gateway: /system/*, /function/*, /async-function/*.

Shapes follow the OpenFaaS gateway's swagger (FunctionDeployment, FunctionStatus, ...), so the
faas-cli and existing clients work; nearfaas's own fields ride along as ``handler``, ``lang`` and
``x-nearfaas``. Everything a client gets wrong is a 4xx that names the field.

One module per resource: ``functions`` (deployments), ``secrets``, ``system`` (health, metrics,
info, nodes, logs), ``invoke`` (calls, async calls, triggers, the fast path's table),
``namespaces`` (what each of them scopes functions and secrets by);
``common`` holds what they share. ``OpenFaaSAPI`` wires them together for the app.
"""

from __future__ import annotations

import asyncio
import json

from pathlib import Path

from aiohttp import web

from nearfaas.gateway.api.common import new_call_id, on_prepare, stamp_calls
from nearfaas.gateway.api.functions import FunctionsAPI, UidAllocator
from nearfaas.gateway.api.invoke import InvokeAPI
from nearfaas.gateway.api.secrets import SecretsAPI
from nearfaas.gateway.api.memory import MemoryAPI
from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.gateway.api.system import SystemAPI
from nearfaas.gateway.async_queue import AsyncQueue
from nearfaas.gateway.fastpath import FastPath

# Requests that name deployed functions (the S3 API's and the metrics' do not).
_FOLLOWING_PATHS = ("/function/", "/async-function/", "/system/")

__all__ = ["FunctionsAPI", "OpenFaaSAPI", "UidAllocator", "new_call_id", "on_prepare", "stamp_calls"]


class OpenFaaSAPI:
    def __init__(self, calls, nodes, metrics, state_dir: Path, invoke_max_body: int, max_inflight: int = 0,
                 read_timeout: float = 60.0, fastpath_layout: dict | None = None, handler_roots: list[str] = (),
                 namespaces: list[str] | None = None, journal_dir: Path | None = None):
        self.invoker = calls.invoker
        self.namespaces = Namespaces(namespaces, state_dir)  # gateway/api/namespaces.py
        # Callbacks go out on the queue's own plain session, never the nodes' signing one (async_queue.py).
        # journal: async_queue.py, in this gateway's own folder (gateway/peers.py)
        self.queue = AsyncQueue(calls, metrics, journal_dir or state_dir / "gateway")
        self.invocations = InvokeAPI(calls, None, self.queue, metrics, invoke_max_body, max_inflight, read_timeout)
        self.invocations.namespaces = self.namespaces
        self.fastpath = self.invocations.fastpath = FastPath(fastpath_layout, self.invocations._run_for_host, self.invocations.requires_auth)
        self.functions = FunctionsAPI(self.invoker, self.fastpath, state_dir, handler_roots, self.namespaces)
        self.secrets = SecretsAPI(state_dir, self.namespaces)
        self.system = SystemAPI(self.invoker, nodes, metrics, self.namespaces)
        self.memory = MemoryAPI(self.invoker, nodes)
        self.namespaces.holdings = self._holdings
        self.secrets.changed = self._restart_mounting
        # The hooks the app hands to the S3 front end and the admin guard.
        self.object_created = self.invocations.object_created
        self.requires_auth = self.invocations.requires_auth

    def _holdings(self, namespace: str) -> list[str]:
        """What namespace still holds: its functions and its secrets, by name."""
        functions = [f"function {n}" for n, ns in map(self.namespaces.of, sorted(self.invoker.functions)) if ns == namespace]
        folder = self.secrets.folder_if_any(namespace)
        return functions + [f"secret {p.name}" for p in sorted(folder.iterdir()) if p.is_file()] if folder else functions

    def _restart_mounting(self, namespace: str, secret: str) -> list[str]:
        """Replace the instances of ``namespace``'s functions that list ``secret`` (a new value:
        their copies are stale), as a redeploy with the same spec does; their names."""
        restarted = []
        for internal, state in list(self.invoker.functions.items()):
            name, ns = self.namespaces.of(internal)
            if ns == namespace and secret in (state.spec.get("secrets") or []):
                self.invoker.pool.deploy(state.spec)  # the pool's: the learned compute times stay
                restarted.append(name)
        return restarted

    async def follow_forever(self, interval_s: float = 0.2) -> None:
        """Keep up with the other gateways of the cluster: their deployments (a request that names
        functions syncs at once: ``follow``), and new values of the secrets this gateway's
        functions mount, whose instances here hold the old value (the gateway that stored it
        restarted its own)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.functions.sync()
                self.functions.follow_scale()
                mounted = {(self.namespaces.of(name)[1], secret) for name, state in self.invoker.functions.items()
                           for secret in state.spec.get("secrets") or []}
                for namespace, secret in self.secrets.noticed_changes(mounted):
                    restarted = self._restart_mounting(namespace, secret)
                    print(json.dumps({"event": "secret-changed-elsewhere", "namespace": namespace, "secret": secret,
                                      "restarted": restarted}), flush=True)
            except Exception as exc:  # an unreadable file now is readable later; keep following
                print(json.dumps({"event": "follow-failed", "error": repr(exc)}), flush=True)

    @web.middleware
    async def follow(self, request: web.Request, handler):
        """Middleware: a request that names functions first sees what other gateways of the
        cluster deployed, updated or removed (one stat while nothing changed; functions.sync)."""
        if request.path.startswith(_FOLLOWING_PATHS):
            await self.functions.sync()
        return await handler(request)

    def routes(self, app: web.Application) -> None:
        for part in (self.system, self.memory, self.functions, self.secrets, self.invocations, self.namespaces):
            part.routes(app.router)

    async def restore(self) -> None:
        await self.fastpath.start()
        await self.functions.restore()
        self.queue.start()
