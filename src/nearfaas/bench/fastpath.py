"""The fast path against λ-NIC's baselines, side by side in one run on the same inputs. Every
number is measured on this machine (labelled "measured").

Systems:
  fastpath-wasm     the executor (`nearfaas-fastpath --workers 1`) running the C lambdas as wasm
  fastpath-native   the same executor running its native Rust lambdas
  B1 forking        socketserver.ForkingUDPServer, a fork per request (nearfaas.fastpath.baselines)
  B2 threading      socketserver.ThreadingUDPServer, a thread per request
  B3 gateway        the nearfaas gateway to a warm Python worker over HTTP (wrk, keep-alive), the
                    handler returning the same web reply — the platform's normal path

UDP load comes from `nearfaas-fastpath-load` (Rust, closed loop, K outstanding on one socket).
Experiments: the web lambda with 1 and 32 outstanding; three distinct web lambdas round-robin vs
one; the image lambda (256x256 RGBA -> luma: memfd for the executor, TCP framing with a connection
per request for the baselines); the memcached lambda (a real memcached); fairness: a light lambda's
p99 alone vs beside a heavy lambda saturating the worker, under DRR with preemptive slices, DRR
running calls to completion, and FIFO (bench/fastpath_fair.py); λ-NIC's §5.1 optimizations, five
modules against one coalesced module (bench/fastpath_coalesce.py); what each poll mode costs.
Repeats are interleaved across systems; the reported numbers are medians of the repeats.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.fastpath_coalesce import coalescing
from nearfaas.bench.fastpath_fair import fairness, slice_cost, slice_sweep
from nearfaas.bench.fastpath_load import NATIVE, PAYLOAD_BYTES, WASM, load
from nearfaas.bench.fastpath_load import deploy_all as _deploy_all, median_of as _median, num as _num, row as _row, summarize as _summ
from nearfaas.bench.fastpath_poll import background_load, machine_state, poll_modes
from nearfaas.bench.load import generator, http_load
from nearfaas.stats import mean, percentile
from nearfaas.fastpath import baselines as bl
from nearfaas.fastpath.client import OK, MemfdClient, TcpClient, UdpClient, status_name
from nearfaas.fastpath.executor import Executor, ExecutorError, binary_path, build, lambda_path, load_binary_path

TARGETS = {"web_p50_us": 15.0, "rps_one_worker": 80_000, "x_lower_p50_than_forking": 50.0, "x_lower_p50_than_threading": 5.0,
           "throughput_loss_three_vs_one_pct": 10.0, "light_p99_under_wfq_x_isolated": 2.0}
FULL = {"duration": 3.0, "warmup": 1.0, "repeats": 3, "image_calls": 200, "b3": True}
QUICK = {"duration": 0.8, "warmup": 0.25, "repeats": 1, "image_calls": 40, "b3": True}
MANY = 32
WEB_REPLY = b"Hello from nearfaas fastpath v1: "
HANDLER = '''def handle(event, context):
    return b"Hello from nearfaas fastpath v1: " + (event.body or b"")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- B3: the gateway -----------------------------------------------------------------------------

@contextlib.contextmanager
def gateway_web(progress):
    """A private cluster with a warm python3-http function returning the web reply: its URL."""
    import requests

    from nearfaas.client import gateway_session
    from nearfaas.spec.bundle import pack

    progress("B3: starting a private cluster (gateway + warm Python worker)")
    with scratch_cluster() as (layout, state):
        handler = state.parent / "fp-web"
        handler.mkdir()
        (handler / "handler.py").write_text(HANDLER)
        gw = layout["gateway_url"]
        # As the admin (the /system API needs credentials since issue 12), and as a bundle: the
        # gateway takes a handler folder by path only under its handler_roots.
        gateway_session(layout=layout).post(f"{gw}/system/functions", timeout=30, json={
            "service": "fp-web", "lang": "python3-http", "bundle": pack(handler),
            "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}}).raise_for_status()
        url = f"{gw}/function/fp-web"
        deadline = time.monotonic() + 30
        while True:
            try:
                r = requests.post(url, data=b"x" * PAYLOAD_BYTES, timeout=10)
                if r.status_code == 200 and r.content.startswith(WEB_REPLY):
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("B3: the gateway function never answered")
            time.sleep(0.1)
        yield url


def _http(url: str, clients: int, duration: float, body: bytes) -> dict:
    """One B3 run (wrk, else the Python client) in the units of the UDP load generator's report."""
    r = http_load(url, clients, duration, "POST", body)
    us = {k: None if r[f"{k}_s"] is None else r[f"{k}_s"] * 1e6 for k in ("p50", "p99", "mean")}
    return {"p50_us": us["p50"], "p99_us": us["p99"], "mean_us": us["mean"], "req_per_s": r["rps"], "errors": r["errors"],
            "match": "wrk" if r["generator"] == "wrk" else "python"}


