"""``python -m nearfaas.models``: list the zoo, build a model, or time it in ONNX Runtime.

python -m nearfaas.models list
python -m nearfaas.models build resnet50 --size full      # progress bar, prints the path
python -m nearfaas.models bench resnet50 --size full      # build (timed), check, load, run at batch 1
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np

from . import MODELS, InferenceSession, build, cached_path, param_count


def _progress_build(key: str, size: str, cache_dir) -> tuple:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"{key} ({size})"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"), TimeElapsedColumn(),
                  transient=True, disable=not sys.stderr.isatty()) as bar:  # fmt: skip
        task = bar.add_task("build", total=param_count(key, size))
        t = time.perf_counter()
        path = build(key, size, cache_dir, progress=lambda done, total: bar.update(task, completed=done))
        return path, time.perf_counter() - t


def bench(key: str, size: str, cache_dir, runs: int, threads: int) -> dict:
    import onnx

    existed = size == "real" or cached_path(key, size, cache_dir).is_file()
    path, build_s = _progress_build(key, size, cache_dir)
    files = [path, path.with_name(path.name + ".data")]
    t = time.perf_counter()
    onnx.checker.check_model(str(path))
    check_s = time.perf_counter() - t
    t = time.perf_counter()
    session = InferenceSession(path, threads=threads)
    load_s = time.perf_counter() - t
    feeds = MODELS[key].random_inputs(size)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = session.run(feeds)
        times.append(time.perf_counter() - t)
    return {
        "key": key,
        "size": size,
        "params": param_count(key, size) if size != "real" else MODELS[key].real.params,
        "build_s": None if existed else round(build_s, 2),
        "bytes": sum(f.stat().st_size for f in files if f.is_file()),
        "check_s": round(check_s, 2),
        "load_s": round(load_s, 2),
        "threads": threads,
        "latency_s": [round(x, 4) for x in times],
        "outputs": {k: list(v.shape) for k, v in out.items()},
        "finite": all(bool(np.isfinite(v.astype(np.float64)).all()) for v in out.values()),
        "max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "measured": "this machine, ONNX Runtime CPU",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nearfaas.models", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the models, their sizes and parameter counts")
    for name in ("build", "bench"):
        p = sub.add_parser(name)
        p.add_argument("key", choices=sorted(MODELS))
        p.add_argument("--size", default="tiny")
        p.add_argument("--cache-dir", default=None)
        if name == "bench":
            p.add_argument("--runs", type=int, default=3)
            p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for key, card in MODELS.items():
            counts = ", ".join(f"{s} {param_count(key, s):,}" if s != "real" else f"real {card.real.params:,}" for s in card.sizes)
            print(f"{key:16s} {card.app:18s} Table 1 {card.table1_params:>13,}  {counts}")
    elif args.cmd == "build":
        path, seconds = _progress_build(args.key, args.size, args.cache_dir)
        print(path)
        print(f"{seconds:.1f} s", file=sys.stderr)
    else:
        print(json.dumps(bench(args.key, args.size, args.cache_dir, args.runs, args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
