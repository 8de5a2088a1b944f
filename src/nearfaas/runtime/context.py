"""The function-side contract: what a ``handle(event, context)`` receives.

Mirrors OpenFaaS's python3-http template (``event.body``, ``event.headers``, ``event.method``,
``event.query``, ``event.path``) and adds what nearfaas is about: ``context.input`` (the object
reference this call is about) and ``context.objects``, an object client that hands a co-located
object to the handler as a read-only memory map instead of copying it through a socket.
"""

from __future__ import annotations

import http.client
import json
import mmap
import os
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

# Imported with the worker (part of its cold start), not on a call's first read, where it
# would be charged to that call's data-movement time.
from nearfaas.bitar import transfer as bitar_transfer
from nearfaas.link.profiles import EmulatedLink
from nearfaas.telemetry.headers import format_link

INTERMEDIATE_BUCKET = "nearfaas-intermediates"  # spec/options.py's, without importing the spec package into workers
LOCAL_TIMEOUT_S = 10.0  # the node answers from its event loop; past this, read through S3 instead


@dataclass(frozen=True)
class ObjectRef:
    bucket: str
    key: str

    @classmethod
    def parse(cls, value) -> ObjectRef:
        if isinstance(value, ObjectRef):
            return value
        if isinstance(value, dict) and isinstance(value.get("bucket"), str) and isinstance(value.get("key"), str):
            return cls(value["bucket"], value["key"])
        if isinstance(value, str) and "/" in value.removeprefix("s3://"):
            bucket, _, key = value.removeprefix("s3://").partition("/")
            return cls(bucket, key)
        raise ValueError(f"not an object reference: {value!r}; use {{'bucket': ..., 'key': ...}} or 's3://bucket/key'")

    def to_dict(self) -> dict:
        return {"bucket": self.bucket, "key": self.key}


@dataclass
class Event:
    body: bytes
    headers: dict[str, str]
    method: str = "POST"
    query: dict[str, str] = field(default_factory=dict)
    path: str = "/"

    def json(self):
        return json.loads(self.body or b"null")


# The ratios compressed transfers got, per bucket, for the whole worker process (a client is
# made per call): a bucket whose data stopped compressing stops being asked for compressed.
_RATIOS = bitar_transfer.RatioTracker()
_DEVICE_LOCK = threading.Lock()
_DEVICE = None


def _bitar_device():
    """The worker process's one Bitar device (a client is made per call; the device is not),
    made on the first compressed write."""
    global _DEVICE
    with _DEVICE_LOCK:
        if _DEVICE is None:
            from nearfaas.bitar.device import Device

            _DEVICE = Device("isal", threads=1, window_bytes=4 * 1024 * 1024)
        return _DEVICE


@dataclass
class IOStats:
    """Time and bytes spent moving object data, reported back as the data-movement column.

    Shared by a call's handler thread and the worker's S3 endpoint threads (runtime/s3proxy.py),
    so every change goes through ``add``."""

    read_seconds: float = 0.0
    write_seconds: float = 0.0
    bytes_read_local: int = 0
    bytes_read_remote: int = 0
    bytes_written: int = 0  # through the cluster (replicated; crosses the link)
    bytes_written_local: int = 0  # onto this node's own store (a chain intermediate)
    link_seconds: float = 0.0  # of the read/write time, how much the emulated link added
    bytes_read_wire: int = 0  # what the remote reads took on the wire (Bitar-compressed when it paid)
    bytes_written_wire: int = 0  # likewise for writes through the cluster
    # (bucket, key) -> bytes of it this call read: the gateway learns from it where a function
    # that names no inputs should run (gateway/invoker.py).
    objects: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **amounts) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def read_object(self, bucket: str, key: str, nbytes: int) -> None:
        with self._lock:
            self.objects[(bucket, key)] = self.objects.get((bucket, key), 0) + nbytes

    def objects_header(self, limit_chars: int = 2048) -> str:
        """The objects read most, as JSON ``[[bucket, key, bytes], ...]`` kept under ``limit_chars``."""
        with self._lock:
            ranked = sorted(self.objects.items(), key=lambda item: -item[1])
        out: list = []
        for (bucket, key), nbytes in ranked[:16]:
            entry = [bucket, key, nbytes]
            if len(json.dumps(out + [entry])) > limit_chars:
                break
            out.append(entry)
        return json.dumps(out, ensure_ascii=True) if out else ""

    def call_headers(self, exec_seconds: float, link_profile: str, instance: str, wrote_output: str | None) -> dict[str, str]:
        """What a worker reports of one call beside its answer (gateway/invoker.py reads these):
        the Python worker and the image-function host report alike, so placement learns from both."""
        headers = {
            "X-Nearfaas-Exec-Seconds": f"{exec_seconds:.6f}",
            "X-Nearfaas-Data-Seconds": f"{self.read_seconds + self.write_seconds:.6f}",
            "X-Nearfaas-Bytes-Local": str(self.bytes_read_local),
            "X-Nearfaas-Bytes-Remote": str(self.bytes_read_remote + self.bytes_written),
            "X-Nearfaas-Bytes-Written-Local": str(self.bytes_written_local),
            # Bytes that crossed the compute <-> storage link, by direction, and the time it added.
            "X-Nearfaas-Link": format_link(link_profile, self.bytes_read_remote, self.bytes_written, self.link_seconds,
                                           self.bytes_read_wire, self.bytes_written_wire),
            "X-Nearfaas-Instance": instance,
            "X-Nearfaas-Output-Written": wrote_output or "none",
        }
        read = self.objects_header()
        if read:  # what the call read, for placing a function whose calls name no inputs (gateway/invoker.py)
            headers["X-Nearfaas-Read"] = read
        return headers


