"""The seven DSCS Table 2 platforms as the twin sees them: which device of the catalog, where it
sits (traditional compute node vs near-storage), its data type, and the per-layer workload of
each model (FLOPs and bytes) that the roofline devices are timed on.

Every number here is MODELLED. Constants are ``nearfaas.hw.sourced.Sourced`` figures whose
status is as in ``nearfaas.hw``: [src] named public source, [mem] unverified recollection
(``/work/shared/hw-references.md``, HWR), [derived] arithmetic on cited numbers, [assumption]
our choice with the range to sweep.
"""

from __future__ import annotations

from functools import cache

from nearfaas.apps.catalog import APPS
from nearfaas.hw.devices import Device, get
from nearfaas.hw.sourced import Sourced

PLATFORM_DEVICES = {
    "cpu": "cpu-xeon-8275cl",
    "gpu": "gpu-rtx-2080ti",
    "fpga": "fpga-alveo-u280",
    "ns_arm": "ns-arm-a57",
    "ns_mobile_gpu": "ns-mobile-gpu-tx2",
    "ns_fpga": "ns-fpga-smartssd",
    "dscs": "dsa",
}
PLATFORMS = tuple(PLATFORM_DEVICES)
TRADITIONAL = ("cpu", "gpu", "fpga")
NEAR_STORAGE = ("ns_arm", "ns_mobile_gpu", "ns_fpga", "dscs")
APP_KEYS = tuple(APPS)
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int16": 2, "int8": 1}


GEN3_X4_BPS = Sourced(4 * 0.985e9, "T2: SmartSSD/DSA link Gen3x4; 985 MB/s per lane (HWR §3.5) => 3.94 GB/s", "src")
FLASH_READ_BPS = Sourced(
    3.0e9,
    "assumption: sequential read of a datacenter NVMe SSD (the SmartSSD's 3.84 TB V-NAND drive); no datasheet figure in HWR",
    "assumption",
    (1.5e9, 3.5e9),
)
FLASH_WRITE_BPS = Sourced(2.0e9, "assumption: NVMe sequential write, SLC/DRAM-buffered", "assumption", (1.0e9, 3.0e9))
FLASH_READ_LATENCY_S = Sourced(90e-6, "assumption: NAND page read + controller, per request", "assumption", (50e-6, 200e-6))
FLASH_WRITE_LATENCY_S = Sourced(30e-6, "assumption: write acknowledged from the drive's buffer", "assumption", (10e-6, 100e-6))
F1_OPS_PER_ELEMENT = Sourced(
    8.0,
    "assumption: f1 on an accelerator = resize (bilinear, 4 ops) + normalise (2) + cast/layout (2) per output element",
    "assumption",
    (4.0, 32.0),
)
ARM_VS_THIS_CORE = Sourced(
    3.0,
    "assumption: one Cortex-A57 core at 2 GHz runs f1's scalar code (JPEG decode, resize, tokenizing) ~3x slower than "
    "one core of this machine's AMD EPYC (measured f1)",
    "assumption",
    (2.0, 5.0),
)
RESULT_RECORD_BYTES = Sourced(1024, "assumption: f3's notification record written to the result bucket", "assumption", (256, 4096))


def check_app(app: str) -> str:
    if app not in APPS:
        raise ValueError(f"unknown app {app!r}; valid apps: {', '.join(APP_KEYS)}")
    return app


def check_platform(platform: str) -> str:
    if platform not in PLATFORM_DEVICES:
        raise ValueError(f"unknown platform {platform!r}; valid platforms: {', '.join(PLATFORMS)}")
    return platform


@cache
def device(platform: str) -> Device:
    return get(PLATFORM_DEVICES[check_platform(platform)])


def placement(platform: str) -> str:
    return "near-storage" if check_platform(platform) in NEAR_STORAGE else "traditional"


def host_link_bps(platform: str) -> float | None:
    link = device(platform).spec("host_link")
    return float(link["bytes_s"]) if link.get("kind") == "pcie" else None


# ------------------------------------------------------------------ model workloads

