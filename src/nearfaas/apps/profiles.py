"""Per-stage compute profiles of the eight applications: measuring them in-process, and reading
the measured profile back (for the twin and the gateway's ``auto`` placement policy).

Measuring. ``LocalApp(key, model_path, size)`` runs an application's three stages in this
process, as a worker calls them: the stage functions of ``stages.py`` with the environment
``stack_for`` gives each function, a ``nearfaas.runtime.context.Context`` whose object client
is ``MemoryObjects`` (a dict; ``get`` answers a memoryview, as a worker's mmap does), f2's model
loaded once with one intra-op thread, and no webhook. Each call is timed around the stage
function alone (``time.process_time`` and ``time.perf_counter``); the input is placed in the
store before the clocks start. ``benchmarks/apps.py`` is the measurement that writes
``benchmarks/results/apps.json``.

Reading. ``load(path=None) -> Profiles`` reads that file (default: the repository's
``benchmarks/results/apps.json``; ``$NEARFAAS_PROFILES`` overrides it). A missing file is an
empty ``Profiles``; a malformed one raises ``ValueError`` naming the file and the field.

    profiles = load()
    profiles.compute_s("asset-damage-infer")           # CPU seconds of f2 at batch 1, or None
    profiles.compute_s("asset-damage-infer", batch=8)  # of one batch of 8
    profiles.for_app("asset_damage")                   # the app's whole entry, for the twin

The file's shape (``benchmarks/apps.py`` writes it; only the fields marked * are required)::

    {"label": "...", "machine": {...}, "apps": {"asset_damage": {
        "model": "resnet50"*, "size": "full", "params": 25530472, "functions": [f1, f2, f3]*,
        "stages": {"f1"*: {"function": "asset-damage-pre"*, "batch1"*: {"cpu_s"*: 0.004, "wall_s": 0.004, ...},
                           "batch8": {"total": {"cpu_s"*, "wall_s"}, "per_item": {"cpu_s", "wall_s"}, ...}},
                   "f2"*: {...}, "f3"*: {...}}}}}
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_VAR = "NEARFAAS_PROFILES"
STAGE_KEYS = ("f1", "f2", "f3")
ROLES = ("pre", "infer", "notify")
LABEL = "measured on this machine (CPU, ONNX Runtime, 1 intra-op thread)"


def default_path() -> Path:
    """``$NEARFAAS_PROFILES``, else the repository's ``benchmarks/results/apps.json``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "apps.json"


# ---------------------------------------------------------------- reading

