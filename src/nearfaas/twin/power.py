"""Energy of one end-to-end request: each component's power integrated over the whole request
(DSCS §6.1 "Power measurement": compute, PCIe and system-stack power; network omitted). Every
number is MODELLED.

``energy(breakdown, network=False) -> {"accel_j", "host_cpu_j", "idle_j", "pcie_j", "flash_j",
"network_j", "total_j", "storage_j", "network_transfer_j", "dsa_dram_j", "label", ...}``;
``total_j`` is exactly the sum of the ``PARTS``. The method is the breakdown's ``energy`` option
(``METHODS``):

* ``instrument`` (paper mode): what the paper's instruments read. RAPL/MSR counters (the Xeon),
  NVPModel/tegrastats (the TX2) and Vivado/xbutil (the FPGAs) measure a package or a board over
  an interval, so a request is charged its components' power over its whole duration: active
  power while a component computes, its idle (package-floor) power while the request waits on
  the link, PCIe, P2P, the driver or the system stack; PCIe per bit; the stack's own power (a
  CPU core) over its duration. The paper's power sources: the Xeon's share of the socket
  (``CPU_SOCKET_SHARE``) between its package idle and its busy power; the TX2 module at
  ``NVPMODEL_ACTIVE_FRACTION`` of its Max-N budget while busy; the boards' busy fraction; the
  ASIC from ``hw.energy`` logic + SRAM anchored to T2's 4.2 W (no DRAM when ``dsa_power="tdp"``).
  ``flash_j`` is 0 (the drive is not in the instrumented packages): ``storage_j`` (flash per bit),
  ``network_transfer_j`` and ``dsa_dram_j`` are reported beside the total.
* ``active-only``: the earlier reading of the method, kept to compare: the same power sources,
  but nothing is charged while a request waits (``idle_j`` = 0) and a busy component draws its
  active power only. An energy counter cannot read this way (the package draws its floor while
  it waits), which is why it is not the default; docs/methodology.md shows both.
* ``twin`` (measured-here mode): ``instrument`` plus flash per bit in the total.

Where each platform's power comes from while a stage waits (network, PCIe, P2P, driver, stack):
traditional platforms hold the compute node for f1-f3 (and the GPU/FPGA for f1-f2); near-storage
platforms hold the drive's accelerator for f1-f2 and a compute node only for f3. The system
stack and driver calls run on one CPU core. The compute node's CPU: the Xeon's idle/busy power
(catalog) times the c5.4xlarge share of the socket; a stage on one thread draws idle + 1/8 of
the dynamic share, an all-core stage the whole share. Accelerators: the catalog's ``Device``
power model (idle for the whole term, + (TDP x active fraction - idle) while busy); the DSA's f2
energy from ``nearfaas.hw`` (``dse.evaluate``) and its f1 from ``hw.energy`` (VPU ops + DRAM).
Data: PCIe (host copies and P2P) per bit, flash per bit (``twin`` only), the network per bit only
with ``network=True`` (the paper omits it) in any method.

Worked example (nominal, asset_damage on the CPU baseline): the request spends most of its time
reading its upload and writing results over the s3-like link; ``active-only`` charges those
waits nothing, ``instrument`` charges the Xeon share's package floor (30 W x 8/24 = 10 W) for
them, which is what a RAPL reading over the request would include.

Known caveats:

* The idle figures are package/board floors with C-states on; a server pinned to a performance
  governor idles higher (the ranges include it).
* The stack's power is one busy CPU core; a Kubernetes node's other daemons are not charged.
"""

from __future__ import annotations

from nearfaas.hw.sourced import Sourced

from . import platforms as P

