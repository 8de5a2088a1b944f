"""The CPU roofline's f2 on this machine's host device, in three forms, from any ONNX graph.

``nearfaas.twin.validate`` compares these predictions with measured f2 for the apps (zoo keys) and
for the held-out networks (``nearfaas.twin.heldout``, ONNX models built in code). Both go through
the DSA compiler's layer extraction (``load_ops`` + ``dse.prepare``: the skeleton behind
``platforms.layers``); ``skeleton_of`` accepts a zoo key (``platforms.skeleton``) or a ModelProto.

Forms (every parameter from micro-benchmarks, none from the apps or the held-out networks):

* ``catalog``: the Xeon baseline's form (``platforms.layers`` op kinds, one efficiency per kind,
  ``launch_s`` per layer, ``driver_s`` per call).
* ``refined``: GEMM/conv efficiency at each layer's lowered (M, K, N) from the MatMul grid,
  depthwise convs as their own class, fused element-wise ops at the element-wise rate.
* ``runtime``: ``refined`` + what ONNX Runtime runs that the graph does not show, read from ONNX
  Runtime's own optimised graph (its graph rewrites are deterministic; no timing is involved):
  the per-node dispatch is charged per node ORT actually runs (after its fusions), not per
  compiler layer, and every NCHWc layout reorder it inserts (ReorderInput/ReorderOutput) is
  charged its elements at the reorder rate measured by one-op ReorderInput/ReorderOutput graphs
  (``measure_overhead``). The depthwise micro-benchmark (one depthwise Conv) itself contains such
  a reorder pair, so its class efficiency is taken net of it here (no double charge).
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections import Counter
from pathlib import Path

FORMS = ("catalog", "refined", "runtime", "runtime2")
# A zoo model's runtime graph needs its weights materialised (zeros) for ONNX Runtime to load it:
# above this many parameters (gpt2_xl 1.5 G, vit_huge 0.63 G) that costs GBs of memory, so those
# two fall back to one dispatch per compiler layer and no reorders (they are transformers: ORT's
# NCHWc rewrite touches at most a patch-embedding conv there).
RUNTIME_GRAPH_MAX_PARAMS = 150e6
# One-op reorder micro-benchmark shapes: the conv micro-benchmarks' activation shapes (host_bench).
REORDER_SHAPES = ((64, 56), (256, 14), (256, 28), (128, 56))


def skeleton_of(model, batch: int = 1):
    """The DSA compiler's skeleton of a zoo key (cached, ``platforms.skeleton``) or a ModelProto."""
    from nearfaas.hw import dse
    from nearfaas.hw.dsa.graph import load_ops
    from nearfaas.twin import platforms as P

    if hasattr(model, "groups"):  # already a skeleton
        return model
    if isinstance(model, str):
        return P.skeleton(model, batch)
    return dse.prepare(load_ops(model, batch=batch))


def catalog_layers(sk) -> list[dict]:
    """``platforms.layers`` on a skeleton: the one extraction the Xeon baseline uses."""
    from nearfaas.twin import platforms as P

    return P.layers_of(sk)


def refined_layers(sk) -> list[dict]:
    """The skeleton's groups with the MPU groups split: MAC FLOPs by class (gemm | conv | dwconv)
    and the fused vector ops apart (charged at the element-wise rate)."""
    from nearfaas.hw.dsa.config import DSAConfig
    from nearfaas.twin import platforms as P

    lane_ops = sk.vpu_cycles(DSAConfig(vpu_lanes=1, vpu_pipeline=0, source="lane-ops"))
    out = []
    for g, vops in zip(sk.groups, lane_ops, strict=True):
        if g.unit == "mpu":
            conv = g.members[0].op_type == "Conv"
            grouped = conv and any(x.count > 1 for x in g.gemms)
            macs = sum(x.macs for x in g.gemms)
            elems = sum(x.a_elems + (x.b_elems if x.b_is_weight else 0) for x in g.gemms) + g.ext_in + g.ext_out
            kind = "dwconv" if grouped else "conv" if conv else "gemm"
            out.append({"kind": kind, "flops": 2.0 * macs, "vops": float(vops), "elems": float(elems),
                        "gemms": [(x.M, x.K, x.N, x.count) for x in g.gemms], **({"channels": _conv_channels(g.members[0])} if conv else {}),
                        # for runtime2 (cpu_kernels): which GEMMs read a weight (GEMV, activation x activation)
                        "weight": [bool(x.b_is_weight) for x in g.gemms], "b_elems": [x.b_elems for x in g.gemms]})
        elif g.unit == "vpu":
            out.append({"kind": P._KIND.get(g.members[0].kind, "other"), "flops": float(vops), "vops": 0.0,
                        "elems": float(g.ext_in + g.ext_out), "op": g.members[0].op_type, "out_elems": float(g.ext_out)})
    return out


