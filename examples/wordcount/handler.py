"""Count words and lines of a text object, and report whether the bytes were local."""

import json


def handle(event, context):
    if context.input is None:
        return {"statusCode": 400, "body": "send {\"input\": {\"bucket\": ..., \"key\": ...}}"}
    data = context.objects.get(context.input)
    local = context.objects.is_local(context.input)
    text = bytes(data).decode("utf-8", errors="replace")
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({
            "object": f"s3://{context.input.bucket}/{context.input.key}",
            "bytes": len(data),
            "words": len(text.split()),
            "lines": text.count("\n"),
            "node": context.node,
            "read": "local mmap (zero-copy)" if local else "remote via S3",
        }),
    }
