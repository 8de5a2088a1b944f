"""Stage 3 of the asset-damage chain: the notification service. Not acceleratable, so it runs
on a compute node; it reads only the small classification result."""

import json


def handle(event, context):
    result = json.loads(bytes(context.objects.get(context.input)))
    alert = result["label"] != "no-damage"
    return {"alert": alert, "label": result["label"], "tensor_sha256": result["tensor_sha256"],
            "message": f"asset damage detected: {result['label']}" if alert else "no damage"}
