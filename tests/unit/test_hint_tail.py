"""Another gateway's hint journal read while it is written (replication/hints.py, HintTail):
what a read must not answer older than, through any gateway."""

from __future__ import annotations

import asyncio

from nearfaas.replication.hints import HintLog, HintTail


def test_a_tail_follows_adds_replacements_dones_compaction_and_removal(tmp_path):
    async def scenario():
        log = HintLog(tmp_path)
        log.load()
        tail = HintTail(tmp_path)
        assert tail.newest("b", "k") == "" and not tail.owes_bucket("n1", "b")
        await log.add("n1", "b", "k", "0001.gw1")
        await log.add("n1", "b", None, options={"versioning": "Enabled"})
        assert tail.newest("b", "k") == "0001.gw1" and tail.owes_bucket("n1", "b") and not tail.owes_bucket("n2", "b")
        await log.add("n1", "b", "k", "0003.gw1")  # the newer write replaces the hint
        await log.add("n2", "b", "k", "0002.gw1")
        assert tail.newest("b", "k") == "0003.gw1"
        await log.done(next(h for h in log.all() if h.node == "n1" and h.object_key == "k"))
        await log.close()
        assert tail.newest("b", "k") == "0002.gw1"  # n2 is still owed its version
        again = HintLog(tmp_path)
        again.load()  # compaction: a new file; the tail reads it from the start
        assert tail.newest("b", "k") == "0002.gw1" and tail.owes_bucket("n1", "b")
        await again.close()
        (tmp_path / "hints.journal").unlink()  # adopted by a survivor and removed
        assert tail.newest("b", "k") == "" and not tail.owes_bucket("n1", "b")

    asyncio.run(scenario())


def test_a_gateways_reads_count_what_its_peers_owe(tmp_path):
    async def scenario():
        peer = HintLog(tmp_path / "gw1")
        peer.load()
        await peer.add("storage-1", "b", "k", "0009.gw1")
        mine = HintLog(None)
        assert mine.newest("b", "k") == ""
        mine.peers = [HintTail(tmp_path / "gw1")]
        assert mine.newest("b", "k") == "0009.gw1"
        await mine.add("storage-0", "b", "k", "000a.gw")
        assert mine.newest("b", "k") == "000a.gw"
        await peer.close()

    asyncio.run(scenario())
