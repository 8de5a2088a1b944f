"""nearfaas.apps.profiles: reading the measured per-stage profile (benchmarks/results/apps.json)
that the twin and the `auto` placement policy use, and LocalApp, the in-process runner with a
fake context that benchmarks/apps.py measures with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nearfaas.apps import RESULT_BUCKET, get_app, make_input, profiles, tensors
from nearfaas.apps.profiles import LocalApp, MemoryObjects, Profiles, StageFailed, load, stack_payloads
from nearfaas.models import build

ROOT = Path(__file__).resolve().parents[2]


def _stage(function: str, cpu1: float, cpu8: float | None = None) -> dict:
    s = {"function": function, "batch1": {"cpu_s": cpu1, "wall_s": cpu1 * 1.01, "repeats": 3}}
    if cpu8 is not None:
        s["batch8"] = {"total": {"cpu_s": cpu8, "wall_s": cpu8}, "per_item": {"cpu_s": cpu8 / 8, "wall_s": cpu8 / 8}, "repeats": 1}
    return s


def _profile() -> dict:
    return {
        "benchmark": "apps", "label": profiles.LABEL, "machine": {"cpu_count": 2},
        "apps": {
            "asset_damage": {"model": "resnet50", "size": "full", "params": 25530472,
                             "functions": ["asset-damage-pre", "asset-damage-infer", "asset-damage-notify"],
                             "stages": {"f1": _stage("asset-damage-pre", 0.004, 0.032),
                                        "f2": _stage("asset-damage-infer", 0.090, 0.650),
                                        "f3": _stage("asset-damage-notify", 0.0005)}},
            "credit_risk": {"model": "logreg", "size": "full", "params": 201,
                            "functions": ["credit-risk-pre", "credit-risk-infer", "credit-risk-notify"],
                            "stages": {"f1": _stage("credit-risk-pre", 0.001, 0.008),
                                       "f2": _stage("credit-risk-infer", 0.0004, 0.0005),
                                       "f3": _stage("credit-risk-notify", 0.0004)}},
        },
    }


def _write(tmp_path: Path, data, name="apps.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# ---------------------------------------------------------------- reading

def test_compute_s_reads_each_function_stage_at_batch_1_and_8(tmp_path):
    p = load(_write(tmp_path, _profile()))
    assert p and len(p) == 2 and p.label == profiles.LABEL and p.machine == {"cpu_count": 2}
    assert p.compute_s("asset-damage-pre") == 0.004
    assert p.compute_s("asset-damage-infer") == 0.090
    assert p.compute_s("asset-damage-infer", batch=8) == 0.650
    assert p.compute_s("asset-damage-notify", batch=1) == 0.0005
    assert p.compute_s("credit-risk-infer", 8) == 0.0005
    assert set(p.functions) == {f for a in _profile()["apps"].values() for f in a["functions"]}
    assert p.stage("asset-damage-infer")["batch1"]["repeats"] == 3
    assert p.stage("nope") is None


def test_compute_s_between_and_beyond_the_measured_batches(tmp_path):
    p = load(_write(tmp_path, _profile()))
    # the line through batch 1 (0.090) and batch 8 (0.650): 0.080 s per extra item
    assert p.compute_s("asset-damage-infer", 2) == pytest.approx(0.170)
    assert p.compute_s("asset-damage-infer", 4) == pytest.approx(0.330)
    assert p.compute_s("asset-damage-infer", 16) == pytest.approx(0.090 + 0.080 * 15)
    # f3 is measured at batch 1 only: one notification per item
    assert p.compute_s("asset-damage-notify", 3) == pytest.approx(0.0015)


def test_unknown_function_is_none_and_a_bad_batch_is_refused(tmp_path):
    p = load(_write(tmp_path, _profile()))
    assert p.compute_s("hello") is None
    assert p.compute_s("hello", batch=8) is None
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="batch"):
            p.compute_s("asset-damage-infer", bad)


def test_for_app_gives_a_copy_of_the_entry(tmp_path):
    p = load(_write(tmp_path, _profile()))
    entry = p.for_app("asset_damage")
    assert entry["model"] == "resnet50" and entry["params"] == 25530472
    assert entry["stages"]["f2"]["batch8"]["total"]["cpu_s"] == 0.650
    assert p.for_app("asset-damage") == entry  # the dashed form too
    entry["stages"]["f2"]["batch1"]["cpu_s"] = 99.0
    assert p.compute_s("asset-damage-infer") == 0.090  # the caller's copy, not the profile
    assert p.for_app("remote_sensing") == {}


def test_a_missing_file_is_an_empty_profile(tmp_path):
    p = load(tmp_path / "nothing-here.json")
    assert not p and len(p) == 0 and p.path == tmp_path / "nothing-here.json"
    assert p.compute_s("asset-damage-infer") is None
    assert p.for_app("asset_damage") == {}
    assert Profiles().functions == []


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"]["batch1"].update(cpu_s="fast"), "apps.asset_damage.stages.f2.batch1.cpu_s"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"]["batch1"].update(cpu_s=-0.1), "apps.asset_damage.stages.f2.batch1.cpu_s"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"]["batch1"].pop("cpu_s"), "apps.asset_damage.stages.f2.batch1.cpu_s"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f1"].pop("batch1"), "apps.asset_damage.stages.f1.batch1"),
    (lambda d: d["apps"]["asset_damage"]["stages"].pop("f3"), "apps.asset_damage.stages.f3"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"].update(function="other"), "apps.asset_damage.stages.f2.function"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"]["batch8"]["total"].update(cpu_s=None),
     "apps.asset_damage.stages.f2.batch8.total.cpu_s"),
    (lambda d: d["apps"]["asset_damage"]["stages"]["f2"]["batch8"].pop("total"), "apps.asset_damage.stages.f2.batch8.total"),
    (lambda d: d["apps"]["asset_damage"].update(functions=["a", "b"]), "apps.asset_damage.functions"),
    (lambda d: d["apps"]["asset_damage"].pop("model"), "apps.asset_damage.model"),
    (lambda d: d["apps"].update(credit_risk=[1, 2]), "apps.credit_risk"),
    (lambda d: d.update(apps=[]), "apps"),
])
def test_a_malformed_profile_names_the_file_and_the_field(tmp_path, mutate, field):
    data = _profile()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(ValueError) as err:
        load(path)
    assert str(path) in str(err.value) and f"field {field} " in str(err.value), err.value


def test_a_file_that_is_not_json_or_not_an_object_is_refused(tmp_path):
    path = _write(tmp_path, '{"apps": {', "broken.json")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        load(path)
    path = _write(tmp_path, "[1, 2]", "list.json")
    with pytest.raises(ValueError, match=r"list.json: field \(top level\) must be a JSON object"):
        load(path)


def test_default_path_is_the_repository_result_and_the_environment_overrides_it(tmp_path, monkeypatch):
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    assert profiles.default_path() == ROOT / "benchmarks" / "results" / "apps.json"
    path = _write(tmp_path, _profile(), "elsewhere.json")
    monkeypatch.setenv(profiles.ENV_VAR, str(path))
    assert profiles.default_path() == path
    p = load()
    assert p.path == path and p.compute_s("credit-risk-pre") == 0.001
    monkeypatch.setenv(profiles.ENV_VAR, str(tmp_path / "missing.json"))
    assert not load()


def test_the_repository_profile_is_valid_when_present(monkeypatch):
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    p = load()
    if not p:
        pytest.skip("benchmarks/results/apps.json has not been written")
    for key in p.apps:
        for name in get_app(key).functions:
            assert p.compute_s(name) is not None and p.compute_s(name) >= 0


# ---------------------------------------------------------------- measuring in-process

@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


def test_local_app_runs_the_three_stages_and_times_them(model_dir, monkeypatch):
    monkeypatch.delenv("WEBHOOK_URL", raising=False)
    with LocalApp("asset_damage", build("resnet50", "tiny", cache_dir=model_dir), size="tiny") as app:
        assert not app.fixed_batch_one and app.load_wall_s >= 0
        one, two, three = app.chain(make_input("asset_damage", 0)[0])
        assert [r.function for r in (one, two, three)] == list(get_app("asset_damage").functions)
        for run in (one, two, three):
            assert run.cpu_s > 0 and run.wall_s > 0
        arrays, _ = tensors.load(one.output)
        assert arrays[""].shape == (1, 3, 224, 224)
        assert two.answer["output_shapes"]["logits"] == [1, 1000] and two.extra["model_wall_s"] > 0
        assert three.output is None and three.answer["delivery"]["webhook"] == {"skipped": "WEBHOOK_URL is not set"}
        stored = json.loads(app.objects.read(three.answer["result"]))
        assert stored["summary"] == two.answer["summary"] and three.answer["result"].startswith(f"s3://{RESULT_BUCKET}/")

        # a batch of 8: f1's tensors stacked on the batch axis, one f2 call
        tensors8 = [app.pre(make_input("asset_damage", seed)[0]).output for seed in range(8)]
        batch = app.infer(stack_payloads(tensors8), one.answer)
        assert batch.answer["output_shapes"]["logits"] == [8, 1000]
    assert app.inference is None  # the model is freed


def test_stack_payloads_keeps_npz_arrays_and_the_first_metadata(model_dir):
    with LocalApp("chatbot", build("bert_base", "tiny", cache_dir=model_dir), size="tiny") as app:
        outs = [app.pre(make_input("chatbot", seed)[0]) for seed in range(3)]
        arrays, meta = tensors.load(stack_payloads([o.output for o in outs]))
        first, first_meta = tensors.load(outs[0].output)
        assert arrays["input_ids"].shape == (3, 128) and arrays["attention_mask"].shape == (3, 128)
        assert np.array_equal(arrays["input_ids"][0], first["input_ids"][0]) and meta == first_meta
        run = app.infer(stack_payloads([o.output for o in outs]), outs[0].answer)
        assert run.answer["output_shapes"]["start_logits"] == [3, 128]
    with pytest.raises(ValueError, match="no payloads"):
        stack_payloads([])
    with pytest.raises(ValueError, match="different arrays"):
        stack_payloads([tensors.npy_bytes(np.zeros((1, 2), np.float32)), tensors.npz_bytes({"a": np.zeros((1, 2))})])


def test_a_failing_stage_or_a_missing_model_raises_stage_failed(model_dir, tmp_path):
    with LocalApp("credit_risk", build("logreg", "tiny", cache_dir=model_dir), size="tiny") as app:
        with pytest.raises(StageFailed, match="credit-risk-pre answered 422"):
            app.pre(b'{"checking_status": "nonsense"}\n')
        with pytest.raises(StageFailed, match="credit-risk-infer answered 422"):
            app.infer(b"not a tensor")
    with pytest.raises(StageFailed, match="could not be loaded"):
        LocalApp("credit_risk", tmp_path / "missing.onnx", size="tiny")


def test_memory_objects_answer_404_for_a_missing_object():
    objects = MemoryObjects()
    objects.put("s3://b/k", b"abc")
    assert bytes(objects.get("s3://b/k")) == b"abc" and bytes(objects.get("b", "k")) == b"abc"
    with pytest.raises(Exception) as err:
        objects.get("s3://b/other")
    assert getattr(err.value, "status", None) == 404


def test_benchmark_quick_writes_a_profile_that_loads(tmp_path):
    out = tmp_path / "apps.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "apps.py"), "--quick", "--apps", "credit_risk,asset_damage",
                           "--cache", str(tmp_path / "models"), "--out", str(out)], capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr
    p = load(out)
    assert set(p.apps) == {"credit_risk", "asset_damage"} and p.label == profiles.LABEL
    entry = p.for_app("asset_damage")
    assert entry["size"] == "tiny" and entry["params"] > 0 and entry["fixed_batch_1"] is False
    assert entry["stages"]["f2"]["batch8"]["runs"] == 1 and entry["stages"]["f1"]["batch1"]["repeats"] >= 3
    assert "machine" in p.data and p.data["machine"]["cpu_count"] >= 1
    assert p.compute_s("asset-damage-infer", 8) > 0 and p.compute_s("credit-risk-notify") > 0


def test_a_deployment_is_seeded_only_with_its_own_model_size(tmp_path):
    import json

    from nearfaas.apps import profiles

    path = tmp_path / "apps.json"
    names = ["asset-damage-pre", "asset-damage-infer", "asset-damage-notify"]
    stages = {f: {"function": n, "batch1": {"cpu_s": v, "wall_s": v}} for f, n, v in zip(("f1", "f2", "f3"), names, (0.01, 0.5, 0.002), strict=True)}
    path.write_text(json.dumps({"label": profiles.LABEL, "apps": {"asset_damage": {
        "model": "resnet50", "size": "full", "functions": names, "stages": stages}}}))
    loaded = profiles.load(path)
    assert loaded.for_deployment({"name": "asset-damage-infer", "environment": {"MODEL_SIZE": "full"}}) == 0.5
    assert loaded.for_deployment({"name": "asset-damage-infer", "environment": {"MODEL_SIZE": "tiny"}}) is None
    assert loaded.for_deployment({"name": "unmeasured", "environment": {"MODEL_SIZE": "full"}}) is None
