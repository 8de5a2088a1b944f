"""A write answered 5xx that landed on some replica (issue 43: it later replaced the acknowledged
value everywhere): a void hint keeps reads from answering it and repair undoes it, as a version
just above the failed one, so it can replace nothing else. In-memory replicas with the nodes'
last-writer-wins rule stand in for storage nodes."""

from __future__ import annotations

import asyncio

import pytest

from nearfaas.gateway.cluster_backend import ClusterBackend
from nearfaas.gateway.nodes import Node, NodeDirectory
from nearfaas.replication.repair import Repairer
from nearfaas.s3.backend import BucketInfo, ObjectInfo, ObjectStream
from nearfaas.s3.errors import S3Error
from nearfaas.s3.versions import DELETED_HEADER, VERSION_HEADER


class Replica:
    """key -> (version, body or None for a tombstone); applies a write only if it is newer."""

    def __init__(self, fail_writes: S3Error | None = None):
        self.keys: dict[str, tuple[str, bytes | None]] = {}
        self.fail_writes = fail_writes  # stores the write, then answers this (its disk failed after)
        self.down = False  # answers 503 and stores nothing
        self.refuse: S3Error | None = None  # answers this and stores nothing (a node's gate: SlowDown)

    def _apply(self, key: str, version: str, body: bytes | None) -> None:
        if key not in self.keys or self.keys[key][0] < version:
            self.keys[key] = (version, body)

    async def head_bucket(self, name):
        return BucketInfo(name, 0.0)

    def _info(self, key: str) -> ObjectInfo:
        version, body = self.keys.get(key, ("", None))
        if body is None:
            raise S3Error("NoSuchKey", headers={DELETED_HEADER: "true", VERSION_HEADER: version} if version else {})
        return ObjectInfo("b", key, len(body), "etag", 0.0, version=version)

    async def head_object(self, bucket, key):
        return self._info(key)

    async def get_object(self, bucket, key, byte_range=None, **kwargs):
        info = self._info(key)

        async def body():
            yield self.keys[key][1]

        return ObjectStream(info, 0, info.size - 1, body())

    async def put_object(self, bucket, key, stream, *, version_trailer=0, **kwargs):
        data = b"".join([chunk async for chunk in stream])
        if self.down:
            raise S3Error("ServiceUnavailable")
        if self.refuse is not None:
            raise self.refuse
        self._apply(key, data[-version_trailer:].decode(), data[:-version_trailer])
        if self.fail_writes is not None:
            raise self.fail_writes
        return self._info(key)

    async def delete_object(self, bucket, key, version="", **kwargs):
        self._apply(key, version, None)


def _cluster(a: Replica, b: Replica) -> ClusterBackend:
    nodes = NodeDirectory([Node("s0", "storage", "dscs", "http://s0", healthy=True),
                           Node("s1", "storage", "standard", "http://s1", healthy=True)])
    clients = {"s0": a, "s1": b}
    backend = ClusterBackend(nodes, clients.__getitem__, replication=2, dscs_replica=True)
    backend.repairer = Repairer(backend)
    return backend


async def _body(data: bytes):
    yield data


async def _read(backend, key):
    try:
        stream = await backend.get_object("b", key)
    except S3Error as exc:
        return exc.code
    return b"".join([chunk async for chunk in stream.body])


@pytest.mark.parametrize("failure", ["500-after-storing", "slowdown-beside-a-success"])
def test_a_failed_overwrite_is_never_read_and_is_undone_where_it_landed(failure):
    """slowdown-beside-a-success: one node's gate refused the write (overload, 503 SlowDown) while
    the other stored it; under 1,000 connections of S3 load that left keys differing until
    anti-entropy (issue 43)."""

    async def scenario():
        a, b = Replica(), Replica()
        backend = _cluster(a, b)
        await backend.put_object("b", "k", _body(b"acknowledged"))
        landed, kept = (b, a) if failure == "500-after-storing" else (a, b)
        if failure == "500-after-storing":  # a misses it; b stores it, then answers 500
            a.down, b.fail_writes = True, S3Error("InternalError")
        else:  # a stores it; b's gate refuses it
            b.refuse = S3Error("SlowDown")
        try:
            await backend.put_object("b", "k", _body(b"failed"))
            raise AssertionError("the write should have failed")
        except S3Error as exc:
            assert exc.status >= 500
        failed = landed.keys["k"][0]
        assert landed.keys["k"][1] == b"failed" and backend.hints.voided("b", "k") == {failed}
        assert await _read(backend, "k") == b"acknowledged"  # not the write that failed
        a.down, b.fail_writes, b.refuse = False, None, None  # both answer again
        assert not await backend.repairer.repair("b", "k", via="read")  # repair does not spread it
        assert kept.keys["k"][1] == b"acknowledged"
        assert await backend.repairer.resolve_void("b", "k", failed)
        assert a.keys["k"] == b.keys["k"] == (failed + "-", b"acknowledged")
        await backend.put_object("b", "k", _body(b"later"))  # a later write is above the undoing one
        assert a.keys["k"][1] == b.keys["k"][1] == b"later"

    asyncio.run(scenario())


def test_a_failed_first_write_is_undone_to_no_key_and_a_superseded_one_is_left_to_repair():
    async def scenario():
        a, b = Replica(), Replica(fail_writes=S3Error("InternalError"))
        backend = _cluster(a, b)
        a.down = True
        try:
            await backend.put_object("b", "new", _body(b"failed"))
        except S3Error:
            pass
        (failed,) = backend.hints.voided("b", "new")
        assert await _read(backend, "new") == "NoSuchKey"
        a.down = False
        assert await backend.repairer.resolve_void("b", "new", failed)
        assert a.keys["new"] == b.keys["new"] == (failed + "-", None)  # a tombstone above it
        # A failed write that a later acknowledged one superseded on some replica: repair brings
        # the others up to the later one; nothing is put back.
        a.down, b.fail_writes = False, None
        await backend.put_object("b", "s", _body(b"one"))
        a.down = True
        b.fail_writes = S3Error("InternalError")
        try:
            await backend.put_object("b", "s", _body(b"failed"))
        except S3Error:
            pass
        (failed,) = backend.hints.voided("b", "s")
        a.down, b.fail_writes = False, None
        later = backend.clock.now()
        a._apply("s", later, b"later")
        assert await backend.repairer.resolve_void("b", "s", failed)
        assert b.keys["s"] == (later, b"later")

    asyncio.run(scenario())


def test_nothing_is_undone_while_a_node_cannot_answer_or_when_every_copy_holds_it():
    async def scenario():
        a, b = Replica(), Replica()
        backend = _cluster(a, b)
        a._apply("k", "0000000000000001.gw", b"x")
        b._apply("k", "0000000000000001.gw", b"x")
        assert await backend.repairer.resolve_void("b", "k", "0000000000000001.gw")  # nothing older: it stands
        assert a.keys["k"] == ("0000000000000001.gw", b"x")

        async def down(*args, **kwargs):
            raise S3Error("ServiceUnavailable")

        b.head_object = down
        assert not await backend.repairer.resolve_void("b", "k", "0000000000000001.gw")

    asyncio.run(scenario())
