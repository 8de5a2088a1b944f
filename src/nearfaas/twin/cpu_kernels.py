"""Kernel-level micro-benchmarks for the CPU roofline's fourth form, ``runtime2``, and that form.

The first three forms (``nearfaas.twin.cpu_model``) take each op class's efficiency from one-op
ONNX Runtime graphs at a few generic shapes. The first held-out check named five places where
that misses (hypotheses written before this module): GEMV layers (M < 16) below the MatMul grid;
attention's small batched MatMuls and small Softmax/LayerNorm/Transpose below the class shapes;
one-op conv graphs that pay ORT's NCHWc reorders which a conv inside a network does not; and a
one-op reorder rate that overstates a reorder inside a graph. This module measures each of those
directly, on app-free, network-free one-op or chain graphs at shapes fixed here:

* ``gemv``: MatMul [1, K] x [K, N] weight initializer, weights 1 KiB-256 MiB: the weight-streaming rate
  as a function of the working set (a hot loop keeps the whole network's weights in flight, so a
  GEMV layer streams at the rate of the NETWORK's weight bytes, interpolated in log bytes);
* ``bmm``: activation x activation batched MatMul [h, M, K] x [h, K, N] at small attention shapes:
  fraction of peak as a function of the per-matrix FLOPs;
* ``scan``: Softmax / LayerNormalization (rows x cols) and a head-permute Transpose at 256 .. 1 M
  elements: seconds per element as a function of the element count;
* ``conv_chain``: k = 1 and k = CHAIN_K identical convs in a row (the conv micro-benchmark shapes
  and the depthwise one). ORT keeps a chain in NCHWc, so (t_k - t_1) / (k - 1) is one INTERIOR
  conv: the reorders are paid once in both and cancel instead of being subtracted at a rate;
* ``reorder_chain``: k ReorderInput -> ReorderOutput pairs vs 1, the interior reorder rate (used
  only if ORT's own optimised graph keeps the pairs; the record says which);
* ``small_m`` (added after the third held-out set): MatMul [M, K] x [K, N] weight initializer,
  M = 2, 4, 8, 16, weights 1 KiB-64 MiB: seconds per weight byte of a GEMM of a few rows (ONNX Runtime
  packs it as a small GEMM: slower than the GEMV stream), interpolated in log bytes, then log M;
* ``dispatch`` (added then too): the per-node and per-call costs (``host_bench._dispatch``) measured
  in the same round, the call at one and at two inputs (the wrapper checks each), and what an app's
  f2 call path adds around the session (``f2_path_extra_s``; charged only where the measurement
  went through it: ``rt["call_path"] == "f2"``).

Timing as every other micro-benchmark here (``host_bench._time_run``): 1 thread, median thread CPU
time of hot-loop repeats, single ops net of a 1-node 16-element graph with as many graph inputs. None of these shapes comes
from an app or a held-out network; no parameter is chosen from an error.

    kern = measure_kernels(1)                      # ~1 min; JSON-able, cached in cpu_validation.json
    predict_runtime2(bench, 1, model, overhead={**overhead, "kernels": kern}, rt=rt)

Known caveats: the GEMV and small-M rates are interpolated in the network's total weight bytes (no
cache model), and the small-M runs are square: MLAS picks its kernel by shape, so a rectangular
weight of 2-15 rows can run at a rate no square run of its bytes shows (docs/methodology.md, "Still
not captured"); the direct-conv factor is one number (median over three conv shapes) applied to
every plain conv; per-node dispatch is a 16-element Add's, so a node with real set-up work costs
more than it is charged.
"""

from __future__ import annotations

import functools
import math
import statistics

