"""Bitar (issue 19): round trips on every engine, the 64 KiB segment limit, every buffer
recycled (also after a corrupt input), async equals sync, raw DEFLATE interop with stock zlib
both ways, and clear errors for bad frames."""

from __future__ import annotations

import os
import threading
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.bitar import ENGINES, MAX_SEGMENT, CodecError, Device, FrameError, inflate_concatenated, payload
from nearfaas.bitar import frame as fr
from nearfaas.bitar.codecs import EngineModel
from nearfaas.bitar.pool import BufferPool, PoolError


def sample(n: int, seed: int = 0) -> bytes:
    """Compressible but not trivial: repeated records with a random field, like a table."""
    rnd = bytes((i * 7 + seed) % 251 for i in range(4096))
    rows = (b"particle,%d,%s;" % (i, rnd[i % 4000:i % 4000 + 8].hex().encode()) for i in range(n // 20 + 1))
    return b"".join(rows)[:n]


@pytest.fixture(params=sorted(ENGINES))
def engine_name(request):
    return request.param


@pytest.mark.parametrize("size", [0, 1, MAX_SEGMENT - 1, MAX_SEGMENT, MAX_SEGMENT + 1, 5 * MAX_SEGMENT + 17])
def test_round_trip_on_every_engine(engine_name, size):
    data = sample(size)
    with Device(engine_name, threads=2) as dev:
        frame = dev.compress(data)
        assert bytes(dev.decompress(frame)) == data
        assert dev.pool.free == dev.pool.count  # every buffer recycled


def test_incompressible_data_round_trips():
    data = os.urandom(3 * MAX_SEGMENT + 5)
    with Device("isal") as dev:
        frame = dev.compress(data)
        assert bytes(dev.decompress(frame)) == data
        assert len(frame) < len(data) * 1.01 + 200  # stored blocks, not an expansion


def test_segments_never_exceed_the_limit():
    data = sample(10 * MAX_SEGMENT + 3)
    with Device("zlib", segment_size=MAX_SEGMENT) as dev:
        run = dev.run_compress(data)
    h = fr.unpack_header(run.output)
    assert run.ops == 11 and max(h.raw_lengths()) == MAX_SEGMENT and h.raw_lengths()[-1] == 3
    for bad in (0, MAX_SEGMENT + 1):
        with pytest.raises(CodecError, match="segment_size must be 1..65536"):
            Device("zlib", segment_size=bad)


def test_smaller_segments_are_honoured():
    data = sample(100_000)
    with Device("libdeflate", segment_size=4096) as dev:
        frame = dev.compress(data)
        assert fr.unpack_header(frame).segment_size == 4096 and len(fr.unpack_header(frame).lengths) == 25
        assert bytes(dev.decompress(frame)) == data


def test_work_spreads_over_every_queue_pair():
    with Device("zlib", threads=3) as dev:
        dev.compress(sample(9 * MAX_SEGMENT))
        assert [qp.submitted for qp in dev.queue_pairs] == [3, 3, 3]
        assert [qp.completed for qp in dev.queue_pairs] == [3, 3, 3]


def test_a_window_smaller_than_the_input_streams_through_recycled_buffers():
    data = sample(40 * MAX_SEGMENT)
    with Device("isal", threads=2, window_bytes=1) as dev:  # the floor: 2 buffers per thread
        assert dev.pool.count == 4
        frame = dev.compress(data)
        assert bytes(dev.decompress(frame)) == data
        assert dev.pool.acquired == dev.pool.recycled == 80 and dev.pool.free == 4


def test_async_equals_sync(engine_name):
    data = sample(7 * MAX_SEGMENT + 99)
    with Device(engine_name, threads=2) as dev:
        sync = dev.compress(data)
        futures = [dev.compress_async(data) for _ in range(4)]
        assert all(f.result(timeout=30) == sync for f in futures)
        back = [dev.decompress_async(sync) for _ in range(3)]
        assert all(bytes(f.result(timeout=30)) == data for f in back)
        assert dev.pool.free == dev.pool.count


def test_concurrent_callers_share_one_device():
    inputs = [sample(3 * MAX_SEGMENT + i, seed=i) for i in range(6)]
    results = [None] * len(inputs)
    with Device("isal", threads=2, window_bytes=1) as dev:  # callers contend for 4 buffers
        def go(i):
            results[i] = bytes(dev.decompress(dev.compress(inputs[i])))
        ts = [threading.Thread(target=go, args=(i,)) for i in range(len(inputs))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert results == inputs and dev.pool.free == dev.pool.count


def test_stock_zlib_reads_bitar_output(engine_name):
    data = sample(4 * MAX_SEGMENT + 1234)
    with Device(engine_name, threads=2) as dev:
        frame = dev.compress(data)
    h = fr.unpack_header(frame)
    body = payload(frame)
    assert inflate_concatenated(body) == data  # no segment table, stock zlib only
    start = 0
    for n, raw in zip(h.lengths, h.raw_lengths(), strict=True):  # and each segment on its own, wbits -15
        assert len(zlib.decompress(bytes(body[start:start + n]), -15)) == raw
        start += n


@pytest.mark.parametrize("level", [1, 6, 9])
def test_bitar_reads_stock_zlib_output(engine_name, level):
    data = sample(300_000)
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    stream = c.compress(data) + c.flush()
    with Device(engine_name) as dev:
        assert bytes(dev.inflate_raw(stream)) == data


def test_a_corrupt_payload_is_an_error_and_every_buffer_comes_back():
    data = sample(6 * MAX_SEGMENT)
    with Device("zlib", threads=2) as dev:
        frame = bytearray(dev.compress(data))
        h = fr.unpack_header(frame)
        frame[h.size + h.lengths[0] + 40] ^= 0xFF  # inside segment 1
        with pytest.raises(CodecError, match="segment|DEFLATE"):
            dev.decompress(frame)
        assert dev.pool.free == dev.pool.count
        assert bytes(dev.decompress(dev.compress(data))) == data  # the device still works


def test_a_segment_that_inflates_to_other_bytes_fails_its_crc():
    """A frame whose table was rewritten (valid header checksum) over another payload: the
    DEFLATE is valid, the sizes match, only the per-segment CRC-32 can tell."""
    data = sample(2 * MAX_SEGMENT, seed=1)
    with Device("zlib") as dev:
        h = fr.unpack_header(dev.compress(data))
        forged_crcs = (h.crcs[0], h.crcs[1] ^ 1)
        forged = fr.pack_header(fr.Header(h.segment_size, h.raw_len, h.lengths, forged_crcs)) + bytes(payload(dev.compress(data)))
        with pytest.raises(CodecError, match="segment 1: CRC-32"):
            dev.decompress(forged)
        assert dev.pool.free == dev.pool.count


@pytest.mark.parametrize("mutate, message", [
    (lambda f: b"", "shorter than"),
    (lambda f: b"NOPE" + f[4:], "magic"),
    (lambda f: f[:30], "truncated"),
    (lambda f: f[:-5], "add up"),
    (lambda f: f[:20] + bytes([f[20] ^ 1]) + f[21:], "checksum"),
])
def test_bad_frames_get_clear_errors(mutate, message):
    with Device("zlib") as dev:
        frame = bytes(dev.compress(sample(3 * MAX_SEGMENT)))
        with pytest.raises(FrameError, match=message):
            dev.decompress(mutate(frame))
        assert dev.pool.free == dev.pool.count


def test_a_frame_claiming_more_than_deflate_can_hold_is_refused_before_allocating():
    """A 100-byte payload claiming 64 KiB per segment x 1000 segments: refused by the header check."""
    h = fr.Header(MAX_SEGMENT, 1000 * MAX_SEGMENT, (1,) * 100 + (0,) * 900, (0,) * 1000)
    bomb = fr.pack_header(h) + b"\x00" * 100
    with Device("zlib") as dev, pytest.raises(FrameError, match="beyond DEFLATE's 1032:1 limit"):
        dev.decompress(bomb)


def test_bad_engine_and_levels_name_the_fix():
    with pytest.raises(CodecError, match="choose from"):
        Device("lz77")
    with pytest.raises(CodecError, match="isal level must be 0..3"):
        Device("isal", level=9)
    with pytest.raises(CodecError, match="threads must be"):
        Device("zlib", threads=0)


def test_a_closed_device_refuses_work():
    dev = Device("zlib")
    dev.close()
    dev.close()  # idempotent
    with pytest.raises(CodecError, match="closed"):
        dev.compress(b"x")


def test_the_modelled_engine_charges_lanes_not_host_cpu():
    data = sample(8 * MAX_SEGMENT)
    with Device("bf2-model", threads=1) as dev:
        run = dev.run_compress(data)
    m = EngineModel()
    per_op = m.op_s(MAX_SEGMENT, True)
    assert run.engine_s == pytest.approx(8 / m.lanes * per_op)  # 8 equal ops on 2 lanes
    with Device("zlib") as dev:
        assert dev.run_compress(data).engine_s == 0.0


def test_pool_refuses_double_and_foreign_recycles():
    a, b = BufferPool(2, 16), BufferPool(1, 16)
    buf = a.acquire()
    a.recycle(buf)
    with pytest.raises(PoolError, match="recycled twice"):
        a.recycle(buf)
    with pytest.raises(PoolError, match="another pool"):
        b.recycle(a.acquire())
    a.acquire()
    with pytest.raises(PoolError, match="no free buffer"):
        a.acquire(timeout=0.01)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=3 * 4096 + 7), st.sampled_from(["zlib", "isal", "libdeflate"]), st.integers(1, 4096))
def test_round_trip_property(data, name, segment):
    with Device(name, segment_size=segment, threads=2) as dev:
        assert bytes(dev.decompress(dev.compress(data))) == data


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_frames_never_crash(junk):
    with Device("zlib") as dev:
        for blob in (junk, fr.MAGIC + junk):
            try:
                dev.decompress(blob)
            except CodecError:
                pass
        assert dev.pool.free == dev.pool.count


def test_close_waits_for_a_call_in_flight():
    data = sample(60 * MAX_SEGMENT)
    dev = Device("zlib", threads=1, window_bytes=1)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("frame", dev.compress(data)))
    t.start()
    dev.close()  # must neither hang nor cut the running call short
    t.join(30)
    assert not t.is_alive() and inflate_concatenated(payload(out["frame"])) == data
    assert dev.pool.free == dev.pool.count


