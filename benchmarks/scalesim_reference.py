"""Record SCALE-Sim v3 reference outputs into tests/data/scalesim/ (issue 5, item 3).

SCALE-Sim is slow and pins its own dependencies, so it never runs in the normal test suite: this
script runs it once, in its own virtual environment, and writes what it reported as test data.

    python3 -m venv /tmp/scalesim-venv
    /tmp/scalesim-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'
    python3 benchmarks/scalesim_reference.py --venv /tmp/scalesim-venv            # reference set
    python3 benchmarks/scalesim_reference.py --venv /tmp/scalesim-venv --timing   # + ResNet-50 timings

It writes, under --out (default tests/data/scalesim/):
  * the unmodified SCALE-Sim input files: scale_<R>x<C>_<df>.cfg, conv_layers.csv, gemm_layers.csv,
    resnet50_first10.csv, resnet50.csv and one layout_*.csv per topology (SCALE-Sim 3.0.0 refuses
    to run without a layout file even when custom layouts are off);
  * reference.json: versions, the config and topology texts, one result per
    (array, dataflow, layer) with SCALE-Sim's COMPUTE_REPORT.csv and DETAILED_ACCESS_REPORT.csv
    columns, the closed form from /work/shared/hw-references.md and whether it matches; and,
    with --timing, the wall time of whole SCALE-Sim runs.

Only the standard library is used here; SCALE-Sim itself runs in a subprocess with the venv's
interpreter (through its Python API with save_disk_space=True: its CLI ignores `-s N` and always
writes full traces).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "data" / "scalesim"

ARRAYS = [(32, 32), (128, 128)]
DATAFLOWS = ["os", "ws", "is"]

# Conv rows: name, ifmap_h, ifmap_w, filt_h, filt_w, channels, num_filters, stride.
# No padding is applied by SCALE-Sim: ofmap = ceil((H - F + S) / S).
# Names must not contain "DP": SCALE-Sim expands such rows into one layer per channel.
CONV_LAYERS = [
    ("conv1x1_c64_n256", 28, 28, 1, 1, 64, 256, 1),
    ("conv3x3_s1_c96_n160", 30, 30, 3, 3, 96, 160, 1),
    ("conv3x3_s2_c64_n128", 57, 57, 3, 3, 64, 128, 2),
    ("conv7x7_s2_c3_n64", 115, 115, 7, 7, 3, 64, 2),       # ResNet conv1 shape on a smaller image
    ("conv3x3_c35_n45", 20, 20, 3, 3, 35, 45, 1),          # channels/filters not multiples of 32
    ("conv3x3_c1_n1_dwlike", 58, 58, 3, 3, 1, 1, 1),       # one channel of a depthwise conv
    ("conv3x3_tiny_c2_n4", 5, 5, 3, 3, 2, 4, 1),           # smaller than the array in every dim
    ("conv3x3_s2_oddceil", 16, 16, 3, 3, 16, 24, 2),       # (H-F)/S not an integer
    ("conv1x1_s2_c256_n512", 28, 28, 1, 1, 256, 512, 2),   # ResNet downsample projection
    ("conv5x5_rect_c20_n33", 20, 36, 5, 5, 20, 33, 1),     # non-square ifmap
    ("conv7x7_whole_c64_n100", 7, 7, 7, 7, 64, 100, 1),    # filter == ifmap: FC as conv, M = 1
    ("conv4x2_s3_c10_n7", 23, 17, 4, 2, 10, 7, 3),         # non-square filter, stride 3
]

# GEMM rows: name, M, N, K (SCALE-Sim maps them to a conv with ifmap M x K, filter 1 x K, N filters).
GEMM_LAYERS = [
    ("gemm_qkv_128x768x768", 128, 768, 768),               # BERT-base QKV projection, 128 tokens
    ("gemm_ffn_128x1536x384", 128, 1536, 384),             # 128x3072x768 FFN scaled by 1/2
    ("gemm_vit_197x320x320", 197, 320, 320),               # ViT 197x1280x1280 scaled by 1/4 in N, K
    ("gemm_odd_130x129x131", 130, 129, 131),               # just over 128 in every dim
    ("gemm_tiny_8x8x8", 8, 8, 8),
    ("gemm_fc_1x1000x512", 1, 1000, 512),                  # batch-1 classifier
    ("gemm_tall_1000x16x64", 1000, 16, 64),
]

# ResNet-50 as in SCALE-Sim's own topologies/conv_nets/Resnet50.csv (unpadded ifmaps).
RESNET50 = [
    ("Conv1", 224, 224, 7, 7, 3, 64, 2),
    ("CB2a_1", 56, 56, 1, 1, 64, 64, 1), ("CB2a_2", 56, 56, 3, 3, 64, 64, 1),
    ("CB2a_3", 56, 56, 1, 1, 64, 256, 1), ("CB2s", 56, 56, 1, 1, 64, 256, 1),
    ("IB2b_1", 56, 56, 1, 1, 256, 64, 1), ("IB2b_2", 56, 56, 3, 3, 64, 64, 1),
    ("IB2b_3", 56, 56, 1, 1, 64, 256, 1), ("IB2c_1", 56, 56, 1, 1, 256, 64, 1),
    ("IB2c_2", 56, 56, 3, 3, 64, 64, 1), ("IB2c_3", 56, 56, 1, 1, 64, 256, 1),
    ("CB3a_1", 56, 56, 1, 1, 256, 128, 2), ("CB3a_2", 28, 28, 3, 3, 128, 128, 1),
    ("CB3a_3", 28, 28, 1, 1, 128, 512, 1), ("CB3s", 56, 56, 1, 1, 256, 512, 2),
    ("IB3b_1", 28, 28, 1, 1, 512, 128, 1), ("IB3b_2", 28, 28, 3, 3, 128, 128, 1),
    ("IB3b_3", 28, 28, 1, 1, 128, 512, 1), ("IB3c_1", 28, 28, 1, 1, 512, 128, 1),
    ("IB3c_2", 28, 28, 3, 3, 128, 128, 1), ("IB3c_3", 28, 28, 1, 1, 128, 512, 1),
    ("IB3d_1", 28, 28, 1, 1, 512, 128, 1), ("IB3d_2", 28, 28, 3, 3, 128, 128, 1),
    ("IB3d_3", 28, 28, 1, 1, 128, 512, 1), ("CB4a_1", 28, 28, 1, 1, 512, 256, 2),
    ("CB4a_2", 14, 14, 3, 3, 256, 256, 1), ("CB4a_3", 14, 14, 1, 1, 256, 1024, 1),
    ("CB4s", 28, 28, 1, 1, 512, 1024, 2), ("IB4b_1", 14, 14, 1, 1, 1024, 256, 1),
    ("IB4b_2", 14, 14, 3, 3, 256, 256, 1), ("IB4b_3", 14, 14, 1, 1, 256, 1024, 1),
    ("IB4c_1", 14, 14, 1, 1, 1024, 256, 1), ("IB4c_2", 14, 14, 3, 3, 256, 256, 1),
    ("IB4c_3", 14, 14, 1, 1, 256, 1024, 1), ("IB4d_1", 14, 14, 1, 1, 1024, 256, 1),
    ("IB4d_2", 14, 14, 3, 3, 256, 256, 1), ("IB4d_3", 14, 14, 1, 1, 256, 1024, 1),
    ("IB4e_1", 14, 14, 1, 1, 1024, 256, 1), ("IB4e_2", 14, 14, 3, 3, 256, 256, 1),
    ("IB4e_3", 14, 14, 1, 1, 256, 1024, 1), ("IB4f_1", 14, 14, 1, 1, 1024, 256, 1),
    ("IB4f_2", 14, 14, 3, 3, 256, 256, 1), ("IB4f_3", 14, 14, 1, 1, 256, 1024, 1),
    ("CB5a_1", 14, 14, 1, 1, 1024, 512, 2), ("CB5a_2", 7, 7, 3, 3, 512, 512, 1),
    ("CB5a_3", 7, 7, 1, 1, 512, 2048, 1), ("CB5s", 14, 14, 1, 1, 1024, 2048, 2),
    ("IB5b_1", 7, 7, 1, 1, 2048, 512, 1), ("IB5b_2", 7, 7, 3, 3, 512, 512, 1),
    ("IB5b_3", 7, 7, 1, 1, 512, 2048, 1), ("IB5c_1", 7, 7, 1, 1, 2048, 512, 1),
    ("IB5c_2", 7, 7, 3, 3, 512, 512, 1), ("IB5c_3", 7, 7, 1, 1, 512, 2048, 1),
    ("FC6", 1, 1, 1, 1, 2048, 1000, 1),
]

CONV_HEADER = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,"
GEMM_HEADER = "Layer, M, N, K,"
LAYOUT_HEADER = (
    "Layer name, IFMAP Height Intraline Factor, IFMAP Width Intraline Factor, Filter Height Intraline Factor, "
    "Filter Width Intraline Factor, Channel Intraline Factor, Num Filter Intraline Factor, IFMAP Height Intraline Order, "
    "IFMAP Width Intraline Order, Channel Intraline Order, IFMAP Height Interline Order, IFMAP Width Interline Order, "
    "Channel Interline Order, Num Filter Intraline Order, Channel Intraline Order, Filter Height Intraline Order, "
    "Filter Width Intraline Order, Num Filter Interline Order, Channel Interline Order, Filter Height Interline Order, "
    "Filter Width Interline Order,"
)
# Placeholder layout row (read but unused: IfmapCustomLayout/FilterCustomLayout are False).
LAYOUT_ROW = "1, 1, 1, 1, 1, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3,"

# SRAM far larger than any operand here (64 MiB each) and 1024 words/cycle everywhere: no stalls.
SRAM_KB = 65536
BANDWIDTH = 1024


def config_text(rows: int, cols: int, df: str) -> str:
    return f"""[general]
