"""The DSCS Table 2 platforms as cited device records (all MODELLED, none measured here).

Citation keys used in ``Sourced.source``:
  T2      DSCS-Serverless paper, Table 2 (/work/shared/seeds/dscs-serverless.txt) [src]
  DSCS    same paper, body text (§ given)                                          [src]
  HWR     /work/shared/hw-references.md (§ given); its own marker is kept as status
  AWS     AWS EC2 c5 instance documentation (16 vCPU, 32 GiB, $0.68/h us-east-1), via HWR §4 [src]
  ANAND   AnandTech on the Samsung SmartSSD (KU15P, 4 GB DDR4, Gen3 x4, PCIe switch), via HWR §4 [src]
  XBLOG   AMD/Xilinx blog on U280/U50 HBM2 (460 GB/s, ~7 pJ/bit), via HWR §3.4/§4 [src]
  DESIGN  /work/shared/DESIGN.md measured facts of this machine kind
Status "mem" = an unverified recollection: verify before it reaches a results table.
"""

from __future__ import annotations

from ..area import AcceleratorConfig
from ..energy import EnergyModel
from ..memory import MEMORY, bandwidth_bytes_s, with_bandwidth
from ..sourced import Sourced
from .model import Device, Efficiency

GEN3_LANE_BPS = 0.985e9  # 8 GT/s, 128b/130b [src: HWR §3.5]
GEN4_LANE_BPS = 1.97e9  # [src: HWR §3.5]

# DRAM bandwidths the DSA may be built with: every memory of the table with a bandwidth
# (``nearfaas.hw.memory``: the DSCS DSE options of §4.2 [src] and TX2's LPDDR4 from HWR §4 [mem]).
DSA_DRAM_BW = {k: bandwidth_bytes_s(k) for k in with_bandwidth()}

# Efficiency fractions are assumptions: each is a Sourced with its range so that the twin's
# uncertainty study sweeps it (a range stated in its reason is used; where no source gives one,
# x/÷ EFF_SPREAD around the nominal, at most 1: DEFAULT_RANGE_RULE).
EFF_SPREAD = 1.5
DEFAULT_RANGE_RULE = f"no source gives a range: x/÷ {EFF_SPREAD:g} around the nominal, at most 1"


def _frac(value: float, why: str, sweep: tuple[float, float] | None = None) -> Sourced:
    rng = sweep or (round(value / EFF_SPREAD, 6), min(1.0, round(value * EFF_SPREAD, 6)))
    return Sourced(value, "assumption: " + why + ("" if sweep else f" [{DEFAULT_RANGE_RULE}]"), "assumption", rng)


def _eff(compute, bandwidth, why: str, compute_sweep=None, bandwidth_sweep=None) -> Efficiency:
    """An op class's fractions of peak, each a swept assumption (a Sourced passed in is kept:
    a table derived from another shares its figures, so they move together)."""
    c = compute if isinstance(compute, Sourced) else _frac(compute, why, compute_sweep)
    b = bandwidth if isinstance(bandwidth, Sourced) else _frac(bandwidth, why, bandwidth_sweep)
    return Efficiency(c, b, why)


