"""S3 SelectObjectContent requests (``dataservices.select_request``): the body boto3 sends (built
with botocore's own rest-xml serializer and S3 model) parses into what ``objects`` reads and writes;
each malformed body gets the error code AWS documents; DTDs are refused; and S3 Select SQL
(``FROM S3Object s``, ``s.col``, positional ``_1``, LIMIT) runs on ``sql`` and agrees with DuckDB."""

from __future__ import annotations

import re

import botocore.serialize
import botocore.session
import duckdb
import pyarrow as pa
import pytest

from nearfaas.dataservices import objects, sql
from nearfaas.dataservices.select_request import (SelectRequest, SelectRequestError, parse_select_request, run_select,
                                                  to_engine_sql)

_OPERATION = botocore.session.get_session().get_service_model("s3").operation_model("SelectObjectContent")
_SERIALIZER = botocore.serialize.create_serializer("rest-xml")


def boto_body(drop: str = "", **overrides) -> bytes:
    """The XML body botocore puts on the wire for ``select_object_content`` with these parameters; ``drop``
    removes a required element afterwards (botocore itself refuses to send a request without it)."""
    params = {
        "Bucket": "data", "Key": "people.csv", "ExpressionType": "SQL",
        "Expression": "SELECT s.name FROM S3Object s WHERE s.age > 30",
        "InputSerialization": {"CSV": {"FileHeaderInfo": "USE", "FieldDelimiter": ","}, "CompressionType": "NONE"},
        "OutputSerialization": {"JSON": {"RecordDelimiter": "\n"}},
    }
    params.update(overrides)
    body = _SERIALIZER.serialize_to_request(params, _OPERATION)["body"]
    return re.sub(rf"<{drop}>.*?</{drop}>".encode(), b"", body, flags=re.DOTALL) if drop else body


def code_of(body: bytes) -> str:
    with pytest.raises(SelectRequestError) as info:
        parse_select_request(body)
    assert str(info.value) and "\n" not in str(info.value)
    return info.value.code


