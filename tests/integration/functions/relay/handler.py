"""A chain stage: takes its input object (the request body on the first stage), appends its own
name, and writes the result to context.output. SLEEP delays it; FAIL_AFTER_WRITE makes it
raise once its output is written."""

import os
import time


def handle(event, context):
    data = bytes(context.objects.get(context.input)) if context.input is not None else event.body
    time.sleep(float(os.environ.get("SLEEP", "0")))
    out = data + b"|" + context.function.encode()
    if context.output is not None:
        context.objects.put(context.output, out)
    if os.environ.get("FAIL_AFTER_WRITE"):
        raise RuntimeError("failing after writing my output, on purpose")
    return {"data": out.decode(), "node": context.node}
