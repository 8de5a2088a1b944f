"""How an application stage says "your input is wrong": a 4xx JSON answer that names the stage.

A stage raises ``StageError`` from library code; ``answer_for`` turns it into the handler's
python3-http answer ``{"statusCode": 4xx, "body": {"error", "stage", "fix"}}``. Nothing a
caller can get wrong (a corrupt image, an empty object, a wrong tensor, a model file that is
not ONNX) escapes as an exception, so the platform never reports it as a 502 crash.
"""

from __future__ import annotations

BAD_REQUEST = 400        # no input reference, an empty object
NOT_FOUND = 404          # the input object does not exist
UNSUPPORTED = 415        # not an accepted media type (image format, text encoding)
UNPROCESSABLE = 422      # the right kind of input, but unusable (corrupt, wrong shape, tokenizes to nothing)
MODEL_UNAVAILABLE = 424  # f2's model could not be loaded (a failed dependency of the call)


class StageError(Exception):
    """An input problem, reported to the caller as ``status`` with a message and a fix."""

    def __init__(self, status: int, error: str, fix: str = "", **detail):
        super().__init__(error)
        self.status = int(status)
        self.error = error
        self.fix = fix
        self.detail = detail

    def body(self, stage: str) -> dict:
        out = {"error": self.error, "stage": stage}
        if self.fix:
            out["fix"] = self.fix
        out.update(self.detail)
        return out


def answer_for(exc: StageError, stage: str) -> dict:
    """The handler's answer for an input problem at ``stage``."""
    return {"statusCode": exc.status, "headers": {"Content-Type": "application/json"}, "body": exc.body(stage)}
