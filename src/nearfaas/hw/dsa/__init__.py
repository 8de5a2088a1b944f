"""The DSCS DSA model: ONNX import, lowering, SCALE-Sim-compatible and DSA timing, compiler.

See docs/hw.md. Every number this package produces is *modelled*, not measured.
"""

from .compiler import Layer, Program, compile_model, compile_workload
from .config import DRAM_GBPS, DSAConfig, load_config
from .errors import ConfigError, GraphError, HwError, LayerError, TopologyError
from .graph import Op, Workload, load_ops
from .lower import Gemm, lower
from .scalesim_io import read_cfg, read_topology, write_topology
from .timing import dsa_compute_cycles, gemm_timing, preprocess_timing, scalesim_cycles

__all__ = [
    "DRAM_GBPS",
    "ConfigError",
    "DSAConfig",
    "Gemm",
    "GraphError",
    "HwError",
    "Layer",
    "LayerError",
    "Op",
    "Program",
    "TopologyError",
    "Workload",
    "compile_model",
    "compile_workload",
    "dsa_compute_cycles",
    "gemm_timing",
    "load_config",
    "load_ops",
    "lower",
    "preprocess_timing",
    "read_cfg",
    "read_topology",
    "scalesim_cycles",
    "write_topology",
]
