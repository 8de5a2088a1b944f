"""The Bitar benchmark (issue 19): the thesis's Tables 5.1-5.2 and Fig. 5.4 re-run here.

For each synthetic dataset, one process, side by side, ``repeats`` times each:

* **inner** — pyarrow IPC with per-buffer LZ4 frame / Zstd at 1 and 2 CPU threads (measured);
* **outer, software** — uncompressed IPC, then the whole buffer through a Bitar device on ISA-L
  or libdeflate with 1 and 2 worker threads (measured);
* **outer, modelled engine** — the same uncompressed IPC write (measured) plus the modelled
  BlueField-2 engine's busy time for the buffer's segments (``bitar.codecs.EngineModel``,
  **modelled**: no host CPU; ISA-L supplies its output bytes);
* **none** — uncompressed IPC (measured), the floor both approaches build on.

Throughput is uncompressed IPC bytes per second of (de)serialization. Speedup rows are Bitar
throughput / inner-codec throughput at the same thread count, the shape of Tables 5.1 and 5.2.
Ratios are compressed / uncompressed IPC bytes (Fig. 5.4's definition), and the check the issue
asks for — DEFLATE between LZ4 and Zstd — is computed, not assumed.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pyarrow as pa

from nearfaas.bitar import Device
from nearfaas.bitar import arrow as ba
from nearfaas.dataservices import datasets

THREADS = (1, 2)
INNER = ("lz4", "zstd")
SOFTWARE = ("isal", "libdeflate")
MODELLED = "bf2-model"


def _stats(samples: list[float], nbytes: int) -> dict:
    med = statistics.median(samples)
    return {"median_s": med, "p99_s": float(np.percentile(samples, 99)), "min_s": min(samples),
            "throughput_mb_per_s": nbytes / med / 1e6 if med > 0 else None, "samples_s": samples}


def _time(fn, repeats: int):
    out, samples = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        samples.append(time.perf_counter() - t0)
    return out, samples


def dataset_run(name: str, size: int, repeats: int, seed: int = 0, say=lambda m: None) -> dict:
    table = datasets.generate(name, size, seed)
    plain = ba.serialize(table)
    raw = plain.size
    rec = {"dataset": name, "rows": table.num_rows, "columns": table.num_columns, "ipc_bytes": raw,
           "serialize": {}, "deserialize": {}, "ratio": {}}
    ser, des = rec["serialize"], rec["deserialize"]
    say(f"{name}: uncompressed IPC ({raw / 1e6:.1f} MB)")
    _, s = _time(lambda: ba.serialize(table), repeats)
    ser["none"] = _stats(s, raw)
    _, s = _time(lambda: ba.deserialize(plain), repeats)
    des["none"] = _stats(s, raw)
    for codec in INNER:
        for n in THREADS:
            say(f"{name}: inner {codec}, {n} thread(s)")
            buf, s = _time(lambda codec=codec, n=n: ba.serialize(table, codec, n), repeats)
            ser[f"{codec}/{n}"] = _stats(s, raw)
            _, s = _time(lambda buf=buf, n=n: ba.deserialize(buf, n), repeats)
            des[f"{codec}/{n}"] = _stats(s, raw)
            rec["ratio"][f"{codec}/{n}"] = buf.size / raw
    for engine in SOFTWARE:
        for n in THREADS:
            say(f"{name}: Bitar outer on {engine}, {n} worker(s)")
            with Device(engine, threads=n) as dev:
                frame, s = _time(lambda dev=dev: ba.serialize_outer(table, dev), repeats)
                ser[f"bitar-{engine}/{n}"] = _stats(s, raw)
                back, s = _time(lambda frame=frame, dev=dev: ba.deserialize_outer(frame, dev), repeats)
                des[f"bitar-{engine}/{n}"] = _stats(s, raw)
                assert back.equals(table), f"{engine}: Bitar round trip changed the table"
            rec["ratio"][f"bitar-{engine}/{n}"] = len(frame) / raw
    say(f"{name}: Bitar outer on the modelled engine")
    with Device(MODELLED, threads=1) as dev:
        comp = dev.run_compress(plain)
        decomp = dev.run_decompress(comp.output)
    ser[MODELLED] = _stats([x + comp.engine_s for x in ser["none"]["samples_s"]], raw)
    des[MODELLED] = _stats([x + decomp.engine_s for x in des["none"]["samples_s"]], raw)
    ser[MODELLED]["engine_s"], des[MODELLED]["engine_s"] = comp.engine_s, decomp.engine_s
    rec["ratio"][MODELLED] = len(comp.output) / raw
    rec["speedups"] = speedups(rec)
    rec["deflate_between_lz4_and_zstd"] = {
        key: rec["ratio"]["zstd/1"] <= rec["ratio"][key] <= rec["ratio"]["lz4/1"]
        for key in rec["ratio"] if key.startswith("bitar")}
    return rec


def speedups(rec: dict) -> dict:
    """Bitar serialization / deserialization throughput over each inner codec's, per thread count."""
    out = {}
    for kind in ("serialize", "deserialize"):
        cells = rec[kind]
        rows = {}
        for bitar in [f"bitar-{e}" for e in SOFTWARE] + [MODELLED]:
            for codec in INNER:
                for n in THREADS:
                    mine = cells.get(bitar if bitar == MODELLED else f"{bitar}/{n}")
                    theirs = cells[f"{codec}/{n}"]
                    rows[f"{bitar} vs {codec}/{n}"] = mine["throughput_mb_per_s"] / theirs["throughput_mb_per_s"]
        out[kind] = rows
    return out


