"""The event-stream encoder of S3 SelectObjectContent, checked against our strict decoder and,
above all, against botocore's own parser: what boto3 reads is what counts."""

from __future__ import annotations

import struct
import zlib

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.parsers import EventStreamXMLParser
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.s3.eventstream import (
    MAX_RECORDS_PAYLOAD,
    continuation_event,
    decode_messages,
    encode_message,
    end_event,
    error_message,
    progress_event,
    records_event,
    split_records,
    stats_event,
)

pytestmark = pytest.mark.timeout(30)

_SELECT_SHAPE = (
    botocore.session.get_session().get_service_model("s3").operation_model("SelectObjectContent").output_shape.members["Payload"]
)


class _RawStream:
    """What botocore's EventStream needs of an HTTP body: ``stream()`` yielding chunks, ``close()``."""

    def __init__(self, data: bytes, chunk: int):
        self._data, self._chunk, self.closed = data, chunk, False

    def stream(self):
        for i in range(0, len(self._data), self._chunk):
            yield self._data[i:i + self._chunk]

    def close(self):
        self.closed = True


def _botocore_events(data: bytes, chunk: int = 7) -> list[dict]:
    stream = EventStream(_RawStream(data, chunk), _SELECT_SHAPE, EventStreamXMLParser(), "SelectObjectContent")
    return list(stream)


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1:]


# -- framing ------------------------------------------------------------------------------------


def test_end_event_matches_the_worked_example_in_the_docstring():
    expected = bytes.fromhex("00000038 00000028 c1c684d4")
    expected += b"\x0d:message-type\x07\x00\x05event\x0b:event-type\x07\x00\x03End"
    expected += bytes.fromhex("cf97d392")
    assert end_event() == expected
    assert zlib.crc32(expected[:8]) == struct.unpack(">I", expected[8:12])[0]
    assert zlib.crc32(expected[:-4]) == struct.unpack(">I", expected[-4:])[0]


def test_each_helper_round_trips_through_decode_messages():
    stream = (records_event(b"a,b\n") + progress_event(1, 2, 3) + continuation_event() + stats_event(10, 20, 4)
              + end_event() + error_message("InternalError", "boom"))
    event = {":message-type": "event"}
    assert decode_messages(stream) == [
        ({**event, ":event-type": "Records", ":content-type": "application/octet-stream"}, b"a,b\n"),
        ({**event, ":event-type": "Progress", ":content-type": "text/xml"},
         b'<Progress xmlns=""><BytesScanned>1</BytesScanned><BytesProcessed>2</BytesProcessed>'
         b"<BytesReturned>3</BytesReturned></Progress>"),
        ({**event, ":event-type": "Cont"}, b""),
        ({**event, ":event-type": "Stats", ":content-type": "text/xml"},
         b'<Stats xmlns=""><BytesScanned>10</BytesScanned><BytesProcessed>20</BytesProcessed>'
         b"<BytesReturned>4</BytesReturned></Stats>"),
        ({**event, ":event-type": "End"}, b""),
        ({":message-type": "error", ":error-code": "InternalError", ":error-message": "boom"}, b""),
    ]


@settings(max_examples=100, deadline=None)
@given(
    headers=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6),
    payload=st.binary(max_size=300),
)
def test_arbitrary_headers_and_payload_round_trip_in_ours_and_botocores_decoder(headers, payload):
    data = encode_message(headers, payload)
    assert decode_messages(data) == [(headers, payload)]
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    [message] = list(buffer)
    assert (message.headers, message.payload) == (headers, payload)


def test_encode_rejects_names_and_values_too_long_for_their_length_fields():
    encode_message({"n" * 255: "v" * 0xFFFF})
    with pytest.raises(ValueError, match="header name"):
        encode_message({"n" * 256: "v"})
    with pytest.raises(ValueError, match="value is 65536 bytes"):
        encode_message({"n": "é" * 0x8000})


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_counts_must_be_non_negative_ints(bad):
    with pytest.raises(ValueError, match="BytesProcessed"):
        stats_event(1, bad, 3)


# -- botocore reads what we write -------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_botocore_parses_a_whole_select_stream_in_order(chunk):
    stream = b"".join([
        records_event(b"1,alice\n2,bob\n"),
        progress_event(100, 100, 14),
        records_event(b"3,carol\n"),
        continuation_event(),
        records_event(b""),
        stats_event(2048, 1024, 22),
        end_event(),
    ])
    assert _botocore_events(stream, chunk) == [
        {"Records": {"Payload": b"1,alice\n2,bob\n"}},
        {"Progress": {"Details": {"BytesScanned": 100, "BytesProcessed": 100, "BytesReturned": 14}}},
        {"Records": {"Payload": b"3,carol\n"}},
        {"Cont": {}},
        {"Records": {"Payload": b""}},
        {"Stats": {"Details": {"BytesScanned": 2048, "BytesProcessed": 1024, "BytesReturned": 22}}},
        {"End": {}},
    ]


