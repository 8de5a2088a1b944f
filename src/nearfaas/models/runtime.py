"""Running a zoo model: a thin ONNX Runtime session that checks its feeds first.

ONNX Runtime's own message for a wrong feed names neither the expected nor the given shape in a
way a function author can act on; :meth:`InferenceSession.run` checks names, dtypes and shapes
(symbolic dimensions such as ``batch`` take any size, but one name takes one size across the
inputs) and raises :class:`InputError` naming the input, the expected and the given shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


class ModelFileError(ValueError):
    """The file is missing or is not a model ONNX Runtime can load."""


class InputError(ValueError):
    """A feed is missing, unknown, or has the wrong dtype or shape."""


def _np_dtype(name: str):
    """The numpy dtype an input's dtype name means, or None (no numpy dtype: nothing is accepted)."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _fmt(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class InferenceSession:
    """An ONNX Runtime CPU session with ``threads`` intra-op threads and one inter-op thread."""

    def __init__(self, path: str | Path, threads: int = 1):
        self.path = Path(path)
        fix = "build it with nearfaas.models.build(key, size) (a damaged cached file: delete its folder and build again)"
        if not self.path.is_file():
            raise ModelFileError(f"model file {self.path} does not exist; {fix}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own Fail/InvalidProtobuf/... types
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise ModelFileError(f"{self.path} is not an ONNX model ONNX Runtime can load ({reason}); {fix}") from e
        # (name, shape with int or symbolic str dims, numpy dtype name)
        self.inputs: list[tuple[str, tuple, str]] = [
            (i.name, tuple(d if isinstance(d, int) else (d or "?") for d in i.shape), _ORT_DTYPES.get(i.type, i.type))
            for i in self._session.get_inputs()
        ]
        self.output_names: list[str] = [o.name for o in self._session.get_outputs()]
        self._expected = {name: (shape, dtype) for name, shape, dtype in self.inputs}
        self._accepts = [(name, shape, _np_dtype(dtype)) for name, shape, dtype in self.inputs]  # check's fast pass

    def check(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Validate ``feeds`` against the model's inputs; returns them as numpy arrays.

        Why two passes: this runs on every f2 call, where a 1-node model takes ~6 us in ONNX
        Runtime, so the accepting pass only compares (no message is formatted unless one is
        raised: building them eagerly cost ~8 us an input); ``_refusal`` names what is wrong."""
        expected = self._expected
        if len(feeds) != len(expected) or any(n not in expected for n in feeds):
            raise self._refusal(feeds)
        out, sizes = {}, {}
        for name, shape, dtype in self._accepts:
            arr = feeds[name]
            if not isinstance(arr, np.ndarray):
                arr = np.asarray(arr)
            if arr.dtype != dtype or arr.ndim != len(shape):
                raise self._refusal(feeds)
            for want_d, got_d in zip(shape, arr.shape, strict=True):
                if (want_d != got_d) if isinstance(want_d, int) else (sizes.setdefault(want_d, got_d) != got_d):
                    raise self._refusal(feeds)
            out[name] = arr
        return out

    def _refusal(self, feeds: dict) -> InputError:
        """The InputError naming the first thing wrong with ``feeds`` (``check`` found one)."""
        expected = self._expected
        unknown = sorted(set(feeds) - set(expected))
        if unknown:
            return InputError(f"unknown input {', '.join(map(repr, unknown))}; the model's inputs are {', '.join(expected)}")
        missing = [n for n in expected if n not in feeds]
        if missing:
            return InputError(
                "missing input " + ", ".join(f"{n!r} (expected shape {_fmt(expected[n][0])} {expected[n][1]})" for n in missing)
            )
        sizes: dict = {}
        for name, (shape, dtype) in expected.items():
            arr = np.asarray(feeds[name])
            want = f"expected shape {_fmt(shape)} {dtype}, got {_fmt(arr.shape)} {arr.dtype}"
            if arr.dtype.name != dtype:
                return InputError(f"input {name!r} has the wrong dtype: {want}")
            if arr.ndim != len(shape):
                return InputError(f"input {name!r} has the wrong number of dimensions: {want}")
            for want_d, got_d in zip(shape, arr.shape, strict=True):
                if isinstance(want_d, int):
                    if want_d != got_d:
                        return InputError(f"input {name!r} has the wrong shape: {want}")
                elif sizes.setdefault(want_d, (got_d, name))[0] != got_d:
                    other_size, other = sizes[want_d]
                    return InputError(f"input {name!r} has {want_d}={got_d} but input {other!r} has {want_d}={other_size}: {want}")
        return InputError("the inputs do not fit the model")  # unreachable: check found a difference

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Run the model; returns {output name: array} (all outputs unless ``outputs`` names some)."""
        names = list(outputs) if outputs is not None else self.output_names
        results = self._session.run(names, self.check(feeds))
        return dict(zip(names, results, strict=True))
