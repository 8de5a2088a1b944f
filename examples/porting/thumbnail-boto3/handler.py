"""A thumbnailer as written for AWS Lambda: plain boto3, no nearfaas import (docs/porting.md).
Input {"input": {"bucket", "key"}}; writes <key>.thumb.jpg beside it."""

import io
import json

import boto3
from PIL import Image

s3 = boto3.client("s3")


def handle(event, context):
    ref = json.loads(event.body)["input"]
    image = Image.open(io.BytesIO(s3.get_object(Bucket=ref["bucket"], Key=ref["key"])["Body"].read()))
    image.thumbnail((200, 200))
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=85)
    s3.put_object(Bucket=ref["bucket"], Key=ref["key"] + ".thumb.jpg", Body=out.getvalue(), ContentType="image/jpeg")
    return {"bucket": ref["bucket"], "key": ref["key"] + ".thumb.jpg", "bytes": out.tell()}
