#!/usr/bin/env python3
"""Object PUT/GET throughput side by side in one run (all numbers measured here).

For 4 KiB, 1 MiB and 64 MiB objects:
  boto3 -> gateway   the cluster's S3 endpoint (2 replicas written, each fsync'd)
  boto3 -> node      one storage node's S3 endpoint (1 copy, fsync'd)
  plain HTTP -> gw   the same gateway from `requests` (no SigV4 payload hash, no checksum):
                     separates what boto3 spends on the client from what the server spends
  raw file copy      write a file + fsync + rename (the same durability, no HTTP) / read it back
  writes             interleaved: plain PUT, PUT If-None-Match: *, CopyObject via the gateway made
                     in place and streamed, and on one node's own endpoint (all through boto3)

    python benchmarks/object_io.py [--repeats 5]

Before/after: --compare-ref REF runs a second cluster from a git worktree of REF (a commit, say)
next to one from this checkout (uncommitted edits included), and times boto3 -> gateway PUT/GET
at 4 KiB and 1 MiB (64 MiB with --large) on both, the repeats interleaved so the machine's noise
falls on both alike. It prints median and p99 per side and the ratio current/REF of the times
(1.15 = current is 15% slower) and writes results/object_io_compare.json.

    python benchmarks/object_io.py --compare-ref <commit> [--repeats 100] [--large]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench.cluster import s3_client, scratch_cluster
from nearfaas.bench.results import ROOT, machine_facts, write_result
from nearfaas.stats import median, percentile

SIZES = {"4KiB": 4 * 1024, "1MiB": 1024 * 1024, "64MiB": 64 * 1024 * 1024}


def _client(url: str, access_key: str = "bench", secret_key: str = "bench"):
    """The gateway runs with auth off here, so any key does; a node needs the internal one."""
    return s3_client(url, access_key, secret_key)


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


def copy_and_conditional(gateway, direct, data: bytes, repeats: int) -> dict[str, list[float]]:
    """CopyObject through the gateway, made in place (both replicas hold the source: each copies
    its own, no object byte on a link) and streamed (a copy of a named source version always
    streams: read from one replica, written to both, as a copy between nodes does), on one storage
    node's own endpoint (source and copy on that node), and a conditional PUT (If-None-Match: *, a
    fresh key each time) next to a plain one, interleaved (issue 22)."""
    gateway.put_object(Bucket="bench", Key="copy-src", Body=data)
    direct.put_object(Bucket="bench-direct", Key="copy-src", Body=data)
    named = gateway.put_object(Bucket="bench-versioned", Key="copy-src", Body=data)["VersionId"]
    counter = iter(range(10**9))
    size = len(data)  # keys per size: a conditional PUT must never meet an earlier round's key
    fns = {
        "put_gateway": lambda: gateway.put_object(Bucket="bench", Key=f"plain/{size}/{next(counter)}", Body=data),
        "put_if_none_match_gateway": lambda: gateway.put_object(Bucket="bench", Key=f"cond/{size}/{next(counter)}", Body=data,
                                                                IfNoneMatch="*"),
        "copy_gateway_in_place": lambda: gateway.copy_object(Bucket="bench", Key=f"copy/{size}/{next(counter)}",
                                                             CopySource="bench/copy-src"),
        "copy_gateway_streamed": lambda: gateway.copy_object(
            Bucket="bench", Key=f"copy/{size}/{next(counter)}",
            CopySource={"Bucket": "bench-versioned", "Key": "copy-src", "VersionId": named}),
        "copy_node": lambda: direct.copy_object(Bucket="bench-direct", Key=f"copy/{size}/{next(counter)}",
                                                CopySource="bench-direct/copy-src"),
    }
    return _interleaved(fns, repeats)


def summarise(size: int, samples: list[float]) -> dict:
    return {"median_s": median(samples), "p99_s": percentile(samples, 99), "mb_per_s": size / median(samples) / 1e6,
            "samples_s": [round(s, 6) for s in samples]}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


@contextlib.contextmanager
def git_worktree(commit: str):
    """A detached checkout of ``commit`` in a temporary directory, removed again on any exit."""
    parent = Path(tempfile.mkdtemp(prefix="nearfaas-ref-"))
    tree = parent / "tree"
    try:
        _git("worktree", "add", "--detach", str(tree), commit)
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)


def _interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Time each of ``fns`` ``repeats`` times, taking turns, so a burst of load from elsewhere on the
    machine lands on both sides rather than on one side's block of repeats. The order flips every
    round (A B, B A, A B, ...) so neither side always runs just after the other's writes."""
    names = list(fns)
    for fn in fns.values():
        fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t0)
    return samples


def _s3_calls(client, key: str, data: bytes) -> dict:
    """PUT and GET of one object as calls without arguments, for _interleaved."""
    return {"put": lambda: client.put_object(Bucket="bench", Key=key, Body=data),
            "get": lambda: client.get_object(Bucket="bench", Key=key)["Body"].read()}


