"""A jailed worker's own network namespace: loopback, plus the cluster addresses it needs.

``enter(net)`` runs in the worker, from node/jail.enter, while it is still root and before the
seccomp profile (which forbids ``unshare``): it makes a network namespace of its own
(``unshare(CLONE_NEWNET)``), brings ``lo`` up (``SIOCSIFFLAGS``), binds the socket its HTTP
server answers on (``net["serve"]``, a unix socket in the instance's folder, which the gateway
connects to directly, node/netrelay.py) and, for each ``net["forward"]`` entry, a TCP listener
on that very ``host:port`` inside the namespace (adding the host to ``lo`` when it is not a
loopback address). ``start_forwarding()``, once the jail is complete, splices every connection
to those listeners into the entry's unix socket, where the node connects it to the one address.
Nothing else has a route: ``connect`` to any other port answers ECONNREFUSED, to any other
address ENETUNREACH.

Worked example: ``net = {"serve": "<node>/net/i1/serve.sock", "forward": [{"host":
"127.0.0.1", "port": 8080, "socket": "<node>/net/i1/to-8080.sock"}]}``: in the worker
``requests.get("http://127.0.0.1:8080/function/echo")`` (``OPENFAAS_URL``) reaches the gateway
through the node; ``socket.create_connection(("127.0.0.1", 9001))`` (a node) is refused.

Fail closed: a kernel without network namespaces, or one that refuses any step, stops the
worker (JailError, FAILED on the ready pipe) and the node's start-up probe (``probe``) names it.

Known caveats: the forward listeners run on a thread of their own with an event loop of its own
(a plain selector loop: a second uvloop loop in the process crashed the worker with a NULL call
on its second compressed write), so a handler that blocks the worker's loop still reaches the
gateway; IPv4 only; host names other
than ``localhost`` do not resolve inside (no DNS): the URLs the node gives are addresses.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import ipaddress
import os
import socket
import struct
import threading

# Imported here, not when forwarding starts: a pre-warmed worker has it loaded before it is
# specialised (~1.6 ms of a cold start otherwise). netrelay imports the standard library only.
from nearfaas.node.netrelay import CHUNK, splice

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, SIOCSIFADDR, SIOCSIFNETMASK = 0x8913, 0x8914, 0x8916, 0x891C
IFF_UP = 0x1
FIX = "run the node agent as root on a Linux kernel with network namespaces (CONFIG_NET_NS)"

# What enter() bound, for the worker to serve and forward on after the jail is complete.
serving: socket.socket | None = None
_forwards: list[tuple[socket.socket, str]] = []

_libc = ctypes.CDLL(None, use_errno=True)


def enter(net: dict) -> None:
    """Steps described in the module doc. Raises OSError naming the step that failed."""
    global serving
    if _libc.unshare(CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWNET): {os.strerror(code)}; {FIX}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ctl:
        _up(ctl, "lo")
        aliases = 0
        for entry in net.get("forward") or []:
            host = entry["host"]
            if not ipaddress.ip_address(host).is_loopback:
                aliases += 1
                _add_address(ctl, f"lo:{aliases}", host)
    if net.get("serve"):
        serving = _unix_listener(net["serve"])
    for entry in net.get("forward") or []:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((entry["host"], int(entry["port"])))
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on {entry['host']}:{entry['port']} in the worker's namespace: {exc.strerror}") from None
        listener.listen(256)
        _forwards.append((listener, entry["socket"]))


def _up(ctl: socket.socket, name: str) -> None:
    ifr = struct.pack("16sH14x", name.encode(), 0)
    flags = struct.unpack("16sH", fcntl.ioctl(ctl, SIOCGIFFLAGS, ifr)[:18])[1]
    fcntl.ioctl(ctl, SIOCSIFFLAGS, struct.pack("16sH14x", name.encode(), flags | IFF_UP))


def _add_address(ctl: socket.socket, alias: str, host: str) -> None:
    """``host`` on ``lo`` (an IPv4 alias), so the worker can listen on the gateway's own address."""
    def sockaddr(ip: str) -> bytes:
        return struct.pack("16sH2s4s8x", alias.encode(), socket.AF_INET, b"\0\0", socket.inet_aton(ip))
    fcntl.ioctl(ctl, SIOCSIFADDR, sockaddr(host))
    fcntl.ioctl(ctl, SIOCSIFNETMASK, sockaddr("255.255.255.255"))


def _unix_listener(path: str) -> socket.socket:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)  # as root: only the node (root) connects to it
    os.chmod(path, 0o600)
    sock.listen(1024)
    return sock


def start_forwarding() -> None:
    """Relay the forward listeners on a thread of their own (after the jail: threads are fine).
    It does not wait for that thread: the listeners listen already (``enter``), so a connection
    made before its loop runs waits in their backlog, as it would for a busy loop."""
    if not _forwards:
        return
    # A plain selector loop, not the worker's uvloop: two uvloop loops in one process crashed
    # (a NULL call in the second call's compressed write, runtime/context.py's Bitar device).
    loop = asyncio.SelectorEventLoop()
    threading.Thread(target=lambda: loop.run_until_complete(_forward_all()), name="netns-forward", daemon=True).start()


async def _forward_all() -> None:
    async def one(path: str, reader, writer) -> None:
        try:
            outer = await asyncio.open_unix_connection(path, limit=CHUNK)
        except OSError:
            writer.close()
            return
        await splice((reader, writer), outer)

    for listener, path in _forwards:
        listener.setblocking(False)
        await asyncio.start_server(lambda r, w, p=path: one(p, r, w), sock=listener, limit=CHUNK)
    await asyncio.Event().wait()


def _loopback_socket_other_than(port: int) -> socket.socket:
    """A TCP socket bound on loopback to any port but ``port``. A new namespace may hand out the
    host listener's number, and a connection from it to that number is TCP's simultaneous open
    to itself, which succeeds: a CI run read that as "still reaches a host port"."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    if sock.getsockname()[1] == port:
        sock.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port - 1 if port > 1024 else port + 1))
    return sock


def probe() -> list[str]:
    """In the probe's forked child (root): can a worker get a namespace of its own with ``lo``
    up, in which a host port is unreachable? One sentence per problem."""
    try:
        outside = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        outside.bind(("127.0.0.1", 0))
        outside.listen(1)
        port = outside.getsockname()[1]
        enter({"forward": []})
        with _loopback_socket_other_than(port) as inside:  # loopback works inside
            code = inside.connect_ex(("127.0.0.1", port))
        outside.close()
        if code != errno.ECONNREFUSED:
            return [f"a worker's network namespace still reaches a host port (connect: {os.strerror(code)}); {FIX}"]
    except OSError as exc:
        return [f"cannot give workers a network namespace of their own ({exc}); {FIX}"]
    return []
