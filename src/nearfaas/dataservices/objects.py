"""Tabular objects as bytes <-> Arrow tables: what S3 Select and the data services read and write.

An object in the store is only bytes; a query needs a table. This module decides what the bytes
are (``sniff``: magic numbers first, the key's suffix next, the text itself last), reads them with
pyarrow's own readers (``read_table``), and writes tables back (``write_table`` for whole objects,
``write_records`` for S3 Select's CSV/JSON record output). Every failure is an ``ObjectFormatError``
whose message says what is wrong with the object and what to do, because the caller is a client
who sent a query, not someone who can read a pyarrow traceback.

Worked example::

    table = pa.table({"name": ["a", "b"], "age": [3, 5]})
    data = write_table(table, "csv")                 # b'"name","age"\\n"a",3\\n"b",5\\n'
    sniff(data[:4096], "people.csv")                 # -> "csv"
    read_table(data, key="people.csv").num_rows      # -> 2 (header names the columns: USE)
    read_table(data, fmt="csv", csv_header="IGNORE").column_names   # -> ["_1", "_2"]
    write_records(table, "json")                     # -> b'{"name":"a","age":3}\\n{"name":"b","age":5}\\n'

Known caveats:
* CSV and JSON carry no types: read back, columns are inferred (int64, double, bool, string,
  timestamp). S3 Select itself reads every CSV field as a string; here ``"3"`` is a number.
* A null string written to CSV reads back as ``""``; NaN reads back from CSV, and is written to JSON, as null.
* Content sniffing finds CSV only when its first line has a comma; other delimiters need the key's
  ``.csv`` suffix or an explicit ``fmt``.
* CSV fields with quoted line breaks are read only while the break does not cross one of
  pyarrow's parse blocks (1 MiB); S3 Select's AllowQuotedRecordDelimiter is not offered.
* Arrow IPC streams from before Arrow 0.15 (no 0xFFFFFFFF continuation marker) are not recognised.
* ``write_records`` renders values in Python, row by row: fine for query results, slow for
  gigabytes.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.ipc as ipc
import pyarrow.json as pjson
import pyarrow.parquet as pq

FORMATS = ("parquet", "arrow", "arrow-stream", "csv", "jsonl")
RECORD_FORMATS = ("csv", "json")
CSV_HEADERS = ("USE", "IGNORE", "NONE")
_ALIASES = {"json": "jsonl", "ndjson": "jsonl", "ipc": "arrow", "feather": "arrow", "arrows": "arrow-stream"}
_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
_NOT_TABULAR = "object is not tabular: expected Parquet, Arrow IPC, CSV or JSON lines"
SNIFF_BYTES = 64 << 10
_RAGGED = re.compile(r"(?:Row #(\d+): )?Expected (\d+) columns, got (\d+)")  # pyarrow's CSV message
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not in text: binary bytes that happen to decode


class ObjectFormatError(ValueError):
    """The object's bytes are not a table in the format asked for (or any we know); the message
    names the problem and the fix."""


def sniff(head: bytes, key: str = "") -> str | None:
    """The format of an object from its first bytes (``SNIFF_BYTES`` is plenty) and its key, or None.

    Magic numbers win over the key: a ``.csv`` key holding Parquet bytes is Parquet."""
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow"
    if head[:4] == b"\xff\xff\xff\xff" and _is_schema_message(head):
        return "arrow-stream"
    for suffix, fmt in _SUFFIXES.items():
        if key.lower().endswith(suffix):
            return fmt
    text = _text_head(head)
    if text is None or not text.strip():
        return None
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.startswith(("{", "[")):
        try:
            value = json.loads(first)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) or (isinstance(value, list) and value and all(isinstance(v, dict) for v in value)):
            return "jsonl"
        return "jsonl" if first in ("{", "[") or "\n" not in text else None  # pretty-printed, or a cut line
    return "csv" if "," in first else None


def _is_schema_message(head: bytes) -> bool:
    """Whether an IPC stream's first message is a Schema: read the flatbuffer Message table's
    header_type field (index 1; MessageHeader.Schema == 1) by hand, so no reader is run on a guess."""
    try:
        size = struct.unpack_from("<i", head, 4)[0]
        fb = head[8:8 + size]
        root = struct.unpack_from("<I", fb, 0)[0]
        vtable = root - struct.unpack_from("<i", fb, root)[0]
        vt_size = struct.unpack_from("<H", fb, vtable)[0]
        if size <= 0 or vt_size < 8:
            return False
        field = struct.unpack_from("<H", fb, vtable + 6)[0]
        return field != 0 and fb[root + field] == 1
    except (struct.error, IndexError):
        return False


def _text_head(head: bytes) -> str | None:
    """The head as text if it is printable UTF-8 (a character cut at the end is forgiven)."""
    head = head.removeprefix(b"\xef\xbb\xbf")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3 or exc.reason != "unexpected end of data":
            return None
        text = head[:exc.start].decode("utf-8")
    return None if _CONTROL.search(text) else text


def read_table(data: bytes, fmt: str | None = None, key: str = "", csv_header: str = "USE",
               csv_delimiter: str = ",", csv_quote: str = '"') -> pa.Table:
    """The object ``data`` as a table. ``fmt`` None sniffs it. ``csv_header`` is S3 Select's
    FileHeaderInfo: USE (the first line names the columns), IGNORE (skip it; columns are _1, _2, ...),
    NONE (no header; columns _1, _2, ...)."""
    if fmt is None:
        if not data:
            raise ObjectFormatError("object is empty: expected Parquet, Arrow IPC, CSV or JSON lines; upload the data")
        fmt = sniff(data[:SNIFF_BYTES], key)
        if fmt is None:
            hint = f" (key {key!r})" if key else ""
            raise ObjectFormatError(f"{_NOT_TABULAR}{hint}; name the format if it is one of {', '.join(FORMATS)}")
    fmt = _ALIASES.get(fmt.lower(), fmt.lower())
    if fmt not in FORMATS:
        raise ObjectFormatError(f"unknown object format {fmt!r}: use one of {', '.join(FORMATS)}")
    try:
        if fmt == "parquet":
            return _read_parquet(data)
        if fmt in ("arrow", "arrow-stream"):
            return _read_ipc(data, fmt)
        if fmt == "csv":
            return _read_csv(data, csv_header, csv_delimiter, csv_quote)
        return _read_jsonl(data)
    except ObjectFormatError:
        raise
    except (pa.ArrowException, ValueError, OSError, EOFError, RecursionError, MemoryError) as exc:
        raise ObjectFormatError(f"{fmt} object is unreadable ({_first_line(exc)}): check that it is complete "
                                f"and really {fmt}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _read_parquet(data: bytes) -> pa.Table:
    if data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        raise ObjectFormatError("Parquet object is truncated or not Parquet: it must start and end with the magic "
                                "bytes PAR1; upload the whole file")
    try:
        return pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise ObjectFormatError(f"Parquet object is corrupt ({_first_line(exc)}): rewrite it with a Parquet writer "
                                "and upload it whole") from None


def _read_ipc(data: bytes, fmt: str) -> pa.Table:
    name = "Arrow IPC file" if fmt == "arrow" else "Arrow IPC stream"
    try:
        table = (ipc.open_file if fmt == "arrow" else ipc.open_stream)(pa.BufferReader(data)).read_all()
        table.validate(full=True)  # IPC buffers are trusted by the reader; bad offsets must not reach compute
        return table
    except (pa.ArrowException, OSError) as exc:
        other = "arrow-stream" if fmt == "arrow" else "arrow"
        raise ObjectFormatError(f"{name} is truncated or corrupt ({_first_line(exc)}): upload it whole, or read it "
                                f"as {other!r} if it was written the other way") from None


def _read_csv(data: bytes, header: str, delimiter: str, quote: str) -> pa.Table:
    header = header.upper()
    if header not in CSV_HEADERS:
        raise ObjectFormatError(f"CSV header mode {header!r}: use one of {', '.join(CSV_HEADERS)} (S3 FileHeaderInfo)")
    if len(delimiter) != 1 or len(quote) != 1 or delimiter in "\r\n" or delimiter == quote:
        raise ObjectFormatError(f"CSV delimiter {delimiter!r} / quote {quote!r}: each must be one character, "
                                "different from each other and from a line break")
    if not data or data.isspace():
        return pa.table({})

    def read(threads: bool) -> pa.Table:
        ro = pcsv.ReadOptions(use_threads=threads, autogenerate_column_names=header != "USE",
                              skip_rows=1 if header == "IGNORE" else 0)
        po = pcsv.ParseOptions(delimiter=delimiter, quote_char=quote)
        return pcsv.read_csv(pa.BufferReader(data), read_options=ro, parse_options=po)

    try:
        table = read(True)
    except pa.ArrowInvalid as exc:
        message = _first_line(exc)
        if " columns, got " in message:
            try:
                read(False)  # single-threaded, the reader knows (and says) the row number
            except pa.ArrowInvalid as again:
                message = _first_line(again)
        ragged = _RAGGED.search(message)
        if ragged:
            row, expected, got = ragged.groups()
            raise ObjectFormatError(f"CSV {f'line {row}' if row else 'a row'}: expected {expected} fields, got {got}; "
                                    f"every row needs as many fields as the first (delimiter {delimiter!r})") from None
        raise ObjectFormatError(f"CSV object is unreadable ({message}): check its quoting and "
                                f"that fields are separated by {delimiter!r}") from None
    if header != "USE":
        table = table.rename_columns([f"_{i + 1}" for i in range(table.num_columns)])
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_binary(column.type):
            raise ObjectFormatError(f"CSV column {name!r} is not valid UTF-8: re-encode the object as UTF-8")
    return table


def _read_jsonl(data: bytes) -> pa.Table:
    text = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return pa.table({})
    if text[:1] == b"[":  # one JSON array of objects: a document, not lines
        rows = json.loads(text)
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ObjectFormatError("JSON array holds something other than objects: each row must be a JSON object")
        return pa.Table.from_pylist(rows)
    try:
        return pjson.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid as exc:
        message = _first_line(exc).removeprefix("JSON parse error: ")
    with contextlib.suppress(pa.ArrowInvalid):  # objects printed across several lines (S3 Select's JSON DOCUMENT)
        return pjson.read_json(pa.BufferReader(data), parse_options=pjson.ParseOptions(newlines_in_values=True))
    head, _, row = message.rpartition(" in row ")
    where = f"line {int(row) + 1}" if row.isdigit() else "object"
    raise ObjectFormatError(f"JSON {where}: {head or message}; each line must be one JSON object with the same "
                            "type for each key") from None


def write_table(table: pa.Table, fmt: str) -> bytes:
    """The table as a whole object in ``fmt`` (one of ``FORMATS``); CSV gets a header line."""
    fmt = _ALIASES.get(fmt.lower(), fmt.lower())
    if fmt == "jsonl":
        return write_records(table, "json")
    if fmt not in FORMATS:
        raise ObjectFormatError(f"unknown object format {fmt!r}: use one of {', '.join(FORMATS)}")
    sink = pa.BufferOutputStream()
    if fmt == "csv":
        pcsv.write_csv(table, sink, write_options=pcsv.WriteOptions(include_header=True))
    elif fmt == "parquet":
        pq.write_table(table, sink)
    else:
        opener = ipc.new_file if fmt == "arrow" else ipc.new_stream
        with opener(sink, table.schema) as writer:
            writer.write_table(table)
    return sink.getvalue().to_pybytes()


def write_records(table: pa.Table, fmt: str, csv_header: bool = False, record_delimiter: str = "\n",
                  field_delimiter: str = ",", quote_fields: str = "ASNEEDED") -> bytes:
    """Rows as S3 Select returns them: ``csv`` (no header unless asked; fields quoted only when they
    hold the delimiter, a quote or a line break, or always with ``quote_fields="ALWAYS"``) or ``json``
    (one compact JSON object per record). Every record, the last too, ends with ``record_delimiter``."""
    fmt = fmt.lower()
    if fmt not in RECORD_FORMATS:
        raise ObjectFormatError(f"unknown record format {fmt!r}: use csv or json")
    rows = table.to_pylist()
    if fmt == "json":
        return "".join(json.dumps({k: _jsonable(v) for k, v in row.items()}, separators=(",", ":"), ensure_ascii=False,
                                  default=_csv_text) + record_delimiter for row in rows).encode()
    always = quote_fields.upper() == "ALWAYS"

    def field(value) -> str:
        text = _csv_text(value)
        if always or any(c in text for c in ('"', "\r", "\n")) or field_delimiter in text:
            return '"' + text.replace('"', '""') + '"'
        return text

    lines = [field_delimiter.join(field(n) for n in table.column_names)] if csv_header else []
    lines += [field_delimiter.join(field(v) for v in row.values()) for row in rows]
    return "".join(line + record_delimiter for line in lines).encode()


def _csv_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _jsonable(value):
    """JSON has no NaN or infinity: they become null, as they would in most JSON writers' strict mode."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