# ---- image and kv helpers -----------------------------------------------------------------------

def _image() -> bytes:
    import numpy as np

    rng = np.random.default_rng(7)
    return rng.integers(0, 256, size=256 * 256 * 4, dtype=np.uint8).tobytes()


def _image_memfd(unix_path: str, lambda_id: int, img: bytes, expect: bytes, calls: int) -> dict:
    with MemfdClient(unix_path) as client:
        return _timed_image_calls(lambda: client.call(lambda_id, img), expect, calls, 5, f"image lambda {lambda_id}",
                                  "memfd (Unix datagram + SCM_RIGHTS)")


def _image_tcp(addr, lambda_id: int, img: bytes, expect: bytes, calls: int) -> dict:
    def one():
        with TcpClient(addr, timeout=10) as client:  # a connection per request: a fork/thread per request
            return client.call(lambda_id, img)

    return _timed_image_calls(one, expect, calls, 3, "baseline image lambda", "TCP framing, one connection per request")


def _timed_image_calls(call, expect: bytes, calls: int, warmup: int, what: str, transport: str) -> dict:
    """``calls`` timed calls after ``warmup`` untimed ones, each answer checked against ``expect``."""
    lat = []
    for i in range(calls + warmup):
        t0 = time.perf_counter_ns()
        status, out = call()
        dt = (time.perf_counter_ns() - t0) / 1e3
        if status != OK or out != expect:
            raise RuntimeError(f"{what}: {status_name(status)}, {len(out)} bytes, correct={out == expect}")
        if i >= warmup:
            lat.append(dt)
    return _lat_summary(lat, transport)


def _lat_summary(lat: list[float], transport: str) -> dict:
    return {"p50_us": percentile(lat, 50, None), "p99_us": percentile(lat, 99, None), "mean_us": mean(lat), "req_per_s": len(lat) / (sum(lat) / 1e6),
            "calls": len(lat), "transport": transport, "client": "python, one call at a time"}


def _merge_runs(runs: list[dict]) -> dict:
    out = {k: _median([r[k] for r in runs]) for k in ("p50_us", "p99_us", "mean_us", "req_per_s")}
    out.update({k: runs[0][k] for k in ("transport", "client")}, calls=sum(r["calls"] for r in runs), repeats=len(runs), label="measured")
    return out


