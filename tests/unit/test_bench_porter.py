"""The Porter benchmark's library (bench/porter.py) on one tiny workload: every variant is timed,
the trace is cut to the kernel, every policy is priced at every delta within the cap, the
calibration check can fail, and cachegrind's summary is parsed. The real run is
``python benchmarks/porter.py``."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest

from nearfaas.bench import porter
from nearfaas.memory import shim, tiersim

pytestmark = pytest.mark.skipif(not (shim.NATIVE / "build" / shim.LIBRARY).is_file(),
                                reason="the memory shim is not built here (make setup builds it with a C compiler)")


def test_one_workload_measured_traced_and_priced(tmp_path):
    rec = porter.measure("html", 0.2, repeats=1, sample_ms=2, folder=tmp_path)
    assert set(rec["times_s"]) == {"plain", "shim", "sampled"} and all(len(v) == 1 for v in rec["times_s"].values())
    assert rec["median_s"]["plain"] > 0 and rec["_window"][0] < rec["_window"][1]
    rec["fast_ns"] = 100.0
    tiers = porter.simulate(rec, 2, 0.5, bound=0.6)
    assert tiers["sampled_pages"] > 0 and tiers["epochs"] >= 1
    trace, footprint = porter.kernel_trace(rec, 2)
    assert footprint >= len(trace.owner) > 0  # the sample is part of the footprint
    heat = porter.heat_map(trace, rows=8)
    assert len(heat["rows"]) <= 8 and all(len(row) == heat["epochs"] for row in heat["rows"])
    assert sum(map(sum, heat["rows"])) == sum(len(e) for e in trace.epochs)  # every access binned once
    for delta in porter.DELTAS_NS:
        cells = tiers["by_delta"][str(delta)]
        assert set(cells) == set(tiersim.POLICIES)
        assert cells["all-dram"]["slowdown"] == pytest.approx(0.0)
        assert all(0 <= c["slow_tier_bytes_share"] <= 1 for c in cells.values())
        assert cells["oracle"]["slowdown"] <= cells["all-cxl"]["slowdown"] + 1e-12
    rec = {k: v for k, v in rec.items() if not k.startswith("_")}
    json.dumps(rec | {"tiers": tiers})  # plain JSON


def test_summary_targets_and_the_cachegrind_parser():
    res = [{"shim_overhead_pct": 2.0, "sampler_overhead_pct": 12.0}]
    cal = {"checks": [{"within_target": True}, {"within_target": False}]}
    s = porter.summary(res, cal)
    assert s["targets_met"] == {"shim_overhead_pct": True, "sampler_overhead_pct": False, "calibration": False}
    text = "==1== LLd misses:        362,982  (     78,873 rd   +    284,109 wr)\n"
    assert porter._ll_data_misses(text) == 362982
    with pytest.raises(ValueError, match="LLd"):
        porter._ll_data_misses("nothing here")


def _cells(cxl, porter_s, oracle, share):
    cell = lambda slow, bytes_: {"slowdown": slow, "slow_tier_bytes_share": bytes_}  # noqa: E731
    return {"tiers": {"by_delta": {"70": {p: cell(cxl, 1.0) for p in tiersim.POLICIES}
                                   | {"all-dram": cell(0.0, 0.0), "porter": cell(porter_s, share), "oracle": cell(oracle, 0.5)}}}}


def test_policy_targets_follow_the_issue():
    met = porter.policy_targets([{"name": "bfs"} | _cells(0.20, 0.08, 0.05, 0.5), {"name": "pagerank"} | _cells(0.10, 0.04, 0.0, 0.45)])
    assert met["graph_workloads"]["bfs"]["cut_pct"] == pytest.approx(60.0) and met["graph_workloads"]["bfs"]["met"]
    assert met["policy_targets_met"] == {"porter_on_graphs": True, "half_save_40pct_at_5pct": True}
    far = porter.policy_targets([{"name": "bfs"} | _cells(0.20, 0.12, 0.01, 0.3)])  # cut 40%, 11 points off the oracle
    assert not far["graph_workloads"]["bfs"]["met"] and not far["policy_targets_met"]["porter_on_graphs"]
    assert not far["slow_tier_savers"]["bfs"]["met"]  # nothing short of the oracle under 5% slowdown


SYSFS_NODE = "/sys/devices/system/node"


def _with_sysfs(monkeypatch, root):
    """numa_nodes() reading ``root`` in place of /sys/devices/system/node (only that path moves)."""
    real = os.listdir
    fake = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    fake.listdir = lambda path=".": real(str(root) if str(path).rstrip("/") == SYSFS_NODE else path)
    monkeypatch.setattr(porter, "os", fake)


def _fake_sysfs(root, nodes):
    """A /sys/devices/system/node as Linux lays it out (one nodeN folder per online node, and the
    online/possible/has_* masks and power/ beside them), plus two look-alikes that are not nodes."""
    root.mkdir()
    for n in nodes:
        (root / f"node{n}").mkdir()
        (root / f"node{n}" / "cpulist").write_text("0\n")
    for f in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory", "uevent"):
        (root / f).write_text(",".join(map(str, nodes)) + "\n")
    (root / "power").mkdir()
    (root / "nodex").mkdir()  # not node<digits>
    (root / "node").mkdir()  # no number


@pytest.mark.parametrize("nodes", [[0], [0, 1], [0, 1, 2, 3], [0, 2, 5]])
def test_numa_nodes_counts_the_node_folders_of_sysfs(tmp_path, monkeypatch, nodes):
    _fake_sysfs(tmp_path / "node", nodes)
    _with_sysfs(monkeypatch, tmp_path / "node")
    assert porter.numa_nodes() == len(nodes)


def test_numa_nodes_without_sysfs_is_one(tmp_path, monkeypatch):
    _with_sysfs(monkeypatch, tmp_path / "absent")  # a kernel without NUMA support has no such folder
    assert porter.numa_nodes() == 1


def _online(text: str) -> int:
    """How many nodes the kernel's cpulist-format ``online`` mask names ("0", "0-3", "0,2-3")."""
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def test_numa_nodes_on_this_machine_is_the_kernels_online_mask():
    """The real sysfs, read a second way: the kernel's own mask of online nodes (a different file
    and format from the nodeN folders numa_nodes() counts)."""
    online = Path(SYSFS_NODE) / "online"
    if not online.is_file():
        pytest.skip("no /sys/devices/system/node/online here")
    assert _online("0") == 1 and _online("0-3") == 4 and _online("0,2-3") == 3
    assert porter.numa_nodes() == _online(online.read_text())


