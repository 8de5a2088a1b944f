"""The micro-benchmarks ``nearfaas.hw.devices.host`` describes this machine's CPU with: machine facts
from /proc/cpuinfo, the C clock/FMA/triad kernels, the ONNX Runtime one-op graphs, the dispatch
cost and the MatMul grid, and ``measure`` running them all. ``nearfaas.hw.devices.host``
re-exports every name here."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from nearfaas import atomic


# ------------------------------------------------------------------------------ machine facts


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_facts() -> dict[str, Any]:
    """What /proc/cpuinfo and lscpu say about this CPU (read, not measured)."""
    info: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").splitlines():
        if ":" in line:
            k, v = (x.strip() for x in line.split(":", 1))
            info.setdefault(k, v)
    flags = set(info.get("flags", "").split())
    lscpu: dict[str, str] = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if ":" in line:
                k, v = (x.strip() for x in line.split(":", 1))
                lscpu[k] = v
    except (OSError, subprocess.SubprocessError):
        pass
    vendor = info.get("vendor_id", "")
    family = int(info.get("cpu family", "0") or 0)
    model = int(info.get("model", "0") or 0)
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    return {
        "model_name": info.get("model name", ""),
        "vendor": vendor,
        "family": family,
        "model": model,
        "microarchitecture": _uarch(vendor, family, model),
        "logical_cpus": os.cpu_count(),
        "threads_per_core": lscpu.get("Thread(s) per core"),
        "cores_per_socket": lscpu.get("Core(s) per socket"),
        "hypervisor": lscpu.get("Hypervisor vendor"),
        "nominal_mhz": float(info.get("cpu MHz", "0") or 0),
        "caches": {k: lscpu[k] for k in ("L1d cache", "L2 cache", "L3 cache") if k in lscpu},
        "simd_flags": sorted(f for f in flags if f in {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                                        "avx512_vnni", "avx512_bf16", "amx_tile"}),
        "fp32_simd_lanes": lanes,
        "fp32_simd_lanes_source": "/proc/cpuinfo flags: " + ("avx512f -> 512-bit = 16 fp32 lanes" if lanes == 16
                                                             else "avx2 -> 256-bit = 8 fp32 lanes" if lanes == 8 else "sse -> 4 lanes"),
        "kernel": platform.release(),
    }


def _uarch(vendor: str, family: int, model: int) -> str:
    if vendor == "AuthenticAMD" and family == 0x19:
        return "zen4" if (0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF) else "zen3"
    if vendor == "AuthenticAMD" and family == 0x17:
        return "zen2"
    return "unknown"


# ------------------------------------------------------------------------------ C micro-benchmarks

C_SOURCE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double tcpu(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
/* register-register adds: Intel Golden Cove and later execute a dependent add-IMMEDIATE chain at the renamer
   (several per cycle), which made the clock read ~6x high there; a reg-reg add keeps its 1-cycle latency */
#define A8 "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t" "add %1,%0\n\t"
static long N, REPS; static const char *KIND; static pthread_barrier_t BAR; static volatile double SINK;
static double *T0, *T1, *C; /* [rep][thread] wall start and end of each thread's kernel, its CPU seconds */
static int NT;
static void kclock(void){ long x=0; long one=SINK>-1.0?1:2; for(long i=0;i<N;i++){ __asm__ volatile(A8 A8 : "+r"(x) : "r"(one)); } SINK+=x; }
#define CH(F,K) a##K=F(a##K,b,c);
#define FMA_BODY(T,SET,F,ADD,STORE,W) { T b=SET(0.999999f), c=SET(1e-7f); \
  T a0=SET(1.000f),a1=SET(1.001f),a2=SET(1.002f),a3=SET(1.003f),a4=SET(1.004f),a5=SET(1.005f), \
    a6=SET(1.006f),a7=SET(1.007f),a8=SET(1.008f),a9=SET(1.009f),a10=SET(1.010f),a11=SET(1.011f); \
  for(long i=0;i<N;i++){ CH(F,0) CH(F,1) CH(F,2) CH(F,3) CH(F,4) CH(F,5) CH(F,6) CH(F,7) CH(F,8) CH(F,9) CH(F,10) CH(F,11) } \
  T s=ADD(ADD(ADD(a0,a1),ADD(a2,a3)),ADD(ADD(a4,a5),ADD(a6,a7))); s=ADD(s,ADD(ADD(a8,a9),ADD(a10,a11))); \
  float o[W]; STORE(o,s); SINK+=o[0]; }
__attribute__((target("avx512f"))) static void kfma512(void) FMA_BODY(__m512,_mm512_set1_ps,_mm512_fmadd_ps,_mm512_add_ps,_mm512_storeu_ps,16)
__attribute__((target("avx2,fma"))) static void kfma256(void) FMA_BODY(__m256,_mm256_set1_ps,_mm256_fmadd_ps,_mm256_add_ps,_mm256_storeu_ps,8)
#define SN (16L<<20)
static void ktriad(float *a,float *b,float *c){ for(long r=0;r<N;r++){ for(long i=0;i<SN;i++) a[i]=b[i]+0.5f*c[i]; b[r%SN]+=a[(r*7)%SN]; } }
static void *worker(void *arg){ long id=(long)arg; float *a=0,*b=0,*c=0;
  if(!strcmp(KIND,"triad")){ a=aligned_alloc(64,SN*4); b=aligned_alloc(64,SN*4); c=aligned_alloc(64,SN*4);
    for(long i=0;i<SN;i++){a[i]=0;b[i]=1;c[i]=2;} }
  for(long r=0;r<REPS;r++){
    pthread_barrier_wait(&BAR); double c0=tcpu(); T0[r*NT+id]=now();
    if(!strcmp(KIND,"clock")) kclock(); else if(!strcmp(KIND,"fma512")) kfma512(); else if(!strcmp(KIND,"fma256")) kfma256(); else ktriad(a,b,c);
    T1[r*NT+id]=now(); C[r*NT+id]=tcpu()-c0; }
  if(a){ SINK+=a[1]; free(a); free(b); free(c); }
  return 0; }
/* usage: ub KIND THREADS N REPS -> one JSON line: every rep's seconds (the first thread's start to
   the last thread's end, each thread timing itself) and CPU seconds, and the work units per thread per rep */
int main(int argc,char**argv){ if(argc<5){fprintf(stderr,"usage: ub clock|fma512|fma256|triad THREADS N REPS\n");return 2;}
  KIND=argv[1]; int T=atoi(argv[2]); N=atol(argv[3]); REPS=atol(argv[4]); pthread_t th[64]; if(T<1||T>64||REPS<1) return 2;
  double *ts=malloc(sizeof(double)*REPS); NT=T; T0=malloc(sizeof(double)*REPS*T); T1=malloc(sizeof(double)*REPS*T); C=malloc(sizeof(double)*REPS*T);
  pthread_barrier_init(&BAR,0,T);
  for(long i=0;i<T;i++) pthread_create(&th[i],0,worker,(void*)i);
  for(int i=0;i<T;i++) pthread_join(th[i],0);
  for(long r=0;r<REPS;r++){ double a=T0[r*T], b=T1[r*T]; for(int i=1;i<T;i++){ if(T0[r*T+i]<a) a=T0[r*T+i]; if(T1[r*T+i]>b) b=T1[r*T+i]; } ts[r]=b-a; }
  double per; /* work units per thread per rep */
  if(!strcmp(KIND,"clock")) per=16.0*N; else if(!strcmp(KIND,"fma512")) per=12.0*32.0*N;
  else if(!strcmp(KIND,"fma256")) per=12.0*16.0*N; else per=12.0*(double)SN*N;
  printf("{\"kind\":\"%s\",\"threads\":%d,\"n\":%ld,\"per_thread_units\":%.6e,\"seconds\":[",KIND,T,N,per);
  for(long r=0;r<REPS;r++) printf("%s%.9f",r?",":"",ts[r]);
  printf("],\"cpu_seconds\":[");  /* per rep: the slowest thread's own CPU time (immune to time slicing) */
  for(long r=0;r<REPS;r++){ double m=C[r*T]; for(int i=1;i<T;i++) if(C[r*T+i]>m) m=C[r*T+i]; printf("%s%.9f",r?",":"",m); }
  printf("]}\n"); return 0; }
"""


