"""node/netns.py and node/netrelay.py together, without a cluster: a child process (root) enters
its own network namespace from a relay plan; through the node's relay it reaches the one allowed
address and answers on its serving socket, and a host port it was not given is refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from nearfaas.node import netrelay

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")

CHILD = textwrap.dedent("""
    import json, socket, sys
    from nearfaas.node import netns
    plan, forbidden = json.loads(sys.argv[1]), int(sys.argv[2])
    netns.enter(plan)
    netns.start_forwarding()
    allowed = plan["forward"][0]
    with socket.create_connection((allowed["host"], allowed["port"]), timeout=5) as s:
        s.sendall(b"ping")
        got = s.recv(100).decode()
    refused = socket.socket().connect_ex(("127.0.0.1", forbidden))
    print(json.dumps({"allowed": got, "forbidden": refused}), flush=True)
    conn, _ = netns.serving.accept()  # the node's relay of a gateway call
    conn.sendall(b"pong:" + conn.recv(100))
    conn.close()
""")


async def _scenario(tmp_path):
    async def echo(reader, writer):
        writer.write(b"echo:" + await reader.read(100))
        await writer.drain()
        writer.close()

    allowed = await asyncio.start_server(echo, "127.0.0.1", 0)
    forbidden = await asyncio.start_server(echo, "127.0.0.1", 0)
    relay = netrelay.Relay(netrelay.instance_folder(tmp_path, "t1"), os.getgid(), [f"http://127.0.0.1:{allowed.sockets[0].getsockname()[1]}"])
    plan = await relay.start()
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, json.dumps(plan), str(forbidden.sockets[0].getsockname()[1]),
                                                 stdout=subprocess.PIPE)
    try:
        answer = json.loads(await asyncio.wait_for(child.stdout.readline(), 30))
        port = await relay.listen()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"call")
        await writer.drain()
        inbound = await asyncio.wait_for(reader.read(100), 10)
        writer.close()
        assert await asyncio.wait_for(child.wait(), 10) == 0
    finally:
        if child.returncode is None:
            child.kill()
        await relay.close()
        allowed.close()
        forbidden.close()
    return answer, inbound, relay.folder


def test_a_worker_namespace_reaches_only_its_relayed_address(tmp_path):
    answer, inbound, folder = asyncio.run(_scenario(tmp_path))
    assert answer == {"allowed": "echo:ping", "forbidden": 111}  # ECONNREFUSED
    assert inbound == b"pong:call"
    assert not folder.exists()


def test_the_relay_names_ipv4_addresses_only():
    assert netrelay.address_of("http://127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert netrelay.address_of("http://localhost:80/") == ("127.0.0.1", 80)
    with pytest.raises(ValueError, match="IPv4"):
        netrelay.address_of("http://[::1]:8080")


def test_without_network_namespaces_the_probe_names_what_is_missing(monkeypatch):
    """Fail closed: a kernel (or container) that refuses unshare(CLONE_NEWNET) is named, with the
    fix, and jail.probe puts the sentence into the node's refusal to start."""
    import ctypes
    import errno

    from nearfaas.node import netns

    class NoNetns:
        def unshare(self, flags):
            ctypes.set_errno(errno.EPERM)
            return -1

    monkeypatch.setattr(netns, "_libc", NoNetns())
    problems = netns.probe()
    assert len(problems) == 1 and "unshare(CLONE_NEWNET): Operation not permitted" in problems[0], problems
    assert "CONFIG_NET_NS" in problems[0]
