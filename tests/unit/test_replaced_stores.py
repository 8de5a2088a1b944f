"""Nodes back on a replaced disk (replication/replaced.py): known by a new store identity,
untrusted until an anti-entropy pass finds every node identical, remembered by every gateway."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from nearfaas.replication.replaced import ReplacedStores


def _node(name: str, store_id: str, kind: str = "storage", healthy: bool = True):
    return SimpleNamespace(name=name, kind=kind, healthy=healthy, status={"store_id": store_id})


def test_a_new_store_identity_means_refilling_until_a_converged_pass(tmp_path):
    async def scenario():
        woken = []
        stores = ReplacedStores(tmp_path / "stores.json", wake=lambda: woken.append(1))
        stores.on_poll(_node("s0", "aaaa"))  # first seen: the truth
        stores.on_poll(_node("c0", "", kind="compute"))
        await asyncio.gather(*stores._tasks)
        assert stores.refilling == set() and woken == []
        stores.on_poll(_node("s0", "bbbb"))  # the same node, another disk
        stores.on_poll(_node("s0", "bbbb"))
        assert stores.refilling == {"s0"} and woken == [1]  # one wake, not one per poll
        other = ReplacedStores(tmp_path / "stores.json")  # another gateway, the same file
        other.on_poll(_node("s0", "bbbb"))
        assert other.refilling == {"s0"}
        stores.refilled([_node("s0", "bbbb"), _node("s1", "cccc")])
        await asyncio.gather(*stores._tasks)
        assert stores.refilling == set()
        other.on_poll(_node("s0", "bbbb"))  # it reads the new identity and trusts the node again
        assert other.refilling == set()
        stores.on_poll(_node("s0", "bbbb", healthy=False))  # a poll that failed says nothing
        assert stores.refilling == set()

    asyncio.run(scenario())