_CPU_EFF = {
    # oneDNN/MLAS GEMM at batch 1 on AVX-512: the AVX-512 licence clock (< 3.0 GHz) and small
    # matrices keep it near half of peak [assumption, sweep 0.3-0.8]. Plausibility check on this
    # machine kind (DESIGN: ResNet-50 fp32 batch 1, 1 ORT thread = 93 ms; ~4.1 GMAC = 8.2 GFLOP
    # => ~88 GFLOP/s on one AMD EPYC core): that is a different CPU and one core, so it is NOT used
    # to calibrate the Xeon; it only shows a single core can exceed 0.5 of peak.
    "gemm": _eff(0.5, 0.7, "MLAS/oneDNN batch-1 GEMM ~half of AVX-512 peak; STREAM-class ~70 % of DRAM peak", (0.3, 0.8)),
    "conv": _eff(0.45, 0.7, "im2col/direct conv slightly below GEMM", (0.3, 0.8)),
    "elementwise": _eff(0.25, 0.7, "partly scalar ops, memory-bound anyway"),
    "reduction": _eff(0.25, 0.7, "as elementwise"),
    "layout": _eff(0.25, 0.5, "strided copies reach ~half of stream bandwidth"),
    "other": _eff(0.25, 0.6, "catch-all"),
}
_GPU_EFF = {
    "gemm": _eff(0.5, 0.75, "batch-1 inference GEMMs are small: about half of tensor-core peak; ~75 % of GDDR peak", (0.2, 0.8)),
    "conv": _eff(0.4, 0.75, "cuDNN conv at batch 1", (0.2, 0.8)),
    "elementwise": _eff(0.5, 0.75, "memory-bound"),
    "reduction": _eff(0.3, 0.6, "tree reductions"),
    "layout": _eff(0.5, 0.6, "transposes"),
    "other": _eff(0.3, 0.6, "catch-all"),
}
_MOBILE_BW = _frac(0.6, "LPDDR4 shared with the other SoC engines: 60 %")
_MOBILE_EFF = {k: _eff(e.compute, _MOBILE_BW, e.why + "; LPDDR4 shared with the other SoC engines: 60 %") for k, e in _GPU_EFF.items()}
_ARM_BW = _frac(0.6, "LPDDR4 shared, small caches: 60 %")
_ARM_EFF = {k: _eff(e.compute, _ARM_BW, e.why + "; LPDDR4 shared, small caches: 60 %") for k, e in _CPU_EFF.items()}
_SYSTOLIC_BW = _frac(0.8, "DMA ~80 % of DRAM peak")
_SYSTOLIC_EFF = {
    # DSA-like systolic array: padding of tiles to the array and fill/drain cost ~20 % on typical
    # layers [assumption, sweep 0.5-0.95]; the dsa/ cycle model replaces this where it is used.
    "gemm": _eff(0.8, _SYSTOLIC_BW, "systolic array; tile padding + fill/drain ~20 %; DMA ~80 % of DRAM peak", (0.5, 0.95)),
    "conv": _eff(0.8, _SYSTOLIC_BW, "as gemm (conv lowered to GEMM)", (0.5, 0.95)),
    # non-GEMM ops run on the VPU: modelled as 1/rows of the MPU rate via efficiency (VPU has one
    # lane per column vs rows x cols MACs) is too specific here; use a low fraction instead.
    "elementwise": _eff(0.05, _SYSTOLIC_BW, "runs on the VPU, a small fraction of MPU peak"),
    "reduction": _eff(0.05, _SYSTOLIC_BW, "VPU"),
    "layout": _eff(0.05, 0.6, "VPU / DMA reshuffles"),
    "other": _eff(0.05, 0.6, "catch-all"),
}


def _a(value, why, sweep=None) -> Sourced:
    return Sourced(value, "assumption: " + why, "assumption", sweep)


RECALLED_SPREAD = 0.1  # a spec recalled but not verified against its data sheet [mem] is swept +-10 %


def _recalled(value: float) -> tuple[float, float]:
    return (value * (1 - RECALLED_SPREAD), value * (1 + RECALLED_SPREAD))