def _ub_binary() -> Path | None:
    """The compiled C micro-benchmark (cached by source hash), or None without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nearfaas" / "ubench" / digest
    exe = root / "ub"
    if exe.is_file():
        return exe
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        src = Path(tmp) / "ub.c"
        src.write_text(C_SOURCE)
        out = Path(tmp) / "ub"
        r = subprocess.run([cc, "-O2", "-pthread", "-o", str(out), str(src)], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        atomic.publish(out, exe, durable=False)  # a cache: rebuilt if a crash loses it
    return exe


def _ub(exe: Path, kind: str, threads: int, n: int, reps: int) -> dict:
    """Run a C micro-benchmark: ``reps`` repeats in one process (all threads start each repeat
    together at a barrier). Two rates per repeat: by CPU time (work / the slowest thread's own CPU
    seconds: what the core does while it runs, immune to time slicing by other processes) and by
    wall span (first start to last end: needs the threads to run at once). The rate is per
    thread for ``clock`` (Hz), for all threads together otherwise (FLOP/s, bytes/s)."""
    r = subprocess.run([str(exe), kind, str(threads), str(n), str(reps)], capture_output=True, text=True, timeout=600, check=True)
    d = json.loads(r.stdout)
    units = d["per_thread_units"] * (1 if kind == "clock" else threads)
    by_cpu = [units / t for t in d["cpu_seconds"] if t > 0]
    by_wall = [units / t for t in d["seconds"] if t > 0]
    return {"cpu_time_median": statistics.median(by_cpu), "cpu_time_best": max(by_cpu), "wall_best": max(by_wall),
            "wall_median": statistics.median(by_wall), "runs": len(by_cpu), "cpu_seconds_per_run": statistics.median(d["cpu_seconds"])}


# ------------------------------------------------------------------------------ ONNX Runtime micro-benchmarks


def _session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()  # the options nearfaas.models.InferenceSession uses
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _graph(nodes, inputs, outputs, inits=()):
    from onnx import helper

    g = helper.make_graph(nodes, "ubench", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _vi(name, shape):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _time_run(run, target_s: float, reps: int, threads: int = 1) -> dict:
    """Time ``run``. With one thread ONNX Runtime runs the graph on the calling thread, so each
    repeat's THREAD CPU time is what the op costs while it runs (immune to time slicing on a
    shared machine): ``reps`` repeats of at least ``target_s``, ``value_s`` = the median. With more
    threads the workers' time is not on this thread and every worker must run at once: single runs,
    up to 101 (about 1 s of runs, at least ``reps``), ``value_s`` = the fastest wall time."""
    run()  # warm-up (allocations, kernel selection)
    t = time.perf_counter()
    run()
    one = max(time.perf_counter() - t, 1e-7)
    if threads == 1:
        inner = max(1, int(target_s / one))
        wall, cpu = [], []
        for _ in range(reps):
            c, t = time.thread_time(), time.perf_counter()
            for _ in range(inner):
                run()
            wall.append((time.perf_counter() - t) / inner)
            cpu.append((time.thread_time() - c) / inner)
        return {"value_s": statistics.median(cpu), "estimator": "median thread CPU time", "best_s": min(wall),
                "median_s": statistics.median(wall), "cpu_median_s": statistics.median(cpu), "inner": inner, "reps": reps}
    n = int(min(101, max(reps, 1.0 / one)))
    wall = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        wall.append(time.perf_counter() - t)
    return {"value_s": min(wall), "estimator": "best single-run wall time", "best_s": min(wall), "median_s": statistics.median(wall),
            "inner": 1, "reps": n}


def _ort_case(name: str, model, feeds: dict, threads: int, flops: float, nbytes: float, target_s: float, reps: int) -> dict:
    s = _session(model, threads)
    out = _time_run(lambda: s.run(None, feeds), target_s, reps, threads)
    out.update({"case": name, "flops": flops, "bytes": nbytes})
    return out


def _matmul_case(arr, n):
    from onnx import helper, numpy_helper

    def build():
        w = numpy_helper.from_array(arr(n, n), "W")
        m = _graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], [_vi("A", (n, n))], [_vi("Y", (n, n))], [w])
        return m, {"A": arr(n, n)}, 2.0 * n**3, 4.0 * 3 * n * n
    return build


def _w_elems(co, ci, k):
    return co * ci * k * k


def _conv_case(arr, quick, c_in, c_out, hw, k, group=1):
    from onnx import helper, numpy_helper

    if quick:
        c_in, c_out, hw = c_in // 8, c_out // 8, hw // 4
        group = c_in if group > 1 else 1

    def build():
        w = numpy_helper.from_array(arr(c_out, c_in // group, k, k), "W")
        b = numpy_helper.from_array(arr(c_out), "B")
        node = helper.make_node("Conv", ["X", "W", "B"], ["Y"], kernel_shape=[k, k], pads=[k // 2] * 4, group=group)
        m = _graph([node], [_vi("X", (1, c_in, hw, hw))], [_vi("Y", (1, c_out, hw, hw))], [w, b])
        macs = hw * hw * c_out * (c_in // group) * k * k
        return m, {"X": arr(1, c_in, hw, hw)}, 2.0 * macs, 4.0 * (c_in * hw * hw + c_out * hw * hw + _w_elems(c_out, c_in // group, k))
    return build


def _unary_case(arr, op, n):
    from onnx import helper

    from ..dsa.graph import ELEMENTWISE

    def build():
        m = _graph([helper.make_node(op, ["X"], ["Y"])], [_vi("X", (n,))], [_vi("Y", (n,))])
        return m, {"X": arr(n)}, float(ELEMENTWISE.get(op, 1) * n), 8.0 * n
    return build


def _binary_case(arr, op, n):
    from onnx import helper

    from ..dsa.graph import ELEMENTWISE

    def build():
        m = _graph([helper.make_node(op, ["X", "Z"], ["Y"])], [_vi("X", (n,)), _vi("Z", (n,))], [_vi("Y", (n,))])
        return m, {"X": arr(n), "Z": arr(n)}, float(ELEMENTWISE.get(op, 1) * n), 12.0 * n
    return build


def _reduction_case(arr, op, rows, cols):
    import numpy as np
    from onnx import helper, numpy_helper

    from ..dsa.graph import REDUCTION

    def build():
        n = rows * cols
        if op == "LayerNormalization":
            sc = numpy_helper.from_array(np.ones(cols, np.float32), "S")
            bi = numpy_helper.from_array(np.zeros(cols, np.float32), "Bz")
            node = helper.make_node(op, ["X", "S", "Bz"], ["Y"], axis=-1)
            m = _graph([node], [_vi("X", (rows, cols))], [_vi("Y", (rows, cols))], [sc, bi])
            out = n
        elif op == "ReduceMean":
            node = helper.make_node(op, ["X"], ["Y"], axes=[1], keepdims=1)
            m = _graph([node], [_vi("X", (rows, cols))], [_vi("Y", (rows, 1))])
            out = rows
        else:
            m = _graph([helper.make_node(op, ["X"], ["Y"], axis=-1)], [_vi("X", (rows, cols))], [_vi("Y", (rows, cols))])
            out = n
        return m, {"X": arr(rows, cols)}, float(REDUCTION.get(op, 1) * n), 4.0 * (n + out)
    return build


def _transpose_case(arr, shape, perm):
    import numpy as np
    from onnx import helper

    def build():
        n = int(np.prod(shape))
        out = [shape[p] for p in perm]
        m = _graph([helper.make_node("Transpose", ["X"], ["Y"], perm=list(perm))], [_vi("X", shape)], [_vi("Y", out)])
        return m, {"X": arr(*shape)}, float(n), 8.0 * n  # one copy per element, as the DSA compiler counts layout ops
    return build


def ort_cases(quick: bool = False) -> list[tuple[str, str, str, Any]]:
    """The fixed ONNX Runtime micro-benchmarks: (op class, role, name, builder). Shapes are generic
    (square MatMuls, textbook convs, large/small tensors); ``quick`` shrinks them for tests."""
    import numpy as np

    rng = np.random.default_rng(0)
    big = 1 << (16 if quick else 24)  # out-of-cache: 64 MiB per fp32 tensor (L3 is 32 MiB here)
    small = 1 << (12 if quick else 18)  # in cache: 1 MiB per tensor (L2 1 MiB/core, L3 32 MiB here)
    sq = (64, 128, 256) if quick else (256, 512, 1024)

    def arr(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    def conv(*args, **kw):
        return _conv_case(arr, quick, *args, **kw)

    def unary(op, n):
        return _unary_case(arr, op, n)

    def binary(op, n):
        return _binary_case(arr, op, n)

    def reduction(op, rows, cols):
        return _reduction_case(arr, op, rows, cols)

    def transpose(shape, perm):
        return _transpose_case(arr, shape, perm)

    side = 2048 if quick else 4096
    return [
        *[("gemm", "compute", f"MatMul {n}x{n}x{n}", _matmul_case(arr, n)) for n in sq],
        ("conv", "compute", "Conv 3x3 64->64 @56x56", conv(64, 64, 56, 3)),
        ("conv", "compute", "Conv 3x3 256->256 @14x14", conv(256, 256, 14, 3)),
        ("conv", "compute", "Conv 1x1 256->256 @28x28", conv(256, 256, 28, 1)),
        ("dwconv", "compute", "depthwise Conv 3x3 128ch @56x56", conv(128, 128, 56, 3, group=128)),
        ("elementwise", "compute", f"Add [{small}] in cache", binary("Add", small)),
        ("elementwise", "compute", f"Tanh [{small}] in cache", unary("Tanh", small)),
        ("elementwise", "compute", f"Sigmoid [{small}] in cache", unary("Sigmoid", small)),
        ("elementwise", "bandwidth", f"Add [{big}] streaming", binary("Add", big)),
        ("reduction", "compute", "Softmax [512x512] in cache", reduction("Softmax", 512, 512)),
        ("reduction", "compute", "LayerNormalization [512x512] in cache", reduction("LayerNormalization", 512, 512)),
        ("reduction", "compute", "ReduceMean [512x512] in cache", reduction("ReduceMean", 512, 512)),
        ("reduction", "bandwidth", f"Softmax [{side}x{side}] streaming", reduction("Softmax", side, side)),
        ("layout", "compute", "Transpose [512x512] in cache", transpose((512, 512), (1, 0))),
        ("layout", "compute", "Transpose [8x64x8x64] (0,2,1,3) in cache", transpose((8, 64, 8, 64), (0, 2, 1, 3))),
        ("layout", "bandwidth", f"Transpose [{side}x{side}] streaming", transpose((side, side), (1, 0))),
    ]


GRID_M = (16, 128, 1024)
GRID_KN = (64, 512, 4096)


def _gemm_grid(threads: int, reps: int, quick: bool, say) -> list[dict]:
    """ONNX Runtime MatMul (activations [M, K] x weight initializer [K, N]) over a fixed generic
    grid, M in GRID_M and K, N in GRID_KN (powers of 8 apart; chosen before any comparison):
    the fraction of peak each reaches, for the refined form's shape-aware GEMM efficiency."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(1)
    ms, kns = ((16, 128), (64, 512)) if quick else (GRID_M, GRID_KN)
    out = []
    for m in ms:
        for k in kns:
            for n in kns:
                say(f"{threads} thread(s): ORT MatMul grid {m}x{k}x{n}")
                w = numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "W")
                g = _graph([helper.make_node("MatMul", ["A", "W"], ["Y"])], [_vi("A", (m, k))], [_vi("Y", (m, n))], [w])
                r = _ort_case(f"MatMul {m}x{k}x{n}", g, {"A": rng.standard_normal((m, k), dtype=np.float32)}, threads,
                              2.0 * m * k * n, 4.0 * (m * k + k * n + m * n), 0.01, reps)
                r.update({"M": m, "K": k, "N": n})
                out.append(r)
    return out


