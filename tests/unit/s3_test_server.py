"""A real S3 front end over a LocalBackend, served on 127.0.0.1 from a background thread with
its own event loop, so that blocking boto3 clients can drive it from a test."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import boto3
from aiohttp import web
from botocore import UNSIGNED
from botocore.config import Config

from nearfaas.node.objectstore import ObjectStore
from nearfaas.s3.frontend import S3Frontend
from nearfaas.node.local_backend import LocalBackend
from nearfaas.s3.sigv4 import S3Auth


class S3TestServer:
    def __init__(self, root: Path, *, auth: S3Auth | None = None, max_body: int = 64 << 20,
                 min_part_size: int = 5 << 20, max_object_size: int = 5 << 30, version_writer=None):
        self.store = ObjectStore(root, min_part_size=min_part_size, max_object_size=max_object_size)
        self.backend = LocalBackend(self.store)
        self.frontend = S3Frontend(self.backend, auth=auth, max_body=max_body, version_writer=version_writer)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def start(self) -> S3TestServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application()

        async def healthz(_request):  # a host route, mounted before the S3 catch-all
            return web.Response(text="ok")

        app.router.add_get("/healthz", healthz)
        self.frontend.mount(app)
        # As the node and the gateway serve (node/agent.py): bodies pass as sent, never decoded.
        self._runner = web.AppRunner(app, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _cancel_leftovers(self) -> None:
        # Connections still lingering to drain an unread body (aiohttp waits up to 10 s).
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, coro, timeout: float = 10):
        """Run a coroutine on the server's loop (e.g. to call the backend directly)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(self._cancel_leftovers(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        self.store.close()

    def client(self, access_key: str = "test", secret: str = "test", *, unsigned: bool = False,
               addressing_style: str = "path"):
        config = Config(s3={"addressing_style": addressing_style}, retries={"max_attempts": 1},
                        signature_version=UNSIGNED if unsigned else "s3v4", connect_timeout=5, read_timeout=20)
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=access_key, aws_secret_access_key=secret, config=config)
