"""Shared by the spec loader tests: finding a problem by its path, and hypothesis strategies for
fuzzing (JSON-ish values over the spec's own vocabulary, and mutations of a valid document with
one path replaced by junk)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from nearfaas.spec.errors import Problem


def problem_at(problems: list[Problem], path: str) -> Problem:
    for p in problems:
        if p.path == path:
            return p
    raise AssertionError(f"no problem at {path!r}; got:\n" + "\n".join(map(str, problems)))

VOCAB = ["version", "provider", "functions", "name", "gateway", "fn", "lang", "handler", "image", "environment",
         "environment_file", "labels", "annotations", "limits", "requests", "secrets", "constraints", "x-nearfaas",
         "accelerator", "placement", "inputs", "chain", "keep_intermediates", "memory", "cpu", "exec_timeout",
         "read_timeout", "max_inflight", "com.openfaas.scale.min", "com.openfaas.scale.max",
         "com.openfaas.scale.zero", "python3-http", "./resize", "dscs", "data", "nodes", "kind", "class", "port",
         "workers_max", "replication", "factor", "dscs_replica", "auth", "access_key", "secret_key", "link",
         "profile", "state_dir", "host", "s3_max_body", "storage", "compute", "cpu", "standard"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                    st.sampled_from(VOCAB + ["1.0", "10s", "-1", "0", "", "\0", "1m30s", "../x"]))
keys = st.one_of(st.sampled_from(VOCAB), st.text(max_size=10), st.integers(), st.booleans(), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


def _mutate(base: Any, choice: int, junk: Any) -> Any:
    """A deep copy of `base` with the value at one path (picked by `choice`) replaced by junk."""
    data = copy.deepcopy(base)
    paths: list[tuple[Any, Any]] = [(None, None)]  # (container, key); (None, None) = the root
    stack = [data]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            paths.append((node, k))
            stack.append(v)
    container, key = paths[choice % len(paths)]
    if container is None:
        return junk
    container[key] = junk
    return data


def mutations(base: Any) -> st.SearchStrategy[Any]:
    return st.builds(_mutate, st.just(base), st.integers(min_value=0, max_value=500), values)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
