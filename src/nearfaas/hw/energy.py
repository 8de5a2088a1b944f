"""Energy model of a DSA-style accelerator (MPU + VPU + SRAM) plus its DRAM.

Per-event energies at 45 nm, scaled to the configured node with :mod:`nearfaas.hw.tech`.
Sources: /work/shared/hw-references.md (§ numbers below). Legend: [src] named public source,
[ran] computed with the named tool on this machine kind, [mem] unverified, [assumption] our
choice with a sweep range. DRAM energy is reported in its own part ("dram") and kept out of the
accelerator's own power (``average_power``), as the DSCS 4.2 W figure excludes it (§3.4, §3.8).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import tech
from .area import DTYPES, AcceleratorConfig, SramBuffer, area_mm2, check_dtype, sram_read_pj, sram_write_pj
from .memory import MEMORY

PJ = 1e-12

# --- MAC energy at 45 nm, pJ per MAC ---------------------------------------------------------
# Horowitz ISSCC'14 "Computing's energy problem", Fig./table of 45 nm 0.9 V arithmetic energies
# (hw-references §3.1): bare arithmetic = a LOWER BOUND. MAC = mult + accumulate add.
HOROWITZ_PJ_45 = {
    "int8_mult": 0.2,  # [src]
    "int16_mult": 0.8,  # no table entry: width^2 interpolation (some libraries use 1.0) [assumption, sweep 0.6-1.0]
    "int32_add": 0.1,  # [src]
    "fp16_mult": 1.1,  # [src]
    "fp16_add": 0.4,  # [src]
    "fp32_mult": 3.7,  # [src]
    "fp32_add": 0.9,  # [src]
    # bf16 mult: no entry; multiplier energy ~ mantissa^2: 1.1 x (8/11)^2 = 0.58 [assumption, sweep 0.5-1.1]
    "bf16_mult": 1.1 * (8 / 11) ** 2,
}
_H = HOROWITZ_PJ_45
HOROWITZ_MAC_PJ_45 = {
    "int8": _H["int8_mult"] + _H["int32_add"],  # 0.3 pJ: 32-bit accumulator (§3.1)
    "int16": _H["int16_mult"] + _H["int32_add"],
    "fp16": _H["fp16_mult"] + _H["fp32_add"],  # fp32 accumulation [assumption: as tensor cores]
    "bf16": _H["bf16_mult"] + _H["fp32_add"],
    "fp32": _H["fp32_mult"] + _H["fp32_add"],
}
# Aladdin IntMAC (hwcomponents-library, scaled to 45 nm; hw-references §3.3 [ran]): synthesised
# FUs at 1 GHz including pipeline registers -> the realistic "synthesised PE" estimate.
ALADDIN_MAC_PJ_45 = {"int8": 1.154, "int16": 3.890}
# Aladdin has no FP MAC: fp types = Horowitz x the int ratio. §3.3 says "~4x"; int8 gives
# 1.154/0.3 = 3.85, int16 3.890/0.9 = 4.3. We use 4.0 [assumption, sweep 3-5].
ALADDIN_OVER_HOROWITZ = 4.0

# PE-local register traffic for the Horowitz lower bound (Aladdin already includes its
# registers): Aladdin 1-bit register 0.009 pJ/read at 40 nm (§3.3 [ran]), used as-is for 45 nm
# [assumption: 40->45 nm difference ignored]. Bits moved per MAC in a weight-stationary array:
# the activation passed right + the partial sum passed down (weights stay) [assumption].
REGISTER_PJ_PER_BIT_45 = 0.009
ACC_BITS = {"int8": 32, "int16": 32, "fp16": 32, "bf16": 32, "fp32": 32}
IN_BITS = {"int8": 8, "int16": 16, "fp16": 16, "bf16": 16, "fp32": 32}

# VPU: one lane-op ~ one fp32 add + register read/write of 2x32 bits (Horowitz 0.9 pJ + 64 x
# 0.009) [assumption, sweep 0.5-2x]; with source "aladdin" x ALADDIN_OVER_HOROWITZ.
VPU_PJ_PER_OP_45_HOROWITZ = _H["fp32_add"] + 64 * REGISTER_PJ_PER_BIT_45

# --- DRAM energy, pJ per bit: from the memory table (``nearfaas.hw.memory``, hw-references §3.4) ---
DRAM_PJ_PER_BIT = {k: float(m.pj_per_bit.value) for k, m in MEMORY.items()}
DRAM_SWEEP = {k: m.pj_per_bit.sweep for k, m in MEMORY.items()}

# --- Leakage ----------------------------------------------------------------------------------
# Aladdin 32-bit adder leaks 2.4 µW in 278 µm² at 40 nm (§3.3 [ran]) => 8.6 mW/mm² logic leakage
# density at ~45 nm; scaled by tech "leakage"/"area" factors. Applied to the whole area (SRAM
# included; hwcomponents-cacti's SRAM leakage looked implausibly small, §3.2) [assumption, sweep
# 0.25x-4x]. Alternative mode "fraction": static = fraction x dynamic (mac+sram+vpu) [assumption,
# default 0.1, sweep 0.05-0.3].
LEAKAGE_W_PER_MM2_45 = 2.4e-6 / 278e-6
LEAKAGE_SWEEP = {"per_mm2_multiplier": (0.25, 4.0), "fraction": (0.05, 0.3)}

PARTS = ("mac", "sram", "dram", "vpu", "static")


def mac_pj(dtype: str, source: str, node_nm: int) -> dict[str, float]:
    """Per-MAC energy components at ``node_nm`` in pJ: {"arith", "pe_local", "total"}."""
    check_dtype(dtype)
    if source == "horowitz":
        arith = HOROWITZ_MAC_PJ_45[dtype]
        local = REGISTER_PJ_PER_BIT_45 * (IN_BITS[dtype] + ACC_BITS[dtype])
    elif source == "aladdin":
        arith = ALADDIN_MAC_PJ_45.get(dtype, HOROWITZ_MAC_PJ_45[dtype] * ALADDIN_OVER_HOROWITZ)
        local = 0.0  # included in the synthesised PE
    else:
        raise ValueError(f"source={source!r}: use 'horowitz' (bare-arithmetic lower bound) or 'aladdin' (synthesised PE)")
    arith = tech.scale(arith, "energy", 45, node_nm)
    local = tech.scale(local, "energy", 45, node_nm)
    return {"arith": arith, "pe_local": local, "total": arith + local}


def dram_pj_per_bit(kind: str) -> float:
    if kind not in DRAM_PJ_PER_BIT:
        raise ValueError(f"dram={kind!r}: unknown memory type; use one of {sorted(DRAM_PJ_PER_BIT)} or set dram_pj_per_bit")
    return DRAM_PJ_PER_BIT[kind]


@dataclass(frozen=True)
class EnergyConfig:
    """Knobs of the energy model. ``None`` overrides mean 'use the cited default'."""

    accel: AcceleratorConfig = field(default_factory=AcceleratorConfig)
    mac_pj_override: float | None = None
    vpu_pj_per_op_override: float | None = None
    dram_pj_per_bit: float | None = None
    leakage_mode: str = "per_mm2"  # or "fraction"
    leakage_multiplier: float = 1.0  # x LEAKAGE_W_PER_MM2_45 (per_mm2 mode), sweep 0.25-4
    leakage_fraction: float = 0.1  # fraction mode, sweep 0.05-0.3


class EnergyModel:
    """Energy of a run from event counts.

    >>> m = EnergyModel()
    >>> b = m.breakdown({"macs": 1e9, "cycles": 1e5, "clock_hz": 1e9})
    >>> abs(b["total"] - sum(b[k] for k in PARTS)) < 1e-18
    True
    """

    def __init__(self, config: EnergyConfig | AcceleratorConfig | None = None, **accel_overrides: Any):
        if config is None:
            config = EnergyConfig()
        if isinstance(config, AcceleratorConfig):
            config = EnergyConfig(accel=config)
        if accel_overrides:
            config = replace(config, accel=replace(config.accel, **accel_overrides))
        self.config = config
        a = config.accel.validate()
        if config.leakage_mode not in ("per_mm2", "fraction"):
            raise ValueError(f"leakage_mode={config.leakage_mode!r}: use 'per_mm2' or 'fraction'")
        for name in ("leakage_multiplier", "leakage_fraction"):
            if getattr(config, name) < 0:
                raise ValueError(f"{name}={getattr(config, name)!r}: must be >= 0")
        for name in ("mac_pj_override", "vpu_pj_per_op_override", "dram_pj_per_bit"):
            v = getattr(config, name)
            if v is not None and v < 0:
                raise ValueError(f"{name}={v!r}: must be >= 0 pJ (or None for the cited default)")
        n = a.node_nm
        self.mac_pj = config.mac_pj_override if config.mac_pj_override is not None else mac_pj(a.dtype, a.source, n)["total"]
        if config.vpu_pj_per_op_override is not None:
            self.vpu_pj = config.vpu_pj_per_op_override
        else:
            base = VPU_PJ_PER_OP_45_HOROWITZ * (ALADDIN_OVER_HOROWITZ if a.source == "aladdin" else 1.0)
            self.vpu_pj = tech.scale(base, "energy", 45, n)
        self.dram_pj_bit = config.dram_pj_per_bit if config.dram_pj_per_bit is not None else dram_pj_per_bit(a.dram)
        self.sram = {
            b.name: {
                "buffer": b,
                "read_pj": sram_read_pj(b.size_bytes, b.width_bits, n),
                "write_pj": sram_write_pj(b.size_bytes, b.width_bits, n),
            }
            for b in a.buffers
        }
        self.area_mm2 = area_mm2(a)["total"]
        density = LEAKAGE_W_PER_MM2_45 * tech.factor_vs_45("leakage", n) / tech.factor_vs_45("area", n)
        self.static_w = density * config.leakage_multiplier * self.area_mm2

    # -- helpers ---------------------------------------------------------------------------
    def _per_buffer(self, value: Any, field_: str) -> dict[str, float]:
        if value is None:
            return {}
        if isinstance(value, (int, float)):
            if len(self.sram) != 1:
                raise ValueError(
                    f"{field_}={value!r}: several buffers are configured ({list(self.sram)}); give a dict {{buffer name: bytes}}"
                )
            value = {next(iter(self.sram)): value}
        if not isinstance(value, dict):
            raise ValueError(f"{field_}: give a number of bytes or a dict {{buffer name: bytes}}")
        for name, v in value.items():
            if name not in self.sram:
                raise ValueError(f"{field_}[{name!r}]: unknown buffer; configured buffers are {list(self.sram)}")
            _nonneg(v, f"{field_}[{name!r}]")
        return value

    def sram_pj_per_byte(self, buffer: str, write: bool = False) -> float:
        s = self.sram[buffer]
        return s["write_pj" if write else "read_pj"] / (s["buffer"].width_bits / 8)

    # -- API -------------------------------------------------------------------------------
    def breakdown(self, counts: dict[str, Any]) -> dict[str, float]:
        """Energy parts in joules: mac, sram, dram, vpu, static, and total (= their sum).

        counts: macs, sram_reads_bytes / sram_writes_bytes (bytes, or {buffer: bytes}),
        dram_bytes, vpu_ops, cycles, clock_hz (default: the config clock). Missing counts are 0.
        Static energy = static power x cycles / clock_hz ("per_mm2" mode) or a fraction of the
        dynamic MPU+VPU+SRAM energy ("fraction" mode).
        """
        known = {"macs", "sram_reads_bytes", "sram_writes_bytes", "dram_bytes", "vpu_ops", "cycles", "clock_hz"}
        unknown = set(counts) - known
        if unknown:
            raise ValueError(f"counts: unknown keys {sorted(unknown)}; use {sorted(known)}")
        macs = _nonneg(counts.get("macs", 0), "macs")
        dram_b = _nonneg(counts.get("dram_bytes", 0), "dram_bytes")
        vpu_ops = _nonneg(counts.get("vpu_ops", 0), "vpu_ops")
        cycles = _nonneg(counts.get("cycles", 0), "cycles")
        clock = counts.get("clock_hz", self.config.accel.clock_hz)
        if not isinstance(clock, (int, float)) or clock <= 0:
            raise ValueError(f"clock_hz={clock!r}: must be > 0")
        reads = self._per_buffer(counts.get("sram_reads_bytes"), "sram_reads_bytes")
        writes = self._per_buffer(counts.get("sram_writes_bytes"), "sram_writes_bytes")
        sram_pj = sum(v * self.sram_pj_per_byte(k) for k, v in reads.items())
        sram_pj += sum(v * self.sram_pj_per_byte(k, write=True) for k, v in writes.items())
        parts = {
            "mac": macs * self.mac_pj * PJ,
            "sram": sram_pj * PJ,
            "dram": dram_b * 8 * self.dram_pj_bit * PJ,
            "vpu": vpu_ops * self.vpu_pj * PJ,
        }
        if self.config.leakage_mode == "per_mm2":
            parts["static"] = self.static_w * cycles / clock
        else:
            parts["static"] = self.config.leakage_fraction * (parts["mac"] + parts["sram"] + parts["vpu"])
        parts["total"] = parts["mac"] + parts["sram"] + parts["dram"] + parts["vpu"] + parts["static"]
        return parts

    @staticmethod
    def average_power(breakdown: dict[str, float], latency_s: float) -> dict[str, float]:
        """Average power (W) over ``latency_s``: the accelerator's own (everything but DRAM),
        DRAM separately, and their sum."""
        if not latency_s > 0:
            raise ValueError(f"latency_s={latency_s!r}: must be > 0 seconds")
        accel = breakdown["total"] - breakdown["dram"]
        return {"accelerator_w": accel / latency_s, "dram_w": breakdown["dram"] / latency_s, "total_w": breakdown["total"] / latency_s}

    def peak_power_w(self, sram_bytes_per_mac: float = 0.0) -> float:
        """Accelerator power with every PE busy each cycle (no DRAM), for a TDP-style figure."""
        a = self.config.accel
        macs_per_s = a.pes * a.clock_hz
        name = next(iter(self.sram))
        dyn = macs_per_s * (self.mac_pj + sram_bytes_per_mac * self.sram_pj_per_byte(name)) * PJ
        return dyn + self.static_w


def _nonneg(v: Any, field_: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or v != v:
        raise ValueError(f"{field_}={v!r}: must be a non-negative number")
    return float(v)


__all__ = ["DTYPES", "PARTS", "AcceleratorConfig", "EnergyConfig", "EnergyModel", "SramBuffer", "dram_pj_per_bit", "mac_pj"]
