"""The native GAP-style graph kernels (native/graphs/gapk.c) against the Python function case
(nearfaas.bench.memory_workloads, scipy) on the same small R-MAT graph: PageRank's scores equal
the scipy power iteration's, BFS's parents form a breadth-first tree of exactly the vertices
scipy reaches; bad input is refused with a message that names the flag."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, shortest_path

from nearfaas.bench.memory_workloads import rmat_graph

ROOT = Path(__file__).resolve().parents[2]
GAPK = ROOT / "native" / "graphs" / "build" / "gapk"


@pytest.fixture(scope="module")
def gapk() -> Path:
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler: the native graph kernels are not built (make setup says so too)")
    subprocess.run(["make", "-s", "-C", str(ROOT / "native" / "graphs")], check=True)
    return GAPK


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """The Python case's R-MAT graph at scale 10, and its edges (duplicates repeated) as gapk reads them."""
    g = rmat_graph(10)
    coo = g.tocoo()
    reps = coo.data.astype(np.int64)  # a duplicate edge is summed into its weight by scipy: repeat it
    pairs = np.stack([np.repeat(coo.row, reps), np.repeat(coo.col, reps)], axis=1).astype(np.int64)
    path = tmp_path_factory.mktemp("graph") / "edges.bin"
    path.write_bytes(pairs.tobytes())
    return g, path


def _run(gapk: Path, *args: str) -> tuple[list[str], dict]:
    out = subprocess.run([str(gapk), *args], capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.strip().splitlines()
    return lines[:-1], json.loads(lines[-1])


def test_pagerank_scores_equal_the_scipy_power_iteration(gapk, graph):
    # catches: pushing along the wrong direction, a lost duplicate edge, a dangling vertex's rank
    # handled otherwise than the scipy version (or a kernel that is not PageRank at all)
    g, edges = graph
    n = g.shape[0]
    lines, rec = _run(gapk, "pagerank", "--edges", str(edges), "--vertices", str(n), "--iters", "20", "--print")
    ours = np.array([float(x) for x in lines])
    out_deg = np.maximum(np.asarray(g.sum(axis=1)).ravel(), 1.0)
    gt = g.T.tocsr()
    x = np.full(n, 1.0 / n)
    for _ in range(20):
        x = 0.85 * (gt @ (x / out_deg)) + 0.15 / n
    assert ours.shape == (n,)
    np.testing.assert_allclose(ours, x, rtol=1e-10, atol=1e-15)
    assert rec["answer"] == pytest.approx(x.sum(), rel=1e-10) and rec["name"] == "native-pagerank"
    assert rec["edges"] == int(g.sum()) and rec["kernel_end_ns"] >= rec["kernel_start_ns"] and rec["seconds"] > 0


def test_bfs_parents_are_a_breadth_first_tree_of_what_scipy_reaches(gapk, graph):
    # catches: a parent that is not an in-neighbour, a vertex reached at the wrong depth (not
    # breadth-first), or a reached set that differs from scipy's
    g, edges = graph
    n = g.shape[0]
    lines, rec = _run(gapk, "bfs", "--edges", str(edges), "--vertices", str(n), "--print")
    parent = np.array([int(x) for x in lines])
    reached = set(np.flatnonzero(parent >= 0).tolist())
    assert reached == set(breadth_first_order(g, 0, directed=True, return_predecessors=False).tolist())
    assert rec["answer"] == len(reached) > 1 and parent[0] == 0
    depth = shortest_path(g, directed=True, unweighted=True, indices=0)
    adj = sp.csr_matrix(g)
    for v in reached - {0}:
        p = parent[v]
        assert adj[p, v] != 0, f"parent {p} of {v} is not an in-neighbour"
        assert depth[v] == depth[p] + 1


def test_generated_graphs_are_deterministic_and_sized_as_asked(gapk):
    # catches: a seed that does not fix the graph, or an edge count other than F x 2^S
    a = _run(gapk, "pagerank", "--scale", "10", "--edge-factor", "8", "--iters", "3")[1]
    b = _run(gapk, "pagerank", "--scale", "10", "--edge-factor", "8", "--iters", "3")[1]
    c = _run(gapk, "pagerank", "--scale", "10", "--edge-factor", "8", "--iters", "3", "--seed", "2")[1]
    assert a["answer"] == b["answer"] != c["answer"]
    assert a["vertices"] == 1024 and a["edges"] == 8 * 1024
    assert a["input_bytes"] == 2 * (1025 * 8 + 8 * 1024 * 4)  # both directions: offsets and neighbours
    setup = _run(gapk, "bfs", "--scale", "10", "--setup-only")[1]
    assert setup["setup_only"] is True and setup["seconds"] == 0 and setup["answer"] == 0


@pytest.mark.parametrize("args, says", [
    (["--scale", "31"], "--scale 31: give an integer from 4 to 30"),
    (["--edges", "/nonexistent/edges.bin", "--vertices", "4"], "cannot open --edges"),
    (["--edges", "x"], "--edges needs --vertices"),
    (["--iters", "ten"], "--iters ten"),
])
def test_bad_arguments_are_refused_with_the_flag_named(gapk, args, says):
    # catches: a bad flag run anyway (a default silently used) or refused without saying which
    out = subprocess.run([str(gapk), "pagerank", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and says in out.stderr and out.stdout == ""


def test_an_edge_file_of_the_wrong_size_or_range_is_refused(gapk, tmp_path):
    # catches: a truncated file read as a shorter graph, or an id outside the vertices indexing past an array
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\0" * 24)
    out = subprocess.run([str(gapk), "bfs", "--edges", str(odd), "--vertices", "4"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "multiple of 16 bytes" in out.stderr
    far = tmp_path / "far.bin"
    far.write_bytes(np.array([[0, 1], [2, 9]], dtype=np.int64).tobytes())
    out = subprocess.run([str(gapk), "bfs", "--edges", str(far), "--vertices", "4"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "outside --vertices 4" in out.stderr
