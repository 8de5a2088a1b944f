"""The eight DSCS-Serverless applications (Table 1), each a chain f1 pre-processing → f2
inference → f3 notification, deployable on nearfaas. See docs/apps.md.

What a command line or a benchmark needs:

* ``APPS`` / ``get_app(key)``: the catalog (``AppCard``: title, description, model key, the
  three function names, input kind, sample content type);
* ``stack_for(key, size, model_path, webhook_url=None)``: the OpenFaaS stack mapping;
* ``deployment_bodies(key, size, model_path, webhook_url=None)``: REST bodies, f3 → f2 → f1;
* ``make_input(key, seed=0)``: (bytes, content type, object key suggestion);
* ``RESULT_BUCKET`` (f3's notification records) and ``INPUT_BUCKET`` (suggested for uploads).

Heavy modules (Pillow, tokenizers, ONNX Runtime) load only when a stage needs them.
"""

from .catalog import APPS, AppCard, get_app
from .stack import INPUT_BUCKET, RESULT_BUCKET, deployment_bodies, example_stack, model_facts, stack_for


def make_input(app_key: str, seed: int = 0) -> tuple[bytes, str, str]:
    """(bytes, content type, object key suggestion) of a realistic sample input; see inputs.py."""
    from .inputs import make_input as _make

    return _make(app_key, seed)


__all__ = [
    "APPS",
    "INPUT_BUCKET",
    "RESULT_BUCKET",
    "AppCard",
    "deployment_bodies",
    "example_stack",
    "get_app",
    "make_input",
    "model_facts",
    "stack_for",
]
