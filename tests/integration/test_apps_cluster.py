"""The eight DSCS applications end to end on a real local cluster, tiny models, both placements.

Each app is deployed the way `nearfaas apps deploy` does it (model built into the state dir,
three stages over REST), called by its first function with a generated input uploaded by boto3,
and must answer with a notification whose inference outputs have Table 1's dimensions.
"""

from __future__ import annotations

import json

import pytest
import requests
from conftest import start_cluster

from nearfaas.apps import APPS
from nearfaas.cluster import launcher
from nearfaas.jobs.apps import deploy_app, run_app, webhook_url
from nearfaas.models import MODELS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def apps_cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("apps") / "state"
    cluster = start_cluster(state)
    for key in APPS:
        deploy_app(cluster.url, state, key, "tiny")
    yield cluster
    launcher.down(state)


@pytest.mark.parametrize("key", list(APPS))
def test_every_app_runs_under_both_placements_with_table1_outputs(apps_cluster, key):
    card, model = APPS[key], MODELS[APPS[key].model]
    answers = {}
    for policy in ("near-data", "compute-only"):
        result = run_app(apps_cluster.url, apps_cluster.state_dir, key, policy)
        assert result["status"] == 200, result["answer"]
        stages = result["stages"]
        assert [s["function"] for s in stages] == list(card.functions)
        nodes = [s["node"] for s in stages]
        if policy == "near-data":
            assert nodes[:2] == ["storage-0", "storage-0"] and [s["target"] for s in stages[:2]] == ["dscs", "dscs"], stages
        else:
            assert set(nodes) == {"compute-0"}, stages
        # f3 reads f2's summary record only (hundreds of bytes), never the model's outputs
        # (PPE's are 3.6 MB): it is all that crosses the link to the compute node.
        assert stages[2]["link"]["read"] < 1024, stages[2]
        answers[policy] = result["answer"]
    for answer in answers.values():
        shapes = answer["output_shapes"]
        first_output = shapes[model.outputs("tiny")[0][0]]
        assert model.matches_table1(tuple(first_output)), (first_output, model.table1_output)
        assert answer["delivery"]["result"] == {"stored": answer["result"]}
    # Same input, same model: the same answer wherever it ran.
    assert answers["near-data"]["summary"] == answers["compute-only"]["summary"]
    events = apps_cluster.http.get(webhook_url(apps_cluster.url, key), timeout=10).json()
    assert len(events) >= 2 and events[-1]["event"]["app"] == key


def test_bad_inputs_get_a_4xx_naming_the_stage(apps_cluster):
    s3 = apps_cluster.s3()
    s3.put_object(Bucket="nearfaas-apps", Key="bad/corrupt.jpg", Body=b"\xff\xd8\xff\xe0 this is not really a JPEG")
    s3.put_object(Bucket="nearfaas-apps", Key="bad/empty.jpg", Body=b"")
    for key, why in (("bad/corrupt.jpg", "corrupt image"), ("bad/empty.jpg", "empty object")):
        resp = requests.post(f"{apps_cluster.url}/function/asset-damage-pre", json={"input": {"bucket": "nearfaas-apps", "key": key}},
                             timeout=60)
        assert 400 <= resp.status_code < 500, (why, resp.status_code, resp.text)
        assert resp.headers["X-Nearfaas-Chain-Failed"] == "asset-damage-pre"
        assert resp.json()["stage"] == "asset-damage-pre" and resp.json()["fix"], resp.text
    # A tensor of the wrong shape sent straight to the inference stage.
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.zeros((1, 3, 100, 100), dtype=np.float32))
    s3.put_object(Bucket="nearfaas-apps", Key="bad/tensor.npy", Body=buf.getvalue())
    resp = requests.post(f"{apps_cluster.url}/function/asset-damage-infer", json={"input": {"bucket": "nearfaas-apps", "key": "bad/tensor.npy"}},
                         timeout=60)
    assert 400 <= resp.status_code < 500 and "asset-damage-infer" in resp.text, resp.text
    assert "224" in resp.text  # names the shape it expected


def test_a_model_file_that_is_not_onnx_is_a_4xx_and_the_worker_survives(apps_cluster, tmp_path):
    from nearfaas.apps import deployment_bodies

    fake = tmp_path / "not-a-model.onnx"
    fake.write_text("definitely not protobuf")
    body = next(b for b in deployment_bodies("credit_risk", "tiny", str(fake)) if b["service"].endswith("-infer"))
    body["service"] = "broken-infer"
    assert apps_cluster.http.post(f"{apps_cluster.url}/system/functions", json=body, timeout=30).status_code == 202
    apps_cluster.wait_warm("broken-infer")
    for _ in range(2):  # the same warm worker answers both: nothing crashed
        resp = requests.post(f"{apps_cluster.url}/function/broken-infer", json={}, timeout=30)
        assert 400 <= resp.status_code < 500, resp.text
        assert "not-a-model.onnx" in resp.text and json.loads(resp.text)["stage"] == "broken-infer"
    pids = {i["id"] for i in apps_cluster.http.get(f"{apps_cluster.url}/system/function/broken-infer", timeout=10).json()["instances"]}
    assert len(pids) == 1


def test_cli_apps_run_prints_the_answer_and_the_stage_breakdown(apps_cluster):
    import subprocess
    import sys

    base = [sys.executable, "-m", "nearfaas.cli", "apps"]
    where = ["--state", str(apps_cluster.state_dir), "--gateway", apps_cluster.url]
    listed = subprocess.run([*base, "list", "--json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and {r["app"] for r in json.loads(listed.stdout)} == set(APPS)
    out = subprocess.run([*base, "run", "credit_risk", "--policy", "compute-only", "--json", *where], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == 200 and result["policy"] == "compute-only" and result["label"] == "measured on this machine"
    assert [s["node"] for s in result["stages"]] == ["compute-0"] * 3
    unknown = subprocess.run([*base, "run", "no_such_app", *where], capture_output=True, text=True, timeout=60)
    assert unknown.returncode != 0 and "choose one of" in unknown.stderr and "Traceback" not in unknown.stderr


def test_auto_starts_from_the_measured_stage_profile_of_the_same_model_size(cluster, scratch, functions_dir):
    from nearfaas.apps.profiles import load

    measured = load().compute_s("asset-damage-infer")
    assert measured, "benchmarks/results/apps.json has no asset-damage-infer (run benchmarks/apps.py)"
    scratch("asset-damage-infer", functions_dir / "echo", envVars={"MODEL_SIZE": "full"})
    status = cluster.http.get(f"{cluster.url}/system/function/asset-damage-infer", timeout=10).json()
    assert status["estimates"] == {"cpu": measured}
    scratch("asset-damage-infer", functions_dir / "echo", envVars={"MODEL_SIZE": "tiny"})  # redeployed: no full-size guess
    assert cluster.http.get(f"{cluster.url}/system/function/asset-damage-infer", timeout=10).json()["estimates"] == {}
