"""No constant of the twin or the hardware models is fitted to a result it is meant to predict
(issue 15). A constant's wording proves nothing, so this test reads the registries the constants
cite and holds each value against them:

* ``src``/``mem`` figures are compared with the number their registry gives: Table 2 and the body
  of the DSCS seed (../shared/seeds/dscs-serverless.txt, "T2"/"DSCS §") and the shared hardware
  references (../shared/hw-references.md, "HWR"), both parsed here (tables and sentences);
* ``derived`` figures are recomputed from their inputs (those inputs again taken from the
  registries where they come from there);
* ``assumption`` figures must carry a sweep (``Sourced`` already checks that a sweep contains its
  value); where the source quotes a registry's suggestion or arithmetic ("HWR suggests 20 pJ/bit,
  ±50 %", "~25 % of TDP"), the value and the range are checked against it too;
* every numeric ``src``/``mem``/``derived`` constant the scan finds must be covered by a check or
  named in UNCHECKED with the reason, so a new cited constant cannot slip past;
* plain (un-``Sourced``) tables of the DSA's energy/area/scaling model (Horowitz, CACTI, Aladdin,
  Stillmaker-Baas) are compared with hw-references.md the same way.

A constant tuned to a figure (its value changed, its source text not) fails the comparison with its
registry or its recomputation. What this cannot catch: a registry entry edited to match a tuned
value (hw-references.md is a shared, reviewed file, outside this repository's diff); a figure
whose registry is not parsed here (UNCHECKED lists them, each with its reason); an assumption
moved within its sweep (it is an assumption: the sweep is the honest statement of it, and the
uncertainty study varies it over the whole range); and a value that merely happens to equal the
cited figure while the model uses it for something else.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nearfaas.hw.sourced import Sourced
from nearfaas.twin import uncertainty

# shared/ sits beside the checkout (CI clones elsewhere and copies it beside the clone).
SHARED = Path(__file__).resolve().parents[3] / "shared"
HWR_PATH = SHARED / "hw-references.md"
SEED_PATH = SHARED / "seeds" / "dscs-serverless.txt"
CAT = "nearfaas.hw.devices.catalog"

needs_registries = pytest.mark.skipif(not (HWR_PATH.is_file() and SEED_PATH.is_file()),
                                      reason=f"the cited registries are not here ({HWR_PATH}, {SEED_PATH})")

# Numeric src/mem/derived constants the checks below do not cover, each with why.
UNCHECKED = {
    "nearfaas.twin.cost.WAFER_DIAMETER_MM": "cites 'industry standard' (300 mm): no registry holds it",
    "nearfaas.twin.cost.WAFER_USD": "cites CSET 'AI Chips' (Khan & Mann 2020), which is not among the registries; it carries a sweep",
}
# Assumptions without a sweep: each is a finding to fix in its module (adding the sweep changes
# the uncertainty study and so the golden sensitivity table), listed so that the set cannot grow.
KNOWN_UNSWEPT: dict[str, str] = {}


# ------------------------------------------------------------------ reading the registries


def _clean(text: str) -> str:
    return (text.replace("**", "").replace("\u2212", "-").replace("\u2013", "-").replace("\\$", "$")
            .replace("\u00a0", " "))


_NUM = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def _nums(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in _NUM.findall(_clean(text))]


def _find(pattern: str, text: str, what: str) -> re.Match:
    m = re.search(pattern, re.sub(r"\s+", " ", _clean(text)))
    assert m, f"the registry no longer says {what} (pattern {pattern!r}): update the check or the constant"
    return m


def _sections(md: str) -> dict[str, str]:
    """Heading line (without #) -> the text up to the next heading."""
    out, head, buf = {}, "", []
    for line in md.splitlines():
        if line.startswith("#"):
            out[head] = "\n".join(buf)
            head, buf = line.lstrip("#").strip(), []
        else:
            buf.append(line)
    out[head] = "\n".join(buf)
    return out


def _section(secs: dict[str, str], starts: str) -> str:
    found = [t for h, t in secs.items() if h.startswith(starts)]
    assert len(found) == 1, f"hw-references.md: expected one section starting {starts!r}, found {len(found)}"
    return found[0]


def _rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row in ``text`` (separator rows dropped)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and not re.fullmatch(r"[|\s:-]+", line):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _row(rows: list[list[str]], first: str) -> list[str]:
    found = [r for r in rows if _clean(r[0]).startswith(first)]
    assert len(found) == 1, f"expected one table row starting {first!r}, found {len(found)}"
    return found[0]


@cache
def _hwr() -> dict[str, str]:
    return _sections(HWR_PATH.read_text())


@cache
def _seed() -> str:
    return SEED_PATH.read_text()


@cache
def _table2() -> dict[str, dict[str, str]]:
    """DSCS Table 2 as {row label: {platform column: cell}}."""
    text = _seed()
    rows = _rows(text[text.index("Table 2."):].split("\n\n\n")[0].split("\n\n", 2)[1])
    header = next(r for r in rows if "Baseline (CPU)" in r)
    cols = header[1:]
    return {r[0]: dict(zip(cols, r[1:], strict=True)) for r in rows if r[0] and r is not header}


def _t2(row: str, col: str) -> str:
    return _table2()[row][col]


def _hz(cell: str) -> float:
    m = _find(r"([\d.]+)\s*(GHz|MHz)", cell, f"a frequency in {cell!r}")
    return float(m[1]) * {"GHz": 1e9, "MHz": 1e6}[m[2]]


def _lane_bps() -> dict[int, float]:
    """HWR §3.5: bytes/s per PCIe lane, by generation."""
    s = _section(_hwr(), "3.5")
    return {3: float(_find(r"Gen3 [^;]*?(\d+) MB/s per lane", s, "Gen3's per-lane rate")[1]) * 1e6,
            4: float(_find(r"Gen4 \u2248 ([\d.]+) GB/s per lane", s, "Gen4's per-lane rate")[1]) * 1e9}


def _platform_row(first: str) -> str:
    return _clean(" | ".join(_row(_rows(_section(_hwr(), "4. Comparison platforms")), first)))


# ------------------------------------------------------------------ the claims


@dataclass(frozen=True)
class Claim:
    label: str  # the scan's label of the constant (module.name[key]), "/key" for a dict entry, or a plain name
    got: Any
    want: Any  # a number / None (equal within rel), or (lo, hi) with kind "within"
    where: str  # which registry entry or recomputation says so
    rel: float = 1e-9
    kind: str = "eq"

    def holds(self) -> bool:
        if self.kind == "within":
            return self.got is not None and self.want[0] <= self.got <= self.want[1]
        if self.want is None or isinstance(self.want, (str, dict)):
            return self.got == self.want
        if isinstance(self.want, tuple):
            return isinstance(self.got, tuple) and len(self.got) == len(self.want) and all(
                math.isclose(g, w, rel_tol=self.rel) for g, w in zip(self.got, self.want, strict=True))
        return self.got is not None and math.isclose(self.got, self.want, rel_tol=self.rel, abs_tol=0.0)


def _claims() -> list[Claim]:
    from nearfaas.hw import area, energy, memory, tech
    from nearfaas.hw.area import AcceleratorConfig
    from nearfaas.hw.dse import DESIGN_POINT
    from nearfaas.hw.energy import EnergyModel
    from nearfaas.twin import cost, platforms, power, stream

    out: list[Claim] = []
    add = lambda *a, **k: out.append(Claim(*a, **k))  # noqa: E731
    lanes = _lane_bps()
    t2 = _table2()

    # --- DSCS Table 2, per platform ---------------------------------------------------------
    devices = {p: platforms.device(p) for p in platforms.PLATFORMS}
    for p, d in devices.items():
        col = d.label
        assert col in t2["TDP"], f"{p}: device label {col!r} is not a Table 2 column ({list(t2['TDP'])})"
        lab, specs = f"{CAT}:{d.name}.specs", d.specs
        add(f"{lab}['units']", specs["units"].value, int(_nums(_t2("Cores/ PEs", col))[0]), f"T2 Cores/PEs {col}")
        add(f"{lab}['clock_hz']", specs["clock_hz"].value, _hz(_t2("Frequency", col)), f"T2 Frequency {col}")
        node = _t2("Technology Node", col)
        add(f"{lab}['node_nm']", specs["node_nm"].value, None if node == "N/A" else int(_nums(node)[0]), f"T2 Technology Node {col}")
        add(f"{lab}['tdp_w']", specs["tdp_w"].value, _nums(_t2("TDP", col))[0], f"T2 TDP {col}")
        link, pcie = specs["host_link"].value, _t2("PCIe", col)
        if pcie == "N/A":
            add(f"{lab}['host_link']/kind", link["kind"], "none", f"T2 PCIe {col}: N/A")
        else:
            m = _find(r"Gen(\d)x(\d+)", pcie, f"a PCIe link for {col}")
            gen, n = int(m[1]), int(m[2])
            add(f"{lab}['host_link']/gen", link["gen"], gen, f"T2 PCIe {col}")
            add(f"{lab}['host_link']/lanes", link["lanes"], n, f"T2 PCIe {col}")
            add(f"{lab}['host_link']/bytes_s", link["bytes_s"], n * lanes[gen], f"T2 {pcie} x HWR §3.5 per-lane rate")
        add(f"nearfaas.twin.platforms.MEMORY_BYTES[{p!r}]", platforms.MEMORY_BYTES[p].value,
            float(_find(r"([\d.]+)\s*GB", _t2("Memory", col), f"{col}'s memory")[1]) * 1e9, f"T2 Memory {col}")
    add("nearfaas.twin.platforms.FPGA_ONCHIP_KIB", platforms.FPGA_ONCHIP_KIB.value,
        float(_find(r"\(([\d.]+) MB on-chip\)", _t2("Memory", "FPGA"), "the FPGA's on-chip memory")[1]) * 1024, "T2 Memory FPGA, MB read as MiB")
    add("nearfaas.twin.platforms.DSA_TDP_W", platforms.DSA_TDP_W.value, _nums(_t2("TDP", "DSCS-Serverless"))[0], "T2 TDP DSCS")
    add("nearfaas.twin.platforms.GEN3_X4_BPS", platforms.GEN3_X4_BPS.value,
        int(_find(r"Gen3x(\d+)", _t2("PCIe", "DSCS-Serverless"), "DSCS's link")[1]) * lanes[3], "T2 DSCS Gen3x4 x HWR §3.5")
    # HWR §3.5's Gen3 rate is itself arithmetic: 8 GT/s x 128/130 / 8 bits (rounded to MB/s)
    add("HWR §3.5 Gen3 per-lane rate", lanes[3], 8e9 * 128 / 130 / 8, "8 GT/s, 128b/130b", rel=1e-3)
    # The DSA's design point (the default AcceleratorConfig the dscs device is built from) is T2's
    sram = _find(r"\(([\d.]+) MB on-chip\)", _t2("Memory", "DSCS-Serverless"), "the DSA's on-chip memory")
    dp, ac = DESIGN_POINT, AcceleratorConfig()
    for name, (pes, clock, node, sram_bytes) in (
            ("hw.dse.DESIGN_POINT", (dp.rows * dp.cols, dp.clock_ghz * 1e9, dp.technology_nm,
                                     (dp.ifmap_sram_kib + dp.filter_sram_kib + dp.ofmap_sram_kib) * 1024)),
            ("hw.area.AcceleratorConfig()", (ac.rows * ac.cols, ac.clock_hz, ac.node_nm, sum(b.size_bytes for b in ac.buffers)))):
        add(f"{name}.pes", pes, int(_nums(_t2("Cores/ PEs", "DSCS-Serverless"))[0]), "T2 PEs DSCS")
        add(f"{name}.clock_hz", clock, _hz(_t2("Frequency", "DSCS-Serverless")), "T2 Frequency DSCS")
        add(f"{name}.node_nm", node, _nums(_t2("Technology Node", "DSCS-Serverless"))[0], "T2 node DSCS")
        add(f"{name}.sram_bytes", sram_bytes, float(sram[1]) * 2**20, "T2 on-chip DSCS (MiB)")

    # --- DSCS body text (§4.2 DSE memories, §6.1 cost model) ----------------------------------
    seed = _seed()
    years = {"two": 2, "three": 3, "four": 4, "five": 5}[_find(r"over a (\w+) year period", seed, "the ownership period")[1]]
    add("nearfaas.twin.cost.YEARS", cost.YEARS.value, years, "DSCS §6.1 'over a three year period'")
    add("nearfaas.twin.cost.UTILISATION", cost.UTILISATION.value,
        float(_find(r"(\d+)% utilization", seed, "the utilisation")[1]) / 100, "DSCS §6.1 utilisation")
    add("nearfaas.twin.cost.USD_PER_KWH", cost.USD_PER_KWH.value,
        float(_find(r"\$([\d.]+)/kWh", seed, "the electricity price")[1]), "DSCS §6.1 $/kWh")
    dse = {k: float(_find(rf"{k} \(([\d.]+) GB/s\)", seed, f"the DSE's {k} bandwidth")[1]) for k in ("DDR4", "DDR5", "HBM2")}
    mem = memory.MEMORY
    add("nearfaas.hw.memory.MEMORY['ddr4'].gbps", mem["ddr4"].gbps.value, dse["DDR4"], "DSCS §4.2 DDR4 (19.2 GB/s)")
    add("DDR4-2400 x 64 bit", 2400e6 * 8 / 1e9, dse["DDR4"], "DSCS §4.2's DDR4 is one DDR4-2400 channel")
    add("nearfaas.hw.memory.MEMORY['ddr5'].gbps", mem["ddr5"].gbps.value, 4800e6 * 8 / 1e9, "derived: DDR5-4800 x 8 B")
    add("nearfaas.hw.memory.MEMORY['ddr5'].gbps~DSCS", mem["ddr5"].gbps.value, dse["DDR5"], "DSCS §4.2 'DDR5 (38 GB/s)', rounded", rel=0.02)
    add("nearfaas.hw.memory.MEMORY['hbm2'].gbps", mem["hbm2"].gbps.value, dse["HBM2"], "DSCS §4.2 HBM2 (460 GB/s)")

    # --- HWR §3.4 DRAM energy ------------------------------------------------------------------
    s34 = _section(_hwr(), "3.4")
    dram = _rows(s34)
    by_name = {r[0]: r for r in dram}  # first cell -> row: "DDR3", "LPDDR4", "HBM2", "HBM2 (device, FGDRAM ...)", ...
    for key, name in (("ddr3", "DDR3"), ("lpddr4", "LPDDR4"), ("hbm2", "HBM2")):
        add(f"nearfaas.hw.memory.MEMORY[{key!r}].pj_per_bit", mem[key].pj_per_bit.value, _nums(by_name[name][1])[0], f"HWR §3.4 {name}")
    fgdram = _nums(_row(dram, "HBM2 (device")[1])[0]
    blog = float(_find(r"~([\d.]+) pJ/bit", by_name["HBM2"][2], "the blog's HBM2 figure")[1])
    add("nearfaas.hw.memory.MEMORY['hbm2'].pj_per_bit.sweep", mem["hbm2"].pj_per_bit.sweep, (fgdram, blog), "HWR §3.4 FGDRAM ~3.9 .. blog ~7")
    sug = _find(r"Suggested defaults \(assumption, sweep\s*\u00b1(\d+) ?%\): DDR4 \u2248 (\d+) pJ/bit, DDR5 \u2248 (\d+) pJ/bit", s34,
                "its DDR4/DDR5 suggested defaults")
    half = float(sug[1]) / 100
    for key, v in (("ddr4", float(sug[2])), ("ddr5", float(sug[3]))):
        add(f"nearfaas.hw.memory.MEMORY[{key!r}].pj_per_bit", mem[key].pj_per_bit.value, v, "HWR §3.4 suggested default")
        add(f"nearfaas.hw.memory.MEMORY[{key!r}].pj_per_bit.sweep", mem[key].pj_per_bit.sweep, (v * (1 - half), v * (1 + half)),
            "HWR §3.4 'sweep ±50 %'")

    # --- HWR §3.5 PCIe energy ------------------------------------------------------------------
    pe = _find(r"Suggested model value:\s*(\d+) pJ/bit, swept (\d+)-(\d+)", _section(_hwr(), "3.5"), "its PCIe energy suggestion")
    add("nearfaas.twin.power.PCIE_PJ_PER_BIT", power.PCIE_PJ_PER_BIT.value, float(pe[1]), "HWR §3.5 suggested 10 pJ/bit")
    add("nearfaas.twin.power.PCIE_PJ_PER_BIT.sweep", power.PCIE_PJ_PER_BIT.sweep, (float(pe[2]), float(pe[3])), "HWR §3.5 swept 5-20")

    # --- HWR §4 comparison platforms -------------------------------------------------------------
    c5 = _platform_row("c5.4xlarge")
    cores = _find(r"(\d+) physical cores / (\d+) vCPU of a (\d+)-core", c5, "the c5.4xlarge's share of its socket")
    phys, socket_cores = int(cores[1]), int(cores[3])
    add("nearfaas.twin.power.CPU_SOCKET_SHARE", power.CPU_SOCKET_SHARE.value, phys / socket_cores, "HWR §4: 8 of a 24-core socket")
    cpu = devices["cpu"].specs
    add(f"{CAT}:cpu-xeon-8275cl.specs['price_usd']/per_hour", cpu["price_usd"].value["per_hour"],
        float(_find(r"\$([\d.]+)/h", c5, "the c5.4xlarge price")[1]), "HWR §4 $0.68/h")
    chan = _find(r"(\d+)\u00d7DDR4-(\d+) = ([\d.]+) GB/s", c5, "the Xeon socket's DRAM")
    add("HWR §4 Xeon socket bandwidth", int(chan[1]) * int(chan[2]) * 8e6, float(chan[3]) * 1e9, "6 x DDR4-2933 x 8 B", rel=1e-3)
    add(f"{CAT}:cpu-xeon-8275cl.specs['mem_bw_bytes_s']", cpu["mem_bw_bytes_s"].value, float(chan[3]) * 1e9 * phys / socket_cores,
        "derived: socket 140.8 GB/s x 8/24 cores")
    add(f"{CAT}:cpu-xeon-8275cl.specs['mem_bw_bytes_s'].sweep_hi", cpu["mem_bw_bytes_s"].sweep[1], float(chan[3]) * 1e9, "the whole socket")
    ccf = _find(r"min ([\d.]+)-([\d.]+) W per thread x (\d+) threads", cpu["idle_w"].source, "the CCF idle coefficients")
    add(f"{CAT}:cpu-xeon-8275cl.specs['idle_w']", cpu["idle_w"].value, (float(ccf[1]) * int(ccf[3]), float(ccf[2]) * int(ccf[3])),
        "its own arithmetic: CCF's Cascade Lake idle W per thread x 48 threads", kind="within")
    val = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "cpu_validation.json").read_text())["result"]["cpu"]
    ratios = [1 / (1 + e) for k, e in val["per_app_error"].items() if k not in val["overhead_bound_apps"]]
    ratios += [1 / (1 + e) for e in (*val["held_out_per_model_error"].values(), *val["held_out_fresh_per_model_error"].values())]
    add("nearfaas.twin.platforms.CPU_ROOFLINE_RESIDUAL.sweep", platforms.CPU_ROOFLINE_RESIDUAL.sweep,
        (round(min(ratios), 2), round(max(ratios), 2)), "the measured span of cpu_validation.json (apps + both held-out sets)")
    for key in ("cpu", "ns_arm"):  # a CPU has no accelerator driver: zero by definition
        add(f"{CAT}:{devices[key].name}.driver_s", devices[key].driver_s.value, 0.0, "a CPU has no accelerator driver")
    flop = float(_find(r"(\d+) FLOP/cycle", c5, "AVX-512 FLOP/cycle")[1])
    fp32 = phys * flop * cpu["clock_hz"].value
    for dt, mult in (("fp32", 1), ("fp16", 1), ("bf16", 1), ("int16", 2), ("int8", 4)):
        add(f"{CAT}:cpu-xeon-8275cl.specs['peak_ops']/{dt}", cpu["peak_ops"].value[dt], mult * fp32,
            f"derived: {phys} cores x {flop:g} FLOP/cycle x T2 clock, x{mult}")
    tflops = _find(r"\u2248 ([\d.]+)-([\d.]+) TFLOPS", c5, "the Xeon's FP32 range")
    add(f"{CAT}:cpu-xeon-8275cl.specs['peak_ops']/fp32~HWR", fp32 / 1e12, (float(tflops[1]), float(tflops[2]) * 1.03),
        "HWR §4 1.3-1.5 TFLOPS (at 2.5-3.0 GHz; T2's 3 GHz gives 1.54)", kind="within")

    rtx = _platform_row("RTX 2080 Ti")
    gpu = devices["gpu"].specs
    bus = _find(r"(\d+)-bit, (\d+) Gb/s \u21d2 (\d+) GB/s", rtx, "the GDDR6 bus")
    add(f"{CAT}:gpu-rtx-2080ti.specs['mem_bw_bytes_s']", gpu["mem_bw_bytes_s"].value, float(bus[3]) * 1e9, "HWR §4 616 GB/s")
    add("HWR §4 GDDR6 bandwidth", int(bus[1]) / 8 * int(bus[2]) * 1e9, float(bus[3]) * 1e9, "352 bit x 14 Gb/s")
    add(f"{CAT}:gpu-rtx-2080ti.specs['price_usd']/purchase", gpu["price_usd"].value["purchase"],
        float(_find(r"launch \$([\d,]+)", rtx, "the 2080 Ti launch price")[1].replace(",", "")), "HWR §4 launch $999")
    boost = float(_find(r"boost ([\d,]+) MHz", rtx, "the boost clock")[1].replace(",", "")) * 1e6
    tc = int(_find(r"(\d+) Tensor cores", rtx, "the tensor-core count")[1])
    clk, units = gpu["clock_hz"].value, gpu["units"].value
    # per tensor core 64 FMA/cycle at FP16 accumulate; GeForce halves it with FP32 accumulate; int8 doubles FP16-accumulate
    g_fp32, g_fp16_acc = units * 2 * clk, tc * 64 * 2 * clk
    want = {"fp32": g_fp32, "fp16": g_fp16_acc / 2, "bf16": g_fp32, "int16": g_fp32, "int8": 2 * g_fp16_acc}
    for dt, v in want.items():
        add(f"{CAT}:gpu-rtx-2080ti.specs['peak_ops']/{dt}", gpu["peak_ops"].value[dt], v, "derived: T2 cores/clock, HWR §4 tensor cores")
    # ... and HWR's own boost-clock figures, brought to T2's base clock, agree within 1 %
    for dt, pat in (("fp32", r"FP32 ([\d.]+) TFLOPS"), ("fp16", r"\(FP16 acc\.; ([\d.]+) with FP32 acc"), ("int8", r"INT8 ([\d.]+) TOPS")):
        add(f"{CAT}:gpu-rtx-2080ti.specs['peak_ops']/{dt}~HWR", gpu["peak_ops"].value[dt],
            float(_find(pat, rtx, f"the 2080 Ti {dt} peak")[1]) * 1e12 * clk / boost, f"HWR §4 {dt} at boost x base/boost", rel=0.01)

    u280 = _platform_row("Alveo U280")
    fpga = devices["fpga"].specs
    add(f"{CAT}:fpga-alveo-u280.specs['units']<=DSPs", fpga["units"].value, (1, _nums(_find(r"([\d,]+) DSP", u280, "U280 DSPs")[1])[0]),
        "HWR §4: one DSP48 per PE", kind="within")
    lo_hi = _find(r"list \u2248 \$(\d+)-(\d+) k", u280, "the U280 list price")
    add(f"{CAT}:fpga-alveo-u280.specs['price_usd']/purchase", fpga["price_usd"].value["purchase"],
        (float(lo_hi[1]) * 1e3, float(lo_hi[2]) * 1e3), "HWR §4 ≈ $7-8 k", kind="within")
    add(f"{CAT}:fpga-alveo-u280.specs['mem_bw_bytes_s']", fpga["mem_bw_bytes_s"].value, 2 * mem["ddr4"].gbps.value * 1e9,
        "derived: 2 channels x hw.memory ddr4")
    add("HWR §4 U280 DDR4", 2 * mem["ddr4"].gbps.value, float(_find(r"DDR4-2400 \(2 ch, (\d+) GB/s\)", u280, "U280 DDR4")[1]),
        "HWR §4 '2 ch, 38 GB/s'", rel=0.02)
    for name, d in (("fpga-alveo-u280", fpga), ("ns-fpga-smartssd", devices["ns_fpga"].specs), ("dsa", devices["dscs"].specs)):
        for dt, v in d["peak_ops"].value.items():
            add(f"{CAT}:{name}.specs['peak_ops']/{dt}", v, d["units"].value * 2 * d["clock_hz"].value, "derived: PEs x 2 ops/MAC x clock")

    tx2 = _platform_row("Jetson TX2")
    lp = float(_find(r"LPDDR4 \u21d2 ([\d.]+) GB/s", tx2, "the TX2's LPDDR4")[1])
    add("nearfaas.hw.memory.MEMORY['lpddr4'].gbps", mem["lpddr4"].gbps.value, lp, "HWR §4 59.7 GB/s")
    module = float(_find(r"module \$(\d+)", tx2, "the TX2 module price")[1])
    for p, name in (("ns_arm", "ns-arm-a57"), ("ns_mobile_gpu", "ns-mobile-gpu-tx2")):
        add(f"{CAT}:{name}.specs['mem_bw_bytes_s']", devices[p].specs["mem_bw_bytes_s"].value, lp * 1e9, "HWR §4 59.7 GB/s")
        add(f"{CAT}:{name}.specs['price_usd']/purchase", devices[p].specs["price_usd"].value["purchase"], module, "HWR §4 module $399")
    arm = devices["ns_arm"].specs
    per_core = float(_find(r"\u2248 (\d+) FP32 FLOP/cycle/core", tx2, "the A57's FLOP/cycle")[1])
    a_fp32 = arm["units"].value * per_core * arm["clock_hz"].value
    for dt, mult in (("fp32", 1), ("fp16", 1), ("bf16", 1), ("int16", 1), ("int8", 2)):
        add(f"{CAT}:ns-arm-a57.specs['peak_ops']/{dt}", arm["peak_ops"].value[dt], mult * a_fp32, "derived: T2 cores/clock x HWR §4 8 FLOP/cycle")
    add(f"{CAT}:ns-arm-a57.specs['peak_ops']/fp32~HWR", a_fp32, float(_find(r"([\d.]+) GFLOPS", tx2, "the A57 peak")[1]) * 1e9, "HWR §4 64 GFLOPS")
    tg = devices["ns_mobile_gpu"].specs
    t_fp32 = tg["units"].value * 2 * tg["clock_hz"].value
    for dt, mult in (("fp32", 1), ("fp16", 2), ("bf16", 1), ("int16", 1), ("int8", 2)):
        add(f"{CAT}:ns-mobile-gpu-tx2.specs['peak_ops']/{dt}", tg["peak_ops"].value[dt], mult * t_fp32, "derived: T2 cores x 2 x clock")
    hw_tx2 = _find(r"GPU \u2248 ([\d.]+) TFLOPS FP32 / ([\d.]+) FP16", tx2, "the TX2 GPU peaks")
    add(f"{CAT}:ns-mobile-gpu-tx2.specs['peak_ops']/fp32~HWR", t_fp32, float(hw_tx2[1]) * 1e12, "HWR §4 0.67 TFLOPS", rel=0.01)
    add(f"{CAT}:ns-mobile-gpu-tx2.specs['peak_ops']/fp16~HWR", 2 * t_fp32, float(hw_tx2[2]) * 1e12, "HWR §4 1.33 TFLOPS", rel=0.01)

    ssd = _platform_row("Samsung SmartSSD")
    ns_fpga = devices["ns_fpga"].specs
    add(f"{CAT}:ns-fpga-smartssd.specs['units']<=DSPs", ns_fpga["units"].value, (1, _nums(_find(r"([\d,]+) DSP", ssd, "KU15P DSPs")[1])[0]),
        "HWR §4: one DSP48 per PE", kind="within")
    lo_hi = _find(r"\u2248 \$(\d+)-(\d+) k street", ssd, "the SmartSSD street price")
    add(f"{CAT}:ns-fpga-smartssd.specs['price_usd']/purchase", ns_fpga["price_usd"].value["purchase"],
        (float(lo_hi[1]) * 1e3, float(lo_hi[2]) * 1e3), "HWR §4 ≈ $2-4 k", kind="within")
    grade = _find(r"DDR4-(\d+) to DDR4-(\d+)", ns_fpga["mem_bw_bytes_s"].source, "the DDR4 speed grades")
    grades = [float(grade[1]), float(grade[2])]
    one_channel = [g * 8e6 for g in grades]  # MT/s x 8 B
    add(f"{CAT}:ns-fpga-smartssd.specs['mem_bw_bytes_s'].sweep", ns_fpga["mem_bw_bytes_s"].sweep, tuple(one_channel),
        "one 64-bit DDR4 channel from DDR4-1600 to DDR4-2400")
    add(f"{CAT}:ns-fpga-smartssd.specs['mem_bw_bytes_s']", ns_fpga["mem_bw_bytes_s"].value, sum(one_channel) / 2,
        "the middle of the speed grades' range (no source gives the grade)")
    add("hw.memory ddr4 channel = the top grade", mem["ddr4"].gbps.value * 1e9, one_channel[1], "one DDR4-2400 channel")
    dsa = devices["dscs"].specs
    add(f"{CAT}:dsa.specs['mem_bw_bytes_s']", dsa["mem_bw_bytes_s"].value, mem["ddr5"].gbps.value * 1e9, "hw.memory ddr5")
    em = EnergyModel(AcceleratorConfig().validate())
    add(f"{CAT}:dsa.specs['modelled_peak_w']", dsa["modelled_peak_w"].value, em.peak_power_w(), "recomputed: EnergyModel(T2 config)")
    add(f"{CAT}:dsa.specs['idle_w']", dsa["idle_w"].value, em.static_w, "recomputed: EnergyModel(T2 config).static_w")

    # --- the network-attached FPGA (twin.stream) ------------------------------------------------
    nfpga = _clean(_section(_hwr(), "Network-attached FPGA"))
    hls = _find(r"typical HLS clock (\d+)-(\d+) MHz; a (\d+) B/cycle datapath", nfpga, "the HLS clock and datapath")
    add("nearfaas.twin.stream.CLOCK_HZ", stream.CLOCK_HZ.value, _hz(_t2("Frequency", "FPGA")), "T2 Frequency FPGA")
    add("nearfaas.twin.stream.CLOCK_HZ.sweep", stream.CLOCK_HZ.sweep, (float(hls[1]) * 1e6, float(hls[2]) * 1e6), "HWR 250-300 MHz")
    add("nearfaas.twin.stream.LINK_BPS", stream.LINK_BPS.value,
        float(_find(r"(\d+) Gb/s line rate in HLS", nfpga, "Easynet's line rate")[1]) * 1e9, "HWR Easynet 100 Gb/s")
    need = stream.LINK_BPS.value / 8 / stream.CLOCK_HZ.value
    add("nearfaas.twin.stream.DATAPATH_BYTES_PER_CYCLE", stream.DATAPATH_BYTES_PER_CYCLE.value, 2 ** math.ceil(math.log2(need)),
        "derived: the power-of-two AXI width >= line rate / clock")
    add("nearfaas.twin.stream.DATAPATH_BYTES_PER_CYCLE~HWR", stream.DATAPATH_BYTES_PER_CYCLE.value, float(hls[3]), "HWR 64 B/cycle")
    add("nearfaas.twin.stream.FRAME_OVERHEAD_BYTES", stream.FRAME_OVERHEAD_BYTES.value, 8 + 12 + 14 + 4 + 20 + 20,
        "derived: preamble/SFD + IFG + Ethernet header + FCS + IPv4 + TCP")
    add("nearfaas.twin.stream.MIN_FRAME_WIRE_BYTES", stream.MIN_FRAME_WIRE_BYTES.value, 64 + 8 + 12, "derived: 64 B frame + preamble + IFG")
    _find(r"one value per cycle \(II = 1\)", nfpga, "one value per cycle")
    add("nearfaas.twin.stream.VALUES_PER_CYCLE", stream.VALUES_PER_CYCLE.value, 1, "HWR: one value per cycle (II = 1)")
    hop = _find(r"sweep (\d+)-(\d+) \u00b5s", nfpga, "the stack hop sweep")
    add("nearfaas.twin.stream.STACK_HOP_S.sweep", stream.STACK_HOP_S.sweep, (float(hop[1]) * 1e-6, float(hop[2]) * 1e-6), "HWR sweep 1-5 µs")
    _find(r"Partial reconfiguration \| \"tens of milliseconds\"", nfpga, "PR takes tens of milliseconds")
    add("nearfaas.twin.stream.PR_TIME_S", stream.PR_TIME_S.value, (10e-3, 100e-3), "'tens of milliseconds'", kind="within")

    # --- plain tables of the DSA's energy/area/scaling model -------------------------------------
    hz = {r[0]: r for r in _rows(_section(_hwr(), "3.1"))}
    for key, op in (("int8_mult", "8-bit int mult"), ("int32_add", "32-bit int add"), ("fp16_mult", "16-bit FP mult"),
                    ("fp16_add", "16-bit FP add"), ("fp32_mult", "32-bit FP mult"), ("fp32_add", "32-bit FP add")):
        add(f"nearfaas.hw.energy.HOROWITZ_PJ_45[{key!r}]", energy.HOROWITZ_PJ_45[key], _nums(hz[op][1])[0], f"HWR §3.1 {op}")
    add("nearfaas.hw.energy.HOROWITZ_PJ_45['int16_mult']", energy.HOROWITZ_PJ_45["int16_mult"],
        float(_find(r"\u2248([\d.]+) by width", hz["16-bit int mult"][1], "the int16 mult interpolation")[1]), "HWR §3.1 ≈0.8")
    add("nearfaas.hw.energy.HOROWITZ_PJ_45['bf16_mult']", energy.HOROWITZ_PJ_45["bf16_mult"], _nums(hz["16-bit FP mult"][1])[0] * (8 / 11) ** 2,
        "derived: fp16 mult x (8/11)^2")
    area_of = lambda op: _nums(hz[op][2])[0]  # noqa: E731
    pe = area.PE_AREA_UM2_45["horowitz"]
    add("nearfaas.hw.area.PE_AREA_UM2_45['horowitz']['int8']", pe["int8"], area_of("8-bit int mult") + area_of("32-bit int add"), "HWR §3.1 areas")
    add("nearfaas.hw.area.PE_AREA_UM2_45['horowitz']['fp16']", pe["fp16"], area_of("16-bit FP mult") + area_of("32-bit FP add"), "HWR §3.1 areas")
    add("nearfaas.hw.area.PE_AREA_UM2_45['horowitz']['fp32']", pe["fp32"], area_of("32-bit FP mult") + area_of("32-bit FP add"), "HWR §3.1 areas")
    add("nearfaas.hw.area.VPU_LANE_AREA_UM2_45", area.VPU_LANE_AREA_UM2_45, (area_of("32-bit FP mult") + area_of("32-bit FP add")) * 1.2,
        "derived: fp32 mult + add, +20 %")

    s33 = _clean(_section(_hwr(), "3.3"))
    add("nearfaas.hw.energy.REGISTER_PJ_PER_BIT_45", energy.REGISTER_PJ_PER_BIT_45,
        float(_find(r"1-bit register ([\d.]+) pJ/read", s33, "the register energy")[1]), "HWR §3.3")
    adder = _find(r"32-bit adder ([\d.]+) pJ, (\d+) \u00b5m\u00b2 \(leak ([\d.]+) \u00b5W\)", s33, "the Aladdin adder")
    add("nearfaas.hw.energy.LEAKAGE_W_PER_MM2_45", energy.LEAKAGE_W_PER_MM2_45, float(adder[3]) * 1e-6 / (float(adder[2]) * 1e-6),
        "derived: HWR §3.3 adder leakage / area")
    for dt, first in (("int8", "8-bit mult + 32-bit add"), ("int16", "16-bit mult + 32-bit add")):
        m = _find(r"([\d.]+) pJ/MAC, ([\d,]+) \u00b5m\u00b2", _row(_rows(s33), first)[1], f"Aladdin {dt} MAC at 45 nm")
        add(f"nearfaas.hw.energy.ALADDIN_MAC_PJ_45[{dt!r}]", energy.ALADDIN_MAC_PJ_45[dt], float(m[1]), "HWR §3.3 45 nm")
        add(f"nearfaas.hw.area.PE_AREA_UM2_45['aladdin'][{dt!r}]", area.PE_AREA_UM2_45["aladdin"][dt], float(m[2].replace(",", "")), "HWR §3.3")

    cacti = {(r[0], r[1]): tuple(_nums(x)[0] for x in (r[2], r[3], r[5])) for r in _rows(_section(_hwr(), "3.2"))[1:9]}
    size = lambda text: int(_nums(text)[0] * {"KB": 1024, "MB": 2**20}[_find(r"(KB|MB)", text, "a size")[1]])  # noqa: E731
    for (what, node), v in cacti.items():
        width = int(_find(r"\u00d7(\d+) b", what, "a width")[1])
        table = {(45, 64): area.CACTI_45NM_X64, (22, 1024): area.CACTI_22NM_X1024}.get((int(_nums(node)[0]), width))
        got = area.CACTI_45NM_4MB_X1024 if (node, width) == ("45 nm", 1024) else table[size(what)]
        add(f"nearfaas.hw.area.CACTI[{what} @ {node}]", got, v, "HWR §3.2 CACTI 7 [ran]")

    s37 = _section(_hwr(), "3.7")
    coeff = {r[0]: r for r in _rows(s37)}
    for n in (45, 14):
        row = coeff[f"HP{n}"]
        add(f"nearfaas.hw.tech.HP_DELAY_COEFFS[{n}]", tech.HP_DELAY_COEFFS[n], tuple(_nums(row[1])), "HWR §3.7")
        add(f"nearfaas.hw.tech.HP_ENERGY_COEFFS[{n}]", tech.HP_ENERGY_COEFFS[n], tuple(_nums(row[2])), "HWR §3.7")
        add(f"nearfaas.hw.tech.HP_POWER_COEFFS[{n}]", tech.HP_POWER_COEFFS[n], tuple(_nums(row[3])), "HWR §3.7")
        add(f"nearfaas.hw.tech.NOMINAL_VDD[{n}]", tech.NOMINAL_VDD[n], _nums(row[4])[0], "HWR §3.7 PTM Vdd")
    for to, f in re.findall(r"45\u2192(\d+) =? ?\u00d7(\d+(?:\.\d+)?)", _clean(s37)):
        add(f"nearfaas.hw.tech.AREA_VS_45_SRC[{to}]", tech.AREA_VS_45_SRC[int(to)], float(f), "HWR §3.7 area table")
    nominal = _row(_rows(s37), "HP45 @1.0 V \u2192 HP14 @0.8 V")
    for q, cell in (("delay", nominal[1]), ("energy", nominal[2]), ("leakage", nominal[3])):
        add(f"nearfaas.hw.tech.stillmaker_factor({q!r})", round(tech.stillmaker_factor(q), 3), _nums(cell)[0], "HWR §3.7 [ran] nominal factors")
    return out


