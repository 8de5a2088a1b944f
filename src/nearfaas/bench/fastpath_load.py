"""What every fast-path benchmark shares: the Rust load generator, the summary of repeats, the
lambdas' IDs and their deployment (src/nearfaas/bench/fastpath.py, fastpath_fair.py)."""

from __future__ import annotations

import json
import subprocess

from nearfaas.fastpath.client import status_name
from nearfaas.fastpath.executor import Executor, lambda_path, load_binary_path
from nearfaas.stats import median, present

PAYLOAD_BYTES = 16
# executor IDs (the baselines use nearfaas.fastpath.baselines.BASELINE_IDS: web 1, web2 2, web3 3, kv 4, gray 5)
#: burn's calls run for milliseconds (the fairness experiment's long calls)
BURN_TIMEOUT_MS = 5000
WASM = {"web": 1, "web2": 2, "web3": 3, "kv": 4, "gray": 5, "burn": 9}
NATIVE = {"web": 11, "kv": 14, "gray": 15}


def median_of(values):
    """The median of the repeats that measured something; None (JSON null) when none did."""
    return median(present(values), None)


def _addr(addr) -> str:
    return f"{addr[0]}:{addr[1]}"


def load(addr, ids, outstanding: int, duration: float, warmup: float, payload: bytes | None = None,
         payload_bytes: int = PAYLOAD_BYTES, match: str = "auto", timeout_ms: int = 200, poll: str = "adaptive") -> dict:
    """One run of the Rust load generator; its JSON report. ``poll``: how it waits for replies."""
    cmd = [str(load_binary_path()), "--addr", _addr(addr), "--ids", ",".join(map(str, ids)), "--outstanding", str(outstanding),
           "--duration", f"{duration:g}", "--warmup", f"{warmup:g}", "--match", match, "--timeout-ms", str(timeout_ms),
           "--poll", poll, "--json"]
    cmd += ["--payload", payload.decode()] if payload is not None else ["--payload-bytes", str(payload_bytes)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 30)
    if proc.returncode:
        raise RuntimeError(f"load generator failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def summarize(runs: list[dict], label: str = "measured") -> dict:
    keys = ("p50_us", "p99_us", "mean_us", "req_per_s")
    out = {k: median_of([r.get(k) for r in runs]) for k in keys}
    out["errors"] = sum(r.get("errors", 0) for r in runs)
    statuses: dict[str, int] = {}
    for r in runs:
        for s, c in r.get("statuses", {}).items():
            name = status_name(int(s))
            statuses[name] = statuses.get(name, 0) + c
    out["statuses"] = statuses
    out["repeats"] = len(runs)
    out["label"] = label
    out["runs"] = [{k: r.get(k) for k in (*keys, "requests", "errors", "timeouts", "match")} for r in runs]
    return out


def num(x, spec: str) -> str:
    """``x`` formatted for a progress line; "n/a" for a run that measured nothing (on a loaded
    machine a baseline can time out every request of a short run)."""
    return "n/a" if x is None else format(x, spec)


def row(r: dict) -> str:
    return f"p50 {num(r['p50_us'], '9.1f')} us  p99 {num(r['p99_us'], '9.1f')} us  {num(r['req_per_s'], '>10,.0f')} req/s"


def deploy_all(ex: Executor, mc: str | None) -> None:
    for name, lid in WASM.items():
        ex.deploy(lid, name, "wasm", path=lambda_path(name), external=mc if name == "kv" else None,
                  timeout_ms=BURN_TIMEOUT_MS if name == "burn" else 50)
    for name, lid in NATIVE.items():
        ex.deploy(lid, f"{name}-native", "native", native=name, external=mc if name == "kv" else None)