def run(names=datasets.NAMES, size: int = datasets.DEFAULT_BYTES, repeats: int = 5, progress=None) -> dict:
    say = progress or (lambda m: None)
    pa.set_cpu_count(max(THREADS))  # Arrow's pool serves the inner codecs' 2-thread rows
    runs = [dataset_run(n, size, repeats, say=say) for n in names]
    return {"benchmark": "bitar", "size_bytes": size, "repeats": repeats, "datasets": runs,
            "labels": {"inner, bitar-isal, bitar-libdeflate, none": "measured on this host (wall clock, medians)",
                       MODELLED: "modelled: measured uncompressed IPC time + the modelled engine's busy time "
                                 "(EngineModel: 12.5 GB/s, 5 us per op, 2 lanes); ratio from ISA-L level 1",
                       "ratio": "compressed / uncompressed IPC bytes (lower is better)"},
            "engine_model": vars_engine_model()}


def vars_engine_model() -> dict:
    from dataclasses import asdict

    from nearfaas.bitar.codecs import EngineModel

    return asdict(EngineModel())


def table(result: dict) -> str:
    """Plain-text Tables 5.1 / 5.2 and the ratios."""
    lines = []
    names = [r["dataset"] for r in result["datasets"]]
    for kind, title in (("serialize", "Serialization speedup with Bitar (Table 5.1's shape)"),
                        ("deserialize", "Deserialization speedup with Bitar (Table 5.2's shape)")):
        lines.append(title)
        lines.append(f"{'':44s}" + "".join(f"{n:>12s}" for n in names))
        for row in result["datasets"][0]["speedups"][kind]:
            lines.append(f"{row:44s}" + "".join(f"{r['speedups'][kind][row]:12.2f}" for r in result["datasets"]))
        lines.append("")
    lines.append("Compression ratio, compressed / uncompressed IPC (Fig. 5.4's shape)")
    lines.append(f"{'':44s}" + "".join(f"{n:>12s}" for n in names))
    for key in result["datasets"][0]["ratio"]:
        lines.append(f"{key:44s}" + "".join(f"{r['ratio'][key]:12.3f}" for r in result["datasets"]))
    lines.append("")
    lines.append("Throughput MB/s (median), serialize | deserialize")
    for r in result["datasets"]:
        for key in r["serialize"]:
            lines.append(f"  {r['dataset']:10s} {key:22s} {r['serialize'][key]['throughput_mb_per_s']:10.0f} | "
                         f"{r['deserialize'][key]['throughput_mb_per_s']:10.0f}")
    return "\n".join(lines)


def plot(result: dict, path) -> object:
    """Fig. 5.3's and Fig. 5.4's shape: throughput per approach per dataset (serialize and
    deserialize), and the compression ratios; the modelled engine's bars are hatched."""
    from nearfaas.bench.porter_plots import _pyplot, _save

    plt = _pyplot()
    if plt is None or not result["datasets"]:
        return None
    keys = list(result["datasets"][0]["serialize"])
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    width = 0.8 / len(result["datasets"])
    for ax, kind in zip(axes[:2], ("serialize", "deserialize"), strict=True):
        for i, r in enumerate(result["datasets"]):
            xs = [k + i * width for k in range(len(keys))]
            bars = ax.bar(xs, [r[kind][k]["throughput_mb_per_s"] for k in keys], width, label=r["dataset"])
            for bar, k in zip(bars, keys, strict=True):
                if k == MODELLED:
                    bar.set_hatch("//")
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys, rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("MB/s of uncompressed IPC (median)")
        ax.set_title(f"{kind} throughput (hatched: modelled)", fontsize=9)
        ax.legend(fontsize=7)
    rkeys = list(result["datasets"][0]["ratio"])
    ax = axes[2]
    for i, r in enumerate(result["datasets"]):
        ax.bar([k + i * width for k in range(len(rkeys))], [r["ratio"][k] for k in rkeys], width, label=r["dataset"])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(rkeys))], rkeys, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("compressed / uncompressed")
    ax.set_title("compression ratio (lower is smaller)", fontsize=9)
    return _save(plt, fig, f"Bitar vs Arrow's inner LZ4/Zstd, {result['size_bytes'] / 1e6:.0f} MB tables, "
                           f"{result['repeats']} repeats", path)
