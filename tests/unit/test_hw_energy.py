"""Energy, area and technology-scaling models (nearfaas.hw.{tech,energy,area})."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.hw import tech
from nearfaas.hw.area import (
    CACTI_22NM_X1024,
    CACTI_45NM_X64,
    DTYPES,
    AcceleratorConfig,
    SramBuffer,
    area_mm2,
    sram_area_mm2,
    sram_read_pj,
    sram_write_pj,
)
from nearfaas.hw.energy import PARTS, EnergyConfig, EnergyModel, mac_pj

FAST = settings(max_examples=40, deadline=None)
NODES = st.sampled_from(tech.NODES_NM)
NONNEG = st.floats(min_value=0, max_value=1e12, allow_nan=False)
COUNTS = st.fixed_dictionaries(
    {
        "macs": NONNEG,
        "sram_reads_bytes": NONNEG,
        "sram_writes_bytes": NONNEG,
        "dram_bytes": NONNEG,
        "vpu_ops": NONNEG,
        "cycles": NONNEG,
    }
)


# --- technology scaling ------------------------------------------------------------------------
def test_verified_stillmaker_factors_match_hw_references():
    # hw-references.md §3.7 [ran]: HP45@1.0 V -> HP14@0.8 V: delay x0.361, energy x0.112, power x0.157
    assert tech.stillmaker_factor("delay") == pytest.approx(0.361, abs=1e-3)
    assert tech.stillmaker_factor("energy") == pytest.approx(0.112, abs=1e-3)
    assert tech.stillmaker_factor("leakage") == pytest.approx(0.157, abs=1e-3)
    assert tech.stillmaker_factor("energy", 45, 14, from_v=0.8, to_v=0.8) == pytest.approx(0.173, abs=1e-3)
    assert tech.scale(1.0, "area", 45, 14) == pytest.approx(0.17)
    assert tech.scale(1.0, "area", 45, 7) == pytest.approx(0.059)
    assert tech.is_verified("area", 16) and not tech.is_verified("energy", 22)


@FAST
@given(q=st.sampled_from(tech.QUANTITIES), a=NODES, b=NODES)
def test_scale_roundtrip_and_monotone(q, a, b):
    assert tech.scale(tech.scale(3.0, q, a, b), q, b, a) == pytest.approx(3.0)
    if b < a:
        assert tech.scale(1.0, q, a, b) < 1.0


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: tech.scale(1.0, "energy", 45, 13), "to_nm"),
        (lambda: tech.scale(1.0, "energy", 28, 14), "from_nm"),
        (lambda: tech.scale(1.0, "speed", 45, 14), "quantity"),
        (lambda: tech.stillmaker_factor("energy", 45, 22), "to_nm"),
    ],
)
def test_tech_errors_name_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()


# --- SRAM -------------------------------------------------------------------------------------
def test_sram_reproduces_cacti_points_at_45nm():
    for size, (rd, wr, ar) in CACTI_45NM_X64.items():
        assert sram_read_pj(size, 64, 45) == pytest.approx(rd)
        assert sram_write_pj(size, 64, 45) == pytest.approx(wr)
        assert sram_area_mm2(size, 64, 45) == pytest.approx(ar)
    assert sram_read_pj(4 << 20, 1024, 45) == pytest.approx(1539.6)
    assert sram_area_mm2(4 << 20, 1024, 45) == pytest.approx(20.4)


def test_sram_22nm_within_a_factor_of_cacti():
    # Validation, not a fit: the 22 nm CACTI points are reproduced within 0.6-1.4x.
    for size, (rd, _wr, ar) in CACTI_22NM_X1024.items():
        assert 0.6 < sram_read_pj(size, 1024, 22) / rd < 1.4
        assert 0.6 < sram_area_mm2(size, 1024, 22) / ar < 1.4


@FAST
@given(
    s1=st.integers(min_value=1024, max_value=128 << 20),
    s2=st.integers(min_value=1024, max_value=128 << 20),
    w=st.sampled_from([64, 128, 256, 512, 1024, 2048]),
    node=NODES,
)
def test_bigger_sram_costs_more_per_access_and_area(s1, s2, w, node):
    lo, hi = sorted((s1, s2))
    assert sram_read_pj(lo, w, node) <= sram_read_pj(hi, w, node)
    assert sram_write_pj(lo, w, node) <= sram_write_pj(hi, w, node)
    assert sram_area_mm2(lo, w, node) <= sram_area_mm2(hi, w, node)
    if hi > lo * 1.01:
        assert sram_read_pj(lo, w, node) < sram_read_pj(hi, w, node)
        assert sram_area_mm2(lo, w, node) < sram_area_mm2(hi, w, node)


def test_wider_access_costs_less_per_byte():
    per_byte = [sram_read_pj(4 << 20, w, 14) / (w / 8) for w in (64, 128, 256, 1024)]
    assert per_byte == sorted(per_byte, reverse=True)


# --- MAC energy -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_horowitz_is_lower_bound_of_aladdin(dtype):
    for node in tech.NODES_NM:
        assert mac_pj(dtype, "horowitz", node)["total"] < mac_pj(dtype, "aladdin", node)["total"]
        assert mac_pj(dtype, "horowitz", node)["arith"] <= mac_pj(dtype, "horowitz", node)["total"]


def test_cited_mac_values_at_45nm():
    assert mac_pj("int8", "horowitz", 45)["arith"] == pytest.approx(0.3)  # 0.2 mult + 0.1 add
    assert mac_pj("fp32", "horowitz", 45)["arith"] == pytest.approx(4.6)
    assert mac_pj("int8", "aladdin", 45)["total"] == pytest.approx(1.154)
    assert mac_pj("int16", "aladdin", 45)["total"] == pytest.approx(3.890)


# --- EnergyModel ------------------------------------------------------------------------------
@FAST
@given(
    counts=COUNTS,
    src=st.sampled_from(["horowitz", "aladdin"]),
    dram=st.sampled_from(["ddr4", "ddr5", "hbm2", "lpddr4"]),
    mode=st.sampled_from(["per_mm2", "fraction"]),
)
def test_parts_sum_to_total(counts, src, dram, mode):
    m = EnergyModel(EnergyConfig(accel=AcceleratorConfig(source=src, dram=dram), leakage_mode=mode))
    b = m.breakdown(counts)
    assert set(b) == {*PARTS, "total"}
    assert b["total"] == b["mac"] + b["sram"] + b["dram"] + b["vpu"] + b["static"]
    assert all(v >= 0 for v in b.values())


@FAST
@given(
    counts=COUNTS,
    key=st.sampled_from(["macs", "sram_reads_bytes", "sram_writes_bytes", "dram_bytes", "vpu_ops", "cycles"]),
    extra=st.floats(min_value=0, max_value=1e12),
    mode=st.sampled_from(["per_mm2", "fraction"]),
)
def test_energy_monotone_in_counts(counts, key, extra, mode):
    m = EnergyModel(EnergyConfig(leakage_mode=mode))
    more = dict(counts)
    more[key] = counts[key] + extra
    assert m.breakdown(more)["total"] >= m.breakdown(counts)["total"]


@FAST
@given(counts=COUNTS, a=NODES, b=NODES, dtype=st.sampled_from(DTYPES))
def test_newer_node_lower_energy_and_area(counts, a, b, dtype):
    old, new = max(a, b), min(a, b)
    e_old = EnergyModel(node_nm=old, dtype=dtype).breakdown(counts)
    e_new = EnergyModel(node_nm=new, dtype=dtype).breakdown(counts)
    for part in ("mac", "sram", "vpu", "static", "total"):
        assert e_new[part] <= e_old[part] * (1 + 1e-12)
    assert e_new["dram"] == e_old["dram"]  # DRAM is off-chip: not scaled with the logic node
    assert area_mm2(AcceleratorConfig(node_nm=new, dtype=dtype))["total"] <= area_mm2(AcceleratorConfig(node_nm=old, dtype=dtype))["total"]


def test_per_buffer_counts_and_average_power():
    bufs = (SramBuffer("ifmap", 1 << 20, 1024), SramBuffer("weights", 2 << 20, 1024), SramBuffer("ofmap", 1 << 20, 1024))
    m = EnergyModel(AcceleratorConfig(buffers=bufs))
    b = m.breakdown(
        {
            "macs": 1e6,
            "sram_reads_bytes": {"ifmap": 1e6, "weights": 1e6},
            "sram_writes_bytes": {"ofmap": 4e6},
            "dram_bytes": 1e6,
            "cycles": 1e4,
        }
    )
    p = m.average_power(b, 1e-5)
    assert p["accelerator_w"] == pytest.approx((b["total"] - b["dram"]) / 1e-5)
    assert p["total_w"] == pytest.approx(p["accelerator_w"] + p["dram_w"])
    with pytest.raises(ValueError, match="several buffers"):
        m.breakdown({"sram_reads_bytes": 10})
    with pytest.raises(ValueError, match="unknown buffer"):
        m.breakdown({"sram_reads_bytes": {"psum": 10}})


def test_area_parts_sum_and_overhead():
    a = area_mm2(AcceleratorConfig())
    assert a["total"] == pytest.approx(a["pe_array"] + a["sram"] + a["vpu"] + a["overhead"])
    assert a["overhead"] == pytest.approx(0.2 * a["total"])
    assert area_mm2(AcceleratorConfig(rows=256, cols=256))["pe_array"] == pytest.approx(4 * a["pe_array"])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"dtype": "int4"}, "dtype"),
        ({"node_nm": 28}, "node_nm"),
        ({"source": "cacti"}, "source"),
        ({"rows": 0}, "rows"),
        ({"buffers": (SramBuffer("g", -5, 64),)}, "size_bytes"),
        ({"buffers": (SramBuffer("g", 4096, 12),)}, "width_bits"),
        ({"dram": "ddr9"}, "dram"),
        ({"clock_hz": 0}, "clock_hz"),
    ],
)
def test_invalid_config_raises_named_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as exc:
        EnergyModel(**kwargs)
    assert "use" in str(exc.value) or "must" in str(exc.value)


@pytest.mark.parametrize(
    "counts, field",
    [({"macs": -1}, "macs"), ({"dram_bytes": math.nan}, "dram_bytes"), ({"flops": 1}, "unknown keys"), ({"clock_hz": 0}, "clock_hz")],
)
def test_invalid_counts_raise(counts, field):
    with pytest.raises(ValueError, match=field):
        EnergyModel().breakdown(counts)


def test_from_dsa_config_duck_typed():
    from types import SimpleNamespace

    cfg = SimpleNamespace(
        rows=128, cols=128, vpu_lanes=128, clock_ghz=1.0, dram="ddr5", bytes_per_element=1, acc_bytes=4,
        technology_nm=14, ifmap_sram_kib=1536, filter_sram_kib=1536, ofmap_sram_kib=1024,
    )  # fmt: skip
    a = AcceleratorConfig.from_dsa_config(cfg)
    assert [b.name for b in a.buffers] == ["ifmap", "filter", "ofmap"]
    assert sum(b.size_bytes for b in a.buffers) == 4 << 20
    assert a.buffers[0].width_bits == 1024 and a.buffers[2].width_bits == 4096
    with pytest.raises(ValueError, match="dram"):
        AcceleratorConfig.from_dsa_config(SimpleNamespace(**{**vars(cfg), "dram": 38.4}))
