"""AWS Lambda's Python handler contract, so Lambda code runs unchanged (``lang: python3-lambda``).

Lambda calls ``handler(event, context)``: ``event`` is the invoke's JSON payload, ``context`` a
LambdaContext (``aws_request_id``, ``function_name``, ``get_remaining_time_in_millis()``, ...),
and what the handler returns is the answer, serialised as JSON. Which function is the handler is
Lambda's ``Handler`` setting, ``module.function``; here it is the function's ``_HANDLER``
environment variable (the name Lambda's own runtime reads it from), default ``handler.handler``,
the module a file of the handler folder (``pkg.mod`` is ``pkg/mod.py``).

Two event shapes, as Lambda has (``LAMBDA_EVENT`` in the environment):
- ``invoke`` (default): the body is the JSON payload (``aws lambda invoke --payload``; what SeBS
  and most ported code expect); an empty body is ``{}``; a body that is not JSON is the caller's
  400, naming it. The answer is ``json.dumps`` of the return value, ``application/json``.
- ``http``: a Function URL's payload format 2.0 (``version``, ``rawPath``, ``rawQueryString``,
  ``headers``, ``queryStringParameters``, ``requestContext.http.method``, ``body``,
  ``isBase64Encoded``); a returned dict with ``statusCode`` is an HTTP answer (``headers``,
  ``cookies``, ``body``, ``isBase64Encoded``), anything else JSON with 200, as Function URLs do.

Worked example: SeBS's ``handler(event, context)`` reading ``event["bucket"]["input"]`` is
deployed with ``lang: python3-lambda``; ``POST /function/compress`` with
``{"bucket": {...}, "object": {...}}`` calls it with that dict and ``context.aws_request_id`` set
to the call's id; it returns ``{"result": {...}, "measurement": {...}}``, which the caller gets as
JSON. ``boto3.client("s3")`` inside reaches the worker's S3 endpoint (docs/porting.md).

Known caveats: an exception is nearfaas's 502 (``error``, ``fix``), not Lambda's 200 with
``X-Amz-Function-Error``; ``context.identity`` and ``client_context`` are None; the ARN's account
is ``000000000000``. nearfaas's own context is there as ``context.nearfaas`` for code that wants
``context.nearfaas.objects``.
"""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import urlencode

from nearfaas.spec.lambda_entry import entry_point, event_shape  # noqa: F401 - the worker reads them here


class BadEvent(ValueError):
    """The call's body cannot be the event the handler expects: the caller's 400."""


class LambdaContext:
    """What Lambda's context object offers, for the call it stands for."""

    def __init__(self, function: str, call_id: str, instance: str, timeout_s: float, memory_mb: int, region: str, nearfaas=None):
        self.function_name = function
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:000000000000:function:{function}"
        self.memory_limit_in_mb = str(memory_mb)
        self.aws_request_id = call_id
        self.log_group_name = f"/aws/lambda/{function}"
        self.log_stream_name = instance
        self.identity = None
        self.client_context = None
        self.nearfaas = nearfaas
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def make_event(shape: str, body: bytes, method: str, path: str, query: dict, headers: dict, call_id: str):
    """The event the handler gets for one call (see the module's comment)."""
    if shape == "invoke":
        if not body.strip():
            return {}
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadEvent(f"the body must be the invoke's JSON payload ({exc}); send JSON, or deploy with "
                           "environment LAMBDA_EVENT: http to get Function URL events") from None
    try:
        text, encoded = body.decode(), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    lowered = {k.lower(): v for k, v in headers.items()}
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": urlencode(query),
        "headers": lowered, "queryStringParameters": dict(query) or None,
        "cookies": [c.strip() for c in lowered.get("cookie", "").split(";") if c.strip()] or None,
        "requestContext": {"http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                                    "sourceIp": lowered.get("x-forwarded-for", ""), "userAgent": lowered.get("user-agent", "")},
                           "requestId": call_id, "timeEpoch": int(time.time() * 1000)},
        "body": text or None, "isBase64Encoded": encoded,
    }


def make_answer(shape: str, result) -> dict:
    """The handler's return value as the worker's answer dict (statusCode, headers, body)."""
    if shape == "http" and isinstance(result, dict) and "statusCode" in result:
        body = result.get("body") or ""
        if result.get("isBase64Encoded"):
            body = base64.b64decode(body)
        headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
        if result.get("cookies"):
            headers["Set-Cookie"] = [str(c) for c in result["cookies"]]
        headers.setdefault("Content-Type", "application/json" if not isinstance(body, bytes) else "application/octet-stream")
        return {"statusCode": int(result["statusCode"]), "headers": headers, "body": body}
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps(result).encode()}
