"""Accelerator configuration, SRAM (CACTI-table) interpolation, and an area model.

All base numbers are at 45 nm and are scaled with :func:`nearfaas.hw.tech.scale`.
Sources are from /work/shared/hw-references.md (§ numbers below); [src] = named public source,
[ran] = computed with the named tool on this machine kind, [mem] = unverified recollection,
[assumption] = our choice, with the sweep range to use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import tech

DTYPES: tuple[str, ...] = ("int8", "int16", "fp16", "bf16", "fp32")
SOURCES: tuple[str, ...] = ("horowitz", "aladdin")
DTYPE_BITS = {"int8": 8, "int16": 16, "fp16": 16, "bf16": 16, "fp32": 32}

# --------------------------------------------------------------------------------------------
# CACTI 7 SRAM points (hw-references.md §3.2 [ran]: zigzag-dse's CACTI 7, 'ram', 1 bank,
# 1 RW port, line = bus width).  45 nm, 64-bit wide: size_bytes -> (read pJ, write pJ, area mm2).
CACTI_45NM_X64 = {
    8 * 1024: (6.05, 7.41, 0.029),
    32 * 1024: (17.0, 14.5, 0.106),
    1024 * 1024: (77.2, 63.9, 3.57),
    4 * 1024 * 1024: (139.5, 126.1, 13.9),
}
# 45 nm, 4 MB, 1024-bit wide (same table) -> used to derive the width exponents.
CACTI_45NM_4MB_X1024 = (1539.6, 1899.9, 20.4)
# 22 nm, 1024-bit wide (same table). Used for the >4 MB size slope and as a validation check.
CACTI_22NM_X1024 = {
    1024 * 1024: (203.8, 249.0, 1.49),
    4 * 1024 * 1024: (525.2, 616.2, 5.26),
    32 * 1024 * 1024: (1473.6, 1655.7, 31.4),
}
_4MB = 4 * 1024 * 1024
# Width exponents: per-access quantity ∝ (width/64)^k, k fitted on the one 45 nm pair
# (4 MB x64 vs x1024) [derived from §3.2 [ran]]; assumption: k holds at other sizes.
WIDTH_EXP = {i: math.log(CACTI_45NM_4MB_X1024[i] / CACTI_45NM_X64[_4MB][i]) / math.log(1024 / 64) for i in range(3)}
# Above 4 MB: log-log slope of the 22 nm x1024 points 4 MB -> 32 MB (no 45 nm point there).
LARGE_SLOPE = {i: math.log(CACTI_22NM_X1024[32 * 1024 * 1024][i] / CACTI_22NM_X1024[_4MB][i]) / math.log(8) for i in range(3)}
SRAM_MIN_BYTES = 1024
SRAM_MAX_BYTES = 256 * 1024 * 1024


def _check_sram(size_bytes: float, width_bits: int, field_: str = "sram") -> None:
    if not isinstance(size_bytes, (int, float)) or not SRAM_MIN_BYTES <= size_bytes <= SRAM_MAX_BYTES:
        raise ValueError(f"{field_}.size_bytes={size_bytes!r}: must be between {SRAM_MIN_BYTES} and {SRAM_MAX_BYTES} bytes")
    if not isinstance(width_bits, int) or width_bits < 8 or width_bits % 8:
        raise ValueError(f"{field_}.width_bits={width_bits!r}: must be a positive multiple of 8 (e.g. 64, 128, 1024)")


def _sram_45nm(size_bytes: float, width_bits: int, i: int) -> float:
    """Quantity i (0 read pJ/access, 1 write pJ/access, 2 area mm2) at 45 nm.

    Method: piecewise-linear interpolation of log(quantity) in log(size) between the CACTI points
    (45 nm, x64); below 8 KB the 8-32 KB slope is extended; above 4 MB the 22 nm x1024 4-32 MB
    slope is used; then x (width/64)^WIDTH_EXP[i].
    """
    pts = sorted(CACTI_45NM_X64.items())
    xs = [math.log(s) for s, _ in pts]
    ys = [math.log(v[i]) for _, v in pts]
    x = math.log(size_bytes)
    if x >= xs[-1]:
        y = ys[-1] + LARGE_SLOPE[i] * (x - xs[-1])
    else:
        j = 0 if x <= xs[0] else max(k for k in range(len(xs) - 1) if xs[k] <= x)
        y = ys[j] + (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j]) * (x - xs[j])
    return math.exp(y) * (width_bits / 64) ** WIDTH_EXP[i]


def sram_read_pj(size_bytes: float, width_bits: int, node_nm: int = 45) -> float:
    """Energy of one read access of ``width_bits`` (CACTI-interpolated, tech-scaled), pJ."""
    _check_sram(size_bytes, width_bits)
    return tech.scale(_sram_45nm(size_bytes, width_bits, 0), "energy", 45, node_nm)


def sram_write_pj(size_bytes: float, width_bits: int, node_nm: int = 45) -> float:
    _check_sram(size_bytes, width_bits)
    return tech.scale(_sram_45nm(size_bytes, width_bits, 1), "energy", 45, node_nm)


def sram_area_mm2(size_bytes: float, width_bits: int, node_nm: int = 45) -> float:
    _check_sram(size_bytes, width_bits)
    return tech.scale(_sram_45nm(size_bytes, width_bits, 2), "area", 45, node_nm)


# --------------------------------------------------------------------------------------------
# PE (MAC unit) area at 45 nm, µm².
# Horowitz ISSCC'14 (Han/Dally reproduction; areas are [mem], hw-references §3.1): MAC = mult +
# accumulator add (32-bit int accumulator for int types, fp32 accumulator for fp types).
PE_AREA_UM2_45 = {
    "horowitz": {
        "int8": 282 + 137,  # 8b mult 282 + 32b add 137 [mem]
        # 16b int mult: no table entry; width^2 interpolation between 8b (282) and 32b (3,495)
        # gives ~1,130 [assumption, sweep 800-1,500]
        "int16": 1130 + 137,
        "fp16": 1640 + 4184,  # fp16 mult 1,640 + fp32 add 4,184 [mem]
        # bf16 mult: no entry. Multiplier area ~ mantissa^2: fp16 1,640 x (8/11)^2 ~ 870
        # [assumption, sweep 0.5-1.0x fp16]
        "bf16": 870 + 4184,
        "fp32": 7700 + 4184,  # fp32 mult + fp32 add [mem]
    },
    "aladdin": {
        # Aladdin IntMAC via hwcomponents-library, 45 nm (hw-references §3.3 [ran]); includes
        # pipeline registers.
        "int8": 986.0,
        "int16": 2727.0,
    },
}
# Aladdin has no FP MAC in the table: fp types = Horowitz area x the int8 Aladdin/Horowitz ratio
# (986/419 = 2.35) [assumption, sweep 1.5-3.5x].
ALADDIN_OVER_HOROWITZ_AREA = PE_AREA_UM2_45["aladdin"]["int8"] / PE_AREA_UM2_45["horowitz"]["int8"]
# VPU lane: one fp32 mult + one fp32 add (Horowitz areas [mem]) plus 20 % for lane registers and
# the LUT for activation functions [assumption, sweep 1.0-2.0x].
VPU_LANE_AREA_UM2_45 = (7700 + 4184) * 1.2
# Control, NoC, DMA, IO, clock tree: a fraction of the core area [assumption, default 0.2,
# sweep 0.1-0.4].
DEFAULT_OVERHEAD_FRACTION = 0.2


def pe_area_um2_45(dtype: str, source: str) -> float:
    check_dtype(dtype)
    check_source(source)
    table = PE_AREA_UM2_45[source]
    if dtype in table:
        return table[dtype]
    return PE_AREA_UM2_45["horowitz"][dtype] * ALADDIN_OVER_HOROWITZ_AREA


def check_dtype(dtype: str, field_: str = "dtype") -> str:
    if dtype not in DTYPES:
        raise ValueError(f"{field_}={dtype!r}: unknown data type; use one of {list(DTYPES)}")
    return dtype


def check_source(source: str, field_: str = "source") -> str:
    if source not in SOURCES:
        raise ValueError(
            f"{field_}={source!r}: unknown energy/area source; use 'horowitz' (bare-arithmetic lower bound) or 'aladdin' (synthesised PE)"
        )
    return source


@dataclass(frozen=True)
class SramBuffer:
    """One on-chip buffer: ``size_bytes`` capacity, ``width_bits`` per access (line = bus width)."""

    name: str = "global"
    size_bytes: int = 4 * 1024 * 1024
    width_bits: int = 1024

    def validate(self, field_: str = "buffers") -> None:
        _check_sram(self.size_bytes, self.width_bits, f"{field_}[{self.name!r}]")


@dataclass(frozen=True)
class AcceleratorConfig:
    """The DSA-style accelerator shared by the energy and area models.

    Defaults: the DSCS Table 2 DSA (128x128 PEs, 4 MB on-chip, 1 GHz, 14 nm) with an int8 MPU,
    DDR5 (``nearfaas.hw.memory``: 38.4 GB/s, the paper's DSE option, §4.2) and a 128-lane VPU
    [assumption: one lane per column].
    """

    node_nm: int = 14
    dtype: str = "int8"
    source: str = "aladdin"
    rows: int = 128
    cols: int = 128
    vpu_lanes: int = 128
    clock_hz: float = 1e9
    buffers: tuple[SramBuffer, ...] = field(default_factory=lambda: (SramBuffer(),))
    dram: str = "ddr5"
    overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION

    def validate(self) -> AcceleratorConfig:
        tech.check_node(self.node_nm)
        check_dtype(self.dtype)
        check_source(self.source)
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r}: must be a positive integer (PE array dimension)")
        if not isinstance(self.vpu_lanes, int) or self.vpu_lanes < 0:
            raise ValueError(f"vpu_lanes={self.vpu_lanes!r}: must be a non-negative integer")
        if not self.clock_hz > 0:
            raise ValueError(f"clock_hz={self.clock_hz!r}: must be > 0 (e.g. 1e9)")
        if not 0 <= self.overhead_fraction < 1:
            raise ValueError(f"overhead_fraction={self.overhead_fraction!r}: must be in [0, 1)")
        if not self.buffers:
            raise ValueError("buffers=(): give at least one SramBuffer(name, size_bytes, width_bits)")
        names = [b.name for b in self.buffers]
        if len(set(names)) != len(names):
            raise ValueError(f"buffers: duplicate names {names}; give each buffer a unique name")
        for b in self.buffers:
            b.validate()
        return self

    @classmethod
    def from_dsa_config(cls, dsa_cfg: Any, source: str = "aladdin") -> AcceleratorConfig:
        """Build from a ``nearfaas.hw.dsa.config.DSAConfig`` (duck-typed: rows, cols, vpu_lanes,
        clock_ghz, dram, bytes_per_element, acc_bytes, technology_nm, ifmap/filter/ofmap_sram_kib).

        Buffer widths: ifmap and filter deliver one element per array row per cycle
        (rows x bytes_per_element x 8 bits); ofmap carries one partial sum per column
        (cols x acc_bytes x 8 bits) [assumption of this mapping].
        """
        dtype = {1: "int8", 2: "fp16", 4: "fp32"}.get(dsa_cfg.bytes_per_element)
        if dtype is None:
            raise ValueError(f"bytes_per_element={dsa_cfg.bytes_per_element!r}: use 1 (int8), 2 (fp16) or 4 (fp32)")
        node = int(dsa_cfg.technology_nm)
        if node != dsa_cfg.technology_nm:
            raise ValueError(f"technology_nm={dsa_cfg.technology_nm!r}: use a whole node from {list(tech.NODES_NM)}")
        if not isinstance(dsa_cfg.dram, str):
            raise ValueError(
                f"dram={dsa_cfg.dram!r}: the energy model needs a named memory type (ddr4, ddr5, hbm2, lpddr4), not a bandwidth"
            )
        in_w = dsa_cfg.rows * dsa_cfg.bytes_per_element * 8
        out_w = dsa_cfg.cols * getattr(dsa_cfg, "acc_bytes", 4) * 8
        buffers = (
            SramBuffer("ifmap", int(dsa_cfg.ifmap_sram_kib * 1024), in_w),
            SramBuffer("filter", int(dsa_cfg.filter_sram_kib * 1024), in_w),
            SramBuffer("ofmap", int(dsa_cfg.ofmap_sram_kib * 1024), out_w),
        )
        return cls(
            node_nm=node,
            dtype=dtype,
            source=source,
            rows=dsa_cfg.rows,
            cols=dsa_cfg.cols,
            vpu_lanes=dsa_cfg.vpu_lanes,
            clock_hz=dsa_cfg.clock_ghz * 1e9,
            buffers=buffers,
            dram=dsa_cfg.dram.lower(),
        ).validate()

    @property
    def pes(self) -> int:
        return self.rows * self.cols

    def peak_ops_per_s(self) -> float:
        """2 ops (mult + add) per PE per cycle."""
        return 2.0 * self.pes * self.clock_hz


def area_mm2(config: AcceleratorConfig) -> dict[str, float]:
    """Area parts in mm² at ``config.node_nm``: pe_array, sram, vpu, overhead, total."""
    config.validate()
    n = config.node_nm
    pe = tech.scale(pe_area_um2_45(config.dtype, config.source) * config.pes * 1e-6, "area", 45, n)
    sram = sum(sram_area_mm2(b.size_bytes, b.width_bits, n) for b in config.buffers)
    vpu = tech.scale(VPU_LANE_AREA_UM2_45 * config.vpu_lanes * 1e-6, "area", 45, n)
    core = pe + sram + vpu
    overhead = core * config.overhead_fraction / (1 - config.overhead_fraction)
    parts = {"pe_array": pe, "sram": sram, "vpu": vpu, "overhead": overhead}
    parts["total"] = sum(parts.values())
    return parts
