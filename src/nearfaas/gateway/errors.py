"""How a call fails at the gateway: the status, a message naming the cause, and the layer to
blame (gateway, placement, node, worker, fastpath), as the X-Nearfaas-Layer header says."""

from __future__ import annotations


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

