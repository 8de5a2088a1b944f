"""Object files handed to workers as file descriptors: zero-copy local reads for a worker that
cannot see the object store (node/jail.py hides it).

Mechanism. When a storage node starts a worker (or a pre-warmed generic worker) it makes a
``socketpair(AF_UNIX, SOCK_SEQPACKET)``; the worker inherits one end, the node watches the other
from its event loop. A worker asks with one datagram, ``{"id": 7, "op": "open", "bucket": "docs",
"key": "a.txt"}``; the node checks that the function may read the bucket locally (the buckets
the gateway put in the spec; an intermediate only with its chain call's key), opens the object file
read-only and answers ``{"id": 7, "status": "ok", "offset": 4096, "size": 1234, "etag": "..."}``
with the open fd attached (SCM_RIGHTS). The worker mmaps it exactly as it used to mmap the
path: an object file is replaced by rename, never rewritten, so the mapping stays valid. ``op:
"stat"`` answers the same header without an fd (``is_local``). Other answers: ``denied`` (the
function must read it through the gateway, which checks its credentials), ``not-found``,
``bad-request``, ``error``. The worker side is ``LocalObjects`` in runtime/context.py.

Worked example: function ``wordcount`` deployed with ``buckets: ["docs"]`` asks for
``docs/a.txt`` -> ``ok`` + fd; for ``payroll/q3.csv`` -> ``denied`` (its read then goes to the
gateway, which refuses it there too); for ``docs/missing`` -> ``not-found``.

Known caveats:
- The node opens and reads the 4 KiB header on its event loop: a local file, microseconds, but
  a worker flooding requests costs the node that much each (bounded by the worker's CPU quota).
- A worker that sends requests without reading the answers fills its socket; the node closes
  that worker's channel rather than block or queue (its later local reads go through S3).
- An fd once handed over stays readable by the worker (also after the object is deleted) until
  it closes it; that is what a mapping of the old path did too.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

from nearfaas.auth import function_keys
from nearfaas.node.objectfile import CorruptObjectFile, bucket_dir, info_from_header, live_fields, object_path
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import validate_bucket_name, validate_key
from nearfaas.spec.options import INTERMEDIATE_BUCKET

MAX_REQUEST = 4096  # a bucket name (63) and a key (1024 bytes) with room to spare


ANY_BUCKET = "*"  # the gateway's word for a function that declared no x-nearfaas.buckets


def function_buckets(spec: dict) -> frozenset[str]:
    """Buckets a function may read through the fd hand-off: the gateway's ``spec["buckets"]``
    (``["*"]``: any but the intermediates). The chain intermediate bucket is never among them: a
    request for it must carry its chain call's key (``run`` + ``proof``, auth/function_keys.py)."""
    return frozenset(b for b in (spec.get("buckets") or []) if isinstance(b, str) and b != INTERMEDIATE_BUCKET)


def may_read(buckets: frozenset[str], bucket: str) -> bool:
    return bucket != INTERMEDIATE_BUCKET and (bucket in buckets or ANY_BUCKET in buckets)


_chain_secret: list[str] = []  # the cluster secret, set once by the node agent (trust_chain_keys)


def trust_chain_keys(cluster_secret: str) -> None:
    """Let requests for intermediates in with a chain call's key made under ``cluster_secret``."""
    _chain_secret[:] = [cluster_secret]


def _chain_key_ok(message: dict, bucket: str, key: str) -> bool:
    run, proof = message.get("run"), message.get("proof")
    return (bool(_chain_secret) and isinstance(run, str) and isinstance(proof, str)
            and function_keys.run_proof_ok(_chain_secret[0], run, proof, bucket, key, INTERMEDIATE_BUCKET))


