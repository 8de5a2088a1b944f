"""The three stages of every application, as library code; the handlers in ``handlers/`` are
one-line wrappers around these.

Each stage is parameterised by its environment (set by ``stack.stack_for``):

=================  ==========================================================================
``APP``            application key (``asset_damage``); selects the pre-processing and summary
``MODEL_KEY``      f2: key in ``nearfaas.models.MODELS`` (default: the app's model)
``MODEL_SIZE``     ``tiny`` | ``full``
``MODEL_PATH``     f2: the .onnx file, loaded once in ``init()``
``INFER_OUTPUT``   f2: what it writes to ``context.output``: ``summary`` (default; the small JSON
                   record f3 reads) or ``tensors`` (the model's outputs as ``.npz``, record included)
``INPUT_SHAPE``    f1 (images): the model input, e.g. ``1,3,224,224``
``VOCAB_SIZE``     f1 (text): rows of the model's token embedding; larger ids are mapped modulo
``TARGET_LANGUAGE`` f1 (translation): default target language (``French``)
``WEBHOOK_URL``    f3: where the notification is POSTed (skipped when unset)
``RESULT_BUCKET``  f3: bucket of the notification record (default ``nearfaas-results``)
=================  ==========================================================================

Every stage answers a caller's mistake with a 4xx JSON body naming the stage (``errors.py``).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping

import numpy as np

from . import postprocess, tensors
from .catalog import AppCard, get_app
from .errors import BAD_REQUEST, MODEL_UNAVAILABLE, NOT_FOUND, UNPROCESSABLE, StageError, answer_for

RESULT_BUCKET = "nearfaas-results"
# What f2 writes to context.output, f3's input. f3 needs only the record (summary, model, output
# shapes): writing the model's outputs too would send them over the link to f3 for nothing (PPE's
# three YOLO heads are 3.6 MB), so they are written only when INFER_OUTPUT=tensors asks for them.
INFER_OUTPUTS = ("summary", "tensors")
DEFAULT_TARGET_LANGUAGE = "French"
WEBHOOK_TIMEOUT_S = 5.0


# ---------------------------------------------------------------- shared helpers

def environment(context) -> Mapping[str, str]:
    env = getattr(context, "environment", None)
    return env if env else os.environ


def app_from_env(env: Mapping[str, str]) -> AppCard:
    key = env.get("APP", "")
    if not key:
        raise StageError(BAD_REQUEST, "this function has no APP in its environment, so it does not know its application",
                         "deploy it with `nearfaas apps deploy NAME` (or set APP in its stack.yml environment)")
    try:
        return get_app(key)
    except KeyError as exc:
        raise StageError(BAD_REQUEST, str(exc.args[0]), "set APP to one of the application keys") from None


def stage_name(context, env: Mapping[str, str], which: str) -> str:
    name = getattr(context, "function", "") or ""
    if name:
        return name
    try:
        return get_app(env.get("APP", "")).slug + "-" + which
    except KeyError:
        return which


def read_input(context) -> memoryview | bytes:
    """The stage's input object; StageError when there is none or it cannot be read."""
    ref = getattr(context, "input", None)
    if ref is None:
        raise StageError(BAD_REQUEST, "the call names no input object",
                         'call with a JSON body {"input": {"bucket": "...", "key": "..."}} naming the uploaded object')
    try:
        return context.objects.get(ref)
    except Exception as exc:  # an ObjectError from S3, or a connection failure
        status = getattr(exc, "status", None)
        where = f"s3://{ref.bucket}/{ref.key}" if hasattr(ref, "bucket") else str(ref)
        if status == 404:
            raise StageError(NOT_FOUND, f"the input object {where} does not exist ({exc})",
                             "upload it first (nearfaas put FILE s3://bucket/key)") from None
        if isinstance(status, int) and 400 <= status < 500:
            raise StageError(status, f"the input object {where} cannot be read: {exc}", "check the bucket and key") from None
        raise StageError(502, f"the input object {where} cannot be read: {exc}", "retry; the storage node may be down") from None


