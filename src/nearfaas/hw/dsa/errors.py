"""Errors of the DSA model: every message names the file/field at fault and, where possible, the fix."""


class HwError(ValueError):
    """Base class: a bad input to the hardware model (file, config, layer)."""


class GraphError(HwError):
    """An ONNX file that cannot be loaded or analysed."""


class ConfigError(HwError):
    """An impossible accelerator configuration value."""


class TopologyError(HwError):
    """A bad SCALE-Sim .cfg or topology CSV."""


class LayerError(HwError):
    """A zero-size or degenerate layer."""
