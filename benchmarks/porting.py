#!/usr/bin/env python3
"""Code from other platforms: a boto3 thumbnailer against the same one on context.objects, each
near the data and compute-only, over an emulated link, side by side in one run (docs/porting.md).

    python benchmarks/porting.py [--quick] [--link s3-like]

Measured: wall time of each call at the client, the call's data time and link bytes from its
headers. Interleaved (one call of each variant per round) so drift hits all alike; round 0 warms.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas
import requests

from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.results import machine_facts, write_result
from nearfaas.client import gateway_session, s3_client
from nearfaas.spec.bundle import pack
from nearfaas.spec.cluster import LinkSpec
from nearfaas.stats import median, percentile
from nearfaas.telemetry.headers import parse_link, parse_timing

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "porting"
FUNCTIONS = {"boto3": "thumbnail-boto3", "objects": "thumbnail-objects"}
POLICIES = ("near-data", "compute-only")


def _image(megapixels: float, seed: int = 1) -> bytes:
    from PIL import Image

    side = int((megapixels * 1e6) ** 0.5)
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def run(link: str, repeats: int, megapixels: float) -> dict:
    with scratch_cluster(link=LinkSpec(profile=link)) as (layout, state):
        url = layout["gateway_url"]
        session = gateway_session(layout=layout)
        for name, folder in FUNCTIONS.items():
            body = {"service": f"thumb-{name}", "lang": "python3-http", "bundle": pack(EXAMPLES / folder),
                    "envVars": {"exec_timeout": "60s"}, "x-nearfaas": {"accelerator": "dscs", "buckets": ["photos"]}}
            session.post(f"{url}/system/functions", json=body, timeout=30).raise_for_status()
        s3 = s3_client(url, state)
        s3.create_bucket(Bucket="photos")
        image = _image(megapixels)
        s3.put_object(Bucket="photos", Key="cat.jpg", Body=image)
        rows = {(f, p): [] for f in FUNCTIONS for p in POLICIES}
        for rnd in range(repeats + 1):
            for name in FUNCTIONS:
                for policy in POLICIES:
                    started = time.perf_counter()
                    resp = requests.post(f"{url}/function/thumb-{name}", json={"input": {"bucket": "photos", "key": "cat.jpg"}},
                                         headers={"X-Nearfaas-Policy": policy}, timeout=120)
                    wall = time.perf_counter() - started
                    resp.raise_for_status()
                    if rnd:
                        ln = parse_link(resp.headers["X-Nearfaas-Link"])
                        rows[(name, policy)].append({"wall_s": wall, "data_s": parse_timing(resp.headers["X-Nearfaas-Timing"])["data"],
                                                     "link_bytes": ln["read"] + ln["write"], "placement": resp.headers["X-Nearfaas-Placement"]})
            print(f"  round {rnd}/{repeats}", flush=True)
        out = {"link": link, "image_bytes": len(image), "repeats": repeats, "label": "measured", "variants": {}}
        for (name, policy), rs in rows.items():
            walls = [r["wall_s"] for r in rs]
            out["variants"][f"{name}/{policy}"] = {
                "p50_ms": median(walls) * 1e3, "p99_ms": percentile(walls, 99) * 1e3,
                "data_ms": median(r["data_s"] for r in rs) * 1e3, "link_bytes": median(r["link_bytes"] for r in rs),
                "placements": sorted({r["placement"] for r in rs})}
        v = out["variants"]
        out["near_over_compute_speedup"] = {n: v[f"{n}/compute-only"]["p50_ms"] / v[f"{n}/near-data"]["p50_ms"] for n in FUNCTIONS}
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 9")
    parser.add_argument("--link", default="s3-like", help="emulated link profile [default: s3-like]")
    parser.add_argument("--megapixels", type=float, default=4.0)
    args = parser.parse_args()
    result = run(args.link, 3 if args.quick else 9, args.megapixels)
    result["machine"] = machine_facts()
    print(f"{result['image_bytes'] / 1e6:.2f} MB JPEG over {args.link} (measured, p50 of {result['repeats']} rounds)")
    for name, row in result["variants"].items():
        print(f"  {name:<22} p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms  data {row['data_ms']:6.1f} ms  "
              f"link {row['link_bytes'] / 1e6:6.2f} MB  {','.join(row['placements'])}")
    for name, speedup in result["near_over_compute_speedup"].items():
        print(f"  {name}: near-data is {speedup:.2f}x compute-only")
    print(f"wrote {write_result('porting', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
