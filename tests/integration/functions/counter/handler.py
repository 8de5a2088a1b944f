import os

CALLS = 0  # lives as long as the warm worker does


def handle(event, context):
    global CALLS
    CALLS += 1
    return {"calls": CALLS, "pid": os.getpid()}