# 1 KiB, 64 KiB, 1, 4, 16, 64, 256 MiB of weights (the two smallest added in the sixth attempt: a tiny
# weight GEMM costs its set-up, which interpolation from 1 MiB charged as streaming, ~0)
GEMV_KN = ((16, 16), (128, 128), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192))
BMM_SHAPES = ((2, 16, 32, 16), (4, 32, 32, 32), (8, 64, 32, 64), (8, 128, 64, 128), (12, 256, 64, 256))  # h, M, K, N
SCAN_SIDES = (16, 64, 128, 256, 512, 1024)  # rows = cols: 256 .. 1 Mi elements
SCAN_OPS = ("Softmax", "LayerNormalization", "Transpose")
CONV_CHAIN = ((64, 56, 3, 1), (256, 14, 3, 1), (256, 28, 1, 1), (128, 56, 3, 128))  # channels, hw, kernel, group
CHAIN_K = 5
GEMV_MAX_M = 16  # the MatMul grid's smallest M (host_bench.GRID_M[0]): below it a weight GEMM is a GEMV (M = 1) or small-M
SMALL_M = (2, 4, 8, 16)  # weight GEMMs of a few rows: ORT packs them as a small GEMM, not the GEMV stream.
# M = 16 (the grid's first row, measured here the same way and in the same round) is the top of the interpolation:
# the fourth attempt ran from M = 8 toward the cached grid's M = 16 instead, and missed mlp_rows12 by +45 %.
# 1 KiB, 64 KiB, 4, 16, 64 MiB of weights (the two smallest added in the seventh attempt, as the sixth did for the
# GEMV runs: below 4 MiB a few-row weight GEMM was charged the 4 MiB rate per byte, ~0 for its set-up)
SMALL_M_KN = ((16, 16), (128, 128), (1024, 1024), (2048, 2048), (4096, 4096))


