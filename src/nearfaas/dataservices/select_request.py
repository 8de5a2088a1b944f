"""S3 SelectObjectContent requests: the XML body a client sends, and its SQL made ready for ``sql``.

boto3's ``select_object_content`` POSTs ``/{Bucket}/{Key}?select&select-type=2`` with a body whose
root is ``SelectObjectContentRequest`` (namespace ``http://s3.amazonaws.com/doc/2006-03-01/``;
botocore's S3 model, shape SelectObjectContentRequest). ``parse_select_request`` turns it into a
``SelectRequest`` whose fields plug straight into ``objects.read_table`` / ``objects.write_records``;
a bad body raises ``SelectRequestError`` carrying the code AWS documents for it ("List of SELECT
Object Content Error Codes") and a message naming the element and the fix.

S3 Select SQL reads ``FROM S3Object`` (any case), optionally aliased (``FROM S3Object s``), columns
as ``s.name``, ``name`` or by position ``s._1``. ``to_engine_sql`` rewrites it for ``sql.parse``: the
table is ``S3Object``, qualifiers go, ``s.*`` is ``*``, and what S3 Select itself refuses (joins,
other tables, JSON paths, a negative LIMIT) is refused with S3's code. ``run_select`` runs it on a table.

Worked example::

    req = parse_select_request(body)   # CSV in (FileHeaderInfo USE), JSON out
    table = objects.read_table(data, fmt=req.input_format, csv_header=req.csv_header, csv_delimiter=req.csv_delimiter)
    to_engine_sql("SELECT s.name FROM s3object AS s WHERE s._2 > 3 LIMIT 5", table.column_names)
    # -> 'SELECT name FROM S3Object WHERE "age" > 3 LIMIT 5'  (column 2 of a table with columns name, age)
    objects.write_records(run_select(req.expression, table), req.output_format)

Known caveats:
* CompressionType GZIP and BZIP2 are valid S3 but not read here: refused with NotImplemented.
* CSV Comments, QuoteEscapeCharacter, AllowQuotedRecordDelimiter and the output QuoteCharacter are
  accepted and ignored (pyarrow's CSV reader and ``write_records`` use ``"`` and no comment lines).
* A CR LF delimiter sent as raw characters arrives as LF (XML end-of-line normalisation); send
  ``&#13;&#10;`` to keep the CR.
* JSON paths (``FROM S3Object[*].a``, ``s.a.b``) and SQL beyond ``sql``'s subset are refused.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp

from nearfaas.dataservices import sql
from nearfaas.s3 import xml as s3xml
from nearfaas.s3.errors import S3Error

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
ROOTS = ("SelectObjectContentRequest", "SelectRequest")  # the model's name; older S3 docs' name
MAX_EXPRESSION_BYTES = 256 << 10  # AWS: ExpressionTooLong above 256 KB
TABLE = "S3Object"
_JSON_PATH = re.compile(r"\bS3Object\s*\[", re.IGNORECASE)
_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")  # sqlglot's repr, made readable


class SelectRequestError(ValueError):
    """A request S3 Select refuses; ``code`` is the S3 error code AWS returns for it."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SelectRequest:
    """What the client asked, in ``objects``' vocabulary, so callers pass fields straight through."""

    expression: str
    input_format: str  # "csv" | "jsonl" | "parquet": objects.read_table's names
    csv_header: str = "NONE"  # S3's default FileHeaderInfo
    csv_delimiter: str = ","
    json_type: str | None = None  # "DOCUMENT" | "LINES" for JSON input
    output_format: str = "csv"  # "csv" | "json": objects.write_records's names
    output_csv_delimiter: str = ","
    output_record_delimiter: str = "\n"
    scan_range: tuple[int | None, int | None] | None = None  # (Start, End), bytes, End inclusive
    csv_quote: str = '"'
    output_quote_fields: str = "ASNEEDED"
    request_progress: bool = False


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(elem: ET.Element | None, name: str) -> ET.Element | None:
    """A child by local name: clients differ on whether they repeat the namespace on children."""
    return next((c for c in (elem if elem is not None else ()) if _local(c.tag) == name), None)


def _text(elem: ET.Element | None, name: str, default: str | None = None) -> str | None:
    child = _child(elem, name)
    return default if child is None or child.text is None else child.text


