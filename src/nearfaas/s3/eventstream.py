"""The AWS event-stream framing (``application/vnd.amazon.eventstream``) of S3 SelectObjectContent.

A SelectObjectContent response body is not XML: it is a run of binary messages, each of which
an SDK (botocore's ``botocore.eventstream``, for boto3) checks and turns into one event::

    prelude   total_length u32 BE | headers_length u32 BE | prelude_crc u32 BE = CRC32(first 8 bytes)
    headers   per header: name_len u8 | name (UTF-8) | value type u8 (7 = string) | value_len u16 BE | value
    payload   total_length - headers_length - 16 bytes
    trailer   message_crc u32 BE = CRC32(every byte before it, prelude CRC included)

S3 sends ``Records`` events (rows of output, the payload raw), ``Stats`` and ``Progress`` (an XML
payload of three byte counts), ``Cont`` (keep-alive, no payload) and finally ``End`` (no payload);
without ``End`` a client must treat the result as cut short. A failure part-way through is a
message of ``:message-type`` ``error`` whose code and text travel in headers, not the payload.

We encode it by hand because the encoder lives only on the server side of AWS: the SDKs ship a
decoder and nothing we can import writes these frames, so this module is that writer, plus a
strict decoder (:func:`decode_messages`) for our tests and our own clients.

Worked example, the ``End`` event (headers ``:message-type: event``, ``:event-type: End``)::

    00 00 00 38  00 00 00 28  c1 c6 84 d4            total 56, headers 40, prelude CRC
    0d ":message-type" 07 00 05 "event"             name 13 bytes, string, value 5 bytes
    0b ":event-type"   07 00 03 "End"               name 11 bytes, string, value 3 bytes
    cf 97 d3 92                                      message CRC (no payload)

Known caveats:

* Header values are strings only (type 7); the other nine types of the format are never needed
  by S3 Select, and :func:`decode_messages` rejects them rather than half-supporting them.
* botocore drops an event whose ``:event-type`` its model does not know without a word, so a
  misspelt type loses data silently; use the helpers here, not hand-built headers.
* botocore stops quietly at a truncated trailing message; only the ``End`` event tells a client
  that the result is complete.
* botocore refuses a message whose headers exceed 128 KiB or whose payload exceeds 24 MiB;
  :data:`MAX_RECORDS_PAYLOAD` keeps Records events far below that.
* A CRC error surfaces in botocore as ``botocore.eventstream.ChecksumMismatch`` raised while
  iterating, not as a ``ClientError``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

__all__ = [
    "MAX_RECORDS_PAYLOAD",
    "continuation_event",
    "decode_messages",
    "encode_message",
    "end_event",
    "error_message",
    "progress_event",
    "records_event",
    "split_records",
    "stats_event",
]

#: Largest payload :func:`split_records` puts in one Records event: big enough that the 16-byte
#: frame and 85 bytes of headers are negligible, far below botocore's 24 MiB per-message ceiling,
#: and small enough to bound what a client buffers before it sees any rows.
MAX_RECORDS_PAYLOAD = 1024 * 1024

_PRELUDE = struct.Struct(">III")  # total_length, headers_length, prelude_crc
_PRELUDE_LEN = _PRELUDE.size  # 12
_CRC_LEN = 4
_STRING = 7  # header value type: UTF-8 string with a u16 length
_MAX_NAME = 0xFF  # name length is a u8
_MAX_VALUE = 0xFFFF  # string value length is a u16


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _encode_headers(headers: dict[str, str]) -> bytes:
    out = bytearray()
    for name, value in headers.items():
        raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
        if len(raw_name) > _MAX_NAME:
            raise ValueError(f"header name {name[:40]!r}... is {len(raw_name)} bytes, more than {_MAX_NAME}")
        if len(raw_value) > _MAX_VALUE:
            raise ValueError(f"header {name!r} value is {len(raw_value)} bytes, more than {_MAX_VALUE}")
        out += struct.pack(">B", len(raw_name)) + raw_name
        out += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return bytes(out)


def encode_message(headers: dict[str, str], payload: bytes = b"") -> bytes:
    """One framed message: the building block every event and error below is made of.

    Headers are written in the dict's order (a dict also rules out duplicate names, which
    botocore rejects); all values are strings.
    """
    raw_headers = _encode_headers(headers)
    total = _PRELUDE_LEN + len(raw_headers) + len(payload) + _CRC_LEN
    head = struct.pack(">II", total, len(raw_headers))
    body = head + struct.pack(">I", _crc(head)) + raw_headers + bytes(payload)
    return body + struct.pack(">I", _crc(body))


def _event(event_type: str, payload: bytes = b"", content_type: str | None = None) -> bytes:
    headers = {":message-type": "event", ":event-type": event_type}
    if content_type is not None:
        headers[":content-type"] = content_type
    return encode_message(headers, payload)


def records_event(payload: bytes) -> bytes:
    """A ``Records`` event: a slice of the query's output, passed to the client byte for byte."""
    return _event("Records", payload, "application/octet-stream")


