"""Chain-call keys and namespaced function keys (auth/function_keys.py), and how the gateway's
and a storage node's S3 auth treat them (issue 39, findings 4 and 8)."""

from __future__ import annotations

import pytest

from nearfaas.auth import function_keys
from nearfaas.spec.options import INTERMEDIATE_BUCKET

RUN = "3f" * 16


def test_a_namespaced_functions_key_parses_as_its_internal_name():
    assert function_keys.parse(function_keys.access_key("resize.team-b", 200001)) == ("resize.team-b", 200001)
    assert function_keys.parse(function_keys.access_key("resize", 7)) == ("resize", 7)
    for bad in ("nff.resize", "nff..7", "nff.a.b.c.7", "nff.Resize.7", "nfr.1.2.3"):
        assert function_keys.parse(bad) is None, bad


def test_a_chain_call_key_reaches_only_its_own_prefix_until_it_expires():
    cred = function_keys.run_credentials("s", "pipeline.team-b", RUN, now=1_700_000_000)
    access = cred["access_key"]
    assert access == f"nfr.{1_700_000_000 + function_keys.RUN_TTL_S}.{RUN}.pipeline.team-b"
    assert cred["secret_key"] == function_keys.secret_key("s", access) != function_keys.secret_key("t", access)
    assert function_keys.run_prefix(access, now=1_700_000_000) == f"pipeline.team-b/{RUN}/"
    assert function_keys.run_prefix(access, now=1_700_000_000 + function_keys.RUN_TTL_S + 1) is None  # expired
    assert function_keys.parse(access) is None and function_keys.run_prefix("nff.pipeline.7") is None
    may = function_keys.run_authorizer(f"pipeline.team-b/{RUN}/")
    assert may("s3:GetObject", INTERMEDIATE_BUCKET, f"pipeline.team-b/{RUN}/stage")
    assert may("s3:PutObject", INTERMEDIATE_BUCKET, f"pipeline.team-b/{RUN}/stage")
    assert not may("s3:GetObject", INTERMEDIATE_BUCKET, f"pipeline.team-b/{'00' * 16}/stage")  # another call
    assert not may("s3:PutObject", INTERMEDIATE_BUCKET, f"pipeline.team-b/{RUN}")  # not under the prefix
    assert not may("s3:ListBucket", INTERMEDIATE_BUCKET, None)  # a listing would name other calls


def test_a_chain_call_key_is_refused_for_a_bad_app_and_its_proof_is_checked():
    with pytest.raises(ValueError):
        function_keys.run_credentials("s", "Bad/App", RUN)
    cred = function_keys.run_credentials("s", "app", RUN)
    ok = f"app/{RUN}/x"
    assert function_keys.run_proof_ok("s", cred["access_key"], cred["secret_key"], INTERMEDIATE_BUCKET, ok, INTERMEDIATE_BUCKET)
    assert not function_keys.run_proof_ok("s", cred["access_key"], "0" * 64, INTERMEDIATE_BUCKET, ok, INTERMEDIATE_BUCKET)
    assert not function_keys.run_proof_ok("s", cred["access_key"], cred["secret_key"], "docs", ok, INTERMEDIATE_BUCKET)
    assert not function_keys.run_proof_ok("s", cred["access_key"], cred["secret_key"], INTERMEDIATE_BUCKET, "app/x", INTERMEDIATE_BUCKET)


def test_the_node_s3_port_takes_chain_call_keys_and_never_function_keys():
    from nearfaas.node.agent import _node_s3_auth

    auth = _node_s3_auth("s")
    cred = function_keys.run_credentials("s", "app", RUN)
    principal = auth.resolver(cred["access_key"])
    assert principal.secret_key == cred["secret_key"]
    assert principal.authorize("s3:PutObject", INTERMEDIATE_BUCKET, f"app/{RUN}/stage")
    assert not principal.authorize("s3:ListBucket", INTERMEDIATE_BUCKET)
    assert not principal.authorize("s3:GetObject", "docs", f"app/{RUN}/stage")
    assert auth.resolver(function_keys.access_key("app", 7)) is None


def test_the_gateway_gives_function_keys_no_intermediates_even_with_star():
    from types import SimpleNamespace

    from nearfaas.gateway.app import _function_key_resolver
    from nearfaas.spec.options import NearfaasOptions

    def invoker(buckets):
        options = NearfaasOptions(buckets=buckets)
        return SimpleNamespace(functions={"f.team-b": SimpleNamespace(spec={"uid": 9}, options=options)})

    for buckets in (["*"], ["docs"]):
        principal = _function_key_resolver(invoker(buckets), "s")("nff.f.team-b.9")
        assert principal is not None, buckets  # finding 8: a namespaced function's key is known
        assert principal.authorize("s3:GetObject", "docs", "k")
        for action, key in (("s3:ListBucket", None), ("s3:GetObject", f"f/{RUN}/x"), ("s3:PutObject", f"f/{RUN}/x")):
            assert not principal.authorize(action, INTERMEDIATE_BUCKET, key), (buckets, action)
    run = function_keys.run_credentials("s", "f.team-b", RUN)["access_key"]
    principal = _function_key_resolver(invoker(["docs"]), "s")(run)
    assert principal.authorize("s3:GetObject", INTERMEDIATE_BUCKET, f"f.team-b/{RUN}/x")
    assert not principal.authorize("s3:GetObject", "docs", "k")
