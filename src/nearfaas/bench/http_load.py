"""A closed-loop HTTP load generator in Python: the fallback of the benchmarks when wrk is not
installed (keep-alive connections, one request outstanding per client)."""

from __future__ import annotations

import http.client
import threading
import time
from urllib.parse import urlsplit


def closed_loop(url: str, clients: int, duration: float, method: str = "GET", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[list[float], int, float]:
    """``clients`` threads each sending ``method url`` back to back for ``duration`` seconds.
    Returns (latencies in seconds, non-200 answers, elapsed seconds)."""
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