def _one_char(parent: ET.Element | None, where: str, name: str, default: str) -> str:
    value = _text(parent, name, default)
    if len(value) != 1:
        raise SelectRequestError("InvalidRequestParameter", f"{where}/{name} is {value!r}: give exactly one character")
    return value


def _choice(elem: ET.Element | None, where: str, name: str, default: str, allowed: tuple, code: str) -> str:
    """An enum member, matched case-insensitively: clients send ``use`` as often as ``USE``."""
    value = (_text(elem, name, default) or "").strip().upper()
    if value not in allowed:
        raise SelectRequestError(code, f"{where}/{name} is {value!r}: use {', '.join(allowed)}")
    return value


def parse_select_request(body: bytes) -> SelectRequest:
    """The request in ``body``, checked against botocore's model and what this server can read."""
    if not body or not body.strip():
        raise SelectRequestError("EmptyRequestBody", "the request body is empty: send a SelectObjectContentRequest XML")
    try:  # the S3 layer's one XML reader: no DTDs or entities, well formed
        root = s3xml.parse_xml(body)
    except S3Error as exc:
        raise SelectRequestError(exc.code, f"{exc.message} Send a SelectObjectContentRequest XML.") from None
    if _local(root.tag) not in ROOTS:
        raise SelectRequestError("MalformedXML", f"the root element is {_local(root.tag)!r}: expected "
                                 f"SelectObjectContentRequest in namespace {NAMESPACE}")
    expression = _text(root, "Expression")
    if expression is None or not expression.strip():
        raise SelectRequestError("MissingRequiredParameter", "Expression is missing: give the SQL, e.g. SELECT * FROM S3Object")
    if len(expression.encode()) > MAX_EXPRESSION_BYTES:
        raise SelectRequestError("ExpressionTooLong", f"Expression is over {MAX_EXPRESSION_BYTES} bytes: shorten it")
    kind = _text(root, "ExpressionType")
    if kind is None:
        raise SelectRequestError("MissingRequiredParameter", "ExpressionType is missing: set it to SQL")
    if kind.strip().upper() != "SQL":
        raise SelectRequestError("InvalidExpressionType", f"ExpressionType is {kind!r}: only SQL is supported")
    fields = {"expression": expression, **_input(_child(root, "InputSerialization")),
              **_output(_child(root, "OutputSerialization"))}
    fields["scan_range"] = _scan_range(_child(root, "ScanRange"), fields)
    progress = _choice(_child(root, "RequestProgress"), "RequestProgress", "Enabled", "FALSE", ("TRUE", "FALSE"),
                       "InvalidRequestParameter")
    return SelectRequest(request_progress=progress == "TRUE", **fields)


def _input(elem: ET.Element | None) -> dict:
    if elem is None:
        raise SelectRequestError("MissingRequiredParameter", "InputSerialization is missing: describe the object "
                                 "with CSV, JSON or Parquet")
    where = "InputSerialization"
    compression = _choice(elem, where, "CompressionType", "NONE", ("NONE", "GZIP", "BZIP2"), "InvalidCompressionFormat")
    if compression != "NONE":
        # Valid S3, not implemented here; AWS lists no Select code for it, so S3's generic NotImplemented (501).
        raise SelectRequestError("NotImplemented", f"InputSerialization/CompressionType {compression} is not read "
                                 "here: upload the object uncompressed and use NONE")
    formats = [name for name in ("CSV", "JSON", "Parquet") if _child(elem, name) is not None]
    if not formats:
        raise SelectRequestError("MissingRequiredParameter", "InputSerialization names no format: add <CSV/>, "
                                 "<JSON/> or <Parquet/>")
    if len(formats) > 1:
        raise SelectRequestError("ObjectSerializationConflict", f"InputSerialization names {' and '.join(formats)}: "
                                 "give exactly one")
    fmt = _child(elem, formats[0])
    if formats[0] == "Parquet":
        return {"input_format": "parquet"}
    if formats[0] == "JSON":
        # AWS's docs leave Type's default unstated; DOCUMENT is the safe reading (it also reads LINES here).
        json_type = _choice(fmt, f"{where}/JSON", "Type", "DOCUMENT", ("DOCUMENT", "LINES"), "InvalidJsonType")
        return {"input_format": "jsonl", "json_type": json_type}
    where += "/CSV"
    header = _choice(fmt, where, "FileHeaderInfo", "NONE", ("USE", "IGNORE", "NONE"), "InvalidFileHeaderInfo")
    record = _text(fmt, "RecordDelimiter", "\n")
    if record not in ("\n", "\r\n"):
        raise SelectRequestError("InvalidRequestParameter", f"{where}/RecordDelimiter is {record!r}: records here "
                                 "end with a line break (\\n or \\r\\n)")
    delimiter, quote = _one_char(fmt, where, "FieldDelimiter", ","), _one_char(fmt, where, "QuoteCharacter", '"')
    if delimiter in "\r\n" or delimiter == quote:
        raise SelectRequestError("InvalidRequestParameter", f"{where}/FieldDelimiter {delimiter!r} must differ from "
                                 "the quote character and from a line break")
    return {"input_format": "csv", "csv_header": header, "csv_delimiter": delimiter, "csv_quote": quote}


