"""`nearfaas econ availability` and `nearfaas twin availability` from the command line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nearfaas.cli import main

CLUSTER = """\
nodes:
""" + "".join(f"  - {{name: storage-{i}, kind: storage, class: {'dscs' if i == 0 else 'standard'}}}\n" for i in range(6)) + """\
  - {name: compute-0, kind: compute, class: cpu}
replication: {factor: 3, scheme: copyset, scatter_width: 4}
"""


def test_availability_json_has_the_thesis_answer():
    r = CliRunner().invoke(main, ["econ", "availability", "--m", "10", "--n", "4", "--c", "4", "--f", "2", "--w", "4", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["relative_benefit"] == pytest.approx(got["p_gp"] / got["p_es"]) and got["relative_benefit"] > 1
    assert got["inputs"] == {"m": 10, "n": 4, "c": 4.0, "f": 2.0, "w": 4, "r_m": 0.1}


@pytest.mark.parametrize("args,text", [(["--m", "2"], "m (servers) is 2"), (["--w", "3"], "w (scatter width) is 3"),
                                       (["--n", "1"], "n (devices per server) is 1"), (["--f", "-1"], "f (device")])
def test_availability_bad_inputs_are_usage_errors(args, text):
    r = CliRunner().invoke(main, ["econ", "availability", *args])
    assert r.exit_code == 2 and text in r.output and "Traceback" not in r.output


def test_availability_sweep_writes_csv_and_figures(tmp_path):
    r = CliRunner().invoke(main, ["econ", "availability", "--sweep", "--out", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert (tmp_path / "availability.csv").read_text().startswith("m,n,c,f,w,")
    assert all((tmp_path / p).stat().st_size > 10_000 for p in ("availability_heatmaps.png", "availability_m10.png"))
    assert got["rows"] > 300


def test_twin_availability_compares_the_schemes_on_a_cluster_file(tmp_path):
    path = tmp_path / "cluster.yml"
    path.write_text(CLUSTER)
    r = CliRunner().invoke(main, ["twin", "availability", "--cluster", str(path), "--trials", "20000", "--json",
                                  "--plot", str(tmp_path / "a.png")])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["configured_scheme"] == "copyset" and got["storage_nodes"] == 6
    cs, rv = got["schemes"]["copyset"], got["schemes"]["rendezvous"]
    assert cs["replica_sets"] < rv["replica_sets"] and cs["p_loss"] < rv["p_loss"]
    assert got["rendezvous_over_copyset"] > 1
    assert (tmp_path / "a.png").stat().st_size > 10_000


def test_twin_availability_refuses_a_bad_scatter_width_and_a_bad_file(tmp_path):
    path = tmp_path / "cluster.yml"
    path.write_text(CLUSTER)
    r = CliRunner().invoke(main, ["twin", "availability", "--cluster", str(path), "--scatter-width", "3", "--plot", "none"])
    assert r.exit_code == 2 and "multiple of factor - 1" in r.output
    path.write_text(CLUSTER.replace("scatter_width: 4", "scatter_width: 9"))
    r = CliRunner().invoke(main, ["twin", "availability", "--cluster", str(path), "--plot", "none"])
    assert r.exit_code == 1 and "replication.scatter_width" in r.output and "Traceback" not in r.output


def test_mbwu_says_why_it_stopped_instead_of_a_traceback(monkeypatch, tmp_path):
    from nearfaas.bench import mbwu

    def no_fuse(**kwargs):
        raise RuntimeError("linkfs did not mount: fuse: device not found")

    monkeypatch.setattr(mbwu, "run", no_fuse)
    r = CliRunner().invoke(main, ["econ", "mbwu", "--plot", "none"])
    assert r.exit_code == 1 and "linkfs did not mount" in r.output and "Traceback" not in r.output
