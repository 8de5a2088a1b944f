"""A deployment may list only secrets of its own namespace (gateway/api/secrets.py,
``unknown_listed``, called by the deploy in gateway/api/functions.py): a tenant-b function naming
tenant-a's secret is a 400 naming ``secrets[i]``, checked here without a cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nearfaas.gateway.api.common import SpecErrorResponse
from nearfaas.gateway.api.functions import FunctionsAPI
from nearfaas.gateway.api.namespaces import Namespaces


@pytest.fixture
def api(tmp_path):
    functions = FunctionsAPI(SimpleNamespace(functions={}), None, tmp_path, namespaces=Namespaces(["openfaas-fn", "tenant-a", "tenant-b"]))
    (functions.secrets.folder("tenant-a") / "db-password").write_text("a's")
    return functions


def _deploy(api, namespace: str, secrets: list[str]) -> dict:
    return api._spec_from_request({"service": "fn", "image": "docker.io/library/python:3", "secrets": secrets}, namespace)


def test_another_namespaces_secret_does_not_count(api):
    assert _deploy(api, "tenant-a", ["db-password"])["secrets"] == ["db-password"]
    for namespace in ("tenant-b", "openfaas-fn"):
        with pytest.raises(SpecErrorResponse) as refused:
            _deploy(api, namespace, ["db-password"])
        assert f"secrets[0]: namespace '{namespace}' has no secret 'db-password'" in str(refused.value)
        assert f'"namespace": "{namespace}"' in str(refused.value)  # how to create it there
    assert not (api.secrets.state_dir / "secrets-ns" / "tenant-b").exists()  # checking made no folder


def test_the_first_missing_one_is_named_with_how_to_create_it(api):
    (api.secrets.secrets_dir / "api-key").write_text("k")
    with pytest.raises(SpecErrorResponse) as refused:
        _deploy(api, "openfaas-fn", ["api-key", "API-KEY", "nope"])  # no secret could have that name
    assert "secrets[1]" in str(refused.value)
    with pytest.raises(SpecErrorResponse) as refused:
        _deploy(api, "openfaas-fn", ["api-key", "nope"])
    assert "secrets[1]" in str(refused.value) and "nearfaas secret create nope" in str(refused.value)