def _output(elem: ET.Element | None) -> dict:
    if elem is None:
        raise SelectRequestError("MissingRequiredParameter", "OutputSerialization is missing: add <CSV/> or <JSON/>")
    formats = [name for name in ("CSV", "JSON") if _child(elem, name) is not None]
    if not formats:
        raise SelectRequestError("MissingRequiredParameter", "OutputSerialization names no format: add <CSV/> or <JSON/>")
    if len(formats) > 1:
        raise SelectRequestError("ObjectSerializationConflict", "OutputSerialization names CSV and JSON: give one")
    fmt = _child(elem, formats[0])
    record = _text(fmt, "RecordDelimiter", "\n")
    if not record:
        raise SelectRequestError("InvalidRequestParameter", f"OutputSerialization/{formats[0]}/RecordDelimiter is "
                                 "empty: omit it for \\n or give the delimiter")
    if formats[0] == "JSON":
        return {"output_format": "json", "output_record_delimiter": record}
    quote_fields = _choice(fmt, "OutputSerialization/CSV", "QuoteFields", "ASNEEDED", ("ALWAYS", "ASNEEDED"),
                           "InvalidQuoteFields")
    delimiter = _text(fmt, "FieldDelimiter", ",")
    if not delimiter:
        raise SelectRequestError("InvalidRequestParameter", "OutputSerialization/CSV/FieldDelimiter is empty: omit it "
                                 "for a comma or give the delimiter")
    return {"output_format": "csv", "output_record_delimiter": record, "output_csv_delimiter": delimiter,
            "output_quote_fields": quote_fields}


def _scan_range(elem: ET.Element | None, fields: dict) -> tuple[int | None, int | None] | None:
    if elem is None:
        return None
    bounds = []
    for name in ("Start", "End"):
        text = _text(elem, name)
        if text is not None and not text.strip().isdigit():
            raise SelectRequestError("InvalidScanRange", f"ScanRange/{name} is {text!r}: give a non-negative integer")
        bounds.append(int(text) if text is not None else None)
    start, end = bounds
    if start is None and end is None:
        raise SelectRequestError("InvalidScanRange", "ScanRange is empty: give Start, End or both, or leave it out")
    if start is not None and end is not None and start > end:
        raise SelectRequestError("InvalidScanRange", f"ScanRange Start {start} is after End {end}: swap them")
    if fields.get("json_type") == "DOCUMENT":
        raise SelectRequestError("UnsupportedScanRangeInput", "ScanRange needs JSON Type LINES (or CSV, Parquet): a "
                                 "JSON DOCUMENT cannot be split")
    return start, end