def _interp_log(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear interpolation of y in log(x), clamped to the measured range."""
    pts = sorted(points)
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + f * (y1 - y0)
    return pts[-1][1]


# ------------------------------------------------------------------ measuring


def measure_kernels(threads: int = 1, quick: bool = False, progress=None) -> dict:
    """Run the kernel micro-benchmarks at ``threads`` (see the module docstring). ``quick``
    shrinks every shape (for tests)."""
    import numpy as np
    from onnx import helper, numpy_helper

    from nearfaas.hw.devices.host_bench import _graph, _session, _time_run, _vi
    from nearfaas.twin.cpu_model import REORDER_SHAPES, runtime_graph

    say = progress or (lambda m: None)
    reps, target = (3, 0.002) if quick else (11, 0.01)
    rng = np.random.default_rng(3)

    def arr(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def timed(model, feeds) -> float:
        s = _session(model, threads)
        return _time_run(lambda: s.run(None, feeds), target, reps, threads)["value_s"]

    # A single op's time is net of a 1-node graph with as many graph inputs as its own: each input fed
    # costs ORT (and the feed) ~1 us, so a 1-input op net of a 2-input graph lost that much (seventh attempt)
    one = _graph([helper.make_node("Add", ["X", "Z"], ["Y"])], [_vi("X", (16,)), _vi("Z", (16,))], [_vi("Y", (16,))])
    fixed = timed(one, {"X": np.ones(16, np.float32), "Z": np.ones(16, np.float32)})
    one_in = _graph([helper.make_node("Add", ["X", "Z"], ["Y"])], [_vi("X", (16,))], [_vi("Y", (16,))],
                    [numpy_helper.from_array(np.ones(16, np.float32), "Z")])
    fixed1 = timed(one_in, {"X": np.ones(16, np.float32)})
    out: dict = {"threads": threads, "fixed_one_node_s": fixed, "fixed_one_input_s": fixed1, "quick": quick}

    gemv = []
    for k, n in (GEMV_KN[:2] if quick else GEMV_KN):
        say(f"kernels {threads}t: GEMV 1x{k}x{n}")
        w = numpy_helper.from_array(arr(k, n), "W")
        t = timed(_graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], [_vi("A", (1, k))], [_vi("Y", (1, n))], [w]),
                  {"A": arr(1, k)})
        net = max(t - fixed1, 1e-9)
        gemv.append({"K": k, "N": n, "weight_bytes": 4.0 * k * n, "value_s": t, "net_s": net, "bytes_s": 4.0 * k * n / net})
    out["gemv"] = gemv

    small = []
    for m in (SMALL_M[:2] if quick else SMALL_M):
        for k, n in (SMALL_M_KN[:1] if quick else SMALL_M_KN):
            say(f"kernels {threads}t: small-M MatMul {m}x{k}x{n}")
            w = numpy_helper.from_array(arr(k, n), "W")
            t = timed(_graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], [_vi("A", (m, k))], [_vi("Y", (m, n))], [w]),
                      {"A": arr(m, k)})
            net = max(t - fixed1, 1e-9)
            small.append({"M": m, "K": k, "N": n, "weight_bytes": 4.0 * k * n, "value_s": t, "net_s": net, "s_per_weight_byte": net / (4.0 * k * n)})
    out["small_m"] = small

    say(f"kernels {threads}t: per-node dispatch and per-call cost")
    from nearfaas.hw.devices.host_bench import _dispatch

    disp = _dispatch(threads, target, reps, quick)
    out["dispatch"] = {"per_node_s": disp["per_node_s"], "per_call_by_inputs": disp["per_call_by_inputs"],
                       "f2_path_extra_s": _f2_path_extra(threads, target, reps),
                       "source": "ran: host_bench._dispatch (100-Add chain - 1 Add; InferenceSession.run of a 1-node graph "
                                 "with one and with two inputs, minus one node's dispatch); f2_path_extra_s: an app's f2 call "
                                 "(apps.stages.Inference._run) minus InferenceSession.run, on the same 1-input 1-node graph"}

    bmm = []
    for h, m, k, n in (BMM_SHAPES[:2] if quick else BMM_SHAPES):
        say(f"kernels {threads}t: batched MatMul {h}x[{m}x{k}]x[{k}x{n}]")
        t = timed(_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], [_vi("A", (h, m, k)), _vi("B", (h, k, n))],
                         [_vi("Y", (h, m, n))]), {"A": arr(h, m, k), "B": arr(h, k, n)})
        bmm.append({"h": h, "M": m, "K": k, "N": n, "flops": 2.0 * h * m * k * n, "value_s": t, "net_s": max(t - fixed, 1e-9)})
    out["bmm"] = bmm

    scan: dict[str, list] = {}
    for op in SCAN_OPS:
        scan[op] = []
        for side in (SCAN_SIDES[:3] if quick else SCAN_SIDES):
            say(f"kernels {threads}t: {op} {side}x{side}")
            inits = []
            if op == "Transpose":  # attention's head split: [1, rows, 4, cols/4] -> [1, 4, rows, cols/4]
                shape, oshape = (1, side, 4, side // 4), (1, 4, side, side // 4)
                node = helper.make_node(op, ["X"], ["Y"], perm=[0, 2, 1, 3])
            elif op == "LayerNormalization":
                shape = oshape = (side, side)
                inits = [numpy_helper.from_array(np.ones(side, np.float32), "S"), numpy_helper.from_array(np.zeros(side, np.float32), "B")]
                node = helper.make_node(op, ["X", "S", "B"], ["Y"], axis=-1)
            else:
                shape = oshape = (side, side)
                node = helper.make_node(op, ["X"], ["Y"], axis=-1)
            t = timed(_graph([node], [_vi("X", shape)], [_vi("Y", oshape)], inits), {"X": arr(*shape)})
            scan[op].append({"elems": side * side, "value_s": t, "net_s": max(t - fixed1, 1e-9),
                             "s_per_elem": max(t - fixed1, 1e-12) / (side * side)})
    out["scan"] = scan

    chains = []
    for c, hw, kk, group in CONV_CHAIN:
        if quick:
            c, hw = c // 8, hw // 4
            group = c if group > 1 else 1
        w = arr(c, c // group, kk, kk)
        b = arr(c)
        t = {}
        for k in (1, CHAIN_K):
            say(f"kernels {threads}t: conv chain {k} x {kk}x{kk} {c}ch g{group} @{hw}")
            inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "Bc")]
            nodes = [helper.make_node("Conv", ["X" if i == 0 else f"t{i}", "W", "Bc"], ["Y" if i == k - 1 else f"t{i + 1}"],
                                      kernel_shape=[kk, kk], pads=[kk // 2] * 4, group=group) for i in range(k)]
            t[k] = timed(_graph(nodes, [_vi("X", (1, c, hw, hw))], [_vi("Y", (1, c, hw, hw))], inits), {"X": arr(1, c, hw, hw)})
        flops = 2.0 * hw * hw * c * (c // group) * kk * kk
        chains.append({"case": f"{'depthwise ' if group > 1 else ''}Conv {kk}x{kk} {c}->{c} @{hw}x{hw}", "c": c, "hw": hw, "k": kk,
                       "group": group, "t1_s": t[1], f"t{CHAIN_K}_s": t[CHAIN_K], "interior_s": max(t[CHAIN_K] - t[1], 1e-9) / (CHAIN_K - 1),
                       "flops": flops})
    out["conv_chain"] = chains

    cases, kept = [], True
    for c, hw in (((16, 14), (32, 14)) if quick else REORDER_SHAPES):
        t = {}
        for k in (1, CHAIN_K):
            say(f"kernels {threads}t: reorder chain {k} pair(s) [1,{c},{hw},{hw}]")
            nodes = []
            for i in range(k):
                src, mid, dst = ("X" if i == 0 else f"o{i}"), f"r{i}", ("Y" if i == k - 1 else f"o{i + 1}")
                nodes += [helper.make_node("ReorderInput", [src], [mid], domain="com.microsoft.nchwc"),
                          helper.make_node("ReorderOutput", [mid], [dst], domain="com.microsoft.nchwc", channels=c)]
            m = _graph(nodes, [_vi("X", (1, c, hw, hw))], [_vi("Y", (1, c, hw, hw))])
            m.opset_import.append(helper.make_opsetid("com.microsoft.nchwc", 1))
            if k == CHAIN_K:
                kept = kept and runtime_graph(m)["reorders"] == 2 * k  # ORT could cancel a pair; then the chain measures nothing
            t[k] = timed(m, {"X": arr(1, c, hw, hw)})
        cases.append({"case": f"[1,{c},{hw},{hw}]", "elems": c * hw * hw, "t1_s": t[1], f"t{CHAIN_K}_s": t[CHAIN_K],
                      "per_elem_s": max(t[CHAIN_K] - t[1], 1e-12) / ((CHAIN_K - 1) * 2 * c * hw * hw)})
    out["reorder_chain"] = {"cases": cases, "ort_keeps_pairs": kept,
                            "s_per_elem": statistics.median(x["per_elem_s"] for x in cases)}
    out["source"] = (f"ran: ONNX Runtime one-op and chain graphs (nearfaas.twin.cpu_kernels), {threads} thread(s), median thread "
                     f"CPU time of {reps} hot-loop repeats of >= {target * 1e3:g} ms, single ops net of a 1-node graph "
                     "with as many graph inputs (GEMV, small-M, scans: one; batched MatMul: two)")
    return out


def _f2_path_extra(threads: int, target: float, reps: int) -> float:
    """What an app's f2 call (``Inference._run``: token-id and batch checks around the session)
    adds to ``InferenceSession.run``, on a 1-input 1-node graph (the apps are measured through it;
    the networks through the session alone)."""
    import tempfile
    from pathlib import Path

    import numpy as np
    from onnx import helper, numpy_helper

    from nearfaas.apps import APPS
    from nearfaas.apps.stages import Inference
    from nearfaas.hw.devices.host_bench import _graph, _time_run, _vi

    m = _graph([helper.make_node("Add", ["X", "Z"], ["Y"])], [_vi("X", (16,))], [_vi("Y", (16,))],
               [numpy_helper.from_array(np.ones(16, np.float32), "Z")])
    feeds = {"X": np.ones(16, np.float32)}
    with tempfile.TemporaryDirectory(prefix="nearfaas-f2path-") as tmp:
        p = Path(tmp) / "one.onnx"
        p.write_bytes(m.SerializeToString())
        inf = Inference(sorted(APPS)[0], p, model_key="one-node", threads=threads)  # _run reads no field of the app's card
        if inf.session is None:
            raise RuntimeError(f"the f2-path micro-benchmark's model did not load: {inf.error}")
        f2 = _time_run(lambda: inf._run(feeds, None), target, reps, threads)["value_s"]
        bare = _time_run(lambda: inf.session.run(feeds, None), target, reps, threads)["value_s"]
    return max(f2 - bare, 0.0)


# ------------------------------------------------------------------ the parameters


def gemv_rate(kern: dict, working_set_bytes: float) -> float:
    """Weight bytes per second a GEMV streams at, for a network whose weights total ``working_set_bytes``."""
    return _interp_log([(g["weight_bytes"], g["bytes_s"]) for g in kern["gemv"]], max(working_set_bytes, 1.0))


def small_m_s_per_byte(kern: dict, m: int, working_set_bytes: float) -> float | None:
    """Seconds per weight byte of a weight GEMM of ``m`` rows, for a network whose weights total
    ``working_set_bytes``: the small-M benchmarks (and the GEMV ones as M = 1) interpolated in log
    bytes, then in log M (clamped at the largest measured M). None: the record has no small-M runs."""
    by_m: dict[int, list[tuple[float, float]]] = {}
    for r in kern.get("small_m") or []:
        by_m.setdefault(int(r["M"]), []).append((r["weight_bytes"], r["s_per_weight_byte"]))
    if not by_m:
        return None
    by_m[1] = [(g["weight_bytes"], 1.0 / g["bytes_s"]) for g in kern["gemv"]]
    ws = max(working_set_bytes, 1.0)
    return _interp_log([(float(mm), _interp_log(pts, ws)) for mm, pts in by_m.items()], float(m))


def call_costs(d, kern: dict, inputs: int | None, f2_path: bool = False) -> tuple[float, float, str]:
    """(per-node dispatch, per-call cost, source): the record's own dispatch benchmarks when it has
    them (paired rounds measure them beside the networks), the per-call cost at the model's number
    of inputs (the wrapper checks each: linear in the inputs through the 1- and 2-input runs), plus
    the app f2 path's own checks when the caller measured through it (``f2_path``); else the host
    micro-benchmarks' (a 2-input graph)."""
    disp = kern.get("dispatch")
    if not disp:
        return float(d.launch_s.value), float(d.driver_s.value), "host micro-benchmarks (launch_s, driver_s)"
    one, two = float(disp["per_call_by_inputs"]["1"]), float(disp["per_call_by_inputs"]["2"])
    n = inputs if inputs and inputs > 0 else 2
    call = max(one + (n - 1) * (two - one), 0.0)
    if f2_path and "f2_path_extra_s" in disp:
        return float(disp["per_node_s"]), call + float(disp["f2_path_extra_s"]), f"kernel record's dispatch runs, {n} input(s), app f2 path"
    return float(disp["per_node_s"]), call, f"kernel record's dispatch runs, {n} input(s)"


def graph_input_count(model, rt: dict | None = None) -> int | None:
    """The inputs a caller feeds: graph inputs that are not initializers (zoo key or ModelProto;
    a skeleton only through ``rt['inputs']``)."""
    if rt and rt.get("inputs"):
        return int(rt["inputs"])
    if isinstance(model, str):
        return _zoo_input_count(model)
    if hasattr(model, "graph"):
        inits = {t.name for t in model.graph.initializer}
        return sum(1 for i in model.graph.input if i.name not in inits)
    return None


@functools.lru_cache(maxsize=64)
def _zoo_input_count(key: str) -> int:
    from nearfaas.models import shapes_only

    return graph_input_count(shapes_only(key, "full"))


def bmm_efficiency(peak: float, kern: dict, m: int, k: int, n: int) -> float:
    """Fraction of peak of an activation x activation MatMul of per-matrix (M, K, N)."""
    pts = [(2.0 * b["M"] * b["K"] * b["N"], b["flops"] / b["net_s"] / peak) for b in kern["bmm"]]
    return min(max(_interp_log(pts, 2.0 * m * k * n), 1e-4), 1.0)


def scan_s_per_elem(kern: dict, op: str, elems: float) -> float:
    return _interp_log([(s["elems"], s["s_per_elem"]) for s in kern["scan"][op]], max(elems, 1.0))


def dwconv_interior_efficiency(peak: float, kern: dict) -> float:
    """The depthwise chain's interior conv as a fraction of peak."""
    xs = [c["flops"] / c["interior_s"] / peak for c in kern["conv_chain"] if c["group"] > 1]
    return min(max(statistics.median(xs), 1e-4), 1.0)


def direct_conv_factor(bench: dict, threads: int, kern: dict) -> float:
    """ORT's direct NCHWc conv vs the im2col MatMul grid: median over the plain conv chains of
    (interior conv efficiency / grid efficiency at that conv's lowered M, K, N)."""
    from nearfaas.hw.devices import host

    peak = host.peak_flops(bench, threads)[0]
    ratios = []
    for c in kern["conv_chain"]:
        if c["group"] == 1:
            m, k, n = c["hw"] * c["hw"], c["c"] * c["k"] * c["k"], c["c"]
            ratios.append((c["flops"] / c["interior_s"] / peak) / host.gemm_efficiency(bench, threads, m, k, n)[0])
    return statistics.median(ratios)


def reorder_rate(overhead: dict) -> tuple[float, str]:
    """The interior reorder rate if ORT kept the chain's pairs, else the one-op rate."""
    rc = (overhead.get("kernels") or {}).get("reorder_chain") or {}
    if rc.get("ort_keeps_pairs"):
        return rc["s_per_elem"], "ran: interior reorder rate, chain of ReorderInput/ReorderOutput pairs"
    return overhead["reorder_s_per_elem"], "ran: one-op reorder rate (ORT cancelled the chain's pairs, or no chain measured)"


def nchwc_block(bench: dict) -> int:
    """MLAS's NCHWc channel block on this CPU: 16 floats with AVX-512F, 8 with AVX2, else 1 (ORT
    keeps NCHW; no padding)."""
    flags = set((bench.get("cpu") or {}).get("simd_flags") or ())
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else 1


def nchwc_padding(channels: tuple[int, int] | None, block: int, groups: int = 1) -> float:
    """How much work an NCHWc conv does over its nominal FLOPs: ORT stores channels in blocks of
    ``block`` and runs the padded ones (a 36-channel 3x3 conv chain costs what a 48-channel one
    does here, 16-float blocks). ORT's rule for which convs it blocks (ONNX Runtime 1.31, checked
    here): a plain conv when its input channels are fewer than a block (read unblocked, NCHW
    input) or a multiple of 4; a depthwise conv (``groups`` = its channels) when its channels are
    a multiple of 4; any other grouped conv never. An unblocked conv is charged as it is (1.0)."""
    if not channels or block <= 1:
        return 1.0
    cin, cout = channels

    def pad(c: int) -> int:
        return -(-c // block) * block

    if groups > 1:
        depthwise = groups == cin == cout
        return pad(cout) / cout if depthwise and cout % 4 == 0 else 1.0
    if cin < block:
        return pad(cout) / cout
    return pad(cin) / cin * pad(cout) / cout if cin % 4 == 0 else 1.0


# ------------------------------------------------------------------ the form


def predict_runtime2(bench: dict, threads: int, model, *, overhead: dict, rt: dict | None = None, batch: int = 1) -> dict:
    """``runtime`` with the kernel micro-benchmarks in place of the terms they measure (module docstring)."""
    from nearfaas.hw.devices import host
    from nearfaas.twin import platforms as P
    from nearfaas.twin.cpu_model import refined_layers, skeleton_of

    kern = overhead.get("kernels")
    if not kern:
        raise ValueError("form='runtime2' needs the kernel micro-benchmarks (cpu_kernels.measure_kernels) in overhead['kernels']")
    sk = skeleton_of(model, batch)
    d = host.device(bench, threads)
    eff = host.class_efficiency(bench, threads)
    peak, bw = d.peak("fp32"), d.mem_bw
    b = P.DTYPE_BYTES["fp32"]
    ls = refined_layers(sk)
    # the hot loop's working set for GEMV: every weight of the network (a GEMV reads each once per call)
    weights = b * sum(be for x in ls for isw, be in zip(x.get("weight", []), x.get("b_elems", []), strict=True) if isw)
    rate = gemv_rate(kern, weights)
    conv_f = direct_conv_factor(bench, threads, kern)
    dw_e = dwconv_interior_efficiency(peak, kern)
    # ORT runs the convs in NCHWc (its optimised graph says so): each at its padded channels (eighth attempt)
    block = nchwc_block(bench) if rt and any("nchwc:Conv" in k for k in rt.get("op_types") or {}) else 1
    busy, parts = 0.0, {"gemv_s": 0.0, "small_m_s": 0.0, "bmm_s": 0.0, "scan_s": 0.0, "conv_s": 0.0, "dwconv_s": 0.0}
    by_kind: dict[str, float] = {}
    for x in ls:
        e = eff.get(x["kind"]) or eff["elementwise"]
        t_c, streamed = 0.0, 0.0
        mine = dict.fromkeys(parts, 0.0)  # this layer's time in each kernel term (reported: which measurement it rests on)
        if x["kind"] in ("gemm", "conv"):
            for (m, k, n, c), isw, be in zip(x["gemms"], x["weight"], x["b_elems"], strict=True):
                if not isw:  # both operands activations: attention's batched MatMuls
                    mine["bmm_s"] += 2.0 * m * k * n * c / (peak * bmm_efficiency(peak, kern, m, k, n))
                elif x["kind"] == "gemm" and m < GEMV_MAX_M:  # below the grid: stream the weights
                    spb = small_m_s_per_byte(kern, m, weights) if m > 1 else None
                    if spb is None:  # M = 1 (or a record without the small-M runs): the GEMV stream
                        g16 = host.gemm_efficiency(bench, threads, GEMV_MAX_M, k, n)[0]
                        mine["gemv_s"] += max(b * be / rate, 2.0 * m * k * n * c / (peak * g16))
                    else:  # a few rows: the small-M runs (M = 2 .. 16, the same round) interpolated in log M
                        mine["small_m_s"] += b * be * spb
                    streamed += be  # the micro-benchmarks' times already cover reading these weights: not charged again below
                elif x["kind"] == "conv":
                    mine["conv_s"] += (2.0 * m * k * n * c * nchwc_padding(x.get("channels"), block)
                                       / (peak * min(host.gemm_efficiency(bench, threads, m, k, n)[0] * conv_f, 1.0)))
                else:
                    t_c += 2.0 * m * k * n * c / (peak * host.gemm_efficiency(bench, threads, m, k, n)[0])
        elif x["kind"] == "dwconv":
            mine["dwconv_s"] = x["flops"] * nchwc_padding(x.get("channels"), block, x["gemms"][0][3]) / (peak * dw_e)
        elif x.get("op") in SCAN_OPS:
            mine["scan_s"] = x["out_elems"] * scan_s_per_elem(kern, x["op"], x["out_elems"])
        else:
            t_c = x["flops"] / (peak * e["compute"])
        t_c += sum(mine.values()) + x["vops"] / (peak * eff["elementwise"]["compute"])
        t_m = (x["elems"] - streamed) * b / (bw * e["bandwidth"])
        busy += max(t_c, t_m)
        for k_, v in mine.items():
            parts[k_] += v
        by_kind[x["kind"]] = by_kind.get(x["kind"], 0.0) + max(t_c, t_m)
    nodes = rt["nodes"] if rt else len(ls)
    per_node, call, call_src = call_costs(d, kern, graph_input_count(model, rt), bool(rt and rt.get("call_path") == "f2"))
    launch = nodes * per_node
    rr, rr_src = reorder_rate(overhead)
    reorder = rt["reorder_elems"] * rr if rt else 0.0
    return {"seconds": busy + launch + reorder + call, "busy_s": busy, "launch_s": launch, "reorder_s": reorder, "call_s": call,
            "layers": len(ls), "dispatched_nodes": nodes, "flops": sum(x["flops"] + x["vops"] for x in ls),
            "bytes": sum(x["elems"] for x in ls) * b, "busy_by_kind_s": {k: round(v, 6) for k, v in by_kind.items()},
            **{k: round(v, 9) for k, v in parts.items()}, "weight_bytes": weights, "gemv_rate_bytes_s": rate,
            "direct_conv_factor": conv_f, "dwconv_interior_efficiency": dw_e, "nchwc_block": block, "reorder_rate_source": rr_src, "call_source": call_src,
            "runtime_graph": "ORT optimised graph" if rt else "none: one dispatch per compiler layer, no reorders"}
