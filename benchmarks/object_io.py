#!/usr/bin/env python3
"""Object PUT/GET throughput side by side in one run (all numbers measured here).

For 4 KiB, 1 MiB and 64 MiB objects:
  boto3 -> gateway   the cluster's S3 endpoint (2 replicas written, each fsync'd)
  boto3 -> node      one storage node's S3 endpoint (1 copy, fsync'd)
  plain HTTP -> gw   the same gateway from `requests` (no SigV4 payload hash, no checksum):
                     separates what boto3 spends on the client from what the server spends
  raw file copy      write a file + fsync + rename (the same durability, no HTTP) / read it back

    python benchmarks/object_io.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_facts, median, percentile, scratch_cluster, write_result

SIZES = {"4KiB": 4 * 1024, "1MiB": 1024 * 1024, "64MiB": 64 * 1024 * 1024}


def _client(url: str, access_key: str = "bench", secret_key: str = "bench"):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=url, aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def _timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def raw_copy(data: bytes, repeats: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory(dir=".") as tmp:
        target = Path(tmp) / "obj"

        def put():
            part = Path(tmp) / "obj.tmp"
            with open(part, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(part, target)
            fd = os.open(tmp, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

        def get():
            with open(target, "rb") as f:
                f.read()

        return _timed(put, repeats), _timed(get, repeats)


def s3_io(client, bucket: str, data: bytes, repeats: int) -> tuple[list[float], list[float]]:
    key = f"bench/{len(data)}"

    def put():
        client.put_object(Bucket=bucket, Key=key, Body=data)

    def get():
        client.get_object(Bucket=bucket, Key=key)["Body"].read()

    return _timed(put, repeats), _timed(get, repeats)


def http_io(base: str, bucket: str, data: bytes, repeats: int) -> tuple[list[float], list[float]]:
    import requests

    session = requests.Session()
    url = f"{base}/{bucket}/bench-http/{len(data)}"

    def put():
        session.put(url, data=data).raise_for_status()

    def get():
        resp = session.get(url)
        resp.raise_for_status()
        assert len(resp.content) == len(data)

    return _timed(put, repeats), _timed(get, repeats)


def summarise(size: int, samples: list[float]) -> dict:
    return {"median_s": median(samples), "p99_s": percentile(samples, 99), "mb_per_s": size / median(samples) / 1e6,
            "samples_s": [round(s, 6) for s in samples]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results: dict = {}
    # auth: off on the gateway, so the plain-HTTP row can run unsigned; a node answers only the
    # cluster's internal key (what the gateway signs with).
    with scratch_cluster(auth=None) as (layout, state):
        from nearfaas.auth.internal import INTERNAL_ACCESS_KEY

        gateway = _client(layout["gateway_url"])
        gateway.create_bucket(Bucket="bench")
        node = next(n for n in layout["nodes"] if n["kind"] == "storage")
        direct = _client(node["url"], INTERNAL_ACCESS_KEY, layout["internal_secret"])
        direct.create_bucket(Bucket="bench-direct")
        for label, size in SIZES.items():
            data = os.urandom(size)
            repeats = args.repeats if size < 32 * 1024 * 1024 else max(3, args.repeats // 2)
            rows = {
                "boto3_gateway": s3_io(gateway, "bench", data, repeats),
                "boto3_node": s3_io(direct, "bench-direct", data, repeats),
                "http_gateway": http_io(layout["gateway_url"], "bench", data, repeats),
                "raw_file_copy": raw_copy(data, repeats),
            }
            results[label] = {system: {"put": summarise(size, p), "get": summarise(size, g)} for system, (p, g) in rows.items()}
            for system, r in results[label].items():
                print(f"{label:>6} {system:<14} PUT {r['put']['mb_per_s']:9.1f} MB/s ({r['put']['median_s'] * 1e3:8.2f} ms)   "
                      f"GET {r['get']['mb_per_s']:9.1f} MB/s ({r['get']['median_s'] * 1e3:8.2f} ms)", flush=True)
    ratios = {label: {f"gateway_vs_raw_{op}": r["raw_file_copy"][op]["median_s"] and
                      r["boto3_gateway"][op]["mb_per_s"] / r["raw_file_copy"][op]["mb_per_s"] for op in ("put", "get")}
              for label, r in results.items()}
    path = write_result("object_io", {"benchmark": "object_io", "label": "measured", "repeats": args.repeats,
                                      "machine": machine_facts(), "results": results, "ratios": ratios})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
