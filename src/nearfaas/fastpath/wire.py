"""The fast path's wire format (docs/fastpath.md), in one place: status codes, frame layouts, and
packing and unpacking. The executor's copy is fastpath/src/wire.rs; every Python module speaking
to it (the clients, the baselines, the gateway's relay and miss path) takes the format from here.

* UDP request: ``lambda_id: u64 BE`` + payload. Reply: ``lambda_id: u64 BE``, ``status: u8``, payload.
* TCP: each request or reply framed as ``length: u32 BE`` + the UDP-format message.
* Unix datagram + memfd (SCM_RIGHTS): request ``lambda_id: u64 BE``, ``input length: u32 BE``;
  reply ``lambda_id: u64 BE``, ``status: u8``, ``reply length: u32 BE`` (the reply is in the memfd).
* Misses, executor -> gateway host port: ``token: u32 BE``, ``lambda_id: u64 BE``, payload; the
  answer: ``token: u32 BE``, ``status: u8``, payload.
* Stream functions (``--stream``), one TCP connection per request, little-endian: header
  ``stream_id: u64 LE``, ``payload_len: u64 LE`` (``STREAM_UNTIL_EOF``: until the client
  half-closes; ``STREAM_KEEP_ALIVE`` or-ed into a declared length keeps the connection), the payload; reply ``status: u8``, ``count: u32 LE``, count elements (u32/f32 LE;
  ``frequent``: count pairs ``value: u32 LE``, ``count: u32 LE``), then the executor closes.
  The client is ``nearfaas.fastpath.stream``.

Lambda IDs are 64-bit values the gateway draws with ``secrets.randbits(64)`` (never 0): an ID is
not a credential, but a small sequential one could be found by a sweep (issue 39).
"""

from __future__ import annotations

import struct

# -- status codes (the byte after the lambda ID in a reply) -------------------------------------------
OK = 0  # the lambda ran and answered
HOST_OK = 1  # the host (the gateway's miss path) ran the function and answered
UNKNOWN = 2  # no lambda has this ID (and no host took the miss)
TRAP = 3  # the lambda trapped
TIMEOUT = 4  # the lambda ran past its timeout or fuel budget
TOO_LARGE = 5  # the request or reply does not fit the lambda's buffer (or a datagram)
OVERLOADED = 6  # the lambda's queue is full
HOST_ERROR = 7  # the host failed, or did not answer in time
EXTERNAL_ERROR = 8  # the lambda's external call (memcached) failed
BAD_REQUEST = 9  # the lambda refused the input
UNAUTHORIZED = 10  # the function requires credentials the fast path does not carry (gateway HTTP: 401)

STATUS = {
    OK: "OK", HOST_OK: "HOST_OK", UNKNOWN: "UNKNOWN", TRAP: "TRAP", TIMEOUT: "TIMEOUT", TOO_LARGE: "TOO_LARGE",
    OVERLOADED: "OVERLOADED", HOST_ERROR: "HOST_ERROR", EXTERNAL_ERROR: "EXTERNAL_ERROR", BAD_REQUEST: "BAD_REQUEST",
    UNAUTHORIZED: "UNAUTHORIZED",
}
STATUS_CODES = {name: code for code, name in STATUS.items()}

# -- limits ---------------------------------------------------------------------------------------
MAX_DATAGRAM = 65_507  # largest UDP payload
MAX_ID = 0xFFFF_FFFF_FFFF_FFFF  # IDs are u64 (the executor's match table is a hash map)

# -- frame layouts ----------------------------------------------------------------------------------
REQUEST_HEAD = struct.Struct(">Q")  # lambda_id
REPLY_HEAD = struct.Struct(">QB")  # lambda_id, status
FRAME_HEAD = struct.Struct(">I")  # TCP: the length of the message that follows
MEMFD_REQUEST = struct.Struct(">QI")  # lambda_id, input length
MEMFD_REPLY = struct.Struct(">QBI")  # lambda_id, status, reply length
MISS_HEAD = struct.Struct(">IQ")  # token, lambda_id (executor -> host)
HOST_REPLY_HEAD = struct.Struct(">IB")  # token, status (host -> executor)