def xeon_8275cl() -> Device:
    cores, clk = 8, 3.0e9
    fp32 = cores * 64 * clk  # 2 AVX-512 FMA units x 16 fp32 lanes x 2 flops
    return Device(
        name="cpu-xeon-8275cl",
        label="Baseline (CPU)",
        kind="cpu",
        placement="traditional",
        default_dtype="fp32",
        specs={
            "units": Sourced(16, "T2: 16 cores; AWS: c5.4xlarge = 16 vCPU = 8 physical cores with 2 hyper-threads each (HWR §4)", "src"),
            "clock_hz": Sourced(clk, "T2: 3 GHz", "src"),
            "node_nm": Sourced(14, "T2: 14 nm", "src"),
            "peak_ops": Sourced(
                {"fp32": fp32, "fp16": fp32, "bf16": fp32, "int16": 2 * fp32, "int8": 4 * fp32},
                "derived: 8 physical cores x 64 FP32 FLOP/cycle (2x AVX-512 FMA, HWR §4 [mem]) x 3.0 GHz (T2) = 1.54 TFLOPS; "
                "int8 x4 (VNNI vpdpbusd), int16 x2 (vpdpwssd); Cascade Lake has no fp16/bf16 arithmetic -> fp32 rate [mem]",
                "derived",
            ),
            # a socket figure (6 channels of DDR4-2933), not the hw.memory DDR4-2400 channel
            "mem_bw_bytes_s": Sourced(
                140.8e9 * 8 / 24,
                "derived: socket 6x DDR4-2933 = 140.8 GB/s (HWR §4 [mem]) x 8 of 24 cores (instance share) [assumption, sweep 20-140.8 GB/s]",
                "assumption",
                (20e9, 140.8e9),
            ),
            "tdp_w": Sourced(240.0, "T2: 240 W (socket TDP; the instance gets a share, RAPL measures the package)", "src"),
            "idle_w": _a(30.0, "package floor of the socket: Cloud Carbon Footprint's Cascade Lake coefficients (SPECpower "
                         "based, github cloud-carbon-footprint/cloud-carbon-coefficients) min 0.557-0.69 W per thread x 48 "
                         "threads = 27-33 W; +-1/3 for a RAPL package reading vs wall power", (20.0, 40.0)),
            "host_link": Sourced({"kind": "none", "note": "compute node; storage over the network"}, "T2: PCIe N/A", "src"),
            "price_usd": Sourced({"per_hour": 0.68}, "AWS: c5.4xlarge on-demand $0.68/h us-east-1 (HWR §4)", "src"),
        },
        efficiency=_CPU_EFF,
        launch_s=_a(5e-6, "ONNX Runtime per-op dispatch on CPU", (1e-6, 20e-6)),
        driver_s=Sourced(0.0, "derived: a CPU has no accelerator driver (the system stack is modelled by the twin)", "derived"),
        active_power_fraction=_a(0.85, "busy package power / TDP: Cloud Carbon Footprint's Cascade Lake max 3.68-4.06 W per "
                                 "thread x 48 = 177-195 W (0.74-0.81 of 240 W) at SPECpower's full load; all-core AVX-512 "
                                 "GEMM runs at the package power limit (1.0)", (0.7, 1.0)),
    )


