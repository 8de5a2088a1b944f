import time


def handle(event, context):
    seconds = float(event.query.get("sleep", "0.5"))
    if seconds < 0:  # a handler that never returns
        while True:
            time.sleep(0.1)
    time.sleep(seconds)
    return f"slept {seconds}"
