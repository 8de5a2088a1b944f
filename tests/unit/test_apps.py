"""The eight DSCS-Serverless applications (nearfaas.apps), run in-process: each chain's handler
files are called f1 → f2 (a tiny model) → f3 with a fake object client, as the worker would
call them, and every kind of bad input must come back as a 4xx naming the stage."""

from __future__ import annotations

import http.server
import importlib.util
import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from nearfaas.apps import APPS, deployment_bodies, example_stack, get_app, make_input, stack_for
from nearfaas.apps import stages, tensors
from nearfaas.apps.postprocess import SEVERITIES
from nearfaas.apps.stack import HANDLERS_DIR, RESULT_BUCKET, example_path, example_yaml
from nearfaas.models import MODELS, build
from nearfaas.runtime.context import Context, Event, ObjectError, ObjectRef, Secrets
from nearfaas.runtime.worker import to_response
from nearfaas.spec.stack import load_stack, parse_stack

KEYS = ("credit_risk", "asset_damage", "ppe_detection", "clinical_analysis", "content_moderation", "chatbot", "translation",
        "remote_sensing")
MODEL_OF = {"credit_risk": "logreg", "asset_damage": "resnet50", "ppe_detection": "yolov3", "clinical_analysis": "fcn",
            "content_moderation": "efficientnet", "chatbot": "bert_base", "translation": "gpt2_xl", "remote_sensing": "vit_huge"}
# Table 1's output of each application, and the model output that carries it.
TABLE1_OUTPUT = {"credit_risk": ("probability", (1,)), "asset_damage": ("logits", (1, 1000)),
                 "ppe_detection": ("detections_52", (255, 52, 52)), "clinical_analysis": ("out", (3, 224, 224)),
                 "content_moderation": ("logits", (1000,)), "chatbot": ("last_hidden_state", (128, 768)),
                 "translation": ("next_token_ids", (1, 128)), "remote_sensing": ("logits", (1000,))}


# ---------------------------------------------------------------- fakes and helpers

class FakeObjects:
    """The object client a handler sees, over a dict: get gives a memoryview (as an mmap would)."""

    def __init__(self):
        self.store: dict[tuple[str, str], bytes] = {}
        self.fail_puts_to: set[str] = set()

    def get(self, ref, key=None):
        ref = ObjectRef(ref, key) if key is not None else ObjectRef.parse(ref)
        if (ref.bucket, ref.key) not in self.store:
            raise ObjectError(404, ref, b"<Error><Code>NoSuchKey</Code></Error>")
        return memoryview(self.store[(ref.bucket, ref.key)])

    def put(self, ref, data, key=None, content_type="application/octet-stream"):
        ref = ObjectRef(ref, key) if key is not None else ObjectRef.parse(ref)
        if ref.bucket in self.fail_puts_to:
            raise ObjectError(404, ref, b"<Error><Code>NoSuchBucket</Code></Error>")
        self.store[(ref.bucket, ref.key)] = bytes(data)
        return ref.to_dict()


