"""Which function of a ``lang: python3-lambda`` folder is the handler, and which event shape it
gets: read from its environment (``_HANDLER``, ``LAMBDA_EVENT``) when the stack is parsed, so a
bad value is the deploy's 400 naming the variable, and again by the worker that loads it
(runtime/lambda_style.py has the contract itself)."""

from __future__ import annotations

import re

DEFAULT_HANDLER = "handler.handler"
HANDLER_FORMAT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.[A-Za-z_]\w*$")
EVENT_SHAPES = ("invoke", "http")


def entry_point(environment: dict) -> tuple[str, str]:
    """(module file relative to the handler folder, function name) of ``_HANDLER``; ValueError
    naming the fix when it is malformed."""
    value = str((environment or {}).get("_HANDLER") or DEFAULT_HANDLER)
    if not HANDLER_FORMAT.match(value):
        raise ValueError(f"_HANDLER {value!r} is not module.function (Lambda's Handler setting), e.g. lambda_function.lambda_handler")
    module, _, function = value.rpartition(".")
    return module.replace(".", "/") + ".py", function


def event_shape(environment: dict) -> str:
    shape = str((environment or {}).get("LAMBDA_EVENT") or "invoke")
    if shape not in EVENT_SHAPES:
        raise ValueError(f"LAMBDA_EVENT {shape!r} is not one of {', '.join(EVENT_SHAPES)}")
    return shape