def test_botocore_reassembles_split_records_events():
    data = b"".join(b"%d,row number %d\n" % (i, i) for i in range(200))
    events = _botocore_events(b"".join(split_records(data, limit=100)) + end_event(), chunk=333)
    assert events[-1] == {"End": {}}
    payloads = [e["Records"]["Payload"] for e in events[:-1]]
    assert b"".join(payloads) == data and all(len(p) <= 100 and p.endswith(b"\n") for p in payloads)


def test_an_error_message_makes_botocore_raise_event_stream_error_with_our_code():
    stream = records_event(b"1\n") + error_message("OverMaxRecordSize", "record too big")
    events = iter(EventStream(_RawStream(stream, 5), _SELECT_SHAPE, EventStreamXMLParser(), "SelectObjectContent"))
    assert next(events) == {"Records": {"Payload": b"1\n"}}
    with pytest.raises(EventStreamError) as raised:
        next(events)
    assert raised.value.response["Error"] == {"Code": "OverMaxRecordSize", "Message": "record too big"}
    assert "OverMaxRecordSize" in str(raised.value) and "SelectObjectContent" in str(raised.value)


@pytest.mark.parametrize(("index", "what"), [(2, "prelude CRC"), (9, "prelude CRC"), (20, "message CRC"), (-6, "message CRC"),
                                             (-1, "message CRC")])
def test_a_corrupted_byte_is_rejected_by_botocore_and_by_us(index, what):
    good = records_event(b"payload bytes")
    bad = _flip(good, index)
    with pytest.raises(ChecksumMismatch):
        _botocore_events(bad)
    with pytest.raises(ValueError, match=f"message 0 at byte 0: bad {what}"):
        decode_messages(bad)
    # A later message names its own index and offset.
    with pytest.raises(ValueError, match=f"message 1 at byte {len(good)}: bad {what}"):
        decode_messages(good + bad)


# -- our decoder's other complaints -------------------------------------------------------------


def test_decode_rejects_short_prelude_and_length_mismatches():
    good = end_event()
    assert decode_messages(b"") == []
    with pytest.raises(ValueError, match=r"message 1 at byte 56: short prelude \(5 of 12 bytes\)"):
        decode_messages(good + good[:5])
    with pytest.raises(ValueError, match="length mismatch .*only 55 bytes left"):
        decode_messages(good[:-1])
    # A self-consistent prelude whose total cannot hold its own headers and CRC.
    head = struct.pack(">II", 20, 10)
    with pytest.raises(ValueError, match="length mismatch .*too small"):
        decode_messages(head + struct.pack(">I", zlib.crc32(head)) + b"\x00" * 8)


def _frame(raw_headers: bytes) -> bytes:
    head = struct.pack(">II", 16 + len(raw_headers), len(raw_headers))
    body = head + struct.pack(">I", zlib.crc32(head)) + raw_headers
    return body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize(("raw_headers", "complaint"), [
    (b"\x01a\x00\x00\x00", "value type 0"),
    (b"\x01a\x07\x00", "runs past"),
    (b"\x01a\x07\x00\x05abc", "value runs past"),
    (b"\x01a\x07\x00\x01x\x01a\x07\x00\x01y", "duplicate header 'a'"),
])
def test_decode_rejects_malformed_headers(raw_headers, complaint):
    with pytest.raises(ValueError, match=complaint):
        decode_messages(_frame(raw_headers))


# -- split_records ------------------------------------------------------------------------------


def test_split_records_edge_cases():
    assert list(split_records(b"")) == []
    assert MAX_RECORDS_PAYLOAD == 1024 * 1024
    assert [p for _, p in decode_messages(b"".join(split_records(b"x" * 10)))] == [b"x" * 10]
    # A record longer than the limit is the one thing cut mid-record.
    assert [p for _, p in decode_messages(b"".join(split_records(b"ab\n" + b"c" * 7 + b"\nd", limit=4)))] == [
        b"ab\n", b"cccc", b"ccc\n", b"d"]
    with pytest.raises(ValueError, match="at least 1"):
        list(split_records(b"a", limit=0))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), limit=st.integers(min_value=1, max_value=40), trailing_newline=st.booleans())
def test_split_records_keeps_records_whole_and_loses_nothing(data, limit, trailing_newline):
    # Records (their "\n" included) no longer than the limit must never be split.
    body = st.binary(max_size=limit - 1).filter(lambda b: b"\n" not in b)
    records = data.draw(st.lists(body, max_size=30))
    blob = b"\n".join(records) + (b"\n" if trailing_newline and records else b"")
    events = list(split_records(blob, limit))
    decoded = decode_messages(b"".join(events))
    payloads = [payload for _, payload in decoded]
    assert b"".join(payloads) == blob
    assert all(0 < len(p) <= limit for p in payloads)
    assert all(h[":event-type"] == "Records" for h, _ in decoded)
    assert all(p.endswith(b"\n") for p in payloads[:-1])  # every cut falls on a record boundary