class LocalObjects:
    """The worker's end of the object socket (node/objectfds.py has the protocol): asks the
    node for an object of this node's store and receives the open object file as an fd.

    The worker cannot see the store itself (node/jail.py); this is how a local read stays a
    zero-copy mmap. Handler threads share one socket, so a request and its answer are one step
    under a lock; answers carry the request's id, so a late answer to a request that timed out
    is recognised and dropped.
    """

    def __init__(self, fd: int):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd)
        self._sock.settimeout(LOCAL_TIMEOUT_S)
        self._lock = threading.Lock()
        self._next = 0
        self.broken = False  # the node closed its end: every read goes through S3 from then on

    def ask(self, op: str, bucket: str, key: str, run: tuple[str, str] | None = None) -> tuple[dict, int | None] | None:
        """The node's answer and the fd it sent (the caller owns it), or None when the node
        could not be asked (gone, or too slow)."""
        with self._lock:
            if self.broken:
                return None
            self._next += 1
            rid = self._next
            try:
                message = {"id": rid, "op": op, "bucket": bucket, "key": key}
                if run is not None:  # this socket is the node's and ours alone: the secret itself is the proof
                    message |= {"run": run[0], "proof": run[1]}
                self._sock.send(json.dumps(message).encode())
                while True:
                    data, fds, flags, _ = socket.recv_fds(self._sock, 65536, 1)
                    if not data:
                        self.broken = True
                        return None
                    reply = json.loads(data)
                    fd = fds[0] if fds else None
                    if reply.get("id") == rid and not flags & socket.MSG_CTRUNC:
                        return reply, fd
                    if fd is not None:  # an answer to an earlier request that timed out
                        os.close(fd)
                    for extra in fds[1:]:
                        os.close(extra)
            except TimeoutError:
                return None
            except (OSError, ValueError):
                self.broken = True
                return None

    def open(self, bucket: str, key: str, run: tuple[str, str] | None = None) -> tuple[int, int, int] | None:
        """(fd, data offset, size) of a local object this function may read, else None. ``run``:
        the chain call's key (access, secret), which the node wants for an intermediate."""
        got = self.ask("open", bucket, key, run)
        if got is None:
            return None
        reply, fd = got
        if reply.get("status") != "ok" or fd is None:
            if fd is not None:
                os.close(fd)
            return None
        return fd, int(reply["offset"]), int(reply["size"])

    def exists(self, bucket: str, key: str, run: tuple[str, str] | None = None) -> bool:
        got = self.ask("stat", bucket, key, run)
        return got is not None and got[0].get("status") == "ok"