run_name = scale_{rows}x{cols}_{df}

[architecture_presets]
ArrayHeight : {rows}
ArrayWidth : {cols}
IfmapSramSzkB : {SRAM_KB}
FilterSramSzkB : {SRAM_KB}
OfmapSramSzkB : {SRAM_KB}
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : {BANDWIDTH}
Dataflow : {df}
MemoryBanks : 1
ReadRequestBuffer : 512
WriteRequestBuffer : 512

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : {BANDWIDTH}
IfmapSRAMBankNum : 1
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : {BANDWIDTH}
FilterSRAMBankNum : 1
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : False
SparseRep : ellpack_block
OptimizedMapping : False
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : USER
UseRamulatorTrace : False
"""


def conv_csv(layers) -> str:
    return "\n".join([CONV_HEADER] + [", ".join(str(x) for x in row) + "," for row in layers]) + "\n"


def gemm_csv(layers) -> str:
    return "\n".join([GEMM_HEADER] + [", ".join(str(x) for x in row) + "," for row in layers]) + "\n"


def layout_csv(layers) -> str:
    return "\n".join([LAYOUT_HEADER] + [f"{row[0]}, {LAYOUT_ROW}" for row in layers]) + "\n"


def conv_dims(row) -> dict:
    name, h, w, fh, fw, c, n, s = row
    oh, ow = math.ceil((h - fh + s) / s), math.ceil((w - fw + s) / s)
    return {"ifmap_h": h, "ifmap_w": w, "filt_h": fh, "filt_w": fw, "channels": c, "num_filters": n,
            "stride": s, "ofmap_h": oh, "ofmap_w": ow, "M": oh * ow, "N": n, "K": fh * fw * c}


def gemm_dims(row) -> dict:
    _, m, n, k = row
    return {"M": m, "N": n, "K": k}


def closed_form(df: str, rows: int, cols: int, M: int, N: int, K: int) -> int:
    """The closed forms of /work/shared/hw-references.md (IS: the OS/WS pattern with M and N swapped)."""
    c = math.ceil
    if df == "os":
        return c(M / rows) * c(N / cols) * (K + rows + cols - 2) - 1
    if df == "ws":
        return c(K / rows) * c(N / cols) * (M + 2 * rows + cols - 2) - 1
    if df == "is":
        return c(K / rows) * c(M / cols) * (N + 2 * rows + cols - 2) - 1
    raise ValueError(df)


RUNNER = r"""
import sys, time, json
from scalesim.scale_sim import scalesim
cfg, topo, layout, gemm, top = sys.argv[1:6]
t0 = time.perf_counter()
s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
             input_type_gemm=(gemm == "1"))