def rtx_2080ti() -> Device:
    cores, tcs, clk = 4352, 544, 1.35e9
    fp32 = cores * 2 * clk
    fp16_tc = tcs * 64 * 2 * clk / 2  # fp32 accumulate runs at half rate on GeForce Turing
    return Device(
        name="gpu-rtx-2080ti",
        label="GPU",
        kind="gpu",
        placement="traditional",
        default_dtype="fp32",
        specs={
            "units": Sourced(cores, "T2: 4352 CUDA cores (544 tensor cores: HWR §4 [mem])", "src"),
            "clock_hz": Sourced(clk, "T2: 1.35 GHz (base clock; boost 1,545 MHz per HWR §4 [mem])", "src"),
            "node_nm": Sourced(12, "T2: 12 nm", "src"),
            "peak_ops": Sourced(
                {"fp32": fp32, "fp16": fp16_tc, "bf16": fp32, "int16": fp32, "int8": 4 * fp16_tc},
                "derived at the T2 clock: fp32 = 4352 x 2 x 1.35 GHz = 11.8 TFLOPS; fp16 tensor = 544 TC x 64 FMA x 2 x 1.35 GHz / 2 "
                "(fp32 accumulate, half rate on GeForce) = 47 TFLOPS; int8 = 2x the fp16-accumulate rate = 188 TOPS; "
                "Turing has no bf16 and no int16 tensor path -> fp32 rate (per-TC rates HWR §4 [mem])",
                "derived",
            ),
            "mem_bw_bytes_s": Sourced(616e9, "HWR §4: 11 GB GDDR6, 352-bit, 14 Gb/s = 616 GB/s [mem]; swept +-10 % (unverified)",
                                      "mem", _recalled(616e9)),
            "tdp_w": Sourced(250.0, "T2: 250 W; also in the DSCS abstract", "src"),
            "idle_w": _a(50.0, "floor of a warm function's GPU: bare idle ~17 W (Tom's Hardware RTX 2080 Ti FE / Aorus "
                         "reviews) + 26-66 W while a CUDA context is resident (Vadari et al., 'The Model Parking Tax', "
                         "arXiv 2605.23918: 66 W on GDDR6) -> 17-83 W", (17.0, 83.0)),
            "host_link": Sourced(
                {"kind": "pcie", "gen": 3, "lanes": 16, "bytes_s": 16 * GEN3_LANE_BPS}, "T2: Gen3x16; 985 MB/s per lane (HWR §3.5)", "src"
            ),
            "price_usd": Sourced({"purchase": 999.0}, "HWR §4: launch price $999 (FE $1,199), Sept 2018 [mem]", "mem"),
        },
        efficiency=_GPU_EFF,
        launch_s=_a(5e-6, "CUDA kernel launch", (3e-6, 10e-6)),
        driver_s=_a(20e-6, "CUDA runtime/ORT session call per invocation (host<->device copies modelled separately)", (5e-6, 100e-6)),
        active_power_fraction=_a(0.8, "board power / TDP under inference: batch-1 DNN inference draws 150-250 W of the 250 W "
                                 "board limit (large batches approach it)", (0.6, 1.0)),
    )


def _fpga_systolic(
    name, label, placement, pes, dsps, dsp_src, mem_bw, mem_src, mem_status, tdp_src, tdp, idle, link, price, price_src, node_src,
    busy=None,
) -> Device:
    """``idle``: (W, why, (lo, hi)); ``busy``: (fraction of TDP, why, (lo, hi))."""
    clk = 250e6
    if pes > dsps:
        raise ValueError(f"{name}: {pes} PEs exceed the {dsps} DSP slices")
    peak = 2 * pes * clk
    return Device(
        name=name,
        label=label,
        kind="fpga",
        placement=placement,
        default_dtype="int8",
        specs={
            "units": Sourced(pes, f"T2: {pes} PEs (a DSA-like systolic array; <= {dsps} DSP slices, {dsp_src})", "src"),
            "clock_hz": Sourced(clk, "T2: 250 MHz", "src"),
            "node_nm": Sourced(16, node_src, "src"),
            "peak_ops": Sourced(
                {"int8": peak, "int16": peak},
                f"derived: {pes} PEs x 2 ops/MAC x 250 MHz = {peak / 1e9:.0f} GOPS; one DSP48 per PE handles int8 or int16 [assumption]",
                "derived",
            ),
            "mem_bw_bytes_s": Sourced(mem_bw[0], mem_src, mem_status, mem_bw[1]),
            "tdp_w": Sourced(tdp, tdp_src, "src"),
            "idle_w": _a(idle[0], idle[1], idle[2]),
            "host_link": link,
            "price_usd": Sourced(price, price_src, "mem"),
        },
        efficiency=_SYSTOLIC_EFF,
        launch_s=_a(1e-6, "DSA instruction dispatch inside one kernel run", (0.1e-6, 10e-6)),
        driver_s=_a(50e-6, "OpenCL/XRT kernel enqueue + completion per invocation", (10e-6, 200e-6)),
        # The PE array uses a small share of the device (e.g. 1024 of 9,024 DSPs); board TDP caps
        # full-chip designs, so busy power is taken as a fraction of it.
        active_power_fraction=_a(busy[0], busy[1], busy[2]),
    )