_KIND = {"elementwise": "elementwise", "reduction": "reduction", "pool": "reduction", "resize": "layout", "layout": "layout"}


@cache
def skeleton(model: str, batch: int = 1):
    """The DSA compiler's view of a zoo model with its batch dimension fixed to ``batch``: a
    batch scales the activations (GEMM M = pixels x batch) but not the weights, so batching
    gains come out of the same lowering on every modelled device."""
    from nearfaas.hw import dse

    if batch == 1:
        return dse.load_skeletons([model])[model]
    from nearfaas.hw.dsa.graph import load_ops
    from nearfaas.models import shapes_only

    w = load_ops(shapes_only(model, "full"), batch=batch)
    w.name = model
    return dse.prepare(w)


@cache
def layers(model: str, batch: int = 1) -> tuple[dict, ...]:
    """Per-layer roofline ops of a zoo model at ``batch``, from the DSA compiler's fusion groups
    (``hw.dse.prepare``): MPU groups = 2·MACs FLOPs over the operands (activations read as
    stored, weights, outputs used outside the group); VPU groups = their lane operations over
    their external inputs and outputs. Bytes are in ELEMENTS here; multiply by the dtype size."""
    from nearfaas.hw.dsa.config import DSAConfig

    sk = skeleton(model, batch)
    lane_ops = sk.vpu_cycles(DSAConfig(vpu_lanes=1, vpu_pipeline=0, source="lane-ops"))
    out = []
    for g, vops in zip(sk.groups, lane_ops, strict=True):
        if g.unit == "mpu":
            macs = sum(x.macs for x in g.gemms)
            elems = sum(x.a_elems + (x.b_elems if x.b_is_weight else 0) for x in g.gemms) + g.ext_in + g.ext_out
            kind = "conv" if g.members[0].op_type == "Conv" else "gemm"
            out.append({"kind": kind, "flops": 2.0 * macs + vops, "elems": float(elems)})
        elif g.unit == "vpu":
            out.append({"kind": _KIND.get(g.members[0].kind, "other"), "flops": float(vops), "elems": float(g.ext_in + g.ext_out)})
    return tuple(out)


def model_totals(model: str, batch: int = 1) -> dict:
    ls = layers(model, batch)
    return {"layers": len(ls), "flops": sum(x["flops"] for x in ls), "elems": sum(x["elems"] for x in ls)}


def roofline_f2(platform: str, model: str, dtype_: str | None = None, batch: int = 1) -> dict:
    """f2 on a roofline device, layer by layer, on one call of ``batch`` inputs: seconds (busy +
    one launch per layer), busy seconds."""
    d = device(platform)
    dt = dtype_ or d.default_dtype
    b = DTYPE_BYTES[dt]
    busy = launch = 0.0
    for x in layers(model, batch):
        busy += float(d.roofline({"kind": x["kind"], "flops": x["flops"], "bytes": x["elems"] * b, "dtype": dt})["busy_s"])
        launch += float(d.launch_s.value)
    tot = model_totals(model, batch)
    return {
        "seconds": busy + launch,
        "busy_s": busy,
        "launch_s": launch,
        "dtype": dt,
        "flops": tot["flops"],
        "bytes": tot["elems"] * b,
        "layers": tot["layers"],
    }


def dsa_config():
    from nearfaas.hw.dse import DESIGN_POINT

    return DESIGN_POINT.validated()


@cache
def dsa_f2(model: str, cfg=None, batch: int = 1) -> dict:
    """f2 on the DSA design point (128x128 / 4 MiB / DDR5 / 1 GHz / 14 nm), one call of
    ``batch`` inputs: dsa-mode timing and energy from ``nearfaas.hw.dse.evaluate`` (DRAM
    included)."""
    from nearfaas.hw import dse

    cfg = cfg or dsa_config()
    return dse.evaluate(skeleton(model, batch), cfg, dse.energy_model(cfg))


def dsa_area_mm2(cfg=None) -> float:
    from nearfaas.hw import dse

    cfg = cfg or dsa_config()
    return float(dse.config_record(cfg, dse.energy_model(cfg))["area_mm2"])
