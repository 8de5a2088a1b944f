"""A burst of concurrent HTTP requests, counted by answer: how a server behaves when far more
clients arrive at once than it has room for (issue 13: overload must be backpressure, a 503
SlowDown with Retry-After that clients retry, never an error that says a node is down).

    counts = asyncio.run(burst(requests, concurrency=2000))

``requests`` is a list of (method, url, body) (presigned URLs carry their own signature). The
answer counts every status, and splits 503s into SlowDown-with-Retry-After and anything else.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import yarl

from nearfaas.stats import percentile


async def burst(requests: list[tuple[str, str, bytes | None]], concurrency: int, timeout_s: float = 120.0) -> dict:
    statuses: dict[str, int] = {}
    other_503: list[str] = []
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)

    async def one(session: aiohttp.ClientSession, method: str, url: str, body: bytes | None) -> None:
        async with gate:
            started = time.perf_counter()
            try:
                # encoded=True: a presigned URL must go out byte for byte as it was signed.
                async with session.request(method, yarl.URL(url, encoded=True), data=body) as response:
                    payload = await response.read()
                    key = str(response.status)
                    if response.status == 503:
                        code = response.headers.get("x-nearfaas-error-code", "")
                        if code == "SlowDown" and response.headers.get("Retry-After"):
                            key = "503 SlowDown"
                        else:
                            other_503.append(f"{code}: {payload[:200]!r}")
            except (aiohttp.ClientError, TimeoutError) as exc:
                key = f"client error {type(exc).__name__}"
            latencies.append(time.perf_counter() - started)
            statuses[key] = statuses.get(key, 0) + 1

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        await asyncio.gather(*(one(session, m, u, b) for m, u, b in requests))
    p50, p99 = percentile(latencies, 50, None), percentile(latencies, 99, None)
    return {"requests": len(requests), "concurrency": concurrency, "seconds": round(time.perf_counter() - started, 2),
            "statuses": dict(sorted(statuses.items())), "other_503_examples": other_503[:5],
            "p50_ms": None if p50 is None else round(p50 * 1000, 1), "p99_ms": None if p99 is None else round(p99 * 1000, 1)}