def _conv_channels(op) -> tuple[int, int] | None:
    """(input, output) channels of a Conv op, from its input and weight shapes (None: unknown)."""
    x, w = (op.in_shapes + [None, None])[:2]
    if not x or not w or len(x) < 2 or len(w) < 1:
        return None
    return int(x[1]), int(w[0])


# ------------------------------------------------------------------ ONNX Runtime's own graph


def runtime_graph(model) -> dict:
    """What ONNX Runtime runs for ``model`` (a ModelProto with weights): its optimised graph at the
    apps' session options (ORT_ENABLE_ALL, the default), saved by ORT itself. Returns the node
    count, the NCHWc reorders it inserted and their elements (shapes from ONNX shape inference of
    the original graph: a ReorderInput reads an original tensor, a ReorderOutput writes one)."""
    import onnx
    import onnxruntime as ort

    from nearfaas.hw.dsa.graph import _fix_batch

    # shapes at batch 1 (a zoo graph's batch dim is symbolic); ORT optimises the graph as the app loads it
    inferred = onnx.shape_inference.infer_shapes(_fix_batch(model, 1), strict_mode=False)
    shapes = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = None if any(d is None for d in dims) else math.prod(dims)
    with tempfile.TemporaryDirectory(prefix="nearfaas-ortgraph-") as tmp:
        opts = ort.SessionOptions()  # as nearfaas.models.InferenceSession, plus: save the optimised graph
        opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        opts.optimized_model_filepath = str(Path(tmp) / "opt.onnx")
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        om = onnx.load(opts.optimized_model_filepath, load_external_data=False)
    ops = Counter(f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in om.graph.node)
    elems = unknown = reorders = 0
    for n in om.graph.node:
        if n.op_type in ("ReorderInput", "ReorderOutput"):
            reorders += 1
            x = shapes.get(n.input[0] if n.op_type == "ReorderInput" else n.output[0])
            if x is None:
                unknown += 1
            else:
                elems += x
    return {"nodes": len(om.graph.node), "reorders": reorders, "reorder_elems": float(elems), "unknown_reorders": unknown,
            "op_types": dict(sorted(ops.items())), "source": "derived: ONNX Runtime's optimised graph (optimized_model_filepath)"}


def zoo_runtime_graph(key: str) -> dict | None:
    """``runtime_graph`` of a zoo model with zero weights (its shapes-only graph, initializers
    filled with zeros: ORT's rewrites depend on shapes, not values); None above
    RUNTIME_GRAPH_MAX_PARAMS."""
    import numpy as np
    from onnx import helper

    from nearfaas.models import shapes_only

    m = shapes_only(key, "full")
    if sum(math.prod(t.dims) for t in m.graph.initializer) > RUNTIME_GRAPH_MAX_PARAMS:
        return None
    for t in m.graph.initializer:
        t.raw_data = np.zeros(math.prod(t.dims), helper.tensor_dtype_to_np_dtype(t.data_type)).tobytes()
    return runtime_graph(m)


# ------------------------------------------------------------------ the overhead micro-benchmarks


