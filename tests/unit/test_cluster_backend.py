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

    async def complete_multipart_upload(self, bucket, key, upload_id, parts):
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
