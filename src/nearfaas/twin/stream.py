"""The twin's network-attached FPGA: the streaming Top-K function on an Alveo U280-class card that
ingests TCP streams straight from a 100 Gb/s HLS TCP/IP stack (no PCIe, no host), as in the FPGA
serverless seed (Yang & Fahmy, /work/shared/seeds/fpga-serverless-topk.txt). Every number here is
MODELLED; docs/stream-twin.md gives the formula and every constant's source.

One request = one TCP connection (three-way handshake, the payload, the K results back), the way the
seed times it. N concurrent requests share the link and P parallel Top-K pipelines; the per-request
time is the batch latency / N, the seed's method.

    fixed      = 2 * rtt + 4 * hop + wire(result) / link          (SYN/SYN-ACK, data/result; 4 stack traversals)
    c(S)       = ceil(S / (value_bytes * lanes)),  lanes = min(values_per_cycle, datapath_bytes // value_bytes)
    data(N, S) = max(N * wire(S) / link, ceil(N / P) * (c(S) + K) / f) + K / f
    single(S)  = fixed + data(1, S)
    batch(N,S) = max((N - 1) * conn_interval + single(S), fixed + data(N, S))
    per_request(N, S) = batch(N, S) / N;   cold(S) = single(S) + pr_time

``wire(S)`` is the bytes on the wire for S payload bytes: ceil(S / mss) frames of ``frame_overhead``
bytes each, plus the client's SYN and ACK (minimum frames). The model is monotone in every swept
constant, so ``model(..., ranges=True)`` takes min and max over the corners of the sweeps.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import Any

from nearfaas.hw.sourced import Sourced

SEED = "FPGA serverless seed (Yang & Fahmy, KAUST; /work/shared/seeds/fpga-serverless-topk.txt)"
HWR = "/work/shared/hw-references.md, 'Network-attached FPGA'"

CLOCK_HZ = Sourced(
    250e6, f"DSCS seed Table 2 (/work/shared/seeds/dscs-serverless.txt): Alveo U280 at 250 MHz; {HWR}: typical HLS clock 250-300 MHz (sweep)", "src",
    (250e6, 300e6))
DATAPATH_BYTES_PER_CYCLE = Sourced(
    64, f"{HWR}: 64 B/cycle datapath; derived: 100 Gb/s at 250 MHz needs >= 50 B/cycle, the next AXI4-Stream width is "
    "512 bit = 64 B", "derived")
LINK_BPS = Sourced(
    100e9, f"Easynet (He, Korolija, Alonso, FPL 2021; seed ref. [2]): 100 Gb/s line rate in HLS; {SEED} §I.A: "
    "ConnectX-6 to U280 over a 100 Gb/s DAC", "src")
FRAME_OVERHEAD_BYTES = Sourced(
    78, "derived: per TCP/IPv4/Ethernet frame, preamble+SFD 8 + inter-frame gap 12 + Ethernet header 14 + FCS 4 "
    "(IEEE 802.3) + IPv4 header 20 (RFC 791) + TCP header 20 without options (RFC 9293)", "derived")
MIN_FRAME_WIRE_BYTES = Sourced(
    84, "derived: IEEE 802.3 minimum frame 64 B + preamble/SFD 8 + inter-frame gap 12 (a SYN, an ACK, a small result)",
    "derived")
MSS_BYTES = Sourced(
    1460, "assumption: TCP payload per frame at a 1500 B MTU (1500 - 20 IPv4 - 20 TCP); the seed does not give the "
    "MTU; sweep up to a 9000 B jumbo MTU (8960 B)", "assumption", (1460, 8960))
STACK_HOP_S = Sourced(
    2e-6, "assumption: one traversal (ingress or egress) of the HLS TCP/IP stack on the FPGA; Easynet (seed ref. [2]) "
    f"states no per-hop latency; {HWR} sweeps 1-5 us", "assumption", (1e-6, 5e-6))
CLIENT_RTT_S = Sourced(
    2e-6, f"assumption: client-side network round trip of the seed's testbed ({SEED} §I.A: a ConnectX-6 NIC in the same "
    "server, a 100 Gb/s DAC cable, timestamps taken at the NIC interface): NIC TX + RX pipelines and the cable, not "
    "measured by the seed", "assumption", (1e-6, 5e-6))
CLIENT_CONN_INTERVAL_S = Sourced(
    2e-6, "assumption: interval at which the client opens its N concurrent connections one after another (connect + "
    "send of a closed-loop load generator); the seed does not describe its client", "assumption", (0.5e-6, 5e-6))
PR_TIME_S = Sourced(
    30e-3, f"{SEED} §I: partial reconfiguration gives a start-up time 'in the range of tens of milliseconds' [src]; "
    "30 ms is our pick inside 10-90 ms (the sweep)", "assumption", (10e-3, 90e-3))
PIPELINES = Sourced(
    16, f"assumption: Top-K pipelines the FPGA runs in parallel, one stream each; {SEED} does not specify its design "
    "(a K-register insertion pipeline is small, so the stack's session count and the design bound it, not area)",
    "assumption", (1, 64))
VALUES_PER_CYCLE = Sourced(
    1, f"{HWR}: sorted-insertion Top-K in HLS, K registers, one value per cycle (II = 1), e.g. Matsumoto et al. 2015 "
    "[mem]; sweep up to 16 parallel lanes (one 64 B beat of 4 B values per cycle), since the seed's design is not "
    "specified", "mem", (1, 16))
VALUE_BYTES = Sourced(
    4, "assumption: width of one streamed value (int32/float32); the seed does not say", "assumption", (4, 8))
TOP_K = Sourced(
    16, f"assumption: K of the Top-K; the seed does not say; 16 as in the software anchor of {HWR} (native top-16)",
    "assumption", (8, 64))

CONSTANTS: dict[str, Sourced] = {
    "clock_hz": CLOCK_HZ,
    "datapath_bytes_per_cycle": DATAPATH_BYTES_PER_CYCLE,
    "link_bps": LINK_BPS,
    "frame_overhead_bytes": FRAME_OVERHEAD_BYTES,
    "min_frame_wire_bytes": MIN_FRAME_WIRE_BYTES,
    "mss_bytes": MSS_BYTES,
    "stack_hop_s": STACK_HOP_S,
    "client_rtt_s": CLIENT_RTT_S,
    "client_conn_interval_s": CLIENT_CONN_INTERVAL_S,
    "pr_time_s": PR_TIME_S,
    "pipelines": PIPELINES,
    "values_per_cycle": VALUES_PER_CYCLE,
    "value_bytes": VALUE_BYTES,
    "top_k": TOP_K,
}
INTEGER = {"mss_bytes", "pipelines", "values_per_cycle", "value_bytes", "top_k", "datapath_bytes_per_cycle",
           "frame_overhead_bytes", "min_frame_wire_bytes"}

PAPER_SIZES = (64, 128, 256, 1024, 2048, 4096)
PAPER_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
RESULTS_FILE = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "stream_topk.json"
NOT_MEASURED = "not measured yet (run benchmarks/stream_topk.py)"
SYSTEMS = ("executor", "baremetal", "serverless")


def nominal() -> dict[str, float]:
    return {k: s.value for k, s in CONSTANTS.items()}


def _params(overrides: Mapping[str, float] | None) -> dict[str, float]:
    p = nominal()
    for k, v in (overrides or {}).items():
        if k not in p:
            raise ValueError(f"unknown stream-twin constant {k!r}; known: {', '.join(p)}")
        p[k] = v
    return p


def wire_bytes(size: int, p: Mapping[str, float]) -> float:
    """Bytes on the wire, client to FPGA, for one request of ``size`` payload bytes: its frames plus
    the client's SYN and ACK."""
    frames = max(1, math.ceil(size / p["mss_bytes"]))
    return size + frames * p["frame_overhead_bytes"] + 2 * p["min_frame_wire_bytes"]