def write_output(context, data: bytes, content_type: str) -> dict | None:
    """Write the stage's result to ``context.output`` (the next stage's input); None outside a chain."""
    ref = getattr(context, "output", None)
    if ref is None:
        return None
    try:
        context.objects.put(ref, data, content_type=content_type)
    except Exception as exc:
        raise StageError(502, f"the stage's output could not be written: {exc}", "retry the call") from None
    return ref.to_dict() if hasattr(ref, "to_dict") else {"ref": str(ref)}


def body_json(event) -> dict:
    try:
        value = event.json() if hasattr(event, "json") else json.loads(getattr(event, "body", b"") or b"null")
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _shape_env(value: str | None) -> tuple[int, ...] | None:
    if not value:
        return None
    try:
        return tuple(int(part) for part in value.replace("x", ",").split(",") if part.strip())
    except ValueError:
        raise StageError(BAD_REQUEST, f"INPUT_SHAPE={value!r} is not a shape", 'write e.g. INPUT_SHAPE: "1,3,224,224"') from None


def _model_input_shape(card: AppCard, env: Mapping[str, str]) -> tuple[int, ...]:
    shape = _shape_env(env.get("INPUT_SHAPE"))
    if shape:
        return shape
    from nearfaas.models import MODELS  # only when the deployment did not say (stack_for always does)

    return tuple(MODELS[env.get("MODEL_KEY") or card.model].inputs(env.get("MODEL_SIZE") or "tiny")[0][1])


