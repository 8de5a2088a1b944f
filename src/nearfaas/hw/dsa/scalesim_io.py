"""Read SCALE-Sim's own files: the .cfg (INI) and topology CSVs (conv or GEMM rows).

Conv rows: ``name, ifmap_h, ifmap_w, filt_h, filt_w, channels, num_filters, stride,`` (an
optional second stride column is the width stride; an ``N:M`` column is SCALE-Sim's sparsity
ratio and is ignored). GEMM rows: ``name, M, N, K,``. The first row is a header; rows end in a
trailing comma. As in SCALE-Sim, a conv layer whose name contains ``DP`` is depthwise and runs
as one single-channel layer per channel. Bad rows are reported with file, line and column.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path

from .config import DSAConfig
from .errors import TopologyError
from .lower import Gemm, conv_gemm, scalesim_conv_out


@dataclass(frozen=True)
class ScaleSimConfig:
    run_name: str
    rows: int
    cols: int
    ifmap_kb: int
    filter_kb: int
    ofmap_kb: int
    dataflow: str
    bandwidth: float | None  # words/cycle per operand (SCALE-Sim's Bandwidth), None if absent
    memory_banks: int
    interface_bandwidth: str
    raw: dict

    def to_dsa(self, base: DSAConfig | None = None) -> DSAConfig:
        """The equivalent DSA config (SRAM sizes and array; DRAM and VPU from ``base``)."""
        base = base or DSAConfig()
        cfg = DSAConfig(
            rows=self.rows,
            cols=self.cols,
            dataflow=self.dataflow,
            ifmap_sram_kib=self.ifmap_kb,
            filter_sram_kib=self.filter_kb,
            ofmap_sram_kib=self.ofmap_kb,
            vpu_lanes=base.vpu_lanes,
            clock_ghz=base.clock_ghz,
            dram=base.dram,
            bytes_per_element=base.bytes_per_element,
            technology_nm=base.technology_nm,
            source=base.source,
        )
        return cfg.validated(pow2=False)


_ARCH_INT = {
    "arrayheight": "rows",
    "arraywidth": "cols",
    "ifmapsramszkb": "ifmap_kb",
    "filtersramszkb": "filter_kb",
    "ofmapsramszkb": "ofmap_kb",
}


def read_cfg(path: str | Path) -> ScaleSimConfig:
    p = Path(path)
    if not p.is_file():
        raise TopologyError(f"{p}: no such SCALE-Sim config file")
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
    try:
        cp.read_string(p.read_text(), source=str(p))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise TopologyError(f"{p}: not a SCALE-Sim .cfg (INI) file: {exc}") from None
    if not cp.has_section("architecture_presets"):
        raise TopologyError(f"{p}: missing section [architecture_presets] (ArrayHeight, ArrayWidth, ..., Dataflow)")
    arch = cp["architecture_presets"]
    vals = {}
    for key, fld in _ARCH_INT.items():
        if key not in arch:
            raise TopologyError(f"{p}: [architecture_presets] lacks {key} (SCALE-Sim spells it e.g. ArrayHeight)")
        try:
            v = int(arch[key].strip())
        except ValueError:
            raise TopologyError(f"{p}: [architecture_presets] {key} = {arch[key]!r} is not an integer") from None
        if v <= 0:
            raise TopologyError(f"{p}: [architecture_presets] {key} = {v} must be positive")
        vals[fld] = v
    df = arch.get("dataflow", "os").strip().lower()
    if df not in ("os", "ws", "is"):
        raise TopologyError(f"{p}: [architecture_presets] Dataflow = {df!r}: use os, ws or is")
    bw = arch.get("bandwidth")
    try:
        bw_v = float(bw) if bw not in (None, "") else None
    except ValueError:
        raise TopologyError(f"{p}: [architecture_presets] Bandwidth = {bw!r} is not a number") from None
    banks = arch.get("memorybanks", "1").strip() or "1"
    run = cp.get("general", "run_name", fallback=p.stem).strip()
    iface = cp.get("run_presets", "interfacebandwidth", fallback="CALC").strip()
    raw = {s: dict(cp[s]) for s in cp.sections()}
    return ScaleSimConfig(run_name=run, dataflow=df, bandwidth=bw_v, memory_banks=int(banks), interface_bandwidth=iface, raw=raw, **vals)


@dataclass(frozen=True)
class TopoLayer:
    name: str
    gemm: Gemm
    conv: tuple[int, ...] | None  # (ifmap_h, ifmap_w, filt_h, filt_w, channels, filters, stride_h, stride_w)


def _ints(path: Path, lineno: int, fields: list[str], start: int, n: int, header: list[str]) -> list[int]:
    out = []
    for i in range(start, start + n):
        col = header[i] if i < len(header) and header[i] else f"column {i + 1}"
        if i >= len(fields) or fields[i] == "":
            raise TopologyError(f"{path}:{lineno}: column {i + 1} ({col}) is missing")
        try:
            v = int(fields[i])
        except ValueError:
            raise TopologyError(f"{path}:{lineno}: column {i + 1} ({col}) = {fields[i]!r} is not an integer") from None
        if v <= 0:
            raise TopologyError(f"{path}:{lineno}: column {i + 1} ({col}) = {v} must be >= 1 (zero-size or negative layer)")
        out.append(v)
    return out


def read_topology(path: str | Path, gemm: bool | None = None) -> list[TopoLayer]:
    """Parse a topology CSV; ``gemm=None`` detects conv (≥7 numbers) vs GEMM (3 numbers) rows."""
    p = Path(path)
    if not p.is_file():
        raise TopologyError(f"{p}: no such topology file")
    try:
        lines = p.read_text().splitlines()
    except UnicodeDecodeError:
        raise TopologyError(f"{p}: not a text CSV topology") from None
    rows = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip()]
    if not rows:
        raise TopologyError(f"{p}: empty topology (expected a header row and layer rows)")
    header = [c.strip() for c in rows[0][1].split(",")]
    body = rows[1:]
    if not body:
        raise TopologyError(f"{p}: no layer rows after the header")

    def split(line: str) -> list[str]:
        f = [c.strip() for c in line.strip().split(",")]
        if f and f[-1] == "":
            f = f[:-1]
        return f

    if gemm is None:
        n = len([c for c in split(body[0][1])[1:] if ":" not in c])
        gemm = n in (3, 4)
    layers: list[TopoLayer] = []
    for lineno, line in body:
        f = split(line)
        name = f[0] if f else ""
        if not name:
            raise TopologyError(f"{p}:{lineno}: column 1 (layer name) is empty")
        if gemm:
            M, N, K = _ints(p, lineno, f, 1, 3, header)
            layers.append(TopoLayer(name, Gemm(name, M, N, K, 1, a_elems=M * K, b_elems=K * N), None))
            continue
        vals = _ints(p, lineno, f, 1, 7, header)
        rest = f[8:]
        if rest and ":" not in rest[0]:
            sw = _ints(p, lineno, f, 8, 1, header)[0]
            rest = rest[1:]
        else:
            sw = vals[6]
        for extra in rest:
            if ":" not in extra:
                raise TopologyError(f"{p}:{lineno}: unexpected extra column {extra!r} (expected an N:M sparsity ratio)")
        ih, iw, fh, fw, ch, nf, sh = vals
        if fh > ih:
            raise TopologyError(f"{p}:{lineno}: column 4 (filter height) = {fh} is larger than the ifmap height {ih}")
        if fw > iw:
            raise TopologyError(f"{p}:{lineno}: column 5 (filter width) = {fw} is larger than the ifmap width {iw}")
        oh, ow = scalesim_conv_out(ih, fh, sh), scalesim_conv_out(iw, fw, sw)
        conv = (ih, iw, fh, fw, ch, nf, sh, sw)
        if "DP" in name:  # SCALE-Sim's depthwise convention: one 1-channel layer per channel
            for c in range(ch):
                nm = f"{name}Channel_{c}"
                layers.append(TopoLayer(nm, conv_gemm(nm, 1, 1, ih, iw, nf, fh, fw, oh, ow), conv))
        else:
            layers.append(TopoLayer(name, conv_gemm(name, 1, ch, ih, iw, nf, fh, fw, oh, ow), conv))
    return layers


def write_topology(path: str | Path, layers: list[tuple], gemm: bool = False) -> None:
    """Write a SCALE-Sim topology CSV (header row, trailing commas)."""
    head = (
        "Layer, M, N, K," if gemm else "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,"
    )
    out = [head] + [", ".join(str(x) for x in row) + "," for row in layers]
    Path(path).write_text("\n".join(out) + "\n")
