"""A real S3 front end over a LocalBackend, served on 127.0.0.1 from a background thread with
its own event loop, so that blocking boto3 clients can drive it from a test."""

from __future__ import annotations

import asyncio
import itertools
import http.client
import os
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import boto3
from aiohttp import web
from botocore import UNSIGNED
from botocore.config import Config

from nearfaas.node.objectstore import ObjectStore
from nearfaas.s3.frontend import S3Frontend
from nearfaas.s3.local_backend import LocalBackend
from nearfaas.s3.sigv4 import S3Auth


class S3TestServer:
    def __init__(self, root: Path, *, auth: S3Auth | None = None, max_body: int = 64 << 20,
                 min_part_size: int = 5 << 20, max_object_size: int = 5 << 30):
        self.store = ObjectStore(root, min_part_size=min_part_size, max_object_size=max_object_size)
        self.backend = LocalBackend(self.store)
        self.frontend = S3Frontend(self.backend, auth=auth, max_body=max_body)
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
        self._runner = web.AppRunner(app)
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


# -- helpers of the S3 front-end tests ------------------------------------------------------------

NAMES = itertools.count()  # unique bucket names across a module's tests


def code_of(excinfo) -> tuple[str, int]:
    err = excinfo.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def raw(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        send_body: bool = True) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = dict(headers or {})
        conn.putrequest(method, path, skip_accept_encoding=True, skip_host="Host" in headers)
        if body is not None and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            headers["Content-Length"] = str(len(body))
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body is not None and send_body:
            conn.send(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def xml_code(body: bytes) -> str:
    return ET.fromstring(body).findtext("Code")


def tmp_is_empty(server) -> bool:
    return os.listdir(server.store.root / "tmp") == []


def tmp_empties_soon(server, timeout: float = 5.0, settle: float = 0.5) -> bool:
    """For aborts the server only sees once the client's connection has gone. Empty must stay
    empty for ``settle`` seconds: the handler may open its temp file only after the client has
    gone (and then abort it), so one empty listing proves nothing."""
    deadline = time.monotonic() + timeout
    empty_since = None
    while time.monotonic() < deadline:
        if not tmp_is_empty(server):
            empty_since = None
        elif empty_since is None:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since >= settle:
            return True
        time.sleep(0.02)
    return False