PCIE_PJ_PER_BIT = Sourced(
    10.0,
    "HWR §3.5 [mem]: Gen3/Gen4 SerDes ~5-10 pJ/bit per direction, suggested 10 end to end; DSCS uses Beck et al. ISSCC'18 [123], value not in our copy",
    "mem",
    (5.0, 20.0),
)
FLASH_READ_PJ_PER_BIT = Sourced(
    250.0, "assumption: NVMe SSD active power (~6 W) / read bandwidth (~3 GB/s), whole drive", "assumption", (50.0, 400.0)
)
FLASH_WRITE_PJ_PER_BIT = Sourced(
    400.0, "assumption: NVMe SSD active write power (~6.5 W) / 2 GB/s, whole drive", "assumption", (100.0, 800.0)
)
NETWORK_PJ_PER_BIT = Sourced(
    50.0, "assumption: NICs + ~3 switch hops of datacenter Ethernet; only with network=True", "assumption", (20.0, 200.0)
)
CPU_SOCKET_SHARE = Sourced(
    8 / 24, "derived: c5.4xlarge = 8 physical cores (AWS 16 vCPU) of a 24-core socket (HWR §4)", "derived", (0.2, 1.0)
)
NVPMODEL_ACTIVE_FRACTION = Sourced(
    0.7,
    "paper mode: the paper read NS-ARM / NS-Mobile-GPU power with NVPModel (DSCS §6.1); stand-in: the TX2 module's busy "
    "power as a share of T2's 15 W Max-N budget: 7-15 W under CNN inference (TX2 data sheet: 7.5 W Max-Q / 15 W Max-P)",
    "assumption",
    (0.45, 0.95),
)
CPU_CORES = 8
PARTS = ("accel_j", "host_cpu_j", "idle_j", "pcie_j", "flash_j", "network_j")


def params() -> dict:
    return {
        k: v.to_dict()
        for k, v in (
            ("pcie_pj_per_bit", PCIE_PJ_PER_BIT),
            ("flash_read_pj_per_bit", FLASH_READ_PJ_PER_BIT),
            ("flash_write_pj_per_bit", FLASH_WRITE_PJ_PER_BIT),
            ("network_pj_per_bit", NETWORK_PJ_PER_BIT),
            ("cpu_socket_share", CPU_SOCKET_SHARE),
            ("nvpmodel_active_fraction", NVPMODEL_ACTIVE_FRACTION),
            ("dsa_tdp_w", P.DSA_TDP_W),
        )
    }


def cpu_power_w(cores=1) -> dict:
    """Compute-node CPU power (instance share of the Xeon socket): idle and active with ``cores``
    of 8 busy ("all" = 8)."""
    d = P.device("cpu")
    share = CPU_SOCKET_SHARE.value
    idle = d.idle_w * share
    full = d.tdp_w * float(d.active_power_fraction.value) * share
    n = CPU_CORES if cores == "all" else min(int(cores), CPU_CORES)
    return {"idle_w": idle, "active_w": idle + (full - idle) * n / CPU_CORES}


def _accel_energy(platform: str, term, o: dict) -> tuple[float, float]:
    """(joules charged, DSA DRAM joules left out) of one accelerator compute term."""
    det = term.detail
    if platform == "dscs" and ("energy_j" in det or "vpu_ops" in det):
        from nearfaas.hw import dse

        cfg = P.dsa_config(o["dsa_dram"])
        if "energy_j" in det:
            total, dram = float(det["energy_j"]), float(det["energy_dram_j"])
        else:
            b = dse.energy_model(cfg).breakdown({"vpu_ops": det["vpu_ops"], "dram_bytes": det["dram_bytes"], "cycles": det["cycles"]})
            total, dram = float(b["total"]), float(b["dram"])
        if o["dsa_power"] == "tdp":  # the paper's ASIC power: logic + on-chip memory, T2's 4.2 W
            return (total - dram) * P.dsa_power_scale(cfg), dram
        return total, 0.0
    d = P.device(platform)
    busy = min(float(det.get("busy_s", term.value_s)), term.value_s)
    frac = float(d.active_power_fraction.value)
    if o["energy"] in PAPER_SOURCES and platform in ("ns_arm", "ns_mobile_gpu"):
        frac = float(NVPMODEL_ACTIVE_FRACTION.value)
    active = d.tdp_w * frac
    return d.idle_w * term.value_s + max(active - d.idle_w, 0.0) * busy, 0.0


