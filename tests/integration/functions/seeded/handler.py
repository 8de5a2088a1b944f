"""A library with thread-bound state, as igraph has: its random numbers come from Python's
`random` only on the thread that imported it; any other thread gets a generator of its own,
never seeded by `random.seed`."""

import random
import threading

_state = threading.local()
_state.rng = random  # the importing thread


def _rng():
    rng = getattr(_state, "rng", None)
    if rng is None:
        rng = _state.rng = random.Random()  # seeded from the OS: differs on every thread
    return rng


def handle(event, context):
    random.seed(int(event.query.get("seed", "42")))
    return {"draws": [_rng().random() for _ in range(3)], "thread": threading.current_thread().name}
