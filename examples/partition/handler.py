"""Partition an Arrow IPC object by the low bits of its particle ID, next to the data (issue 19).

Send {"input": {"bucket", "key"}, "parts": 4, "key": "id", "codec": "zstd", "method": "single"}.
Deployed with placement: data, it runs on the storage node that holds the object and reads it
through mmap; each part is written back as <key>.part<i> and the answer lists them with their
rows and bytes and the unpack / split / repack times (measured).
"""

import json

from nearfaas.bitar import Device
from nearfaas.dataservices.datasets import DatasetError
from nearfaas.dataservices.partition import CODECS, METHODS, partition


def _bad(message):
    return {"statusCode": 400, "headers": {"Content-Type": "application/json"}, "body": json.dumps({"error": message})}


def handle(event, context):
    if context.input is None:
        return _bad('send {"input": {"bucket": ..., "key": ...}, "parts": 4}')
    try:
        options = json.loads(event.body or b"{}")
    except ValueError:
        return _bad("the body must be JSON")
    parts, key = options.get("parts", 4), options.get("key", "id")
    codec, method = options.get("codec", "none"), options.get("method", "single")
    if codec not in CODECS or method not in METHODS or not isinstance(key, str):
        return _bad(f"codec must be one of {', '.join(CODECS)}, method one of {', '.join(METHODS)}, key a column name")
    data = context.objects.get(context.input)
    try:
        with Device("isal") as device:
            result = partition(data, parts, key, codec, method, device)
    except DatasetError as e:  # not Arrow, parts not a power of two, no such ID column
        return _bad(str(e))
    written = []
    for i, blob in enumerate(result.outputs):
        ref = {"bucket": context.input.bucket, "key": f"{context.input.key}.part{i}"}
        context.objects.put(ref, blob)
        written.append(ref)
    summary = result.summary() | {"outputs": written, "node": context.node,
                                  "read": "local mmap" if context.objects.is_local(context.input) else "remote via S3"}
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps(summary)}
