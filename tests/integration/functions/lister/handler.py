"""Lists a prefix with context.objects.list and reads every object under it."""

import json


def handle(event, context):
    ref = json.loads(event.body)["input"]
    listed = context.objects.list(ref["bucket"], ref["prefix"])
    total = sum(len(context.objects.get(ref["bucket"], item["key"])) for item in listed)
    return {"keys": [item["key"] for item in listed], "sizes": [item["size"] for item in listed], "read": total}