class ObjectClient:
    """Reads and writes objects for a handler.

    A read of an object that this node stores (and the function may read) is a read-only
    ``mmap`` of the object's file, handed over by the node as an fd (no copy through any
    socket); any other read goes through the cluster's S3 endpoint. The worker's S3 endpoint
    (runtime/s3proxy.py) sends plain S3 clients' requests through ``exchange``, so their bytes
    cross the same link and land in the same stats. Safe to use from several threads.
    """

    def __init__(self, gateway: str, local: LocalObjects | None, stats: IOStats | None = None, auth_headers=None,
                 link: EmulatedLink | None = None, node_url: str | None = None, output: ObjectRef | None = None,
                 output_local: bool = False, caller: str = "", run_key: str | None = None):
        self._endpoints = {"cluster": urllib.parse.urlsplit(gateway)}
        if node_url and local is not None:  # a storage node serves S3 itself: a write to it stays on this node
            self._endpoints["node"] = urllib.parse.urlsplit(node_url)
        self._local = local
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}  # keep-alive connections not in use
        self._idle_lock = threading.Lock()
        self.stats = stats or IOStats()
        self._auth_headers = auth_headers  # callable(method, url, body) -> headers, when keys are set
        # Every remote read or write crosses the compute <-> storage link; a local mmap never does.
        self._link = link if link is not None and link.active else None
        # A chain intermediate is written onto this node (when it stores objects), not replicated
        # across the cluster: the next stage is placed here and reads it back through mmap.
        self._output = output
        self._local_output = output if output_local and "node" in self._endpoints else None
        self.caller = caller
        # The chain call's own key ("ACCESS:SECRET" from the gateway, auth/function_keys.py): the
        # only key that reaches the intermediates; every other bucket takes the function's key.
        access, _, secret = (run_key or "").partition(":")
        self.run: tuple[str, str] | None = (access, secret) if access and secret else None
        self._run_headers = sigv4_signer(access, secret, os.environ.get("NEARFAAS_REGION", "us-east-1")) if self.run else None
        self.wrote_output: str | None = None  # "local" or "cluster" once the call's output ref is written

    @property
    def local(self) -> LocalObjects | None:
        return self._local

    # -- reads ---------------------------------------------------------------------------------
    def get(self, ref, key: str | None = None) -> memoryview | bytes:
        """The object's bytes: a memoryview over an mmap when local, else bytes fetched via S3."""
        ref = ObjectRef(ref, key) if key is not None else ObjectRef.parse(ref)
        started = time.perf_counter()
        try:
            local = self._map_local(ref)
            if local is not None:
                self.stats.add(bytes_read_local=len(local))
                self.stats.read_object(ref.bucket, ref.key, len(local))
                return local
            data = self._request("GET", ref, None)
            self.stats.add(bytes_read_remote=len(data))
            self.stats.read_object(ref.bucket, ref.key, len(data))
            return data
        finally:
            self.stats.add(read_seconds=time.perf_counter() - started)

    def list(self, bucket: str, prefix: str = "") -> list[dict]:
        """Every object under ``prefix`` in ``bucket``, as ``{"key", "size", "etag", "last_modified"}``
        in key order (S3 ListObjectsV2, page by page). The listing crosses the link like a read."""
        from nearfaas.s3.xml import encode_token, iso8601, parse_list_objects

        out, token = [], None
        started = time.perf_counter()
        try:
            while True:
                query = [("list-type", "2"), ("prefix", prefix)] + ([("continuation-token", token)] if token else [])
                target = "/" + urllib.parse.quote(bucket) + "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
                status, _, payload = self.exchange("GET", target, None, {}, bucket=bucket)
                if status >= 300:
                    raise ObjectError(status, ObjectRef(bucket, prefix), payload)
                self.stats.add(bytes_read_remote=len(payload))
                page = parse_list_objects(bucket, payload)
                out += [{"key": o.key, "size": o.size, "etag": o.etag, "last_modified": iso8601(o.last_modified)}
                        for o in page.contents]
                if not page.is_truncated or page.next_marker is None:
                    return out
                token = encode_token(page.next_marker)
        finally:
            self.stats.add(read_seconds=time.perf_counter() - started)

    def is_local(self, ref) -> bool:
        ref = ObjectRef.parse(ref)
        return self._local is not None and self._local.exists(ref.bucket, ref.key, self.run)

    def _map_local(self, ref: ObjectRef):
        if self._local is None:
            return None
        found = self._local.open(ref.bucket, ref.key, self.run)
        if found is None:  # not here, or not this function's to read locally: S3 decides
            return None
        fd, offset, size = found
        try:
            if size == 0:
                return memoryview(b"")
            # The object file is replaced by rename, never rewritten in place, so this mapping
            # stays valid (and consistent) even if a new version lands while we read.
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return memoryview(mapped)[offset : offset + size]

    # -- writes --------------------------------------------------------------------------------
    def put(self, ref, data: bytes | bytearray | memoryview, key: str | None = None, content_type: str = "application/octet-stream") -> dict:
        ref = ObjectRef(ref, key) if key is not None else ObjectRef.parse(ref)
        where = self.write_target(ref)
        started = time.perf_counter()
        try:
            headers = {"Content-Type": content_type, "X-Nearfaas-Caller": self.caller}
            self._request("PUT", ref, bytes(data), headers, where)
            self.wrote(ref, where, len(data))
            return ref.to_dict()
        finally:
            self.stats.add(write_seconds=time.perf_counter() - started)

    def write_target(self, ref: ObjectRef) -> str:
        """"node" for the call's chain intermediate (it stays on this node), else "cluster"."""
        return "node" if ref == self._local_output else "cluster"

    def wrote(self, ref: ObjectRef, where: str, nbytes: int) -> None:
        if where == "node":
            self.stats.add(bytes_written_local=nbytes)
        else:
            self.stats.add(bytes_written=nbytes)
        if ref == self._output:
            self.wrote_output = "local" if where == "node" else "cluster"

    # -- the wire --------------------------------------------------------------------------------
    def _request(self, method: str, ref: ObjectRef, body: bytes | None, headers: dict | None = None, where: str = "cluster") -> bytes:
        path = "/" + urllib.parse.quote(ref.bucket) + "/" + urllib.parse.quote(ref.key, safe="/~")
        status, _, payload = self.exchange(method, path, body, headers or {}, where=where, bucket=ref.bucket, whole_object=True)
        if status >= 300:
            raise ObjectError(status, ref, payload)
        return payload

    def exchange(self, method: str, target: str, body: bytes | None, headers: dict, *, where: str = "cluster",
                 bucket: str = "", whole_object: bool = False) -> tuple[int, list[tuple[str, str]], bytes]:
        """One S3 request (``target`` = raw path and query), as it crosses the link: waits the
        link's first-byte latency and its bandwidth for the bytes both ways, compresses a whole
        object's body when that pays (bitar/transfer.py), signs with the function's key, and
        counts wire bytes and link seconds. Returns (status, headers, body decoded)."""
        endpoint = self._endpoints[where]
        headers = dict(headers)
        link = self._link if where == "cluster" else None  # this node's own store is no link away
        if (whole_object and method == "PUT" and link is not None and body and len(body) >= bitar_transfer.MIN_BYTES
                and bitar_transfer.pays(link.profile.bandwidth_bytes_per_s, _RATIOS.ratio(bucket))):
            raw = len(body)  # a write over a slow link goes compressed (bitar/transfer.py)
            body = bitar_transfer.gzip_members(_bitar_device().compress(body))
            _RATIOS.saw(bucket, raw, len(body))
            headers.update({"Content-Encoding": "gzip", bitar_transfer.OPT_IN_HEADER: bitar_transfer.OPT_IN_VALUE})
        if body and where == "cluster":
            self.stats.add(bytes_written_wire=len(body))
        if link is not None:
            self.stats.add(link_seconds=link.first_byte() + (link.transfer(len(body)) if body else 0.0))
        if (whole_object and method == "GET" and link is not None
                and bitar_transfer.pays(link.profile.bandwidth_bytes_per_s, _RATIOS.ratio(bucket))):
            # Ask for the object compressed (bitar/transfer.py): only over a link slow enough to pay
            headers.update({"Accept-Encoding": "gzip", bitar_transfer.OPT_IN_HEADER: bitar_transfer.OPT_IN_VALUE})
        sign = self._auth_headers
        if self._run_headers is not None and _bucket_of(target) == INTERMEDIATE_BUCKET:
            sign = self._run_headers  # the chain call's key: the gateway and this node's S3 port check it
        if sign:  # else the function's own key, checked by the gateway
            url = f"{endpoint.scheme}://{endpoint.netloc}{target}"
            if whole_object:  # what context.objects always signed: the content coding, nothing the gateway rewrites
                signed = {k: v for k, v in headers.items() if k in ("Content-Encoding", bitar_transfer.OPT_IN_HEADER)}
            else:  # a plain S3 client's request: every S3 header it sent (x-amz-*, Range, metadata) is signed again
                signed = {k: v for k, v in headers.items() if k.lower() != "accept-encoding" and (
                    not k.lower().startswith("x-nearfaas-") or k == bitar_transfer.OPT_IN_HEADER)}
            headers.update(sign(method, url, body or b"", signed) if signed else sign(method, url, body or b""))
        for attempt in (1, 2):  # one retry: a keep-alive connection may have been closed by the server
            conn = self._take(where, endpoint)
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                if attempt == 2:
                    raise
                continue
            self._give_back(where, conn)
            reply_headers = resp.getheaders()
            if link is not None and payload:
                self.stats.add(link_seconds=link.transfer(len(payload)))  # the wire bytes cross the link
            if method == "GET" and resp.status < 300:
                wire = len(payload)
                if bitar_transfer.OPT_IN_HEADER in headers and (resp.getheader("Content-Encoding") or "").lower() == "gzip":
                    try:
                        payload = bitar_transfer.gunzip(payload)
                    except (OSError, EOFError, ValueError) as e:  # gzip.BadGzipFile, zlib.error
                        return 502, [], (f"compressed answer did not decode: {e} ({wire} bytes, Content-Encoding "
                                         f"{resp.getheader('Content-Encoding')!r}, starting {payload[:16]!r})").encode()
                    _RATIOS.saw(bucket, len(payload), wire)
                    reply_headers = [(k, v) for k, v in reply_headers if k.lower() not in ("content-encoding", "content-length", "vary")]
                self.stats.add(bytes_read_wire=wire)
            return resp.status, reply_headers, payload
        raise AssertionError("unreachable")

    def _take(self, where: str, endpoint) -> http.client.HTTPConnection:
        with self._idle_lock:
            idle = self._idle.get(where)
            if idle:
                return idle.pop()
        return http.client.HTTPConnection(endpoint.hostname, endpoint.port, timeout=60)

    def _give_back(self, where: str, conn: http.client.HTTPConnection) -> None:
        with self._idle_lock:
            self._idle.setdefault(where, []).append(conn)