def _constants():
    from nearfaas.twin import stream

    uncertain, other, _ = uncertainty._scan(uncertainty.default_targets() + [stream])
    return uncertain + other


def _label(c) -> str:
    return f"{c.module}.{c.name}"


def _numeric_entries(c) -> list[str]:
    """The labels a constant's numbers go by: itself, or label/key for each number of a dict."""
    v = c.sourced.value
    if isinstance(v, dict):
        return [f"{_label(c)}/{k}" for k, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return [_label(c)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []


def _wrong(claims: list[Claim]) -> list[str]:
    return [f"{c.label} = {c.got!r}, but {c.where} gives {c.want!r}" for c in claims if not c.holds()]


# ------------------------------------------------------------------ the tests


@needs_registries
def test_every_cited_figure_matches_its_registry_and_every_derived_one_its_inputs():
    claims = _claims()
    assert len(claims) > 150, "too few checks: the registries or the catalog are no longer read"
    wrong = _wrong(claims)
    assert not wrong, "constants that differ from what their sources say:\n  " + "\n  ".join(wrong)


@needs_registries
def test_every_cited_constant_is_checked():
    """Each number of a src/mem/derived constant the scan reaches is held against a registry or
    recomputed above, or UNCHECKED says why not; and no check names a constant that is gone."""
    constants = _constants()
    assert len(constants) > 50, "the scan found too few constants: it no longer reaches the model"
    checked = {c.label.split("~")[0].split("<=")[0] for c in _claims()}
    cited = {e for c in constants if c.sourced.status != "assumption" for e in _numeric_entries(c)}
    missing = sorted(e for e in cited if e not in checked and e.split("/")[0] not in checked and e not in UNCHECKED)
    assert not missing, "cited constants no test compares with their source (add a check, or a reason to UNCHECKED):\n  " + "\n  ".join(missing)
    labels = {_label(c) for c in constants}
    stale = sorted(k for k in UNCHECKED if k not in labels)
    assert not stale, f"UNCHECKED names constants the scan no longer finds: {stale}"
    scanned = {_label(c) for c in constants}
    ghost = sorted({x for x in checked if x.startswith(("nearfaas.twin.platforms.", "nearfaas.twin.cost.", "nearfaas.twin.power.",
                                                        "nearfaas.twin.stream.", "nearfaas.hw.memory.", CAT))
                    and x.split("/")[0].removesuffix(".sweep").removesuffix(".sweep_hi") not in scanned})
    assert not ghost, f"checks of constants the scan does not find (renamed?): {ghost}"


def test_every_assumption_carries_a_range_around_its_value():
    constants = _constants()
    unswept = {_label(c) for c in constants if c.sourced.status == "assumption" and isinstance(c.sourced.value, (int, float))
               and c.sourced.sweep is None}
    assert unswept == set(KNOWN_UNSWEPT), (f"assumptions without a sweep: new {sorted(unswept - set(KNOWN_UNSWEPT))}, "
                                           f"fixed (drop from KNOWN_UNSWEPT) {sorted(set(KNOWN_UNSWEPT) - unswept)}")
    for c in constants:
        s = c.sourced
        if s.sweep is not None:
            assert s.sweep[0] <= s.value <= s.sweep[1], _label(c)

            assert s.sweep[0] < s.sweep[1] or s.status != "assumption", f"{_label(c)}: a sweep of one point is no range"


def test_every_constant_has_a_source_and_none_says_fitted():
    constants = _constants()
    assert all(c.sourced.source.strip() for c in constants)
    fitted = [f"{_label(c)}: {c.sourced.source!r}" for c in constants if re.search(r"\bfit(ted|ting)?\b", c.sourced.source, re.I)]
    assert not fitted, "constants whose source says they were fitted:\n" + "\n".join(fitted)


@needs_registries
def test_a_tuned_constant_fails_the_check(monkeypatch):
    """The check itself: a value moved while its source text stays the same is reported, for a
    Table 2 figure, a registry figure, a derived figure and a plain model table."""
    from nearfaas.hw import energy, memory
    from nearfaas.twin import platforms

    assert not _wrong(_claims())
    d = platforms.device("dscs")
    monkeypatch.setitem(d.specs, "tdp_w", Sourced(4.6, d.specs["tdp_w"].source, "src"))  # "T2: 4.2 W" still
    hbm2 = memory.MEMORY["hbm2"]
    monkeypatch.setitem(memory.MEMORY, "hbm2", dataclasses.replace(hbm2, pj_per_bit=Sourced(5.0, hbm2.pj_per_bit.source, "src", (3.9, 7.0))))
    peak = dict(d.specs["peak_ops"].value, int8=1.1 * d.specs["peak_ops"].value["int8"])
    monkeypatch.setitem(d.specs, "peak_ops", Sourced(peak, d.specs["peak_ops"].source, "derived"))
    monkeypatch.setitem(energy.HOROWITZ_PJ_45, "int8_mult", 0.25)
    wrong = "\n".join(_wrong(_claims()))
    for label in (f"{CAT}:dsa.specs['tdp_w']", "nearfaas.hw.memory.MEMORY['hbm2'].pj_per_bit", f"{CAT}:dsa.specs['peak_ops']/int8",
                  "nearfaas.hw.energy.HOROWITZ_PJ_45['int8_mult']"):
        assert label in wrong, label