def compare(ref: str, repeats: int, large: bool) -> int:
    ref_commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    current = {"commit": _git("rev-parse", "HEAD"), "uncommitted_changes_in_src": bool(_git("status", "--porcelain", "--", "src"))}
    facts = machine_facts()
    sizes = {label: size for label, size in SIZES.items() if large or size < 32 * 1024 * 1024}
    # SIGTERM (a timeout, say) unwinds like Ctrl-C: both clusters down, the worktree removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict = {}
    with contextlib.ExitStack() as stack:
        tree = stack.enter_context(git_worktree(ref_commit))
        # auth off, as for the boto3_gateway row of the default run, so the numbers compare with it.
        # Two scratch clusters: separate state dirs and ports (see scratch_cluster).
        clusters = {"current": stack.enter_context(scratch_cluster(auth=None))[0],
                    "ref": stack.enter_context(scratch_cluster(src_root=tree / "src", auth=None))[0]}
        clients = {side: _client(layout["gateway_url"]) for side, layout in clusters.items()}
        for client in clients.values():
            client.create_bucket(Bucket="bench")
        for label, size in sizes.items():
            data = os.urandom(size)
            n = repeats if size < 32 * 1024 * 1024 else max(3, repeats // 2)
            calls = {side: _s3_calls(client, f"bench/{size}", data) for side, client in clients.items()}
            results[label] = {}
            for op in ("put", "get"):  # PUT first: the GETs read what it wrote
                samples = _interleaved({side: calls[side][op] for side in calls}, n)
                now, old = summarise(size, samples["current"]), summarise(size, samples["ref"])
                results[label][op] = {"current": now, "ref": old, "ratio_median": now["median_s"] / old["median_s"],
                                      "ratio_p99": now["p99_s"] / old["p99_s"], "repeats": n}
                print(f"{label:>6} {op.upper():<3} done ({n} repeats per side)", flush=True)
    print(f"\nboto3 -> gateway, current ({current['commit'][:10]}{'+edits' if current['uncommitted_changes_in_src'] else ''}) "
          f"vs REF {ref} ({ref_commit[:10]}); times in ms, ratio = current / REF")
    print(f"{'size':>6} {'op':<4} {'cur med':>9} {'cur p99':>9} {'ref med':>9} {'ref p99':>9} {'ratio med':>9} {'ratio p99':>9}")
    for label, ops_ in results.items():
        for op, r in ops_.items():
            print(f"{label:>6} {op.upper():<4} {r['current']['median_s'] * 1e3:9.2f} {r['current']['p99_s'] * 1e3:9.2f} "
                  f"{r['ref']['median_s'] * 1e3:9.2f} {r['ref']['p99_s'] * 1e3:9.2f} {r['ratio_median']:9.3f} {r['ratio_p99']:9.3f}")
    path = write_result("object_io_compare", {
        "benchmark": "object_io_compare", "label": "measured", "path": "boto3 -> gateway", "repeats": repeats,
        "interleaving": "alternating, order flipped every round", "machine": facts, "current": current,
        "ref": {"ref": ref, "commit": ref_commit}, "results": results})
    print(f"wrote {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 100 when comparing: with 30, two clusters of the same code differed by up to 15% in median here.
    parser.add_argument("--repeats", type=int, default=None, help="per size and op (default 5; 100 with --compare-ref)")
    parser.add_argument("--compare-ref", metavar="REF", help="also run a cluster from git REF and compare gateway PUT/GET with it")
    parser.add_argument("--large", action="store_true", help="with --compare-ref: 64 MiB objects too (slow)")
    args = parser.parse_args()
    if args.compare_ref:
        return compare(args.compare_ref, args.repeats or 100, args.large)
    args.repeats = args.repeats or 5
    results: dict = {}
    # auth: off on the gateway, so the plain-HTTP row can run unsigned; a node answers only the
    # cluster's internal key (what the gateway signs with).
    with scratch_cluster(auth=None) as (layout, state):
        from nearfaas.auth.internal import INTERNAL_ACCESS_KEY

        gateway = _client(layout["gateway_url"])
        gateway.create_bucket(Bucket="bench")
        gateway.create_bucket(Bucket="bench-versioned")
        gateway.put_bucket_versioning(Bucket="bench-versioned", VersioningConfiguration={"Status": "Enabled"})
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
            writes = {op: summarise(size, samples) for op, samples in copy_and_conditional(gateway, direct, data, repeats).items()}
            results[label]["writes"] = writes
            print(f"{label:>6} " + "   ".join(f"{op} {w['median_s'] * 1e3:.2f} ms" for op, w in writes.items()), flush=True)
    ratios = {label: {f"gateway_vs_raw_{op}": r["raw_file_copy"][op]["median_s"] and
                      r["boto3_gateway"][op]["mb_per_s"] / r["raw_file_copy"][op]["mb_per_s"] for op in ("put", "get")}
              | {f"{op}_vs_put_gateway": r["writes"][op]["median_s"] / r["writes"]["put_gateway"]["median_s"]
                 for op in ("put_if_none_match_gateway", "copy_gateway_in_place", "copy_gateway_streamed", "copy_node")}
              for label, r in results.items()}
    path = write_result("object_io", {"benchmark": "object_io", "label": "measured", "repeats": args.repeats,
                                      "machine": machine_facts(), "results": results, "ratios": ratios})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
