"""Cost efficiency (DSCS §6.1, after E3 [101]): Throughput x T / (CAPEX + OPEX), T = 3 years at
30 % utilisation, electricity $0.0975/kWh (EIA 2023 US industrial average, DSCS [128]) [src].

Two methods, the breakdowns' ``cost`` option:

* ``paper`` (paper mode), as §6.1 lists it: CAPEX = the entire system: processing units,
  networking (NIC + top-of-rack port), compute server (every platform carries a whole one: f3
  always runs on a CPU compute node) and storage (drive + its storage-server share). OPEX =
  power for the processing units (the paper-method energy per request / latency), network
  transfer (per bit), storage (flash per bit) and cooling (a PUE-like factor), x T x price.
  Throughput = the average over apps of each app's requests/s (1 / its p95 latency: one request
  at a time, run to completion, §5.3), so the platform figure is mean throughput x T / (CAPEX +
  mean OPEX).
* ``twin`` (measured-here mode): near-storage systems carry the share of a compute node their
  CPU terms take, no networking item, OPEX from the twin energy (idle and flash included), and
  the platform figure is the geometric mean over apps of requests per dollar.

Prices are catalog values (``hw.devices``, mostly [mem]) or assumptions with ranges; the DSA's
chip cost comes from an ASIC cost-from-area model (ASIC Clouds style): wafer cost per 300 mm
wafer at 14 nm, gross dies per wafer, Murphy yield at a defect density, packaging and test per
die, NRE amortised over a volume. Every number is MODELLED.
"""

from __future__ import annotations

import math

from nearfaas.hw.sourced import Sourced

from . import platforms as P
from . import power
from nearfaas.stats import geomean

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
DRIVE_DRAM_USD = Sourced(
    15.0, "assumption: the drive's 4 GB of DRAM (T2 4 GB; DDR4 on the SmartSSD the DSA is built on, ANAND)", "assumption", (8.0, 30.0)
)
NETWORK_PER_SERVER_USD = Sourced(
    400.0,
    "assumption: a compute server's networking: 10 GbE NIC (~$150) + a top-of-rack switch port share (~$250 of a ~$10-12k "
    "48-port switch) [mem]; c5.4xlarge has 'up to 10 Gb/s' (HWR §4); the storage server's is inside its share",
    "assumption",
    (150.0, 1000.0),
)
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


def capex(platform: str, node_share: float = 1.0, method: str = "twin", **over) -> dict:
    """CAPEX of one platform system (USD) with its parts. ``method="paper"``: the whole system
    (a whole compute server for every platform, plus networking); ``"twin"``: ``node_share`` of a
    compute node for near-storage systems (f3 and the stack), a whole one for traditional ones."""
    P.check_platform(platform)
    parts = {}
    near = platform in P.NEAR_STORAGE
    paper = method == "paper"
    parts["compute_node"] = compute_node_usd(**over) * (node_share if near and not paper else 1.0)
    if paper:
        parts["networking"] = _v("NETWORK_PER_SERVER_USD", over)
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
    return {"parts": parts, "total_usd": sum(parts.values()), "method": method}


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
    """The platform's cost efficiency over its apps, by the breakdowns' ``cost`` method (module
    doc); ``per_app`` holds each app's requests per dollar at its own throughput and power."""
    apps = list(breakdowns)
    method = breakdowns[apps[0]].options["cost"]
    if method == "paper":
        return _paper_cost_efficiency(platform, breakdowns, energies, **over)
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
    g = geomean(r["requests_per_usd"] for r in per_app.values())
    return {
        "platform": platform,
        "method": method,
        "capex": cap,
        "compute_node_share": share,
        "per_app": per_app,
        "requests_per_usd": g,
        "label": "modelled (twin method: geomean over apps of requests per dollar; prices: catalog [mem] and assumptions; DSA: ASIC cost-from-area)",
    }


def _paper_cost_efficiency(platform: str, breakdowns: dict, energies: dict, **over) -> dict:
    apps = list(breakdowns)
    cap = capex(platform, method="paper", **over)
    per_app, power_w = {}, {}
    for a in apps:
        lat, e = breakdowns[a].total_s, energies[a]
        # OPEX power: processing units (the paper-method energy), network transfer, storage
        power_w[a] = {"processing_units_w": e["total_j"] / lat, "network_transfer_w": e["network_transfer_j"] / lat,
                      "storage_w": e["storage_j"] / lat}
        per_app[a] = cost_efficiency(1.0 / lat, cap["total_usd"], sum(power_w[a].values()), **over)
    throughput = sum(1.0 / breakdowns[a].total_s for a in apps) / len(apps)
    power = {k: sum(power_w[a][k] for a in apps) / len(apps) for k in next(iter(power_w.values()))}
    rec = cost_efficiency(throughput, cap["total_usd"], sum(power.values()), **over)
    pue = _v("PUE", over)
    opex = {k.replace("_w", "_usd"): rec["opex_usd"] * v / sum(power.values()) / pue for k, v in power.items()} if sum(power.values()) else {}
    opex["cooling_usd"] = rec["opex_usd"] * (1 - 1 / pue)
    return {
        "platform": platform,
        "method": "paper",
        "capex": cap,
        "compute_node_share": 1.0,
        "throughput_per_s": throughput,
        "power_w": power,
        "opex_parts_usd": opex,
        "per_app": per_app,
        **{k: rec[k] for k in ("requests", "capex_usd", "opex_usd", "requests_per_usd", "active_s")},
        "label": "modelled (paper method, DSCS §6.1: mean throughput x T / (CAPEX of the whole system + OPEX); prices: catalog "
        "[mem] and assumptions; DSA: ASIC cost-from-area)",
    }
