"""A held-out set for the CPU roofline check: networks built here in code.

``nearfaas twin validate`` compares the roofline's predicted f2 with ONNX Runtime's measured f2
for the eight apps. The forms it reports were (partly) designed after seeing those eight, so they
are no held-out check. This module builds a SECOND set of networks that none of the forms was
shaped on: MLPs (GEMV-like at batch 1, and a 64-row batch), plain VGG-like CNNs, depthwise-
separable CNNs (MobileNet v1 / v2-like), a ResNet-like basic-block stack and transformer encoders
of three sizes. Every weight is seeded numpy (no torch here); the graphs are plain ONNX (opset 17,
the operators the zoo models use) and go through the SAME layer extraction as the apps (the DSA
compiler's ``load_ops`` + ``dse.prepare``, see ``nearfaas.twin.cpu_model.skeleton_of``).

Since the second attempt this set is the "seen" one: its errors were looked at when the
``runtime2`` form was planned, so the goal is judged on ``nearfaas.twin.heldout_fresh`` (twelve
more networks from these builders, other sizes); this module's measuring and evaluating code
serves both sets.

The sizes were chosen before any held-out measurement, to span the regimes the apps do not all
cover (per-call bound, weight-streaming GEMV, small and large GEMMs, depthwise, attention), and to
run in ~1-300 ms each so that the whole set is measured in about a minute at 1 thread.

    nets = build_all()                  # {name: onnx.ModelProto}
    measure(1, nets)                    # {name: {"value_s", ...}}: f2 through nearfaas's InferenceSession
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

OPSET = 17


class _G:
    """A small graph builder: seeded weights, fresh tensor names, shapes tracked by hand."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.i = [], [], 0

    def name(self, p: str) -> str:
        self.i += 1
        return f"{p}{self.i}"

    def w(self, *shape, scale: float | None = None) -> str:
        from onnx import numpy_helper

        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / math.sqrt(max(fan_in, 1))  # keeps activations O(1) through depth
        n = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * s).astype(np.float32), n))
        return n

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def const(self, values, dtype=np.int64) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), n))
        return n

    # layers
    def dense(self, x: str, k: int, n: int, act: str | None = "Relu") -> str:
        y = self.op("Add", [self.op("MatMul", [x, self.w(k, n)]), self.w(n, scale=0.01)])
        return self.op(act, [y]) if act else y

    def conv(self, x: str, ci: int, co: int, k: int = 3, stride: int = 1, group: int = 1, act: str | None = "Relu") -> str:
        y = self.op("Conv", [x, self.w(co, ci // group, k, k), self.w(co, scale=0.01)], kernel_shape=[k, k],
                    pads=[k // 2] * 4, strides=[stride, stride], group=group)
        if act == "Relu6":
            return self.op("Clip", [y, self.const(0.0, np.float32), self.const(6.0, np.float32)])
        return self.op(act, [y]) if act else y

    def layernorm(self, x: str, d: int) -> str:
        from onnx import numpy_helper

        s, b = self.name("ln_s"), self.name("ln_b")
        self.inits += [numpy_helper.from_array(np.ones(d, np.float32), s), numpy_helper.from_array(np.zeros(d, np.float32), b)]
        return self.op("LayerNormalization", [x, s, b], axis=-1, epsilon=1e-5)

    def model(self, x: str, shape: tuple, y: str, out_shape: tuple, name: str):
        from onnx import TensorProto, helper

        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, list(out_shape))], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="nearfaas.twin.heldout")
        m.ir_version = 8
        return m


def mlp(name: str, rows: int, widths: tuple[int, ...], seed: int):
    g = _G(seed)
    x = h = "X"
    for i, (k, n) in enumerate(zip(widths, widths[1:], strict=False)):
        h = g.dense(h, k, n, act=None if i == len(widths) - 2 else "Relu")
    return g.model(x, (rows, widths[0]), h, (rows, widths[-1]), name)


def vgg(name: str, hw: int, stages: tuple[tuple[int, int], ...], classes: int, seed: int):
    """(channels, convs) per stage, 3x3 convs + ReLU, 2x2 max-pool after each stage, then GAP + FC."""
    g = _G(seed)
    h, c = "X", 3
    for co, n in stages:
        for _ in range(n):
            h, c = g.conv(h, c, co), co
        h = g.op("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])])
    return g.model("X", (1, 3, hw, hw), g.dense(h, c, classes, act=None), (1, classes), name)


def mobilenet_v1(name: str, hw: int, width: float, seed: int):
    """Depthwise-separable blocks (dw 3x3 + BN-folded bias + ReLU, pw 1x1 + ReLU), MobileNet v1's plan."""
    plan = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    g = _G(seed)
    c = max(8, int(32 * width))
    h = g.conv("X", 3, c, stride=2)
    for co, s in plan:
        co = max(8, int(co * width))
        h = g.conv(h, c, c, stride=s, group=c)
        h, c = g.conv(h, c, co, k=1), co
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])])
    return g.model("X", (1, 3, hw, hw), g.dense(h, c, 1000, act=None), (1, 1000), name)


