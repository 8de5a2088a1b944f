"""The executor's stream target timed by the native client, beside the bare-TCP floor.

The side-by-side runs in ``nearfaas.bench.stream`` use one Python client for every system, so
that the client's own cost is the same for all; that cost (tens of microseconds a request) also
hides what the executor does. Here the Rust load generator (``nearfaas-fastpath-load --stream``,
closed loop, one request at a time) times the executor's Top-K, and the same tool times
``nearfaas-fastpath-load --stream-floor``: a blocking server that speaks the protocol and does
nothing else (reads the header and payload, writes a 69-byte reply), so its latency is what this
machine's kernel charges for the handshake and the loopback round trips. The executor cannot go
below it; the difference is what the executor adds.

Two modes per size:
  per_connection  a new connection per request, timed from connect() to the reply's last byte
                  (as the FPGA paper measures)
  kept_alive      one connection kept open (STREAM_KEEP_ALIVE), timed from the request's first
                  byte to the reply's last

And per concurrency N (``--batch N``): N requests of 1 KiB issued at once on N connections by one
epoll-driven client, (last answer - first connect) / N, as the paper divides the batch latency;
the median over ``batches`` batches. The floor server answers one connection at a time, so it has
no concurrency row.

Every number is measured (label "measured"); per size and mode the p50/p99 are medians over the
repeats, each repeat a timed window of ``duration`` seconds after ``warmup``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess

from nearfaas.stats import median, present

MODES = {"per_connection": [], "kept_alive": ["--keep-alive"]}
TARGETS = ("executor", "tcp_floor")
FULL = {"duration": 1.5, "warmup": 0.3, "repeats": 3, "batches": 30}
QUICK = {"duration": 0.4, "warmup": 0.1, "repeats": 1, "batches": 5}


@contextlib.contextmanager
def floor_server(load_binary):
    """The bare-TCP floor server on a free loopback port: yields "HOST:PORT"."""
    proc = subprocess.Popen([str(load_binary), "--stream-floor", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        try:
            yield json.loads(line)["stream_floor_addr"]
        except (ValueError, KeyError):
            raise RuntimeError(f"{load_binary} --stream-floor did not start: {line!r} {proc.stderr.read()[:300]}") from None
    finally:
        proc.kill()
        proc.wait()


def load_run(load_binary, addr: str, stream_id: int, size: int, mode: str, duration: float, warmup: float) -> dict:
    """One timed window of the load generator; its JSON report."""
    cmd = [str(load_binary), "--stream", "--addr", addr, "--id", str(stream_id), "--payload-bytes", str(size),
           "--duration", str(duration), "--warmup", str(warmup), "--json", *MODES[mode]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    report = json.loads(proc.stdout)
    if not report["ok"]:
        raise RuntimeError(f"{' '.join(cmd)}: no request answered OK: {report}; {proc.stderr.strip()[:300]}")
    return report


def batch_run(load_binary, addr: str, stream_id: int, size: int, n: int, batches: int) -> dict:
    """``batches`` timed batches of ``n`` requests at once; the load generator's JSON report."""
    cmd = [str(load_binary), "--stream", "--addr", addr, "--id", str(stream_id), "--payload-bytes", str(size),
           "--batch", str(n), "--batches", str(batches), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    report = json.loads(proc.stdout)
    if report["per_request_us"] is None:
        raise RuntimeError(f"{' '.join(cmd)}: no batch completed: {proc.stderr.strip()[:300]}")
    return report


def measure(load_binary, executor_addr: str, stream_id: int, sizes, quick: bool = False, progress=None,
            concurrency=(), batch_bytes: int = 1024) -> dict:
    """Per target, mode and size: p50/p99 (µs) and requests per second, medians over the repeats;
    per N in ``concurrency``: the executor's per-request time."""
    say = progress or (lambda msg: None)
    cfg = QUICK if quick else FULL
    runs: dict = {t: {m: {s: [] for s in sizes} for m in MODES} for t in TARGETS}
    with floor_server(load_binary) as floor_addr:
        addrs = {"executor": executor_addr, "tcp_floor": floor_addr}
        for rep in range(cfg["repeats"]):
            for size in sizes:
                for mode in MODES:
                    for target in TARGETS:  # interleaved, so drift on the machine hits both alike
                        r = load_run(load_binary, addrs[target], stream_id, size, mode, cfg["duration"], cfg["warmup"])
                        runs[target][mode][size].append(r)
                        say(f"native client, repeat {rep + 1}/{cfg['repeats']} {target:<9} {mode:<14} {size:>5} B  "
                            f"p50 {r['p50_us']:7.1f} us  p99 {r['p99_us']:7.1f} us")
    out = {"label": "measured", "client": "nearfaas-fastpath-load --stream (Rust), closed loop, one request at a time",
           "duration_s": cfg["duration"], "warmup_s": cfg["warmup"], "repeats": cfg["repeats"],
           "tcp_floor": "nearfaas-fastpath-load --stream-floor: reads the header and payload, writes a 69-byte reply, "
                        "one connection at a time; no function", "targets": {}}
    for target in TARGETS:
        out["targets"][target] = {mode: _summary(runs[target][mode]) for mode in MODES}
    per: dict = {}
    for n in concurrency:
        r = batch_run(load_binary, executor_addr, stream_id, batch_bytes, n, cfg["batches"])
        per[str(n)] = r["per_request_us"]
        say(f"native client, executor N={n:<3} per-request {r['per_request_us']:7.1f} us")
    out["executor_per_request_us"] = per
    out["batch_bytes"], out["batches"] = batch_bytes, cfg["batches"]
    out["per_request_ratio_n64"] = per["64"] / per["1"] if per.get("64") and per.get("1") else None
    return out


def _summary(by_size: dict) -> dict:
    return {key: {str(size): median(present([r[key] for r in reps]), None) for size, reps in by_size.items()}
            for key in ("p50_us", "p99_us", "req_per_s")}


def table(native: dict) -> str:
    """p50 / p99 per size, executor beside the floor, both modes."""
    t = native["targets"]
    sizes = list(t["executor"]["per_connection"]["p50_us"])
    lines = ["native client (Rust), p50 / p99 us, measured:"]
    head = "".join(f"{target + ' ' + mode:>30}" for mode in MODES for target in TARGETS)
    lines.append(f"  {'bytes':>6}  {head}")
    for s in sizes:
        cells = "".join(f"{_cell(t[target][mode], s):>30}" for mode in MODES for target in TARGETS)
        lines.append(f"  {s:>6}  {cells}")
    per = native.get("executor_per_request_us") or {}
    if per:
        lines.append(f"native client, executor per-request time (us) = batch latency / N, {native['batch_bytes']}-byte requests: "
                     + ", ".join(f"N={n} {v:.1f}" for n, v in per.items()))
    return "\n".join(lines)


def _cell(row: dict, size: str) -> str:
    p50, p99 = row["p50_us"].get(size), row["p99_us"].get(size)
    return "n/a" if p50 is None else f"{p50:.1f} / {p99:.1f}"
