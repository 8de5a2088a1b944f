"""The OpenAPI document the gateway serves (/system/openapi.json) names every route the gateway's
REST API registers, and nothing it does not: clients generated from it see the real API."""

from __future__ import annotations

import types
from pathlib import Path

import yaml
from aiohttp import web

from nearfaas.gateway.api.functions import FunctionsAPI
from nearfaas.gateway.api.invoke import InvokeAPI
from nearfaas.gateway.api.memory import MemoryAPI
from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.gateway.api.query import QueryAPI
from nearfaas.gateway.api.secrets import SecretsAPI
from nearfaas.gateway.api.system import SystemAPI
from nearfaas.gateway.keys_api import KeysAPI
from nearfaas.gateway.webhooks import WebhookSink

DOC = Path(__file__).resolve().parents[2] / "src" / "nearfaas" / "gateway" / "openapi.yaml"


def test_the_openapi_document_lists_exactly_the_gateways_routes(tmp_path):
    app = web.Application()
    for part in (FunctionsAPI(None, None, tmp_path), SecretsAPI(tmp_path), SystemAPI(None, None, None),
                 InvokeAPI(types.SimpleNamespace(invoker=None), None, None, None, 1), MemoryAPI(None, None), QueryAPI(None, None),
                 Namespaces(None, tmp_path)):
        part.routes(app.router)
    KeysAPI(tmp_path / "keys", set()).routes(app)
    WebhookSink().routes(app)
    routes = {r.resource.canonical for r in app.router.routes()}
    documented = set(yaml.safe_load(DOC.read_text())["paths"])
    assert routes - documented == set(), "routes missing from openapi.yaml"
    assert documented - routes == set(), "openapi.yaml documents routes the gateway does not have"
