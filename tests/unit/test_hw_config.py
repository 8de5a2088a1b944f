"""dsa.yml validation: every error names the field and the fix."""

import pytest

from nearfaas.hw.dsa.config import DSAConfig, load_config
from nearfaas.hw.dsa.errors import ConfigError


def test_defaults_are_the_paper_design_point():
    c = load_config(None)
    assert (c.rows, c.cols, c.clock_ghz, c.dram_gbps) == (128, 128, 1.0, 38.4)
    assert c.ifmap_sram_kib + c.filter_sram_kib + c.ofmap_sram_kib == 4096


def test_yaml_round_trip(tmp_path):
    p = tmp_path / "dsa.yml"
    p.write_text("dsa:\n  rows: 64\n  cols: 32\n  dataflow: OS\n  dram: hbm2\n  vpu_lanes: 64\n  ifmap_sram_kib: 512\n")
    c = load_config(p)
    assert (c.rows, c.cols, c.dataflow, c.dram_gbps, c.ifmap_sram_kib) == (64, 32, "os", 460.0, 512)
    p.write_text("dram: 100\n")
    assert load_config(p).dram_gbps == 100.0


@pytest.mark.parametrize(
    "text, field, fix",
    [
        ("rows: 0", "rows", "use e.g. 128"),
        ("cols: -4", "cols", "use e.g. 128"),
        ("rows: 100", "rows", "use 64 or 128"),
        ("vpu_lanes: 48", "vpu_lanes", "use 32 or 64"),
        ("dataflow: rs", "dataflow", "os, ws, is"),
        ("dram: ddr9", "dram", "ddr4, ddr5, hbm2"),
        ("dram: -1", "dram", "38.4"),
        ("ofmap_sram_kib: 0", "ofmap_sram_kib", "size > 0"),
        ("clock_ghz: 0", "clock_ghz", "size > 0"),
        ("bytes_per_element: 3", "bytes_per_element", "1 for int8"),
        ("rows: big", "rows", "whole number"),
        ("arrays: 4", "arrays", "known fields"),
    ],
)
def test_impossible_values_name_field_and_fix(tmp_path, text, field, fix):
    p = tmp_path / "dsa.yml"
    p.write_text(text + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    msg = str(exc.value)
    assert field in msg and fix in msg and "dsa.yml" in msg


def test_missing_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="no such config"):
        load_config(tmp_path / "none.yml")
    p = tmp_path / "x.yml"
    p.write_text("rows: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="rows"):
        DSAConfig().replace(rows=3)
