import time


def handle(event, context):
    """Keeps a core busy for ?ms= milliseconds (default 150): load the cpu autoscaler sees."""
    until = time.perf_counter() + float(event.query.get("ms", "150")) / 1000
    n = 0
    while time.perf_counter() < until:
        n += 1
    return f"spun {n}"
