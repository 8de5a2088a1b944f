"""The cluster spec loader (nearfaas.spec.cluster): defaults, round trips, one failing case per
rule, every problem collected, and fuzzing in which only SpecError may escape."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nearfaas.spec.cluster import DEFAULT_CLUSTER_FILE, ClusterSpec, NodeSpec, load_cluster, parse_cluster
from nearfaas.spec.errors import Problem, SpecError
from spec_test_helpers import FUZZ, mutations, problem_at, values


def cluster_problems(data: Any) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        parse_cluster(data)
    return info.value.problems


def test_cluster_defaults() -> None:
    spec = load_cluster(None)
    assert (spec.state_dir, spec.host, spec.gateway.port) == (".nearfaas", "127.0.0.1", 8080)
    assert spec.gateway.s3_max_body == 5 * 1024**3 and spec.gateway.invoke_max_body == 8 * 1024**2
    assert spec.placement == "near-data"
    assert [(n.name, n.kind, n.cls) for n in spec.nodes] == [
        ("storage-0", "storage", "dscs"), ("storage-1", "storage", "standard"), ("compute-0", "compute", "cpu")]
    assert all(n.port == 0 and n.workers_max >= 1 for n in spec.nodes)
    assert (spec.replication.factor, spec.replication.dscs_replica) == (2, True)
    assert (spec.replication.scheme, spec.replication.effective_scatter_width) == ("rendezvous", 2)
    assert spec.auth is not None and spec.auth.generated and spec.isolation  # secure unless asked otherwise
    assert spec.link.profile == "local"
    assert [n.name for n in spec.storage_nodes] == ["storage-0", "storage-1"] and spec.node("compute-0").cls == "cpu"


def test_default_cluster_file_parses_to_defaults() -> None:
    assert load_cluster(DEFAULT_CLUSTER_FILE) == load_cluster(None) == ClusterSpec()
    assert parse_cluster(None) == ClusterSpec() and parse_cluster({}) == ClusterSpec()


def test_cluster_round_trip_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "c.yml").write_text(
        "gateway: {port: 0, s3_max_body: 1GiB, read_timeout: 1m, max_inflight: 0}\n"
        "nodes:\n  - {name: s0, kind: storage, class: dscs, port: 9001}\n"
        "  - {name: c0, kind: compute, cls: cpu, workers_max: 1}\n"
        "replication: {factor: 1}\nplacement: compute-only\nauth: {access_key: AK, secret_key: SK}\nlink: {profile: dc-25g, rtt_ms: 2}\n")
    spec = load_cluster(str(tmp_path / "c.yml"))
    assert (spec.gateway.port, spec.gateway.s3_max_body, spec.gateway.read_timeout) == (0, 1024**3, 60.0)
    assert spec.nodes[1] == NodeSpec("c0", "compute", "cpu", 0, 1)
    assert spec.auth is not None and spec.auth.secret_key == "SK" and "SK" not in repr(spec)
    assert spec.link.options == {"rtt_ms": 2}
    assert ClusterSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


@pytest.mark.parametrize("data,path,text", [
    ({"nodes": [{"name": "c", "kind": "compute", "class": "cpu"}]}, "nodes", "storage node"),
    ({"nodes": [{"name": "s", "kind": "storage", "class": "dscs"}] * 2}, "nodes[1].name", "duplicate"),
    ({"replication": {"factor": 3}}, "replication.factor", "storage nodes"),
    ({"replication": {"factor": 0}}, "replication.factor", "at least 1"),
    ({"gateway": {"port": 70000}}, "gateway.port", "65535"),
    ({"gateway": {"port": -1}}, "gateway.port", "between 0"),
    ({"gateway": {"port": "http"}}, "gateway.port", "whole number"),
    ({"gatway": {}}, "gatway", 'did you mean "gateway"'),
    ({"nodes": [{"name": "s", "kind": "storage", "class": "cpu"}]}, "nodes[0].class", "cannot be class"),
    ({"nodes": [{"name": "s", "kind": "disk", "class": "dscs"}]}, "nodes[0].kind", "storage, compute"),
    ({"nodes": [{"name": "S 1", "kind": "storage", "class": "dscs"}]}, "nodes[0].name", "not a valid"),
    ({"nodes": [{"name": "s", "kind": "storage", "class": "dscs", "workers_max": 0}]}, "nodes[0].workers_max", ""),
    ({"nodes": [{"name": "s", "kind": "storage", "class": "standard"}]}, "replication.dscs_replica", "dscs"),
    ({"nodes": "three"}, "nodes", "list"),
    ({"auth": {"access_key": "AK"}}, "auth.secret_key", "missing"),
    ({"gateway": {"port": 9000}, "nodes": [{"name": "s", "kind": "storage", "class": "dscs", "port": 9000}]},
     "nodes[0].port", "gateway.port"),
    ({"gateway": {"s3_max_body": "huge"}}, "gateway.s3_max_body", "bad size"),
    ({"gateway": {"read_timeout": "soon"}}, "gateway.read_timeout", "bad duration"),
    ({"replication": {"dscs_replica": "yes please"}}, "replication.dscs_replica", "true or false"),
    ({"state_dir": ""}, "state_dir", "non-empty"),
    ({"placement": "random"}, "placement", "near-data"),
    ({"gateway": {"invoke_max_body": 0}}, "gateway.invoke_max_body", "at least 1 byte"),
    ({"gateway": {"namespaces": ["openfaas-fn", "Team_A"]}}, "gateway.namespaces[1]", "not a namespace name"),
    ({"gateway": {"namespaces": []}}, "gateway.namespaces", "the first is the default"),
    ({"gateway": {"namespaces": ["a", "a"]}}, "gateway.namespaces", "twice"),
    ({"replication": {"scheme": "random"}}, "replication.scheme", "rendezvous, copyset"),
    ({"replication": {"scatter_width": -2}}, "replication.scatter_width", "at least 0"),
    ({"nodes": [{"name": f"s{i}", "kind": "storage", "class": "dscs"} for i in range(5)],
      "replication": {"factor": 3, "scheme": "copyset", "scatter_width": 3}}, "replication.scatter_width", "multiple of factor - 1"),
    ({"nodes": [{"name": f"s{i}", "kind": "storage", "class": "dscs"} for i in range(4)],
      "replication": {"factor": 2, "scheme": "copyset", "scatter_width": 4}}, "replication.scatter_width", "exceeds the 3 other"),
])
def test_cluster_rules(data: dict[str, Any], path: str, text: str) -> None:
    data = copy.deepcopy(data)
    if "nodes" in data and "replication" not in data and isinstance(data["nodes"], list):
        data["replication"] = {"factor": 1, **({"dscs_replica": False} if path != "replication.dscs_replica" else {})}
    p = problem_at(cluster_problems(data), path)
    assert text in str(p)


def test_cluster_collects_all_problems() -> None:
    problems = cluster_problems({"gateway": {"port": 70000}, "host": 5, "replication": {"factor": "x"}})
    assert {"gateway.port", "host", "replication.factor"} <= {p.path for p in problems}


def test_cluster_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_cluster(tmp_path / "none.yml")
    (tmp_path / "bad.yml").write_text("gateway:\n  port: 1\n port: 2\n")
    with pytest.raises(SpecError, match="line"):
        load_cluster(tmp_path / "bad.yml")
    (tmp_path / "empty.yml").write_text("# nothing\n")
    assert load_cluster(tmp_path / "empty.yml") == ClusterSpec()
    (tmp_path / "list.yml").write_text("- a\n")
    with pytest.raises(SpecError, match="mapping"):
        load_cluster(tmp_path / "list.yml")
    with pytest.raises(SpecError):
        load_cluster(123)  # type: ignore[arg-type]


@FUZZ
@given(data=st.one_of(values, mutations(ClusterSpec().to_dict())))
def test_fuzz_cluster_only_raises_spec_error(data: Any) -> None:
    try:
        spec = parse_cluster(data)
    except SpecError as exc:
        str(exc)
    else:
        # link options are passed through untouched (and may hold NaN), so compare the rest
        again = ClusterSpec.from_dict(spec.to_dict())
        again.link = spec.link
        assert again == spec




def test_gateway_namespaces_default_to_openfaas_fn_and_keep_their_order() -> None:
    assert parse_cluster({}).gateway.namespaces == ["openfaas-fn"]
    spec = parse_cluster({"gateway": {"namespaces": ["team-a", "openfaas-fn"]}})
    assert spec.gateway.namespaces == ["team-a", "openfaas-fn"]
    assert parse_cluster(spec.to_dict()).gateway.namespaces == ["team-a", "openfaas-fn"]


def test_many_gateways_are_refused_where_they_cannot_share_their_state() -> None:
    assert parse_cluster({"gateway": {"replicas": 3}}).gateway.replicas == 3
    assert parse_cluster(parse_cluster({"gateway": {"replicas": 2}}).to_dict()).gateway.replicas == 2  # round trip
    for data, path, text in (({"gateway": {"replicas": 0}}, "gateway.replicas", "between 1 and 8"),
                             ({"gateway": {"replicas": 9}}, "gateway.replicas", "between 1 and 8"),
                             ({"gateway": {"replicas": 2}, "backend": "ray"}, "gateway.replicas", "one gateway actor"),
                             ({"gateway": {"replicas": 2}, "fastpath": {"enabled": True}}, "fastpath.enabled", "answers one gateway")):
        problem = problem_at(cluster_problems(data), path)
        assert text in problem.message, problem
