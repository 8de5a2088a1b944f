"""The stream-function client (``nearfaas.fastpath.stream``): its encoding, and calls against a
real executor started with ``--stream`` (skipped when the release binary is not built)."""

from __future__ import annotations

import math
import struct
import time

import pytest

from nearfaas.fastpath import wire
from nearfaas.fastpath.executor import Executor, binary_path
from nearfaas.fastpath.stream import Connection, StreamError, call, decode, encode, encode_head


def test_head_and_elements_are_little_endian():
    assert encode_head(1, 8) == b"\x01" + b"\x00" * 7 + b"\x08" + b"\x00" * 7
    assert encode_head(2) == b"\x02" + b"\x00" * 7 + b"\xff" * 8
    assert wire.STREAM_HEAD.size == 16 and wire.STREAM_REPLY_HEAD.size == 5
    assert encode([1, 256], "u32") == b"\x01\x00\x00\x00\x00\x01\x00\x00"
    assert encode([1.5], "f32") == struct.pack("<f", 1.5)
    assert decode(b"\x00\x02\x00\x00\x00" + encode([9, 4]), "u32") == ("OK", [9, 4])
    assert decode(b"\x00\x01\x00\x00\x00" + struct.pack("<II", 7, 3), "pairs") == ("OK", [(7, 3)])
    assert decode(b"\x02\x00\x00\x00\x00") == ("UNKNOWN", [])
    with pytest.raises(ValueError):
        encode_head(-1)
    with pytest.raises(ValueError):
        encode([1], "u8")
    with pytest.raises(StreamError, match="announces 2"):
        decode(b"\x00\x02\x00\x00\x00" + encode([9]))
    with pytest.raises(StreamError, match="without a reply"):
        decode(b"")


def test_unreachable_listener_is_a_clear_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(StreamError, match="cannot connect"):
        call(f"127.0.0.1:{port}", 1, b"", timeout=2)


@pytest.fixture(scope="module")
def ex():
    if not binary_path().exists():
        pytest.skip("nearfaas-fastpath not built (cargo build --release in fastpath/)")
    with Executor(workers=1, extra_args=["--stream", "127.0.0.1:0", "--stream-idle-ms", "300"]) as e:
        assert e.info["stream"] and e.info["stream_addr"].startswith("127.0.0.1:")
        for sid, chain in {
            1: [{"fn": "parse"}, {"fn": "filter", "min": 100}, {"fn": "topk", "k": 3, "dtype": "u32"}],
            2: [{"fn": "topk", "k": 2, "dtype": "f32", "variant": "heap"}],
            3: [{"fn": "frequent", "k": 4}],
        }.items():
            r = e.control.request(op="deploy", id=sid, kind="stream", stream={"chain": chain})
            assert r["stream_addr"] == e.info["stream_addr"]
        yield e


def test_calls_against_the_executor(ex):
    addr = ex.info["stream_addr"]
    # Text through parse -> filter -> topk, whole and in chunks until EOF.
    assert call(addr, 1, b"5 150, 99\n300 1000 7") == ("OK", [1000, 300, 150])
    chunks = (f"{i}," .encode() for i in range(2000))
    assert call(addr, 1, chunks) == ("OK", [1999, 1998, 1997])
    st, top = call(addr, 2, encode([1.5, float("nan"), -3.0, 8.0], "f32"), dtype="f32")
    assert st == "OK" and top == [8.0, 1.5]
    st, only_nan = call(addr, 2, encode([float("nan")], "f32"), dtype="f32")
    assert st == "OK" and math.isnan(only_nan[0])
    assert call(addr, 3, encode([4, 4, 9, 4, 9, 1]), dtype="pairs") == ("OK", [(4, 3), (9, 2), (1, 1)])
    # Statuses: unknown id, a parse error, a length not a multiple of 4, truncated, silent.
    assert call(addr, 42, b"1 2 3") == ("UNKNOWN", [])
    assert call(addr, 1, b"1 two 3") == ("BAD_REQUEST", [])
    assert call(addr, 2, b"\x00" * 6) == ("BAD_REQUEST", [])
    assert call(addr, 2, b"\x00" * 8, length=16) == ("BAD_REQUEST", [])
    assert call(addr, 2, b"\x00" * 8, length=16, half_close=False) == ("TIMEOUT", [])
    stats = ex.stats()
    assert {s["id"] for s in stats["streams"]} == {1, 2, 3}
    assert stats["global"]["stream_unknown"] == 1


def test_a_kept_alive_connection_serves_many_requests_and_recovers(ex):
    addr = ex.info["stream_addr"]
    reused_before = ex.stats()["global"]["stream_reused"]
    with Connection(addr) as conn:
        for i in range(30):
            values = [100 + (i * 37 + j * 11) % 900 for j in range(i + 1)]  # all pass the filter (min 100)
            text = " ".join(map(str, values)).encode()
            assert conn.call(1, text) == ("OK", sorted(values, reverse=True)[:3]), i
        assert conn.call(3, encode([7, 7, 2]), dtype="pairs") == ("OK", [(7, 2), (2, 1)])
        assert conn.connects == 1
        assert ex.stats()["global"]["stream_reused"] - reused_before == 30
        # An early answer closes the connection; the next call opens another.
        assert conn.call(42, b"1 2") == ("UNKNOWN", [])
        assert conn.call(1, b"500 600") == ("OK", [600, 500])
        assert conn.connects == 2
        # The executor closes an idle kept-alive connection (300 ms here); the call after that
        # is sent again on a new connection, not failed.
        time.sleep(0.6)
        assert conn.call(2, encode([2.5, 9.0], "f32"), dtype="f32") == ("OK", [9.0, 2.5])
        assert conn.connects == 3
    with pytest.raises(TypeError, match="bytes payload"):
        Connection(addr).call(1, iter([b"1 2"]))
    with pytest.raises(ValueError, match="stream_id"):
        Connection(addr).call(1 << 64, b"")
