"""Azure Functions 2019 traces in the twin (issue 21, item 5): both layouts of the invocation,
duration and memory files (fixtures written here), durations and memory driving the simulator,
--minutes, the offered-load warning and --size-rack auto, and `twin report --json`'s
simulation block."""

from __future__ import annotations

import json
import math
import random

import pytest
from click.testing import CliRunner

from nearfaas.cli import main
from nearfaas.twin import rackload, report
from nearfaas.twin.sim import (
    App,
    Function,
    Percentiles,
    SimConfig,
    Simulator,
    WorkloadError,
    azure_replay,
    load_azure_trace,
    read_azure_durations,
    read_azure_invocations,
    read_azure_memory,
)
from nearfaas.twin.sim.azure import companion, sibling

DUR_PCTS = (0, 1, 25, 50, 75, 99, 100)
MEM_PCTS = (1, 5, 25, 50, 75, 95, 99, 100)
DUR_SHAPE = (0.1, 0.2, 0.6, 1.0, 1.5, 4.0, 6.0)  # x the median: a skewed duration distribution
MEM_SHAPE = (0.5, 0.6, 0.8, 1.0, 1.2, 1.6, 1.8, 2.0)


def functions(n: int = 4) -> list[tuple[str, str, str]]:
    return [(f"owner{i % 2}", f"app{i % 3}", f"func{i}") for i in range(n)]


def write_invocations(path, fns, counts, layout: str = "dataset"):
    """``counts[i]``: function i's calls per minute. dataset: HashOwner,HashApp,HashFunction,Trigger,1..N;
    toolkit: HashFunction,HashApp,HashOwner,1..N (no Trigger)."""
    minutes = ",".join(str(m + 1) for m in range(len(counts[0])))
    lines = []
    if layout == "dataset":
        lines.append(f"HashOwner,HashApp,HashFunction,Trigger,{minutes}")
        lines += [f"{o},{a},{f},http," + ",".join(map(str, c)) for (o, a, f), c in zip(fns, counts, strict=True)]
    else:
        lines.append(f"HashFunction,HashApp,HashOwner,{minutes}")
        lines += [f"{f},{a},{o}," + ",".join(map(str, c)) for (o, a, f), c in zip(fns, counts, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_durations(path, fns, median_ms, layout: str = "dataset"):
    """Durations (ms) with percentiles ``median_ms[i] x DUR_SHAPE``. dataset: the published
    columns; toolkit: ids reordered, no Count/Minimum/Maximum."""
    pct = ",".join(f"percentile_Average_{p}" for p in DUR_PCTS)
    lines = []
    for (o, a, f), med in zip(fns, median_ms, strict=True):
        vals = [med * k for k in DUR_SHAPE]
        cells = ",".join(f"{v:g}" for v in vals)
        if layout == "dataset":
            lines.append(f"{o},{a},{f},{med * 1.1:g},100,{vals[0]:g},{vals[-1]:g},{cells}")
        else:
            lines.append(f"{f},{o},{a},{med * 1.1:g},{cells}")
    head = ("HashOwner,HashApp,HashFunction,Average,Count,Minimum,Maximum," if layout == "dataset"
            else "HashFunction,HashOwner,HashApp,Average,") + pct
    path.write_text(head + "\n" + "\n".join(lines) + "\n")
    return path


def write_memory(path, fns, median_mb, layout: str = "dataset"):
    """Memory (MB) with percentiles ``median_mb[app] x MEM_SHAPE``. dataset: per app, the
    published columns; toolkit: per function (HashFunction first), no SampleCount."""
    pct = ",".join(f"AverageAllocatedMb_pct{p}" for p in MEM_PCTS)
    lines = []
    if layout == "dataset":
        apps = sorted({(o, a) for o, a, _ in fns})
        for o, a in apps:
            med = median_mb[a]
            lines.append(f"{o},{a},720,{med:g}," + ",".join(f"{med * k:g}" for k in MEM_SHAPE))
        head = "HashOwner,HashApp,SampleCount,AverageAllocatedMb," + pct
    else:
        for o, a, f in fns:
            med = median_mb[a]
            lines.append(f"{f},{a},{o}," + ",".join(f"{med * k:g}" for k in MEM_SHAPE))
        head = "HashFunction,HashApp,HashOwner," + pct
    path.write_text(head + "\n" + "\n".join(lines) + "\n")
    return path


def counts_for(n_fns: int, minutes: int, seed: int = 3, top: int = 20) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(0, top) for _ in range(minutes)] for _ in range(n_fns)]


