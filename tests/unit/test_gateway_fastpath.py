"""The gateway's side of the fast path without an executor process: IDs, misses, the TCP relay."""

import asyncio
import hashlib
import hmac
import json
import os
import stat

import pytest

from nearfaas.fastpath import wire
from nearfaas.fastpath.auth import new_key_file, read_key
from nearfaas.gateway.fastpath import HOST_ERROR, HOST_OK, UNKNOWN, FastPath
from nearfaas.gateway.invoker import CallError


def test_ids_are_stable_while_deployed_and_never_reused():
    fp = FastPath(None, None)
    assert [fp.assign(n) for n in ("a", "b", "c")] == [1, 2, 3]
    assert fp.assign("b") == 2
    fp.release("b")
    # b's ID is not handed to d: a client still holding 2 must not reach another function.
    assert fp.assign("d") == 4 and fp.names == {1: "a", 3: "c", 4: "d"}
    assert fp.assign("b") == 5  # deployed again, it is a new function with a new ID


def _layout(tmp_path, **kw):
    return {"host": "127.0.0.1", "tcp": 1, "control": 1, "host_port": 1, "ids_file": str(tmp_path / "gateway" / "lambda_ids.json")} | kw


def test_ids_survive_the_gateway_being_recreated_from_its_state(tmp_path):
    fp = FastPath(_layout(tmp_path), None)
    assert [fp.assign(n) for n in ("web", "db", "img", "old")] == [1, 2, 3, 4]
    fp.release("db")
    fp.release("old")
    table = tmp_path / "gateway" / "lambda_ids.json"
    assert json.loads(table.read_text()) == {"next": 5, "ids": {"web": 1, "img": 3}}
    assert not list(table.parent.glob(".*.tmp"))  # written via a temp file, renamed into place
    # A restarted gateway deploys its functions again, in whatever order: the same IDs.
    again = FastPath(_layout(tmp_path), None)
    assert again.assign("img") == 3 and again.assign("web") == 1
    # A new function never gets a deleted one's ID, after the restart as before it.
    assert again.assign("new") == 5 and again.assign("db") == 6
    assert FastPath(_layout(tmp_path), None).ids == {"web": 1, "img": 3, "new": 5, "db": 6}


def test_a_deleted_functions_id_answers_unknown_never_another_function(tmp_path):
    async def invoke(name, body):
        return 200, name.encode()

    fp = FastPath(_layout(tmp_path), invoke)
    secret_id = fp.assign("holds-secrets")
    fp.release("holds-secrets")
    fp.assign("someone-else")
    restarted = FastPath(_layout(tmp_path), invoke)
    for gateway in (fp, restarted):
        reply = asyncio.run(gateway.miss(wire.MISS_HEAD.pack(1, secret_id) + b"x"))
        assert reply[4] == UNKNOWN and b"someone-else" not in reply


@pytest.mark.parametrize("content", ["{not json", '{"next": 2, "ids": {"a": 5}}', '{"ids": {}}', '{"next": 9, "ids": {"a": 1, "b": 1}}'])
def test_an_unreadable_id_table_stops_the_gateway_rather_than_reassigning(tmp_path, content):
    table = tmp_path / "gateway" / "lambda_ids.json"
    table.parent.mkdir()
    table.write_text(content)
    with pytest.raises(RuntimeError, match="lambda_ids.json"):
        FastPath(_layout(tmp_path), None)


def _control_server(key: bytes, seen: list):
    """A stand-in for the executor's control port: challenge, check the HMAC, then answer ops."""
    async def serve(reader, writer):
        nonce = os.urandom(32)
        writer.write(json.dumps({"challenge": nonce.hex(), "auth": "hmac-sha256"}).encode() + b"\n")
        answer = json.loads(await reader.readline())
        if answer != {"op": "auth", "hmac": hmac.new(key, nonce, hashlib.sha256).hexdigest()}:
            writer.write(b'{"ok": false, "error": "auth: wrong"}\n')
            writer.close()
            return
        writer.write(b'{"ok": true, "op": "auth"}\n')
        seen.append(json.loads(await reader.readline()))
        writer.write(b'{"ok": true, "pong": true}\n')
        await writer.drain()
        writer.close()

    return asyncio.start_server(serve, "127.0.0.1", 0)