def load_handler(folder: str):
    path = HANDLERS_DIR / folder / "handler.py"
    spec = importlib.util.spec_from_file_location(f"apps_handler_{folder}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def model_paths(model_dir) -> dict[str, Path]:
    return {key: build(MODEL_OF[key], "tiny", cache_dir=model_dir) for key in KEYS}


class Chain:
    """One application deployed in-process: its stack's environments and handler modules."""

    def __init__(self, key: str, model_path, monkeypatch, webhook_url=None):
        self.card = get_app(key)
        self.stack = stack_for(key, "tiny", model_path, webhook_url)
        self.objects = FakeObjects()
        self.handlers = {}
        for name, fn in self.stack["functions"].items():
            module = load_handler(Path(fn["handler"]).name)
            if hasattr(module, "init"):
                with monkeypatch.context() as m:
                    for k, v in fn["environment"].items():
                        m.setenv(k, v)
                    module.init()
            self.handlers[name] = module

    def env(self, name: str) -> dict:
        return dict(self.stack["functions"][name]["environment"])

    def call(self, name: str, input_ref, body: dict | None = None, output=True, env: dict | None = None):
        out = ObjectRef("nearfaas-intermediates", f"{self.card.key}/run-1/{name}") if output else None
        ref = ObjectRef.parse(input_ref) if input_ref is not None else None
        context = Context(function=name, node="storage-0", call_id=f"call-1/{name}", input=ref, objects=self.objects,
                          secrets=Secrets(None), output=out, environment=env or self.env(name))
        payload = body if body is not None else ({"input": ref.to_dict()} if ref else {})
        answer = self.handlers[name].handle(Event(body=json.dumps(payload).encode(), headers={}), context)
        status, _, raw = to_response(answer)  # what the worker would send
        return status, json.loads(raw), out

    def put(self, data: bytes, key="upload/object") -> str:
        self.objects.put("s3://inputs/" + key, data)
        return "s3://inputs/" + key

    def run(self, data: bytes, infer_env: dict | None = None):
        """f1 → f2 → f3 as the gateway's chain runner calls them; returns the three answers.
        ``infer_env`` is added to f2's environment (INFER_OUTPUT=tensors, for instance)."""
        f1, f2, f3 = self.card.functions
        answers = {}
        s1, a1, o1 = self.call(f1, self.put(data))
        answers[f1] = (s1, a1)
        body = {"input": o1.to_dict(), "inputs": [o1.to_dict()], "previous": {f1: a1}, "app": f1, "call_id": "call-1"}
        s2, a2, o2 = self.call(f2, o1, body, env=self.env(f2) | infer_env if infer_env else None)
        answers[f2] = (s2, a2)
        body = {"input": o2.to_dict(), "inputs": [o2.to_dict()], "previous": {f2: a2}, "app": f1, "call_id": "call-1"}
        s3, a3, _ = self.call(f3, o2, body)
        answers[f3] = (s3, a3)
        return answers, o1, o2


def assert_stage_error(status: int, body: dict, stage: str, codes=range(400, 500)):
    assert status in codes, (status, body)
    assert body["stage"] == stage, body
    assert body["error"] and isinstance(body["error"], str)
    assert body.get("fix"), body


# ---------------------------------------------------------------- catalog

def test_catalog_has_the_eight_applications_of_table_1():
    assert tuple(APPS) == KEYS
    for key, card in APPS.items():
        assert card.model == MODEL_OF[key] and card.model in MODELS
        slug = key.replace("_", "-")
        assert card.functions == (f"{slug}-pre", f"{slug}-infer", f"{slug}-notify")
        assert card.entry == f"{slug}-pre"
        assert card.input_kind in ("image", "text", "records")
        assert card.title and card.description and card.content_type
        assert get_app(slug) is card and get_app(card.functions[1]) is card
    assert APPS["credit_risk"].description == "Identify positive and negative credit risks for loan approval"
    with pytest.raises(KeyError):
        get_app("nope")


# ---------------------------------------------------------------- whole chains

@pytest.mark.parametrize("key", KEYS)
def test_chain_runs_each_application_with_its_tiny_model(key, model_paths, monkeypatch):
    chain = Chain(key, model_paths[key], monkeypatch)
    data, content_type, object_key = make_input(key, seed=3)
    assert content_type == chain.card.content_type and object_key.startswith(chain.card.slug + "/")
    answers, o1, o2 = chain.run(data)
    f1, f2, f3 = chain.card.functions
    for name in (f1, f2, f3):
        assert answers[name][0] == 200, answers[name]
        assert answers[name][1]["stage"] == name

    # f1 wrote the model-ready tensors, of the model's input shapes and dtypes
    arrays, meta = tensors.load(chain.objects.store[(o1.bucket, o1.key)])
    model_inputs = MODELS[chain.card.model].inputs("tiny")
    if "" in arrays:
        (name, shape, dtype), = model_inputs
        got = arrays[""]
        assert got.dtype == np.dtype(dtype) and got.shape[1:] == tuple(shape[1:])
    else:
        for name, shape, dtype in model_inputs:
            assert arrays[name].shape == tuple(shape) and arrays[name].dtype == np.dtype(dtype)

    # f2 wrote its record (summary, output shapes) and nothing else: that is all f3 reads
    written = chain.objects.store[(o2.bucket, o2.key)]
    record = stages.read_result(written)
    a2 = answers[f2][1]
    assert written == json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    assert a2["format"] == "json" and a2["bytes"] == len(written)
    assert record == {"app": key, "model": chain.card.model, "size": "tiny", "summary": json.loads(json.dumps(a2["summary"])),
                      "output_shapes": a2["output_shapes"]}
    # Table 1's output dimensions, reported and (with INFER_OUTPUT=tensors) written
    name, dims = TABLE1_OUTPUT[key]
    shape = tuple(record["output_shapes"][name])
    assert MODELS[chain.card.model].matches_table1(shape), (name, shape, dims)
    assert tuple(shape[-len(dims):]) == dims
    outputs, meta = tensors.load(_infer_tensors(chain, o1, answers[f1][1]))
    assert outputs[name].shape == shape and meta == record

    # f3 built the notification, stored it, and returned it
    event = answers[f3][1]
    assert event["app"] == key and event["call_id"] == "call-1" and event["severity"] in SEVERITIES
    assert event["summary"] == record["summary"]
    assert event["delivery"]["webhook"] == {"skipped": "WEBHOOK_URL is not set"}
    stored = json.loads(chain.objects.store[(RESULT_BUCKET, f"{key}/call-1.json")])
    assert stored == {k: v for k, v in event.items() if k not in ("delivery", "stage")}
    assert event["result"] == f"s3://{RESULT_BUCKET}/{key}/call-1.json"
    _check_summary(key, a2["summary"], answers[f1][1])


def _infer_tensors(chain: Chain, o1, pre_answer: dict) -> bytes:
    """f2 run again on f1's output with INFER_OUTPUT=tensors: the .npz of the model's outputs."""
    f1, f2, _ = chain.card.functions
    body = {"input": o1.to_dict(), "inputs": [o1.to_dict()], "previous": {f1: pre_answer}, "app": f1, "call_id": "call-1"}
    status, answer, o2 = chain.call(f2, o1, body, env=chain.env(f2) | {"INFER_OUTPUT": "tensors"})
    assert status == 200 and answer["format"] == "npz", answer
    return chain.objects.store[(o2.bucket, o2.key)]


@pytest.mark.parametrize("key", KEYS)
def test_f3_reads_only_f2s_summary_and_notifies_the_same_as_from_the_tensors(key, model_paths, monkeypatch):
    """f2 writes its small record for f3, not the model's outputs (PPE's are 3.6 MB), and the
    notification is the one f3 makes from the full .npz (INFER_OUTPUT=tensors)."""
    chain = Chain(key, model_paths[key], monkeypatch)
    data = make_input(key, seed=0)[0]
    f1, f2, f3 = chain.card.functions
    answers, _, o2 = chain.run(data)
    summary_bytes = len(chain.objects.store[(o2.bucket, o2.key)])
    full_answers, _, o2 = chain.run(data, {"INFER_OUTPUT": "tensors"})
    tensor_bytes = len(chain.objects.store[(o2.bucket, o2.key)])
    assert answers[f2][1]["bytes"] == summary_bytes and full_answers[f2][1]["bytes"] == tensor_bytes
    assert summary_bytes < 1024 and summary_bytes < tensor_bytes, (summary_bytes, tensor_bytes)
    if key == "ppe_detection":
        assert tensor_bytes > 3_000_000 and summary_bytes * 1000 < tensor_bytes
    assert answers[f3][0] == full_answers[f3][0] == 200
    same = {k: v for k, v in answers[f3][1].items() if k != "time"}
    assert json.dumps(same) == json.dumps({k: v for k, v in full_answers[f3][1].items() if k != "time"})


def test_an_unknown_infer_output_is_a_400_naming_the_stage(model_paths, monkeypatch):
    chain = Chain("asset_damage", model_paths["asset_damage"], monkeypatch)
    tensor = tensors.npy_bytes(np.zeros((1, 3, 224, 224), np.float32))
    status, body, out = chain.call("asset-damage-infer", chain.put(tensor), env=chain.env("asset-damage-infer") | {"INFER_OUTPUT": "all"})
    assert_stage_error(status, body, "asset-damage-infer", codes=(400,))
    assert "INFER_OUTPUT" in body["error"] and (out.bucket, out.key) not in chain.objects.store


def _check_summary(key: str, summary: dict, pre: dict) -> None:
    if key == "credit_risk":
        assert summary["records"] == pre["records"] == pre["tensors"]["features"]["shape"][0]
        assert summary["refer"] + summary["approve"] == summary["records"]
        assert 0.0 <= summary["probability"] <= 1.0
    elif key in ("asset_damage", "content_moderation", "remote_sensing"):
        top = summary["top5"]
        assert len(top) == 5 and all(0 <= t["class"] < 1000 for t in top)
        assert [t["probability"] for t in top] == sorted((t["probability"] for t in top), reverse=True)
    elif key == "ppe_detection":
        assert summary["detections"] == sum(summary["by_class"].values()) and summary["box_frame"] == "original"
    elif key == "clinical_analysis":
        assert sum(summary["mask_histogram"].values()) == pytest.approx(1.0, abs=1e-4)
        assert set(summary["mask_histogram"]) == {"background", "tissue", "salient"}
    elif key == "chatbot":
        assert summary["answer"] and summary["start_token"] <= summary["end_token"]
        assert pre["retrieved"]["score"] > 0  # the question found its FAQ passage
    elif key == "translation":
        assert summary["positions"] == pre["tokens"] and len(summary["preview_ids"]) == min(16, pre["tokens"])


def test_credit_risk_scores_every_record_of_a_csv(model_paths, monkeypatch):
    from nearfaas.apps.records import ATTRIBUTES

    chain = Chain("credit_risk", model_paths["credit_risk"], monkeypatch)
    lines = [json.loads(line) for line in make_input("credit_risk", 0)[0].decode().splitlines()]
    csv_text = ",".join(ATTRIBUTES) + "\n" + "\n".join(",".join(str(r[a]) for a in ATTRIBUTES) for r in lines) + "\n"
    answers, _, o2 = chain.run(csv_text.encode())
    summary = answers["credit-risk-infer"][1]["summary"]
    assert summary["records"] == len(lines) == len(summary["decisions"])
    assert stages.read_result(chain.objects.store[(o2.bucket, o2.key)])["output_shapes"]["probability"] == [len(lines), 1]


def test_notification_is_posted_to_the_webhook_and_a_failing_one_is_reported(model_paths, monkeypatch):
    received = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append((self.headers["Content-Type"], json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            status = 500 if self.path == "/broken" else 204
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        chain = Chain("asset_damage", model_paths["asset_damage"], monkeypatch, webhook_url=url + "/hook")
        answers, _, _ = chain.run(make_input("asset_damage", 1)[0])
        event = answers["asset-damage-notify"][1]
        assert event["delivery"]["webhook"]["status"] == 204
        content_type, posted = received[-1]
        assert content_type == "application/json"
        assert {k: posted[k] for k in ("app", "call_id", "summary", "severity")} == {
            k: event[k] for k in ("app", "call_id", "summary", "severity")}

        for bad in (url + "/broken", "http://127.0.0.1:9/refused", "ftp://example.invalid/x"):
            env = chain.env("asset-damage-notify") | {"WEBHOOK_URL": bad, "WEBHOOK_TIMEOUT": "2"}
            o2 = ObjectRef("nearfaas-intermediates", "asset_damage/run-1/asset-damage-infer")
            status, answer, _ = chain.call("asset-damage-notify", o2, {"input": o2.to_dict(), "call_id": "call-2"}, env=env)
            assert status == 200 and "error" in answer["delivery"]["webhook"], answer
            assert answer["delivery"]["result"] == {"stored": f"s3://{RESULT_BUCKET}/asset_damage/call-2.json"}
    finally:
        server.shutdown()
        server.server_close()


def test_notify_reports_a_result_bucket_it_cannot_write(model_paths, monkeypatch):
    chain = Chain("chatbot", model_paths["chatbot"], monkeypatch)
    chain.objects.fail_puts_to.add(RESULT_BUCKET)
    answers, _, _ = chain.run(b"How do I deploy a function?")
    result = answers["chatbot-notify"][1]["delivery"]["result"]
    assert answers["chatbot-notify"][0] == 200 and "NoSuchBucket" in result["error"] and RESULT_BUCKET in result["fix"]


# ---------------------------------------------------------------- bad input: a 4xx naming the stage

def _jpeg() -> bytes:
    return make_input("asset_damage", 0)[0]


BAD_F1 = [
    ("asset_damage", b"", 400, "empty"),
    ("asset_damage", _jpeg()[: len(_jpeg()) // 3], 422, "corrupt"),
    ("asset_damage", b"\xff\xd8\xff\xe0" + b"\x00garbage" * 50, 422, "corrupt"),
    ("content_moderation", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", 415, "not a JPEG or PNG"),
    ("remote_sensing", b"%PDF-1.7 not an image", 415, "not a JPEG or PNG"),
    ("clinical_analysis", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, 422, "corrupt"),
    ("chatbot", b"", 400, "empty"),
    ("chatbot", "\u200b\u0301 \u200b".encode(), 422, "tokenizes to nothing"),
    ("chatbot", b"\xff\xfe\x00q\x00", 415, "not UTF-8"),
    ("chatbot", b'{"context": "no question here"}', 422, "question"),
    ("translation", b"   \n\t ", 422, "empty"),
    ("translation", b"\x00\x01\x02binary", 415, "binary"),
    ("credit_risk", b"", 400, "empty"),
    ("credit_risk", b'{"duration": 12}\n', 422, "lacks"),
    ("credit_risk", b"not,a,header\n1,2,3\n", 422, "fields"),
]


@pytest.mark.parametrize("key,data,status,words", BAD_F1, ids=[f"{k}-{w.replace(' ', '_')}-{i}" for i, (k, _, _, w) in enumerate(BAD_F1)])
def test_bad_uploads_are_a_4xx_naming_the_pre_processing_stage(key, data, status, words, model_paths, monkeypatch):
    chain = Chain(key, model_paths[key], monkeypatch)
    f1 = chain.card.functions[0]
    got, body, out = chain.call(f1, chain.put(data))
    assert_stage_error(got, body, f1, codes=(status,))
    assert words in body["error"], body
    assert (out.bucket, out.key) not in chain.objects.store  # nothing half-made for the next stage


def test_a_missing_or_absent_input_object_is_a_4xx(model_paths, monkeypatch):
    chain = Chain("ppe_detection", model_paths["ppe_detection"], monkeypatch)
    status, body, _ = chain.call("ppe-detection-pre", "s3://inputs/not-there.jpg")
    assert_stage_error(status, body, "ppe-detection-pre", codes=(404,))
    status, body, _ = chain.call("ppe-detection-pre", None)
    assert_stage_error(status, body, "ppe-detection-pre", codes=(400,))
    status, body, _ = chain.call("ppe-detection-notify", None, {"call_id": "x"})
    assert_stage_error(status, body, "ppe-detection-notify", codes=(400,))


def _npy(array) -> bytes:
    return tensors.npy_bytes(np.asarray(array))


@pytest.mark.parametrize("key,payload,words", [
    ("asset_damage", _npy(np.zeros((1, 3, 100, 100), np.float32)), "wrong shape"),
    ("asset_damage", _npy(np.zeros((1, 3, 224, 224), np.float64)), "wrong dtype"),
    ("ppe_detection", _npy(np.zeros((1, 416, 416, 3), np.float32)), "wrong shape"),
    ("credit_risk", _npy(np.zeros((4, 199), np.float32)), "wrong shape"),
    ("chatbot", _npy(np.zeros((1, 128), np.int64)), "takes 2 inputs"),
    ("chatbot", tensors.npz_bytes({"input_ids": np.zeros((1, 128), np.int64)}), "missing input"),
    ("translation", tensors.npz_bytes({"input_ids": np.full((1, 128), 60000, np.int64)}), "outside the model's vocabulary"),
    ("remote_sensing", _jpeg(), "not a NumPy"),
    ("remote_sensing", b"", "empty"),
    ("clinical_analysis", _npy(np.zeros((1, 3, 224, 224), np.float32))[:500], "truncated"),
])
def test_a_tensor_that_does_not_fit_the_model_is_a_422_naming_the_inference_stage(key, payload, words, model_paths, monkeypatch):
    chain = Chain(key, model_paths[key], monkeypatch)
    f2 = chain.card.functions[1]
    status, body, _ = chain.call(f2, chain.put(payload))
    assert_stage_error(status, body, f2, codes=(422,))
    assert words in body["error"], body


def test_a_pickled_tensor_is_refused_not_loaded(model_paths, monkeypatch):
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    chain = Chain("asset_damage", model_paths["asset_damage"], monkeypatch)
    status, body, _ = chain.call("asset-damage-infer", chain.put(buf.getvalue()))
    assert_stage_error(status, body, "asset-damage-infer", codes=(422,))
    assert "pickle" in body["error"]


@pytest.mark.parametrize("content", [b"this is not an ONNX model", b"", None])
def test_a_model_that_cannot_be_loaded_is_a_4xx_naming_the_stage_and_the_file(content, tmp_path, monkeypatch):
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    chain = Chain("asset_damage", path, monkeypatch)  # init() must not raise
    tensor = tensors.npy_bytes(np.zeros((1, 3, 224, 224), np.float32))
    for _ in range(2):  # every call, not only the first
        status, body, _ = chain.call("asset-damage-infer", chain.put(tensor))
        assert_stage_error(status, body, "asset-damage-infer", codes=(424,))
        assert body["model_file"] == str(path) and str(path) in body["error"]
    if content is not None:
        assert "not an ONNX model" in body["error"]


def test_inference_without_model_path_or_app_answers_instead_of_raising():
    no_path = stages.Inference.from_env({"APP": "chatbot"})
    status, _, body = to_response(no_path.handle(Event(b"{}", {}), _bare_context("chatbot-infer")))
    assert status == 424 and "MODEL_PATH is not set" in body.decode()
    no_app = stages.Inference.from_env({})
    status, _, body = to_response(no_app.handle(Event(b"{}", {}), _bare_context("")))
    assert status == 400 and json.loads(body)["stage"] == "infer"


def _bare_context(name: str) -> Context:
    return Context(function=name, node="n", call_id="c", input=None, objects=FakeObjects(), secrets=Secrets(None),
                   environment={"NOTHING": "1"})


def test_notify_refuses_an_object_that_is_not_an_inference_result(model_paths, monkeypatch):
    chain = Chain("translation", model_paths["translation"], monkeypatch)
    for payload in (b'{"not": json', tensors.npy_bytes(np.zeros(3)), b"plain text"):
        status, body, _ = chain.call("translation-notify", chain.put(payload), {"call_id": "c9"})
        assert_stage_error(status, body, "translation-notify", codes=(422,))


def test_a_handler_deployed_for_the_wrong_kind_of_application_says_so(model_paths, monkeypatch):
    chain = Chain("chatbot", model_paths["chatbot"], monkeypatch)
    chain.handlers["chatbot-pre"] = load_handler("image_pre")
    status, body, _ = chain.call("chatbot-pre", chain.put(b"What is nearfaas?"))
    assert_stage_error(status, body, "chatbot-pre", codes=(400,))


# ---------------------------------------------------------------- deployment

@pytest.mark.parametrize("size", ["tiny", "full"])
def test_stack_for_passes_the_stack_parser_with_the_chain_and_placement(size, tmp_path):
    for key, card in APPS.items():
        stack = stack_for(key, size, tmp_path / "m.onnx", webhook_url="http://127.0.0.1:9999/hook")
        parsed = parse_stack(stack, tmp_path)
        f1, f2, f3 = (parsed.functions[n] for n in card.functions)
        assert list(parsed.functions) == list(card.functions)
        assert f1.x.chain == [card.functions[1]] and f2.x.chain == [card.functions[2]] and f3.x.chain == []
        for fn in (f1, f2):
            assert fn.x.accelerator == "dscs" and fn.x.placement == "data"
        assert f3.x.accelerator is None and f3.x.placement == "compute"
        assert f2.exec_timeout >= 120 and f2.environment["MODEL_PATH"] == str(tmp_path / "m.onnx")
        assert f2.environment["MODEL_KEY"] == card.model and f2.environment["MODEL_SIZE"] == size
        assert f3.environment["WEBHOOK_URL"] == "http://127.0.0.1:9999/hook"
        assert all(fn.lang == "python3-http" and (fn.handler_dir / "handler.py").is_file() for fn in parsed.functions.values())
        if card.input_kind == "image":
            shape = MODELS[card.model].inputs(size)[0][1]
            assert f1.environment["INPUT_SHAPE"] == ",".join(map(str, shape))
    assert "WEBHOOK_URL" not in stack_for("chatbot", "tiny", "/m.onnx")["functions"]["chatbot-notify"]["environment"]
    with pytest.raises(ValueError):
        stack_for("chatbot", "huge", "/m.onnx")


def _api_validator(tmp_path):
    """The gateway's deployments API with nothing deployed: enough to run its validation."""
    from types import SimpleNamespace

    from nearfaas.gateway.api import FunctionsAPI

    return FunctionsAPI(SimpleNamespace(functions={}), None, tmp_path)


def test_deployment_bodies_go_f3_f2_f1_and_pass_the_rest_api_validation(tmp_path):
    api = _api_validator(tmp_path)
    for key, card in APPS.items():
        bodies = deployment_bodies(key, "tiny", "/models/m.onnx")
        assert [b["service"] for b in bodies] == list(reversed(card.functions))
        deployed: set[str] = set()
        for body in bodies:
            spec = api._spec_from_request(json.loads(json.dumps(body)))  # through JSON, as over HTTP
            assert spec["name"] == body["service"] and spec["lang"] == "python3-http"
            assert set(spec["x"]["chain"]) <= deployed  # a chain's target is deployed before it
            assert spec["environment"]["APP"] == key
            assert "uid" not in spec and "nearfaas-apps" in spec["buckets"]  # a new function's uid comes at deploy; its buckets
            deployed.add(spec["name"])


@pytest.mark.parametrize("key", KEYS)
def test_example_stack_files_match_stack_for(key):
    path = example_path(key)
    assert path.read_text() == example_yaml(key), "regenerate with: python -m nearfaas.apps examples"
    loaded = yaml.safe_load(path.read_text())
    assert loaded == example_stack(key)
    generated = stack_for(key, "tiny", loaded["functions"][get_app(key).functions[1]]["environment"]["MODEL_PATH"])
    for name, fn in loaded["functions"].items():  # the same as stack_for, handler paths made relative
        want = generated["functions"][name]
        assert (path.parent / fn["handler"]).resolve() == Path(want["handler"])
        assert {k: v for k, v in fn.items() if k != "handler"} == {k: v for k, v in want.items() if k != "handler"}
    stack = load_stack(path)
    assert list(stack.functions) == list(get_app(key).functions)
