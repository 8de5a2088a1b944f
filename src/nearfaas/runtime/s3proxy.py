"""The worker's own S3 endpoint: S3 code written for other platforms gets the near-data win.

Existing functions read and write their objects with boto3 (or any AWS SDK), not with
``context.objects``. Every worker therefore starts this small S3 endpoint on loopback and points
the SDKs at it through the environment (``AWS_ENDPOINT_URL``, a key pair, a region): the
handler's unmodified ``boto3.client("s3")`` talks to it. It lives in the worker process, on
threads of its own, so it knows which call a request belongs to, and it answers each request
down a short ladder:

1. **Authenticate.** The endpoint is on loopback, where other functions run too: a request must
   be SigV4-signed with this instance's key (the function's own key when the cluster has keys,
   else a random one made at start-up), or it gets 403. A signed payload must match its hash.
2. **Local replica.** GetObject (whole or one byte range) and HeadObject of an object that this
   node stores, and that the function may read, are answered from the object file the node
   hands over (node/objectfds.py): the bytes go from the page cache to the socket with
   ``sendfile``, never over the emulated link.
3. **Everything else** (a remote object, a PUT, a listing, multipart, a conditional GET) is
   forwarded to the cluster's S3 endpoint through the call's ``ObjectClient.exchange``: it
   crosses the emulated link, goes compressed where that pays, and is signed again with the
   function's own key, exactly as ``context.objects`` does.

Every byte lands in the stats of the call that sent the request, so ``X-Nearfaas-Timing``'s data
column, the link header and placement learning see boto3 code as they see ``context.objects``.

Worked example: ``thumbnail`` runs on storage-0, which holds ``s3://photos/cat.jpg``. The
handler calls ``s3.get_object(Bucket="photos", Key="cat.jpg")``; botocore signs the request for
``http://127.0.0.1:<port>`` and tags it with the call's id (``install_botocore_hook``). Rung 1
passes, rung 2 finds the local file and sendfiles 1.2 MB: the call's ``bytes_read_local`` grows
by 1.2 MB and its link bytes stay 0. Its ``put_object`` of the thumbnail takes rung 3 and
crosses the link. On a compute node, the GET takes rung 3 too, so compute-only pays the link.

Known caveats:
- A request is charged to the call whose id botocore tagged it with (the worker sets it for the
  handler's thread, task or pool thread). A request without the tag (another SDK, a subprocess)
  is charged to the only call in flight, and to no call when several are in flight.
- Chunk-signed uploads (``STREAMING-AWS4-HMAC-SHA256-PAYLOAD``, some non-Python SDKs over plain
  HTTP) are refused with 501 naming the fix; boto3 signs whole payloads over HTTP.
- Presigned URLs made inside a function point at this loopback endpoint: only the function can
  use them.

**Connections are budgeted by who proved what** (issue 39's "64 idle connections"): at most
``MAX_CONNECTIONS`` at once, a thread each. A connection that has not yet sent a request signed
with this instance's key is a stranger's: it must send one within ``STRANGER_TIMEOUT_S`` and,
when the endpoint is full, the oldest stranger is hung up on to make room for a newcomer. Only
connections that proved the key are kept ``IDLE_TIMEOUT_S`` between requests and are never
evicted. Worked example: another function opens 64 idle connections to this endpoint; the
handler's boto3 connects, the oldest of the 64 is closed for it, and the other 63 are closed
5 s later. Caveat: a stranger who connects faster than the function's own connection sends its
first request (microseconds on loopback) could push that connection out; botocore retries.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import secrets
import select
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nearfaas.node.objectfile import CorruptObjectFile, info_from_header, read_header
from nearfaas.runtime.context import ObjectClient, ObjectRef
from nearfaas.s3.errors import S3Error
from nearfaas.s3.object_headers import object_headers
from nearfaas.s3.sigv4 import S3Auth
from nearfaas.s3.validation import parse_range_header, resolve_range

CALL_HEADER = "x-nearfaas-call"
# The call the running handler code serves: set by the worker around each call, read by botocore's hook.
current_call: contextvars.ContextVar[str | None] = contextvars.ContextVar("nearfaas_call", default=None)
# Never passed on to the cluster: the client's signature (we sign again) and hop-by-hop framing.
_NOT_FORWARDED = {"authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token", "host", "content-length",
                  "connection", "keep-alive", "expect", "transfer-encoding", "te", "upgrade", "accept-encoding",
                  "amz-sdk-invocation-id", "amz-sdk-request"}
_NOT_RETURNED = {"content-length", "transfer-encoding", "connection", "keep-alive", "server", "date"}
MAX_CONNECTIONS = 64  # per worker: a thread each; more are closed at once (pids are limited by the jail)
IDLE_TIMEOUT_S = 60.0  # a connection that proved the key and then sends nothing for this long is closed
STRANGER_TIMEOUT_S = 5.0  # a connection must send a signed request within this, or it is closed


class Calls:
    """The calls in flight in this worker, by id, each with the client its requests go through."""

    def __init__(self, unattributed: ObjectClient):
        self._calls: dict[str, ObjectClient] = {}
        self._lock = threading.Lock()
        self.unattributed = unattributed  # charged when a request names no call and several are in flight

    def begin(self, call_id: str, client: ObjectClient) -> None:
        with self._lock:
            self._calls[call_id] = client

    def end(self, call_id: str) -> None:
        with self._lock:
            self._calls.pop(call_id, None)

    def client_for(self, call_id: str | None) -> ObjectClient:
        with self._lock:
            if call_id and call_id in self._calls:
                return self._calls[call_id]
            if len(self._calls) == 1:
                return next(iter(self._calls.values()))
        return self.unattributed


def install_botocore_hook(endpoint_url: str) -> bool:
    """Tag every botocore request to this endpoint with the current call's id, before it is
    signed. Registered as a built-in handler, so every session made from now on has it."""
    try:
        import botocore.handlers
    except ImportError:  # no botocore in this runtime: untagged requests fall back (see Calls)
        return False

    def tag(request, **_):
        call = current_call.get()
        if call and request.url.startswith(endpoint_url):
            request.headers[CALL_HEADER] = call

    botocore.handlers.BUILTIN_HANDLERS.append(("before-sign.s3", tag))
    return True


class _Headers:
    """http.server's headers as the S3Auth lookup protocol."""

    def __init__(self, message):
        self._m = message

    def get(self, name: str, default=None):
        return self._m.get(name, default)

    def getall(self, name: str, default=None):
        return self._m.get_all(name) or (default if default is not None else [])


