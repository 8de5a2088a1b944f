"""Tabular objects (``dataservices.objects``): every format round-trips a table through bytes and is
recognised from its bytes alone, S3 Select's CSV header modes name columns as S3 does, and bad
objects (random bytes, truncated Parquet, ragged CSV, binary garbage) give an ObjectFormatError
that says what is wrong and what to do, never a pyarrow traceback (fuzzed with hypothesis)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nearfaas.dataservices import objects
from nearfaas.dataservices.objects import ObjectFormatError, read_table, sniff, write_records, write_table


def small_table(null_strings: bool = True) -> pa.Table:
    return pa.table({
        "name": ["alpha", "b,c", 'say "hi"', None if null_strings else "", "é"],
        "n": pa.array([1, -2, None, 40, 5], pa.int64()),
        "x": pa.array([0.5, -1.25, 3.0, None, 1e-3], pa.float64()),
        "ok": pa.array([True, False, None, True, False], pa.bool_()),
    })


@pytest.mark.parametrize("fmt", objects.FORMATS)
def test_every_format_round_trips_and_is_sniffed_from_its_bytes(fmt):
    # CSV has no null string (it reads back as ""), so the CSV table uses "" where the others use null.
    table = small_table(null_strings=fmt != "csv")
    data = write_table(table, fmt)
    assert sniff(data[:objects.SNIFF_BYTES]) == fmt
    back = read_table(data)
    assert back.schema == table.schema  # CSV and JSON infer types; these four survive inference
    assert back.equals(table)


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "arrow-stream"])
def test_binary_formats_keep_types_text_formats_cannot(fmt):
    table = pa.table({"i8": pa.array([1, 2], pa.int8()), "f32": pa.array([1.5, 2.5], pa.float32())})
    assert read_table(write_table(table, fmt)).schema == table.schema
    assert read_table(write_table(table, "csv")).schema.types == [pa.int64(), pa.float64()]  # the caveat


def test_magic_bytes_win_over_the_key_and_the_key_wins_over_content():
    parquet = write_table(small_table(), "parquet")
    assert sniff(parquet, "looks.csv") == "parquet"
    assert sniff(b"a;b\n1;2\n", "data.csv") == "csv"  # no comma: content alone would not say CSV
    assert sniff(b"a;b\n1;2\n") is None
    assert sniff(b'{"a": 1}\n', "x.ndjson") == sniff(b'{"a": 1}\n') == "jsonl"
    assert sniff(b'[{"a": 1}, {"a": 2}]') == "jsonl"
    assert sniff(b"\xff\xff\xff\xff\x00\x00\x00\x00") is None  # an IPC end-of-stream marker, no schema
    assert sniff(b"") is None and sniff(b"plain words, no table\x00\x01") is None


def test_sniff_forgives_a_character_cut_at_the_end_of_the_head():
    data = "name,city\nÉmile,Zürich\n".encode()
    cut = data.index("ü".encode()) + 1  # inside the two-byte ü
    assert sniff(data[:cut]) == "csv"


CSV = b"name,age\nann,31\nbob,42\n"


def test_csv_header_modes_follow_s3_file_header_info():
    assert read_table(CSV, "csv", csv_header="USE").to_pylist() == [{"name": "ann", "age": 31}, {"name": "bob", "age": 42}]
    assert read_table(CSV, "csv", csv_header="IGNORE").to_pylist() == [{"_1": "ann", "_2": 31}, {"_1": "bob", "_2": 42}]
    none = read_table(CSV, "csv", csv_header="none")
    assert none.column_names == ["_1", "_2"] and none.num_rows == 3 and none.column("_2")[0].as_py() == "age"


def test_csv_delimiter_and_quote():
    table = read_table(b"a|b\n'x|y'|2\n", "csv", csv_delimiter="|", csv_quote="'")
    assert table.to_pylist() == [{"a": "x|y", "b": 2}]
    with pytest.raises(ObjectFormatError, match="one character"):
        read_table(CSV, "csv", csv_delimiter="||")
    with pytest.raises(ObjectFormatError, match="USE, IGNORE, NONE"):
        read_table(CSV, "csv", csv_header="FIRST")


def test_json_documents_arrays_and_pretty_printed_objects_read_as_rows():
    rows = [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert read_table(json.dumps(rows).encode()).to_pylist() == rows
    pretty = "\n".join(json.dumps(r, indent=2) for r in rows).encode()
    assert read_table(pretty, "jsonl").to_pylist() == rows
    assert read_table(b"  \n", "jsonl").num_rows == 0 and read_table(b"", "csv").num_columns == 0


@pytest.mark.parametrize("data, kwargs, message", [
    (random.Random(7).randbytes(4096), {}, "object is not tabular: expected Parquet, Arrow IPC, CSV or JSON lines"),
    (b"", {}, "object is empty"),
    (b"a,b,c,d,e,f,g,h,i\n" + b"1,2,3,4,5,6,7,8,9\n" + b"1,2,3,4,5,6,7\n", {}, "CSV line 3: expected 9 fields, got 7"),
    (b"a,b\n1,\xff\xfe\n", {"fmt": "csv"}, "not valid UTF-8"),
    (b'{"a": 1}\n{"a": "one"}\n', {}, "JSON line 2"),
    (b'[1, 2]', {"fmt": "jsonl"}, "each row must be a JSON object"),
    (b"PAR1" + bytes(64) + b"PAR1", {}, "Parquet object is corrupt"),
    (b"anything", {"fmt": "xlsx"}, "unknown object format 'xlsx'"),
])
def test_bad_objects_say_what_is_wrong(data, kwargs, message):
    with pytest.raises(ObjectFormatError, match=message.replace("(", r"\(")) as info:
        read_table(data, **kwargs)
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("fmt, cut", [("parquet", -8), ("parquet", 20), ("arrow", 40), ("arrow-stream", -30)])
def test_truncated_binary_objects_are_named_truncated(fmt, cut):
    data = write_table(small_table(), fmt)[:cut]
    with pytest.raises(ObjectFormatError, match="truncated"):
        read_table(data, fmt=fmt)


def test_binary_garbage_under_a_csv_key_is_refused_as_csv():
    garbage = bytes(range(256)) * 8
    with pytest.raises(ObjectFormatError, match="CSV"):
        read_table(garbage, key="data.csv")


def test_write_records_is_s3_select_output():
    table = pa.table({"s": ["a", "b,c", 'q"', None], "v": [1.5, float("nan"), None, 2.0], "t": [True, False, None, True]})
    assert write_records(table, "csv") == b'a,1.5,true\n"b,c",nan,false\n"q""",,\n,2.0,true\n'
    assert write_records(table.slice(0, 1), "csv", csv_header=True, record_delimiter="\r\n", field_delimiter="\t",
                         quote_fields="ALWAYS") == b'"s"\t"v"\t"t"\r\n"a"\t"1.5"\t"true"\r\n'
    lines = write_records(table, "json", record_delimiter="\n").decode().split("\n")
    assert lines[-1] == "" and [json.loads(x) for x in lines[:-1]][1] == {"s": "b,c", "v": None, "t": False}
    assert write_records(table.slice(0, 0), "json") == b""
    with pytest.raises(ObjectFormatError, match="csv or json"):
        write_records(table, "parquet")