def test_foreign_streams_are_bounded():
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = c.compress(bytes(10_000_000)) + c.flush()
    with Device("zlib") as dev:
        with pytest.raises(CodecError, match="more than 1000000 bytes"):
            dev.inflate_raw(bomb, max_out=1_000_000)
        with pytest.raises(CodecError, match="truncated"):
            dev.inflate_raw(bomb[: len(bomb) // 2])
        with pytest.raises(CodecError, match="not valid raw DEFLATE"):
            dev.inflate_raw(b"\xff" * 64)
    with pytest.raises(CodecError, match="more than"):
        inflate_concatenated(bomb, max_out=1000)
    with pytest.raises(CodecError, match="zlib level must be -1..9"):
        Device("zlib", level=42)


def test_gunzip_stream_bounds_bombs_and_refuses_junk():
    import asyncio
    import gzip

    from nearfaas.bitar import transfer

    async def decode(blob, limit, step=7000):
        async def chunks():
            for i in range(0, len(blob), step):
                yield blob[i:i + step]
        return b"".join([p async for p in transfer.gunzip_stream(chunks(), limit)])

    data = sample(300_000)
    two = gzip.compress(data[:100_000]) + gzip.compress(data[100_000:])
    assert asyncio.run(decode(two, 10**6)) == data  # members split across chunks
    bomb = gzip.compress(bytes(50_000_000))
    with pytest.raises(ValueError, match="more than 1000000 bytes"):
        asyncio.run(decode(bomb, 1_000_000))
    for junk, message in ((two[:-100], "truncated"), (b"", "no gzip member"), (b"\x1f\x8bjunkjunk" * 10, "not valid gzip")):
        with pytest.raises(ValueError, match=message):
            asyncio.run(decode(junk, 10**6))
