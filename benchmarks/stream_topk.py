#!/usr/bin/env python3
"""Streaming Top-K (K=16, u32 LE) side by side, a connection per request, as in Yang & Fahmy's
Fig. 2 (all numbers measured here): the executor's stream target (insertion and heap variants,
when the executor has one), the paper's bare metal re-implemented (stdlib ThreadingHTTPServer +
heapq behind a timestamping asyncio interceptor), and a warm Python function on a private nearfaas
cluster through the gateway (its cold start reported apart).

    python benchmarks/stream_topk.py [--quick] [--requests N] [--sizes 64,128] [--concurrency 1,2,4]
        -> benchmarks/results/stream_topk.json (+ stream_topk.png); $NEARFAAS_BENCH_RESULTS redirects
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.bench import stream
from nearfaas.bench.results import machine_facts, write_result


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 requests per size, one repeat, N in 1, 4, 16, 64")
    parser.add_argument("--requests", type=int, help="requests per size and repeat (default 1000; 100 with --quick)")
    parser.add_argument("--sizes", type=_ints, help=f"request sizes in bytes (default {','.join(map(str, stream.SIZES))})")
    parser.add_argument("--concurrency", type=_ints, help=f"N values (default {','.join(map(str, stream.CONCURRENCY))})")
    parser.add_argument("--repeats", type=int, help="repeats of the latency runs (default 3; 1 with --quick)")
    parser.add_argument("--systems", type=lambda t: [x for x in t.split(",") if x], default=list(stream.SYSTEMS),
                        help=f"which systems (default {','.join(stream.SYSTEMS)})")
    parser.add_argument("--executor-workers", type=int, default=1, help="the executor's --workers (default 1)")
    args = parser.parse_args(argv)
    try:
        # Checked before anything starts: a bad size is an error, not a benchmark that dies half way.
        stream.check_sizes(args.sizes if args.sizes is not None else stream.SIZES)
        if args.concurrency is not None:
            stream.check_concurrency(args.concurrency)
        if args.requests is not None:
            stream.check_requests(args.requests)
    except ValueError as exc:
        parser.error(str(exc))
    machine = machine_facts()
    result = stream.run(args.quick, sizes=args.sizes, requests=args.requests, concurrency=args.concurrency, repeats=args.repeats,
                        systems=args.systems, executor_workers=args.executor_workers,
                        progress=lambda msg: print(f"  {msg}", flush=True))
    result["machine"] = machine
    print(stream.table(result))
    path = write_result("stream_topk", result)
    png = stream.plot(result, path.with_suffix(".png"))
    print(f"wrote {path}" + (f" and {png}" if png else " (no plot: matplotlib is not installed)") + f"  ({result['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
