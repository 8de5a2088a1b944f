"""AWS Lambda's handler contract (runtime/lambda_style.py, spec/lambda_entry.py) and when a
failed call means the instance itself is spent (runtime/worker.persistent_fault)."""

from __future__ import annotations

import base64
import errno
import json

import pytest

from nearfaas.runtime import lambda_style as L
from nearfaas.runtime.worker import persistent_fault


def test_the_handler_setting_names_a_module_file_and_a_function():
    assert L.entry_point({}) == ("handler.py", "handler")
    assert L.entry_point({"_HANDLER": "lambda_function.lambda_handler"}) == ("lambda_function.py", "lambda_handler")
    assert L.entry_point({"_HANDLER": "pkg.sub.mod.run"}) == ("pkg/sub/mod.py", "run")
    for bad in ("lambda_function", "../x.handler", "a..b", "1mod.fn", "mod.fn()"):
        with pytest.raises(ValueError, match="module.function"):
            L.entry_point({"_HANDLER": bad})
    with pytest.raises(ValueError, match="LAMBDA_EVENT"):
        L.event_shape({"LAMBDA_EVENT": "sqs"})


def test_an_invoke_event_is_the_json_payload_and_the_answer_its_json():
    assert L.make_event("invoke", b'{"a": [1, 2]}', "POST", "/", {}, {}, "c1") == {"a": [1, 2]}
    assert L.make_event("invoke", b"  ", "POST", "/", {}, {}, "c1") == {}
    with pytest.raises(L.BadEvent, match="JSON payload"):
        L.make_event("invoke", b"plain text", "POST", "/", {}, {}, "c1")
    answer = L.make_answer("invoke", {"statusCode": 404, "x": 1})  # a direct invoke's dict is data, not HTTP
    assert answer["statusCode"] == 200 and json.loads(answer["body"]) == {"statusCode": 404, "x": 1}
    assert json.loads(L.make_answer("invoke", None)["body"]) is None


def test_a_function_url_event_and_a_proxy_answer():
    event = L.make_event("http", b"\xff\x00", "PUT", "/items", {"q": "1"}, {"Cookie": "a=1; b=2", "User-Agent": "ua"}, "c9")
    assert event["isBase64Encoded"] and base64.b64decode(event["body"]) == b"\xff\x00"
    assert event["cookies"] == ["a=1", "b=2"] and event["requestContext"]["http"]["method"] == "PUT"
    assert event["rawQueryString"] == "q=1" and event["requestContext"]["requestId"] == "c9"
    answer = L.make_answer("http", {"statusCode": 201, "body": base64.b64encode(b"\x01").decode(), "isBase64Encoded": True,
                                    "cookies": ["k=v"]})
    assert answer["statusCode"] == 201 and answer["body"] == b"\x01" and answer["headers"]["Set-Cookie"] == ["k=v"]
    assert L.make_answer("http", {"plain": "dict"})["statusCode"] == 200


def test_the_context_counts_down_to_the_timeout():
    ctx = L.LambdaContext("fn", "call-1", "fn-node-1", 2.0, 128, "eu-west-1")
    assert 0 < ctx.get_remaining_time_in_millis() <= 2000
    assert ctx.invoked_function_arn == "arn:aws:lambda:eu-west-1:000000000000:function:fn" and ctx.memory_limit_in_mb == "128"


def test_a_spent_tmp_or_fd_table_is_the_instances_fault_and_a_call_error_is_not(tmp_path):
    assert persistent_fault(OSError(errno.ENOSPC, "No space left on device"), str(tmp_path)).startswith("its /tmp")
    assert "file descriptor" in persistent_fault(OSError(errno.EMFILE, "Too many open files"), str(tmp_path))
    try:  # a library wrapping the ENOSPC in its own error: found through the cause
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise RuntimeError("could not save the archive") from inner
    except RuntimeError as wrapped:
        assert persistent_fault(wrapped, str(tmp_path)) is not None
    assert persistent_fault(ValueError("bad input"), str(tmp_path)) is None  # tmp_path's disk is not full
    assert persistent_fault(OSError(errno.ENOENT, "missing"), str(tmp_path / "nowhere")) is None