def alveo_u280() -> Device:
    return _fpga_systolic(
        "fpga-alveo-u280",
        "FPGA",
        "traditional",
        1024,
        9024,
        "XCU280 has 9,024 DSPs, HWR §4 [mem]",
        (2 * bandwidth_bytes_s("ddr4"), _recalled(2 * bandwidth_bytes_s("ddr4"))),
        "DDR4 (T2: 32 GB) = 2 ch DDR4-2400 = 2 x 19.2 = 38.4 GB/s (HWR §4 [mem]; per channel: hw.memory ddr4); swept +-10 % "
        "(unverified); the 8 GB HBM2 (460 GB/s, XBLOG) is an alternative",
        "mem",
        "T2: 225 W (board max)",
        225.0,
        (26.0, "board idle with the shell loaded: an Alveo card read 17.4 W by xbutil (Xilinx/XRT PR #3697); the "
               "U280's larger die and HBM idle higher, to ~35 W", (17.0, 35.0)),
        Sourced({"kind": "pcie", "gen": 4, "lanes": 8, "bytes_s": 8 * GEN4_LANE_BPS}, "T2: Gen4x8; 1.97 GB/s per lane (HWR §3.5)", "src"),
        {"purchase": 7500.0},
        "HWR §4: list ~ $7-8 k [mem]",
        "T2: 16 nm",
        busy=(0.3, "a 1024-PE DSA bitstream on the U280: HLS DNN overlays there report 30-100 W (Vivado power estimates) of "
                   "the 225 W board limit", (0.15, 0.45)),
    )


def smartssd_ku15p() -> Device:
    return _fpga_systolic(
        "ns-fpga-smartssd",
        "NS-FPGA",
        "near-storage",
        256,
        1968,
        "KU15P has 1,968 DSPs, HWR §4 [mem]",
        (16.0e9, (12.8e9, 19.2e9)),
        "ANAND: FPGA-private 4 GB DDR4 (T2: 4 GB) on one 64-bit channel; its speed grade is not published: DDR4-1600 to "
        "DDR4-2400 = 12.8-19.2 GB/s (hw.memory ddr4), nominal the middle, 16 GB/s [assumption]",
        "assumption",
        "T2: 18 W (U.2 slot envelope ~25 W, DSCS §4.2)",
        18.0,
        (6.0, "the drive's FPGA side idle: KU15P static power + its 4 GB DDR4 (the SSD's own idle is every platform's "
              "storage, not charged here)", (4.0, 8.0)),
        Sourced(
            {
                "kind": "in-storage-p2p",
                "gen": 3,
                "lanes": 4,
                "bytes_s": 4 * GEN3_LANE_BPS,
                "note": "FPGA is a PCIe switch: SSD<->FPGA P2P bypasses the host",
            },
            "T2: Gen3x4; ANAND: switch + P2P (HWR §4); 985 MB/s per lane (HWR §3.5)",
            "src",
        ),
        {"purchase": 3000.0},
        "HWR §4: not found; ~ $2-4 k street [mem, verify]",
        "T2: 16 nm",
        busy=(0.6, "a 256-PE DSA bitstream on the KU15P inside the drive's 18 W envelope", (0.3, 0.9)),
    )