@contextlib.contextmanager
def memcached():
    binary = shutil.which("memcached") or "/usr/bin/memcached"
    if not os.path.exists(binary):
        raise FileNotFoundError("memcached is not installed")
    port = _free_port()
    proc = subprocess.Popen([binary, "-p", str(port), "-U", "0", "-u", "root", "-l", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"memcached did not start: {proc.stderr.read().decode()[-500:]}") from None
                time.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(5)


# ---- the run ------------------------------------------------------------------------------------

def _ensure_built(progress) -> str | None:
    """None when the executor and load generator are there (building them if needed), else why not."""
    if binary_path().exists() and load_binary_path().exists() and lambda_path("web").exists():
        return None
    try:
        build(progress)
    except ExecutorError as e:
        return str(e)
    return None


SYSTEMS = {
    "fastpath-wasm": "nearfaas-fastpath --workers 1, C lambdas compiled to wasm32 (wasmtime)",
    "fastpath-native": "nearfaas-fastpath --workers 1, native Rust lambdas",
    "forking": "B1: Python socketserver.ForkingUDPServer (fork per request)",
    "threading": "B2: Python socketserver.ThreadingUDPServer (thread per request)",
    "gateway": "B3: nearfaas gateway -> warm python3-http worker, HTTP POST keep-alive (wrk)",
}


def run(quick: bool = False, progress=lambda msg: None) -> dict:
    cfg = QUICK if quick else FULL
    dur, warm, reps = cfg["duration"], cfg["warmup"], cfg["repeats"]
    started = time.monotonic()
    result: dict = {"benchmark": "fastpath", "label": "measured", "quick": quick, "config": dict(cfg), "targets_spec": TARGETS,
                    "systems": dict(SYSTEMS), "load_generator": "nearfaas-fastpath-load (Rust, closed loop, one UDP socket)",
                    "payload_bytes": PAYLOAD_BYTES}
    result.update(machine_state())  # before this benchmark starts anything: is something else busy?
    result["poll"] = "adaptive"  # the executor's and the load generator's (fastpath/src/poll.rs); poll_modes compares all
    missing = _ensure_built(progress)
    if missing:
        result["executor_unavailable"] = missing
        progress(f"executor unavailable: {missing}")
        if not load_binary_path().exists():
            raise RuntimeError(f"cannot run the fast-path benchmark: {missing}")
    with contextlib.ExitStack() as stack:
        try:
            mc = stack.enter_context(memcached())
        except (FileNotFoundError, RuntimeError) as e:
            mc = None
            result["memcached_unavailable"] = str(e)
        ex = None if missing else stack.enter_context(Executor(workers=1, sched="drr"))
        b1 = stack.enter_context(bl.BaselineProcess("forking", memcached=mc))
        b2 = stack.enter_context(bl.BaselineProcess("threading", memcached=mc))
        systems = _udp_systems(ex, mc, b1, b2)
        result["web"] = _web(systems, dur, warm, reps, progress)
        with background_load() as spinner:  # the same systems beside a process spinning on the last core
            progress(f"loaded: a process spins on core {spinner['core']}")
            result["web_loaded"] = _web(systems, dur, warm, reps, lambda m: progress(f"loaded: {m}"), (1,))
        result["three_vs_one"] = _three_vs_one(systems, dur, warm, reps, progress)
        result["image"] = _image_lambda(ex, b1, b2, cfg["image_calls"], reps, progress)
        if mc:
            result["kv"] = _kv(systems, dur, warm, reps, progress)
        if cfg["b3"]:
            _gateway(result, dur, reps, progress)

    # 5. fairness: a light lambda's p99 alone and beside a heavy lambda: DRR with slices, DRR, FIFO;
    # and what slicing costs calls that do not need it
    if not missing:
        result["fairness"] = fairness(dur, warm, reps, progress)
        result["slice_cost"] = slice_cost(dur, warm, reps, progress)
        result["slice_sweep"] = slice_sweep(dur, warm, reps, progress)
        # 6. λ-NIC's §5.1 optimizations: one coalesced module against five, and the match table's size
        if lambda_path("coalesced").exists():
            result["coalescing"] = coalescing(dur, warm, reps, progress)
        # 7. what each poll mode costs: latency, CPU per request, CPU when idle and when sparse
        result["poll_modes"] = poll_modes(load, dur, warm, progress)

    result["elapsed_s"] = round(time.monotonic() - started, 1)
    _headline(result)
    return result


def _udp_systems(ex: Executor | None, mc: str | None, b1, b2) -> dict[str, tuple]:
    """name -> (UDP address, lambda id map) of every running system, each checked first to answer
    the web request the same way (a faster wrong answer measures nothing)."""
    systems: dict[str, tuple] = {}
    if ex:
        _deploy_all(ex, mc)
        systems["fastpath-wasm"] = (ex.udp_addr, WASM)
        systems["fastpath-native"] = (ex.udp_addr, NATIVE)
    systems["forking"] = (b1.udp_addr, bl.BASELINE_IDS)
    systems["threading"] = (b2.udp_addr, bl.BASELINE_IDS)
    for name, (addr, ids) in systems.items():
        with UdpClient(addr, timeout=5) as c:
            status, body = c.call(ids["web"], b"check")
        if status != OK or body != WEB_REPLY + b"check":
            raise RuntimeError(f"{name} answered the web lambda with {status_name(status)} {body[:80]!r}")
    return systems


def _web(systems: dict, dur: float, warm: float, reps: int, progress, outstanding=(1, MANY)) -> dict:
    """1. the web lambda, 1 and MANY outstanding; repeats interleaved across systems."""
    web: dict = {}
    for k in outstanding:
        runs: dict[str, list] = {n: [] for n in systems}
        for _ in range(reps):
            for name, (addr, ids) in systems.items():
                runs[name].append(load(addr, [ids["web"]], k, dur, warm))
        for name in systems:
            web[f"{name}@{k}"] = r = _summ(runs[name]) | {"system": name, "outstanding": k}
            progress(f"web {name:<16} outstanding={k:<3} {_row(r)}")
    return web


def _three_vs_one(systems: dict, dur: float, warm: float, reps: int, progress) -> dict:
    """2. three distinct web lambdas round-robin vs one (the executor; B2 for reference)."""
    rr: dict = {}
    for name in ("fastpath-wasm", "threading"):
        if name not in systems:
            continue
        addr, ids = systems[name]
        one, three = [], []
        for _ in range(reps):
            one.append(load(addr, [ids["web"]], MANY, dur, warm))
            three.append(load(addr, [ids["web"], ids["web2"], ids["web3"]], MANY, dur, warm))
        s1, s3 = _summ(one), _summ(three)
        # Each repeat runs one and three back to back, so their ratio cancels the drift of this
        # shared 2-core box between repeats (a median of each side separately does not).
        losses = [100.0 * (1 - t["req_per_s"] / o["req_per_s"]) for o, t in zip(one, three, strict=True) if o["req_per_s"]]
        loss = _median(losses) if losses else None
        rr[name] = {"one": s1, "three": s3, "throughput_loss_pct": loss, "loss_per_repeat_pct": losses, "outstanding": MANY,
                    "label": "measured"}
        progress(f"round-robin {name}: one {_num(s1['req_per_s'], ',.0f')} req/s, three {_num(s3['req_per_s'], ',.0f')} req/s, loss {_num(loss, '.1f')}%")
    return rr


def _image_lambda(ex: Executor | None, b1, b2, calls: int, reps: int, progress) -> dict:
    """3. the image lambda, 256x256 RGBA -> luma: memfd for the executor, TCP for the baselines."""
    img = _image()
    expect = bl.gray(img)[1]
    targets = {}
    if ex:
        targets["fastpath-wasm"] = lambda: _image_memfd(ex.unix_path, WASM["gray"], img, expect, calls)
        targets["fastpath-native"] = lambda: _image_memfd(ex.unix_path, NATIVE["gray"], img, expect, calls)
    targets["forking"] = lambda: _image_tcp(b1.tcp_addr, bl.BASELINE_IDS["gray"], img, expect, calls)
    targets["threading"] = lambda: _image_tcp(b2.tcp_addr, bl.BASELINE_IDS["gray"], img, expect, calls)
    runs: dict[str, list] = {n: [] for n in targets}
    for _ in range(reps):
        for name, fn in targets.items():
            runs[name].append(fn())
    image: dict = {}
    for name, rs in runs.items():
        image[name] = r = _merge_runs(rs)
        progress(f"image {name:<16} p50 {_num(r['p50_us'], '9.1f')} us  p99 {_num(r['p99_us'], '9.1f')} us  ({r['transport']})")
    return image


def _kv(systems: dict, dur: float, warm: float, reps: int, progress) -> dict:
    """4. the memcached lambda: GET of a stored key, one outstanding."""
    value = b"v" * 32
    for name, (addr, ids) in systems.items():
        with UdpClient(addr, timeout=5) as c:
            status, body = c.call(ids["kv"], b"SET benchkey " + value)
            assert (status, body) == (OK, b"STORED"), (name, status, body)
            status, body = c.call(ids["kv"], b"GET benchkey")
            assert (status, body) == (OK, b"VALUE " + value), (name, status, body)
    runs: dict[str, list] = {n: [] for n in systems}
    for _ in range(reps):
        for name, (addr, ids) in systems.items():
            runs[name].append(load(addr, [ids["kv"]], 1, dur, warm, payload=b"GET benchkey", match="fifo"))
    kv: dict = {}
    for name in systems:
        kv[name] = r = _summ(runs[name]) | {"system": name, "outstanding": 1, "request": "GET benchkey (32-byte value)"}
        progress(f"kv {name:<16} {_row(r)}")
    return kv


def _gateway(result: dict, dur: float, reps: int, progress) -> None:
    """B3: the gateway over HTTP, same payload, into ``result["web"]``; when it cannot run, the
    reason goes in the result instead: the gateway is a comparison point, not the subject."""
    try:
        with gateway_web(progress) as url:
            body = b"a" * PAYLOAD_BYTES
            for k in (1, MANY):
                rs = [_http(url, k, dur, body) for _ in range(reps)]
                result["web"][f"gateway@{k}"] = r = _summ(rs) | {"system": "gateway", "outstanding": k, "load_generator": generator(),
                                                                 "transport": "HTTP/1.1 keep-alive POST"}
                progress(f"web gateway          clients={k:<3} {_row(r)}")
    except Exception as e:
        result["gateway_unavailable"] = f"{type(e).__name__}: {e}"
        progress(f"B3 gateway unavailable: {e}")


def _headline(result: dict) -> None:
    web = result.get("web", {})

    def get(key, field="p50_us"):
        return (web.get(key) or {}).get(field)

    fp, b1, b2 = get("fastpath-wasm@1"), get("forking@1"), get("threading@1")
    result["fastpath_p50_us"] = fp
    result["fastpath_native_p50_us"] = get("fastpath-native@1")
    result["forking_p50_us"] = b1
    result["threading_p50_us"] = b2
    result["gateway_p50_us"] = get("gateway@1")
    rps = get(f"fastpath-wasm@{MANY}", "req_per_s")
    loss = (result.get("three_vs_one", {}).get("fastpath-wasm") or {}).get("throughput_loss_pct")
    def worst(sched, image_only=False):
        per = result.get("fairness", {}).get(sched) or {}
        ratios = [(v.get("p99_x_isolated") or 0) for k, v in per.items()
                  if k.startswith("under_") and (not image_only or k.startswith("under_gray64k"))]
        return max(ratios) if ratios else None

    def target(name, op, goal, measured):
        met = None if measured is None else (measured <= goal if op == "<=" else measured >= goal)
        return {"target": f"{op} {goal:g}", "measured": measured, "met": met, "label": "measured"}

    loaded = result.get("web_loaded", {})

    def loaded_get(key):
        return (loaded.get(key) or {}).get("p50_us")

    lfp, lb1, lb2 = loaded_get("fastpath-wasm@1"), loaded_get("forking@1"), loaded_get("threading@1")
    result["fastpath_loaded_p50_us"] = lfp
    idle = result.get("machine_state") == "idle"
    result["targets"] = {
        f"web_p50_us (1 outstanding, {result.get('machine_state', 'idle')} machine)":
            target("web_p50", "<=", TARGETS["web_p50_us"], fp) | ({} if idle else {"met": None, "note": "the machine was busy"}),
        "x lower p50 than B1 forking, loaded": target("b1l", ">=", TARGETS["x_lower_p50_than_forking"], lb1 / lfp if lfp and lb1 else None),
        "x lower p50 than B2 threading, loaded": target("b2l", ">=", TARGETS["x_lower_p50_than_threading"],
                                                        lb2 / lfp if lfp and lb2 else None),
        f"req_per_s with --workers 1 ({MANY} outstanding)": target("rps", ">=", TARGETS["rps_one_worker"], rps),
        "x lower p50 than B1 forking": target("b1", ">=", TARGETS["x_lower_p50_than_forking"], b1 / fp if fp and b1 else None),
        "x lower p50 than B2 threading": target("b2", ">=", TARGETS["x_lower_p50_than_threading"], b2 / fp if fp and b2 else None),
        "throughput loss %, three lambdas vs one": target("loss", "<=", TARGETS["throughput_loss_three_vs_one_pct"], loss),
        "light p99 beside the image lambda (gray64k@64), drr with slices / isolated":
            target("fair", "<=", TARGETS["light_p99_under_wfq_x_isolated"], worst("drr+slices", image_only=True)),
        "light p99 beside any heavy lambda, drr with slices / isolated (worst)":
            target("fair_any", "<=", TARGETS["light_p99_under_wfq_x_isolated"], worst("drr+slices")),
    }
