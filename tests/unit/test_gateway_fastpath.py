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
from nearfaas.gateway import fastpath as gateway_fastpath
from nearfaas.gateway.fastpath import HOST_ERROR, HOST_OK, MIN_ID, UNKNOWN, FastPath
from nearfaas.gateway.invoker import CallError


def test_ids_are_random_64_bit_stable_while_deployed_and_never_reused():
    fp = FastPath(None, None)
    a, b, c = (fp.assign(n) for n in ("a", "b", "c"))
    # Drawn from the CSPRNG (issue 39): 64-bit, never below 2**32, so no sweep of small
    # numbers and no old 4-byte ID names one; not a counter (no two consecutive).
    assert all(MIN_ID <= i < 2**64 for i in (a, b, c)) and len({a, b, c}) == 3
    assert abs(a - b) > 1 and abs(b - c) > 1
    assert fp.assign("b") == b
    fp.release("b")
    # b's ID is not handed to d: a client still holding it must not reach another function.
    d = fp.assign("d")
    assert d != b and fp.names == {a: "a", c: "c", d: "d"}
    assert fp.assign("b") not in (a, b, c, d)  # deployed again, it is a new function with a new ID


def test_a_drawn_id_that_is_small_or_taken_is_drawn_again(monkeypatch):
    draws = iter([0, 5, 2**32 - 1, 2**40, 2**40, 2**41])
    monkeypatch.setattr(gateway_fastpath.secrets, "randbits", lambda bits: next(draws))
    fp = FastPath(None, None)
    assert fp.assign("x") == 2**40 and fp.assign("y") == 2**41  # 0, 5, 2**32-1 and the taken 2**40 redrawn


def _layout(tmp_path, **kw):
    return {"host": "127.0.0.1", "tcp": 1, "control": 1, "host_port": 1, "ids_file": str(tmp_path / "gateway" / "lambda_ids.json")} | kw


def test_ids_survive_the_gateway_being_recreated_from_its_state(tmp_path):
    fp = FastPath(_layout(tmp_path), None)
    web, db, img, old = (fp.assign(n) for n in ("web", "db", "img", "old"))
    fp.release("db")
    fp.release("old")
    table = tmp_path / "gateway" / "lambda_ids.json"
    assert json.loads(table.read_text()) == {"format": 2, "ids": {"web": web, "img": img}}
    assert not list(table.parent.glob(".*.tmp"))  # written via a temp file, renamed into place
    # A restarted gateway deploys its functions again, in whatever order: the same IDs.
    again = FastPath(_layout(tmp_path), None)
    assert again.assign("img") == img and again.assign("web") == web
    new, db2 = again.assign("new"), again.assign("db")
    assert db2 != db and not {new, db2} & {web, img, db, old}
    assert FastPath(_layout(tmp_path), None).ids == {"web": web, "img": img, "new": new, "db": db2}


def test_an_old_table_of_4_byte_ids_is_migrated_to_random_ones(tmp_path, capsys):
    async def invoke(name, body):
        return 200, name.encode()

    table = tmp_path / "gateway" / "lambda_ids.json"
    table.parent.mkdir()
    table.write_text(json.dumps({"next": 5, "ids": {"web": 1, "img": 3}}))  # before issue 39
    fp = FastPath(_layout(tmp_path), invoke, protected=lambda name: False)
    assert set(fp.ids) == {"web", "img"} and all(i >= MIN_ID for i in fp.ids.values())
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((e["event"], e["function"], e["old_id"], e["id"]) for e in logged) == sorted(
        ("fastpath-id-migrated", name, old, fp.ids[name]) for name, old in (("web", 1), ("img", 3)))
    assert json.loads(table.read_text()) == {"format": 2, "ids": fp.ids}  # recorded: a restart keeps the new IDs
    assert FastPath(_layout(tmp_path), invoke).ids == fp.ids and capsys.readouterr().out == ""
    # The old small IDs name nothing now; the new ones reach the functions.
    for old in (1, 3):
        assert asyncio.run(fp.miss(wire.MISS_HEAD.pack(1, old) + b"x"))[4] == UNKNOWN
    assert asyncio.run(fp.miss(wire.MISS_HEAD.pack(1, fp.ids["web"]) + b"x")) == wire.encode_host_reply(1, HOST_OK, b"web")


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


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 2}', '{"format": 2, "ids": {"a": "5"}}', '{"format": 2, "ids": {"a": 0}}',
                                     '{"format": 2, "ids": {"a": 18446744073709551616}}', '{"format": 2, "ids": {"a": true}}',
                                     '{"format": 2, "ids": {"a": 4294967296, "b": 4294967296}}'])
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
    assert asyncio.run(fp.deploy({"name": "w", "x": {"target": "worker"}})) == fp.ids["w"] >= MIN_ID  # workers get IDs all the same