def _data_energy(t, parts: dict, extra: dict, network: bool, paper: bool) -> None:
    bits = 8.0 * t.bytes
    if t.component in ("pcie", "p2p"):
        parts["pcie_j"] += bits * PCIE_PJ_PER_BIT.value * 1e-12
    if t.component in ("network", "p2p"):
        write = t.detail.get("write", t.name.startswith("write"))
        j = bits * (FLASH_WRITE_PJ_PER_BIT if write else FLASH_READ_PJ_PER_BIT).value * 1e-12
        extra["storage_j"] += j
        if not paper:
            parts["flash_j"] += j
    if t.component == "network":
        j = bits * NETWORK_PJ_PER_BIT.value * 1e-12
        extra["network_transfer_j"] += j
        if network:
            parts["network_j"] += j


METHODS = ("instrument", "active-only", "twin")
PAPER_SOURCES = ("instrument", "active-only")  # the paper's power sources (NVPModel, no flash in the total)
LABELS = {
    "instrument": "modelled (paper method as its instruments read it: each component's power over the whole request, idle "
                  "floors while it waits; compute + PCIe + system stack; storage, network and DSA DRAM beside the total)",
    "active-only": "modelled (paper method, active-only reading: compute + PCIe + system stack power while busy, nothing while "
                   "waiting; storage, network and DSA DRAM beside the total)",
    "twin": "modelled (component power x time, idle floors while waiting, flash per bit; CPU stage times may be measured, see "
            "the breakdown)",
}


def energy(bd, network: bool = False) -> dict:
    """Energy parts (J) of one ``Breakdown``; network energy only when ``network``."""
    platform = bd.platform
    o = bd.options
    method = o["energy"]
    if method not in METHODS:
        raise ValueError(f"energy={method!r}: use one of {', '.join(METHODS)}")
    paper = method in PAPER_SOURCES
    idles = method != "active-only"  # an energy counter reads the floor while the request waits
    near = platform in P.NEAR_STORAGE
    has_accel = platform != "cpu"
    acc_idle = P.device(platform).idle_w if has_accel and idles else 0.0
    cpu_idle = cpu_power_w()["idle_w"] if idles else 0.0
    parts = dict.fromkeys(PARTS, 0.0)
    extra = {"storage_j": 0.0, "network_transfer_j": 0.0, "dsa_dram_j": 0.0}
    for stage in bd.stages:
        cpu_held = stage.name == "f3" or not near
        acc_held = has_accel and stage.name in ("f1", "f2")
        for t in stage.terms:
            s = t.value_s
            if t.name == "compute" and t.component == "accel":
                j, dram = _accel_energy(platform, t, o)
                parts["accel_j"] += j
                extra["dsa_dram_j"] += dram
                parts["idle_j"] += cpu_idle * s if cpu_held else 0.0
            elif t.name == "compute" or t.component in ("stack", "driver"):
                parts["host_cpu_j"] += cpu_power_w(t.detail.get("cores", 1) if t.name == "compute" else 1)["active_w"] * s
                parts["idle_j"] += acc_idle * s if acc_held else 0.0
            else:  # data movement: allocated components idle while it happens
                parts["idle_j"] += (cpu_idle if cpu_held else 0.0) * s + (acc_idle if acc_held else 0.0) * s
                _data_energy(t, parts, extra, network, paper)
    out = dict(parts)
    out["total_j"] = sum(parts[k] for k in PARTS)
    out.update(extra)
    out["average_w"] = out["total_j"] / bd.total_s
    out["network_included"] = network
    out["method"] = o["energy"]
    out["label"] = LABELS[method]
    return out