def to_engine_sql(expression: str, columns: list[str] | None = None) -> str:
    """The S3 Select ``expression`` as SQL that ``sql.parse`` accepts over ``{"S3Object": table}``. With
    the table's ``columns``, unquoted names bind case-insensitively (S3 Select's rule) and ``_N`` binds
    to the N-th column when no column is so named (keeping ``_N`` as the output name, as S3 does)."""
    if _JSON_PATH.search(expression):
        raise SelectRequestError("ParseInvalidPathComponent", "JSON paths in FROM (S3Object[*]...) are not supported: "
                                 "select FROM S3Object and name top-level fields")
    try:
        tree = sqlglot.parse_one(expression, read="duckdb")
    except sqlglot.errors.ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        what = _TOKEN.sub(lambda m: "the end" if m.group(1) == "SENTINEL" else repr(m.group(2)),
                          str(err.get("description", exc)))
        raise SelectRequestError("ParseUnexpectedToken", f"Expression has a syntax error at line {err.get('line')}, "
                                 f"column {err.get('col')}: {what}") from None
    if not isinstance(tree, exp.Select):
        raise SelectRequestError("ParseUnsupportedSelect", "Expression must be one SELECT ... FROM S3Object")
    if tree.find(exp.Join) is not None:
        raise SelectRequestError("ParseMalformedJoin", "joins are not supported: S3 Select reads one object, S3Object")
    aliases = {TABLE.lower()}
    for table in tree.find_all(exp.Table):
        if table.name.lower() != TABLE.lower() or table.args.get("db") is not None:
            raise SelectRequestError("ParseUnsupportedSyntax", f"Expression reads FROM {table.sql()}: the object is "
                                     "S3Object (FROM S3Object, or FROM S3Object s with an alias)")
        if table.alias:
            aliases.add(table.alias.lower())
        table.set("this", exp.to_identifier(TABLE))
        table.set("alias", None)
    if not (tree.args.get("from_") or tree.args.get("from")):
        raise SelectRequestError("ParseSelectMissingFrom", "Expression has no FROM: add FROM S3Object")
    for column in list(tree.find_all(exp.Column)):
        _bind(column, aliases, columns)
    for i, item in enumerate(tree.expressions):  # S3 Select names unnamed outputs _1, _2, ... (sql names COUNT(*) "*")
        if not isinstance(item, (exp.Alias, exp.Column, exp.Star)):
            item.replace(exp.alias_(item.copy(), f"_{i + 1}"))
    if tree.args.get("offset") is not None:  # sql ignores OFFSET; S3 Select has none
        raise SelectRequestError("ParseUnsupportedSyntax", "OFFSET is not supported in S3 Select: drop it")
    limit = tree.args.get("limit")
    value = limit.expression if limit is not None else None
    if value is not None and (not (isinstance(value, exp.Literal) and value.is_int) or int(value.this) < 0):
        raise SelectRequestError("EvaluatorNegativeLimit", f"LIMIT {value.sql()}: give a non-negative integer")
    return tree.sql(dialect="duckdb")


def _bind(column: exp.Column, aliases: set[str], columns: list[str] | None) -> None:
    """Drop the alias qualifier (``s.name`` -> ``name``) and, given the table's columns, bind the name."""
    if column.args.get("db") is not None:
        raise SelectRequestError("ParseInvalidPathComponent", f"{column.sql()} is a nested path: only top-level "
                                 "columns are supported")
    if column.table and column.table.lower() not in aliases:
        raise SelectRequestError("InvalidTableAlias", f"{column.sql()} names a table other than S3Object or its "
                                 f"alias ({', '.join(sorted(aliases))}): qualify columns with the alias")
    if isinstance(column.this, exp.Star):
        column.replace(exp.Star())
        return
    column.set("table", None)
    name = column.name
    if not columns or column.this.quoted or name in columns:
        return
    same = [c for c in columns if c.lower() == name.lower()]
    if len(same) > 1:
        raise SelectRequestError("AmbiguousFieldName", f"{name} matches {', '.join(same)} ignoring case: "
                                 "double-quote it to pick one exactly")
    positional = re.fullmatch(r"_([1-9]\d*)", name)
    if same:
        column.set("this", exp.to_identifier(same[0]))
    elif positional and int(positional.group(1)) <= len(columns):
        column.set("this", exp.to_identifier(columns[int(positional.group(1)) - 1], quoted=True))
        if isinstance(column.parent, exp.Select):  # an output column: S3 Select names it _N still
            column.replace(exp.alias_(column.copy(), name))


def run_select(expression: str, table: pa.Table) -> pa.Table:
    """The S3 Select ``expression`` over ``table`` (SelectRequestError for what S3 Select refuses,
    ``sql.QueryError`` for what the engine cannot run, e.g. an unknown column)."""
    return sql.execute(sql.parse(to_engine_sql(expression, table.column_names)), {TABLE: table})
