"""f2 of every application: run the model on f1's tensor and write its summary record (JSON; the
model's outputs as .npz too with INFER_OUTPUT=tensors) to context.output, f3's input. The model
is loaded once, at cold start, from MODEL_PATH; if that fails, every call is answered 424 naming
this stage and the model file (the worker stays up)."""

import os

from nearfaas.apps.stages import Inference

_model = None


def init():
    global _model
    _model = Inference.from_env(os.environ)


def handle(event, context):
    if _model is None:  # run without the platform's init() call (tests, other runners)
        init()
    return _model.handle(event, context)
