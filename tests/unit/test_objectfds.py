"""Object files handed to a worker as fds (node/objectfds.py <-> runtime/context.py LocalObjects):
the worker's zero-copy local read without any view of the store's files."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from nearfaas.auth import function_keys
from nearfaas.node import objectfds
from nearfaas.node.objectfds import ObjectFdServer, answer, function_buckets
from nearfaas.node.objectstore import ObjectStore
from nearfaas.runtime.context import IOStats, LocalObjects, ObjectClient
from nearfaas.spec.options import INTERMEDIATE_BUCKET


RUN_ID = "ab" * 16


@pytest.fixture
def store(tmp_path):
    s = ObjectStore(tmp_path / "store")
    for bucket in ("docs", "payroll", INTERMEDIATE_BUCKET):
        s.create_bucket(bucket)
    s.put_object("docs", "a.txt", b"near data, by fd")
    s.put_object("docs", "empty", b"")
    s.put_object("payroll", "q3.csv", b"secret numbers")
    s.put_object(INTERMEDIATE_BUCKET, f"app/{RUN_ID}/stage", b"intermediate")
    for i in range(8):
        s.put_object("docs", f"k{i}", bytes([65 + i]) * (5000 + i))  # bigger than a page
    return s


def _until(predicate, timeout: float = 5.0) -> None:
    """The node counts an answer just after sending it, so the count may trail the reader."""
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        threading.Event().wait(0.01)
    assert predicate()


def _serve(store, spec: dict, body) -> None:
    """Run the node's side on an event loop in a thread while ``body(local)`` runs here, as a
    worker's handler threads would."""
    ready = threading.Event()
    state = {}

    def loop_thread():
        async def main():
            server = ObjectFdServer(store.root)
            channel = server.open_channel()
            channel.authorise(spec)
            state["fd"], state["channel"], state["server"] = channel.worker_fd, channel, server
            state["stop"] = asyncio.Event()
            ready.set()
            await state["stop"].wait()
            server.close()

        state["loop"] = asyncio.new_event_loop()
        state["loop"].run_until_complete(main())

    thread = threading.Thread(target=loop_thread)
    thread.start()
    ready.wait(5)
    try:
        body(LocalObjects(os.dup(state["fd"])), state["channel"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(5)


def test_an_allowed_bucket_is_mapped_with_the_right_bytes(store):
    def body(local, channel):
        client = ObjectClient("http://127.0.0.1:9", local, IOStats())
        view = client.get({"bucket": "docs", "key": "a.txt"})
        assert isinstance(view, memoryview) and bytes(view) == b"near data, by fd"
        assert view.readonly
        assert client.stats.bytes_read_local == len(b"near data, by fd") and client.stats.bytes_read_remote == 0
        assert bytes(client.get("s3://docs/empty")) == b""
        assert client.is_local("s3://docs/a.txt")
        _until(lambda: channel.served == 3)

    _serve(store, {"buckets": ["docs"]}, body)


def test_another_bucket_is_denied_and_a_missing_key_is_not_found(store):
    def body(local, channel):
        got, fd = local.ask("open", "payroll", "q3.csv")
        assert got["status"] == "denied" and fd is None
        assert local.open("payroll", "q3.csv") is None  # the client falls back to S3, which checks its key
        got, fd = local.ask("open", "docs", "nope")
        assert (got["status"], got["error"], fd) == ("not-found", "NoSuchKey", None)
        got, fd = local.ask("open", "docs", "../payroll/q3.csv")  # refused, and keys are hashed anyway
        assert got["status"] in ("bad-request", "not-found") and fd is None
        got, _ = local.ask("open", "Not_A_Bucket", "k")
        assert got["status"] == "denied"
        assert not local.broken  # refusals keep the channel usable

    _serve(store, {"buckets": ["docs"]}, body)


def test_an_intermediate_needs_its_chain_calls_key(store):
    """A function key (any bucket list, "*" included) never reads intermediates by fd; a chain
    call's key reads its own call's prefix and nothing else (auth/function_keys.py)."""
    objectfds.trust_chain_keys("cluster-secret")
    mine = function_keys.run_credentials("cluster-secret", "app", RUN_ID)
    other = function_keys.run_credentials("cluster-secret", "app", "cd" * 16)
    forged = function_keys.run_credentials("another-secret", "app", RUN_ID)

    def body(local, channel):
        key = f"app/{RUN_ID}/stage"
        assert local.ask("open", INTERMEDIATE_BUCKET, key)[0]["status"] == "denied"
        for cred in (other, forged):
            assert local.open(INTERMEDIATE_BUCKET, key, (cred["access_key"], cred["secret_key"])) is None
        client = ObjectClient("http://127.0.0.1:9", local, IOStats(), run_key=f"{mine['access_key']}:{mine['secret_key']}")
        assert bytes(client.get(f"s3://{INTERMEDIATE_BUCKET}/{key}")) == b"intermediate"
        assert client.stats.bytes_read_local == len(b"intermediate")

    _serve(store, {"buckets": ["*"]}, body)


def test_any_bucket_star_and_no_list_means_no_bucket_and_never_the_intermediates():
    assert function_buckets({}) == frozenset()
    assert function_buckets({"buckets": ["*", INTERMEDIATE_BUCKET]}) == {"*"}
    reply, fd = answer("/nonexistent", function_buckets({"buckets": ["*"]}), json.dumps({"id": 1, "bucket": "zz9", "key": "k"}).encode())
    assert reply["status"] == "not-found" and fd is None
    reply, _ = answer("/nonexistent", function_buckets({}), json.dumps({"id": 2, "bucket": "zz9", "key": "k"}).encode())
    assert reply["status"] == "denied"
    reply, _ = answer("/nonexistent", frozenset(), b"not json")
    assert reply["status"] == "bad-request"


def test_concurrent_requests_from_handler_threads_get_their_own_answers(store):
    def body(local, channel):
        client = ObjectClient("http://127.0.0.1:9", local, IOStats())

        def read(i):
            return bytes(client.get("docs", f"k{i % 8}"))

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(read, range(200)))
        assert all(r == bytes([65 + i % 8]) * (5000 + i % 8) for i, r in enumerate(results))
        _until(lambda: channel.served == 200)  # one answer per read: no read was retried or lost

    _serve(store, {"buckets": ["docs"]}, body)


def test_a_worker_that_never_reads_its_answers_loses_its_channel_not_the_node(store):
    def body(local, channel):
        raw = local._sock
        raw.setblocking(False)
        request = json.dumps({"id": 1, "op": "stat", "bucket": "docs", "key": "a.txt"}).encode()
        for _ in range(3000):  # keep asking, never read: the answers pile up until the node gives up
            if channel.closed:
                break
            try:
                for _ in range(1000):
                    raw.send(request)
            except BlockingIOError:
                threading.Event().wait(0.002)
            except OSError:  # the node closed its end
                break
        _until(lambda: channel.closed)

    _serve(store, {"buckets": ["docs"]}, body)


def test_a_mapping_survives_a_new_version_renamed_into_place(store):
    def body(local, channel):
        client = ObjectClient("http://127.0.0.1:9", local, IOStats())
        view = client.get("docs", "a.txt")
        store.put_object("docs", "a.txt", b"a newer, longer version of it")
        assert bytes(view) == b"near data, by fd"
        assert bytes(client.get("docs", "a.txt")) == b"a newer, longer version of it"

    _serve(store, {"buckets": ["docs"]}, body)


def test_the_worker_end_is_a_seqpacket_socket():
    async def main():
        server = ObjectFdServer("/nonexistent")
        channel = server.open_channel()
        sock = socket.socket(fileno=os.dup(channel.worker_fd))
        assert sock.type == socket.SOCK_SEQPACKET and sock.family == socket.AF_UNIX
        sock.close()
        server.close()
        assert channel.closed and channel.child_fd is None and not server.channels

    asyncio.run(main())