def _counts_xml(root: str, bytes_scanned: int, bytes_processed: int, bytes_returned: int) -> bytes:
    counts = {"BytesScanned": bytes_scanned, "BytesProcessed": bytes_processed, "BytesReturned": bytes_returned}
    for name, value in counts.items():
        # botocore parses these with int(); reject what would make it choke or mean nothing.
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    inner = "".join(f"<{name}>{value}</{name}>" for name, value in counts.items())
    return f'<{root} xmlns="">{inner}</{root}>'.encode()


def stats_event(bytes_scanned: int, bytes_processed: int, bytes_returned: int) -> bytes:
    """The ``Stats`` event S3 sends once, just before ``End``: totals for the whole query.

    botocore reads it as ``{'Stats': {'Details': {'BytesScanned': int, ...}}}``.
    """
    return _event("Stats", _counts_xml("Stats", bytes_scanned, bytes_processed, bytes_returned), "text/xml")


def progress_event(bytes_scanned: int, bytes_processed: int, bytes_returned: int) -> bytes:
    """A ``Progress`` event (sent when the request asks for progress): running totals so far."""
    return _event("Progress", _counts_xml("Progress", bytes_scanned, bytes_processed, bytes_returned), "text/xml")


def continuation_event() -> bytes:
    """A ``Cont`` keep-alive, so that a long scan that returns nothing yet does not look dead."""
    return _event("Cont")


def end_event() -> bytes:
    """The ``End`` event: the only proof to the client that the result is complete."""
    return _event("End")


def error_message(code: str, message: str) -> bytes:
    """An error part-way through the stream (the HTTP status, 200, is long gone by then).

    botocore raises ``EventStreamError`` carrying ``code`` and ``message``.
    """
    return encode_message({":message-type": "error", ":error-code": code, ":error-message": message})


def split_records(data: bytes, limit: int = MAX_RECORDS_PAYLOAD) -> Iterator[bytes]:
    """Records events carrying ``data`` in slices of at most ``limit`` bytes.

    Each slice ends at a record boundary (just after a ``\\n``) when one falls inside it, so a
    client that handles events one at a time sees whole rows; only a single record longer than
    ``limit`` is cut mid-record. Empty ``data`` yields nothing, never an empty event.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        end = pos + limit
        if end < len(data):
            newline = data.rfind(b"\n", pos, end)
            if newline != -1:
                end = newline + 1
        yield records_event(bytes(view[pos:end]))
        pos = min(end, len(data))


def _decode_headers(raw: bytes, where: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    pos = 0
    while pos < len(raw):
        name_len = raw[pos]
        if pos + 1 + name_len + 3 > len(raw):
            raise ValueError(f"{where}: header at offset {pos} runs past the headers section")
        name = raw[pos + 1:pos + 1 + name_len].decode("utf-8")
        pos += 1 + name_len
        value_type, value_len = struct.unpack_from(">BH", raw, pos)
        if value_type != _STRING:
            raise ValueError(f"{where}: header {name!r} has value type {value_type}; only strings (7) are supported")
        pos += 3
        if pos + value_len > len(raw):
            raise ValueError(f"{where}: header {name!r} value runs past the headers section")
        if name in headers:
            raise ValueError(f"{where}: duplicate header {name!r}")
        headers[name] = raw[pos:pos + value_len].decode("utf-8")
        pos += value_len
    return headers


def decode_messages(data: bytes) -> list[tuple[dict[str, str], bytes]]:
    """Every message in ``data`` as ``(headers, payload)``, checking everything botocore checks.

    Stricter than botocore in one way: trailing bytes that do not make a whole message are an
    error here, where botocore would silently wait for more. Raises ``ValueError`` naming the
    message index and what is wrong (short prelude, bad prelude CRC, length mismatch, bad
    message CRC, malformed headers).
    """
    messages: list[tuple[dict[str, str], bytes]] = []
    pos = 0
    while pos < len(data):
        where = f"message {len(messages)} at byte {pos}"
        if len(data) - pos < _PRELUDE_LEN:
            raise ValueError(f"{where}: short prelude ({len(data) - pos} of {_PRELUDE_LEN} bytes)")
        total, headers_len, prelude_crc = _PRELUDE.unpack_from(data, pos)
        if _crc(data[pos:pos + 8]) != prelude_crc:
            raise ValueError(f"{where}: bad prelude CRC (0x{prelude_crc:08x}, computed 0x{_crc(data[pos:pos + 8]):08x})")
        if total < _PRELUDE_LEN + headers_len + _CRC_LEN:
            raise ValueError(f"{where}: length mismatch (total {total} too small for {headers_len} bytes of headers)")
        if total > len(data) - pos:
            raise ValueError(f"{where}: length mismatch (total {total} but only {len(data) - pos} bytes left)")
        end = pos + total - _CRC_LEN
        (message_crc,) = struct.unpack_from(">I", data, end)
        if _crc(data[pos:end]) != message_crc:
            raise ValueError(f"{where}: bad message CRC (0x{message_crc:08x}, computed 0x{_crc(data[pos:end]):08x})")
        headers_end = pos + _PRELUDE_LEN + headers_len
        headers = _decode_headers(data[pos + _PRELUDE_LEN:headers_end], where)
        messages.append((headers, bytes(data[headers_end:end])))
        pos += total
    return messages