def mobilenet_v2(name: str, hw: int, seed: int):
    """Inverted residuals (1x1 expand x6 + ReLU6, dw 3x3 + ReLU6, 1x1 project, residual Add)."""
    plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 2, 2), (6, 96, 2, 1), (6, 160, 2, 2)]  # t, c, n, s
    g = _G(seed)
    h, c = g.conv("X", 3, 32, stride=2, act="Relu6"), 32
    for t, co, n, s in plan:
        for i in range(n):
            e = c * t
            y = g.conv(h, c, e, k=1, act="Relu6") if t != 1 else h
            y = g.conv(y, e, e, stride=s if i == 0 else 1, group=e, act="Relu6")
            y = g.conv(y, e, co, k=1, act=None)
            h = g.op("Add", [h, y]) if (i > 0 and c == co) else y
            c = co
    h = g.conv(h, c, 640, k=1, act="Relu6")
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])])
    return g.model("X", (1, 3, hw, hw), g.dense(h, 640, 1000, act=None), (1, 1000), name)


def resnet_blocks(name: str, hw: int, channels: int, blocks: int, seed: int):
    """A 7x7/2 stem + max-pool, then ``blocks`` basic blocks (two 3x3 convs, identity Add, ReLU)."""
    g = _G(seed)
    h = g.op("MaxPool", [g.conv("X", 3, channels, k=7, stride=2)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for _ in range(blocks):
        y = g.conv(g.conv(h, channels, channels), channels, channels, act=None)
        h = g.op("Relu", [g.op("Add", [h, y])])
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])])
    return g.model("X", (1, 3, hw, hw), g.dense(h, channels, 100, act=None), (1, 100), name)


def transformer(name: str, seq: int, d: int, heads: int, layers: int, ff: int, seed: int):
    """Post-LN encoder layers as exported graphs spell them: Q/K/V MatMul + Add, Reshape/Transpose
    to heads, scaled QK^T, Softmax, .V, merge heads, projection, residual + LayerNorm, FFN with
    erf-GELU, residual + LayerNorm. Input: [1, seq, d] embeddings."""
    g = _G(seed)
    dh = d // heads
    split, merge = g.const([1, seq, heads, dh]), g.const([1, seq, d])
    scale = g.const(1.0 / math.sqrt(dh), np.float32)
    inv_sqrt2, half, one = g.const(1 / math.sqrt(2), np.float32), g.const(0.5, np.float32), g.const(1.0, np.float32)
    h = "X"
    for _ in range(layers):
        def heads_of(t, perm):
            return g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)
        q = heads_of(g.dense(h, d, d, act=None), [0, 2, 1, 3])
        k = heads_of(g.dense(h, d, d, act=None), [0, 2, 3, 1])
        v = heads_of(g.dense(h, d, d, act=None), [0, 2, 1, 3])
        a = g.op("Softmax", [g.op("Mul", [g.op("MatMul", [q, k]), scale])], axis=-1)
        o = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [a, v])], perm=[0, 2, 1, 3]), merge])
        h = g.layernorm(g.op("Add", [h, g.dense(o, d, d, act=None)]), d)
        f = g.dense(h, d, ff, act=None)
        f = g.op("Mul", [g.op("Mul", [f, half]), g.op("Add", [g.op("Erf", [g.op("Mul", [f, inv_sqrt2])]), one])])
        h = g.layernorm(g.op("Add", [h, g.dense(f, ff, d, act=None)]), d)
    return g.model("X", (1, seq, d), h, (1, seq, d), name)


