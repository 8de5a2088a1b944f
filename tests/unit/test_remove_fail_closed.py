"""A removal the fast-path executor did not confirm is not done (red team round 7, F2): with the
executor's control channel held, the gateway said "removed" (HTTP 404 for the name afterwards)
while the executor kept running the lambda under its ID. Now the executor is asked first, and a
removal it did not confirm answers 503 with the function still deployed, to be retried."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from nearfaas.gateway.api.functions import FunctionsAPI
from nearfaas.gateway.errors import CallError


class _Invoker:
    def __init__(self):
        self.functions = {"lam": SimpleNamespace(spec={"name": "lam", "x": {"target": "fastpath", "fastpath": {"module": "m.wasm"}}})}

    async def remove(self, name):
        return self.functions.pop(name, None) is not None


class _FastPath:
    def __init__(self, fail: bool):
        self.fail, self.removed = fail, []

    async def remove(self, name, fastpath):
        if self.fail:
            raise CallError(503, "the fast-path executor did not answer on its control port: TimeoutError()", "fastpath")
        self.removed.append(name)


class _Request:
    def __init__(self, body):
        self.query, self._body = {}, body

    async def json(self):
        return self._body

    async def read(self):
        return json.dumps(self._body).encode()

    @property
    def can_read_body(self):
        return True

    content_type = "application/json"


def _delete(tmp_path, fastpath):
    invoker = _Invoker()
    api = FunctionsAPI(invoker, fastpath, tmp_path)
    resp = asyncio.run(api.delete(_Request({"functionName": "lam"})))
    return resp, invoker


def test_an_unconfirmed_removal_leaves_the_function_deployed(tmp_path):
    resp, invoker = _delete(tmp_path, _FastPath(fail=True))
    assert resp.status == 503 and "still deployed" in resp.text and "retry" in resp.text
    assert "lam" in invoker.functions  # still there, and still on the executor


def test_a_confirmed_removal_is_done(tmp_path):
    fastpath = _FastPath(fail=False)
    resp, invoker = _delete(tmp_path, fastpath)
    assert resp.status == 202 and fastpath.removed == ["lam"] and "lam" not in invoker.functions
