"""Cost efficiency (DSCS §6.1, after E3 [101]): Throughput x T / (CAPEX + OPEX), T = 3 years at
30 % utilisation, electricity $0.0975/kWh (EIA 2023 US industrial average, DSCS [128]) [src].

CAPEX per platform system = compute-node share + accelerator + storage drive (+ its server
share). Prices are catalog values (``hw.devices``, mostly [mem]) or assumptions with ranges; the
DSA's chip cost comes from an ASIC cost-from-area model (ASIC Clouds style): wafer cost per
300 mm wafer at 14 nm, gross dies per wafer, Murphy yield at a defect density, packaging and
test per die, NRE amortised over a volume. OPEX = average power over a request x active time x
price x a cooling (PUE-like) factor. Every number is MODELLED.
"""

from __future__ import annotations

import math

from nearfaas.hw.sourced import Sourced

from . import platforms as P
from . import power

YEARS = Sourced(3.0, "DSCS §6.1: three-year ownership", "src")
UTILISATION = Sourced(0.30, "DSCS §6.1: 30 % utilisation", "src")
USD_PER_KWH = Sourced(0.0975, "DSCS §6.1: US average industrial electricity 2023, EIA [128]", "src")
PUE = Sourced(
    1.5, "assumption: cooling/power-delivery overhead as a PUE-like factor (typical datacenter ~1.5 [mem])", "assumption", (1.1, 2.0)
)
XEON_SOCKET_USD = Sourced(
    7000.0,
    "assumption: 24-core Cascade Lake Platinum socket (8275CL is an AWS-only part with no list price)",
    "assumption",
    (4000.0, 10000.0),
)
SERVER_REST_USD = Sourced(
    1500.0, "assumption: board, 32 GB DRAM, NIC, PSU, chassis share of one c5.4xlarge-sized compute node", "assumption", (1000.0, 3000.0)
)
SSD_USD = Sourced(400.0, "assumption: 3.84 TB datacenter NVMe SSD", "assumption", (250.0, 800.0))
STORAGE_SERVER_SHARE_USD = Sourced(
    500.0, "assumption: one drive's share of a storage server (all platforms alike)", "assumption", (200.0, 1000.0)
)
WAFER_USD = Sourced(
    5000.0,
    "assumption near [mem] CSET 'AI Chips' (Khan & Mann 2020): ~$4k per 300 mm wafer at 16/12 nm, ~$6k at 10 nm",
    "mem",
    (3000.0, 8000.0),
)
WAFER_DIAMETER_MM = Sourced(300.0, "300 mm wafers at 14 nm [src: industry standard]", "src")
DEFECT_DENSITY_PER_CM2 = Sourced(0.1, "assumption: mature 14/16 nm defect density", "assumption", (0.05, 0.3))
PACKAGE_TEST_USD = Sourced(3.0, "assumption: small flip-chip BGA package + test per good die", "assumption", (1.0, 10.0))
NRE_USD = Sourced(2.0e6, "assumption: 14 nm mask set [mem ~$2-5M]; design NRE excluded", "assumption", (1.0e6, 5.0e6))
VOLUME = Sourced(1.0e5, "assumption: DSCS-Drives built over which NRE is amortised", "assumption", (1.0e4, 1.0e6))
DRIVE_DRAM_USD = Sourced(15.0, "assumption: 4 GB DDR4 on the drive (T2 4 GB)", "assumption", (8.0, 30.0))
DRIVE_SWITCH_USD = Sourced(25.0, "assumption: PCIe switch + board changes for the DSA (SmartSSD-like, HWR §4)", "assumption", (10.0, 60.0))

SECONDS_PER_YEAR = 365.25 * 24 * 3600


def params(**over) -> dict:
    out = {}
    for k, v in globals().items():
        if isinstance(v, Sourced):
            out[k.lower()] = {**v.to_dict(), "value": over.get(k.lower(), v.value)}
    return out


def _v(name: str, over: dict) -> float:
    return float(over.get(name.lower(), globals()[name].value))


def asic_cost(area_mm2: float, **over) -> dict:
    """Cost of one packaged, tested DSA chip from its area (mm²)."""
    if not area_mm2 > 0:
        raise ValueError(f"area_mm2={area_mm2!r}: must be > 0")
    d = _v("WAFER_DIAMETER_MM", over)
    gross = math.pi * (d / 2) ** 2 / area_mm2 - math.pi * d / math.sqrt(2 * area_mm2)
    ad = area_mm2 / 100.0 * _v("DEFECT_DENSITY_PER_CM2", over)
    yld = ((1 - math.exp(-ad)) / ad) ** 2 if ad > 0 else 1.0  # Murphy
    die = _v("WAFER_USD", over) / (gross * yld)
    nre = _v("NRE_USD", over) / _v("VOLUME", over)
    total = die + _v("PACKAGE_TEST_USD", over) + nre
    return {
        "area_mm2": area_mm2,
        "gross_dies": gross,
        "yield": yld,
        "die_usd": die,
        "package_test_usd": _v("PACKAGE_TEST_USD", over),
        "nre_usd": nre,
        "total_usd": total,
        "label": "modelled (ASIC cost from area: wafer / (dies x Murphy yield) + package/test + NRE/volume)",
    }


