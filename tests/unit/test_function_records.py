"""The gateway's bookkeeping of deployed functions, as red team round 7 found it wanting:
a removal the fast-path executor did not confirm is not done (F2: with the executor's control
channel held, the gateway said "removed" while the executor kept running the lambda under its
ID; now the executor is asked first, and an unconfirmed removal answers 503 with the function
still deployed, to be retried), and two clusters on one host do not share function uids."""

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


def test_two_clusters_give_their_functions_different_uids(tmp_path):
    # Red team round 7: every cluster's first function got uid 200000, so on one host a function
    # of one cluster shared its uid with another cluster's worker (signals, /proc). A cluster's
    # uids start at a random block of 1,000 now, kept across restarts.
    from nearfaas.gateway.api.functions import UidAllocator
    from nearfaas.node.jail import DERIVED_UID_BASE, MIN_UID

    firsts = []
    for n in range(3):
        (tmp_path / f"c{n}").mkdir()
        alloc = UidAllocator(tmp_path / f"c{n}" / "last_uid")
        first = asyncio.run(alloc.next([]))
        assert MIN_UID <= first < DERIVED_UID_BASE and (first - MIN_UID) % 1000 == 0
        assert asyncio.run(UidAllocator(tmp_path / f"c{n}" / "last_uid").next([])) == first + 1  # kept in the state dir
        firsts.append(first)
    assert len(set(firsts)) == 3, firsts  # (a 1-in-800,000 chance that two draw the same block)
