"""`nearfaas bitar` and `nearfaas partition` (issue 19): the JSON the issue asks for, files that
round-trip through the CLI and stock zlib, and clear errors (no traceback) for bad input."""

from __future__ import annotations

import json
import zlib

import pyarrow as pa
from click.testing import CliRunner

from nearfaas.bitar.frame import inflate_concatenated, payload
from nearfaas.cli import main
from nearfaas.dataservices import datasets
from nearfaas.dataservices.partition import pack


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_partition_json_has_the_fields_the_issue_names():
    r = invoke("partition", "--dataset", "planes", "--parts", "4", "--codec", "zstd", "--size", "2MB", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {"parts", "unpack_s", "split_s", "repack_s"} <= set(out)
    assert len(out["parts"]) == 4 and all({"rows", "bytes"} <= set(v) for v in out["parts"].values())
    assert sum(v["rows"] for v in out["parts"].values()) == out["rows_in"]


def test_partition_prints_histograms_and_writes_parts(tmp_path):
    r = invoke("partition", "--dataset", "particles", "--parts", "16", "--size", "1MB", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "Rows per part" in r.output and "Timing breakdown" in r.output
    parts = [pa.ipc.open_stream(pa.OSFile(str(tmp_path / f"{i}.arrow"))).read_all() for i in range(16)]
    assert sum(p.num_rows for p in parts) > 0
    assert sum(1 for p in parts if p.num_rows) == 3  # TrackML-like IDs fill only 3 of 16


def test_partition_of_an_input_file_with_bitar(tmp_path):
    src = tmp_path / "t.arrow"
    src.write_bytes(pack(datasets.generate("ships", 500_000)).to_pybytes())
    r = invoke("partition", "--input", str(src), "--parts", "2", "--codec", "none", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["source"] == str(src)


def test_partition_bad_inputs_are_clear(tmp_path):
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    for args, message in ((["--parts", "6"], "power of two"), (["--input", str(junk)], "not an Arrow IPC stream"),
                          (["--input", str(junk), "--key", "x"], "not an Arrow IPC stream"),
                          (["--size", "lots"], "not a quantity")):
        r = CliRunner().invoke(main, ["partition", *args])
        assert r.exit_code != 0 and message in r.output, (args, r.output)
        assert "Traceback" not in r.output


def test_bitar_compress_decompress_round_trip_and_zlib_reads_it(tmp_path):
    src = tmp_path / "data.bin"
    data = b"".join(b"row %d,%d;" % (i, i * i % 97) for i in range(100_000))
    src.write_bytes(data)
    frame, back = tmp_path / "data.btr", tmp_path / "back.bin"
    r = invoke("bitar", "compress", str(src), "-o", str(frame), "--engine", "libdeflate", "--threads", "2", "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["raw_bytes"] == len(data) and info["ratio"] < 0.5 and info["ops"] == -(-len(data) // 65536)
    assert inflate_concatenated(payload(frame.read_bytes())) == data  # stock zlib, no Bitar
    r = invoke("bitar", "decompress", str(frame), "-o", str(back), "--engine", "isal")
    assert r.exit_code == 0, r.output
    assert back.read_bytes() == data


def test_bitar_modelled_engine_says_so(tmp_path):
    src = tmp_path / "d"
    src.write_bytes(bytes(300_000))
    r = invoke("bitar", "compress", str(src), "-o", str(tmp_path / "d.btr"), "--engine", "bf2-model", "--json")
    out = json.loads(r.output)
    assert out["engine_s"] > 0 and "modelled" in out["label"]


def test_bitar_refuses_a_non_frame_without_a_traceback(tmp_path):
    src = tmp_path / "raw.deflate"
    src.write_bytes(zlib.compress(b"x" * 1000))
    r = CliRunner().invoke(main, ["bitar", "decompress", str(src), "-o", str(tmp_path / "out")])
    assert r.exit_code != 0 and "not a Bitar frame" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_bitar_bad_levels_and_unwritable_outputs_are_one_line(tmp_path):
    src = tmp_path / "d"
    src.write_bytes(b"abc" * 1000)
    for args, message in ((["--engine", "zlib", "--level", "42"], "zlib level must be -1..9"),
                          (["-o", str(tmp_path / "missing" / "out")], "cannot write")):
        full = ["bitar", "compress", str(src)] + (args if "-o" in args else ["-o", str(tmp_path / "o"), *args])
        r = CliRunner().invoke(main, full)
        assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output, r.output
    assert not list((tmp_path).glob("*.part"))
