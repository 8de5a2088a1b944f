"""MBWU-based efficiency metrics (thesis section 3.1; issue 20): what a data-access workload's
throughput costs in dollars, energy and space, normalised to what the storage medium can do.

One **MBWU** (media-based work unit) is the peak throughput, in function calls per second, a
workload reaches on one storage medium with caching minimised. A system that reaches ``X``
calls/s on that medium delivers ``X / MBWU`` MBWUs. Dividing a platform's investment by its
MBWUs gives the three metrics:
* ``$/MBWU``: total cost of the platform / MBWUs;
* ``kWh/MBWU``: energy over the measurement second (power x 1 s) / MBWUs;
* ``m3/MBWU``: volume of the platform (with its accessories) / MBWUs.
The benefit of offloading from a host to an embedded platform is the percent reduction of each.

Worked example (the thesis's own counts, its section 3.1.3): a host reaching 5.95 MBWUs and an
embedded board reaching 0.5 MBWU at 3% of the host's cost: $/MBWU falls by
1 - (0.03 / 0.5) / (1 / 5.95) = 64.3% (the thesis: 64%).

Platform cost, power and volume are *inputs* (a YAML profile, ``load_profile``): nothing here
measures a price. The MBWUs come from measured throughput (benchmarks/mbwu.py).

Known caveats:
- kWh/MBWU uses the profile's power under load: this machine has no power meter (no RAPL in
  the VM), so the energy metric is modelled from the inputs and the measured MBWUs.
- An MBWU is specific to one workload and one medium: comparing MBWUs measured on different
  media, or for different workloads, is meaningless (the thesis says so too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

PROFILE_KEYS = {"cost_usd", "power_w", "volume_m3"}


@dataclass(frozen=True)
class Platform:
    """A platform's investments: total cost (USD), power under the workload (W), volume (m³)."""
    name: str
    cost_usd: float
    power_w: float
    volume_m3: float

    def __post_init__(self):
        for field in ("cost_usd", "power_w", "volume_m3"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"platforms.{self.name}.{field} must be a positive number, got {value!r}")


def mbwus(calls_per_s: float, mbwu_calls_per_s: float) -> float:
    """A measured throughput in MBWUs of the medium."""
    if not mbwu_calls_per_s > 0:
        raise ValueError(f"the medium's MBWU must be above 0 calls/s, got {mbwu_calls_per_s!r}")
    return calls_per_s / mbwu_calls_per_s


def efficiency(platform: Platform, units: float) -> dict:
    """$/MBWU, kWh/MBWU (one second of power, as the MBWU is per second) and m³/MBWU."""
    if not units > 0:
        return {"usd_per_mbwu": None, "kwh_per_mbwu": None, "m3_per_mbwu": None}
    return {"usd_per_mbwu": platform.cost_usd / units,
            "kwh_per_mbwu": platform.power_w / 3.6e6 / units,
            "m3_per_mbwu": platform.volume_m3 / units}


def reduction_pct(host: float | None, offloaded: float | None) -> float | None:
    """How much offloading cuts a per-MBWU metric, in percent (negative: it costs more)."""
    if host is None or offloaded is None or host <= 0:
        return None
    return (1.0 - offloaded / host) * 100.0


def compare(host: Platform, embedded: Platform, host_mbwus: float, embedded_mbwus: float) -> dict:
    """One landscape: both platforms' metrics and the reductions from offloading."""
    h, e = efficiency(host, host_mbwus), efficiency(embedded, embedded_mbwus)
    return {"mbwus": {"host": host_mbwus, "embedded": embedded_mbwus}, "host": h, "embedded": e,
            "usd_per_mbwu_reduction_pct": reduction_pct(h["usd_per_mbwu"], e["usd_per_mbwu"]),
            "kwh_per_mbwu_reduction_pct": reduction_pct(h["kwh_per_mbwu"], e["kwh_per_mbwu"]),
            "m3_per_mbwu_reduction_pct": reduction_pct(h["m3_per_mbwu"], e["m3_per_mbwu"])}


def load_profile(path: Path) -> dict[str, Platform]:
    """``platforms: {host: {cost_usd, power_w, volume_m3}, embedded: {...}}`` from a YAML file,
    every problem named by its field."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read the platform profile {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from exc
    platforms = (doc or {}).get("platforms") if isinstance(doc, dict) else None
    if not isinstance(platforms, dict) or not {"host", "embedded"} <= set(platforms):
        raise ValueError(f"{path}: expected a 'platforms' mapping with 'host' and 'embedded' entries "
                         "(see examples/econ/platforms.yml)")
    out = {}
    for name in ("host", "embedded"):
        entry = platforms[name]
        if not isinstance(entry, dict):
            raise ValueError(f"platforms.{name} must be a mapping of {', '.join(sorted(PROFILE_KEYS))}")
        missing, unknown = PROFILE_KEYS - set(entry), set(entry) - PROFILE_KEYS - {"note"}
        if missing or unknown:
            raise ValueError(f"platforms.{name}: " + "; ".join(
                ([f"missing {', '.join(sorted(missing))}"] if missing else []) +
                ([f"unknown {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(PROFILE_KEYS))}, note)"] if unknown else [])))
        out[name] = Platform(name, entry["cost_usd"], entry["power_w"], entry["volume_m3"])
    return out