def _dispatch(threads: int, target_s: float, reps: int, quick: bool) -> dict:
    """Per-node dispatch (a chain of 100 Adds on 16-element tensors minus a 1-node graph, per
    extra node) and per-call cost (the 1-node graph through nearfaas's InferenceSession.run,
    the wrapper f2 calls, minus nothing: that is the whole fixed cost of one call), for a graph of
    two inputs and of one (``per_call_by_inputs``: the wrapper checks each input)."""
    import numpy as np
    from onnx import helper, numpy_helper

    chain = 100

    def model(nodes):
        ns, prev = [], "X"
        for i in range(nodes):
            out = "Y" if i == nodes - 1 else f"t{i}"
            ns.append(helper.make_node("Add", [prev, "Z"], [out]))
            prev = out
        return _graph(ns, [_vi("X", (16,)), _vi("Z", (16,))], [_vi("Y", (16,))])

    feeds = {"X": np.ones(16, np.float32), "Z": np.ones(16, np.float32)}
    s1, sn = _session(model(1), threads), _session(model(chain), threads)
    t1 = _time_run(lambda: s1.run(None, feeds), target_s, reps, threads)
    tn = _time_run(lambda: sn.run(None, feeds), target_s, reps, threads)
    per_node = max((tn["value_s"] - t1["value_s"]) / (chain - 1), 0.0)
    # the per-call cost through the wrapper f2 uses (its feed checks included)
    from nearfaas.models.runtime import InferenceSession

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "one.onnx"
        p.write_bytes(model(1).SerializeToString())
        w = InferenceSession(p, threads=threads)
        tw = _time_run(lambda: w.run(feeds), target_s, reps, threads)
        # the same graph with Z a weight: one input to check instead of two (the wrapper's cost grows with the inputs)
        one = model(1)
        one.graph.input.pop()
        one.graph.initializer.append(numpy_helper.from_array(np.ones(16, np.float32), "Z"))
        p.write_bytes(one.SerializeToString())
        w1 = InferenceSession(p, threads=threads)
        tw1 = _time_run(lambda: w1.run({"X": feeds["X"]}), target_s, reps, threads)
    return {"one_node": t1, "chain": tn, "chain_nodes": chain, "per_node_s": per_node,
            "per_call_s": max(tw["value_s"] - per_node, 0.0), "wrapper_one_node": tw,
            "per_call_by_inputs": {"1": max(tw1["value_s"] - per_node, 0.0), "2": max(tw["value_s"] - per_node, 0.0)}}


