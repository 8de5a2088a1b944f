"""Copyset replication (placement/copysets.py, replicas.py): the copysets, the store's use of
them, the dscs-replica rule, and fewer data-losing failure triples than rendezvous hashing."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from nearfaas.econ import availability as av
from nearfaas.placement import copysets
from nearfaas.placement.replicas import Scheme, StorageNode, replicas_for, score

NAMES = [f"storage-{i}" for i in range(9)]


@pytest.mark.parametrize("nodes,factor,w", [(9, 3, 2), (9, 3, 4), (12, 3, 6), (8, 2, 2), (10, 2, 4)])
def test_permutations_give_w_m_over_r_minus_1_distinct_copysets(nodes, factor, w):
    names = [f"n{i}" for i in range(nodes)]
    sets = copysets.generate(names, factor, w)
    per_perm = math.ceil(nodes / factor)
    assert len(sets) == len(set(sets)) == (w // (factor - 1)) * per_perm
    assert all(len(set(cs)) == factor and set(cs) <= set(names) for cs in sets)
    assert {n for cs in sets for n in cs} == set(names)  # every node is in some copyset
    assert copysets.generate(list(reversed(names)), factor, w) == sets  # the same on every gateway


@pytest.mark.parametrize("w,factor,nodes,why", [(3, 3, 9, "multiple of factor - 1"), (0, 3, 9, "multiple"),
                                                (10, 3, 9, "exceeds the 8 other"), (2, 1, 9, "at least 2 copies")])
def test_bad_scatter_widths_are_refused_with_the_fix(w, factor, nodes, why):
    with pytest.raises(ValueError, match=why):
        copysets.check_scatter_width(w, factor, nodes)


def test_objects_only_ever_land_on_copysets_primary_first():
    ring = [StorageNode(n, "standard") for n in NAMES]
    scheme = Scheme("copyset", 4)
    sets = set(copysets.generate(NAMES, 3, 4))
    used = set()
    for i in range(3000):
        got = [n.name for n in replicas_for(ring, "b", f"k{i}", 3, scheme=scheme)]
        assert tuple(sorted(got)) in sets
        assert got == sorted(got, key=lambda n, i=i: -score(n, "b", f"k{i}"))
        used.add(tuple(sorted(got)))
    assert used == sets  # with enough objects every copyset is used


def test_the_dscs_replica_rule_holds_inside_copysets():
    ring = [StorageNode(n, "dscs" if i < 2 else "standard") for i, n in enumerate(NAMES)]
    sets = copysets.generate(NAMES, 3, 4, anchors=("storage-0", "storage-1"))
    assert all(sum(n in ("storage-0", "storage-1") for n in cs) == 1 for cs in sets)
    for i in range(500):
        got = replicas_for(ring, "b", f"k{i}", 3, dscs_replica=True, scheme=Scheme("copyset", 4))
        assert sum(n.cls == "dscs" for n in got) == 1
        assert tuple(sorted(n.name for n in got)) in set(sets)


def test_as_many_copies_as_nodes_is_every_node_whatever_the_scheme():
    ring = [StorageNode(n, "standard") for n in NAMES[:2]]
    got = replicas_for(ring, "b", "k", 2, scheme=Scheme("copyset", 2))
    assert {n.name for n in got} == set(NAMES[:2])


def _lost_objects(holders: list[frozenset], failed: set[str]) -> int:
    return sum(h <= failed for h in holders)


def test_random_triple_failures_lose_data_less_often_with_copysets_as_the_model_predicts():
    """The same 9-node cluster and 5,000 objects, 3 copies: rendezvous hashing against copysets
    (w = 4) under 300 random triple node failures."""
    ring = [StorageNode(n, "standard") for n in NAMES]
    rng = random.Random(11)
    triples = [set(rng.sample(NAMES, 3)) for _ in range(300)]
    losing = {}
    for name, scheme in (("rendezvous", Scheme()), ("copyset", Scheme("copyset", 4))):
        holders = [frozenset(n.name for n in replicas_for(ring, "b", f"obj-{i}", 3, scheme=scheme)) for i in range(5000)]
        losing[name] = sum(_lost_objects(holders, t) > 0 for t in triples)
        # The model's P(loss | 3 nodes fail): the share of triples that are some object's node set.
        masks = av.masks({tuple(sorted(h)) for h in holders}, NAMES)
        predicted = av.enumerate_counts(masks, 9, 1, 3, 0)["any"] / math.comb(9, 3)
        lo, hi = av.wilson(losing[name], len(triples))
        assert lo <= predicted <= hi, (name, losing[name], predicted)
    assert losing["copyset"] < losing["rendezvous"] / 5, losing
    assert losing["rendezvous"] == len(triples)  # every triple holds some object under rendezvous


def test_every_triple_is_enumerated_once():
    sets = copysets.generate(NAMES, 3, 4)
    hits = [t for t in itertools.combinations(NAMES, 3) if tuple(sorted(t)) in set(sets)]
    assert len(hits) == len(sets) == 6