def test_control_answers_the_challenge_with_the_clusters_key(tmp_path):
    key_file = new_key_file(tmp_path / "fastpath.key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    other = new_key_file(tmp_path / "other.key")

    async def main():
        seen = []
        server = await _control_server(read_key(key_file), seen)
        port = server.sockets[0].getsockname()[1]
        fp = FastPath(_layout(tmp_path, control=port, control_key_file=str(key_file)), None)
        assert await fp.control({"op": "ping"}) == {"ok": True, "pong": True}
        assert seen == [{"op": "ping"}]
        wrong = FastPath(_layout(tmp_path, control=port, control_key_file=str(other)), None)
        with pytest.raises(CallError) as exc:
            await wrong.control({"op": "deploy"})
        assert exc.value.status == 503 and "refused the control key" in str(exc.value)
        assert seen == [{"op": "ping"}]  # the op never reached the executor
        keyless = FastPath(_layout(tmp_path, control=port), None)
        with pytest.raises(CallError, match="control_key_file"):
            await keyless.control({"op": "ping"})
        server.close()

    asyncio.run(main())


def test_a_fastpath_deploy_without_an_executor_is_a_503_naming_the_fix():
    fp = FastPath(None, None)
    spec = {"name": "f", "handler_dir": "/x", "x": {"target": "fastpath", "fastpath": {"module": "web.wasm", "native": None,
                                                                                      "weight": 1, "timeout_ms": 50, "external": None}}}
    with pytest.raises(CallError) as exc:
        asyncio.run(fp.deploy(spec))
    assert exc.value.status == 503 and "make setup" in str(exc.value)
    assert asyncio.run(fp.deploy({"name": "w", "x": {"target": "worker"}})) == 1  # workers get IDs all the same


def test_misses_run_the_function_or_say_why_not():
    async def invoke(name, body):
        if name == "boom":
            raise CallError(503, "no node can run 'boom'", "placement")
        return (500, b"handler failed") if name == "bad" else (200, name.encode() + b":" + body)

    fp = FastPath(None, invoke, protected=lambda name: name == "secret")
    for n in ("ok", "boom", "bad", "secret"):
        fp.assign(n)

    def miss(token, lambda_id, payload=b"p"):
        reply = asyncio.run(fp.miss(wire.MISS_HEAD.pack(token, lambda_id) + payload))
        return *wire.HOST_REPLY_HEAD.unpack_from(reply), reply[wire.HOST_REPLY_HEAD.size:]

    assert miss(7, 1) == (7, HOST_OK, b"ok:p")
    token, status, text = miss(8, 2)
    assert (token, status) == (8, HOST_ERROR) and b"no node can run" in text
    assert miss(9, 3)[1:] == (HOST_ERROR, b"bad: HTTP 500: handler failed")
    assert miss(10, 99)[1] == UNKNOWN
    # issue 39: a miss carries no credential, so a protected function is refused, never run
    token, status, text = miss(11, 4)
    assert (token, status) == (11, wire.UNAUTHORIZED) and b"requires credentials" in text
    # without a protected() check every miss fails closed
    closed = FastPath(None, invoke)
    closed.assign("ok")
    assert asyncio.run(closed.miss(wire.MISS_HEAD.pack(12, 1) + b"p"))[4] == wire.UNAUTHORIZED


def test_protected_functions_are_not_installed_in_the_executor():
    fp = FastPath(None, None, protected=lambda name: True)
    spec = {"name": "s", "x": {"target": "fastpath", "auth": True, "fastpath": {"module": "web.wasm"}}}
    with pytest.raises(CallError) as exc:
        asyncio.run(fp.deploy(spec))
    assert exc.value.status == 400 and "auth" in str(exc.value) and "s" not in fp.ids


def test_call_survives_a_dead_pooled_connection():
    async def main():
        async def serve(reader, writer):
            while True:
                try:
                    n = wire.frame_length(await reader.readexactly(wire.FRAME_HEAD.size))
                    lambda_id, payload = wire.decode_request(await reader.readexactly(n))
                except asyncio.IncompleteReadError:
                    return
                writer.write(wire.frame(wire.encode_reply(lambda_id, wire.OK, b"echo " + payload)))
                await writer.drain()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fp = FastPath({"host": "127.0.0.1", "tcp": port, "control": 1, "host_port": 1}, None)
        fp.assign("f")
        assert await fp.call("f", b"one") == (0, b"echo one")
        fp._pool[0][1].close()  # the executor restarted under a pooled connection
        await asyncio.sleep(0.01)
        assert await fp.call("f", b"two") == (0, b"echo two")
        with pytest.raises(CallError) as exc:
            await fp.call("gone", b"")
        assert exc.value.status == 404
        server.close()

    asyncio.run(main())


@pytest.mark.parametrize("reply", [wire.encode_reply(2, wire.OK, b"x"), b"\x00\x00\x00\x01"])
def test_a_malformed_or_mismatched_reply_is_a_502_and_drops_the_connection(reply):
    async def main():
        async def serve(reader, writer):
            await reader.readexactly(wire.frame_length(await reader.readexactly(wire.FRAME_HEAD.size)))
            writer.write(wire.frame(reply))  # another lambda's reply, or one shorter than its header
            await writer.drain()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        fp = FastPath({"host": "127.0.0.1", "tcp": server.sockets[0].getsockname()[1], "control": 1, "host_port": 1}, None)
        fp.assign("f")
        with pytest.raises(CallError) as exc:
            await fp.call("f", b"")
        assert exc.value.status == 502 and "malformed" in str(exc.value) and fp._pool == []
        server.close()

    asyncio.run(main())


def test_a_payload_over_the_frame_limit_is_a_413_before_any_connection():
    fp = FastPath({"host": "127.0.0.1", "tcp": 1, "control": 1, "host_port": 1, "max_frame": 104}, None)
    fp.assign("f")
    with pytest.raises(CallError) as exc:
        asyncio.run(fp.call("f", b"x" * 101))  # 4-byte ID + 101 > 104; port 1 would refuse a connection (503)
    assert exc.value.status == 413 and "100 bytes" in str(exc.value)
