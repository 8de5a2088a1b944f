"""The eight DSCS applications on a running cluster: deploy one, run one (client side).

The model is built on this machine into ``<state>/models`` (the nodes share this filesystem, as
they share handler folders) and named to the inference stage by ``MODEL_PATH``; the three
stages are deployed over the OpenFaaS REST API. A run uploads a generated input with boto3 and
calls the application by its first function, so the chain, placement and breakdown are the
platform's own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import requests

from nearfaas.telemetry.headers import parse_link, parse_timing

class AppError(Exception):
    """Deploying or running an app failed; the message says where and what to do."""


def webhook_url(gateway: str, app: str) -> str:
    return f"{gateway}/system/webhooks/{app.replace('_', '-')}"


def deploy_app(gateway: str, state_dir: Path, key: str, size: str = "tiny", on_step=lambda message: None,
               wait_s: float = 120.0) -> dict:
    from nearfaas.apps import APPS, INPUT_BUCKET, RESULT_BUCKET, deployment_bodies
    from nearfaas.client import gateway_session
    from nearfaas.models import build

    card = _card(APPS, key)
    _ensure_buckets(gateway, state_dir, INPUT_BUCKET, RESULT_BUCKET)  # inputs arrive in one, notifications land in the other
    on_step(f"{key}: building model {card.model} ({size})")
    started = time.perf_counter()
    model = build(card.model, size, cache_dir=Path(state_dir).resolve() / "models")
    built_s = time.perf_counter() - started
    on_step(f"{key}: deploying {', '.join(card.functions)}")
    admin = gateway_session(state_dir)
    for body in deployment_bodies(key, size, str(model), webhook_url=webhook_url(gateway, key)):
        resp = admin.post(f"{gateway}/system/functions", json=body, timeout=60)
        if resp.status_code >= 300:
            raise AppError(f"deploying {body['service']} of {key} failed ({resp.status_code}): {resp.text.strip()}")
    deadline = time.monotonic() + wait_s
    for name in card.functions:
        on_step(f"{key}: waiting for {name} to warm up")
        while admin.get(f"{gateway}/system/function/{name}", timeout=10).json()["availableReplicas"] < 1:
            if time.monotonic() > deadline:
                raise AppError(f"{name} of {key} has no warm replica after {wait_s:g}s; see `nearfaas logs {name}`")
            time.sleep(0.1)
    return {"app": key, "size": size, "model": str(model), "model_build_s": built_s, "functions": list(card.functions)}


def run_app(gateway: str, state_dir: Path, key: str, policy: str | None = None, seed: int = 0, timeout: float = 600.0) -> dict:
    """Upload a generated input, call the app once; its answer, stages and measured breakdown."""
    from nearfaas.apps import APPS, INPUT_BUCKET, make_input
    from nearfaas.client import s3_client

    card = _card(APPS, key)
    data, content_type, name = make_input(key, seed)
    s3 = s3_client(gateway, state_dir)
    object_key = f"{key}/{name}"
    s3.put_object(Bucket=INPUT_BUCKET, Key=object_key, Body=data, ContentType=content_type)
    headers = {"X-Nearfaas-Policy": policy} if policy else {}
    started = time.perf_counter()
    resp = requests.post(f"{gateway}/function/{card.functions[0]}", json={"input": {"bucket": INPUT_BUCKET, "key": object_key}},
                         headers=headers, timeout=timeout)
    elapsed = time.perf_counter() - started
    try:
        answer = resp.json()
    except ValueError:
        answer = resp.text
    return {
        "app": key, "status": resp.status_code, "input": f"s3://{INPUT_BUCKET}/{object_key}", "input_bytes": len(data),
        "answer": answer, "failed_stage": resp.headers.get("X-Nearfaas-Chain-Failed"),
        "stages": json.loads(resp.headers.get("X-Nearfaas-Chain", "[]")),
        "timing": parse_timing(resp.headers.get("X-Nearfaas-Timing", "")), "link": parse_link(resp.headers.get("X-Nearfaas-Link", "")),
        "client_seconds": elapsed, "policy": resp.headers.get("X-Nearfaas-Policy"), "label": "measured on this machine",
    }


def _ensure_buckets(gateway: str, state_dir: Path, *names: str) -> None:
    from nearfaas.client import s3_client

    s3 = s3_client(gateway, state_dir)
    for name in names:
        s3.create_bucket(Bucket=name)  # creating one that exists is fine (us-east-1 semantics)


def _card(apps: dict, key: str):
    if key not in apps:
        raise AppError(f"unknown app {key!r}; choose one of: {', '.join(apps)} (see `nearfaas apps list`)")
    return apps[key]