def test_the_latency_curve_interpolates_in_log_size_and_clamps():
    curve = {"64": 170.0, "256": 200.0, "1024": 330.0}
    assert porter.fast_ns(curve, 256 << 20) == pytest.approx(200.0)
    assert porter.fast_ns(curve, 512 << 20) == pytest.approx(265.0)  # halfway in log2 between 256 and 1024
    assert porter.fast_ns(curve, 1 << 20) == 170.0 and porter.fast_ns(curve, 1 << 40) == 330.0
    xs = [porter.fast_ns(curve, 2 ** k) for k in range(20, 34)]
    assert xs == sorted(xs)  # a monotone curve stays monotone


def test_colocation_rows_follow_the_measured_traffic():
    def rec(name, bound, misses, secs=1.0):
        return {"name": name, "boundness": {"boundness": bound, "ll_data_misses": misses}, "median_s": {"plain": secs},
                "fast_ns": 200.0}

    results = [rec("pagerank", 0.2, 50_000_000), rec("linpack", 0.8, 100_000_000), rec("html", 0.1, 0)]
    out = porter.colocate_all(results, {"triad_gb_per_s": 13.9})
    table = out["by_ratio"]["0.5"]
    assert set(table) == {"pagerank", "linpack"}  # html has no measured misses: no row
    assert table["pagerank"]["demand_gbps"] == pytest.approx(3.2)  # 50 M lines x 64 B in 1 s
    assert set(table["pagerank"]["with"]) == {"self", "linpack", "pagerank"}
    for row in table.values():
        for cell in row["with"].values():
            assert cell["slow"] >= cell["dram"] >= 0  # Figure 7's shape: a neighbour hurts more on the slow tier
    assert table["pagerank"]["with"]["linpack"]["dram"] > table["pagerank"]["with"]["self"]["dram"]  # more traffic, more harm
    slower = porter.colocate_all(results, {"triad_gb_per_s": 13.9})["by_ratio"]["0.25"]
    assert slower["pagerank"]["with"]["self"]["slow"] >= table["pagerank"]["with"]["self"]["slow"]


def test_every_dscs_app_is_a_memory_workload():
    from nearfaas.bench import memory_workloads as workloads

    assert len(workloads.DSCS_APPS) == 8 and all(f"dscs-{a}" in workloads.NAMES for a in workloads.DSCS_APPS)
    for app in workloads.DSCS_APPS:
        kernel, input_bytes = workloads.KERNELS[f"dscs-{app}"](0.0001)  # one request
        assert kernel() >= 1 and input_bytes > 0, app  # the model answered with at least one output


def test_the_three_figures_are_drawn_from_a_result(tmp_path):
    pytest.importorskip("matplotlib")
    from nearfaas.bench import porter_plots

    cells = {p: {"slowdown": 0.1, "slow_tier_bytes_share": 0.5} for p in tiersim.POLICIES}
    row = {"name": "pagerank", "tiers": {"by_delta": {"70": cells}}, "boundness": {"boundness": 0.3},
           "heat_map": {"rows": [[0, 1], [2, 0]], "pages_per_row": 4}}
    result = {"workloads": [row, dict(row, name="bfs")], "sample_ms": 50,
              "summary": {"colocation": {"by_ratio": {"0.5": {"pagerank": {"with": {"self": {"dram": 0.1, "slow": 0.4}}}}}}}}
    for draw, name in ((porter_plots.slowdowns, "f2.png"), (porter_plots.heat_maps, "f4.png"), (porter_plots.colocation, "f7.png")):
        path = draw(result, tmp_path / name)
        assert path is not None and path.stat().st_size > 1000
    assert porter_plots.slowdowns({"workloads": []}, tmp_path / "none.png") is None  # nothing to draw: no file
