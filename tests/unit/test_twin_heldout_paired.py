"""The paired held-out check (nearfaas.twin.heldout_paired): a third set of networks fixed in code,
and errors taken per round against that round's kernel micro-benchmarks."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import onnx
import pytest

from nearfaas.apps import APPS
from nearfaas.twin import cpu_model as C
from nearfaas.twin import heldout, heldout_fresh
from nearfaas.twin import heldout_paired as H

RESULT_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu_validation.json"


def test_the_third_set_is_twelve_networks_of_four_families_unlike_every_earlier_one():
    models = H.build_all()
    assert len(models) == 12 and {heldout.family(n) for n in models} == {"mlp", "cnn", "dwcnn", "transformer"}
    for m in models.values():
        onnx.checker.check_model(m)
    assert not set(models) & (set(heldout.NETWORKS) | set(heldout_fresh.NETWORKS) | set(APPS))
    earlier = {heldout.digest(heldout.build(n)) for n in heldout.NETWORKS} | {heldout.digest(heldout_fresh.build(n)) for n in heldout_fresh.NETWORKS}
    assert not {heldout.digest(m) for m in models.values()} & earlier
    with pytest.raises(ValueError, match="unknown third held-out network"):
        H.build("mlp_small")


def test_a_models_error_is_the_median_over_rounds_of_its_rounds_own_kernels():
    """Three rounds whose GEMV weight-streaming rate differs 2x (as this host's DRAM did): each
    round's measured time is that round's prediction / (1 + e). Paired, the error is e exactly;
    predicted with one set of kernels for every round (unpaired), the DRAM-bound MLP is off."""
    cached = json.loads(RESULT_FILE.read_text())
    bench, overhead = cached["microbench"], cached["overhead"]["1"]
    names = ("mlp_gemv_deep", "transformer_seq32")
    models = {n: H.build(n) for n in names}
    rts, _ = heldout.runtime_graphs(models, {}, H.KEY)
    truth = {"mlp_gemv_deep": 0.07, "transformer_seq32": -0.04}
    rounds = []
    for r, scale in enumerate((1.0, 0.5, 0.8), start=1):
        kern = copy.deepcopy(overhead["kernels"])
        for g in kern["gemv"]:
            g["bytes_s"] *= scale
        ov = {**overhead, "kernels": kern}
        nets = {n: {"value_s": C.predict(bench, 1, C.skeleton_of(m), "runtime2", overhead=ov, rt=rts[f"third:{n}"])["seconds"]
                    / (1 + truth[n])} for n, m in models.items()}
        rounds.append({"round": r, "kernels": kern, "apps": {}, "networks": nets})
    record = {"threads": 1, "rounds": rounds, "digests": {n: heldout.digest(m) for n, m in models.items()}}
    out = H.evaluate(bench, overhead, rts, record, models, 0.10, 0.25)
    assert out["third_set"]["per_model_error"] == pytest.approx(truth, abs=1e-4)
    assert out["apps"] is None and out["pass"] is False  # no apps measured: nothing to pass on
    unpaired = out["unpaired"]["third_set"]["per_model_error"]
    assert abs(unpaired["mlp_gemv_deep"] - truth["mlp_gemv_deep"]) > 0.05
    lo, hi = out["error_range_over_rounds"]["net:mlp_gemv_deep"]
    assert lo == pytest.approx(hi, abs=1e-4)  # each round against its own kernels: the same error every round
    record["digests"]["mlp_gemv_deep"] = "another build"
    with pytest.raises(ValueError, match="measure the rounds again"):
        H.evaluate(bench, overhead, rts, record, models, 0.10, 0.25)


def test_rounds_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least one round"):
        H.measure_rounds(0)