# ------------------------------------------------------------------------------ measure everything


def measure(threads: tuple[int, ...] = (1, 2), quick: bool = False, progress=None, rounds: int | None = None) -> dict:
    """Run every micro-benchmark at each thread count, ``rounds`` times (default 3, interleaved over
    the thread counts so that the rounds are minutes apart), and keep each figure's MEDIAN over the
    rounds (the load of this shared machine changes from minute to minute; one round's figures
    move by up to ~10 %). A JSON-able record (label: measured); every round's figures are kept."""
    say = progress or (lambda msg: None)
    rounds = rounds or (1 if quick else 3)
    facts = cpu_facts()
    exe = _ub_binary()
    reps, target = (3, 0.005) if quick else (31, 0.01)
    out: dict[str, Any] = {
        "label": "measured: micro-benchmarks on this machine (not the applications)",
        "estimator": ("each figure: the median over {n} rounds of: compute kernels at 1 thread by CPU time (immune to time "
                      "slicing on this shared machine): C clock/FMA median of 7 sustained runs, ONNX Runtime median thread CPU "
                      f"time of {reps} repeats of >= {target * 1e3:g} ms (MatMul grid: 15); what needs both cores at once by the "
                      "best wall time (interference only slows a run): C kernels at 2 threads by CPU time too (each core's "
                      "own rate), triad best of 80 one-pass repeats, ONNX Runtime at > 1 thread best single run of up to 101 "
                      "(about 1 s of runs)").replace("{n}", str(rounds)),
        "cpu": facts,
        "loadavg_at_start": list(os.getloadavg()),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "c_compiler": bool(exe),
        "rounds": rounds,
        "threads": {},
    }
    import onnxruntime

    out["onnxruntime"] = onnxruntime.__version__
    cases = ort_cases(quick)
    raw: dict[int, list[dict]] = {t: [] for t in threads}
    for r in range(rounds):
        for t in threads:
            raw[t].append(_suite(t, exe, facts, cases, quick, reps, target, lambda m, r=r: say(f"round {r + 1}/{rounds}, {m}")))
    for t in threads:
        out["threads"][str(t)] = _combine(raw[t])
    out["loadavg_at_end"] = list(os.getloadavg())
    return out


