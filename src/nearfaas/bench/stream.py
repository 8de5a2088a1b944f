"""Streaming Top-K (K=16, little-endian u32) served by several systems, measured side by side with a
connection per request, as in Yang & Fahmy, "Exploring FPGA Acceleration for Distributed Serverless
Computing" (the paper's Fig. 2). Every number is measured on this machine (labelled "measured").

Systems:
  executor        the fast-path executor's stream target, chain [topk k=16 u32, variant "insertion"]
  executor_heap   the same with variant "heap"
  baremetal       the paper's bare metal, re-implemented: a stdlib ThreadingHTTPServer answering
                  heapq.nlargest(16, values), behind a stdlib asyncio reverse proxy (the paper's
                  request interceptor) that timestamps each request on arrival and on answer
  serverless      a warm Python function `topk` (examples/functions/topk) on a private nearfaas
                  cluster, called through the gateway, behind the same interceptor; its first
                  call (the cold start) is reported apart and excluded from the warm numbers

One client for every system (a selectors loop over raw sockets): a request opens a connection,
sends, reads the answer to the end and closes, so the client's own cost is the same for all.
Latency vs size: ``requests`` sequential requests per size. Per-request time vs N: N requests
issued at once, (last answer - first send) / N, as the paper divides the batch latency by N; for
the proxied systems the interceptor's view too (last answer - first arrival) / N. CPU-seconds per
request: the server processes' utime+stime from /proc/<pid>/stat before/after, over the requests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import time
from pathlib import Path

from nearfaas.bench.stream_servers import (  # noqa: F401  (re-exported: the public names live on here)
    ANSWER,
    ARRIVE,
    BATCH_BYTES,
    CONCURRENCY,
    FULL,
    FUNCTION_DIR,
    HttpSystem,
    K,
    Process,
    QUICK,
    SIZES,
    SRC,
    STREAM_IDS,
    SYSTEMS,
    StreamSystem,
    VARIANTS,
    _TopKHandler,
    _descendants,
    _normalize,
    _relay,
    baremetal,
    check_concurrency,
    check_requests,
    check_sizes,
    exchange,
    executor_systems,
    parse_http,
    payload,
    per_request_us,
    serve_baremetal,
    serve_interceptor,
    serverless,
    stream_reply_complete,
    stream_unavailable,
    topk,
    values,
)
from nearfaas.stats import mean, median, percentile, present


# ---- measurement ---------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids) -> float:
    """utime + stime of ``pids`` (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # fields 14, 15 counted from 1, after pid and (comm)
        except (OSError, ValueError, IndexError):
            pass
    return total / _TICK


def _cpu_pids(system) -> tuple[list[int], list[int]]:
    return system.pids(), [system.interceptor_pid] if system.interceptor_pid else []


def _check(system, data: bytes, body: bytes) -> None:
    if sorted(values(body), reverse=True) != values(topk(data)):
        raise RuntimeError(f"{system.name}: wrong answer for {len(data)} bytes: {values(body)[:4]}...")


def sequential(system, data_for, size: int, requests: int, warmup: int) -> dict:
    """``requests`` requests of ``size`` bytes one after another, each on its own connection."""
    rng = random.Random(size)
    inputs = [data_for(size, rng) for _ in range(min(requests, 64))]
    for i in range(warmup):
        data = inputs[i % len(inputs)]
        _check(system, data, system.decode(exchange(system.addr, [system.request(data)], system.complete)[0][2])[0])
    pids, ipids = _cpu_pids(system)
    c0, i0 = cpu_seconds(pids), cpu_seconds(ipids)
    lat, seen = [], []
    for i in range(requests):
        data = inputs[i % len(inputs)]
        ((t0, t1, raw),) = exchange(system.addr, [system.request(data)], system.complete)
        body, stamps = system.decode(raw)
        if i < len(inputs):
            _check(system, data, body)
        lat.append((t1 - t0) / 1e3)
        if stamps:
            seen.append((stamps[1] - stamps[0]) / 1e3)
    c1, i1 = cpu_seconds(pids), cpu_seconds(ipids)
    return {"lat_us": lat, "interceptor_us": seen, "cpu_s_per_request": (c1 - c0) / requests,
            "interceptor_cpu_s_per_request": (i1 - i0) / requests if ipids else None}


def batch(system, n: int, size: int, rng: random.Random) -> dict:
    """N requests issued at once: per-request time (client and interceptor views) and CPU."""
    inputs = [payload(size, rng) for _ in range(n)]
    pids, ipids = _cpu_pids(system)
    c0, i0 = cpu_seconds(pids), cpu_seconds(ipids)
    answers = exchange(system.addr, [system.request(d) for d in inputs], system.complete, timeout=120)
    c1, i1 = cpu_seconds(pids), cpu_seconds(ipids)
    arrive, answer = [], []
    for data, (_, _, raw) in zip(inputs, answers, strict=True):
        body, stamps = system.decode(raw)
        _check(system, data, body)
        if stamps:
            arrive.append(stamps[0])
            answer.append(stamps[1])
    out = {"per_request_us": per_request_us(min(a[0] for a in answers), max(a[1] for a in answers), n),
           "cpu_s": c1 - c0, "interceptor_cpu_s": (i1 - i0) if ipids else None}
    out["interceptor_per_request_us"] = per_request_us(min(arrive), max(answer), n) if arrive else None
    return out


def _med(xs):
    return median(present(xs), None)


def _summarize_sizes(runs: dict[int, list[dict]]) -> dict:
    """Per size: medians over the repeats of each repeat's p50/p99/mean, and CPU per request."""
    out = {k: {} for k in ("p50_us", "p99_us", "mean_us", "interceptor_p50_us", "interceptor_p99_us",
                           "cpu_s_per_request", "interceptor_cpu_s_per_request")}
    for size, reps in runs.items():
        key = str(size)
        out["p50_us"][key] = _med([percentile(r["lat_us"], 50, None) for r in reps])
        out["p99_us"][key] = _med([percentile(r["lat_us"], 99, None) for r in reps])
        out["mean_us"][key] = _med([mean(r["lat_us"], None) for r in reps])
        out["interceptor_p50_us"][key] = _med([percentile(r["interceptor_us"], 50, None) for r in reps])
        out["interceptor_p99_us"][key] = _med([percentile(r["interceptor_us"], 99, None) for r in reps])
        out["cpu_s_per_request"][key] = _med([r["cpu_s_per_request"] for r in reps])
        out["interceptor_cpu_s_per_request"][key] = _med([r["interceptor_cpu_s_per_request"] for r in reps])
    return out


def _summarize_batches(runs: dict[int, list[dict]]) -> dict:
    out = {k: {} for k in ("per_request_us", "per_request_mean_us", "interceptor_per_request_us", "cpu_s_per_request_concurrent")}
    for n, reps in runs.items():
        key = str(n)
        out["per_request_us"][key] = _med([r["per_request_us"] for r in reps])
        out["per_request_mean_us"][key] = mean([r["per_request_us"] for r in reps], None)
        out["interceptor_per_request_us"][key] = _med([r["interceptor_per_request_us"] for r in reps])
        out["cpu_s_per_request_concurrent"][key] = sum(r["cpu_s"] for r in reps) / (n * len(reps)) if reps else None
    return out


def measure(systems: dict, sizes, requests: int, repeats: int, warmup: int, concurrency, batch_repeats: int, progress) -> dict:
    """Every system on the same inputs, repeats interleaved across systems."""
    seq: dict = {name: {s: [] for s in sizes} for name in systems}
    for rep in range(repeats):
        for size in sizes:
            for name, system in systems.items():
                r = sequential(system, payload, size, requests, warmup)
                seq[name][size].append(r)
                progress(f"repeat {rep + 1}/{repeats} {name:<14} {size:>5} B  p50 {percentile(r['lat_us'], 50):9.1f} us  "
                         f"p99 {percentile(r['lat_us'], 99):9.1f} us")
    bat: dict = {name: {n: [] for n in concurrency} for name in systems}
    errors: dict = {}
    for n in concurrency:
        for name, system in systems.items():
            rng = random.Random(n)
            try:
                batch(system, n, BATCH_BYTES, rng)  # one untimed batch first
                for _ in range(batch_repeats):
                    bat[name][n].append(batch(system, n, BATCH_BYTES, rng))
            except (RuntimeError, OSError) as exc:  # one system failing at one N must not lose the run
                errors.setdefault(name, {})[str(n)] = f"{type(exc).__name__}: {exc}"
                progress(f"N={n:<3} {name:<14} failed: {exc}")
                continue
            progress(f"N={n:<3} {name:<14} per-request {_med([r['per_request_us'] for r in bat[name][n]]):9.1f} us")
    out = {}
    for name, system in systems.items():
        out[name] = {**_summarize_sizes(seq[name]), **_summarize_batches(bat[name]), "label": "measured",
                     "transport": system.transport, "server": system.server, "requests_per_size": requests, "repeats": repeats,
                     "batch_repeats": batch_repeats, "batch_bytes": BATCH_BYTES}
        if name in errors:
            out[name]["batch_errors"] = errors[name]
        if getattr(system, "cold_start", None):
            out[name]["cold_start"] = system.cold_start
    return out


def run(quick: bool = False, sizes=None, requests: int | None = None, concurrency=None, repeats: int | None = None,
        systems=SYSTEMS, executor_workers: int = 1, native: bool = True, progress=None) -> dict:
    say = progress or (lambda msg: None)
    cfg = dict(QUICK if quick else FULL)
    sizes = check_sizes(sizes if sizes is not None else SIZES)
    concurrency = check_concurrency(concurrency if concurrency is not None else cfg["concurrency"])
    requests = check_requests(requests if requests is not None else cfg["requests"])
    repeats = check_requests(repeats if repeats is not None else cfg["repeats"])
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; choose from {list(SYSTEMS)}")
    started = time.monotonic()
    result: dict = {"workload": f"Streaming Top-K, K={K}, little-endian u32 values; a connection per request", "k": K,
                    "sizes": sizes, "concurrency": concurrency, "requests_per_size": requests, "repeats": repeats,
                    "batch_repeats": cfg["batch_repeats"], "batch_bytes": BATCH_BYTES, "quick": quick, "label": "measured",
                    "client": "python selectors loop, raw sockets, one connection per request (the same for every system)",
                    "clock": "CLOCK_MONOTONIC (client and interceptor)", "systems": {}, "unavailable": {}}
    with contextlib.ExitStack() as keep_executor:
        live: dict = {}
        wanted_exec = [s for s in systems if s in STREAM_IDS]
        if wanted_exec:
            why = stream_unavailable()
            if why is None:
                try:
                    ex = keep_executor.enter_context(executor_systems(say, executor_workers))
                    live.update({k: v for k, v in ex.items() if k in wanted_exec})
                    result["executor_workers"] = executor_workers
                except Exception as exc:
                    why = f"not available: {type(exc).__name__}: {exc}"
            if why:
                for s in wanted_exec:
                    result["unavailable"][s] = why
                say(f"executor rows skipped: {why}")
        with contextlib.ExitStack() as others:
            if "baremetal" in systems:
                live["baremetal"] = others.enter_context(baremetal())
            if "serverless" in systems:
                try:
                    live["serverless"] = others.enter_context(serverless(say))
                except Exception as exc:
                    result["unavailable"]["serverless"] = f"not available: {type(exc).__name__}: {exc}"
                    say(f"serverless skipped: {exc}")
            result["systems"] = measure(live, sizes, requests, repeats, cfg["warmup"], concurrency, cfg["batch_repeats"], say)
        # With the other systems stopped: a private cluster's background work must not land in
        # the Rust client's microsecond rows.
        if native and "executor" in live:
            result["native_client"] = _native(live["executor"], sizes, concurrency, quick, say)
    for name, why in result["unavailable"].items():
        result["systems"][name] = {"available": False, "reason": why}
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result


def _native(executor, sizes, concurrency, quick: bool, say) -> dict:
    """The executor and the bare-TCP floor timed by the Rust client (``stream_native``); a failure
    there is recorded, not fatal: the side-by-side rows above are the run's main result."""
    from nearfaas.bench import stream_native
    from nearfaas.fastpath.executor import load_binary_path

    host, port = executor.addr
    try:
        return stream_native.measure(load_binary_path(), f"{host}:{port}", executor.stream_id, sizes, quick, say,
                                     concurrency=concurrency, batch_bytes=BATCH_BYTES)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        say(f"native client rows skipped: {exc}")
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}


