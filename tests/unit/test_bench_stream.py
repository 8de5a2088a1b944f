"""The Streaming Top-K benchmark's pieces (nearfaas.bench.stream), no cluster: the bare-metal
server behind its interceptor answers heapq.nlargest, the per-request arithmetic is the paper's,
the result has the documented shape, and bad arguments are refused with a clear error."""

from __future__ import annotations

import heapq
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nearfaas.bench import stream

ROOT = Path(__file__).resolve().parents[2]


def _u32(data: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def test_reference_topk_is_heapq_nlargest_as_u32_le():
    rng = random.Random(3)
    for size in (4, 60, 64, 1024):
        data = stream.payload(size, rng)
        assert len(data) == size
        assert _u32(stream.topk(data)) == heapq.nlargest(16, _u32(data))
    assert stream.topk(struct.pack("<3I", 1, 0xFFFFFFFF, 7)) == struct.pack("<3I", 0xFFFFFFFF, 7, 1)


def test_baremetal_server_and_interceptor_answer_nlargest_with_timestamps():
    rng = random.Random(11)
    with stream.baremetal() as system:
        inputs = [stream.payload(rng.choice((64, 128, 1024, 4096)), rng) for _ in range(20)]
        for data in inputs[:10]:  # one at a time
            ((t0, t1, raw),) = stream.exchange(system.addr, [system.request(data)], system.complete)
            body, (arrive, answer) = system.decode(raw)
            assert _u32(body) == heapq.nlargest(16, _u32(data))
            assert t0 <= arrive <= answer <= t1  # one clock for the client and the interceptor
        answers = stream.exchange(system.addr, [system.request(d) for d in inputs], system.complete)  # all at once
        for data, (_, _, raw) in zip(inputs, answers, strict=True):
            assert _u32(system.decode(raw)[0]) == heapq.nlargest(16, _u32(data))
        assert stream.cpu_seconds(system.pids()) > 0
        b = stream.batch(system, 8, 256, rng)
        assert b["per_request_us"] > 0 and b["interceptor_per_request_us"] > 0
        assert b["interceptor_per_request_us"] <= b["per_request_us"]


def test_per_request_time_is_batch_latency_over_n():
    assert stream.per_request_us(1_000, 65_000, 64) == pytest.approx(1.0)
    assert stream.per_request_us(0, 2_000_000, 1) == 2_000.0
    with pytest.raises(ValueError):
        stream.per_request_us(0, 10, 0)
    with pytest.raises(ValueError):
        stream.per_request_us(10, 0, 1)


def test_stream_reply_framing():
    reply = struct.pack("<BI", 0, 2) + struct.pack("<2I", 9, 5)
    assert not stream.stream_reply_complete(reply[:-1]) and stream.stream_reply_complete(reply)
    system = stream.StreamSystem("executor", ("127.0.0.1", 1), 41, 0, "insertion")
    assert system.request(b"abcd") == struct.pack("<QQ", 41, 4) + b"abcd"
    assert _u32(system.decode(reply)[0]) == [9, 5]
    with pytest.raises(RuntimeError):
        system.decode(struct.pack("<BI", 3, 0))


def test_result_shape_and_headline_from_a_small_run():
    result = stream.run(quick=True, sizes=[64, 256], requests=5, concurrency=[1, 2], repeats=1, systems=("baremetal",))
    bm = result["systems"]["baremetal"]
    for key in ("p50_us", "p99_us", "cpu_s_per_request", "interceptor_p50_us"):
        assert set(bm[key]) == {"64", "256"} and all(v is not None for v in bm[key].values())
    assert set(bm["per_request_us"]) == {"1", "2"} and bm["label"] == "measured"
    assert bm["p50_us"]["64"] <= bm["p99_us"]["64"]
    head = stream.headline(result)
    assert set(head) == {"stream_p50_us", "baremetal_p50_us", "serverless_p50_us", "per_request_ratio_n64", "native_client_p50_us",
                         "native_client_kept_alive_p50_us", "tcp_floor_p50_us", "tcp_floor_kept_alive_p50_us",
                         "native_client_per_request_ratio_n64"}
    assert head["native_client_p50_us"] == {} and "native_client" not in result  # no executor in this run
    assert head["baremetal_p50_us"] == bm["p50_us"] and head["per_request_ratio_n64"] is None
    assert "baremetal" in stream.table(result)


def test_native_client_rows_put_the_executor_beside_the_floor():
    from nearfaas.bench import stream_native
    from nearfaas.fastpath.executor import Executor, binary_path, load_binary_path

    if not (binary_path().exists() and load_binary_path().exists()):
        pytest.skip("nearfaas-fastpath not built (make setup)")
    with Executor(workers=1, extra_args=["--stream", "127.0.0.1:0"]) as ex:
        ex.control.request(op="deploy", id=3, kind="stream", stream={"chain": [{"fn": "topk", "k": 16, "dtype": "u32"}]})
        addr = ex.info["stream_addr"]
        native = stream_native.measure(load_binary_path(), addr, 3, [64], quick=True, concurrency=[1, 8])
        with pytest.raises(RuntimeError, match="no request answered OK"):  # an id with no function: UNKNOWN only
            stream_native.load_run(load_binary_path(), addr, 4, 64, "kept_alive", 0.1, 0.0)
        stats = ex.stats()["global"]
    assert native["label"] == "measured"
    for target in stream_native.TARGETS:
        for mode in stream_native.MODES:
            row = native["targets"][target][mode]
            assert 0 < row["p50_us"]["64"] <= row["p99_us"]["64"] and row["req_per_s"]["64"] > 0, (target, mode)
    assert stats["stream_reused"] > 0  # the kept-alive mode really reused its connection
    per = native["executor_per_request_us"]
    assert set(per) == {"1", "8"} and all(v > 0 for v in per.values()) and native["per_request_ratio_n64"] is None
    head = stream.headline({"systems": {}, "native_client": native})
    assert head["tcp_floor_kept_alive_p50_us"] == native["targets"]["tcp_floor"]["kept_alive"]["p50_us"]
    assert "tcp_floor kept_alive" in stream_native.table(native)


def test_headline_ratio_is_executor_n64_over_n1():
    result = {"systems": {"executor": {"p50_us": {"64": 5.0}, "per_request_us": {"1": 40.0, "64": 10.0}}}}
    assert stream.headline(result)["per_request_ratio_n64"] == 0.25


@pytest.mark.parametrize("sizes", [[-64], [0], [63], ["x"], []])
def test_bad_sizes_are_refused(sizes):
    with pytest.raises(ValueError, match="size"):
        stream.check_sizes(sizes)


def test_bad_arguments_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="positive multiple of 4"):
        stream.run(quick=True, sizes=[-64])
    with pytest.raises(ValueError, match="concurrency"):
        stream.run(quick=True, concurrency=[0])
    with pytest.raises(ValueError, match="unknown systems"):
        stream.run(quick=True, systems=("fpga",))


def test_script_refuses_a_negative_size():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stream_topk.py"), "--sizes=-64"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "positive multiple of 4" in proc.stderr


def test_serverless_function_matches_the_reference():
    import importlib.util

    spec = importlib.util.spec_from_file_location("topk_handler", ROOT / "examples" / "functions" / "topk" / "handler.py")
    handler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(handler)
    data = stream.payload(1024, random.Random(5))

    class Event:
        body = data

    assert handler.handle(Event(), None) == stream.topk(data)
    Event.body = b"abc"
    assert handler.handle(Event(), None)["statusCode"] == 400