def _suite(t: int, exe, facts: dict, cases, quick: bool, reps: int, target: float, say) -> dict:
    """One round of every micro-benchmark at ``t`` threads."""
    rec: dict[str, Any] = {"loadavg_before": list(os.getloadavg())}
    if exe is not None:
        say(f"{t} thread(s): clock, FMA, stream")
        # clock and FMA: sustained runs (~0.2 s of CPU each), rate by CPU time, median of 7
        n_clk, n_fma, r_c = (200_000, 100_000, 3) if quick else (50_000_000, 5_000_000, 7)
        rec["clock_hz"] = _ub(exe, "clock", t, n_clk, r_c)
        lanes = facts["fp32_simd_lanes"]
        rec["fma_flops"] = {
            "zmm": _ub(exe, "fma512", t, n_fma, r_c) if lanes == 16 else None,
            "ymm": _ub(exe, "fma256", t, 2 * n_fma, r_c),
        }
        # bandwidth is shared by the cores: the best wall span of 80 one-pass repeats (~10 ms)
        rec["stream_triad_bytes_s"] = _ub(exe, "triad", t, 1, 5 if quick else 80)
        rec["clock_hz"]["value"] = rec["clock_hz"]["cpu_time_median"]
        for k in ("zmm", "ymm"):
            if rec["fma_flops"][k]:
                rec["fma_flops"][k]["value"] = rec["fma_flops"][k]["cpu_time_median"]
        rec["stream_triad_bytes_s"]["value"] = rec["stream_triad_bytes_s"]["wall_best"]
    else:
        rec["clock_hz"] = {"value": facts["nominal_mhz"] * 1e6, "runs": 0,
                           "note": "no C compiler: /proc/cpuinfo 'cpu MHz' (nominal, not measured)"}
        rec["fma_flops"] = None
        rec["stream_triad_bytes_s"] = _numpy_stream(t, quick)
    say(f"{t} thread(s): ORT dispatch")
    rec["dispatch"] = _dispatch(t, target, reps, quick)
    fixed = rec["dispatch"]["one_node"]["value_s"]  # call + one trivial node: charged apart (launch_s, driver_s)
    ort_rec = []
    for kind, role, name, build in cases:
        say(f"{t} thread(s): ORT {name}")
        m, feeds, flops, nbytes = build()
        r = _ort_case(name, m, feeds, t, flops, nbytes, target, reps)
        r.update({"class": kind, "role": role, "net_s": max(r["value_s"] - fixed, 1e-9),
                  "net_note": "value_s minus the 1-node graph's (per-call + per-node cost, modelled apart)"})
        ort_rec.append(r)
    rec["ort"] = ort_rec
    grid = _gemm_grid(t, 3 if quick else 15, quick, say)
    for r in grid:
        r["net_s"] = max(r["value_s"] - fixed, 1e-9)
    rec["gemm_grid"] = grid
    rec["loadavg_after"] = list(os.getloadavg())
    return rec