def measure_overhead(threads: int, quick: bool = False) -> dict:
    """One-op ONNX Runtime graphs for the runtime form (not the apps, not the held-out set):

    * ``reorder_s_per_elem``: ReorderInput (NCHW -> NCHWc16) and ReorderOutput (back) on the conv
      micro-benchmarks' activation shapes (REORDER_SHAPES), each net of a 1-node 16-element Add
      graph (the per-call + one-node cost, charged apart), per element; the median of the 8.
    * ``relu_chain_per_node``: per-node cost of a Relu chain at 16, 4 Ki, 64 Ki elements (dispatch +
      the Relu's own work). Reported as evidence, not used: the runtime form keeps the 16-element
      dispatch (``launch_s``) per node and charges the work through the roofline; the report
      compares the two (``dispatch_vs_size``).
    * ``dwconv_case_reorder_elems``: the elements ORT's own graph of the depthwise micro-benchmark
      (host_bench's one depthwise Conv) reorders, so its class efficiency can be taken net of them.
    Timing as host_bench: 1 thread median thread CPU time, more threads best wall time."""
    import numpy as np
    from onnx import helper

    from nearfaas.hw.devices.host_bench import _graph, _session, _time_run, _vi, ort_cases

    reps, target = (3, 0.002) if quick else (15, 0.01)
    rng = np.random.default_rng(2)
    one = _graph([helper.make_node("Add", ["X", "Z"], ["Y"])], [_vi("X", (16,)), _vi("Z", (16,))], [_vi("Y", (16,))])
    f16 = {"X": np.ones(16, np.float32), "Z": np.ones(16, np.float32)}
    s1 = _session(one, threads)
    fixed = _time_run(lambda: s1.run(None, f16), target, reps, threads)["value_s"]
    cases = []
    for c, hw in (((16, 14), (32, 14)) if quick else REORDER_SHAPES):
        x = {"X": rng.standard_normal((1, c, hw, hw), dtype=np.float32)}
        for op, attrs in (("ReorderInput", {}), ("ReorderOutput", {"channels": c})):
            m = _graph([helper.make_node(op, ["X"], ["Y"], domain="com.microsoft.nchwc", **attrs)],
                       [_vi("X", (1, c, hw, hw))], [_vi("Y", (1, c, hw, hw))])
            m.opset_import.append(helper.make_opsetid("com.microsoft.nchwc", 1))
            s = _session(m, threads)
            t = _time_run(lambda s=s, x=x: s.run(None, x), target, reps, threads)["value_s"]
            cases.append({"case": f"{op} [1,{c},{hw},{hw}]", "elems": c * hw * hw, "value_s": t,
                          "per_elem_s": max(t - fixed, 1e-12) / (c * hw * hw)})
    scan = []  # per-node cost vs tensor size: a chain of 33 Relus minus 1 Relu, per extra node (reported, see the docstring)
    for n in ((16, 4096) if quick else (16, 4096, 65536)):
        x = {"X": rng.standard_normal((1, n), dtype=np.float32)}
        t = {}
        for k in (1, 33):
            ns = [helper.make_node("Relu", ["X" if i == 0 else f"t{i}"], ["Y" if i == k - 1 else f"t{i + 1}"]) for i in range(k)]
            s = _session(_graph(ns, [_vi("X", (1, n))], [_vi("Y", (1, n))]), threads)
            t[k] = _time_run(lambda s=s, x=x: s.run(None, x), target, reps, threads)["value_s"]
        scan.append({"elems": n, "per_node_s": max(t[33] - t[1], 0.0) / 32})
    dw = next(b for k, _, n, b in ort_cases(quick) if k == "dwconv")
    rg = runtime_graph(dw()[0])
    return {"threads": threads, "fixed_one_node_s": fixed, "reorder_cases": cases, "relu_chain_per_node": scan,
            "reorder_s_per_elem": statistics.median(c["per_elem_s"] for c in cases),
            "dwconv_case_reorder_elems": rg["reorder_elems"], "dwconv_case_ort_graph": rg["op_types"],
            "source": (f"ran: ONNX Runtime ReorderInput/ReorderOutput one-op graphs on {len(cases) // 2} activation shapes, "
                       f"{threads} thread(s), net of a 1-node graph, median per element")}


def dwconv_efficiency_net(bench: dict, overhead: dict, threads: int) -> tuple[float, str]:
    """The depthwise class's fraction of peak with the micro-benchmark's own reorders taken out."""
    from nearfaas.hw.devices import host

    rec = bench["threads"][str(threads)]
    peak = host.peak_flops(bench, threads)[0]
    rate = overhead["reorder_s_per_elem"]
    effs = []
    for c in rec["ort"]:
        if c["class"] == "dwconv" and c["role"] == "compute":
            net = max(c["net_s"] - overhead["dwconv_case_reorder_elems"] * rate, 0.25 * c["net_s"])
            effs.append(c["flops"] / net / peak)
    e = min(max(statistics.median(effs), 1e-4), 1.0)
    return e, (f"ran: the depthwise micro-benchmark net of its {overhead['dwconv_case_reorder_elems']:.0f} reordered elements "
               f"at the measured reorder rate (at most 75 % taken off)")


