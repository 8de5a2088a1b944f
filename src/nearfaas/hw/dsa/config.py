"""The DSA configuration (``dsa.yml``) with validation that names the field and the fix.

```yaml
rows: 128                 # MPU systolic array height (PEs), power of two
cols: 128                 # width, power of two
dataflow: ws              # os | ws | is
ifmap_sram_kib: 1536      # input-activation buffer
filter_sram_kib: 1536     # weight buffer
ofmap_sram_kib: 1024      # output / partial-sum buffer (shared with the VPU)
vpu_lanes: 128            # SIMD lanes of the VPU, power of two
clock_ghz: 1.0
dram: ddr5                # ddr4 (19.2 GB/s) | ddr5 (38.4) | hbm2 (460) | a number in GB/s (hw.memory)
bytes_per_element: 1      # 1 (int8), 2 (fp16/bf16) or 4 (fp32)
technology_nm: 14
```

The defaults are the DSCS paper's DSA design point (§5.1/§6: 128×128 PEs at 1 GHz, 4 MB on chip,
DDR5, 14 nm). All keys may also sit under a top-level ``dsa:`` block.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..memory import DSE_MEMORIES, bandwidth_gbps
from .errors import ConfigError

# The DSCS §4.2 memory options, bandwidths from the one memory table (``nearfaas.hw.memory``).
DRAM_GBPS = {k: bandwidth_gbps(k) for k in DSE_MEMORIES}
DATAFLOWS = ("os", "ws", "is")


@dataclass(frozen=True)
class DSAConfig:
    rows: int = 128
    cols: int = 128
    dataflow: str = "ws"
    ifmap_sram_kib: float = 1536
    filter_sram_kib: float = 1536
    ofmap_sram_kib: float = 1024
    vpu_lanes: int = 128
    clock_ghz: float = 1.0
    dram: str | float = "ddr5"
    bytes_per_element: int = 1
    technology_nm: float = 14
    acc_bytes: int = 4  # partial sums held in the ofmap buffer
    vpu_pipeline: int = 8  # VPU pipeline depth (cycles exposed once per VPU op)
    source: str = "defaults"

    @property
    def dram_gbps(self) -> float:
        if isinstance(self.dram, str):
            return DRAM_GBPS[self.dram.lower()]
        return float(self.dram)

    @property
    def pes(self) -> int:
        return self.rows * self.cols

    def sram_bytes(self, which: str) -> int:
        return int(getattr(self, f"{which}_sram_kib") * 1024)

    def replace(self, **kw) -> DSAConfig:
        return dataclasses.replace(self, **kw).validated()

    def validated(self, pow2: bool = True) -> DSAConfig:
        src = self.source

        def bad(fld, why, fix):
            raise ConfigError(f"{src}: field '{fld}' {why}; {fix}")

        for f in ("rows", "cols", "vpu_lanes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                bad(f, f"must be an integer (got {v!r})", "write a whole number such as 128")
            if v <= 0:
                bad(f, f"must be positive (got {v})", "use e.g. 128")
            if pow2 and v & (v - 1):
                lo = 1 << (v.bit_length() - 1)
                bad(f, f"must be a power of two (got {v})", f"use {lo} or {lo * 2}")
        for f in ("ifmap_sram_kib", "filter_sram_kib", "ofmap_sram_kib", "clock_ghz", "technology_nm"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                bad(f, f"must be a number (got {v!r})", "write e.g. 1024")
            if v <= 0:
                bad(f, f"must be positive (got {v})", "use a size > 0")
        if self.dataflow not in DATAFLOWS:
            bad("dataflow", f"is unknown ({self.dataflow!r})", "use one of os, ws, is")
        if isinstance(self.dram, str):
            if self.dram.lower() not in DRAM_GBPS:
                bad("dram", f"is unknown ({self.dram!r})", "use ddr4, ddr5, hbm2 or a bandwidth in GB/s")
        elif isinstance(self.dram, bool) or not isinstance(self.dram, (int, float)) or self.dram <= 0:
            bad("dram", f"must be a positive bandwidth in GB/s (got {self.dram!r})", "e.g. 38.4")
        if self.bytes_per_element not in (1, 2, 4):
            bad("bytes_per_element", f"must be 1, 2 or 4 (got {self.bytes_per_element!r})", "use 1 for int8")
        if self.acc_bytes not in (1, 2, 4, 8) or self.vpu_pipeline < 0:
            bad("acc_bytes/vpu_pipeline", "is out of range", "use acc_bytes 4 and vpu_pipeline >= 0")
        return self


FIELDS = {f.name for f in dataclasses.fields(DSAConfig)} - {"source"}


def from_dict(data: dict, source: str = "dsa.yml", pow2: bool = True) -> DSAConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of fields, got {type(data).__name__}")
    if set(data) == {"dsa"}:
        data = data["dsa"]
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ConfigError(f"{source}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(FIELDS))}")
    kw = dict(data)
    if isinstance(kw.get("dataflow"), str):
        kw["dataflow"] = kw["dataflow"].lower()
    if isinstance(kw.get("dram"), str):
        try:
            kw["dram"] = float(kw["dram"])
        except ValueError:
            kw["dram"] = kw["dram"].lower()
    return DSAConfig(**kw, source=source).validated(pow2=pow2)


def load_config(path: str | Path | None) -> DSAConfig:
    """Read and validate a ``dsa.yml``; ``None`` gives the paper's design point."""
    if path is None:
        return DSAConfig().validated()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({exc})") from None
    return from_dict(data, source=str(p))
