"""Placement benchmark: the same data-heavy stage under near-data and compute-only placement,
over emulated storage links, in one run. All times are measured on this machine; the link
delays are injected from the profiles in nearfaas.link.profiles (labelled in the output).

Until chains land (issue 3, item 2) the workload is one stage that reads its input and writes an
output of the same size, so both directions cross the link under compute-only.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import requests

from nearfaas.client import s3_client
from nearfaas.cluster import launcher
from nearfaas.spec.cluster import LinkSpec, load_cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FULL = {"sizes": [64 * 1024, 1 << 20, 16 << 20, 64 << 20], "profiles": ["dc-25g", "s3-like"], "repeats": 5}
QUICK = {"sizes": [64 * 1024, 1 << 20], "profiles": ["s3-like"], "repeats": 3}
POLICIES = ("near-data", "compute-only")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _link_fields(header: str) -> dict:
    name, *fields = header.split(";")
    return {"profile": name} | {k: float(v) for k, v in (f.split("=", 1) for f in fields)}


def run_profile(profile: str, sizes: list[int], repeats: int, progress=lambda msg: None) -> dict:
    with tempfile.TemporaryDirectory(prefix="nearfaas-placement-") as tmp:
        state = Path(tmp) / "state"
        spec = load_cluster(None)
        spec.gateway.port = 0
        spec.link = LinkSpec(profile=profile)
        layout = launcher.up(spec, state)
        try:
            url = layout["gateway_url"]
            body = {"service": "transform", "lang": "python3-http", "handler": str(EXAMPLES / "transform"),
                    "envVars": {"exec_timeout": "120s"}, "x-nearfaas": {"accelerator": "dscs", "placement": "data"}}
            requests.post(f"{url}/system/functions", json=body, timeout=30).raise_for_status()
            s3 = s3_client(url, state)
            s3.create_bucket(Bucket="bench")
            results = {}
            for size in sizes:
                key = f"input-{size}"
                s3.put_object(Bucket="bench", Key=key, Body=os.urandom(size))
                for policy in POLICIES:
                    progress(f"{profile}: {size // 1024} KiB under {policy}")
                    rows = [_call(url, key, policy) for _ in range(repeats + 1)][1:]  # the first warms the node
                    digests = {r["sha256"] for r in rows}
                    totals = [r["total_s"] for r in rows]
                    results.setdefault(str(size), {})[policy] = {
                        "p50_ms": statistics.median(totals) * 1e3, "p95_ms": _pct(totals, 95) * 1e3,
                        "data_share": statistics.median(r["data_s"] / r["total_s"] for r in rows),
                        "link_bytes": statistics.median(r["link_read"] + r["link_write"] for r in rows),
                        "link_seconds": statistics.median(r["link_s"] for r in rows),
                        "nodes": sorted({r["node"] for r in rows}), "placements": sorted({r["placement"] for r in rows}),
                        "outputs_identical": len(digests) == 1, "sha256": digests.pop() if len(digests) == 1 else None,
                    }
            return results
        finally:
            launcher.down(state)


def _call(url: str, key: str, policy: str) -> dict:
    started = time.perf_counter()
    resp = requests.post(f"{url}/function/transform", json={"input": {"bucket": "bench", "key": key}},
                         headers={"X-Nearfaas-Policy": policy}, timeout=300)
    total = time.perf_counter() - started
    resp.raise_for_status()
    timing = dict(p.split("=") for p in resp.headers["X-Nearfaas-Timing"].split(";")[1:])
    link = _link_fields(resp.headers["X-Nearfaas-Link"])
    return {"total_s": total, "data_s": float(timing["data"]), "link_read": link["read"], "link_write": link["write"],
            "link_s": link["seconds"], "node": resp.headers["X-Nearfaas-Node"], "placement": resp.headers["X-Nearfaas-Placement"],
            "sha256": resp.json()["sha256"]}


def run(quick: bool = False, progress=lambda msg: None) -> dict:
    plan = QUICK if quick else FULL
    by_profile = {p: run_profile(p, plan["sizes"], plan["repeats"], progress) for p in plan["profiles"]}
    # The headline the CLI prints: per policy, the link bytes and p50 of the largest size on the
    # last profile (the slowest link).
    last = by_profile[plan["profiles"][-1]][str(plan["sizes"][-1])]
    return {
        "label": "measured (link delays injected from modelled profiles)",
        "workload": "one stage: read input, transform every byte, write an output of equal size",
        "plan": plan,
        "policies": {p: {"link_bytes": last[p]["link_bytes"], "p50_ms": last[p]["p50_ms"]} for p in POLICIES},
        "results": by_profile,
    }