# name -> (family, builder). Seeds differ per network so that no two share weights.
NETWORKS: dict[str, tuple[str, Callable]] = {
    "mlp_small": ("mlp", lambda: mlp("mlp_small", 1, (256, 512, 256, 10), 101)),
    "mlp_large": ("mlp", lambda: mlp("mlp_large", 1, (1024, 4096, 4096, 1000), 102)),
    "mlp_batch64": ("mlp", lambda: mlp("mlp_batch64", 64, (784, 1024, 1024, 10), 103)),
    "cnn_small": ("cnn", lambda: vgg("cnn_small", 32, ((32, 2), (64, 2), (128, 2)), 10, 104)),
    "cnn_large": ("cnn", lambda: vgg("cnn_large", 160, ((32, 1), (64, 2), (128, 2), (256, 2)), 1000, 105)),
    "resnet_blocks": ("cnn", lambda: resnet_blocks("resnet_blocks", 224, 64, 4, 106)),
    "dwcnn_v1_small": ("dwcnn", lambda: mobilenet_v1("dwcnn_v1_small", 128, 0.5, 107)),
    "dwcnn_v2": ("dwcnn", lambda: mobilenet_v2("dwcnn_v2", 224, 108)),
    "transformer_small": ("transformer", lambda: transformer("transformer_small", 32, 128, 4, 2, 512, 109)),
    "transformer_medium": ("transformer", lambda: transformer("transformer_medium", 128, 384, 6, 4, 1536, 110)),
    "transformer_large": ("transformer", lambda: transformer("transformer_large", 256, 768, 12, 2, 3072, 111)),
}


def family(name: str) -> str:
    """The family of a network of this set, the fresh set (``heldout_fresh``) or the third and
    fourth (``heldout_paired``), which share this module's machinery."""
    from nearfaas.twin import heldout_fresh, heldout_paired

    sets = (NETWORKS, heldout_fresh.NETWORKS, *heldout_paired.SETS.values())
    return next((s[name] for s in sets if name in s), ("app",))[0]


def build(name: str, networks: dict | None = None, what: str = "held-out"):
    """The ONNX model of one network of ``networks`` (this set by default; ``heldout_fresh``
    passes its own), deterministic: seeded weights."""
    networks = NETWORKS if networks is None else networks
    if name not in networks:
        raise ValueError(f"unknown {what} network {name!r}; known: {', '.join(networks)}")
    return networks[name][1]()


def build_all() -> dict:
    return {n: build(n) for n in NETWORKS}


def runtime_graphs(models: dict, have: dict, prefix: str, say=lambda message: None) -> tuple[dict, bool]:
    """ONNX Runtime's optimised graph of each network ("<prefix>:<name>"; derived, no timing),
    reusing ``have``'s where its digest matches today's build: (graphs, changed)."""
    from nearfaas.twin import cpu_model as C

    out, changed = {}, False
    for n, m in models.items():
        key = f"{prefix}:{n}"
        if (have.get(key) or {}).get("digest") == digest(m):
            out[key] = have[key]
        else:
            say(f"ONNX Runtime's optimised graph of {key}")
            out[key], changed = {**C.runtime_graph(m), "digest": digest(m)}, True
    return out, changed