class S3Endpoint:
    """The loopback S3 endpoint of one worker; ``environment()`` is what the SDKs need to use it."""

    def __init__(self, calls: Calls, access_key: str | None = None, secret_key: str | None = None, region: str = "us-east-1",
                 listener: socket.socket | None = None):
        """``listener``: a bound, listening socket to serve on instead of a new one on loopback
        (the image-function host passes one it opened inside the container's network namespace)."""
        self.calls = calls
        self.access_key = access_key or "nfw-" + secrets.token_hex(8)
        self.secret_key = secret_key if access_key and secret_key is not None else secrets.token_urlsafe(30)
        self.region = region
        self.auth = S3Auth({self.access_key: self.secret_key}, max_skew_s=900.0)
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        if listener is None:
            self.server = _BoundedServer(("127.0.0.1", 0), Handler)
        else:
            self.server = _BoundedServer(listener.getsockname(), Handler, False)
            self.server.socket.close()
            self.server.socket = listener
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="s3-endpoint", daemon=True).start()

    def environment(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ENDPOINT_URL_S3": self.url, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_EC2_METADATA_DISABLED": "true", "NEARFAAS_S3_ENDPOINT": self.url}


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS: whoever else on loopback opens
    connections by the thousand cannot make this worker spend its threads on them, nor hold the
    slots its own function needs (a stranger's connection gives way; see the module doc)."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS  # a burst of connects waits in the backlog, not in SYN retries

    def __init__(self, *args):
        super().__init__(*args)
        self._lock = threading.Lock()
        self._open: dict[socket.socket, bool] = {}  # connection -> proved the key; oldest first
        self.evicted = 0

    def process_request(self, request, client_address):
        with self._lock:
            if len(self._open) >= MAX_CONNECTIONS:
                stranger = next((conn for conn, proved in self._open.items() if not proved), None)
                if stranger is None:  # every slot is the function's own: its own concurrency limit
                    self.shutdown_request(request)
                    return
                del self._open[stranger]
                self.evicted += 1
                try:  # wakes its thread's read with EOF; the thread closes it (never closed from here)
                    stranger.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._open[request] = False
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request) -> None:
        with self._lock:
            self._open.pop(request, None)

    def proved(self, request) -> bool:
        """Mark a connection as the function's own; False when it was already evicted."""
        with self._lock:
            if request not in self._open:
                return False
            self._open[request] = True
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and Expect: 100-continue as botocore sends it
    timeout = STRANGER_TIMEOUT_S  # until a request proves the key (then IDLE_TIMEOUT_S)
    owner: S3Endpoint
    proved = False

    def log_message(self, *args) -> None:  # the function's log is for the function
        pass

    def do_GET(self):
        self._serve("GET")

    def do_HEAD(self):
        self._serve("HEAD")

    def do_PUT(self):
        self._serve("PUT")

    def do_POST(self):
        self._serve("POST")

    def do_DELETE(self):
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        started = time.perf_counter()
        raw_path, _, raw_query = self.path.partition("?")
        query = urllib.parse.parse_qsl(raw_query, keep_blank_values=True)
        try:
            # Who is asking comes first: a stranger's body is never read (it could be any size).
            auth = self.owner.auth.authenticate(method, raw_path, query, _Headers(self.headers))
        except S3Error as exc:
            self.close_connection = True
            return self._error(exc)
        if not self.proved:
            self.proved = self.server.proved(self.request)
            self.connection.settimeout(IDLE_TIMEOUT_S)
        try:
            body = self._body()
            _check_payload(auth.payload_hash, body)
        except S3Error as exc:
            return self._error(exc)
        bucket, _, key = urllib.parse.unquote(raw_path).lstrip("/").partition("/")
        client = self.owner.calls.client_for(self.headers.get(CALL_HEADER))
        reading = method in ("GET", "HEAD")
        try:
            if (reading and key and client.local is not None and _local_candidate(query, self.headers)
                    and self._serve_local(method, client, bucket, key)):
                return
            self._forward(method, client, bucket, key, bool(raw_query), body)
        finally:
            client.stats.add(**{"read_seconds" if reading else "write_seconds": time.perf_counter() - started})

    def _body(self) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            raise S3Error("MissingContentLength", "Send a Content-Length; chunked transfer encoding is not accepted here.",
                          status=411)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise S3Error("InvalidArgument", "Content-Length is not a number.") from None
        return self.rfile.read(length) if length > 0 else b""

    def _serve_local(self, method: str, client: ObjectClient, bucket: str, key: str) -> bool:
        """Answer from this node's object file; False when it is not here (or not ours to read)."""
        found = client.local.open(bucket, key, client.run)
        if found is None:
            return False
        fd, offset, size = found
        try:
            try:
                _, fields = read_header(fd)
                info = info_from_header(bucket, fields)
            except (CorruptObjectFile, OSError, KeyError, ValueError):
                return False  # the cluster's copy answers instead
            first, last = 0, size - 1
            status, headers = 200, object_headers(info)
            wanted = self.headers.get("Range")
            if wanted:
                span = _single_range(wanted, size)
                if span is None:
                    return False  # a range only the full S3 implementation answers (or refuses) correctly
                first, last = span
                status = 206
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
            count = max(0, last - first + 1)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(count))
            self.end_headers()
            if method == "GET" and count:
                sent, out = 0, self.connection.fileno()
                while sent < count:
                    try:
                        n = os.sendfile(out, fd, offset + first + sent, count - sent)
                    except BlockingIOError:  # the socket has a timeout, so it is non-blocking: wait until it drains
                        if not select.select([], [out], [], IDLE_TIMEOUT_S)[1]:
                            raise TimeoutError("the client stopped reading") from None
                        continue
                    if n == 0:
                        break
                    sent += n
                client.stats.add(bytes_read_local=sent)
                client.stats.read_object(bucket, key, sent)
            return True
        finally:
            os.close(fd)

    def _forward(self, method: str, client: ObjectClient, bucket: str, key: str, has_query: bool, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED and k.lower() != CALL_HEADER
                   and not k.lower().startswith("x-nearfaas-")}
        ref = ObjectRef(bucket, key) if key else None
        plain_object = ref is not None and not has_query
        where = client.write_target(ref) if plain_object and method == "PUT" else "cluster"
        if plain_object and method == "PUT":
            headers["X-Nearfaas-Caller"] = client.caller  # its own writes never trigger the function again
        whole = plain_object and ((method == "GET" and "range" not in {k.lower() for k in headers})
                                  or (method == "PUT" and not any(k.lower() == "content-encoding" for k in headers)))
        try:
            status, reply, payload = client.exchange(method, self.path, body or None, headers, where=where, bucket=bucket,
                                                     whole_object=whole)
        except (OSError, ConnectionError) as exc:
            return self._error(S3Error("ServiceUnavailable", f"the cluster's S3 endpoint could not be reached from this "
                                                             f"worker ({exc}); retry", status=503))
        if status < 300:
            if method == "GET":
                client.stats.add(bytes_read_remote=len(payload))
                if key:
                    client.stats.read_object(bucket, key, len(payload))
            if body and method in ("PUT", "POST"):
                if plain_object and method == "PUT":
                    client.wrote(ref, where, len(body))
                else:
                    client.stats.add(bytes_written=len(body))
        self.send_response(status)
        length = None
        for name, value in reply:
            if name.lower() == "content-length":
                length = value
            elif name.lower() not in _NOT_RETURNED:
                self.send_header(name, value)
        self.send_header("Content-Length", length if method == "HEAD" and length is not None else str(len(payload)))
        self.end_headers()
        if method != "HEAD" and payload:
            self.wfile.write(payload)

    def _error(self, exc: S3Error) -> None:
        payload = b"" if self.command == "HEAD" else exc.to_xml()
        self.send_response(exc.status)
        for name, value in exc.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _check_payload(payload_hash: str | None, body: bytes) -> None:
    if not payload_hash or payload_hash.startswith("UNSIGNED-PAYLOAD"):
        return
    if payload_hash.startswith("STREAMING-"):
        raise S3Error("NotImplemented", "Chunk-signed uploads are not accepted by the worker's S3 endpoint; configure "
                      "your SDK to sign whole payloads (boto3 does over http) or send UNSIGNED-PAYLOAD.", status=501)
    if hashlib.sha256(body).hexdigest() != payload_hash.lower():
        raise S3Error("XAmzContentSHA256Mismatch", "The body does not match its signed x-amz-content-sha256.")


def _local_candidate(query, headers) -> bool:
    """A GET/HEAD the local file answers exactly as S3 would: no sub-resource, version, part
    or condition (those go to the cluster, which implements them)."""
    if any(name not in ("x-id",) for name, _ in query):
        return False
    return not any(name.lower().startswith("if-") for name in headers)


def _single_range(value: str, size: int) -> tuple[int, int] | None:
    """The bytes one valid range selects, or None for what only the cluster's S3 answers exactly
    (a range it would ignore, or refuse with 416): those are forwarded."""
    parsed = parse_range_header(value)
    if parsed is None:
        return None
    try:
        return resolve_range(parsed, size)
    except S3Error:
        return None
