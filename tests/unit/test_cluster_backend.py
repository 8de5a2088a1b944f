"""ClusterBackend's multipart calls when one replica missed part of an upload (it was down)."""

from __future__ import annotations

import asyncio

import pytest

from nearfaas.gateway.cluster_backend import ClusterBackend
from nearfaas.gateway.nodes import Node, NodeDirectory
from nearfaas.s3.backend import BucketInfo, ObjectInfo
from nearfaas.s3.errors import S3Error

INFO = ObjectInfo("b", "k", 3, "etag-2", 0.0)


class FakeNode:
    """A storage node's client that answers every call with ``answer`` (an exception is raised)."""

    def __init__(self, answer=None):
        self.answer = answer
        self.calls: list[str] = []

    def _reply(self, op: str, value):
        self.calls.append(op)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return value

    async def head_bucket(self, name):
        return BucketInfo(name, 0.0)

    async def create_multipart_upload(self, bucket, key, **kwargs):
        return self._reply("create", kwargs["upload_id"])

    async def upload_part(self, bucket, key, upload_id, part_number, stream, content_md5=None):
        async for _ in stream:
            pass
        return self._reply("part", "part-etag")

    async def complete_multipart_upload(self, bucket, key, upload_id, parts, version=None):
        return self._reply("complete", INFO)

    async def abort_multipart_upload(self, bucket, key, upload_id):
        return self._reply("abort", None)

    async def put_object(self, bucket, key, stream, **kwargs):
        async for _ in stream:
            pass
        return self._reply("put", INFO)


def _backend(a, b) -> ClusterBackend:
    nodes = NodeDirectory([Node("s0", "storage", "dscs", "http://s0", healthy=True),
                           Node("s1", "storage", "standard", "http://s1", healthy=True)])
    clients = {"s0": a, "s1": b}
    return ClusterBackend(nodes, clients.__getitem__, replication=2, dscs_replica=True)


async def _body():
    yield b"abc"


def _run(coro):
    return asyncio.run(coro)


def test_upload_part_skips_a_replica_that_missed_the_upload():
    backend = _backend(FakeNode(), FakeNode(S3Error("NoSuchUpload")))
    assert _run(backend.upload_part("b", "k", "u", 1, _body())) == "part-etag"


def test_complete_skips_a_replica_that_missed_a_part_and_drops_its_leftover():
    missed = FakeNode(S3Error("InvalidPart"))
    backend = _backend(FakeNode(), missed)
    assert _run(backend.complete_multipart_upload("b", "k", "u", [(1, "e")])) == INFO
    assert missed.calls == ["complete", "abort"]


def test_complete_and_abort_skip_a_replica_that_never_saw_the_upload():
    backend = _backend(FakeNode(S3Error("NoSuchUpload")), FakeNode())
    assert _run(backend.complete_multipart_upload("b", "k", "u", [(1, "e")])) == INFO
    _run(backend.abort_multipart_upload("b", "k", "u"))


def test_every_replica_failing_raises_the_most_telling_error():
    backend = _backend(FakeNode(S3Error("NoSuchUpload")), FakeNode(S3Error("NoSuchUpload")))
    with pytest.raises(S3Error) as caught:
        _run(backend.upload_part("b", "k", "u", 1, _body()))
    assert caught.value.code == "NoSuchUpload"
    backend = _backend(FakeNode(S3Error("NoSuchUpload")), FakeNode(S3Error("ServiceUnavailable")))
    with pytest.raises(S3Error) as caught:
        _run(backend.abort_multipart_upload("b", "k", "u"))
    assert caught.value.code == "ServiceUnavailable"  # the upload may live on the node that is down
    backend = _backend(FakeNode(S3Error("ServiceUnavailable")), FakeNode(S3Error("EntityTooSmall")))
    with pytest.raises(S3Error) as caught:
        _run(backend.complete_multipart_upload("b", "k", "u", [(1, "e")]))
    assert caught.value.code == "EntityTooSmall"


def test_other_calls_still_count_only_an_unavailable_replica_as_missed():
    backend = _backend(FakeNode(), FakeNode(S3Error("NoSuchUpload")))
    with pytest.raises(S3Error):  # a PUT has no upload to miss: this is a real error
        _run(backend.put_object("b", "k", _body()))
    backend = _backend(FakeNode(), FakeNode(S3Error("ServiceUnavailable")))
    assert _run(backend.put_object("b", "k", _body())) == INFO
    assert _run(backend.create_multipart_upload("b", "k", upload_id="u")) == "u"


# -- ListMultipartUploads merged across nodes, and deletes that a node refuses ---------------------


def _two_stores(tmp_path):
    from nearfaas.node.objectstore import ObjectStore
    from nearfaas.node.local_backend import LocalBackend

    stores = [ObjectStore(tmp_path / name, min_part_size=5) for name in ("s0", "s1")]
    for store in stores:
        store.create_bucket("bkt")
    return stores, _backend(LocalBackend(stores[0]), LocalBackend(stores[1]))