def test_jsonl_written_by_write_table_is_write_records_json():
    table = small_table()
    assert write_table(table, "jsonl") == write_records(table, "json")


PREFIXES = [b"", b"PAR1", b"ARROW1\x00\x00", b"\xff\xff\xff\xff", b"{", b"[", b"a,b\n", b'{"a":1}\n']
VALID = {fmt: write_table(small_table(), fmt) for fmt in objects.FORMATS}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(PREFIXES), tail=st.binary(max_size=300), key=st.sampled_from(["", "x.csv", "x.json", "x.bin"]),
       fmt=st.sampled_from([None, *objects.FORMATS]))
def test_arbitrary_bytes_raise_only_object_format_error(prefix, tail, key, fmt):
    data = prefix + tail
    assert sniff(data, key) in (None, *objects.FORMATS)
    try:
        assert isinstance(read_table(data, fmt=fmt, key=key), pa.Table)
    except ObjectFormatError as exc:
        assert str(exc) and "Traceback" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(fmt=st.sampled_from(objects.FORMATS), data=st.data())
def test_damaged_valid_objects_raise_only_object_format_error(fmt, data):
    """Flipped bytes and cuts inside real objects reach deeper into the readers than random bytes do."""
    raw = bytearray(VALID[fmt])
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = raw[:data.draw(st.integers(0, len(raw)))]
    try:
        read_table(bytes(raw), fmt=data.draw(st.sampled_from([None, fmt])))
    except ObjectFormatError:
        pass
