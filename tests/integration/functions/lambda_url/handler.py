"""A Lambda behind a Function URL (LAMBDA_EVENT: http): the payload 2.0 event, a proxy answer."""
import json


def handler(event, context):
    return {"statusCode": 201, "headers": {"X-Seen-Method": event["requestContext"]["http"]["method"]},
            "cookies": ["a=1", "b=2"],
            "body": json.dumps({"path": event["rawPath"], "query": event["queryStringParameters"], "body": event["body"],
                                "request_id": event["requestContext"]["requestId"] == context.aws_request_id})}
