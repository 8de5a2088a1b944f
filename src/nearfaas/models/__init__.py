"""The model zoo of the eight DSCS-Serverless applications, built in code as ONNX graphs.

See docs/models.md. ``build(key, size)`` writes a seeded random-weight model into the cache
and returns its path; ``shapes_only`` gives the graph without weight bytes for analysis;
``InferenceSession`` runs a model with ONNX Runtime after checking its feeds.
"""

from .catalog import MODELS, BUILDER_VERSION, ModelCard, param_count, shapes_only
from .real import ModelUnavailableError
from .runtime import InferenceSession, InputError, ModelFileError
from .store import build, cached_path, default_cache_dir

__all__ = [
    "BUILDER_VERSION",
    "MODELS",
    "InferenceSession",
    "InputError",
    "ModelCard",
    "ModelFileError",
    "ModelUnavailableError",
    "build",
    "cached_path",
    "default_cache_dir",
    "param_count",
    "shapes_only",
]