def test_misses_run_the_function_or_say_why_not():
    async def invoke(name, body):
        if name == "boom":
            raise CallError(503, "no node can run 'boom'", "placement")
        return (500, b"handler failed") if name == "bad" else (200, name.encode() + b":" + body)

    fp = FastPath(None, invoke, protected=lambda name: name == "secret")
    ok, boom, bad, secret = (fp.assign(n) for n in ("ok", "boom", "bad", "secret"))

    def miss(token, lambda_id, payload=b"p"):
        reply = asyncio.run(fp.miss(wire.MISS_HEAD.pack(token, lambda_id) + payload))
        return *wire.HOST_REPLY_HEAD.unpack_from(reply), reply[wire.HOST_REPLY_HEAD.size:]

    assert miss(7, ok) == (7, HOST_OK, b"ok:p")
    token, status, text = miss(8, boom)
    assert (token, status) == (8, HOST_ERROR) and b"no node can run" in text
    assert miss(9, bad)[1:] == (HOST_ERROR, b"bad: HTTP 500: handler failed")
    assert miss(10, 99)[1] == UNKNOWN
    # issue 39: a miss carries no credential, so a protected function is refused, never run
    token, status, text = miss(11, secret)
    assert (token, status) == (11, wire.UNAUTHORIZED) and b"requires credentials" in text
    # without a protected() check every miss fails closed
    closed = FastPath(None, invoke)
    assert asyncio.run(closed.miss(wire.MISS_HEAD.pack(12, closed.assign("ok")) + b"p"))[4] == wire.UNAUTHORIZED


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


@pytest.mark.parametrize("reply", [wire.encode_reply(2, wire.OK, b"x"), b"\x00\x00\x00\x01\x00\x00\x00\x00"])
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
    fp = FastPath({"host": "127.0.0.1", "tcp": 1, "control": 1, "host_port": 1, "max_frame": 108}, None)
    fp.assign("f")
    with pytest.raises(CallError) as exc:
        asyncio.run(fp.call("f", b"x" * 101))  # 8-byte ID + 101 > 108; port 1 would refuse a connection (503)
    assert exc.value.status == 413 and "100 bytes" in str(exc.value)


def test_an_external_address_is_judged_by_the_egress_policy_and_handed_over_resolved():
    from nearfaas.egress import EgressPolicy

    fp = FastPath({"max_weight": 8, "max_timeout_ms": 1000}, None)
    with pytest.raises(CallError) as exc:
        asyncio.run(fp._checked_external("kv", "localhost:11211"))
    assert exc.value.status == 400 and "gateway.egress_allow" in str(exc.value)
    fp.egress = EgressPolicy(allow=(("127.0.0.1", 11211),))
    assert asyncio.run(fp._checked_external("kv", "127.0.0.1:11211")) == "127.0.0.1:11211"
    with pytest.raises(CallError):  # exactly that port
        asyncio.run(fp._checked_external("kv", "127.0.0.1:11212"))
    fp.egress = EgressPolicy(allow=(("localhost", 11211),))
    assert asyncio.run(fp._checked_external("kv", "localhost:11211")) in ("127.0.0.1:11211", "[::1]:11211")  # the address, not the name
    with pytest.raises(CallError) as exc:
        asyncio.run(fp._checked_external("kv", "no-such-host.invalid:11211"))
    assert exc.value.status == 400 and "does not resolve" in str(exc.value)