def digest(model) -> str:
    """A content hash of the graph and weights: the cache key of a measurement."""
    return hashlib.sha256(model.SerializeToString()).hexdigest()[:16]


def feeds(model) -> dict[str, np.ndarray]:
    """Seed-0 standard-normal inputs of the model's (fixed) input shapes."""
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def measure(threads: int, models: dict, progress=None, target_s: float = 0.01, reps: int = 11) -> dict:
    """f2 of each network at ``threads`` intra-op threads, through the wrapper the apps' f2 uses
    (``nearfaas.models.runtime.InferenceSession``: its feed checks + ``session.run``, same session
    options). Timed as the micro-benchmarks are (``host_bench._time_run``): at 1 thread the median
    THREAD CPU time of ``reps`` repeats of >= ``target_s`` (immune to time slicing by the other
    work on this shared machine; ONNX Runtime runs the graph on the calling thread), at more
    threads the best single-run wall time. A hot loop: steady state, not a one-off call."""
    from nearfaas.hw.devices.host_bench import _time_run
    from nearfaas.models.runtime import InferenceSession

    say = progress or (lambda m: None)
    out = {}
    with tempfile.TemporaryDirectory(prefix="nearfaas-heldout-") as tmp:
        for name, m in models.items():
            say(f"held-out f2 at {threads} thread(s): {name}")
            p = Path(tmp) / f"{name}.onnx"
            p.write_bytes(m.SerializeToString())
            sess = InferenceSession(p, threads=threads)
            f = feeds(m)
            load0 = list(os.getloadavg())
            t0 = time.perf_counter()
            r = _time_run(lambda s=sess, f=f: s.run(f), target_s, reps, threads)
            out[name] = {"threads": threads, "value_s": r["value_s"], "estimator": r["estimator"], "inner": r["inner"],
                         "reps": r["reps"], "wall_median_s": r["median_s"], "wall_best_s": r["best_s"], "digest": digest(m),
                         "family": family(name), "seconds_spent": round(time.perf_counter() - t0, 2),
                         "loadavg_before": load0, "loadavg_after": list(os.getloadavg())}
            del sess
    return out


def evaluate(bench: dict, overhead: dict | None, threads: int, measured: dict, rts: dict, models: dict, form: str,
             geo_target: float, worst_target: float) -> dict:
    """Predicted (each form of ``cpu_model``) vs measured f2 of the held-out networks at ``threads``.
    ``measured``: {name: measure()'s entry}; ``rts``: {name: runtime_graph}. ``form`` heads it."""
    from nearfaas.twin import cpu_model as C
    from nearfaas.twin.validate import relative_error

    forms = [f for f in C.FORMS if (f not in ("runtime", "runtime2") or overhead is not None) and (f != "runtime2" or "kernels" in overhead)]
    rows, err = {}, {f: {} for f in forms}
    for name, m in models.items():
        sk = C.skeleton_of(m)
        meas = float(measured[name]["value_s"])
        pred = {f: C.predict(bench, threads, sk, f, overhead=overhead, rt=rts.get(name)) for f in forms}
        for f in forms:
            err[f][name] = relative_error(pred[f]["seconds"], meas)
        rows[name] = {"family": family(name), "measured_s": meas, "measured_estimator": measured[name]["estimator"],
                      "flops": pred[forms[0]]["flops"], "layers": pred[forms[0]]["layers"],
                      **{f"predicted_{f}_s": round(pred[f]["seconds"], 9) for f in forms},
                      **{f"error_{f}": round(err[f][name], 4) for f in forms},
                      **{f: {k: (round(v, 9) if isinstance(v, float) else v) for k, v in pred[f].items()} for f in forms}}

    def summ(e: dict) -> dict:
        st = summary_stats(e)
        over = sorted(k for k, x in e.items() if abs(x) > worst_target)
        return {"per_model_error": {k: round(x, 4) for k, x in e.items()}, **st, "models_over_worst_target": over,
                "pass": st["geomean_abs_error"] <= geo_target and not over}

    if form not in err:
        raise ValueError(f"held-out: form {form!r} needs the overhead micro-benchmarks")
    return {**summ(err[form]), "form": form, "threads": threads, "networks": len(models),
            "forms": {f: summ(err[f]) for f in forms if f != form}, "models": rows}


