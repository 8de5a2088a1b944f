"""The wire format of the timing and link headers every call answers with, written and read in
one place (gateway, chains, CLI, demo and benchmarks all use these).

    X-Nearfaas-Timing: measured;total=S;cold_start=S;stack=S;data=S;compute=S
    X-Nearfaas-Link:   <profile>;read=BYTES;write=BYTES;seconds=S
"""

from __future__ import annotations

TIMING_PARTS = ("total", "cold_start", "stack", "data", "compute")


def format_timing(timing: dict) -> str:
    return "measured;" + ";".join(f"{part}={timing[part]:.6f}" for part in TIMING_PARTS)


def parse_timing(header: str) -> dict[str, float]:
    """Seconds per part; the leading label ("measured") is dropped."""
    out = {}
    for field in header.split(";")[1:]:
        name, _, value = field.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def format_link(profile: str, read: int, write: int, seconds: float, read_wire: int | None = None,
                write_wire: int | None = None) -> str:
    """``read_wire`` / ``write_wire``: bytes on the wire (fewer than ``read`` / ``write`` when Bitar compressed them)."""
    return (f"{profile};read={read};write={write};seconds={seconds:.6f};"
            f"read_wire={read if read_wire is None else read_wire};write_wire={write if write_wire is None else write_wire}")


def parse_link(header: str) -> dict:
    """What crossed the emulated link: profile, read and write bytes, seconds it added."""
    name, *fields = header.split(";") if header else ("local",)
    values = dict(f.split("=", 1) for f in fields if "=" in f)
    out: dict = {"profile": name or "local"}
    for key, kind in (("read", int), ("write", int), ("seconds", float)):
        try:
            out[key] = kind(values.get(key, 0))
        except ValueError:
            out[key] = kind(0)
    for key, plain in (("read_wire", "read"), ("write_wire", "write")):
        try:
            out[key] = int(values.get(key, out[plain]))
        except ValueError:
            out[key] = out[plain]
    return out
