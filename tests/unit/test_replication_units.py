"""Versions, last-writer-wins replicas, tombstones, digests, ordered acknowledgement and hints
(replication/, node/objectstore.py): the pieces replicas converge with (issue 13, item 1-2)."""

from __future__ import annotations

import asyncio
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.node.objectstore import ObjectStore
from nearfaas.replication.hints import HintLog
from nearfaas.replication.ordering import AckOrder
from nearfaas.replication.version import HybridClock, wall_seconds
from nearfaas.s3.versions import is_version
from nearfaas.s3.errors import S3Error


# -- versions -----------------------------------------------------------------------------------

def test_versions_increase_even_when_the_wall_clock_stands_still_or_steps_back():
    now = [1_700_000_000.0]
    clock = HybridClock("gw", wall=lambda: now[0])
    seen = [clock.now() for _ in range(5)]
    now[0] -= 60  # stepped back a minute
    seen += [clock.now() for _ in range(5)]
    assert seen == sorted(seen) and len(set(seen)) == 10
    assert all(is_version(v) and len(v) == clock.width for v in seen)
    assert abs(wall_seconds(seen[0]) - 1_700_000_000.0) < 0.001


def test_observe_moves_the_clock_past_a_version_seen_elsewhere():
    ahead = HybridClock("node", wall=lambda: 2_000_000_000.0).now()
    clock = HybridClock("gw", wall=lambda: 1_700_000_000.0)
    clock.observe(ahead)
    assert clock.now() > ahead


def test_a_bad_origin_is_refused():
    with pytest.raises(ValueError, match="origin"):
        HybridClock("has space")


# -- last-writer-wins on one replica ------------------------------------------------------------

def _store(tmp_path, name="s"):
    store = ObjectStore(tmp_path / name)
    store.create_bucket("bkt")
    return store


def test_an_older_write_or_delete_arriving_late_changes_nothing(tmp_path):
    clock = HybridClock("gw")
    v1, v2, v3 = clock.now(), clock.now(), clock.now()
    store = _store(tmp_path)
    store.put_object("bkt", "k", b"two", version=v2)
    store.put_object("bkt", "k", b"one", version=v1)  # a retry of an older write
    assert store.get_object("bkt", "k") == b"two"
    assert store.delete_object("bkt", "k", v1) is False
    assert store.get_object("bkt", "k") == b"two"
    assert store.delete_object("bkt", "k", v3) is True
    with pytest.raises(S3Error) as gone:
        store.head_object("bkt", "k")
    assert gone.value.code == "NoSuchKey" and gone.value.headers == {"x-nearfaas-version": v3, "x-nearfaas-deleted": "true"}
    store.put_object("bkt", "k", b"two again", version=v2)  # older than the delete: stays deleted
    with pytest.raises(S3Error):
        store.get_object("bkt", "k")
    assert store.list_objects("bkt").contents == []


def test_tombstones_survive_a_restart_and_are_purged_only_by_exact_version(tmp_path):
    clock = HybridClock("gw")
    store = _store(tmp_path)
    store.put_object("bkt", "k", b"x", version=clock.now())
    deleted = clock.now()
    store.delete_object("bkt", "k", deleted)
    store.close()
    store = ObjectStore(tmp_path / "s")
    assert store.digest("bkt")["tombstones"] == 1 and store.entries("bkt") == [("k", deleted, True)]
    store.put_object("bkt", "k", b"late", version="0000000000000001.gw")  # older than the delete: ignored
    assert store.purge_tombstones("bkt", [("k", "0" * 16 + ".gw")]) == 0
    assert store.purge_tombstones("bkt", [("k", deleted)]) == 1
    assert store.entries("bkt") == [] and store.digest("bkt")["tombstones"] == 0
    assert store.clock.now() > deleted  # the node's own clock moved past what it found on disk


def test_an_unversioned_delete_leaves_no_tombstone(tmp_path):
    store = _store(tmp_path)
    store.put_object("bkt", "k", b"x")
    assert store.delete_object("bkt", "k") is True
    assert store.digest("bkt") == {"digest": "0" * 16, "objects": 0, "tombstones": 0, "oldest_tombstone": None}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), min_size=1, max_size=12), st.randoms())