s.run_scale(top_path=top)
print(json.dumps({"run_s": time.perf_counter() - t0}))
"""

COMPUTE_KEYS = ["total_cycles_incl_prefetch", "compute_cycles", "stall_cycles", "overall_util_pct",
                "mapping_efficiency_pct", "compute_util_pct"]
DETAIL_KEYS = ["sram_ifmap_start", "sram_ifmap_stop", "sram_ifmap_reads",
               "sram_filter_start", "sram_filter_stop", "sram_filter_reads",
               "sram_ofmap_start", "sram_ofmap_stop", "sram_ofmap_writes",
               "dram_ifmap_start", "dram_ifmap_stop", "dram_ifmap_reads",
               "dram_filter_start", "dram_filter_stop", "dram_filter_reads",
               "dram_ofmap_start", "dram_ofmap_stop", "dram_ofmap_writes"]


def _num(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_report(path: Path, keys) -> list[dict]:
    lines = [ln for ln in path.read_text().splitlines()[1:] if ln.strip()]
    out = []
    for ln in lines:
        cells = [c for c in ln.split(",")][:-1]       # trailing comma
        vals = [_num(c) for c in cells[1:]]
        out.append({"raw_row": ln, **dict(zip(keys, vals, strict=True))})
    return out


def run_scalesim(python: str, cfg: Path, topo: Path, layout: Path, gemm: bool, run_name: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="scalesim-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([python, "-c", RUNNER, str(cfg), str(topo), str(layout), "1" if gemm else "0", tmp],
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"SCALE-Sim failed on {cfg.name} {topo.name}:\n{proc.stderr[-3000:]}")
        inner = json.loads(proc.stdout.strip().splitlines()[-1])
        rep = Path(tmp) / run_name
        compute = read_report(rep / "COMPUTE_REPORT.csv", COMPUTE_KEYS)
        detail = read_report(rep / "DETAILED_ACCESS_REPORT.csv", DETAIL_KEYS)
        return {"wall_s": wall, "run_s": inner["run_s"], "compute": compute, "detail": detail,
                "compute_report_csv": (rep / "COMPUTE_REPORT.csv").read_text()}


def venv_versions(python: str) -> dict:
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({'scalesim': m.version('scalesim'), 'numpy': m.version('numpy'), "
            "'python': sys.version.split()[0]}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default="/tmp/scalesim-venv", help="virtual environment with scalesim==3.0.0")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                    help="SCALE-Sim runs in parallel for the reference set")
    ap.add_argument("--dataflows", default=",".join(DATAFLOWS))
    ap.add_argument("--timing", action="store_true",
                    help="also time ResNet-50 first 10 layers, 128x128 OS, alone (recorded under 'timing')")
    ap.add_argument("--full-resnet", action="store_true", help="with --timing: also time all of ResNet-50")
    ap.add_argument("--timing-only", action="store_true",
                    help="run only the timing runs and merge them into an existing reference.json")
    args = ap.parse_args(argv)

    python = str(Path(args.venv) / "bin" / "python")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    versions = venv_versions(python)
    dataflows = args.dataflows.split(",")

    topologies = {
        "conv_layers.csv": conv_csv(CONV_LAYERS),
        "gemm_layers.csv": gemm_csv(GEMM_LAYERS),
        "resnet50_first10.csv": conv_csv(RESNET50[:10]),
        "resnet50.csv": conv_csv(RESNET50),
    }
    layouts = {
        "layout_conv_layers.csv": layout_csv(CONV_LAYERS),
        "layout_gemm_layers.csv": layout_csv(GEMM_LAYERS),
        "layout_resnet50_first10.csv": layout_csv(RESNET50[:10]),
        "layout_resnet50.csv": layout_csv(RESNET50),
    }
    configs = {f"scale_{r}x{c}_{df}.cfg": config_text(r, c, df) for (r, c) in ARRAYS for df in dataflows}
    for name, text in {**topologies, **layouts, **configs}.items():
        (out / name).write_text(text)

    ref_path = out / "reference.json"
    if args.timing_only and ref_path.exists():
        ref = json.loads(ref_path.read_text())
    else:
        ref = {
            "scalesim_version": versions["scalesim"],
            "numpy_version": versions["numpy"],
            "python_version": versions["python"],
            "generated_by": "benchmarks/scalesim_reference.py",
            "mode": {"InterfaceBandwidth": "USER", "bandwidth_words_per_cycle": BANDWIDTH,
                     "sram_kb_each": SRAM_KB,
                     "compute_cycles_column": "COMPUTE_REPORT.csv 'Total Cycles' (3rd column)"},
            "configs": configs,
            "topologies": topologies,
            "layouts": layouts,
            "results": [],
        }
        jobs = []
        for (r, c) in ARRAYS:
            for df in dataflows:
                for topo, layers, gemm in (("conv_layers.csv", CONV_LAYERS, False),
                                           ("gemm_layers.csv", GEMM_LAYERS, True)):
                    jobs.append((r, c, df, topo, layers, gemm))
        t0 = time.perf_counter()
        results, run_times = [], []
        with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futs = {pool.submit(run_scalesim, python, out / f"scale_{r}x{c}_{df}.cfg", out / topo,
                                out / f"layout_{topo}", gemm, f"scale_{r}x{c}_{df}"): (r, c, df, topo, layers, gemm)
                    for (r, c, df, topo, layers, gemm) in jobs}
            for fut in cf.as_completed(futs):
                r, c, df, topo, layers, gemm = futs[fut]
                res = fut.result()
                run_times.append({"array": [r, c], "dataflow": df, "topology": topo,
                                  "wall_s": round(res["wall_s"], 2), "layers": len(layers)})
                print(f"{r}x{c} {df} {topo}: {res['wall_s']:.1f} s", flush=True)
                assert len(res["compute"]) == len(layers), (topo, len(res["compute"]))
                for row, comp, det in zip(layers, res["compute"], res["detail"], strict=True):
                    dims = gemm_dims(row) if gemm else conv_dims(row)
                    cf_val = closed_form(df, r, c, dims["M"], dims["N"], dims["K"])
                    results.append({
                        "array": [r, c], "dataflow": df, "layer": row[0], "kind": "gemm" if gemm else "conv",
                        "topology": topo, "config": f"scale_{r}x{c}_{df}.cfg", "dims": dims,
                        "compute_cycles": comp["compute_cycles"],
                        "stall_cycles": comp["stall_cycles"],
                        "total_cycles_incl_prefetch": comp["total_cycles_incl_prefetch"],
                        "overall_util_pct": comp["overall_util_pct"],
                        "mapping_efficiency_pct": comp["mapping_efficiency_pct"],
                        "compute_util_pct": comp["compute_util_pct"],
                        "compute_report_row": comp["raw_row"],
                        "detailed_access": {k: det[k] for k in DETAIL_KEYS},
                        "closed_form_cycles": cf_val,
                        "matches_closed_form": cf_val == comp["compute_cycles"],
                    })
        order = {n: i for i, n in enumerate([row[0] for row in CONV_LAYERS + GEMM_LAYERS])}
        results.sort(key=lambda x: (x["array"], DATAFLOWS.index(x["dataflow"]), order[x["layer"]]))
        ref["results"] = results
        ref["generation"] = {"wall_s": round(time.perf_counter() - t0, 1), "parallel_jobs": args.jobs,
                             "runs": sorted(run_times, key=lambda x: (x["array"], x["dataflow"], x["topology"]))}
        bad = [x for x in results if not x["matches_closed_form"]]
        print(f"{len(results)} results, {len(bad)} differ from the closed forms", flush=True)
        for x in bad:
            print("  MISMATCH", x["array"], x["dataflow"], x["layer"], x["compute_cycles"], x["closed_form_cycles"])

    if args.timing or args.timing_only:
        timing = ref.get("timing", {})
        runs = [("resnet50_first10", "resnet50_first10.csv", RESNET50[:10])]
        if args.full_resnet:
            runs.append(("resnet50_full", "resnet50.csv", RESNET50))
        cfg = out / "scale_128x128_os.cfg"
        if not cfg.exists():
            cfg.write_text(config_text(128, 128, "os"))
        for key, topo, layers in runs:
            print(f"timing {key} ({len(layers)} layers, 128x128 OS) ...", flush=True)
            res = run_scalesim(python, cfg, out / topo, out / f"layout_{topo}", False, "scale_128x128_os")
            cycles = [row["compute_cycles"] for row in res["compute"]]
            expect = [closed_form("os", 128, 128, d["M"], d["N"], d["K"]) for d in map(conv_dims, layers)]
            timing[key] = {
                "topology": topo, "config": cfg.name, "layers": len(layers), "array": [128, 128],
                "dataflow": "os", "wall_s": round(res["wall_s"], 2), "scalesim_run_s": round(res["run_s"], 2),
                "total_compute_cycles": sum(cycles), "per_layer_compute_cycles": cycles,
                "closed_form_matches": cycles == expect,
                "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                            "ran_alone": True, "save_disk_space": True, "verbose": False},
            }
            print(f"  {res['wall_s']:.1f} s wall, {sum(cycles)} cycles, closed form equal: {cycles == expect}",
                  flush=True)
        ref["timing"] = timing

    ref_path.write_text(json.dumps(ref, indent=1) + "\n")
    print(f"wrote {ref_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