def test_a_boto3_request_body_parses_into_objects_arguments():
    body = boto_body(ScanRange={"Start": 0, "End": 99}, RequestProgress={"Enabled": True})
    assert body.startswith(b'<SelectObjectContentRequest xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
    req = parse_select_request(body)
    assert req == SelectRequest(expression="SELECT s.name FROM S3Object s WHERE s.age > 30", input_format="csv",
                                csv_header="USE", csv_delimiter=",", output_format="json", output_record_delimiter="\n",
                                scan_range=(0, 99), request_progress=True)


def test_json_parquet_and_csv_output_options():
    req = parse_select_request(boto_body(InputSerialization={"JSON": {"Type": "LINES"}},
                                         OutputSerialization={"CSV": {"FieldDelimiter": "\t", "QuoteFields": "ALWAYS",
                                                                      "RecordDelimiter": ";"}}))
    assert (req.input_format, req.json_type, req.output_format) == ("jsonl", "LINES", "csv")
    assert (req.output_csv_delimiter, req.output_record_delimiter, req.output_quote_fields) == ("\t", ";", "ALWAYS")
    assert parse_select_request(boto_body(InputSerialization={"Parquet": {}})).input_format == "parquet"


def test_defaults_are_s3s_and_children_may_omit_the_namespace():
    body = (b"<SelectObjectContentRequest><Expression>SELECT * FROM S3Object</Expression><ExpressionType>sql"
            b"</ExpressionType><InputSerialization><CSV/></InputSerialization><OutputSerialization><CSV/>"
            b"</OutputSerialization></SelectObjectContentRequest>")
    req = parse_select_request(body)
    assert (req.csv_header, req.csv_delimiter, req.output_format, req.output_csv_delimiter) == ("NONE", ",", "csv", ",")
    assert req.scan_range is None and req.request_progress is False and req.json_type is None


@pytest.mark.parametrize("overrides, code", [
    ({"drop": "Expression"}, "MissingRequiredParameter"),
    ({"Expression": "   "}, "MissingRequiredParameter"),
    ({"drop": "ExpressionType"}, "MissingRequiredParameter"),
    ({"drop": "InputSerialization"}, "MissingRequiredParameter"),
    ({"InputSerialization": {"CompressionType": "NONE"}}, "MissingRequiredParameter"),
    ({"drop": "OutputSerialization"}, "MissingRequiredParameter"),
    ({"OutputSerialization": {}}, "MissingRequiredParameter"),
    ({"ExpressionType": "XPATH"}, "InvalidExpressionType"),
    ({"Expression": "SELECT * FROM S3Object WHERE " + "x = 1 OR " * 30000 + "x = 2"}, "ExpressionTooLong"),
    ({"InputSerialization": {"CSV": {}, "CompressionType": "GZIP"}}, "NotImplemented"),
    ({"InputSerialization": {"CSV": {}, "CompressionType": "BZIP2"}}, "NotImplemented"),
    ({"InputSerialization": {"CSV": {}, "CompressionType": "ZSTD"}}, "InvalidCompressionFormat"),
    ({"InputSerialization": {"CSV": {}, "JSON": {}}}, "ObjectSerializationConflict"),
    ({"OutputSerialization": {"CSV": {}, "JSON": {}}}, "ObjectSerializationConflict"),
    ({"InputSerialization": {"CSV": {"FileHeaderInfo": "FIRST"}}}, "InvalidFileHeaderInfo"),
    ({"InputSerialization": {"JSON": {"Type": "ARRAY"}}}, "InvalidJsonType"),
    ({"OutputSerialization": {"CSV": {"QuoteFields": "NEVER"}}}, "InvalidQuoteFields"),
    ({"InputSerialization": {"CSV": {"FieldDelimiter": "::"}}}, "InvalidRequestParameter"),
    ({"InputSerialization": {"CSV": {"FieldDelimiter": '"'}}}, "InvalidRequestParameter"),
    ({"InputSerialization": {"CSV": {"RecordDelimiter": ";"}}}, "InvalidRequestParameter"),
    ({"ScanRange": {}}, "InvalidScanRange"),
    ({"ScanRange": {"Start": 10, "End": 5}}, "InvalidScanRange"),
    ({"ScanRange": {"Start": -1}}, "InvalidScanRange"),
    ({"InputSerialization": {"JSON": {"Type": "DOCUMENT"}}, "ScanRange": {"Start": 0}}, "UnsupportedScanRangeInput"),
])
def test_each_bad_request_gets_the_aws_error_code(overrides, code):
    assert code_of(boto_body(**overrides)) == code


def test_error_messages_name_the_element_and_the_fix():
    with pytest.raises(SelectRequestError, match=r"InputSerialization/CSV/FileHeaderInfo is 'FIRST': use USE, IGNORE, NONE"):
        parse_select_request(boto_body(InputSerialization={"CSV": {"FileHeaderInfo": "FIRST"}}))
    with pytest.raises(SelectRequestError, match="RequestProgress/Enabled is 'MAYBE'"):
        parse_select_request(boto_body().replace(b"</OutputSerialization>", b"</OutputSerialization><RequestProgress>"
                                                 b"<Enabled>maybe</Enabled></RequestProgress>"))


@pytest.mark.parametrize("body, code", [
    (b"", "EmptyRequestBody"),
    (b"<SelectObjectContentRequest><Expression>", "MalformedXML"),
    (b"<ListBucketResult/>", "MalformedXML"),
    (b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x "SELECT * FROM S3Object">]>'
     b"<SelectObjectContentRequest><Expression>&x;</Expression></SelectObjectContentRequest>", "MalformedXML"),
    (b'<!doctype SelectObjectContentRequest SYSTEM "file:///etc/passwd"><SelectObjectContentRequest/>', "MalformedXML"),
])
def test_malformed_xml_and_dtds_are_refused(body, code):
    assert code_of(body) == code


TABLE = pa.table({"name": ["ann", "bob", "cy", "dee"], "Age": [31, 42, 19, 42], "score": [1.5, -2.0, 3.25, 0.0]})


@pytest.mark.parametrize("expression, expected", [
    ("SELECT s.name FROM S3Object s WHERE s.Age > 30", [{"name": "ann"}, {"name": "bob"}, {"name": "dee"}]),
    ("select S.name from s3object AS S where S.Age = 19", [{"name": "cy"}]),
    ("SELECT name, Age FROM S3OBJECT WHERE score < 0", [{"name": "bob", "Age": 42}]),
    ("SELECT s.* FROM S3Object s WHERE s.score = 0", [{"name": "dee", "Age": 42, "score": 0.0}]),
])
def test_to_engine_sql_runs_on_sql_with_aliases_and_any_case_of_s3object(expression, expected):
    text = to_engine_sql(expression)
    assert "S3Object" in text and not re.search(r"\bs\.", text, re.IGNORECASE)
    assert sql.execute(sql.parse(text), {"S3Object": TABLE}).to_pylist() == expected


