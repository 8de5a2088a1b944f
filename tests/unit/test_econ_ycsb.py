"""The YCSB-A generator (econ/ycsb.py): deterministic, zipfian-skewed, half reads."""

from __future__ import annotations

import collections

import pytest

from nearfaas.econ.ycsb import Workload, Zipfian, fnv1a64, key


def test_the_same_seed_gives_the_same_operations():
    assert Workload(1000, seed=5).batch(50) == Workload(1000, seed=5).batch(50)
    assert Workload(1000, seed=5).batch(50) != Workload(1000, seed=6).batch(50)


def test_zipfian_ranks_fall_off_like_a_power_of_theta():
    import random

    z = Zipfian(1000, rng=random.Random(1))
    counts = collections.Counter(z.next() for _ in range(200_000))
    assert all(0 <= r < 1000 for r in counts)
    assert counts[0] > counts[1] > counts[5] > counts[50]
    # p(rank 0) / p(rank 9) = 10 ** 0.99 ~ 9.8 in the model; allow sampling noise.
    assert 7.5 < counts[0] / counts[9] < 12.5


def test_workload_a_is_half_reads_with_exact_value_sizes_over_scrambled_keys():
    ops = Workload(10_000, value_bytes=100, seed=2).batch(20_000)
    reads = sum(op[0] == "r" for op in ops)
    assert 0.48 < reads / len(ops) < 0.52
    assert all(len(op[2]) == 100 for op in ops if op[0] == "u")
    keys = collections.Counter(op[1] for op in ops)
    hottest = keys.most_common(1)[0][0]
    assert hottest != key(0)  # scrambled: the hottest key is not the first one
    assert all(k.startswith("user") and 0 <= int(k[4:]) < 10_000 for k in keys)
    assert fnv1a64(0) != fnv1a64(1)


@pytest.mark.parametrize("kwargs,text", [({"records": 0}, "records must be at least 1"), ({"read_share": 1.5}, "read_share"),
                                         ({"value_bytes": 0}, "value_bytes")])
def test_bad_parameters_are_refused(kwargs, text):
    with pytest.raises(ValueError, match=text):
        Workload(**({"records": 10} | kwargs))
