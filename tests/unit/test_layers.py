"""The dependency direction of the code base, checked (issue 14): a package may import only
packages in layers below its own (or itself). An upward import — a node importing the gateway,
the simulator importing the gateway, anything importing the CLI — fails this test, with the file
and line. Function-local imports count: a cycle hidden inside a function is still a cycle.

The layers, bottom to top (docs/architecture.md draws them):
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "nearfaas"

# Bottom first. A package may import any package of a lower layer, never one of its own layer
# (other than itself) or above.
LAYERS: list[set[str]] = [
    {"bitar", "atomic"},  # compression offload: codecs the wire formats above use; atomic file writes
    {"<root>", "s3", "fastpath", "journal", "serving", "stats", "telemetry", "link", "models", "pids", "fanout", "egress", "cgroups"},  # wire formats, leaves; egress: requests sent for a user; cgroups: the one cgroup manager
    {"auth", "placement", "hw", "dataservices", "memory"},  # credentials, the placement rule, hardware models, Arrow data services, memory tiers
    {"spec", "replication", "econ"},  # deployment specs, replica convergence, cost-benefit and availability models
    {"node"},  # a storage/compute node: object store, worker pools
    {"runtime"},  # what runs inside a worker
    {"apps"},  # the eight applications
    {"gateway", "twin"},  # the live control plane, and its simulated twin (which must not import it)
    {"present"},  # tables and reports shared by the CLI and the jobs
    {"cluster"},  # launching a local cluster
    {"client"},  # talking to a running cluster
    {"jobs", "bench"},  # the demo and app runs; benchmark drivers
    {"cli"},  # the command line, on top of everything
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    if len(rel.parts) == 1:
        return "<root>" if rel.stem == "__init__" else rel.stem
    return rel.parts[0]


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "nearfaas":
            parts = node.module.split(".")
            if len(parts) == 1:  # from nearfaas import atomic: the module named, not the package root
                for alias in node.names:
                    yield node.lineno, alias.name if (SRC / f"{alias.name}.py").exists() or (SRC / alias.name).is_dir() else "<root>"
                continue
            yield node.lineno, parts[1]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "nearfaas":
                    yield node.lineno, parts[1] if len(parts) > 1 else "<root>"


def _edges():
    for path in sorted(SRC.rglob("*.py")):
        me = _package(path)
        for line, target in _imports(path):
            if target != me:
                yield path.relative_to(SRC.parent), line, me, target


def test_every_package_is_in_a_layer():
    packages = {_package(p) for p in SRC.rglob("*.py")}
    assert packages <= set(LAYER_OF), f"put these in a layer of tests/unit/test_layers.py: {sorted(packages - set(LAYER_OF))}"


def test_imports_only_point_down():
    upward = [f"{path}:{line}: {me} (layer {LAYER_OF[me]}) imports {target} (layer {LAYER_OF[target]})"
              for path, line, me, target in _edges()
              if me in LAYER_OF and target in LAYER_OF and LAYER_OF[target] >= LAYER_OF[me]]
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


@pytest.mark.parametrize("upward", ["from nearfaas.gateway.invoker import Invoker\n", "import nearfaas.cli\n"])
def test_the_check_catches_an_upward_import(tmp_path, monkeypatch, upward):
    """The test itself can fail: a node module importing the gateway (or anything importing the
    CLI) is reported."""
    fake = tmp_path / "nearfaas"
    (fake / "node").mkdir(parents=True)
    (fake / "node" / "bad.py").write_text(upward)
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    with pytest.raises(AssertionError, match="node/bad.py:1: node"):
        test_imports_only_point_down()
