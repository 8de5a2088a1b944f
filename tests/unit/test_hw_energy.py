"""Energy, area and technology-scaling models (nearfaas.hw.{tech,energy,area})."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.hw import tech
from nearfaas.hw.area import (
    CACTI_22NM_X1024,
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
# hw-references.md §3.2 CACTI 7 table, typed in here (not imported from the module under test):
# 45 nm, 64-bit wide, size -> (read pJ, write pJ, area mm2); 22 nm x1024 4 MB and 32 MB.
KB, MB = 1024, 1024 * 1024
CACTI_TABLE_45_X64 = {8 * KB: (6.05, 7.41, 0.029), 32 * KB: (17.0, 14.5, 0.106), 1 * MB: (77.2, 63.9, 3.57), 4 * MB: (139.5, 126.1, 13.9)}
CACTI_TABLE_22_X1024 = {4 * MB: (525.2, 616.2, 5.26), 32 * MB: (1473.6, 1655.7, 31.4)}
SRAM_FUNCS = (sram_read_pj, sram_write_pj, sram_area_mm2)


@pytest.mark.parametrize("lo, hi", [(8 * KB, 32 * KB), (32 * KB, 1 * MB), (1 * MB, 4 * MB)])
@pytest.mark.parametrize("t", [0.25, 0.5, 0.75])
def test_sram_between_cacti_points_is_log_log_interpolated(lo, hi, t):
    # A size a fraction t of the way from lo to hi in log(size) gets a^(1-t) * b^t of the two
    # neighbouring CACTI values (straight line in log-log), computed here from the table.
    size = lo ** (1 - t) * hi**t
    for i, f in enumerate(SRAM_FUNCS):
        a, b = CACTI_TABLE_45_X64[lo][i], CACTI_TABLE_45_X64[hi][i]
        assert f(size, 64, 45) == pytest.approx(a ** (1 - t) * b**t, rel=1e-9)
    # the same by hand for one case: 16 KB read = sqrt(6.05 x 17.0) = 10.1415 pJ
    assert sram_read_pj(16 * KB, 64, 45) == pytest.approx(10.1415, abs=1e-4)


def test_sram_beyond_cacti_points_extends_the_documented_slopes():
    # Below 8 KB the 8->32 KB slope continues: 2 KB is one such x4 step below 8 KB, so
    # value(2 KB) = value(8 KB)^2 / value(32 KB).
    for i, f in enumerate(SRAM_FUNCS):
        a, b = CACTI_TABLE_45_X64[8 * KB][i], CACTI_TABLE_45_X64[32 * KB][i]
        assert f(2 * KB, 64, 45) == pytest.approx(a * a / b, rel=1e-9)
    assert sram_read_pj(2 * KB, 64, 45) == pytest.approx(2.1531, abs=1e-4)  # 6.05^2 / 17.0
    # Above 4 MB the 22 nm x1024 4->32 MB ratio applies: at 32 MB (x8) the 45 nm x64 value is
    # value(4 MB) x (22 nm 32 MB / 22 nm 4 MB); at 8 MB (x2) the cube root of that ratio.
    for i, f in enumerate(SRAM_FUNCS):
        ratio = CACTI_TABLE_22_X1024[32 * MB][i] / CACTI_TABLE_22_X1024[4 * MB][i]
        base = CACTI_TABLE_45_X64[4 * MB][i]
        assert f(32 * MB, 64, 45) == pytest.approx(base * ratio, rel=1e-9)
        assert f(8 * MB, 64, 45) == pytest.approx(base * ratio ** (1 / 3), rel=1e-9)
    assert sram_read_pj(32 * MB, 64, 45) == pytest.approx(391.40, abs=0.01)  # 139.5 x 1473.6 / 525.2


@pytest.mark.parametrize("width", [64, 1024])
def test_sram_monotone_and_continuous_through_the_cacti_points(width):
    # On a fine log grid from 1 KB to 256 MB every quantity rises strictly; at each CACTI size the
    # value from just below equals the value from just above (no jump where segments meet), and
    # at width 64 it is the table's value.
    sizes = [1024 * 2 ** (k / 8) for k in range(8 * 18 + 1)]
    for i, f in enumerate(SRAM_FUNCS):
        vals = [f(s, width, 45) for s in sizes]
        assert all(x < y for x, y in zip(vals, vals[1:], strict=False)), f"{f.__name__} not increasing at width {width}"
        for knot, row in CACTI_TABLE_45_X64.items():
            below, above = f(knot * (1 - 1e-9), width, 45), f(knot * (1 + 1e-9), width, 45)
            assert below == pytest.approx(above, rel=1e-6), f"{f.__name__} jumps at {knot} B"
            if width == 64:
                assert f(knot, 64, 45) == pytest.approx(row[i], rel=1e-9)


def test_sram_width_scaling_against_an_independent_cacti_run():
    # hw-references §3.2, hwcomponents-cacti (its own config, not a point the model is built
    # from): 45 nm 4 MiB x128 b = 300 pJ per read, 12.8 mm2. The model's x64 -> x1024 width
    # exponent must land within 0.8-1.25x of it at x128.
    assert 0.8 < sram_read_pj(4 * MB, 128, 45) / 300.0 < 1.25
    assert 0.8 < sram_area_mm2(4 * MB, 128, 45) / 12.8 < 1.25


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