# -- layouts --------------------------------------------------------------------------------------

def test_both_invocation_layouts_read_the_same(tmp_path):
    fns, counts = functions(5), counts_for(5, 7)
    a = read_azure_invocations(write_invocations(tmp_path / "a.csv", fns, counts, "dataset"))
    b = read_azure_invocations(write_invocations(tmp_path / "b.csv", fns, counts, "toolkit"))
    assert [(r.owner, r.app, r.function, r.counts) for r in a] == [(r.owner, r.app, r.function, r.counts) for r in b]
    assert [r.trigger for r in a] == ["http"] * 5 and [r.trigger for r in b] == [""] * 5
    # the same functions map to the same apps: the same arrivals, call for call
    assert list(azure_replay(tmp_path / "a.csv", seed=4)) == list(azure_replay(tmp_path / "b.csv", seed=4))
    assert len(list(azure_replay(tmp_path / "b.csv", seed=4))) == sum(map(sum, counts))


def test_extra_columns_are_ignored_and_listed(tmp_path):
    p = tmp_path / "inv.csv"
    p.write_text(",HashApp,Trigger,HashOwner,Region,HashFunction,1,2\n0,a,http,o,west,f,3,4\n")  # a pandas index column, a region
    tr = load_azure_trace(p)
    assert [f.counts for f in tr.functions] == [[3, 4]] and tr.info["ignored_columns"] == ["", "Region"]
    assert "by column name" in tr.info["layout"]


def test_both_duration_and_memory_layouts_read_the_same(tmp_path):
    fns = functions(4)
    med_ms, med_mb = [100, 250, 40, 3000], {"app0": 128, "app1": 300, "app2": 90}
    da = read_azure_durations(write_durations(tmp_path / "da.csv", fns, med_ms, "dataset"))
    db = read_azure_durations(write_durations(tmp_path / "db.csv", fns, med_ms, "toolkit"))
    ma = read_azure_memory(write_memory(tmp_path / "ma.csv", fns, med_mb, "dataset"))
    mb = read_azure_memory(write_memory(tmp_path / "mb.csv", fns, med_mb, "toolkit"))
    assert da.id_columns == db.id_columns == ("HashOwner", "HashApp", "HashFunction")
    assert ma.id_columns == ("HashOwner", "HashApp") and mb.id_columns == ("HashOwner", "HashApp", "HashFunction")
    for o, a, f in fns:
        x, y = da.lookup(o, a, f), db.lookup(o, a, f)
        assert x.dist == y.dist and x.count == 100 and y.count is None and y.minimum_ms is None
        assert ma.lookup(o, a, f).dist == mb.lookup(o, a, f).dist
    assert read_azure_durations(tmp_path / "da.csv")[("owner0", "app0", "func0")].percentiles_ms["percentile_Average_50"] == 100


def test_the_trace_uses_durations_and_memory_in_either_layout(tmp_path):
    fns, counts = functions(4), counts_for(4, 5)
    med_ms, med_mb = [100, 250, 40, 3000], {"app0": 128, "app1": 300, "app2": 90}
    replays = []
    for lay in ("dataset", "toolkit"):
        inv = write_invocations(tmp_path / f"i-{lay}.csv", fns, counts, lay)
        dur = write_durations(tmp_path / f"d-{lay}.csv", fns, med_ms, lay)
        mem = write_memory(tmp_path / f"m-{lay}.csv", fns, med_mb, lay)
        tr = load_azure_trace(inv, dur, mem)
        assert [f.duration_ms.mean for f in tr.functions] == pytest.approx([Percentiles.of(dict(zip(DUR_PCTS, [m * k for k in DUR_SHAPE],
                                                                                                    strict=True))).mean for m in med_ms])
        replays.append(list(tr.replay(seed=2)))
    assert replays[0] == replays[1]
    calls = replays[0]
    assert len(calls) == sum(map(sum, counts)) and all(len(c) == 3 for c in calls)
    svc = [c[2][0] for c in calls]
    mem = [c[2][1] for c in calls]
    assert min(svc) >= 0.1 * 40 / 1e3 and max(svc) <= 6 * 3000 / 1e3  # within the published min..max, seconds
    assert min(mem) >= 0.5 * 90 and max(mem) <= 2 * 300
    assert replays[0] != list(load_azure_trace(tmp_path / "i-dataset.csv", tmp_path / "d-dataset.csv", tmp_path / "m-dataset.csv")
                              .replay(seed=3))


