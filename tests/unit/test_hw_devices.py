"""Device catalog (nearfaas.hw.devices): cited specs and the roofline latency/energy model."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.hw.area import AcceleratorConfig
from nearfaas.hw.devices import SPEC_FIELDS, Sourced, catalog, dsa, get

FAST = settings(max_examples=40, deadline=None)
CAT = catalog()
NAMES = sorted(CAT)
TABLE2_LABELS = {"Baseline (CPU)", "GPU", "FPGA", "NS-ARM", "NS-Mobile-GPU", "NS-FPGA", "DSCS-Serverless"}


def test_catalog_has_every_table2_platform():
    assert {d.label for d in CAT.values()} == TABLE2_LABELS


@pytest.mark.parametrize("name", NAMES)
def test_every_spec_has_a_source(name):
    d = CAT[name]
    for f in SPEC_FIELDS:
        assert f in d.specs, f"{name}: missing spec {f}"
        s = d.specs[f]
        assert s.source.strip(), f"{name}.{f}: no source"
        if s.status == "assumption":
            assert "assumption" in s.source
    for e in d.efficiency.values():
        assert e.why
    for s in (d.launch_s, d.driver_s, d.active_power_fraction):
        assert s.source.strip()
    assert d.describe()["modelled"] is True


def test_table2_figures():
    assert get("cpu-xeon-8275cl").tdp_w == 240
    assert get("gpu-rtx-2080ti").spec("units") == 4352
    assert get("fpga-alveo-u280").spec("units") == 1024 and get("fpga-alveo-u280").spec("clock_hz") == 250e6
    assert get("ns-fpga-smartssd").peak("int8") == pytest.approx(256 * 2 * 250e6)
    assert get("dsa").peak("int8") == pytest.approx(128 * 128 * 2 * 1e9)
    assert get("dsa").tdp_w == 4.2


@pytest.mark.parametrize("name", NAMES)
def test_compute_heavy_is_compute_bound_and_byte_heavy_is_memory_bound(name):
    d = CAT[name]
    assert d.roofline({"kind": "gemm", "flops": 1e13, "bytes": 1e3})["bound"] == "compute"
    assert d.roofline({"kind": "elementwise", "flops": 1e3, "bytes": 1e10})["bound"] == "memory"


@FAST
@given(
    name=st.sampled_from(NAMES),
    kind=st.sampled_from(["gemm", "conv", "elementwise", "reduction", "layout", "other"]),
    flops=st.floats(min_value=0, max_value=1e13),
    nbytes=st.floats(min_value=0, max_value=1e11),
    k=st.floats(min_value=1.0, max_value=100.0),
)
def test_latency_non_increasing_in_bandwidth_and_peak(name, kind, flops, nbytes, k):
    d = CAT[name]
    op = {"kind": kind, "flops": flops, "bytes": nbytes}
    base = d.latency(op)
    assert base >= d.launch_s.value
    specs_bw = dict(d.specs, mem_bw_bytes_s=Sourced(d.mem_bw * k, "test"))
    specs_pk = dict(d.specs, peak_ops=Sourced({t: v * k for t, v in d.peak_ops.items()}, "test"))
    assert replace(d, specs=specs_bw).latency(op) <= base * (1 + 1e-12)
    assert replace(d, specs=specs_pk).latency(op) <= base * (1 + 1e-12)
    e = d.energy(op)
    assert e >= d.idle_w * base * (1 - 1e-12)
    assert d.energy(op, base * 2) >= e


def test_dsa_from_config():
    small = dsa(AcceleratorConfig(rows=32, cols=32, dram="hbm2"))
    assert small.peak("int8") == pytest.approx(32 * 32 * 2e9)
    assert small.mem_bw == 460e9
    assert small.idle_w < get("dsa").idle_w  # smaller array leaks less


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: get("tpu-v9"), "device"),
        (lambda: get("dsa").latency({"kind": "fft", "flops": 1, "bytes": 1}), "op.kind"),
        (lambda: get("dsa").latency({"kind": "gemm", "flops": -1, "bytes": 1}), "op.flops"),
        (lambda: get("dsa").latency({"kind": "gemm", "flops": 1, "bytes": 1, "dtype": "fp64"}), "op.dtype"),
        (lambda: dsa(AcceleratorConfig(dram="ddr3")), "dram"),
        (lambda: Sourced(1, ""), "source"),
    ],
)
def test_invalid_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
