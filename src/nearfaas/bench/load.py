"""Closed-loop HTTP load for the benchmarks: ``wrk`` when it is installed, else a Python client.

wrk (C, keep-alive) costs the client little CPU, which matters on a 2-core box where the client
competes with the server it measures; the Python client is the fallback, and every result says
which one ran (``generator``) because their numbers are not interchangeable.

Both return one shape, times in seconds:
``{"p50_s", "p99_s", "mean_s", "rps", "errors", "generator"}`` (``mean_s`` is None for wrk,
whose report has no exact mean; ``errors`` counts answers other than 2xx/3xx, or non-200 for
the Python client).
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from urllib.parse import urlsplit

from nearfaas.stats import mean, percentile

WRK = "wrk"
PYTHON = "python http.client threads"


def generator() -> str:
    """The load generator ``http_load`` will use on this machine."""
    return WRK if shutil.which("wrk") else PYTHON


def http_load(url: str, clients: int, duration: float, method: str = "GET", body: bytes | None = None,
              headers: dict[str, str] | None = None) -> dict:
    """``clients`` connections each sending ``method url`` back to back for ``duration`` seconds."""
    run = wrk if generator() == WRK else python_load
    return run(url, clients, duration, method, body, headers)


def _lua_string(data: bytes) -> str:
    # Every byte as a 3-digit decimal escape: any body survives, quotes and newlines included.
    return '"' + "".join(f"\\{b:03d}" for b in data) + '"'


def wrk(url: str, clients: int, duration: float, method: str = "GET", body: bytes | None = None,
        headers: dict[str, str] | None = None) -> dict:
    flags = [part for k, v in (headers or {}).items() for part in ("-H", f"{k}: {v}")]
    script = None
    if method != "GET" or body is not None:  # wrk sets a method or body only from a Lua script
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(f'wrk.method = "{method}"\n' + (f"wrk.body = {_lua_string(body)}\n" if body is not None else ""))
            script = f.name
        flags += ["-s", script]
    seconds = max(1, round(duration))  # wrk takes whole seconds only ("0.8s" is a usage error)
    try:
        out = subprocess.run(["wrk", f"-t{min(clients, 2)}", f"-c{clients}", f"-d{seconds}s", "--latency", *flags, url],
                             capture_output=True, text=True, check=True, timeout=seconds + 30).stdout
    finally:
        if script:
            os.unlink(script)
    return parse_wrk(out)


def parse_wrk(out: str) -> dict:
    """wrk's ``--latency`` report as the common result shape."""
    pct = {}
    for label, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        pct[label] = float(value) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"p50_s": pct.get("50"), "p99_s": pct.get("99"), "mean_s": None, "rps": rps,
            "errors": int(errors.group(1)) if errors else 0, "generator": WRK}


def python_load(url: str, clients: int, duration: float, method: str = "GET", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> dict:
    latencies, errors, elapsed = closed_loop(url, clients, duration, method, body, headers)
    return {"p50_s": percentile(latencies, 50, None), "p99_s": percentile(latencies, 99, None), "mean_s": mean(latencies, None),
            "rps": len(latencies) / elapsed, "errors": errors, "generator": PYTHON}


def closed_loop(url: str, clients: int, duration: float, method: str = "GET", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[list[float], int, float]:
    """``clients`` threads each sending ``method url`` on one keep-alive connection, one request
    outstanding, for ``duration`` seconds. Returns (latencies in seconds, non-200 answers,
    elapsed seconds)."""
    parts = urlsplit(url)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.perf_counter() + duration

    def client():
        conn = http.client.HTTPConnection(parts.hostname, parts.port)
        mine, bad = [], 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            conn.request(method, parts.path or "/", body=body, headers=headers or {})
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - t0)
            bad += resp.status != 200
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, errors[0], time.perf_counter() - started