def cortex_a57() -> Device:
    cores, clk = 4, 2.0e9
    fp32 = cores * 8 * clk
    return Device(
        name="ns-arm-a57",
        label="NS-ARM",
        kind="cpu",
        placement="near-storage",
        default_dtype="fp32",
        specs={
            "units": Sourced(cores, "T2: 4 cores (Cortex-A57 of Jetson TX2)", "src"),
            "clock_hz": Sourced(clk, "T2: 2 GHz", "src"),
            "node_nm": Sourced(None, "T2: N/A (TX2 SoC is 16 nm per common sources [mem])", "src"),
            "peak_ops": Sourced(
                {"fp32": fp32, "fp16": fp32, "bf16": fp32, "int16": fp32, "int8": 2 * fp32},
                "derived: 4 cores x 8 FP32 FLOP/cycle (128-bit NEON FMA, HWR §4 [mem]) x 2 GHz = 64 GFLOPS; ARMv8.0 has no fp16 "
                "arithmetic or dot-product -> fp32 rate, int8 ~2x via widening MLA [assumption]",
                "derived",
            ),
            "mem_bw_bytes_s": Sourced(bandwidth_bytes_s("lpddr4"), MEMORY["lpddr4"].gbps.source + ", shared SoC-wide; swept +-10 % "
                                      "(unverified)", "mem", _recalled(bandwidth_bytes_s("lpddr4"))),
            "tdp_w": Sourced(15.0, "T2: 15 W (TX2 module, Max-N)", "src"),
            "idle_w": _a(2.5, "TX2 module idle (VDD_IN); the data sheet gives 7.5 W Max-Q / 15 W Max-P budgets, "
                         "not idle", (1.0, 4.0)),
            "host_link": Sourced({"kind": "none", "note": "near-storage; data read locally"}, "T2: PCIe N/A", "src"),
            "price_usd": Sourced({"purchase": 399.0}, "HWR §4: TX2 module $399 (1 k units) [mem]", "mem"),
        },
        efficiency=_ARM_EFF,
        launch_s=_a(10e-6, "ORT per-op dispatch on a slower core", (2e-6, 40e-6)),
        driver_s=Sourced(0.0, "derived: a CPU has no accelerator driver", "derived"),
        active_power_fraction=_a(0.5, "CPU-only load on the TX2 module draws about half of its 15 W Max-N budget", (0.3, 0.7)),
    )


def tx2_pascal() -> Device:
    cores, clk = 256, 1.3e9
    fp32 = cores * 2 * clk
    return Device(
        name="ns-mobile-gpu-tx2",
        label="NS-Mobile-GPU",
        kind="gpu",
        placement="near-storage",
        default_dtype="fp32",
        specs={
            "units": Sourced(cores, "T2: 256 CUDA cores (Pascal)", "src"),
            "clock_hz": Sourced(clk, "T2: 1.3 GHz", "src"),
            "node_nm": Sourced(None, "T2: N/A (16 nm per common sources [mem])", "src"),
            "peak_ops": Sourced(
                {"fp32": fp32, "fp16": 2 * fp32, "bf16": fp32, "int16": fp32, "int8": 2 * fp32},
                "derived: 256 x 2 x 1.3 GHz = 0.67 TFLOPS fp32; fp16 2x (HWR §4 [mem]: 1.33 TFLOPS); int8 taken at the fp16 rate "
                "(DP4A support on GP10B unverified) [assumption]; no bf16 -> fp32 rate",
                "derived",
            ),
            "mem_bw_bytes_s": Sourced(bandwidth_bytes_s("lpddr4"), MEMORY["lpddr4"].gbps.source + ", shared with the CPU; swept "
                                      "+-10 % (unverified)", "mem", _recalled(bandwidth_bytes_s("lpddr4"))),
            "tdp_w": Sourced(15.0, "T2: 15 W", "src"),
            "idle_w": _a(2.5, "TX2 module idle (VDD_IN); the data sheet gives 7.5 W Max-Q / 15 W Max-P budgets, "
                         "not idle", (1.0, 4.0)),
            "host_link": Sourced({"kind": "none", "note": "near-storage; data read locally"}, "T2: PCIe N/A", "src"),
            "price_usd": Sourced({"purchase": 399.0}, "HWR §4: TX2 module $399 (1 k units) [mem]", "mem"),
        },
        efficiency=_MOBILE_EFF,
        launch_s=_a(10e-6, "CUDA kernel launch on a mobile SoC", (5e-6, 30e-6)),
        driver_s=_a(20e-6, "CUDA runtime per invocation", (5e-6, 100e-6)),
        active_power_fraction=_a(0.7, "the TX2 module under CNN inference at Max-N draws 7-15 W (data sheet: 15 W Max-P "
                                 "budget)", (0.45, 0.95)),
    )


