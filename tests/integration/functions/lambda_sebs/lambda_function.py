"""An AWS Lambda function as SeBS writes them, unchanged: handler(event, context), boto3 with no
endpoint, scratch files in /tmp, a dict back. Deployed with lang: python3-lambda and
_HANDLER: lambda_function.lambda_handler."""
import hashlib
import os

import boto3


def lambda_handler(event, context):
    s3 = boto3.client("s3")
    bucket, key = event["bucket"], event["key"]
    path = os.path.join("/tmp", context.aws_request_id)
    s3.download_file(bucket, key, path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    s3.upload_file(path, bucket, key + ".copy")
    os.remove(path)
    return {"sha256": digest, "request_id": context.aws_request_id, "function": context.function_name,
            "remaining_ms": context.get_remaining_time_in_millis(), "memory_mb": context.memory_limit_in_mb,
            "arn": context.invoked_function_arn}
