"""InputResolver: named objects, prefixes placed by where their bytes are, learned inputs."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.gateway.inputs import LEARNED_SHARE, PREFIX_TTL_S, InputResolver

REPLICAS = {"a": ["s0", "s1"], "b": ["s1", "s0"], "c": ["s1", "s2"], "d": ["s2", "s0"]}


def _replicas(ref):
    return REPLICAS[ref[1][-1]]


def _run(coro):
    return asyncio.run(coro)


def test_named_objects_come_first_and_unchanged():
    r = InputResolver(_replicas)
    refs, ordered, source = _run(r.resolve("f", [{"bucket": "x", "key": "k/a"}, {"bucket": "x", "key": "k/b"}]))
    assert (refs, ordered, source) == ([("x", "k/a"), ("x", "k/b")], {}, "named")


def test_a_prefix_puts_the_node_with_most_of_its_bytes_first():
    listed = {"p/": [("p/a", 10), ("p/b", 500), ("p/c", 300)]}

    async def lister(bucket, prefix, limit):
        return listed[prefix]

    r = InputResolver(_replicas, lister)
    refs, ordered, source = _run(r.resolve("f", [{"bucket": "x", "prefix": "p/"}]))
    # s1 holds a, b and c (810 bytes), s0 holds a and b (510), s2 holds c (300).
    assert source == "prefix" and refs[0] == ("x", "p/b")
    assert all(order[0] == "s1" for order in ordered.values()), ordered
    assert ordered[("x", "p/a")] == ["s1", "s0"]


def test_a_prefix_listing_is_reused_within_its_ttl_and_an_unlistable_one_costs_only_placement():
    now = [0.0]
    calls = []

    async def lister(bucket, prefix, limit):
        calls.append(prefix)
        if prefix == "broken/":
            raise OSError("node down")
        return [("p/a", 1)]

    r = InputResolver(_replicas, lister, clock=lambda: now[0])
    for _ in range(3):
        _run(r.resolve("f", [{"bucket": "x", "prefix": "p/"}]))
    now[0] += PREFIX_TTL_S + 0.1
    _run(r.resolve("f", [{"bucket": "x", "prefix": "p/"}]))
    assert calls == ["p/", "p/"]
    assert _run(r.resolve("f", [{"bucket": "x", "prefix": "broken/"}])) == ([], {}, "none")


def test_learned_inputs_only_for_calls_that_name_nothing_and_they_decay():
    r = InputResolver(_replicas)
    r.learn("f", json.dumps([["x", "k/a", 1000], ["x", "k/b", 10]]))
    refs, _, source = _run(r.resolve("f", []))
    assert source == "learned" and refs == [("x", "k/a")]  # k/b is under the share of the heaviest
    assert _run(r.resolve("f", [{"bucket": "y", "key": "k/c"}]))[2] == "named"
    assert _run(r.resolve("g", []))[2] == "none"  # per function
    for _ in range(12):
        r.learn("f", json.dumps([["x", "k/d", 1000]]))
    assert _run(r.resolve("f", []))[0] == [("x", "k/d")]  # the old input decayed away


def test_a_bad_read_report_teaches_nothing():
    r = InputResolver(_replicas)
    for bad in ("not json", "[[1]]", '{"a": 1}', "[[\"x\"]]"):
        r.learn("f", bad)
    assert r.learned_refs("f") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 10**9)), min_size=1, max_size=30))
def test_learned_weights_keep_the_heaviest_and_never_go_negative(reads):
    r = InputResolver(_replicas)
    for name, nbytes in reads:
        r.learn("f", json.dumps([["x", f"k/{name}", nbytes]]))
    weights = r.learned["f"]
    assert all(w >= 0 for w in weights.values())
    refs = r.learned_refs("f")
    if max(weights.values()) > 0:
        assert refs[0] == max(weights, key=weights.get)
        assert all(weights[ref] >= LEARNED_SHARE * max(weights.values()) for ref in refs)