def _combine(rounds: list[dict]) -> dict:
    """The rounds of one thread count -> one record: every figure the median over the rounds (the
    first round's details kept for the rest), plus each round's figures under ``rounds``."""
    import copy

    med = statistics.median
    rec = copy.deepcopy(rounds[0])
    rec["clock_hz"]["value"] = med(r["clock_hz"]["value"] for r in rounds)
    if rec.get("fma_flops"):
        for k in ("zmm", "ymm"):
            if rec["fma_flops"].get(k):
                rec["fma_flops"][k]["value"] = med(r["fma_flops"][k]["value"] for r in rounds)
    rec["stream_triad_bytes_s"]["value"] = med(r["stream_triad_bytes_s"]["value"] for r in rounds)
    for k in ("per_node_s", "per_call_s"):
        rec["dispatch"][k] = med(r["dispatch"][k] for r in rounds)
    for i, c in enumerate(rec["ort"]):
        c["value_s"] = med(r["ort"][i]["value_s"] for r in rounds)
        c["net_s"] = med(r["ort"][i]["net_s"] for r in rounds)
    for i, g in enumerate(rec["gemm_grid"]):
        g["value_s"] = med(r["gemm_grid"][i]["value_s"] for r in rounds)
        g["net_s"] = med(r["gemm_grid"][i]["net_s"] for r in rounds)
    rec["loadavg_after"] = rounds[-1]["loadavg_after"]
    rec["rounds"] = [{"clock_hz": r["clock_hz"]["value"], "stream_bytes_s": r["stream_triad_bytes_s"]["value"],
                      "per_node_s": r["dispatch"]["per_node_s"], "per_call_s": r["dispatch"]["per_call_s"],
                      "ort_net_s": {c["case"]: c["net_s"] for c in r["ort"]},
                      "grid_net_s": [g["net_s"] for g in r["gemm_grid"]],
                      "loadavg_before": r["loadavg_before"], "loadavg_after": r["loadavg_after"]} for r in rounds]
    return rec


def _numpy_stream(threads: int, quick: bool) -> dict:
    import numpy as np

    n = 1 << (16 if quick else 24)
    a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)
    rates = []
    for _ in range(5):
        t = time.perf_counter()
        np.multiply(c, 0.5, out=a)
        np.add(a, b, out=a)
        rates.append(4.0 * 5 * n / (time.perf_counter() - t))  # two passes: 5 streams of n floats
    return {"value": max(rates), "wall_best": max(rates), "wall_median": statistics.median(rates), "runs": 5,
            "note": f"no C compiler: numpy two-pass triad, one thread (asked for {threads})"}