def inputs(threads: tuple[int, ...], cached: dict, do_measure: bool, say, names: tuple[str, ...] | None = None,
           app_models: tuple[str, ...] = ()) -> tuple[dict | None, dict, dict, dict, bool]:
    """What the runtime form and the held-out check need, cached in cpu_validation.json or measured
    when missing (``do_measure``; else ValueError): (overhead per thread, runtime graphs by
    "zoo:<model>" / "heldout:<name>", held-out f2 per thread, the built models, changed). A cached
    held-out measurement whose network digest differs from today's build is measured again."""
    from nearfaas.twin import cpu_model as C

    names = tuple(names or NETWORKS)
    changed = False
    overhead = dict(cached.get("overhead") or {})
    for t in threads:
        if str(t) not in overhead:
            if not do_measure:
                raise ValueError(f"no overhead micro-benchmarks at {t} thread(s) in the cache; run validate(measure=True)")
            say(f"overhead micro-benchmarks at {t} thread(s) (reorders, Relu chains)")
            overhead[str(t)] = C.measure_overhead(t)
            changed = True
        if "kernels" not in overhead[str(t)]:  # the runtime2 form's micro-benchmarks (cpu_kernels), added in the second attempt
            if not do_measure:
                raise ValueError(f"no kernel micro-benchmarks at {t} thread(s) in the cache; run validate(measure=True)")
            from nearfaas.twin.cpu_kernels import measure_kernels

            say(f"kernel micro-benchmarks at {t} thread(s) (GEMV, batched MatMul, scans, conv and reorder chains)")
            overhead[str(t)] = {**overhead[str(t)], "kernels": measure_kernels(t, progress=say)}
            changed = True
    models = {n: build(n) for n in names}
    rts = dict(cached.get("runtime_graphs") or {})
    want = [(f"zoo:{m}", lambda m=m: C.zoo_runtime_graph(m)) for m in app_models]
    want += [(f"heldout:{n}", lambda n=n: {**C.runtime_graph(models[n]), "digest": digest(models[n])}) for n in names]
    for key, get in want:
        stale = key.startswith("heldout:") and key in rts and rts[key].get("digest") != digest(models[key[8:]])
        if key not in rts or stale:
            say(f"ONNX Runtime's optimised graph of {key}")
            rts[key] = get()  # derived (ORT's graph rewrite, no timing): computed even when not measuring
            changed = True
    held = {t: dict(v) for t, v in (cached.get("held_out_measured") or {}).items()}
    for t in threads:
        have = held.setdefault(str(t), {})
        missing = {n: models[n] for n in names if (have.get(n) or {}).get("digest") != digest(models[n])}
        if missing:
            if not do_measure:
                raise ValueError(f"no {t}-thread held-out measurement of {', '.join(missing)}; run validate(measure=True)")
            have.update(measure(t, missing, progress=say))
            changed = True
    return overhead, rts, held, models, changed


def summary_stats(errors: dict[str, float]) -> dict:
    """geomean |error|, worst |error| and its network."""
    from nearfaas.twin.validate import geomean_abs

    worst = max(errors, key=lambda k: abs(errors[k]))
    return {"geomean_abs_error": round(geomean_abs(errors.values()), 4), "worst_abs_error": round(abs(errors[worst]), 4),
            "worst": worst, "median_error": round(statistics.median(errors.values()), 4)}
