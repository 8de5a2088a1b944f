"""A hostile function for tests/integration/test_attacks_sandbox.py: it tries to connect to each
TCP port and send to each UDP port it is given (the nodes', the fast path's, another worker's)
and reports what happened ("connected", "answered", "timeout" or the errno name), likewise for
each unix socket path (jailed workers' serving sockets, which the gateway calls), then does what
a legitimate function does: boto3 on its S3 endpoint, ``context.objects``, and a call of another
function through OPENFAAS_URL."""

import errno
import json
import os
import socket
import urllib.request


def _tcp(host, port):
    try:
        with socket.create_connection((host, port), timeout=2):
            return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))


def _unix(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            return "connected"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc))


def _udp(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1)
        try:
            s.connect((host, port))
            s.send(b"\0\0\0\1hello")
            s.recv(65536)
            return "answered"
        except TimeoutError:
            return "timeout"  # nothing said no: the datagram reached a listener
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc))


def handle(event, context):
    body = json.loads(event.body or b"{}")
    out = {"tcp": {f"{h}:{p}": _tcp(h, p) for h, p in body.get("tcp", [])},
           "udp": {f"{h}:{p}": _udp(h, p) for h, p in body.get("udp", [])},
           "unix": {path: _unix(path) for path in body.get("unix", [])}}
    if body.get("bucket"):
        import boto3

        s3 = boto3.client("s3")
        s3.put_object(Bucket=body["bucket"], Key="netprobe", Body=b"boto3 works")
        out["s3"] = s3.get_object(Bucket=body["bucket"], Key="netprobe")["Body"].read().decode()
        context.objects.put(body["bucket"], b"objects work", key="netprobe-ctx")
        out["objects"] = bytes(context.objects.get(body["bucket"], "netprobe-ctx")).decode()
    if body.get("call"):
        url = os.environ["OPENFAAS_URL"].rstrip("/") + "/function/" + body["call"]
        with urllib.request.urlopen(urllib.request.Request(url, data=b"hi", method="POST"), timeout=20) as resp:
            out["call"] = [resp.status, resp.read().decode()]
    return out
