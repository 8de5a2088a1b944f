"""The rules around pre-warmed generic workers that need no process: when a function must get a
fresh interpreter, the cluster-file field, and how a node passes it on."""

from __future__ import annotations

from typing import Any

import pytest

from nearfaas.cluster.launcher import _is_ours, _node_command
from nearfaas.node.agent import node_url
from nearfaas.node.prewarm import fresh_interpreter_reason, shadowed_modules
from nearfaas.spec.cluster import ClusterSpec, load_cluster, parse_cluster
from nearfaas.spec.errors import SpecError


@pytest.mark.parametrize("key", ["PYTHONHASHSEED", "PYTHONPATH", "PYTHONMALLOC", "LD_PRELOAD", "LC_ALL", "LANG",
                                 "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "AIOHTTP_NO_EXTENSIONS"])
def test_variables_read_at_interpreter_start_need_a_fresh_one(key):
    reason = fresh_interpreter_reason({key: "1", "GREETING": "hi"}, {})
    assert reason is not None and key in reason


def test_ordinary_variables_and_unchanged_values_do_not():
    assert fresh_interpreter_reason({"GREETING": "hi", "exec_timeout": "10s", "TZ": "UTC", "OMP_NUM_THREADS": 2}, {}) is None
    # Setting a start-up variable to the value the generic workers already run with changes nothing.
    assert fresh_interpreter_reason({"LANG": "C.UTF-8"}, {"LANG": "C.UTF-8"}) is None
    assert fresh_interpreter_reason({}, {}) is None


def test_shadowed_modules_are_the_requirements_a_generic_worker_already_imported(tmp_path):
    for name in ("yarl", "nearfaas_testpkg", "bin", "__pycache__", "yarl-1.0.dist-info"):
        (tmp_path / name).mkdir()
    (tmp_path / "six.py").write_text("")
    (tmp_path / "multidict.cpython-311-x86_64-linux-gnu.so").write_text("")
    (tmp_path / "aiohttp.pth").write_text("")
    imported = frozenset({"yarl", "multidict", "six", "json", "aiohttp", "bin"})
    assert shadowed_modules(str(tmp_path), imported) == ["multidict", "six", "yarl"]
    assert shadowed_modules(str(tmp_path / "missing"), imported) == []


def _nodes(**fields: Any) -> dict:
    return {"nodes": [{"name": "s0", "kind": "storage", "class": "dscs", **fields}], "replication": {"factor": 1}}


def test_cluster_prewarm_defaults_round_trip_and_zero():
    assert all(n.prewarm == 1 for n in ClusterSpec().nodes)
    assert parse_cluster(_nodes(prewarm=0)).nodes[0].prewarm == 0
    spec = parse_cluster(_nodes(prewarm=3, workers_max=4))
    assert spec.nodes[0].prewarm == 3
    assert ClusterSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("fields,text,fix", [
    ({"prewarm": -1}, "at least 0", "prewarm: 1"),
    ({"prewarm": "lots"}, "bad value", "prewarm: 1"),
    ({"prewarm": 3, "workers_max": 2}, "must not exceed workers_max (2)", "raise workers_max"),
])
def test_cluster_prewarm_errors_name_the_field_and_the_fix(fields, text, fix):
    with pytest.raises(SpecError) as info:
        parse_cluster(_nodes(**fields))
    problem = next(p for p in info.value.problems if p.path == "nodes[0].prewarm")
    assert text in str(problem) and fix in str(problem)


def test_cluster_file_prewarm(tmp_path):
    (tmp_path / "c.yml").write_text("nodes:\n  - {name: s0, kind: storage, class: dscs, prewarm: 0}\n"
                                    "  - {name: c0, kind: compute, class: cpu, prewarm: 2}\nreplication: {factor: 1}\n")
    assert [n.prewarm for n in load_cluster(tmp_path / "c.yml").nodes] == [0, 2]


def test_node_command_passes_prewarm_and_down_recognises_generic_workers():
    layout = {"host": "127.0.0.1", "state_dir": "/x/.nearfaas", "gateway_url": "http://127.0.0.1:1"}
    cmd = _node_command(layout, {"name": "c0", "kind": "compute", "class": "cpu", "port": 5, "prewarm": 0})
    assert cmd[cmd.index("--prewarm") + 1] == "0"
    cmd = _node_command(layout, {"name": "c0", "kind": "compute", "class": "cpu", "port": 5})  # a layout from before prewarm
    assert cmd[cmd.index("--prewarm") + 1] == "1"
    root = "/x/.nearfaas"
    assert _is_ours(["python", "-m", "nearfaas.runtime.prewarm", "--node-dir", f"{root}/nodes/c0", "--ready-fd", "5"], root)
    assert not _is_ours(["python", "-m", "nearfaas.runtime.prewarm", "--node-dir", f"{root}-demo/nodes/c0"], root)


def test_node_url_is_one_workers_can_connect_to():
    assert node_url("127.0.0.1", 8081) == "http://127.0.0.1:8081"
    assert node_url("0.0.0.0", 8081) == "http://127.0.0.1:8081"
    assert node_url("::1", 8081) == "http://[::1]:8081"