def test_percentiles_are_sampled_by_inverse_cdf():
    p = Percentiles.of({0: 10.0, 25: 20.0, 50: 40.0, 100: 100.0})
    assert p.sample(0.0) == 10.0 and p.sample(0.25) == 20.0 and p.sample(0.375) == 30.0 and p.sample(1.0) == 100.0
    assert p.mean == pytest.approx(0.25 * 15 + 0.25 * 30 + 0.5 * 70)
    rng = random.Random(1)
    draws = sorted(p.sample(rng.random()) for _ in range(20000))
    assert draws[len(draws) // 2] == pytest.approx(40.0, rel=0.03) and draws[len(draws) // 4] == pytest.approx(20.0, rel=0.03)
    assert sum(draws) / len(draws) == pytest.approx(p.mean, rel=0.02)
    flat = Percentiles.of({1: 5.0, 99: 7.0})  # no 0th/100th: flat beyond, not extrapolated
    assert flat.sample(0.0) == 5.0 and flat.sample(1.0) == 7.0
    assert Percentiles.of({0: 5.0, 50: 4.0, 100: 6.0}).v == (5.0, 5.0, 6.0)  # made non-decreasing


# -- malformed files: file, line, column, and the fix ---------------------------------------------

@pytest.mark.parametrize("text, where", [
    ("HashFunction,HashApp,HashOwner,1,2\nf,a,o,3,x\n", "line 2, column 5 (2): invocation count 'x' is not an integer"),
    ("HashFunction,HashApp,HashOwner,1,2\nf,a,o,3,-4\n", "line 2, column 5 (2): negative invocation count -4"),
    ("HashFunction,HashApp,HashOwner,1,2\nf,a,o,3\n", "line 2, column 5 (2): missing column"),
    ("HashFunction,HashApp,HashOwner,1,2\n,a,o,3,1\n", "line 2, column 1 (HashFunction): empty HashFunction"),
    ("HashFunction,HashOwner,1,2\nf,o,3,1\n", "line 1: missing column 'HashApp' (the header has: HashFunction, HashOwner, 1, 2)"),
    ("HashFunction,HashApp,HashOwner,2,3\nf,a,o,3,1\n", "line 1, column 4 (2): expected minute column '1', got '2'"),
    ("HashFunction,HashApp,HashOwner,Trigger\nf,a,o,http\n", "line 1: no minute columns"),
    ("HashFunction,HashApp,HashApp,HashOwner,1\nf,a,a,o,1\n", "line 1, column 3 (HashApp): duplicate column (also column 2)"),
    ("", "line 1: empty file"),
    ('HashFunction,HashApp,HashOwner,1\n"f,a,o,1\n', "line 2, column 2 (HashApp): missing column: 1 fields"),  # an open quote
])
def test_malformed_invocations_name_file_line_and_column(tmp_path, text, where):
    _assert_names_the_place(tmp_path, read_azure_invocations, text, where)


def _assert_names_the_place(tmp_path, reader, text, where):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(WorkloadError) as err:
        reader(p)
    assert str(err.value).startswith(f"{p}: {where}"), str(err.value)


def test_unreadable_files_are_clear_errors(tmp_path):
    gz = tmp_path / "inv.csv"
    gz.write_bytes(b"\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4F\x02\x00!\x01")
    with pytest.raises(WorkloadError, match="not a UTF-8 text CSV file .*extract"):
        read_azure_invocations(gz)
    with pytest.raises(WorkloadError, match="no such file"):
        read_azure_invocations(tmp_path / "nope.csv")
    with pytest.raises(WorkloadError, match="a folder"):
        read_azure_durations(tmp_path)


@pytest.mark.parametrize("reader, text, where", [
    (read_azure_durations, "HashFunction,Average,percentile_Average_50\nf,1,x\n", "line 2, column 3 (percentile_Average_50): 'x' is not a number"),
    (read_azure_durations, "HashFunction,Average\nf,-3\n", "line 2, column 2 (Average): negative value -3"),
    (read_azure_durations, "HashFunction,Average,percentile_Average_50\nf,,\n", "line 2: no duration"),
    (read_azure_durations, "HashApp,HashOwner,Average\na,o,1\n", "line 1: missing column 'HashFunction'"),
    (read_azure_durations, "HashFunction,Count\nf,3\n", "line 1: no value column (Average or percentile_Average_<p>)"),
    (read_azure_memory, "HashOwner,HashApp,AverageAllocatedMb_pct50\no,a,nan\n", "line 2, column 3 (AverageAllocatedMb_pct50): invalid value nan"),
    (read_azure_memory, "HashOwner,SampleCount,AverageAllocatedMb\no,3,100\n", "line 1: missing column 'HashApp'"),
    (read_azure_memory, "HashApp,SampleCount\na,3\n", "line 1: no value column"),
    (read_azure_memory, "HashApp,SampleCount,AverageAllocatedMb\na,1.5,100\n", "line 2, column 2 (SampleCount): '1.5' is not an integer"),
])
def test_malformed_durations_and_memory(tmp_path, reader, text, where):
    _assert_names_the_place(tmp_path, reader, text, where)


def test_same_day_siblings_are_found_and_said(tmp_path):
    inv = write_invocations(tmp_path / "invocations_per_function_md.anon.d03.csv", functions(2), counts_for(2, 2))
    assert sibling(inv, "durations") is None
    dur = write_durations(tmp_path / "function_durations_percentiles.anon.d03.csv", functions(2), [10, 20])
    assert sibling(inv, "durations") == dur and sibling(inv, "memory") is None
    assert companion(inv, "auto", "durations") == (str(dur), f"--durations auto: {dur} (the trace's same-day sibling; --durations none ignores it)")
    path, note = companion(inv, "none", "durations")
    assert path is None and "is beside the trace but not used" in note
    assert companion(inv, "auto", "memory")[0] is None and "no same-day memory file" in companion(inv, "auto", "memory")[1]
    kit = write_invocations(tmp_path / "invocations.csv", functions(2), counts_for(2, 2), "toolkit")
    mem = write_memory(tmp_path / "memory.csv", functions(2), {"app0": 100, "app1": 200}, "toolkit")
    assert sibling(kit, "memory") == mem


# -- durations and memory drive the simulator ----------------------------------------------------

ONE = {"a": App("a", (Function("f"),))}


def _one_app_trace(tmp_path, median_ms, median_mb=None, minutes=10, rate=30):
    fns = [("o", "x", "f0")]
    inv = write_invocations(tmp_path / "inv.csv", fns, [[rate] * minutes])
    dur = write_durations(tmp_path / f"dur-{median_ms}.csv", fns, [median_ms])
    mem = write_memory(tmp_path / f"mem-{median_mb}.csv", fns, {"x": median_mb}) if median_mb else None
    return load_azure_trace(inv, dur, mem, apps=("a",))


def test_longer_durations_give_higher_latency_percentiles(tmp_path):
    cfg = SimConfig(storage_nodes=0, compute_nodes=1, compute_slots=4, apps=ONE, policy="compute-only", keep_alive_s=math.inf,
                    default_service=("det", 0.05), seed=1)
    lat = []
    for med in (200, 800, 3000):  # ms; utilisation 30 calls/min x 1.1 x med < 4 slots up to 3000 ms... then queueing
        r = Simulator(cfg).run(_one_app_trace(tmp_path, med).replay(seed=1))
        assert r.completed == r.arrivals == 300
        lat.append(r.latency)
    for k in ("p50", "p95", "p99"):
        assert lat[0][k] < lat[1][k] < lat[2][k], (k, lat)
    # the draws are the published distribution's: p50 of the lightly loaded run ~ the median
    assert lat[0]["p50"] == pytest.approx(0.2, rel=0.15)


def test_bigger_memory_footprints_never_reject_fewer(tmp_path):
    rejected = []
    for med_mb in (50, 150, 300, 600, 1200):
        cfg = SimConfig(storage_nodes=0, compute_nodes=2, compute_slots=4, apps=ONE, policy="compute-only", keep_alive_s=math.inf,
                        compute_memory_mb=1000.0, queue_depth=15, seed=1)
        r = Simulator(cfg).run(_one_app_trace(tmp_path, 1500, med_mb, rate=200).replay(seed=1))
        assert r.memory["peak_node_used_mb"] <= 1000.0 + 1e-9 and r.completed + r.rejected == r.arrivals
        rejected.append(r.rejected)
    assert rejected == sorted(rejected) and rejected[-1] > rejected[0], rejected
    # footprints above a node's memory can never run there: all rejected, and said so
    r = Simulator(SimConfig(storage_nodes=0, compute_nodes=1, apps=ONE, policy="compute-only", compute_memory_mb=100.0)).run(
        _one_app_trace(tmp_path, 100, 400, minutes=1).replay(seed=1))
    assert r.completed == 0 and r.memory["rejected_over_node_memory"] == r.rejected == r.arrivals


def test_a_call_duration_is_split_over_the_chain_as_the_model_splits_it():
    apps = {"c": App("c", (Function("p", "dscs"), Function("q", None, "compute")))}
    cfg = SimConfig(storage_nodes=1, compute_nodes=1, apps=apps, policy="near-data", keep_alive_s=math.inf,
                    services={("p", "cpu"): 3.0, ("p", "dscs"): 0.5, ("q", "cpu"): 1.0})
    sim = Simulator(cfg)
    assert sim.shares["c"] == ({"dscs": 0.125, "cpu": 0.75}, {"dscs": 0.25, "cpu": 0.25})
    r = sim.run([(0.0, "c", (8.0, None))])  # 8 s on a CPU: 1 s on the accelerator + 2 s of q on a CPU
    assert r.latency["mean"] == pytest.approx(3.0)


# -- --minutes, the offered-load warning and --size-rack auto (report.simulate) ------------------

@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    """One function, 1,000 calls a minute for 20 minutes, ~2.2 s each: far more than a 2-node rack."""
    d = tmp_path_factory.mktemp("heavy")
    fns = [("o", "x", "f0")]
    inv = write_invocations(d / "invocations_per_function_md.anon.d01.csv", fns, [[1000] * 20])
    write_durations(d / "function_durations_percentiles.anon.d01.csv", fns, [2000])
    write_memory(d / "app_memory_percentiles.anon.d01.csv", fns, {"x": 200})
    return inv


def test_minutes_limits_the_arrivals(heavy):
    tr = report.load_trace(heavy, "auto", "auto", minutes=3)
    calls = list(tr.replay(seed=1))
    assert len(calls) == 3000 and max(c[0] for c in calls) < 180.0
    sim = report.simulate(2, policies=("near-data",), trace=heavy, durations="auto", memory="auto", minutes=2)
    assert sim["summary"]["near-data"]["requests"] == 2000 and sim["inputs"]["trace"]["minutes_replayed"] == 2
    assert report.simulate(2, policies=("near-data",), minutes=1, rate=2.0)["inputs"]["trace"]["duration_s"] == 60.0  # Poisson too


def test_undersized_rack_warns_and_auto_sizing_rejects_fewer(heavy):
    fixed = report.simulate(2, trace=heavy, durations="auto", memory="auto")
    auto = report.simulate(2, trace=heavy, durations="auto", memory="auto", size_rack="auto")
    w = [x for x in fixed["warnings"] if "under compute-only" in x]
    assert w and "the offered load exceeds the simulated rack" in w[0] and "compute CPU slots busy" in w[0]
    need = fixed["load"]["by_policy"]["compute-only"]["compute_slots"]
    assert need["demand"] > need["capacity"] == 8 and f"vs {need['capacity']:,.0f} (2 compute nodes x 4 slots)" in w[0]
    n = fixed["inputs"]["size_rack"]["nodes_for_the_load"]
    assert f"--nodes {n}" in w[0] and auto["inputs"]["nodes"] == n > 2
    assert auto["warnings"] == [] and any("--size-rack auto" in x for x in auto["notes"])
    assert rackload.fits(auto["load"]["by_policy"])  # <= 70% mean, <= 100% busiest minute, every resource
    for policy in report.SIM_POLICIES:
        f, a = fixed["summary"][policy], auto["summary"][policy]
        assert a["label"] == f["label"] == "modelled" and a["requests"] == f["requests"] == 20000
        assert a["rejected"] <= f["rejected"] and a["latency_s"]["p95"] < f["latency_s"]["p95"]
    assert fixed["summary"]["compute-only"]["rejected"] > 0 == auto["summary"]["compute-only"]["rejected"]
    assert fixed["summary"]["compute-only"]["rejected_share"] == fixed["summary"]["compute-only"]["rejected"] / 20000
    assert fixed["inputs"]["node_memory_mb"]["dscs_storage"] == 4000.0 and fixed["summary"]["near-data"]["memory"]["calls_with_footprint"] > 0


def test_durations_from_the_file_take_precedence_over_the_model(tmp_path):
    fns = [("o", "x", "f0")]
    inv = write_invocations(tmp_path / "inv.csv", fns, [[60] * 3])
    runs = {}
    for med in (None, 50, 500):
        dur = write_durations(tmp_path / f"d{med}.csv", fns, [med]) if med else None
        runs[med] = report.simulate(4, policies=("compute-only",), trace=inv, durations=dur)["summary"]["compute-only"]["latency_s"]
    assert runs[50]["p50"] < runs[500]["p50"] and runs[None] != runs[50]
    assert runs[500]["p50"] > 0.4  # a 500 ms median call takes about that on a CPU


# -- the command line ----------------------------------------------------------------------------

def test_cli_report_json_has_the_simulation_block_and_the_warning(heavy, tmp_path):
    # two platforms and one app: the simulation block is what this checks, not the headline's breadth
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--apps", "credit_risk", "--platforms", "cpu,dscs", "--nodes", "2",
                                    "--trace", str(heavy), "--minutes", "3", "--json", "--no-progress", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    sim = out["simulation"]
    assert "modelled" in sim["label"] and sim["trace"]["minutes_replayed"] == 3 and sim["trace"]["calls"] == 3000
    assert set(sim["policies"]) == {"near-data", "compute-only"}
    for r in sim["policies"].values():
        assert r["label"] == "modelled" and r["requests"] == 3000
        assert set(r["latency_ms"]) == {"p50", "p95", "p99"} and r["latency_ms"]["p50"] <= r["latency_ms"]["p95"] <= r["latency_ms"]["p99"]
        assert r["rejected"] >= 0 and r["rejected_share"] == r["rejected"] / r["requests"]
    assert out["warnings"] == sim["warnings"] and sim["warnings"]
    assert "warning: the offered load exceeds the simulated rack" in res.stderr and "Traceback" not in res.output
    assert sim["trace"]["durations"].endswith("function_durations_percentiles.anon.d01.csv") and "--durations auto" in res.stderr


@pytest.mark.parametrize("args, needle", [
    (["--durations", "d.csv"], "--durations and --memory files go with an Azure trace"),
    (["--size-rack", "auto", "--nodes", "4"], "--size-rack auto picks the number of nodes itself"),
    (["--minutes", "0"], "--minutes"),
    (["--trace", "{bad}"], "line 2, column 4 (1): invocation count 'one' is not an integer"),
    (["--trace", "{good}", "--durations", "{bad}"], "bad.csv: line 1: no value column (Average or percentile_Average_<p>)"),
    (["--trace", "{good}", "--memory", "{missing}"], "no such file"),
])
def test_cli_bad_trace_input_is_a_clear_error(tmp_path, args, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text("HashFunction,HashApp,HashOwner,1\nf,a,o,one\n")
    good = write_invocations(tmp_path / "good.csv", functions(1), [[1]])
    args = [a.format(bad=bad, good=good, missing=tmp_path / "missing.csv") for a in args]
    res = CliRunner().invoke(main, ["twin", "report", "--quick", "--no-progress", "--out", str(tmp_path / "r"), *args])
    assert res.exit_code != 0 and needle in res.output and "Traceback" not in res.output, res.output


def test_the_invitro_sample_layout_reads_with_its_siblings(tmp_path):
    # catches: minute_N columns refused ("no minute columns"), or <name>_run.csv / _mem.csv not
    # found beside <name>_inv.csv
    inv = tmp_path / "sample_inv.csv"
    inv.write_text("HashFunction,HashApp,HashOwner,minute_1,minute_2,minute_3\nf0,app0,o0,3,0,5\nf1,app1,o1,1,2,0\n")
    rows = read_azure_invocations(inv)
    assert [(r.function, r.counts) for r in rows] == [("f0", [3, 0, 5]), ("f1", [1, 2, 0])]
    assert len(list(azure_replay(inv, seed=1))) == 11
    dur = write_durations(tmp_path / "sample_run.csv", [("o0", "app0", "f0"), ("o1", "app1", "f1")], [10, 20])
    mem = write_memory(tmp_path / "sample_mem.csv", [("o0", "app0", "f0"), ("o1", "app1", "f1")], {"app0": 100, "app1": 200})
    assert sibling(inv, "durations") == dur and sibling(inv, "memory") == mem
    bad = tmp_path / "bad_inv.csv"
    bad.write_text("HashFunction,HashApp,HashOwner,minute_1,minute_3\nf0,app0,o0,3,5\n")
    with pytest.raises(WorkloadError, match="expected minute column '2', got 'minute_3'"):
        read_azure_invocations(bad)
