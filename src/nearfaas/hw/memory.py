"""Memory technologies: the one table of DRAM bandwidth and energy per bit, each figure cited.

Everything in ``nearfaas.hw`` that needs a memory figure reads it from here: the DSA
configuration (``dsa.config.DRAM_GBPS``), the device catalog (``devices.catalog``: the DSA's and
the FPGAs'/TX2's DRAM bandwidth) and the energy model (``energy.DRAM_PJ_PER_BIT``).

Sources (HWR = /work/shared/hw-references.md, DSCS = the DSCS-Serverless paper,
/work/shared/seeds/dscs-serverless.txt):

* Bandwidth is the peak of the configuration named in the source (channels x transfer rate x
  bus width), in GB/s.
* DDR5 is 38.4 GB/s, not 38: DSCS §4.2 lists "DDR4 (19.2 GB/s), DDR5 (38 GB/s) and HBM2
  (460 GB/s)". Its DDR4 figure is one 64-bit DDR4-2400 channel (2400 MT/s x 8 B = 19.2 GB/s,
  given unrounded); the same arithmetic for one 64-bit channel of DDR5-4800, the JEDEC DDR5 entry
  speed grade, gives 38.4 GB/s, which the paper rounds to 38. The DSA's timing model (and with it
  the DSE and the twin's DSA numbers) already used 38.4; only the catalog's DSA record said 38.
* Energy per bit: HWR §3.4 (hwcomponents-cacti table citing Malladi ISCA'12 for DDR3/LPDDR4/HBM2;
  no tool table has DDR4/DDR5, so those are assumptions swept +-50 %).
"""

from __future__ import annotations

from dataclasses import dataclass

from .sourced import Sourced


@dataclass(frozen=True)
class MemoryTech:
    """One memory technology: peak bandwidth (GB/s) of the cited configuration and pJ per bit moved."""

    name: str
    gbps: Sourced
    pj_per_bit: Sourced


MEMORY: dict[str, MemoryTech] = {
    m.name: m
    for m in (
        MemoryTech(
            "ddr3",
            Sourced(None, "not used: no modelled platform or DSA option has DDR3 (energy figure kept for comparison)", "src"),
            Sourced(70.0, "HWR §3.4: hwcomponents-cacti table citing Malladi ISCA'12", "src", (35.0, 105.0)),
        ),
        MemoryTech(
            "ddr4",
            Sourced(19.2, "DSCS §4.2: DDR4 19.2 GB/s = one 64-bit DDR4-2400 channel (2400 MT/s x 8 B)", "src"),
            Sourced(
                20.0,
                "assumption (HWR §3.4: no DDR4 value in any tool table); anchors: Horowitz DDR3-era 20-40 pJ/bit, "
                "Xilinx blog 'HBM2 0.25x DDR4 DIMMs' => ~28",
                "assumption",
                (10.0, 30.0),
            ),
        ),
        MemoryTech(
            "ddr5",
            Sourced(
                38.4,
                "derived: one 64-bit DDR5-4800 channel (4800 MT/s x 8 B) = 38.4 GB/s; DSCS §4.2 gives it rounded as "
                "'DDR5 (38 GB/s)' (see the module docstring)",
                "derived",
            ),
            Sourced(15.0, "assumption (HWR §3.4 suggested default; no DDR5 value in any tool table)", "assumption", (7.5, 22.5)),
        ),
        MemoryTech(
            "hbm2",
            Sourced(460.0, "DSCS §4.2: HBM2 460 GB/s; AMD/Xilinx U280/U50 blog: 460 GB/s (HWR §4)", "src"),
            Sourced(6.25, "HWR §3.4: hwcomponents-cacti table; Xilinx U280/U50 blog '~7 pJ/bit'", "src", (3.9, 7.0)),
        ),
        MemoryTech(
            "lpddr4",
            Sourced(59.7, "HWR §4: Jetson TX2 128-bit LPDDR4 = 59.7 GB/s", "mem"),
            Sourced(8.0, "HWR §3.4: hwcomponents-cacti table", "src", (4.0, 12.0)),
        ),
    )
}

# The DSA's memory options in the DSCS design-space exploration (§4.2).
DSE_MEMORIES: tuple[str, ...] = ("ddr4", "ddr5", "hbm2")


def check_memory(name: str, field_: str = "dram") -> MemoryTech:
    if name not in MEMORY:
        raise ValueError(f"{field_}={name!r}: unknown memory type; use one of {sorted(MEMORY)}")
    return MEMORY[name]


def bandwidth_gbps(name: str) -> float:
    """Peak bandwidth of memory ``name`` in GB/s."""
    m = check_memory(name)
    if m.gbps.value is None:
        raise ValueError(f"dram={name!r}: no bandwidth on record ({m.gbps.source}); use one of {sorted(with_bandwidth())}")
    return float(m.gbps.value)


def bandwidth_bytes_s(name: str) -> float:
    return bandwidth_gbps(name) * 1e9


def with_bandwidth() -> tuple[str, ...]:
    return tuple(k for k, m in MEMORY.items() if m.gbps.value is not None)


__all__ = ["DSE_MEMORIES", "MEMORY", "MemoryTech", "bandwidth_bytes_s", "bandwidth_gbps", "check_memory", "with_bandwidth"]
