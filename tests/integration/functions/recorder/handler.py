"""Records every run of a call, then sleeps: the async-queue durability test's witness.

Body: {"record_to": <bucket>, "sleep": <seconds>}. Each run writes a new object
``runs/<call id>/<X-Call-Attempt>-<random>``, so a call that ran twice
shows up as two objects under one call id. It records *before* sleeping: a call still running
when the gateway is stopped has already left its mark, so rerunning it after a restart (instead
of letting it finish) is caught as a duplicate.
"""

import json
import time
import uuid


def handle(event, context):
    request = json.loads(event.body)
    attempt = next((v for k, v in event.headers.items() if k.lower() == "x-call-attempt"), "?")
    context.objects.put(f"s3://{request['record_to']}/runs/{context.call_id}/{attempt}-{uuid.uuid4().hex}", attempt.encode())
    time.sleep(float(request.get("sleep", 0)))
    return {"call_id": context.call_id, "attempt": attempt}