# ------------------------------------------------------------------ prediction


def predict(bench: dict, threads: int, model, form: str = "catalog", *, overhead: dict | None = None,
            rt: dict | None = None, batch: int = 1) -> dict:
    """The roofline's f2 for ``model`` (zoo key or ModelProto) on this machine at ``threads``.
    ``runtime`` needs ``overhead`` (``measure_overhead``) and takes ``rt`` (``runtime_graph``;
    None: one dispatch per compiler layer, no reorders)."""
    from nearfaas.hw.devices import host
    from nearfaas.twin import platforms as P

    if form not in FORMS:
        raise ValueError(f"form={form!r}: use one of {', '.join(FORMS)}")
    if form in ("runtime", "runtime2") and overhead is None:
        raise ValueError(f"form={form!r} needs the overhead micro-benchmarks (measure_overhead)")
    if form == "runtime2":  # the kernel micro-benchmarks' form lives in its own module (this one is near the size limit)
        from nearfaas.twin.cpu_kernels import predict_runtime2

        return predict_runtime2(bench, threads, model, overhead=overhead, rt=rt, batch=batch)
    sk = skeleton_of(model, batch)
    d = host.device(bench, threads)
    b = P.DTYPE_BYTES["fp32"]
    busy = 0.0
    bound = {"compute": 0.0, "memory": 0.0}
    by_kind: dict[str, float] = {}
    if form == "catalog":
        ls = catalog_layers(sk)
        for x in ls:
            r = d.roofline({"kind": x["kind"], "flops": x["flops"], "bytes": x["elems"] * b, "dtype": "fp32"})
            busy += float(r["busy_s"])
            bound[str(r["bound"])] += float(r["busy_s"])
            by_kind[x["kind"]] = by_kind.get(x["kind"], 0.0) + float(r["busy_s"])
        flops = sum(x["flops"] for x in ls)
    else:
        eff = host.class_efficiency(bench, threads)
        if form == "runtime":
            eff = {**eff, "dwconv": {**eff["dwconv"], "compute": dwconv_efficiency_net(bench, overhead, threads)[0]}}
        peak, bw = d.peak("fp32"), d.mem_bw
        ls = refined_layers(sk)
        for x in ls:
            e = eff.get(x["kind"]) or eff["elementwise"]
            if x["kind"] in ("gemm", "conv"):  # shape-aware: the MatMul grid at the lowered GEMM's M, K, N
                t_c = sum(2.0 * m * k * n * c / (peak * host.gemm_efficiency(bench, threads, m, k, n)[0]) for m, k, n, c in x["gemms"])
            else:
                t_c = x["flops"] / (peak * e["compute"])
            t_c += x["vops"] / (peak * eff["elementwise"]["compute"])
            t_m = x["elems"] * b / (bw * e["bandwidth"])
            t = max(t_c, t_m)
            busy += t
            bound["compute" if t_c >= t_m else "memory"] += t
            by_kind[x["kind"]] = by_kind.get(x["kind"], 0.0) + t
        flops = sum(x["flops"] + x["vops"] for x in ls)
    nodes = rt["nodes"] if (form == "runtime" and rt) else len(ls)
    launch = nodes * float(d.launch_s.value)
    reorder = rt["reorder_elems"] * overhead["reorder_s_per_elem"] if (form == "runtime" and rt) else 0.0
    call = float(d.driver_s.value)
    return {"seconds": busy + launch + reorder + call, "busy_s": busy, "launch_s": launch, "reorder_s": reorder, "call_s": call,
            "layers": len(ls), "dispatched_nodes": nodes, "flops": flops, "bytes": sum(x["elems"] for x in ls) * b,
            "compute_bound_s": bound["compute"], "memory_bound_s": bound["memory"],
            "busy_by_kind_s": {k: round(v, 6) for k, v in by_kind.items()},
            **({"runtime_graph": "ORT optimised graph" if rt else "none: one dispatch per compiler layer, no reorders"}
               if form == "runtime" else {})}
