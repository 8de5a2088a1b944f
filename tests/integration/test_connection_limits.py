"""An idle-connection flood against the gateway (issue 13, item 4): other clients are still
served, the idle connections are closed after the head deadline, and memory comes back."""

from __future__ import annotations

import re
import socket
import time

import pytest
import requests

from nearfaas.cluster import launcher
from nearfaas.serving import HEAD_TIMEOUT_S

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def _metric(text: str, state: str) -> float:
    match = re.search(rf'nearfaas_connections\{{server="gateway",state="{state}"\}} ([\d.]+)', text)
    return float(match.group(1)) if match else -1


def test_an_idle_flood_neither_locks_out_clients_nor_stays(cluster, bucket):
    gateway = next(p["pid"] for p in launcher.read_layout(cluster.state_dir)["processes"] if p["name"] == "gateway")
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="warm", Body=b"x")  # warm the gateway's pools before measuring
    before = _rss_kib(gateway)
    host, port = cluster.url.split("//")[1].split(":")
    flood = []
    try:
        for i in range(1500):
            sock = socket.create_connection((host, int(port)))
            if i % 3 == 0:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # a head that never ends
            flood.append(sock)
        started = time.monotonic()
        s3.put_object(Bucket=bucket, Key="during", Body=b"still served")
        assert s3.get_object(Bucket=bucket, Key="during")["Body"].read() == b"still served"
        assert requests.get(f"{cluster.url}/healthz", timeout=5).text == "OK"
        assert time.monotonic() - started < 5, "the flood slowed real clients down"
        assert _metric(requests.get(f"{cluster.url}/metrics", timeout=5).text, "awaiting_head") >= 1000
        time.sleep(HEAD_TIMEOUT_S + 1.5)
        closed = 0
        for sock in flood:
            sock.settimeout(0.01)
            try:
                closed += sock.recv(1) == b""
            except ConnectionResetError:
                closed += 1
            except (TimeoutError, BlockingIOError):
                pass
        assert closed == len(flood), f"{len(flood) - closed} idle connections were still open after the deadline"
        assert _metric(requests.get(f"{cluster.url}/metrics", timeout=5).text, "awaiting_head") == 0
    finally:
        for sock in flood:
            sock.close()
    time.sleep(0.5)
    after = _rss_kib(gateway)
    assert after - before < 40 * 1024, f"gateway RSS grew {before} -> {after} KiB and stayed"
