"""The one error a worker start raises (node/pool.py and the modules split from it).

Why a module of its own: the pool's helpers (secrets, volumes, profiling, spawning) raise it
too, and they must not import the pool, which imports them. Its ``status`` is the HTTP status
the node answers with: 400 for a fault in the function's spec, 503/504 for the node's.
"""

from __future__ import annotations


class PoolError(Exception):
    """A worker could not be started; the message says why and what to do."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status
