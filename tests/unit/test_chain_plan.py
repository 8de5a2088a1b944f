"""Chain planning: pure, no server. The simulator walks chains with the same function."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nearfaas.placement.chain import ChainCycle, ChainError, StageMissing, intermediate_key, plan


def names(waves):
    return [[s.function for s in wave] for wave in waves]


def test_a_straight_chain_is_one_stage_per_wave():
    waves = plan("f1", {"f1": ["f2"], "f2": ["f3"], "f3": [], "unrelated": []})
    assert names(waves) == [["f1"], ["f2"], ["f3"]]
    assert waves[1][0].after == ("f1",) and waves[2][0].is_sink and not waves[0][0].is_sink


def test_fan_out_runs_side_by_side_and_a_join_waits_for_both():
    waves = plan("src", {"src": ["a", "b"], "a": ["join"], "b": ["mid"], "mid": ["join"], "join": []})
    assert names(waves) == [["src"], ["a", "b"], ["mid"], ["join"]]
    assert waves[-1][0].after == ("a", "mid")


@pytest.mark.parametrize("graph,kind,text", [({"f1": ["ghost"]}, StageMissing, "'ghost' is not deployed"),
                                            ({"f1": ["f2"], "f2": ["f1"]}, ChainCycle, "cycle")])
def test_bad_chains_say_what_is_wrong(graph, kind, text):
    with pytest.raises(kind, match=text) as caught:
        plan("f1", graph)
    assert isinstance(caught.value, ChainError)


def test_intermediate_keys_are_one_prefix_per_call():
    assert intermediate_key("app", "0f3a", "f1") == "app/0f3a/f1"


@given(st.dictionaries(st.sampled_from("abcdefg"), st.lists(st.sampled_from("abcdefg"), max_size=3), min_size=1))
def test_every_stage_comes_after_all_of_its_predecessors(graph):
    graph = {n: [m for m in succ if m > n] for n, succ in graph.items()}  # edges only "upwards": acyclic
    for succ in list(graph.values()):
        for m in succ:
            graph.setdefault(m, [])
    head = min(graph)
    position = {s.function: i for i, wave in enumerate(plan(head, graph)) for s in wave}
    for n in position:
        for m in graph[n]:
            assert position[m] > position[n]