def _vocab_env(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


# ---------------------------------------------------------------- f1: pre-processing

def warm_up(kind: str) -> None:
    """What f1's ``init()`` loads ahead of the first call (the tokenizers for text apps)."""
    if kind == "text":
        from . import text

        text.load_tokenizer("wordpiece")
        text.load_tokenizer("bpe")


def run_pre(event, context, kind: str | None = None) -> dict:
    """f1: read the upload, make the model-ready tensor(s), write them to ``context.output``."""
    env = environment(context)
    stage = stage_name(context, env, "pre")
    try:
        card = app_from_env(env)
        if kind and card.input_kind != kind:
            raise StageError(BAD_REQUEST, f"this is the {kind} pre-processing handler, but APP={card.key} takes {card.input_kind}",
                             f"deploy {card.key}'s f1 with the {card.pre_handler} handler")
        started = time.perf_counter()
        data = read_input(context)
        if card.input_kind == "image":
            payload, arrays, info = _pre_image(card, env, data)
        elif card.input_kind == "records":
            payload, arrays, info = _pre_records(data)
        else:
            payload, arrays, info = _pre_text(card, env, data)
        content_type = "application/x-npz" if payload.startswith(tensors.ZIP_MAGIC) else "application/x-npy"
        output = write_output(context, payload, content_type)
        answer = {"app": card.key, "stage": stage, "input_bytes": len(data),
                  "tensors": {name: {"shape": list(a.shape), "dtype": a.dtype.name} for name, a in arrays.items()},
                  "bytes": len(payload), "format": "npz" if content_type.endswith("npz") else "npy",
                  "seconds": round(time.perf_counter() - started, 6), "output": output, **info}
        if output is None:
            answer["note"] = "called outside a chain: no context.output, so the tensor was not written"
        return answer
    except StageError as exc:
        return answer_for(exc, stage)


def _pre_image(card: AppCard, env, data):
    from .preprocess import preprocess_image

    shape = _model_input_shape(card, env)
    tensor, info = preprocess_image(data, shape, card.image)
    return tensors.npy_bytes(tensor), {"image": tensor}, info


def _pre_records(data):
    from .records import records_to_features

    features, info = records_to_features(data)
    return tensors.npy_bytes(features), {"features": features}, info


def _pre_text(card: AppCard, env, data):
    from . import text

    vocab = _vocab_env(env.get("VOCAB_SIZE"))
    raw = text.decode_text(data, "question" if card.key == "chatbot" else "text to translate")
    if card.key == "chatbot":
        fields = text.parse_request_text(raw, ("question", "context"))
        arrays, meta = text.encode_question(fields.get("question", ""), fields.get("context"), vocab)
    else:
        fields = text.parse_request_text(raw, ("text", "target"))
        target = fields.get("target") or env.get("TARGET_LANGUAGE") or DEFAULT_TARGET_LANGUAGE
        arrays, meta = text.encode_document(fields.get("text", ""), target, vocab)
    info = {k: v for k, v in meta.items() if k not in ("context", "context_offsets")}
    return tensors.npz_bytes(arrays, meta), arrays, info


# ---------------------------------------------------------------- f2: inference

class Inference:
    """f2: a model loaded once (at cold start) and run on each intermediate.

    Loading never raises: a missing or broken model file is kept as ``error`` and every call
    is answered 424 naming the stage and the file, so the worker stays up and says why.
    """

    def __init__(self, app: str, model_path: str | os.PathLike | None, size: str = "tiny", model_key: str | None = None,
                 threads: int = 1):
        self.card: AppCard | None = None
        self.model_key = model_key or ""
        self.size = size
        self.model_path = str(model_path or "")
        self.session = None
        self.error: str | None = None
        self._input_error: type[Exception] = ValueError
        started = time.perf_counter()
        try:
            self.card = get_app(app)
            self.model_key = model_key or self.card.model
            if not self.model_path:
                raise ValueError("MODEL_PATH is not set")
            from nearfaas.models import InferenceSession, InputError

            self._input_error = InputError
            self.session = InferenceSession(self.model_path, threads=threads)
        except Exception as exc:  # any failure is reported per call, never crashes the worker
            self.error = f"{type(exc).__name__}: {exc}"
        self.load_seconds = time.perf_counter() - started

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Inference:
        env = os.environ if env is None else env
        threads = _vocab_env(env.get("MODEL_THREADS")) or 1
        return cls(env.get("APP", ""), env.get("MODEL_PATH"), env.get("MODEL_SIZE") or "tiny", env.get("MODEL_KEY") or None,
                   threads=threads)

    def handle(self, event, context) -> dict:
        env = environment(context)
        stage = stage_name(context, env, "infer")
        try:
            return self._handle(event, context, stage)
        except StageError as exc:
            return answer_for(exc, stage)

    def _handle(self, event, context, stage: str) -> dict:
        if self.card is None:
            raise StageError(BAD_REQUEST, f"this function does not know its application ({self.error})",
                             "set APP in its environment to one of the application keys")
        if self.error is not None or self.session is None:
            raise StageError(MODEL_UNAVAILABLE, f"the model could not be loaded from {self.model_path or '(no MODEL_PATH)'}: {self.error}",
                             f"build it with nearfaas.models.build({self.model_key!r}, {self.size!r}) and set MODEL_PATH to the "
                             "returned .onnx path, then redeploy", model_file=self.model_path or None)
        written = self._output_format(environment(context))
        started = time.perf_counter()
        arrays, meta = tensors.load(read_input(context))
        feeds = self._feeds(arrays)
        wanted = [n for n in self.card.outputs if n in self.session.output_names] or None
        run_started = time.perf_counter()
        outputs = self._run(feeds, wanted)
        infer_s = time.perf_counter() - run_started
        summary, extra = self._summarise(outputs, feeds, meta, body_json(event))
        shapes = {name: list(a.shape) for name, a in outputs.items()}
        record = {"app": self.card.key, "model": self.model_key, "size": self.size, "summary": summary, "output_shapes": shapes}
        if written == "tensors":
            payload, content_type = tensors.npz_bytes({**outputs, **extra}, record), "application/x-npz"
        else:  # sorted keys: f3 gets the very record an .npz's metadata would give it
            payload, content_type = json.dumps(record, sort_keys=True, separators=(",", ":")).encode(), "application/json"
        output = write_output(context, payload, content_type)
        return {"app": self.card.key, "stage": stage, "model": {"key": self.model_key, "size": self.size, "file": self.model_path},
                "summary": summary, "output_shapes": shapes, "inference_seconds": round(infer_s, 6),
                "seconds": round(time.perf_counter() - started, 6), "output": output,
                "format": "npz" if written == "tensors" else "json", "bytes": len(payload)}

    @staticmethod
    def _output_format(env: Mapping[str, str]) -> str:
        value = (env.get("INFER_OUTPUT") or "summary").strip().lower()
        if value not in INFER_OUTPUTS:
            raise StageError(BAD_REQUEST, f"INFER_OUTPUT={value!r} is not one of {', '.join(INFER_OUTPUTS)}",
                             "set INFER_OUTPUT to summary (the record f3 reads) or tensors (the model's outputs as .npz too)")
        return value

    def _expected(self) -> list[dict]:
        return [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.session.inputs]

    def _feeds(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [n for n, _, _ in self.session.inputs]
        if "" in arrays:  # a .npy: the model's only input
            if len(names) != 1:
                raise StageError(UNPROCESSABLE, f"got one tensor (.npy) but the model takes {len(names)} inputs: {', '.join(names)}",
                                 "send a .npz with one array per input", expected=self._expected())
            return {names[0]: arrays[""]}
        # Arrays the model does not take (token_type_ids for a BERT without them) stay behind;
        # a missing one is reported by the session's check as an InputError.
        return {n: arrays[n] for n in names if n in arrays}

    def _run(self, feeds: dict[str, np.ndarray], wanted: list[str] | None) -> dict[str, np.ndarray]:
        try:
            self._check_token_ids(feeds)
            if len(feeds) == 1 and self._fixed_batch_one():
                (name, array), = feeds.items()
                if array.ndim >= 1 and array.shape[0] > 1:  # one row at a time through a batch-1 model
                    parts = [self.session.run({name: array[i : i + 1]}, wanted) for i in range(array.shape[0])]
                    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            return self.session.run(feeds, wanted)
        except self._input_error as exc:
            raise StageError(UNPROCESSABLE, f"the tensor does not fit the model: {exc}",
                             "send the output of this application's pre-processing stage", expected=self._expected()) from None
        except StageError:
            raise
        except Exception as exc:  # ONNX Runtime rejected the values (it has checked shapes and dtypes above)
            message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise StageError(UNPROCESSABLE, f"the model failed on this input: {message}",
                             "send the output of this application's pre-processing stage", expected=self._expected()) from None

    def _fixed_batch_one(self) -> bool:
        shape = self.session.inputs[0][1]
        return bool(shape) and shape[0] == 1

    @functools.cached_property
    def _vocab(self) -> int | None:
        """The model's vocabulary size, looked up once (f2 checks token ids on every call)."""
        try:
            from nearfaas.models import MODELS

            return MODELS[self.model_key].vocab
        except (ImportError, KeyError):
            return None

    def _check_token_ids(self, feeds: dict[str, np.ndarray]) -> None:
        vocab = self._vocab
        ids = feeds.get("input_ids")
        if vocab and isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= vocab:
                raise StageError(UNPROCESSABLE, f"input_ids hold token ids {low}..{high}, outside the model's vocabulary 0..{vocab - 1}",
                                 "tokenize with this application's pre-processing stage (it maps ids into the vocabulary)")

    def _summarise(self, outputs: dict, feeds: dict, meta: dict, body: dict) -> tuple[dict, dict]:
        key = self.card.key
        if key == "credit_risk":
            return postprocess.credit(outputs), {}
        if key == "ppe_detection":
            image = next(iter(feeds.values()))
            previous = next((v for v in (body.get("previous") or {}).values() if isinstance(v, dict) and "letterbox" in v), None)
            return postprocess.detection(outputs, self.card, input_size=int(image.shape[-1]), previous=previous), {}
        if key == "clinical_analysis":
            summary, mask = postprocess.segmentation(outputs, self.card)
            return summary, {"mask": mask}
        if key == "chatbot":
            return postprocess.question_answering(outputs, meta), {}
        if key == "translation":
            return postprocess.next_tokens(outputs, meta), {}
        return postprocess.classification(outputs, self.card), {}


# ---------------------------------------------------------------- f3: notification

_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def call_id_of(event, context) -> str:
    """The chain's call id (the body's ``call_id``; a stage's own id is ``<call id>/<function>``)."""
    raw = body_json(event).get("call_id") or getattr(context, "call_id", "") or ""
    raw = str(raw)
    function = getattr(context, "function", "") or ""
    if function and raw.endswith("/" + function):
        raw = raw[: -len(function) - 1]
    safe = _SAFE_ID.sub("_", raw).strip("._")[:128]
    return safe or uuid.uuid4().hex


def read_result(data) -> dict:
    """f2's result record (summary, output shapes): the JSON object f2 writes by default, or the
    metadata of the .npz it writes with INFER_OUTPUT=tensors."""
    head = bytes(memoryview(data)[:1]) if data is not None and len(data) else b""
    if head == b"{":
        try:
            record = json.loads(bytes(data))
        except ValueError as exc:
            raise StageError(UNPROCESSABLE, f"the inference result is not valid JSON: {exc}",
                             "send the output of this application's inference stage") from None
        return record if isinstance(record, dict) else {}
    arrays, meta = tensors.load(data)
    if not meta:
        raise StageError(UNPROCESSABLE, "the intermediate holds tensors but no inference summary",
                         "send the output of this application's inference stage")
    return meta


def post_webhook(url: str, event: dict, timeout: float = WEBHOOK_TIMEOUT_S) -> dict:
    """POST the event as JSON; the outcome (never an exception) for the answer."""
    if not re.match(r"https?://", url):
        return {"url": url, "error": "WEBHOOK_URL must start with http:// or https://"}
    request = urllib.request.Request(url, data=json.dumps(event).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "nearfaas-apps"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read(65536)
            return {"url": url, "status": response.status, "seconds": round(time.perf_counter() - started, 6)}
    except urllib.error.HTTPError as exc:
        return {"url": url, "status": exc.code, "error": f"the webhook answered HTTP {exc.code}"}
    except Exception as exc:  # refused, unreachable, timed out, bad URL
        reason = getattr(exc, "reason", exc)
        return {"url": url, "error": f"{type(exc).__name__}: {reason}"}


def run_notify(event, context) -> dict:
    """f3: read f2's result, build the notification, POST it, store it, return it."""
    env = environment(context)
    stage = stage_name(context, env, "notify")
    try:
        card = app_from_env(env)
        body = body_json(event)
        if getattr(context, "input", None) is not None:
            record = read_result(read_input(context))
        else:  # called with f2's answer only (no object): use it when it carries a summary
            record = next((v for v in (body.get("previous") or {}).values() if isinstance(v, dict) and "summary" in v), None)
            if record is None:
                raise StageError(BAD_REQUEST, "the call names no inference result",
                                 "run the whole application (call its first function), or pass f2's output as input")
        summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
        call_id = call_id_of(event, context)
        bucket = env.get("RESULT_BUCKET") or RESULT_BUCKET
        result_ref = f"s3://{bucket}/{card.key}/{call_id}.json"
        notification = {
            "app": card.key, "title": card.title, "call_id": call_id,
            "severity": postprocess.severity(card.key, summary), "summary": summary,
            "model": record.get("model"), "size": record.get("size"), "output_shapes": record.get("output_shapes"),
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "result": result_ref,
        }
        url = env.get("WEBHOOK_URL") or ""
        try:
            timeout = float(env.get("WEBHOOK_TIMEOUT") or WEBHOOK_TIMEOUT_S)
        except ValueError:
            timeout = WEBHOOK_TIMEOUT_S
        webhook = post_webhook(url, notification, timeout) if url else {"skipped": "WEBHOOK_URL is not set"}
        try:
            context.objects.put(result_ref, json.dumps(notification, indent=1).encode(), content_type="application/json")
            stored = {"stored": result_ref}
        except Exception as exc:
            stored = {"error": f"could not write {result_ref}: {exc}",
                      "fix": f"create the bucket {bucket} (nearfaas apps deploy does) or set RESULT_BUCKET"}
        return {**notification, "stage": stage, "delivery": {"webhook": webhook, "result": stored}}
    except StageError as exc:
        return answer_for(exc, stage)