def answer(store_root, buckets: frozenset[str], request: bytes) -> tuple[dict, int | None]:
    """The reply to one request, and the fd to attach (the caller sends then closes it)."""
    try:
        message = json.loads(request)
        if not isinstance(message, dict):
            raise ValueError("not an object")
        rid, op, bucket, key = message.get("id"), message.get("op", "open"), message.get("bucket"), message.get("key")
        if op not in ("open", "stat") or not isinstance(bucket, str) or not isinstance(key, str):
            raise ValueError("needs op open|stat, bucket and key strings")
    except ValueError as exc:
        return {"id": None, "status": "bad-request", "error": str(exc)}, None
    reply = {"id": rid}
    if not may_read(buckets, bucket) and not _chain_key_ok(message, bucket, key):
        return reply | {"status": "denied", "error": f"this function may not read bucket {bucket!r} locally"}, None
    try:
        validate_bucket_name(bucket)
        validate_key(key)
    except S3Error as exc:
        return reply | {"status": "bad-request", "error": str(exc)}, None
    store_root = Path(store_root)
    try:
        fd = os.open(object_path(store_root, bucket, key), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        exists = (bucket_dir(store_root, bucket) / ".bucket.json").exists()
        return reply | {"status": "not-found", "error": "NoSuchKey" if exists else "NoSuchBucket"}, None
    except OSError as exc:
        return reply | {"status": "error", "error": str(exc)}, None
    try:
        # Header and data come from this one open file, so a new version renamed into place in
        # between can never pair one version's offset with another's bytes.
        live = live_fields(fd, key)  # None: a deleted key's tombstone, or another key's file
        if live is None:
            os.close(fd)
            return reply | {"status": "not-found", "error": "NoSuchKey"}, None
        offset, fields = live
        info = info_from_header(bucket, fields)
    except (CorruptObjectFile, OSError, KeyError, ValueError) as exc:
        os.close(fd)
        return reply | {"status": "error", "error": f"unreadable object file: {exc}"}, None
    reply |= {"status": "ok", "offset": offset, "size": info.size, "etag": info.etag}
    if op == "stat":
        os.close(fd)
        return reply, None
    return reply, fd


class Channel:
    """One worker's socket: the node's end, served from the event loop."""

    def __init__(self, store_root, loop: asyncio.AbstractEventLoop, owner: set | None = None):
        self.store_root = store_root
        self._owner = owner if owner is not None else set()
        self._owner.add(self)
        self.buckets: frozenset[str] = frozenset()  # nothing until a function is known (pre-warmed)
        self.served = 0
        self._loop = loop
        self._sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.setblocking(False)
        self.child_fd: int | None = child.detach()  # handed to the worker with pass_fds, then released
        self.worker_fd = self.child_fd  # its number in the worker, which inherits it unchanged
        loop.add_reader(self._sock.fileno(), self._readable)
        self.closed = False

    def authorise(self, spec: dict) -> None:
        self.buckets = function_buckets(spec)

    def release_child(self) -> None:
        """Close the node's copy of the worker's end, once the worker has inherited it."""
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None

    def close(self) -> None:
        self.release_child()
        if self.closed:
            return
        self.closed = True
        self._owner.discard(self)
        try:
            self._loop.remove_reader(self._sock.fileno())
        except (ValueError, RuntimeError):  # the loop is closed already
            pass
        self._sock.close()

    def _readable(self) -> None:
        for _ in range(64):  # then yield to the loop: one worker must not starve the others
            try:
                request = self._sock.recv(MAX_REQUEST)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            if not request:  # the worker is gone
                self.close()
                return
            reply, fd = answer(self.store_root, self.buckets, request)
            try:
                socket.send_fds(self._sock, [json.dumps(reply).encode()], [fd] if fd is not None else [])
                self.served += 1
            except OSError:  # BlockingIOError included: a worker that does not read its answers
                self.close()
                return
            finally:
                if fd is not None:
                    os.close(fd)


class ObjectFdServer:
    """The node's side for all its workers; None of it exists on a compute node (no store)."""

    def __init__(self, store_root):
        self.store_root = store_root
        self.channels: set[Channel] = set()

    def open_channel(self) -> Channel:
        return Channel(self.store_root, asyncio.get_running_loop(), self.channels)

    def close_channel(self, channel: Channel | None) -> None:
        if channel is not None:
            channel.close()

    def close(self) -> None:
        for channel in list(self.channels):
            channel.close()
