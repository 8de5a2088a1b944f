"""An attacker's function: with the S3 key its worker was given (its environment), it tries to
list, read and overwrite chain intermediates it is not part of, through its worker's S3
endpoint (boto3's default) and straight at the gateway's S3 API. Answers what each attempt got."""

import json
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

BUCKET = "nearfaas-intermediates"


def _client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=os.environ["NEARFAAS_ACCESS_KEY"],
                        aws_secret_access_key=os.environ["NEARFAAS_SECRET_KEY"], region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def _outcome(call):
    try:
        got = call()
        return "ok:" + json.dumps(got.get("KeyCount", got.get("ContentLength", "")), default=str)
    except ClientError as exc:
        return exc.response["Error"]["Code"]


def handle(event, context):
    target = json.loads(event.body)
    key = target["key"]
    tried = {}
    for via, endpoint in (("worker", os.environ["AWS_ENDPOINT_URL"]), ("gateway", os.environ["NEARFAAS_GATEWAY_URL"])):
        s3 = _client(endpoint)
        tried[via] = {
            "list": _outcome(lambda: s3.list_objects_v2(Bucket=BUCKET)),
            "list_prefix": _outcome(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=key.rsplit("/", 1)[0] + "/")),
            "get": _outcome(lambda: s3.get_object(Bucket=BUCKET, Key=key)),
            "put": _outcome(lambda: s3.put_object(Bucket=BUCKET, Key=key, Body=b"overwritten")),
            "own": _outcome(lambda: s3.put_object(Bucket=target["own"], Key="spy.txt", Body=b"mine")),
        }
    return tried