def test_positional_columns_with_file_header_info_ignore():
    data = objects.write_table(TABLE, "csv")
    table = objects.read_table(data, "csv", csv_header="IGNORE")
    text = to_engine_sql("SELECT s._1 FROM S3Object s WHERE s._2 >= 42")
    assert sql.execute(sql.parse(text), {"S3Object": table}).to_pylist() == [{"_1": "bob"}, {"_1": "dee"}]


def test_binding_to_a_table_is_case_insensitive_and_positional_as_s3_select_is():
    assert to_engine_sql("SELECT s._1, s.AGE FROM S3Object s WHERE s.NAME = 'ann'", TABLE.column_names) == \
        'SELECT "name" AS _1, Age FROM S3Object WHERE name = \'ann\''
    assert run_select("SELECT s._1 FROM S3Object s WHERE s._2 = 19", TABLE).to_pylist() == [{"_1": "cy"}]
    with pytest.raises(SelectRequestError) as info:
        to_engine_sql("SELECT Name FROM S3Object", ["NAME", "name"])
    assert info.value.code == "AmbiguousFieldName"
    with pytest.raises(sql.QueryError, match="no column 'nope'"):
        run_select("SELECT nope FROM S3Object", TABLE)


def test_limit_runs_on_sql():
    assert to_engine_sql("SELECT * FROM S3Object s LIMIT 2") == "SELECT * FROM S3Object LIMIT 2"
    assert run_select("SELECT s.name FROM S3Object s WHERE s.age > 20 LIMIT 2", TABLE).to_pylist() == \
        [{"name": "ann"}, {"name": "bob"}]
    assert run_select("SELECT * FROM S3Object LIMIT 0", TABLE).num_rows == 0


def test_run_select_names_unnamed_expressions_by_position_as_s3_does():
    result = run_select("SELECT COUNT(*), MAX(s.score) AS top, SUM(s.age) FROM S3Object s", TABLE)
    assert result.to_pylist() == [{"_1": 4, "top": 3.25, "_3": 134}]
    assert run_select("SELECT name, Age * 2 FROM S3Object LIMIT 1", TABLE).to_pylist() == [{"name": "ann", "_2": 62}]


@pytest.mark.parametrize("expression", [
    "SELECT name FROM S3Object WHERE Age > 20 AND score >= 0",
    "SELECT COUNT(*) FROM S3Object WHERE name <> 'bob'",
    "SELECT name, score * 2 + 1 AS y FROM S3Object WHERE NOT (Age = 42)",
])
def test_run_select_agrees_with_duckdb(expression):
    con = duckdb.connect()
    con.register("S3Object", TABLE)
    ours = run_select(expression, TABLE)
    theirs = con.sql(expression).to_arrow_table()
    assert [list(r.values()) for r in ours.to_pylist()] == [list(r.values()) for r in theirs.to_pylist()]


@pytest.mark.parametrize("expression, code", [
    ("SELECT x.name FROM S3Object s", "InvalidTableAlias"),
    ("SELECT * FROM people", "ParseUnsupportedSyntax"),
    ("SELECT s.a[0] FROM S3Object[*].records s", "ParseInvalidPathComponent"),
    ("SELECT s.a.b FROM S3Object s", "ParseInvalidPathComponent"),
    ("SELECT * FROM S3Object s JOIN S3Object t ON s.a = t.a", "ParseMalformedJoin"),
    ("DELETE FROM S3Object", "ParseUnsupportedSelect"),
    ("SELECT 1", "ParseSelectMissingFrom"),
    ("SELECT * FROM S3Object LIMIT -1", "EvaluatorNegativeLimit"),
    ("SELECT * FROM S3Object LIMIT 5 OFFSET 2", "ParseUnsupportedSyntax"),
    ("SELECT name FROM", "ParseUnexpectedToken"),
])
def test_sql_the_engine_cannot_run_gets_an_s3_code(expression, code):
    with pytest.raises(SelectRequestError) as info:
        to_engine_sql(expression)
    assert info.value.code == code and "<Token" not in str(info.value)


def test_end_to_end_csv_object_to_json_records():
    req = parse_select_request(boto_body())
    data = objects.write_table(TABLE, "csv")
    table = objects.read_table(data, fmt=req.input_format, csv_header=req.csv_header, csv_delimiter=req.csv_delimiter)
    out = objects.write_records(run_select(req.expression, table), req.output_format,
                                record_delimiter=req.output_record_delimiter)
    assert out == b'{"name":"ann"}\n{"name":"bob"}\n{"name":"dee"}\n'