class Profiles:
    """The measured per-stage costs of the applications (empty when nothing was measured)."""

    def __init__(self, data: Mapping | None = None, path: Path | None = None):
        self.path = path
        self.data: dict = dict(data or {})
        self.apps: dict[str, dict] = dict(self.data.get("apps") or {})
        self.label: str = str(self.data.get("label") or "")
        self.machine: dict = dict(self.data.get("machine") or {})
        # function name -> (app key, "f1" | "f2" | "f3")
        self._index: dict[str, tuple[str, str]] = {}
        for key, app in self.apps.items():
            for stage in STAGE_KEYS:
                self._index[app["stages"][stage]["function"]] = (key, stage)

    def __bool__(self) -> bool:
        return bool(self.apps)

    def __len__(self) -> int:
        return len(self.apps)

    def __repr__(self) -> str:
        return f"Profiles({len(self.apps)} apps from {self.path})"

    @property
    def functions(self) -> list[str]:
        """Every function name with a measured stage."""
        return list(self._index)

    def stage(self, function_name: str) -> dict | None:
        """The measured stage of that function (a copy), or None."""
        found = self._index.get(function_name)
        if found is None:
            return None
        key, stage = found
        return copy.deepcopy(self.apps[key]["stages"][stage])

    def compute_s(self, function_name: str, batch: int = 1) -> float | None:
        """CPU seconds of one call of that function's stage on ``batch`` inputs; None when the
        function was not measured.

        Batch 1 is the measured median. Batch 8 is the measured total where there is one (f1
        and f2). Other batches are read off the line through the batch-1 and batch-8 costs
        (a fixed part plus a per-item part), or, for a stage measured at batch 1 only (f3),
        ``batch`` times its batch-1 cost.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be a whole number of at least 1, got {batch!r}")
        found = self._index.get(function_name)
        if found is None:
            return None
        key, stage = found
        measured = self.apps[key]["stages"][stage]
        one = float(measured["batch1"]["cpu_s"])
        if batch == 1:
            return one
        eight = ((measured.get("batch8") or {}).get("total") or {}).get("cpu_s")
        if eight is None:
            return one * batch
        eight = float(eight)
        if batch == 8:
            return eight
        return max(0.0, one + (eight - one) * (batch - 1) / 7)

    def for_deployment(self, spec: Mapping) -> float | None:
        """Batch-1 CPU seconds for a deployed function (a spec with ``name`` and ``environment``),
        but only when it runs the model size that was measured: a tiny deployment must not be
        predicted with full-size costs."""
        found = self._index.get(str(spec.get("name", "")))
        if found is None:
            return None
        size = (spec.get("environment") or {}).get("MODEL_SIZE")
        if size != self.apps[found[0]].get("size"):
            return None
        return self.compute_s(spec["name"])

    def entry(self, key: str) -> dict:
        """The app's whole measured entry itself, not a copy, for readers that never change it
        (the twin); ``{}`` when the app was not measured. Takes the key or its dashed form."""
        return self.apps.get(key) or self.apps.get(str(key).replace("-", "_")) or {}

    def for_app(self, key: str) -> dict:
        """The app's whole measured entry (model, parameters, functions, per-stage costs), a
        copy; ``{}`` when the app was not measured. Takes the key or its dashed form."""
        return copy.deepcopy(self.entry(key))


def load(path: str | os.PathLike | None = None) -> Profiles:
    """The profiles in ``path`` (default: ``default_path()``); an empty ``Profiles`` when the
    file does not exist; ``ValueError`` naming the file and the field when it is malformed."""
    p = Path(path).expanduser() if path is not None else default_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Profiles(None, p)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p}: cannot read the profile file: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc}); rerun benchmarks/apps.py to write it again") from None
    _validate(data, p)
    return Profiles(data, p)


def _fail(path: Path, where: str, what: str) -> ValueError:
    return ValueError(f"{path}: field {where} {what}; rerun benchmarks/apps.py to write it again")


def _seconds(value, path: Path, where: str, required: bool) -> None:
    if value is None and not required:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _fail(path, where, f"must be a non-negative number of seconds, got {value!r}")


def _validate(data, path: Path) -> None:
    if not isinstance(data, dict):
        raise _fail(path, "(top level)", f"must be a JSON object, got {type(data).__name__}")
    apps = data.get("apps", {})
    if not isinstance(apps, dict):
        raise _fail(path, "apps", f"must be an object of applications, got {type(apps).__name__}")
    seen: dict[str, str] = {}
    for key, app in apps.items():
        where = f"apps.{key}"
        if not isinstance(app, dict):
            raise _fail(path, where, f"must be an object, got {type(app).__name__}")
        if not isinstance(app.get("model"), str) or not app["model"]:
            raise _fail(path, f"{where}.model", f"must be a model key, got {app.get('model')!r}")
        functions = app.get("functions")
        if not (isinstance(functions, list) and len(functions) == 3 and all(isinstance(f, str) and f for f in functions)):
            raise _fail(path, f"{where}.functions", f"must list the three function names, got {functions!r}")
        stages = app.get("stages")
        if not isinstance(stages, dict):
            raise _fail(path, f"{where}.stages", f"must be an object with f1, f2, f3, got {type(stages).__name__}")
        for i, stage in enumerate(STAGE_KEYS):
            s = stages.get(stage)
            at = f"{where}.stages.{stage}"
            if not isinstance(s, dict):
                raise _fail(path, at, "is missing" if s is None else f"must be an object, got {type(s).__name__}")
            if s.get("function") != functions[i]:
                raise _fail(path, f"{at}.function", f"must be {functions[i]!r} (functions[{i}]), got {s.get('function')!r}")
            if s["function"] in seen:
                raise _fail(path, f"{at}.function", f"names {s['function']!r}, which {seen[s['function']]} names too")
            seen[s["function"]] = at
            one = s.get("batch1")
            if not isinstance(one, dict):
                raise _fail(path, f"{at}.batch1", "is missing" if one is None else f"must be an object, got {type(one).__name__}")
            _seconds(one.get("cpu_s"), path, f"{at}.batch1.cpu_s", True)
            _seconds(one.get("wall_s"), path, f"{at}.batch1.wall_s", False)
            eight = s.get("batch8")
            if eight is None:
                continue
            if not isinstance(eight, dict):
                raise _fail(path, f"{at}.batch8", f"must be an object, got {type(eight).__name__}")
            for part in ("total", "per_item"):
                value = eight.get(part)
                if value is None and part == "per_item":
                    continue
                if not isinstance(value, dict):
                    raise _fail(path, f"{at}.batch8.{part}", "is missing" if value is None else f"must be an object, got {value!r}")
                _seconds(value.get("cpu_s"), path, f"{at}.batch8.{part}.cpu_s", True)
                _seconds(value.get("wall_s"), path, f"{at}.batch8.{part}.wall_s", False)


# ---------------------------------------------------------------- measuring: a fake context

class MemoryObjects:
    """The object client a handler sees, over a dict: ``get`` gives a memoryview (as a worker's
    mmap of a local object would), ``put`` stores a copy; a missing object is a 404 ObjectError."""

    def __init__(self):
        self.store: dict[tuple[str, str], bytes] = {}

    @staticmethod
    def _ref(ref, key):
        from nearfaas.runtime.context import ObjectRef

        return ObjectRef(ref, key) if key is not None else ObjectRef.parse(ref)

    def get(self, ref, key: str | None = None) -> memoryview:
        from nearfaas.runtime.context import ObjectError

        ref = self._ref(ref, key)
        if (ref.bucket, ref.key) not in self.store:
            raise ObjectError(404, ref, b"<Error><Code>NoSuchKey</Code></Error>")
        return memoryview(self.store[(ref.bucket, ref.key)])

    def put(self, ref, data, key: str | None = None, content_type: str = "application/octet-stream") -> dict:
        ref = self._ref(ref, key)
        self.store[(ref.bucket, ref.key)] = bytes(data)
        return ref.to_dict()

    def read(self, ref) -> bytes:
        ref = self._ref(ref, None)
        return self.store[(ref.bucket, ref.key)]

    def clear(self) -> None:
        self.store.clear()


class StageFailed(RuntimeError):
    """A stage answered an error (a 4xx/5xx body) where a measurement expected it to work."""


@dataclass
class StageRun:
    """One timed call of a stage: its answer, the bytes it wrote to ``context.output``, and the
    CPU and wall seconds of the stage function alone."""

    function: str
    answer: dict
    output: bytes | None
    cpu_s: float
    wall_s: float
    extra: dict = field(default_factory=dict)


def cpu_wall() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


class LocalApp:
    """An application's three stages run in this process with a fake context, for measuring.

    ``model_path`` is the .onnx file ``nearfaas.models.build(card.model, size)`` returned. f2's
    model is loaded here (``load_cpu_s``, ``load_wall_s``) with ``threads`` intra-op threads;
    text apps load their tokenizers too (f1's ``init()``). f3 has no webhook (WEBHOOK_URL is not
    set) and writes its notification record into ``objects``. ``close()`` frees the model.
    """

    INPUT_BUCKET = "nearfaas-apps"
    INTERMEDIATES = "nearfaas-intermediates"

    def __init__(self, key: str, model_path: str | os.PathLike, size: str = "full", threads: int = 1):
        from .catalog import get_app
        from .stack import stack_for
        from .stages import Inference, warm_up

        self.card = get_app(key)
        self.size = size
        self.objects = MemoryObjects()
        stack = stack_for(self.card.key, size, model_path)
        self.env = {name: {k: str(v) for k, v in fn["environment"].items()} for name, fn in stack["functions"].items()}
        self._calls = 0
        warm_up(self.card.input_kind)
        cpu0, wall0 = cpu_wall()
        self.inference = Inference(self.card.key, model_path, size, self.card.model, threads=threads)
        cpu1, wall1 = cpu_wall()
        self.load_cpu_s, self.load_wall_s = cpu1 - cpu0, wall1 - wall0
        if self.inference.error:
            raise StageFailed(f"{self.card.functions[1]}: the model could not be loaded from {model_path}: {self.inference.error}")

    @property
    def fixed_batch_one(self) -> bool:
        """Whether the model's graph has a fixed batch of 1 (f2 then runs a batch row by row)."""
        return bool(self.inference.session is not None and self.inference._fixed_batch_one())

    def close(self) -> None:
        if getattr(self, "inference", None) is not None:
            self.inference.session = None
            self.inference = None
        self.objects.clear()
        gc.collect()

    def __enter__(self) -> LocalApp:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the stages ---------------------------------------------------------------------------
    def pre(self, data: bytes, name: str = "upload") -> StageRun:
        """f1 on an upload (the bytes ``make_input`` gives, for instance)."""
        from .stages import run_pre

        f1 = self.card.functions[0]
        ref = self._place(self.INPUT_BUCKET, f"{self.card.slug}/{name}", data)
        return self._call(f1, ref, {"input": ref.to_dict()}, lambda e, c: run_pre(e, c, kind=self.card.input_kind))

    def infer(self, tensors_payload: bytes, previous: dict | None = None) -> StageRun:
        """f2 on f1's output (``.npy``/``.npz`` bytes; ``stack_payloads`` makes a batch);
        ``previous`` is f1's answer, passed on as the chain runner does."""
        f1, f2, _ = self.card.functions
        ref = self._place(self.INTERMEDIATES, f"{self.card.key}/{self._calls}/{f1}", tensors_payload)
        body = {"input": ref.to_dict(), "inputs": [ref.to_dict()], "previous": {f1: previous or {}}, "app": f1}
        run = self._call(f2, ref, body, self.inference.handle)
        run.extra["model_wall_s"] = run.answer.get("inference_seconds")
        return run

    def notify(self, result_payload: bytes, previous: dict | None = None) -> StageRun:
        """f3 on f2's result object; ``previous`` is f2's answer."""
        from .stages import run_notify

        f1, f2, f3 = self.card.functions
        ref = self._place(self.INTERMEDIATES, f"{self.card.key}/{self._calls}/{f2}", result_payload)
        body = {"input": ref.to_dict(), "inputs": [ref.to_dict()], "previous": {f2: previous or {}}, "app": f1}
        return self._call(f3, ref, body, run_notify, output=False)

    def chain(self, data: bytes) -> tuple[StageRun, StageRun, StageRun]:
        """f1 → f2 → f3 on one upload."""
        one = self.pre(data)
        two = self.infer(one.output, one.answer)
        three = self.notify(two.output, two.answer)
        return one, two, three

    # -- plumbing ---------------------------------------------------------------------------
    def _place(self, bucket: str, key: str, data: bytes):
        from nearfaas.runtime.context import ObjectRef

        ref = ObjectRef(bucket, key)
        self.objects.put(ref, data)
        return ref

    def _call(self, function: str, ref, body: dict, stage, output: bool = True) -> StageRun:
        from nearfaas.runtime.context import Context, Event, ObjectRef, Secrets

        self._calls += 1
        call_id = f"profile-{self._calls}"
        out = ObjectRef(self.INTERMEDIATES, f"{self.card.key}/{call_id}/{function}") if output else None
        context = Context(function=function, node="local", call_id=f"{call_id}/{function}", input=ref, objects=self.objects,
                          secrets=Secrets(None), output=out, environment=dict(self.env[function]))
        event = Event(body=json.dumps({**body, "call_id": call_id}).encode(), headers={"Content-Type": "application/json"})
        cpu0, wall0 = cpu_wall()
        answer = stage(event, context)
        cpu1, wall1 = cpu_wall()
        if isinstance(answer, dict) and isinstance(answer.get("statusCode"), int) and answer["statusCode"] >= 400:
            raise StageFailed(f"{function} answered {answer['statusCode']}: {json.dumps(answer.get('body'))[:500]}")
        written = self.objects.store.pop((out.bucket, out.key), None) if out is not None else None
        self.objects.store.pop((ref.bucket, ref.key), None)
        if output and written is None:
            raise StageFailed(f"{function} wrote nothing to context.output")
        return StageRun(function, answer, written, cpu1 - cpu0, wall1 - wall0)


def stack_payloads(payloads: list[bytes]) -> bytes:
    """One intermediate holding a batch: f1's ``.npy``/``.npz`` outputs stacked on the batch axis
    (axis 0) array by array; the metadata (tokens, offsets) is the first one's."""
    import numpy as np

    from . import tensors

    if not payloads:
        raise ValueError("no payloads to stack")
    loaded = [tensors.load(p) for p in payloads]
    names = list(loaded[0][0])
    for arrays, _ in loaded[1:]:
        if list(arrays) != names:
            raise ValueError(f"the payloads hold different arrays: {names} vs {list(arrays)}")
    stacked = {name: np.concatenate([arrays[name] for arrays, _ in loaded], axis=0) for name in names}
    if names == [""]:
        return tensors.npy_bytes(stacked[""])
    meta = loaded[0][1]
    return tensors.npz_bytes(stacked, meta if meta else None)