def test_uploads_on_several_replicas_are_listed_once_and_pages_merge_exactly(tmp_path):
    stores, backend = _two_stores(tmp_path)
    try:
        expected = []
        for i, key in enumerate(["a", "b/1", "b/2", "c", "d", "e"]):
            upload_id = f"id-{i}"
            holders = stores if i % 2 == 0 else [stores[i % 4 == 1]]  # some on both, some on one
            for store in holders:
                store.create_multipart_upload("bkt", key, upload_id=upload_id)
            expected.append((key, upload_id))
        listed = _run(backend.list_multipart_uploads("bkt"))
        assert [(u.key, u.upload_id) for u in listed.uploads] == expected and not listed.is_truncated
        for size in (1, 2, 4):
            seen, marker = [], ("", "")
            while True:
                page = _run(backend.list_multipart_uploads("bkt", max_uploads=size, key_marker=marker[0],
                                                           upload_id_marker=marker[1]))
                assert len(page.uploads) + len(page.common_prefixes) <= size
                seen += [(u.key, u.upload_id) for u in page.uploads]
                if not page.is_truncated:
                    break
                marker = (page.next_key_marker, page.next_upload_id_marker)
            assert seen == expected, size
        grouped = _run(backend.list_multipart_uploads("bkt", delimiter="/"))
        assert grouped.common_prefixes == ["b/"] and [u.key for u in grouped.uploads] == ["a", "c", "d", "e"]
    finally:
        for store in stores:
            store.close()


def test_an_upload_expired_on_one_replica_still_completes_on_the_other(tmp_path):
    stores, backend = _two_stores(tmp_path)
    try:
        upload_id = _run(backend.create_multipart_upload("bkt", "k"))
        etag = _run(backend.upload_part("bkt", "k", upload_id, 1, _body()))
        assert stores[0].uploads.expire(0) == (1, stores[0].counters.snapshot()["upload_bytes_reclaimed"])
        assert [u.upload_id for u in _run(backend.list_multipart_uploads("bkt")).uploads] == [upload_id]
        info = _run(backend.complete_multipart_upload("bkt", "k", upload_id, [(1, etag)]))
        assert info.size == 3 and stores[1].get_object("bkt", "k") == b"abc"
        stores[1].uploads.expire(0)
        with pytest.raises(S3Error) as caught:  # expired everywhere: a real NoSuchUpload
            _run(backend.upload_part("bkt", "k", upload_id, 2, _body()))
        assert caught.value.code == "NoSuchUpload"
    finally:
        for store in stores:
            store.close()


class DeletingNode(FakeNode):
    async def delete_object(self, bucket, key, version=None):
        return self._reply("delete", None)


def test_delete_reports_a_node_refusal_but_skips_a_node_that_is_down():
    backend = _backend(DeletingNode(), DeletingNode(S3Error("InvalidObjectName")))
    with pytest.raises(S3Error) as caught:
        _run(backend.delete_object("b", "k"))
    assert caught.value.code == "InvalidObjectName"
    backend = _backend(DeletingNode(RuntimeError("boom")), DeletingNode())
    with pytest.raises(S3Error) as caught:
        _run(backend.delete_object("b", "k"))
    assert caught.value.code == "InternalError" and "boom" in caught.value.message
    _run(_backend(DeletingNode(), DeletingNode(S3Error("ServiceUnavailable"))).delete_object("b", "k"))
    with pytest.raises(S3Error) as caught:
        _run(_backend(DeletingNode(S3Error("ServiceUnavailable")), DeletingNode(S3Error("ServiceUnavailable")))
             .delete_object("b", "k"))
    assert caught.value.code == "ServiceUnavailable"


class MissedBucketNode(FakeNode):
    """A node that was slow when the bucket was created: it does not have it yet."""

    async def head_bucket(self, name):
        self.calls.append("head_bucket")
        raise S3Error("NoSuchBucket", resource=name)

    async def create_bucket(self, name, options=None):
        raise S3Error("ServiceUnavailable", "storage node s1 is not answering its health checks")


class CreatedBucketNode(FakeNode):
    async def create_bucket(self, name, options=None):
        return BucketInfo(name, 0.0)

    async def head_bucket(self, name):
        return self._reply("head_bucket", BucketInfo(name, 0.0))


def test_a_node_that_missed_a_bucket_never_answers_for_it_while_it_is_owed():
    """CI under load: CreateBucket reached s0 only (s1 got a hint), then s0 stopped answering its
    health for a moment; a PutObject asked s1 for the bucket and the client heard NoSuchBucket
    for a bucket it had just been told exists. A node owed the bucket is 'unavailable' for it:
    the client gets a retryable 503 while no one else can answer, and the bucket once s0 does."""
    s0, s1 = CreatedBucketNode(), MissedBucketNode()
    backend = _backend(s0, s1)
    _run(backend.create_bucket("b"))
    assert backend.hints.owes_bucket("s1", "b") and not backend.hints.owes_bucket("s0", "b")

    s0.answer = S3Error("ServiceUnavailable", "s0 is not answering")  # s0 down; s1 back, still owed
    backend.nodes.nodes["s0"].healthy = False
    with pytest.raises(S3Error) as info:
        _run(backend.head_bucket("b"))
    assert info.value.code == "ServiceUnavailable", info.value
    assert s1.calls == ["head_bucket"]  # s1 was asked, and its NoSuchBucket was not believed
    with pytest.raises(S3Error) as info:  # the same through HealthBound for any call naming the bucket
        _run(backend.client_for("s1").head_bucket("b"))
    assert info.value.code == "ServiceUnavailable" and "has not yet been given bucket b" in info.value.message

    s0.answer = None
    backend.nodes.nodes["s0"].healthy = True
    assert _run(backend.head_bucket("b")).name == "b"


def test_a_node_that_owes_nothing_still_answers_no_such_bucket():
    backend = _backend(MissedBucketNode(), MissedBucketNode())
    with pytest.raises(S3Error) as info:
        _run(backend.head_bucket("nope"))
    assert info.value.code == "NoSuchBucket"
