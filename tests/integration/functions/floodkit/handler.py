"""A function for tests/integration/test_attacks_floods.py that attacks what it can reach from
inside a worker, as a tenant would: it holds idle connections open to another function's S3
endpoint, answers with more bytes than the gateway takes, or writes its own HTTP answer with a
huge Content-Length straight onto the gateway's connection and streams into it."""

import json
import os
import socket
import time
from urllib.parse import urlsplit

_held = []  # connections kept open after the call returns, as an attacker would


def _hold(port: int, n: int) -> int:
    opened = 0
    for _ in range(n):
        try:
            _held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            opened += 1
        except OSError:
            break
    return opened


def _s3() -> dict:
    import boto3
    import botocore.exceptions

    client = boto3.client("s3")  # the worker's own endpoint, from the environment; default retries
    try:
        client.list_objects_v2(Bucket="floodkit-nothing-here")
        return {"ok": True}
    except botocore.exceptions.ClientError as exc:  # an S3 answer (NoSuchBucket): the endpoint served it
        return {"ok": True, "s3_error": exc.response["Error"]["Code"]}
    except Exception as exc:  # noqa: BLE001 - what the attack does: the connection itself fails
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _sockets():
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        if s.family not in (socket.AF_INET, socket.AF_UNIX) or s.type != socket.SOCK_STREAM:
            s.close()
            continue
        yield s


def _local(s: socket.socket):
    """What a socket is bound to: a TCP port, or a unix socket's path."""
    name = s.getsockname()
    return name[1] if s.family == socket.AF_INET else name


def _endless(total: int) -> dict:
    """A raw answer with Content-Length 10**12 on every connection the gateway has to us, then up
    to ``total`` bytes streamed into it (bounded, so an unfixed gateway does not take the host down).
    The connections are those accepted by our own listeners: TCP without isolation, the unix
    socket the node relays the gateway's calls into when the worker has a network namespace."""
    s3_port = urlsplit(os.environ.get("AWS_ENDPOINT_URL", "http://x:0")).port
    listening, conns = set(), []
    for s in _sockets():
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            listening.add(_local(s))
            s.close()
        else:
            conns.append(s)
    ours = [s for s in conns if _local(s) in listening - {s3_port, "", None}]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000000000\r\n\r\n"
    chunk = b"x" * 65536
    sent = 0
    deadline = time.monotonic() + 4
    for s in ours:
        s.settimeout(2)
        try:
            s.sendall(head)
            while sent < total and time.monotonic() < deadline:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the gateway hung up: what a fixed gateway does
    for s in conns:
        s.close()
    return {"connections": len(ours), "sent": sent}


def handle(event, context):
    doc = json.loads(event.body or b"{}")
    op = doc.get("op")
    if op == "where":
        return {"endpoint": os.environ.get("AWS_ENDPOINT_URL", "")}
    if op == "hold":
        return {"opened": _hold(int(doc["port"]), int(doc.get("n", 64)))}
    if op == "s3":
        return _s3()
    if op == "big":
        return {"statusCode": 200, "body": b"y" * int(doc["size"])}
    if op == "endless":
        return _endless(int(doc.get("total", 256 << 20)))
    if op == "sleep":  # a slow function, for the async queue's byte budget
        time.sleep(float(doc.get("s", 1)))
        return {"slept": doc.get("s", 1)}
    return {"op": op}
