"""Deploying an application: its three functions as an OpenFaaS stack mapping, or as the REST
bodies ``POST /system/functions`` takes.

``stack_for`` is the single source of truth; ``deployment_bodies`` and the example files
``<key>/stack.yml`` are made from it (``python -m nearfaas.apps examples`` rewrites the examples,
and a test checks they still match).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from nearfaas.spec.bundle import pack

from .catalog import AppCard, get_app

PACKAGE_DIR = Path(__file__).resolve().parent
HANDLERS_DIR = PACKAGE_DIR / "handlers"
RESULT_BUCKET = "nearfaas-results"   # f3 writes s3://nearfaas-results/<app>/<call id>.json
INPUT_BUCKET = "nearfaas-apps"       # where `nearfaas apps run` uploads sample inputs
LANG = "python3-http"
GATEWAY = "http://127.0.0.1:8080"
EXEC_TIMEOUT = {"pre": "60s", "infer": {"tiny": "120s", "full": "600s"}, "notify": "30s"}


def model_facts(app_key: str, size: str) -> dict:
    """The model key, its input shape and its token vocabulary for (application, size); raises
    ValueError for a size the model does not have."""
    from nearfaas.models import MODELS

    card = get_app(app_key)
    model = MODELS[card.model]
    model.check_size(size)
    inputs = model.inputs(size)
    return {"model": card.model, "inputs": inputs, "outputs": model.outputs(size), "vocab": model.vocab}


def _environment(card: AppCard, which: str, size: str, facts: dict, model_path: str | None, webhook_url: str | None) -> dict:
    env = {"APP": card.key}
    if which == "pre":
        env["exec_timeout"] = EXEC_TIMEOUT["pre"]
        if card.input_kind == "image":
            env["INPUT_SHAPE"] = ",".join(str(d) for d in facts["inputs"][0][1])
        if card.input_kind == "text" and facts["vocab"]:
            env["VOCAB_SIZE"] = str(facts["vocab"])
        if card.key == "translation":
            env["TARGET_LANGUAGE"] = "French"
    elif which == "infer":
        env["exec_timeout"] = EXEC_TIMEOUT["infer"].get(size, "600s")
        env.update(MODEL_KEY=card.model, MODEL_SIZE=size, MODEL_PATH=str(model_path or ""))
    else:
        env["exec_timeout"] = EXEC_TIMEOUT["notify"]
        env["RESULT_BUCKET"] = RESULT_BUCKET
        if webhook_url:
            env["WEBHOOK_URL"] = webhook_url
    return env


def _labels(card: AppCard, which: str, size: str) -> dict:
    # One worker holds one model session; a full model (GPT-2 XL: 6 GB of weights) runs once per node.
    scale_max = {"pre": "4", "infer": "1" if size == "full" else "2", "notify": "2"}[which]
    return {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": scale_max, "nearfaas.app": card.key, "nearfaas.stage": which}


def _x(card: AppCard, which: str) -> dict:
    f1, f2, f3 = card.functions
    buckets = [INPUT_BUCKET, RESULT_BUCKET]  # all its S3 key may touch, with the chain's intermediates
    if which == "notify":  # DSCS-Serverless: function 3 always runs on a CPU of a compute node
        return {"placement": "compute", "buckets": buckets}
    nxt = f2 if which == "pre" else f3
    return {"accelerator": "dscs", "placement": "data", "inputs": ["input"], "chain": [nxt], "idempotent": True, "buckets": buckets}


def _functions(card: AppCard, size: str, model_path, webhook_url, handler_base: Path | None) -> dict:
    facts = model_facts(card.key, size)
    handlers = {"pre": card.pre_handler, "infer": "infer", "notify": "notify"}
    out = {}
    for which, name in zip(("pre", "infer", "notify"), card.functions, strict=True):
        folder = HANDLERS_DIR / handlers[which]
        handler = _relative(folder, handler_base) if handler_base else str(folder)
        out[name] = {"lang": LANG, "handler": handler,
                     "environment": _environment(card, which, size, facts, model_path, webhook_url),
                     "labels": _labels(card, which, size), "x-nearfaas": _x(card, which)}
    return out


def _relative(path: Path, base: Path) -> str:
    rel = os.path.relpath(path, base)
    return rel if rel.startswith("..") else "./" + rel


def stack_for(app_key: str, size: str = "tiny", model_path: str | Path | None = None, webhook_url: str | None = None) -> dict:
    """The OpenFaaS stack mapping of an application: f1 (``<app>-pre``) chains to f2
    (``<app>-infer``), which chains to f3 (``<app>-notify``). Handler paths are absolute, so it
    passes ``nearfaas.spec.stack.parse_stack(stack, any_base_dir)``. ``model_path`` is the
    .onnx file ``nearfaas.models.build(model, size)`` returned; f2 loads it at cold start."""
    card = get_app(app_key)
    return {"version": "1.0", "provider": {"name": "openfaas", "gateway": GATEWAY},
            "functions": _functions(card, size, model_path, webhook_url, None)}


def deployment_bodies(app_key: str, size: str = "tiny", model_path: str | Path | None = None,
                      webhook_url: str | None = None) -> list[dict]:
    """``POST /system/functions`` bodies for the application, in the order to send them: f3,
    f2, f1 (a chain's targets exist before the function that names them)."""
    stack = stack_for(app_key, size, model_path, webhook_url)
    bodies = []
    for name, fn in reversed(list(stack["functions"].items())):
        bodies.append({"service": name, "lang": fn["lang"], "bundle": pack(Path(fn["handler"])), "envVars": dict(fn["environment"]),
                       "labels": dict(fn["labels"]), "x-nearfaas": dict(fn["x-nearfaas"])})
    return bodies


# ---------------------------------------------------------------- the example files

EXAMPLE_SIZE = "tiny"


def example_model_path(app_key: str) -> str:
    card = get_app(app_key)
    return f'<set at deploy: the path nearfaas.models.build("{card.model}", "{EXAMPLE_SIZE}") returns>'


def example_path(app_key: str) -> Path:
    return PACKAGE_DIR / get_app(app_key).key / "stack.yml"


def example_stack(app_key: str) -> dict:
    """``stack_for(app, "tiny")`` as the example file holds it: handler paths relative to the
    file's folder and MODEL_PATH a placeholder that `nearfaas apps deploy` fills in."""
    card = get_app(app_key)
    base = example_path(app_key).parent
    return {"version": "1.0", "provider": {"name": "openfaas", "gateway": GATEWAY},
            "functions": _functions(card, EXAMPLE_SIZE, example_model_path(app_key), None, base)}


def example_yaml(app_key: str) -> str:
    card = get_app(app_key)
    f1, f2, f3 = card.functions
    header = (
        f"# {card.title} (DSCS-Serverless Table 1): {card.description}.\n"
        f"# {f1} ({card.f1}) -> {f2} ({card.f2}, {card.model_name}) -> {f3} ({card.f3}).\n"
        f"# Call the application by its first function: POST /function/{f1} with {{\"input\": {{\"bucket\": ..., \"key\": ...}}}}.\n"
        "#\n"
        "# Generated from nearfaas.apps.stack.stack_for (python -m nearfaas.apps examples); edit that, not this.\n"
        f"# MODEL_PATH is filled in at deploy: nearfaas apps deploy {card.key} --size tiny\n"
    )
    return header + yaml.safe_dump(example_stack(app_key), sort_keys=False, default_flow_style=False, width=120)


def write_examples() -> list[Path]:
    from .catalog import APPS

    written = []
    for key in APPS:
        path = example_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(example_yaml(key))
        written.append(path)
    return written
