"""Device record and its roofline latency / power-based energy model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sourced import Sourced

OP_KINDS = ("gemm", "conv", "elementwise", "reduction", "layout", "other")
SPEC_FIELDS = ("peak_ops", "mem_bw_bytes_s", "tdp_w", "idle_w", "host_link", "price_usd", "clock_hz", "units", "node_nm")


@dataclass(frozen=True)
class Efficiency:
    """Fraction of peak compute and of peak bandwidth an op class reaches, with the reason.

    Each fraction is a number (a measured figure: ``hw.devices.host``) or a ``Sourced`` with its
    range (an assumption of the catalog), which the twin's uncertainty study swaps in place;
    ``compute_fraction`` / ``bandwidth_fraction`` read either as a float."""

    compute: float | Sourced
    bandwidth: float | Sourced
    why: str

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth"):
            v = _fraction(getattr(self, name))
            if not 0 < v <= 1:
                raise ValueError(f"Efficiency.{name}={v!r}: must be in (0, 1]")

    @property
    def compute_fraction(self) -> float:
        return _fraction(self.compute)

    @property
    def bandwidth_fraction(self) -> float:
        return _fraction(self.bandwidth)


def _fraction(v: float | Sourced) -> float:
    return float(v.value) if isinstance(v, Sourced) else float(v)


@dataclass(frozen=True)
class Device:
    """A platform of DSCS Table 2.

    ``specs`` holds every spec in SPEC_FIELDS as a :class:`~nearfaas.hw.sourced.Sourced`; ``peak_ops`` is a dict
    {dtype: ops/s} (1 MAC = 2 ops). ``launch_s`` is the fixed per-op launch/dispatch overhead,
    ``driver_s`` a per-invocation driver/runtime overhead (added by callers once per function
    call, not per op). Everything this returns is MODELLED, labelled by ``label``.
    """

    name: str
    label: str
    kind: str  # cpu | gpu | fpga | dsa
    placement: str  # "traditional" (compute node, remote storage) | "near-storage"
    specs: dict[str, Sourced]
    efficiency: dict[str, Efficiency]
    launch_s: Sourced
    driver_s: Sourced
    default_dtype: str = "fp32"
    active_power_fraction: Sourced = field(
        default_factory=lambda: Sourced(1.0, "assumption: busy power = TDP (upper bound); sweep 0.5-1.0", "assumption", (0.5, 1.0))
    )

    # -- spec accessors ------------------------------------------------------------------
    def spec(self, name: str) -> Any:
        return self.specs[name].value

    @property
    def peak_ops(self) -> dict[str, float]:
        return self.spec("peak_ops")

    @property
    def mem_bw(self) -> float:
        return float(self.spec("mem_bw_bytes_s"))

    @property
    def tdp_w(self) -> float:
        return float(self.spec("tdp_w"))

    @property
    def idle_w(self) -> float:
        return float(self.spec("idle_w"))

    def peak(self, dtype: str | None = None) -> float:
        dtype = dtype or self.default_dtype
        if dtype not in self.peak_ops:
            raise ValueError(f"op.dtype={dtype!r}: {self.name} has peaks for {sorted(self.peak_ops)}; pick one of those")
        return float(self.peak_ops[dtype])

    # -- model ---------------------------------------------------------------------------
    def _parse(self, op: dict[str, Any]) -> tuple[str, float, float, str]:
        kind = op.get("kind", "other")
        if kind not in OP_KINDS:
            raise ValueError(f"op.kind={kind!r}: unknown; use one of {list(OP_KINDS)}")
        flops = op.get("flops", 0.0)
        nbytes = op.get("bytes", 0.0)
        for fname, v in (("flops", flops), ("bytes", nbytes)):
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"op.{fname}={v!r}: must be a non-negative number")
        return kind, float(flops), float(nbytes), op.get("dtype") or self.default_dtype

    def rates(self, kind: str, dtype: str | None = None) -> tuple[float, float]:
        """(FLOP/s, bytes/s) an op of ``kind`` attains: the peaks at the kind's efficiency. A
        caller timing many ops reads them once (``twin.platforms.roofline_on``)."""
        eff = self.efficiency.get(kind) or self.efficiency["other"]
        return self.peak(dtype) * eff.compute_fraction, self.mem_bw * eff.bandwidth_fraction

    def roofline(self, op: dict[str, Any]) -> dict[str, float | str]:
        """Compute time, memory time, busy time and the bound ('compute' or 'memory')."""
        kind, flops, nbytes, dtype = self._parse(op)
        flop_s, byte_s = self.rates(kind, dtype)
        t_c = flops / flop_s
        t_m = nbytes / byte_s
        return {"compute_s": t_c, "memory_s": t_m, "busy_s": max(t_c, t_m), "bound": "compute" if t_c >= t_m else "memory"}

    def latency(self, op: dict[str, Any]) -> float:
        """Seconds for one op: max(flops / (peak x eff_c), bytes / (bw x eff_b)) + launch overhead.
        op = {"kind": "gemm"|"conv"|"elementwise"|"reduction"|"layout"|"other", "flops", "bytes",
        optional "dtype"}."""
        return float(self.roofline(op)["busy_s"]) + float(self.launch_s.value)

    def energy(self, op: dict[str, Any], seconds: float | None = None) -> float:
        """Joules for ``op`` taking ``seconds`` (default: ``latency(op)``): idle power for the
        whole time plus (active - idle) power while busy (roofline time), with active power =
        TDP x active_power_fraction."""
        if seconds is None:
            seconds = self.latency(op)
        if seconds < 0:
            raise ValueError(f"seconds={seconds!r}: must be >= 0")
        busy = min(float(self.roofline(op)["busy_s"]), seconds)
        active = self.tdp_w * float(self.active_power_fraction.value)
        return self.idle_w * seconds + max(active - self.idle_w, 0.0) * busy

    def describe(self) -> dict[str, Any]:
        """A JSON-able record, labelled as modelled."""
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "placement": self.placement,
            "modelled": True,
            "specs": {k: s.to_dict() for k, s in self.specs.items()},
            "efficiency": {k: {"compute": e.compute_fraction, "bandwidth": e.bandwidth_fraction, "why": e.why}
                           for k, e in self.efficiency.items()},
            "launch_s": self.launch_s.value,
            "driver_s": self.driver_s.value,
        }
