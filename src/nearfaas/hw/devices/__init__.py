"""Device catalog: the DSCS Table 2 platforms with cited specs and a roofline latency model.

>>> from nearfaas.hw.devices import get
>>> get("dsa").latency({"kind": "gemm", "flops": 2e9, "bytes": 1e6}) > 0
True
"""

from ..sourced import Sourced
from .catalog import BUILDERS, catalog, dsa, get
from .model import OP_KINDS, SPEC_FIELDS, Device, Efficiency

__all__ = ["BUILDERS", "OP_KINDS", "SPEC_FIELDS", "Device", "Efficiency", "Sourced", "catalog", "dsa", "get"]