def dsa(config: AcceleratorConfig | None = None, tdp_w: float | None = None) -> Device:
    """The DSCS in-storage DSA built from an :class:`AcceleratorConfig` (default: Table 2)."""
    cfg = (config or AcceleratorConfig()).validate()
    em = EnergyModel(cfg)
    if cfg.dram not in DSA_DRAM_BW:
        raise ValueError(f"dram={cfg.dram!r}: no bandwidth on record for the DSA; use one of {sorted(DSA_DRAM_BW)}")
    peak = cfg.peak_ops_per_s()
    modelled_peak_w = em.peak_power_w()
    return Device(
        name="dsa",
        label="DSCS-Serverless",
        kind="dsa",
        placement="near-storage",
        default_dtype=cfg.dtype,
        specs={
            "units": Sourced(cfg.pes, f"config: {cfg.rows}x{cfg.cols} PEs (T2 default 16,384)", "src"),
            "clock_hz": Sourced(cfg.clock_hz, "config (T2: 1 GHz)", "src"),
            "node_nm": Sourced(cfg.node_nm, "config (T2: 14 nm)", "src"),
            "peak_ops": Sourced({cfg.dtype: peak}, f"derived: {cfg.pes} PEs x 2 ops/MAC x {cfg.clock_hz / 1e9:g} GHz", "derived"),
            "mem_bw_bytes_s": Sourced(
                DSA_DRAM_BW[cfg.dram], f"hw.memory {cfg.dram}: {MEMORY[cfg.dram].gbps.source}", MEMORY[cfg.dram].gbps.status
            ),
            "tdp_w": Sourced(
                tdp_w if tdp_w is not None else 4.2, "T2: 4.2 W (excludes DRAM, HWR §3.8)" if tdp_w is None else "caller", "src"
            ),
            "modelled_peak_w": Sourced(modelled_peak_w, "derived: hw.energy EnergyModel, all PEs busy, no SRAM/DRAM traffic", "derived"),
            "idle_w": Sourced(em.static_w, "derived: hw.energy leakage (per-mm2 density x modelled area)", "derived"),
            "host_link": Sourced(
                {"kind": "in-storage-p2p", "gen": 3, "lanes": 4, "bytes_s": 4 * GEN3_LANE_BPS},
                "T2: Gen3x4; DSCS §5.2: dedicated P2P link between flash and DSA",
                "src",
            ),
            "price_usd": Sourced(
                None, "not a product: ASIC cost comes from the ASIC Clouds model (DSCS §6.1), outside this catalog", "src"
            ),
        },
        efficiency=_SYSTOLIC_EFF,
        launch_s=_a(0.1e-6, "DSA instruction dispatch", (0.01e-6, 1e-6)),
        driver_s=_a(50e-6, "OpenCL driver call + P2P setup per invocation (DSCS §5.1)", (10e-6, 200e-6)),
        active_power_fraction=_a(0.75, "a busy ASIC below its 4.2 W design power (T2): not every PE busy every cycle",
                                 (0.5, 1.0)),
    )


BUILDERS = {
    "cpu-xeon-8275cl": xeon_8275cl,
    "gpu-rtx-2080ti": rtx_2080ti,
    "fpga-alveo-u280": alveo_u280,
    "ns-arm-a57": cortex_a57,
    "ns-mobile-gpu-tx2": tx2_pascal,
    "ns-fpga-smartssd": smartssd_ku15p,
    "dsa": dsa,
}


def catalog() -> dict[str, Device]:
    """Every Table 2 platform, keyed by name (the DSA at its Table 2 configuration)."""
    return {name: build() for name, build in BUILDERS.items()}


def get(name: str) -> Device:
    if name not in BUILDERS:
        raise ValueError(f"device={name!r}: unknown; use one of {sorted(BUILDERS)}")
    return BUILDERS[name]()
