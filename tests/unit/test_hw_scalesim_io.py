"""SCALE-Sim .cfg / topology CSV reading, error messages, and round trips through `hw simulate`."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.cli.hw import hw
from nearfaas.hw.dsa.errors import TopologyError
from nearfaas.hw.dsa.scalesim_io import read_cfg, read_topology, write_topology
from nearfaas.hw.dsa.timing import scalesim_cycles

DATA = Path(__file__).resolve().parents[1] / "data" / "scalesim"
CFG_TEXT = """[general]
run_name = t_{r}x{c}_{df}

[architecture_presets]
ArrayHeight : {r}
ArrayWidth : {c}
IfmapSramSzkB : 64
FilterSramSzkB : 64
OfmapSramSzkB : 64
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : 10
Dataflow : {df}
MemoryBanks : 1

[run_presets]
InterfaceBandwidth : CALC
"""


def _cfg(tmp_path, r=8, c=8, df="ws"):
    p = tmp_path / f"s_{r}_{c}_{df}.cfg"
    p.write_text(CFG_TEXT.format(r=r, c=c, df=df))
    return p


def test_read_cfg(tmp_path):
    sc = read_cfg(_cfg(tmp_path, 16, 8, "os"))
    assert (sc.run_name, sc.rows, sc.cols, sc.dataflow, sc.ifmap_kb, sc.bandwidth) == ("t_16x8_os", 16, 8, "os", 64, 10.0)
    assert sc.to_dsa().rows == 16


def test_bad_cfg(tmp_path):
    p = tmp_path / "bad.cfg"
    p.write_text("[architecture_presets]\nArrayHeight : 0\n")
    with pytest.raises(TopologyError, match="bad.cfg"):
        read_cfg(p)
    p.write_text(CFG_TEXT.format(r=8, c=8, df="xy"))
    with pytest.raises(TopologyError, match="Dataflow"):
        read_cfg(p)
    p.write_text("not an ini file")
    with pytest.raises(TopologyError, match="bad.cfg"):
        read_cfg(p)


def test_conv_and_gemm_detection(tmp_path):
    conv = tmp_path / "c.csv"
    write_topology(conv, [("L1", 10, 12, 3, 3, 4, 8, 2)])
    (layer,) = read_topology(conv)
    assert layer.conv is not None
    assert (layer.gemm.M, layer.gemm.N, layer.gemm.K) == (5 * 6, 8, 36)  # ceil((10-3+2)/2)=5, ceil((12-3+2)/2)=6
    gemm = tmp_path / "g.csv"
    write_topology(gemm, [("G1", 7, 9, 11)], gemm=True)
    (layer,) = read_topology(gemm)
    assert layer.conv is None and (layer.gemm.M, layer.gemm.N, layer.gemm.K) == (7, 9, 11)


def test_depthwise_DP_rows_split_per_channel(tmp_path):
    p = tmp_path / "dp.csv"
    write_topology(p, [("DP1", 8, 8, 3, 3, 4, 1, 1)])
    layers = read_topology(p)
    assert [x.name for x in layers] == [f"DP1Channel_{i}" for i in range(4)]
    assert all(x.gemm.K == 9 for x in layers)


@pytest.mark.parametrize(
    "row, where",
    [
        ("L1, 10, ten, 3, 3, 4, 8, 1,", ":2: column 3 (IFMAP Width) = 'ten' is not an integer"),
        ("L1, 10, 10, 3, 3, 0, 8, 1,", ":2: column 6 (Channels) = 0 must be >= 1"),
        ("L1, 10, 10, 3, 3, 4, -8, 1,", ":2: column 7 (Num Filter) = -8 must be >= 1"),
        ("L1, 2, 10, 3, 3, 4, 8, 1,", ":2: column 4 (filter height) = 3 is larger than the ifmap height 2"),
        ("L1, 10, 10, 3, 3, 4, 8,", ":2: column 8"),
    ],
)
def test_bad_rows_name_file_line_column(tmp_path, row, where):
    p = tmp_path / "topo.csv"
    p.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n" + row + "\n")
    with pytest.raises(TopologyError) as exc:
        read_topology(p, gemm=False)
    assert str(p) + where in str(exc.value)


def test_bad_gemm_row(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("Layer, M, N, K,\nG, 4, 0, 4,\n")
    with pytest.raises(TopologyError, match=r"g.csv:2: column 3 \(N\) = 0"):
        read_topology(p)


conv_rows = st.tuples(
    st.integers(1, 40), st.integers(1, 40), st.integers(1, 5), st.integers(1, 5), st.integers(1, 64), st.integers(1, 64), st.integers(1, 3)
).filter(lambda t: t[2] <= t[0] and t[3] <= t[1])


@settings(max_examples=25, deadline=None)
@given(st.lists(conv_rows, min_size=1, max_size=5), st.sampled_from(["os", "ws", "is"]), st.sampled_from([4, 8, 32]))
def test_conv_round_trip_through_simulate(tmp_path_factory, rows, df, r):
    tmp = tmp_path_factory.mktemp("rt")
    cfg = _cfg(tmp, r, r, df)
    topo = tmp / "t.csv"
    write_topology(topo, [(f"L{i}",) + row for i, row in enumerate(rows)])
    res = CliRunner().invoke(hw, ["simulate", "-c", str(cfg), "-t", str(topo), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    expect = []
    for ih, iw, fh, fw, ch, nf, s in rows:
        oh, ow = -(-(ih - fh + s) // s), -(-(iw - fw + s) // s)
        expect.append(scalesim_cycles(oh * ow, nf, fh * fw * ch, r, r, df))
    assert [x["compute_cycles"] for x in out["layers"]] == expect
    assert out["total_cycles"] == sum(expect)


def test_recorded_files_parse_and_simulate():
    if not (DATA / "conv_layers.csv").exists():
        pytest.skip(f"{DATA} not recorded yet")
    for cfg in sorted(DATA.glob("*.cfg")):
        for topo, flag in (("conv_layers.csv", []), ("gemm_layers.csv", ["--gemm"]), ("resnet50.csv", [])):
            for mode in ("scalesim", "dsa"):
                res = CliRunner().invoke(hw, ["simulate", "-c", str(cfg), "-t", str(DATA / topo), "--json", "--mode", mode, *flag])
                assert res.exit_code == 0, res.output
                out = json.loads(res.output)
                assert out["total_cycles"] == sum(x["compute_cycles"] for x in out["layers"]) > 0