def _result_wire_bytes(p: Mapping[str, float]) -> float:
    return max(p["min_frame_wire_bytes"], p["top_k"] * p["value_bytes"] + p["frame_overhead_bytes"])


def lanes(p: Mapping[str, float]) -> int:
    """Values the pipeline inserts per cycle: the assumption, capped by the datapath width."""
    return max(1, min(int(p["values_per_cycle"]), int(p["datapath_bytes_per_cycle"] // p["value_bytes"])))


def pipeline_cycles(size: int, p: Mapping[str, float]) -> int:
    """Cycles one pipeline is busy on a stream of ``size`` bytes (II = 1 per ``lanes`` values), without the read-out."""
    return math.ceil(size / (p["value_bytes"] * lanes(p)))


def fixed_s(p: Mapping[str, float]) -> float:
    """What one request costs besides its data phase: a handshake and a response round trip, four
    stack traversals (SYN in, SYN-ACK out, data in, result out), the result's frame."""
    return 2 * p["client_rtt_s"] + 4 * p["stack_hop_s"] + _result_wire_bytes(p) * 8 / p["link_bps"]


def data_s(n: int, size: int, p: Mapping[str, float]) -> float:
    """N streams of ``size`` bytes through the shared link and P pipelines (cut-through: a pipeline
    consumes a stream as it arrives, so the slower of the two sets the pace), plus the last read-out."""
    link = n * wire_bytes(size, p) * 8 / p["link_bps"]
    waves = math.ceil(n / int(p["pipelines"]))
    pipe = waves * (pipeline_cycles(size, p) + p["top_k"]) / p["clock_hz"]
    return max(link, pipe) + p["top_k"] / p["clock_hz"]


def single_s(size: int, p: Mapping[str, float]) -> float:
    return fixed_s(p) + data_s(1, size, p)


def batch_s(n: int, size: int, p: Mapping[str, float]) -> float:
    """Time from the first SYN to the N-th response: bound by the client opening connections one
    after another, or by the shared link and pipelines."""
    return max((n - 1) * p["client_conn_interval_s"] + single_s(size, p), fixed_s(p) + data_s(n, size, p))


def per_request_s(n: int, size: int, p: Mapping[str, float]) -> float:
    return batch_s(n, size, p) / n


def cold_s(size: int, p: Mapping[str, float]) -> float:
    return single_s(size, p) + p["pr_time_s"]


def _check(values: Iterable[int], what: str) -> tuple[int, ...]:
    out = tuple(values)
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{what} must be positive integers; got {v!r}")
    return out


def _corners(fixed: Mapping[str, float] | None) -> list[dict[str, float]]:
    base = _params(fixed)
    swept = [k for k, s in CONSTANTS.items() if s.sweep is not None and k not in (fixed or {})]
    out = []
    for ends in itertools.product(*(CONSTANTS[k].sweep for k in swept)):
        p = dict(base)
        for k, v in zip(swept, ends, strict=True):
            p[k] = int(v) if k in INTEGER else v
        out.append(p)
    return out


@dataclass(frozen=True)
class Band:
    nominal: float
    min: float
    max: float

    def to_dict(self, scale: float = 1e6) -> dict:
        return {"nominal": self.nominal * scale, "min": self.min * scale, "max": self.max * scale}


def _band(fn, p_nom, corners) -> Band:
    vals = [fn(c) for c in corners]
    nom = fn(p_nom)
    return Band(nom, min(vals + [nom]), max(vals + [nom]))


def model(sizes: Iterable[int] = PAPER_SIZES, concurrency: Iterable[int] = PAPER_CONCURRENCY, *,
          concurrency_size: int = 64, overrides: Mapping[str, float] | None = None, ranges: bool = True) -> dict:
    """The modelled FPGA rows, in seconds: ``p50`` (one warm request) and ``cold`` (one request that
    first waits for partial reconfiguration) per size, and ``per_request`` (batch / N) per N at
    ``concurrency_size`` bytes. Each value is a ``Band``; with ``ranges`` its min/max are over every
    corner of the swept constants (those named in ``overrides`` are held), else min = max = nominal."""
    sizes = _check(sizes, "sizes")
    concurrency = _check(concurrency, "concurrency")
    (concurrency_size,) = _check((concurrency_size,), "concurrency_size")
    p = _params(overrides)
    corners = _corners(overrides) if ranges else []
    return {
        "p50": {s: _band(lambda c, s=s: single_s(s, c), p, corners) for s in sizes},
        "cold": {s: _band(lambda c, s=s: cold_s(s, c), p, corners) for s in sizes},
        "per_request": {n: _band(lambda c, n=n: per_request_s(n, concurrency_size, c), p, corners) for n in concurrency},
        "concurrency_size": concurrency_size,
    }


def constants_table() -> list[dict]:
    return [{"name": k, "value": s.value, "source": s.source, "status": s.status,
             "sweep": list(s.sweep) if s.sweep is not None else None} for k, s in CONSTANTS.items()]


def _lookup(d: Any, key: int) -> float | None:
    if not isinstance(d, Mapping):
        return None
    for k in (str(key), key, float(key), str(float(key))):
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def measured(sizes: Iterable[int], concurrency: Iterable[int], path: Path | str | None = None) -> dict | str:
    """The software rows measured by benchmarks/stream_topk.py, or ``NOT_MEASURED`` if the file is
    absent or unreadable. A system or a key the file lacks reads ``NOT_MEASURED``; a missing cell is None."""
    path = Path(path) if path is not None else RESULTS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return NOT_MEASURED
    systems = data.get("systems") if isinstance(data, Mapping) else None
    if not isinstance(systems, Mapping):
        return NOT_MEASURED
    out: dict[str, Any] = {}
    for name in list(SYSTEMS) + [k for k in systems if k not in SYSTEMS]:
        sysd = systems.get(name)
        if not isinstance(sysd, Mapping):
            out[name] = NOT_MEASURED
            continue
        row = {}
        for key, keys in (("p50_us", sizes), ("per_request_us", concurrency)):
            row[key] = {str(k): _lookup(sysd[key], k) for k in keys} if isinstance(sysd.get(key), Mapping) else NOT_MEASURED
        out[name] = row
    return out


def measured_concurrency_size(path: Path | str | None = None) -> int | None:
    """The request size the measured concurrency run used, if the results file names it."""
    try:
        data = json.loads(Path(path or RESULTS_FILE).read_text())
    except (OSError, ValueError):
        return None
    for key in ("concurrency_size_bytes", "concurrency_size", "batch_bytes"):  # batch_bytes: benchmarks/stream_topk.py
        v = data.get(key) if isinstance(data, Mapping) else None
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def to_json(m: dict, meas: dict | str) -> dict:
    return {
        "modelled_fpga": {
            "label": "modelled",
            "p50_us": {str(s): b.to_dict() for s, b in m["p50"].items()},
            "cold_us": {str(s): b.to_dict() for s, b in m["cold"].items()},
            "per_request_us": {str(n): b.to_dict() for n, b in m["per_request"].items()},
            "concurrency_size_bytes": m["concurrency_size"],
        },
        "measured": meas,
        "constants": constants_table(),
    }


__all__ = ["CONSTANTS", "NOT_MEASURED", "PAPER_CONCURRENCY", "PAPER_SIZES", "RESULTS_FILE", "Band", "batch_s", "cold_s",
           "constants_table", "data_s", "fixed_s", "measured", "measured_concurrency_size", "model", "nominal",
           "per_request_s", "single_s", "to_json", "wire_bytes"]
