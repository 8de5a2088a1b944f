"""The gateway's side of the fast path without an executor process: IDs, misses, the TCP relay."""

import asyncio
import struct

import pytest

from nearfaas.gateway.fastpath import HOST_ERROR, HOST_OK, UNKNOWN, FastPath
from nearfaas.gateway.invoker import CallError


def test_ids_are_the_smallest_free_and_stable_while_deployed():
    fp = FastPath(None, None)
    assert [fp.assign(n) for n in ("a", "b", "c")] == [1, 2, 3]
    assert fp.assign("b") == 2
    fp.release("b")
    assert fp.assign("d") == 2 and fp.names == {1: "a", 2: "d", 3: "c"}


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

    fp = FastPath(None, invoke)
    for n in ("ok", "boom", "bad"):
        fp.assign(n)

    def miss(token, lambda_id, payload=b"p"):
        reply = asyncio.run(fp.miss(struct.pack(">II", token, lambda_id) + payload))
        return struct.unpack(">I", reply[:4])[0], reply[4], reply[5:]

    assert miss(7, 1) == (7, HOST_OK, b"ok:p")
    token, status, text = miss(8, 2)
    assert (token, status) == (8, HOST_ERROR) and b"no node can run" in text
    assert miss(9, 3)[1:] == (HOST_ERROR, b"bad: HTTP 500: handler failed")
    assert miss(10, 99)[1] == UNKNOWN


def test_call_survives_a_dead_pooled_connection():
    async def main():
        async def serve(reader, writer):
            while True:
                try:
                    (n,) = struct.unpack(">I", await reader.readexactly(4))
                    msg = await reader.readexactly(n)
                except asyncio.IncompleteReadError:
                    return
                reply = msg[:4] + b"\0" + b"echo " + msg[4:]
                writer.write(struct.pack(">I", len(reply)) + reply)
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