def headline(result: dict) -> dict:
    """The summary ``nearfaas bench stream --json`` prints."""
    systems = result["systems"]

    def p50(name):
        return systems.get(name, {}).get("p50_us") or {}

    per = systems.get("executor", {}).get("per_request_us") or {}
    ratio = per["64"] / per["1"] if per.get("64") and per.get("1") else None
    native = result.get("native_client", {}).get("targets", {})
    return {"stream_p50_us": p50("executor"), "baremetal_p50_us": p50("baremetal"), "serverless_p50_us": p50("serverless"),
            "per_request_ratio_n64": ratio,
            "native_client_p50_us": native.get("executor", {}).get("per_connection", {}).get("p50_us", {}),
            "native_client_kept_alive_p50_us": native.get("executor", {}).get("kept_alive", {}).get("p50_us", {}),
            "tcp_floor_p50_us": native.get("tcp_floor", {}).get("per_connection", {}).get("p50_us", {}),
            "tcp_floor_kept_alive_p50_us": native.get("tcp_floor", {}).get("kept_alive", {}).get("p50_us", {}),
            "native_client_per_request_ratio_n64": result.get("native_client", {}).get("per_request_ratio_n64")}


def table(result: dict) -> str:
    """A side-by-side text table: p50/p99 per size, per-request time per N, CPU per request."""
    names = [n for n in SYSTEMS if n in result["systems"]]
    live = [n for n in names if result["systems"][n].get("available", True)]

    def fmt(x, spec=".1f"):
        return "n/a" if x is None else format(x, spec)

    lines = ["p50 / p99 latency (us, client end to end), per size:"]
    lines.append(f"  {'bytes':>6}  " + "".join(f"{n:>24}" for n in live))
    for size in result["sizes"]:
        s = str(size)
        lines.append(f"  {size:>6}  " + "".join(f"{fmt(result['systems'][n]['p50_us'].get(s)) + ' / ' + fmt(result['systems'][n]['p99_us'].get(s)):>24}" for n in live))
    lines.append(f"per-request time (us) = batch latency / N, {result['batch_bytes']}-byte requests:")
    lines.append(f"  {'N':>6}  " + "".join(f"{n:>24}" for n in live))
    for c in result["concurrency"]:
        lines.append(f"  {c:>6}  " + "".join(f"{fmt(result['systems'][n]['per_request_us'].get(str(c))):>24}" for n in live))
    lines.append("CPU-seconds per request of the server processes (sequential runs, per size; interceptor excluded):")
    for size in result["sizes"]:
        lines.append(f"  {size:>6}  " + "".join(f"{fmt(result['systems'][n]['cpu_s_per_request'].get(str(size)), '.2e'):>24}" for n in live))
    for n in names:
        if n not in live:
            lines.append(f"{n}: {result['systems'][n]['reason']}")
    native = result.get("native_client")
    if native and native.get("available", True):
        from nearfaas.bench.stream_native import table as native_table

        lines.append(native_table(native))
    elif native:
        lines.append(f"native client: {native['reason']}")
    cold = result["systems"].get("serverless", {}).get("cold_start")
    if cold:
        lines.append(f"serverless cold start: first answer {cold['first_answer_after_deploy_ms']:.0f} ms after the deploy (excluded)")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path | None:
    """The paper's two panels (latency vs size, log scale; per-request time vs N) as a PNG; None
    without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in SYSTEMS:
        s = result["systems"].get(name)
        if not s or not s.get("available", True):
            continue
        sizes = [z for z in result["sizes"] if s["p50_us"].get(str(z)) is not None]
        left.plot(sizes, [s["p50_us"][str(z)] for z in sizes], marker="o", label=name)
        ns = [c for c in result["concurrency"] if s["per_request_us"].get(str(c)) is not None]
        right.plot(ns, [s["per_request_us"][str(c)] for c in ns], marker="o", label=name)
    native = result.get("native_client", {}).get("targets", {})
    for target, style in (("executor", "--"), ("tcp_floor", ":")):
        row = native.get(target, {}).get("per_connection", {}).get("p50_us", {})
        sizes = [z for z in result["sizes"] if row.get(str(z)) is not None]
        if sizes:
            left.plot(sizes, [row[str(z)] for z in sizes], style, marker=".", label=f"{target} (Rust client)")
    per = result.get("native_client", {}).get("executor_per_request_us") or {}
    ns = [c for c in result["concurrency"] if per.get(str(c)) is not None]
    if ns:
        right.plot(ns, [per[str(c)] for c in ns], "--", marker=".", label="executor (Rust client)")
    left.set(xscale="log", yscale="log", xlabel="request size (bytes)", ylabel="p50 latency (us)", title="Top-K latency vs size")
    right.set(xscale="log", yscale="log", xlabel="concurrent requests N", ylabel="batch latency / N (us)", title="per-request time vs N")
    left.set_xticks(result["sizes"], [str(z) for z in result["sizes"]])
    right.set_xticks(result["concurrency"], [str(c) for c in result["concurrency"]])
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Streaming Top-K (K=16, u32), a connection per request — measured")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nearfaas.bench.stream", description="B1's processes")
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("server")
    s.add_argument("--port", type=int, default=0)
    p = sub.add_parser("interceptor")
    p.add_argument("--upstream", required=True, help="HOST:PORT")
    p.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    def announce(line):
        print(line, flush=True)

    if args.cmd == "server":
        serve_baremetal(args.port, announce)
    else:
        host, port = args.upstream.rsplit(":", 1)
        serve_interceptor((host, int(port)), args.port, announce)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        _main()