def _bucket_of(target: str) -> str:
    """The bucket of a path-style request target (``/bucket/key?query``)."""
    return urllib.parse.unquote(target.partition("?")[0].lstrip("/").partition("/")[0])


def sigv4_signer(access_key: str, secret_key: str, region: str = "us-east-1"):
    """Headers that sign a request with SigV4 (botocore's signer), for a cluster with keys."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    signer = S3SigV4Auth(Credentials(access_key, secret_key), "s3", region)

    def sign(method: str, url: str, body: bytes, headers: dict | None = None) -> dict:
        """Sign ``headers`` too (botocore signs every header it is given)."""
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        signer.add_auth(request)
        return dict(request.headers)

    return sign


def signer_from_environment():
    """The signer for the function's own S3 credentials (scoped to it by the gateway), which the
    node puts into its workers' environment as NEARFAAS_ACCESS_KEY / NEARFAAS_SECRET_KEY; None
    when the spec carries none (local mode)."""
    access, secret = os.environ.get("NEARFAAS_ACCESS_KEY"), os.environ.get("NEARFAAS_SECRET_KEY")
    if not access or secret is None:
        return None
    return sigv4_signer(access, secret, os.environ.get("NEARFAAS_REGION", "us-east-1"))


class ObjectError(Exception):
    def __init__(self, status: int, ref: ObjectRef, body: bytes):
        import re

        code = re.search(rb"<Code>(.*?)</Code>", body or b"")
        self.status = status
        self.code = code.group(1).decode() if code else str(status)
        detail = "" if code else f": {(body or b'')[:300].decode('utf-8', 'replace')}"  # not S3 XML: say what came
        super().__init__(f"{self.code} for s3://{ref.bucket}/{ref.key} (HTTP {status}){detail}")


class Secrets:
    """Secrets mounted as files, one per name, like /var/openfaas/secrets/<name>."""

    def __init__(self, directory: str | None):
        self.directory = Path(directory) if directory else None

    def __getitem__(self, name: str) -> str:
        if self.directory is None or not (self.directory / name).is_file():
            raise KeyError(f"secret {name!r} is not mounted for this function; list it under 'secrets:' in stack.yml")
        return (self.directory / name).read_text()

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default


@dataclass
class Context:
    function: str
    node: str
    call_id: str
    input: ObjectRef | None
    objects: ObjectClient
    secrets: Secrets
    # In a chain, where this stage's output goes: write it with objects.put(context.output, data)
    # and the next stage receives it as its input. None outside chains.
    output: ObjectRef | None = None
    environment: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    # lang python3-lambda: the (event, LambdaContext) the call's handler gets (runtime/lambda_style.py)
    lambda_call: tuple | None = field(default=None, repr=False)
    # With x-nearfaas.volume: this function's own folder on the node's disk, kept across calls
    # and instances on that node (node/pool.py); None without one.
    volume: str | None = field(default_factory=lambda: os.environ.get("NEARFAAS_VOLUME"))
