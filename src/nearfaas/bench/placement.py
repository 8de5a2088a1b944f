"""Placement benchmark: the same 3-stage chain under near-data and compute-only placement, over
emulated storage links, in one run. All times are measured on this machine; the link delays are
injected from the profiles in nearfaas.link.profiles (labelled in the output).

The chain is the asset-damage application of examples/stack.yml (DSCS-Serverless Fig. 2):
pre-processing reads the image and writes a tensor of the same size, classification reads the
tensor and writes a small result, the notification reads that result. Under compute-only the
image, the tensor (both ways) and the result cross the link; under near-data only the result does.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import requests

from nearfaas.bench.cluster import scratch_cluster
from nearfaas.stats import median, percentile
from nearfaas.client import gateway_session, s3_client
from nearfaas.spec.bundle import pack
from nearfaas.spec.cluster import LinkSpec
from nearfaas.telemetry.headers import parse_link, parse_timing

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FULL = {"sizes": [64 * 1024, 1 << 20, 16 << 20, 64 << 20], "profiles": ["dc-25g", "s3-like"], "repeats": 5}
QUICK = {"sizes": [64 * 1024, 1 << 20], "profiles": ["s3-like"], "repeats": 3}
POLICIES = ("near-data", "compute-only")
# name -> (handler folder in examples/, chain): the application is called by its first function.
CHAIN = {"damage-detect": ("damage-preprocess", ["damage-classify"]), "damage-classify": ("damage-classify", ["damage-notify"]),
         "damage-notify": ("damage-notify", [])}


def run_profile(profile: str, sizes: list[int], repeats: int, progress=lambda msg: None) -> dict:
    with scratch_cluster(link=LinkSpec(profile=profile)) as (layout, state):
        url = layout["gateway_url"]
        _deploy_chain(layout)
        s3 = s3_client(url, state)
        s3.create_bucket(Bucket="bench")
        results = {}
        for size in sizes:
            key = f"input-{size}"
            s3.put_object(Bucket="bench", Key=key, Body=os.urandom(size))
            # Interleaved: one call of each policy per repeat, so a drift of this VM's speed
            # hits both alike. The first round warms the instances and is not counted.
            rows = {policy: [] for policy in POLICIES}
            for repeat in range(repeats + 1):
                for policy in POLICIES:
                    row = _call(url, key, policy)
                    if repeat:
                        rows[policy].append(row)
            per_size = results.setdefault(str(size), {})
            for policy in POLICIES:
                per_size[policy] = _summary(rows[policy])
                progress(f"{profile}: {size // 1024} KiB under {policy}: p50 {per_size[policy]['p50_ms']:.1f} ms")
            digests = [per_size[p]["sha256"] for p in POLICIES]
            per_size["outputs_identical_across_policies"] = None not in digests and len(set(digests)) == 1
        return results


def _deploy_chain(layout: dict) -> None:
    url = layout["gateway_url"]
    for name, (folder, chain) in CHAIN.items():
        x = {"chain": chain} | ({"accelerator": "dscs", "placement": "data"} if chain else {})
        body = {"service": name, "lang": "python3-http", "bundle": pack(EXAMPLES / folder), "envVars": {"exec_timeout": "120s"},
                "x-nearfaas": x | {"buckets": ["bench"]}}
        gateway_session(layout=layout).post(f"{url}/system/functions", json=body, timeout=30).raise_for_status()


def _summary(rows: list[dict]) -> dict:
    digests = {r["sha256"] for r in rows}
    totals = [r["total_s"] for r in rows]
    return {
        "p50_ms": median(totals) * 1e3, "p95_ms": percentile(totals, 95) * 1e3,
        "data_share": median(r["data_s"] / r["total_s"] for r in rows),
        "link_bytes": median(r["link_read"] + r["link_write"] for r in rows),
        "link_seconds": median(r["link_s"] for r in rows),
        "stack_ms": median(r["stack_s"] for r in rows) * 1e3,
        "compute_ms": median(r["compute_s"] for r in rows) * 1e3,
        "nodes": sorted({r["node"] for r in rows}), "placements": sorted({r["placement"] for r in rows}),
        "outputs_identical": len(digests) == 1, "sha256": digests.pop() if len(digests) == 1 else None,
    }


def _call(url: str, key: str, policy: str) -> dict:
    started = time.perf_counter()
    resp = requests.post(f"{url}/function/damage-detect", json={"input": {"bucket": "bench", "key": key}},
                         headers={"X-Nearfaas-Policy": policy}, timeout=300)
    total = time.perf_counter() - started
    resp.raise_for_status()
    timing = parse_timing(resp.headers["X-Nearfaas-Timing"])
    link = parse_link(resp.headers["X-Nearfaas-Link"])
    return {"total_s": total, "data_s": float(timing["data"]), "stack_s": float(timing["stack"]), "compute_s": float(timing["compute"]),
            "link_read": link["read"], "link_write": link["write"],
            "link_s": link["seconds"], "node": resp.headers["X-Nearfaas-Node"], "placement": resp.headers["X-Nearfaas-Placement"],
            "sha256": hashlib.sha256(resp.content).hexdigest()}


def steps(quick: bool = False) -> int:
    """How many (profile, size, policy) measurements a run makes: one progress step each."""
    plan = QUICK if quick else FULL
    return len(plan["profiles"]) * len(plan["sizes"]) * len(POLICIES)


def run(quick: bool = False, progress=lambda msg: None) -> dict:
    plan = QUICK if quick else FULL
    by_profile = {p: run_profile(p, plan["sizes"], plan["repeats"], progress) for p in plan["profiles"]}
    # The headline the CLI prints: per policy, the link bytes and p50 of the largest size on the
    # last profile (the slowest link).
    last = by_profile[plan["profiles"][-1]][str(plan["sizes"][-1])]
    return {
        "label": "measured (link delays injected from modelled profiles)",
        "workload": "3-stage chain: pre-process (read input, write a tensor of equal size) -> classify (read it, write a "
                    "small result) -> notify (read the result)",
        "plan": plan,
        "policies": {p: {"link_bytes": last[p]["link_bytes"], "p50_ms": last[p]["p50_ms"]} for p in POLICIES},
        "results": by_profile,
    }
