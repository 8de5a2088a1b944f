#!/usr/bin/env python3
"""Does an idle-connection flood lock clients out of the gateway? (all numbers measured here)

On a fresh local cluster: open N idle TCP connections to the gateway (half send nothing, half
send a request head that never ends), then, while they are held open, time 50 GETs of a small
object from a fresh boto3 client. Then watch the gateway close the idle connections (its
first-request-head deadline and connection cap, nearfaas.serving) and check that its memory
returns to the baseline once they are gone.

    python benchmarks/idle_connections.py [--connections 20000] [--quick]

The sockets are spread over child processes so that each stays below the descriptor limit
(the soft limit is raised to the hard one first). Latencies on a small, shared machine are
indicative only.
"""

from __future__ import annotations

import argparse
import errno
import math
import multiprocessing as mp
import os
import re
import resource
import select
import socket
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench import cluster as bench_cluster
from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.stats import median, percentile

BUCKET, KEY = "idle-flood", "small"
PARTIAL_HEAD = b"GET / HTTP/1.1\r\nHost: x\r\n"  # no blank line: the head never ends
FD_SPARE = 500  # descriptors each flood process keeps for itself (pipes, imports, ...)


def hold_sockets(pipe, host: str, port: int, count: int, offset: int, batch: int) -> None:
    """Child process: open `count` idle connections in batches, then answer the parent's
    'count' (how many has the gateway closed so far?) and 'close' messages."""
    sockets, failed, started = {}, Counter(), time.monotonic()
    for first in range(0, count, batch):
        pending, poller = {}, select.poll()
        for _ in range(min(batch, count - first)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            err = s.connect_ex((host, port))
            if err not in (0, errno.EINPROGRESS):
                failed[errno.errorcode.get(err, str(err))] += 1
                s.close()
                continue
            pending[s.fileno()] = s
            poller.register(s, select.POLLOUT)
        deadline = time.monotonic() + 10  # SYNs dropped by a full accept queue are retried at 1 s, 3 s, ...
        while pending and time.monotonic() < deadline:
            for fd, _ in poller.poll(200):
                s = pending.pop(fd)
                poller.unregister(fd)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    failed[errno.errorcode.get(err, str(err))] += 1
                    s.close()
                    continue
                if (offset + len(sockets)) % 2:  # every other one starts a request and stalls
                    try:
                        s.send(PARTIAL_HEAD)
                    except OSError:
                        pass  # already evicted by the gateway: counted as closed later
                sockets[fd] = s
        for s in pending.values():
            failed["timeout"] += 1
            s.close()
    pipe.send({"connected": len(sockets), "failed": sum(failed.values()), "errors": dict(failed),
               "open_seconds": round(time.monotonic() - started, 2)})

    # A closed connection makes its socket readable: recv then gives b"" (FIN) or ECONNRESET (RST).
    watcher, closed, answered = select.epoll(), 0, 0
    for fd in sockets:
        watcher.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
    while True:
        msg = pipe.recv()
        if msg == "close":
            break
        for fd, _ in watcher.poll(0, maxevents=len(sockets) or 1):
            try:
                data = sockets[fd].recv(4096)
            except BlockingIOError:
                continue
            except OSError:  # ECONNRESET: the gateway aborted it
                data = b""
            if data:
                answered += 1  # the gateway answered (e.g. 408) instead of just closing
                continue
            closed += 1
            watcher.unregister(fd)
        pipe.send({"closed": closed, "answered": answered})
    for s in sockets.values():
        s.close()
    pipe.send("done")


def usage(pid: int) -> tuple[int, int]:
    """A process's resident memory (KiB) and open descriptors."""
    with open(f"/proc/{pid}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def gateway_connections(url: str) -> dict:
    """The gateway's own view: nearfaas_connections gauge and closed counters (/metrics is open)."""
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    except OSError as exc:
        return {"error": str(exc)}
    found = {}
    for labels, value in re.findall(r'^nearfaas_connections(?:_closed_total)?\{(.*)\} (\S+)$', text, re.M):
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if named.get("server") == "gateway":
            found[named.get("state") or named.get("reason")] = int(float(value))
    return found


def s3_client(layout: dict):
    """A fresh boto3 client (its own connection pool), no retries: a failure shows as one."""
    keys = layout["auth"]
    return bench_cluster.s3_client(layout["gateway_url"], keys["access_key"], keys["secret_key"], timeout=10)


def other_client(layout: dict, requests: int) -> dict:
    """A fresh client doing `requests` GETs of the small object: successes and latency."""
    s3 = s3_client(layout)
    latencies, errors = [], []
    for _ in range(requests):
        start = time.perf_counter()
        try:
            assert s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read() == b"hello"
            latencies.append((time.perf_counter() - start) * 1000)
        except Exception as exc:  # every failure is the finding
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
    return {"requests": requests, "succeeded": len(latencies), "p50_ms": round(median(latencies), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(max(latencies, default=float("nan")), 2),
            "errors": errors[:5]}


class Flood:
    """The idle connections, spread over child processes so that each stays below the
    descriptor limit."""

    def __init__(self, host: str, port: int, shares: list[int], batch: int):
        ctx = mp.get_context("spawn")  # a clean child: no inherited boto3 threads or descriptors
        self.pipes, self.procs = [], []
        for i, share in enumerate(shares):
            self.pipes.append((ends := ctx.Pipe())[0])
            self.procs.append(ctx.Process(target=hold_sockets, args=(ends[1], host, port, share, sum(shares[:i]), batch), daemon=True))
            self.procs[-1].start()
        started = time.monotonic()
        self.opened = [p.recv() for p in self.pipes]
        self.ended = time.monotonic()  # every connection is open (or given up on)
        self.open_seconds = self.ended - started
        self.connected = sum(o["connected"] for o in self.opened)
        self.failed = sum(o["failed"] for o in self.opened)
        self.errors = sum((Counter(o["errors"]) for o in self.opened), Counter())

    def closed_now(self) -> tuple[int, int]:
        """How many the gateway has closed so far, and how many it answered instead."""
        for p in self.pipes:
            p.send("count")
        replies = [p.recv() for p in self.pipes]
        return sum(r["closed"] for r in replies), sum(r["answered"] for r in replies)

    def wait_closed(self, timeout: float) -> tuple[float | None, int, int]:
        """Keep holding them: seconds from the flood's end until the gateway has closed every one
        (None: not within ``timeout`` of it), then the closed and answered counts."""
        closed, answered = 0, 0
        while time.monotonic() - self.ended < timeout:
            closed, answered = self.closed_now()
            if closed >= self.connected:
                return round(time.monotonic() - self.ended, 2), closed, answered
            time.sleep(0.25)
        return None, closed, answered

    def close(self) -> None:
        for p in self.pipes:
            p.send("close")
            p.recv()
        for proc in self.procs:
            proc.join(10)


class Peak:
    """Samples a process's RSS and descriptors every 0.2 s, for their peaks."""

    def __init__(self, pid: int, rss_kib: int, fds: int):
        self.pid, self.rss_kib, self.fds = pid, rss_kib, fds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            rss, fds = usage(self.pid)
            self.rss_kib, self.fds = max(self.rss_kib, rss), max(self.fds, fds)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def settled_usage(pid: int, rss_base: int) -> tuple[int, int]:
    """RSS and descriptors once freed memory had its chance to return. It may reach the OS late
    (or never: the allocator keeps its high-water mark), so poll for up to 20 s for RSS within
    20% of the baseline."""
    time.sleep(3)
    started, (rss, fds) = time.monotonic(), usage(pid)
    while rss > rss_base * 1.2 and time.monotonic() - started < 20:
        time.sleep(1)
        rss, fds = usage(pid)
    return rss, fds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=20000, help="idle connections to open")
    parser.add_argument("--requests", type=int, default=50, help="GETs of the other client per phase")
    parser.add_argument("--batch", type=int, default=500, help="connects in flight per flood process")
    parser.add_argument("--close-timeout", type=float, default=40.0, help="seconds to wait for the gateway to close them")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2,000 connections")
    args = parser.parse_args()
    if args.quick:
        args.connections = 2000
    return args


def main() -> int:
    args = parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    per_process = (hard if hard != resource.RLIM_INFINITY else 1 << 20) - FD_SPARE
    workers = max(1, math.ceil(args.connections / per_process))
    shares = [args.connections // workers + (i < args.connections % workers) for i in range(workers)]

    with scratch_cluster() as (layout, state):
        from nearfaas.cluster import launcher

        url = layout["gateway_url"]
        gateway = next(p["pid"] for p in launcher.read_layout(state)["processes"] if p["name"] == "gateway")
        s3 = s3_client(layout)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"hello")
        baseline = other_client(layout, args.requests)  # also warms the gateway's pools before the RSS baseline
        rss_base, fds_base = usage(gateway)
        print(f"baseline (measured): gateway RSS {rss_base / 1024:.1f} MiB, {fds_base} fds; other client "
              f"{baseline['succeeded']}/{baseline['requests']} ok, p50 {baseline['p50_ms']} ms, p99 {baseline['p99_ms']} ms", flush=True)

        peak = Peak(gateway, rss_base, fds_base)  # through the whole flood
        flood = Flood(urlsplit(url).hostname, urlsplit(url).port, shares, args.batch)
        connected = flood.connected
        print(f"flood (measured): {connected} connected, {flood.failed} failed {dict(flood.errors)} in {flood.open_seconds:.1f} s "
              f"over {workers} process(es)", flush=True)

        held = flood.closed_now()[0]
        gauge_during = gateway_connections(url)
        during = other_client(layout, args.requests)
        print(f"during the flood (measured): {connected - held} of ours still open at its start; gateway reports {gauge_during}; "
              f"other client {during['succeeded']}/{during['requests']} ok, p50 {during['p50_ms']} ms, "
              f"p99 {during['p99_ms']} ms, max {during['max_ms']} ms {during['errors'] or ''}", flush=True)

        all_closed_after, closed, answered = flood.wait_closed(args.close_timeout)
        gauge_after = gateway_connections(url)
        print(f"closing (measured): the gateway closed {closed}/{connected}"
              + (f", all within {all_closed_after} s of the flood's end" if all_closed_after is not None
                 else f", {connected - closed} still open after {args.close_timeout} s")
              + f"; {answered} got a response; gateway reports {gauge_after}", flush=True)
        flood.close()
        peak.stop()

        rss_final, fds_final = settled_usage(gateway, rss_base)
        after = other_client(layout, args.requests)
        print(f"memory (measured): gateway RSS baseline {rss_base / 1024:.1f} MiB, peak {peak.rss_kib / 1024:.1f} MiB, "
              f"final {rss_final / 1024:.1f} MiB ({(rss_final - rss_base) / 1024:+.1f} MiB); fds {fds_base} -> peak "
              f"{peak.fds} -> {fds_final}; other client afterwards {after['succeeded']}/{after['requests']} ok, "
              f"p50 {after['p50_ms']} ms", flush=True)

    verdict = {"other_client_all_ok_during_flood": during["succeeded"] == during["requests"],
               "all_closed_by_gateway": all_closed_after is not None,
               "rss_within_20pct_of_baseline": rss_final <= rss_base * 1.2}
    print(f"verdict (measured): {verdict}")
    path = write_result("idle_connections", {
        "benchmark": "idle_connections", "label": "measured", "machine": machine_facts(), "args": vars(args),
        "nofile_limit": {"soft_at_start": soft, "hard": hard}, "flood_processes": workers,
        "flood": {"asked": args.connections, "connected": connected, "failed": flood.failed, "errors": dict(flood.errors),
                  "open_seconds": round(flood.open_seconds, 2), "per_process": flood.opened,
                  "still_open_when_other_client_started": connected - held},
        "other_client": {"baseline": baseline, "during_flood": during, "after": after},
        "gateway_connections": {"during_flood": gauge_during, "after_closing": gauge_after},
        "closing": {"closed_by_gateway": closed, "answered": answered, "all_closed_seconds_after_flood": all_closed_after,
                    "timeout_s": args.close_timeout},
        "gateway_memory": {"baseline_rss_kib": rss_base, "peak_rss_kib": peak.rss_kib, "final_rss_kib": rss_final,
                           "baseline_fds": fds_base, "peak_fds": peak.fds, "final_fds": fds_final},
        "verdict": verdict})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
