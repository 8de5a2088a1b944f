"""How a call fails at the gateway: the status, a message naming the cause, and the layer to
blame (gateway, placement, node, worker, fastpath), as the X-Nearfaas-Layer header says."""

from __future__ import annotations

from contextvars import ContextVar
from collections.abc import Callable

# Whether a call may still be handed to a worker, asked right before it is (gateway/invoker.py).
# The async queue sets it for its consumers (gateway/async_queue.py): once it drains, a call
# that is still waiting for an instance (a cold start, a free slot) is answered "not started"
# (503) and stays in the journal for the restart, instead of starting with too little of the
# grace left, being cut off and running again. Every other caller keeps the default.
MAY_START: ContextVar[Callable[[], bool]] = ContextVar("may_start", default=lambda: True)


class CallError(Exception):
    """A call that failed before or around the function: status, message and the layer to blame."""

    def __init__(self, status: int, message: str, layer: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.layer, self.headers = status, layer, headers or {}



class NodeLost(Exception):
    """The node chosen for a call stopped answering; ``started`` says whether the call reached it."""

    def __init__(self, node: str, detail: str, started: bool):
        super().__init__(detail)
        self.node, self.detail, self.started = node, detail, started

