import json


def handle(event, context):
    print(f"echo called with {len(event.body)} bytes")
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"body": event.body.decode(errors="replace"), "method": event.method, "query": event.query,
                                "path": event.path, "node": context.node, "function": context.function,
                                "call_id": context.call_id, "input": context.input.to_dict() if context.input else None,
                                "local": context.objects.is_local(context.input) if context.input else None,
                                "greeting": context.environment.get("GREETING")})}
