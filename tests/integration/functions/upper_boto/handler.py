"""The `upper` function written as code for another platform would be: plain boto3, no nearfaas
import. Reads the object the request names, writes an upper-cased copy beside it."""

import json
import os

import boto3

s3 = boto3.client("s3")  # made at import, as most existing code does


def handle(event, context):
    doc = json.loads(event.body or b"{}")
    ref = doc.get("input") or {"bucket": os.environ.get("INPUT_BUCKET", ""), "key": os.environ.get("INPUT_KEY", "")}
    data = s3.get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()
    if doc.get("range"):
        part = s3.get_object(Bucket=ref["bucket"], Key=ref["key"], Range="bytes=0-9")["Body"].read()
        return {"range": part.hex(), "size": len(data)}
    out = {"bucket": ref["bucket"], "key": ref["key"] + ".upper"}
    if doc.get("multipart"):  # s3transfer: a multipart upload from a pool of threads
        import io

        from boto3.s3.transfer import TransferConfig

        s3.upload_fileobj(io.BytesIO(data.upper()), out["bucket"], out["key"],
                          Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
    else:
        s3.put_object(Bucket=out["bucket"], Key=out["key"], Body=data.upper())
    head = s3.head_object(Bucket=out["bucket"], Key=out["key"])
    return {"output": out, "size": head["ContentLength"], "endpoint": os.environ.get("AWS_ENDPOINT_URL", "")}