# -- stream functions (docs/fastpath.md, "Stream functions"): little-endian, unlike the above ---------
STREAM_HEAD = struct.Struct("<QQ")  # stream_id, payload_len
STREAM_UNTIL_EOF = 0xFFFF_FFFF_FFFF_FFFF  # payload_len: until the client half-closes its side
STREAM_KEEP_ALIVE = 1 << 63  # or-ed into a declared payload_len: keep the connection open after the reply
STREAM_REPLY_HEAD = struct.Struct("<BI")  # status, count
STREAM_ELEM_SIZE = 4  # one u32 or f32 element, little-endian
STREAM_PAIR = struct.Struct("<II")  # one `frequent` entry: value, estimated count
STREAM_ELEM_FORMATS = {"u32": "<I", "f32": "<f"}  # struct format of one element per dtype
STREAM_IDLE_MS = 2000  # the executor's default --stream-idle-ms (TIMEOUT after this long silent)


def status_name(code: int) -> str:
    return STATUS.get(code, f"STATUS_{code}")


def encode_request(lambda_id: int, payload: bytes = b"") -> bytes:
    """A request: the lambda ID as u64 big-endian, then the payload."""
    if not isinstance(lambda_id, int) or not 0 <= lambda_id <= MAX_ID:
        raise ValueError(f"lambda id must be an integer in 0..2**64-1, got {lambda_id!r}")
    return REQUEST_HEAD.pack(lambda_id) + bytes(payload)


def decode_request(datagram: bytes) -> tuple[int, bytes]:
    """(lambda_id, payload) of a request; ValueError when it is shorter than an ID."""
    if len(datagram) < REQUEST_HEAD.size:
        raise ValueError(f"request datagram of {len(datagram)} bytes is shorter than the 8-byte lambda id")
    return REQUEST_HEAD.unpack_from(datagram)[0], bytes(datagram[REQUEST_HEAD.size:])


def encode_reply(lambda_id: int, status: int, payload: bytes = b"") -> bytes:
    if not 0 <= status <= 255:
        raise ValueError(f"status must fit a u8, got {status}")
    return REPLY_HEAD.pack(lambda_id, status) + bytes(payload)


def decode_reply(datagram: bytes) -> tuple[int, int, bytes]:
    """(lambda_id, status, payload) of a reply; ValueError when it is shorter than 9 bytes."""
    if len(datagram) < REPLY_HEAD.size:
        raise ValueError(f"reply of {len(datagram)} bytes is shorter than the 9-byte header (lambda id u64 BE + status u8)")
    lambda_id, status = REPLY_HEAD.unpack_from(datagram)
    return lambda_id, status, bytes(datagram[REPLY_HEAD.size:])


def frame(message: bytes) -> bytes:
    """TCP framing: length u32 BE, then the message (a request or a reply)."""
    return FRAME_HEAD.pack(len(message)) + message


def frame_length(head: bytes) -> int:
    """The message length a TCP frame's 4-byte head announces."""
    return FRAME_HEAD.unpack(head)[0]


def encode_memfd_request(lambda_id: int, length: int) -> bytes:
    """The datagram sent with a memfd: the lambda ID and the input's length in the memfd."""
    return MEMFD_REQUEST.pack(lambda_id, length)


def decode_memfd_reply(datagram: bytes) -> tuple[int, int, int]:
    """(lambda_id, status, reply length) of a memfd reply; ValueError when it is too short."""
    if len(datagram) < MEMFD_REPLY.size:
        raise ValueError(f"memfd reply of {len(datagram)} bytes is shorter than 13 (id u64 BE, status u8, len u32 BE)")
    return MEMFD_REPLY.unpack_from(datagram)


def decode_miss(datagram: bytes) -> tuple[int, int, bytes]:
    """(token, lambda_id, payload) of a miss the executor forwards; ValueError when too short."""
    if len(datagram) < MISS_HEAD.size:
        raise ValueError(f"miss of {len(datagram)} bytes is shorter than the 12-byte header (token u32 BE + lambda id u64 BE)")
    token, lambda_id = MISS_HEAD.unpack_from(datagram)
    return token, lambda_id, bytes(datagram[MISS_HEAD.size:])


def encode_host_reply(token: int, status: int, payload: bytes = b"") -> bytes:
    """The host's answer to a miss: the miss's token, a status, the payload."""
    return HOST_REPLY_HEAD.pack(token, status) + bytes(payload)