def compute_node_usd(**over) -> float:
    # the c5.4xlarge's share of the socket, as in the power model (a module reference, so that
    # ``params()`` lists only this module's figures)
    return _v("XEON_SOCKET_USD", over) * power.CPU_SOCKET_SHARE.value + _v("SERVER_REST_USD", over)


def capex(platform: str, node_share: float = 1.0, **over) -> dict:
    """CAPEX of one platform system (USD) with its parts. ``node_share``: the share of a compute
    node a near-storage system needs (f3 and the stack); traditional systems hold a whole one."""
    P.check_platform(platform)
    parts = {}
    near = platform in P.NEAR_STORAGE
    parts["compute_node"] = compute_node_usd(**over) * (node_share if near else 1.0)
    parts["storage_server_share"] = _v("STORAGE_SERVER_SHARE_USD", over)
    if platform == "dscs":
        a = asic_cost(P.dsa_area_mm2(), **over)
        parts["dsa_chip"] = a["total_usd"]
        parts["drive_dram"] = _v("DRIVE_DRAM_USD", over)
        parts["drive_switch"] = _v("DRIVE_SWITCH_USD", over)
        parts["ssd"] = _v("SSD_USD", over)
    elif platform == "ns_fpga":
        parts["smartssd"] = float(P.device(platform).spec("price_usd")["purchase"])  # includes its SSD
    else:
        parts["ssd"] = _v("SSD_USD", over)
        if platform != "cpu":
            parts["accelerator"] = float(P.device(platform).spec("price_usd")["purchase"])
    return {"parts": parts, "total_usd": sum(parts.values())}


def cost_efficiency(throughput_per_s: float, capex_usd: float, power_w: float, **over) -> dict:
    """Throughput x T / (CAPEX + OPEX): requests per dollar over the ownership period.
    T is the active time (years x utilisation); OPEX = power x T x price x PUE."""
    for name, v in (("throughput_per_s", throughput_per_s), ("capex_usd", capex_usd)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v!r}: must be a positive number")
    if not (isinstance(power_w, (int, float)) and math.isfinite(power_w) and power_w >= 0):
        raise ValueError(f"power_w={power_w!r}: must be >= 0")
    t_s = _v("YEARS", over) * SECONDS_PER_YEAR * _v("UTILISATION", over)
    opex = power_w * t_s / 3.6e6 * _v("USD_PER_KWH", over) * _v("PUE", over)
    requests = throughput_per_s * t_s
    return {
        "requests": requests,
        "capex_usd": capex_usd,
        "opex_usd": opex,
        "requests_per_usd": requests / (capex_usd + opex),
        "active_s": t_s,
    }


def platform_cost_efficiency(platform: str, breakdowns: dict, energies: dict, **over) -> dict:
    """Per app: throughput = 1 / end-to-end latency (run to completion, one request at a time,
    DSCS §5.3), power = energy per request / latency; the platform's figure is the geometric mean
    over apps of requests per dollar."""
    apps = list(breakdowns)
    near = platform in P.NEAR_STORAGE
    share = 1.0
    if near:
        # a compute node serves f3 and the system stack for many drives: the share of its time
        # those CPU terms take (its I/O waits can overlap other requests)
        def cpu_busy(bd):
            return sum(t.value_s for t in bd.terms if t.component in ("host_cpu", "stack"))

        share = sum(cpu_busy(breakdowns[a]) / breakdowns[a].total_s for a in apps) / len(apps)
    cap = capex(platform, node_share=share, **over)
    per_app = {}
    for a in apps:
        lat = breakdowns[a].total_s
        per_app[a] = cost_efficiency(1.0 / lat, cap["total_usd"], energies[a]["total_j"] / lat, **over)
    g = math.exp(sum(math.log(r["requests_per_usd"]) for r in per_app.values()) / len(apps))
    return {
        "platform": platform,
        "capex": cap,
        "compute_node_share": share,
        "per_app": per_app,
        "requests_per_usd": g,
        "label": "modelled (prices: catalog [mem] and assumptions; DSA: ASIC cost-from-area)",
    }