def test_replicas_that_apply_the_same_writes_in_any_order_end_identical(tmp_path_factory, ops, rnd):
    """Property: LWW replicas converge whatever the delivery order, and their digests agree."""
    clock = HybridClock("gw")
    stamped = [(key, clock.now(), delete) for key, delete in ops]
    root = tmp_path_factory.mktemp("lww")
    stores = [_store(root, f"r{i}") for i in range(2)]
    for store in stores:
        order = stamped[:]
        rnd.shuffle(order)
        for key, version, delete in order + order[: len(order) // 2]:  # and some arrive twice
            if delete:
                store.delete_object("bkt", key, version)
            else:
                store.put_object("bkt", key, version.encode(), version=version)
    assert stores[0].entries("bkt") == stores[1].entries("bkt")
    assert stores[0].digest("bkt")["digest"] == stores[1].digest("bkt")["digest"]
    for key in "abc":
        last = max((s for s in stamped if s[0] == key), key=lambda s: s[1], default=None)
        if last is None or last[2]:
            assert all(key not in [e[0] for e in st_.entries("bkt") if not e[2]] for st_ in stores)
        else:
            assert stores[0].get_object("bkt", key) == last[1].encode()
    for store in stores:
        store.close()


# -- ordered acknowledgement --------------------------------------------------------------------

def test_acknowledgements_of_one_key_go_out_in_version_order():
    async def go():
        order, acked = AckOrder(), []
        versions = [f"{i:016x}.gw" for i in range(1, 9)]
        for v in versions:
            order.begin("bkt", "k", v)
        order.begin("bkt", "other", versions[0])  # another key never waits on this one

        async def write(v: str, delay: float):
            await asyncio.sleep(delay)  # the replicas finish in a random order
            try:
                await order.settle("bkt", "k", v)
                acked.append(v)
            finally:
                order.end("bkt", "k", v)

        rng = random.Random(7)
        await asyncio.wait_for(order.settle("bkt", "other", versions[0]), 1)  # nothing older on its key
        await asyncio.gather(*(write(v, rng.uniform(0, 0.02)) for v in versions))
        assert acked == versions and order.pending() == 1

    asyncio.run(go())


def test_a_failed_write_releases_the_writes_after_it():
    async def go():
        order = AckOrder()
        order.begin("bkt", "k", "1")
        order.begin("bkt", "k", "2")
        waiter = asyncio.ensure_future(order.settle("bkt", "k", "2"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        order.end("bkt", "k", "1")  # failed: ended all the same
        await asyncio.wait_for(waiter, 1)

    asyncio.run(go())


# -- hints ---------------------------------------------------------------------------------------

def test_hints_are_durable_collapse_to_the_newest_and_forget_what_was_handed_off(tmp_path):
    async def first_life():
        hints = HintLog(tmp_path)
        hints.load()
        await hints.add("s1", "bkt", "k", "0000000000000001.gw")
        await hints.add("s1", "bkt", "k", "0000000000000003.gw")
        await hints.add("s1", "bkt", "k", "0000000000000002.gw")  # older than what is owed: no change
        await hints.add("s1", "bkt", None, options={"dscs_replica": True})
        await hints.add("s0", "bkt", "j", "0000000000000005.gw")
        done = [h for h in hints.for_node("s0")][0]
        await hints.done(done)
        await hints.close()  # a crash after the fsync'd adds would keep the same

    asyncio.run(first_life())
    hints = HintLog(tmp_path)
    hints.load()
    owed = hints.for_node("s1")
    assert [(h.object_key, h.version) for h in owed] == [(None, ""), ("k", "0000000000000003.gw")]
    assert owed[0].options == {"dscs_replica": True}
    assert hints.newest("bkt", "k") == "0000000000000003.gw" and hints.newest("bkt", "j") == ""
    assert hints.pending() == {"s1": 2} and hints.for_node("s0") == []


# -- versions on the wire: only the gateway may send them --------------------------------------

@pytest.fixture
def node_server(tmp_path):
    from s3_test_server import S3TestServer

    from nearfaas.s3.sigv4 import S3Auth

    server = S3TestServer(tmp_path / "node", auth=S3Auth({"gateway": "gateway-secret", "user": "user-secret"}),
                          version_writer=lambda principal: principal is not None and principal.name == "gateway").start()
    server.client("gateway", "gateway-secret").create_bucket(Bucket="bkt")
    yield server
    server.stop()


async def _chunks(*parts: bytes):
    for part in parts:
        yield part


def test_the_gateway_writes_and_deletes_by_version_and_a_404_names_the_delete(node_server):
    from nearfaas.replication.repair import with_trailer
    from nearfaas.s3.node_client import NodeClient

    clock = HybridClock("gw")
    v1, v2 = clock.now(), clock.now()

    async def go():
        async with NodeClient("n", node_server.endpoint, credentials=("gateway", "gateway-secret")) as node:
            info = await node.put_object("bkt", "k", with_trailer(_chunks(b"new ", b"bytes"), v2), version_trailer=len(v2))
            assert info.version == v2 and info.size == 9
            await node.put_object("bkt", "k", with_trailer(_chunks(b"old"), v1), version_trailer=len(v1))  # late: ignored
            assert (await node.head_object("bkt", "k")).version == v2
            await node.delete_object("bkt", "k", version=clock.now())
            with pytest.raises(S3Error) as gone:
                await node.head_object("bkt", "k")
            return gone.value

    gone = node_server.run(go())
    assert gone.code == "NoSuchKey" and gone.headers["x-nearfaas-deleted"] == "true" and gone.headers["x-nearfaas-version"] > v2


def test_a_version_from_anyone_but_the_gateway_is_refused(node_server):
    from botocore.exceptions import ClientError

    user = node_server.client("user", "user-secret")
    user.put_object(Bucket="bkt", Key="k", Body=b"mine")

    def forge(request, **_):
        request.headers["x-nearfaas-version"] = "ffffffffffffffff.gw"  # would win every future write

    user.meta.events.register("before-sign.s3.DeleteObject", forge)
    with pytest.raises(ClientError) as refused:
        user.delete_object(Bucket="bkt", Key="k")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert user.get_object(Bucket="bkt", Key="k")["Body"].read() == b"mine"


def test_a_body_without_its_promised_version_trailer_stores_nothing(node_server):
    from nearfaas.s3.node_client import NodeClient

    async def go():
        async with NodeClient("n", node_server.endpoint, credentials=("gateway", "gateway-secret")) as node:
            with pytest.raises(S3Error) as bad:
                await node.put_object("bkt", "t", _chunks(b"no version at the end of this body"), version_trailer=19)
            return bad.value

    bad = node_server.run(go())
    assert bad.code == "InvalidArgument" and "version" in bad.message
    assert node_server.store.list_objects("bkt").contents == []


def test_a_replica_at_its_disk_floor_missed_the_write_and_is_owed_it():
    # A full replica stored nothing (InsufficientStorage): like one that is down, it missed a
    # write another replica made (the gateway hints it), rather than failing an acknowledged
    # write; when every replica is full the client gets the 507.
    from nearfaas.gateway.replica_calls import missed_write, settle
    from nearfaas.s3.errors import S3Error

    full = S3Error("InsufficientStorage")
    assert settle(["storage-0", "storage-1"], [full, "stored"], missed_write, "write") == ["stored"]
    with pytest.raises(S3Error) as both:
        settle(["storage-0", "storage-1"], [full, S3Error("InsufficientStorage")], missed_write, "write")
    assert both.value.status == 507


def test_a_node_whose_polls_fail_is_given_up_on_unless_it_keeps_answering_other_calls(monkeypatch):
    """A stopped node answers nothing: a call to it is abandoned after the patience. A node whose
    health polls time out behind a burst but that keeps answering other calls is busy, not down:
    the call waits for it (up to the busy patience). The node's answers are simulated latencies."""
    # catches: a busy node's calls answered ServiceUnavailable after the patience (the overload
    # test's 503s "not answering its health checks" on a slow host), or a stopped node waited on
    # for the busy patience because an answer from before it stopped still counts
    from nearfaas.gateway import replica_calls as R
    from nearfaas.gateway.nodes import Node
    from nearfaas.s3.errors import S3Error

    monkeypatch.setattr(R, "_PATIENCE_S", 0.2)
    monkeypatch.setattr(R, "_DOWN_CHECK_S", 0.02)
    monkeypatch.setattr(R, "_BUSY_PATIENCE_S", 1.5)
    node = Node("storage-9", "storage", "dscs", "http://127.0.0.1:9", healthy=False, last_seen=1.0)

    async def answer(value, after_s):
        await asyncio.sleep(after_s)
        return value

    async def main():
        await R.unless_down(node, answer("earlier", 0.0))  # it answered once, then stopped
        with pytest.raises(S3Error, match="not answering its health checks") as stopped:
            await R.unless_down(node, answer("never", 5.0))
        assert stopped.value.code == "ServiceUnavailable"
        waited = float(re.search(r"this call waited ([0-9.]+)s", str(stopped.value)).group(1))
        assert waited < 1.5  # given up after the patience, not the busy patience
        served = asyncio.Event()

        async def other_calls():  # the burst: the node answers one call every 50 ms
            while not served.is_set():
                await R.unless_down(node, answer("other", 0.05))
        ticker = asyncio.create_task(other_calls())
        try:
            assert await R.unless_down(node, answer("slow but served", 0.8)) == "slow but served"
            with pytest.raises(S3Error, match="not answering its health checks"):  # bounded even while busy
                await R.unless_down(node, answer("too slow", 5.0))
        finally:
            served.set()
            await ticker

    asyncio.run(main())


def test_a_clock_with_a_ceiling_file_never_stamps_below_what_it_handed_out_before_a_restart(tmp_path):
    """Restarted with its wall clock two minutes behind (issue 43), it starts from the ceiling it
    kept, so the next stamp is above every earlier one; the file is rewritten once per reserve."""
    import os

    from nearfaas.replication.version import RESERVE_MS, HybridClock

    now = [1_700_000_000.0]
    clock = HybridClock("gw", wall=lambda: now[0], ceiling_file=tmp_path / "clock")
    stamps = [clock.now() for _ in range(100)]
    written = os.stat(tmp_path / "clock").st_mtime_ns
    now[0] += RESERVE_MS / 2000  # half the reserve later: no new write
    stamps.append(clock.now())
    assert os.stat(tmp_path / "clock").st_mtime_ns == written
    restarted = HybridClock("gw", wall=lambda: now[0] - 120, ceiling_file=tmp_path / "clock")
    assert restarted.now() > max(stamps)
    fresh = HybridClock("gw", wall=lambda: now[0] - 120)  # no ceiling: only observing can help it
    fresh.observe(restarted.high_water())
    assert fresh.now() > max(stamps)
    garbled = tmp_path / "garbled"
    garbled.write_text("not hex")
    assert HybridClock("gw", wall=lambda: now[0], ceiling_file=garbled).now()  # unreadable: starts from the wall
