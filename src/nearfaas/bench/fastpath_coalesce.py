"""λ-NIC's optimizations (its §5.1), measured on the fast path (issue 25): the five lambdas of
λ-NIC's optimizer experiment (web, web2, web3, kv, gray) deployed as five modules ("separate")
against one coalesced module with an entry per lambda ("coalesced", fastpath/lambdas/Makefile),
side by side, repeats interleaved. Every number is measured here:

  module_bytes        the .wasm files (λ-NIC counts instructions of its NFP binary)
  code_bytes          machine code wasmtime compiled them to (the executor's `stats`)
  deploy_ms           deploying all five (compilation included)
  rss_kib             the executor's resident memory after one call of each lambda
  web_p50_us          the web lambda, 1 outstanding
  round_robin         web, web2, web3 in turn, 32 outstanding: p50 and req/s

and match reduction: the web lambda's p50 with 5 and with 1,000 lambdas in the match table
(1,000 entries of the one coalesced module), since λ-NIC's per-lambda route tables have no
counterpart here: the executor's match stage is one table indexed by ID.
"""

from __future__ import annotations

import time
from pathlib import Path

from nearfaas.bench.fastpath_load import WASM, load, median_of, num
from nearfaas.fastpath.executor import Executor, lambda_path

LAMBDAS = ("web", "web2", "web3", "kv", "gray")
MANY_ENTRIES = 1000


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _deploy(ex: Executor, coalesced: bool, ids: dict[str, int]) -> float:
    """Deploy the five lambdas; returns the milliseconds it took."""
    t = time.perf_counter()
    for name, lid in ids.items():
        if coalesced:
            ex.deploy(lid, name, "wasm", path=lambda_path("coalesced"), entry=name)
        else:
            ex.deploy(lid, name, "wasm", path=lambda_path(name))
    return (time.perf_counter() - t) * 1000


def _one_run(coalesced: bool, dur: float, warm: float) -> dict:
    ids = {name: WASM[name] for name in LAMBDAS}
    with Executor(workers=1) as ex:
        deploy_ms = _deploy(ex, coalesced, ids)
        web = load(ex.udp_addr, [ids["web"]], 1, dur, warm)
        rr = load(ex.udp_addr, [ids["web"], ids["web2"], ids["web3"]], 32, dur, warm)
        load(ex.udp_addr, [ids["gray"]], 1, 0.1, 0.0, payload_bytes=4096)  # every lambda has run once
        load(ex.udp_addr, [ids["kv"]], 1, 0.1, 0.0, payload=b"GET k")
        stats = ex.stats()
        return {"deploy_ms": deploy_ms, "code_bytes": stats["modules"]["code_bytes"], "modules": stats["modules"]["live"],
                "rss_kib": _rss_kib(ex.proc.pid), "web_p50_us": web["p50_us"], "round_robin_p50_us": rr["p50_us"],
                "round_robin_req_per_s": rr["req_per_s"]}


def _match_entries(dur: float, warm: float, reps: int) -> dict:
    """The web lambda's p50 with the five lambdas deployed, then with 1,000 (entries of the one
    coalesced module spread over the ID space)."""
    out: dict = {}
    with Executor(workers=1) as ex:
        for name in LAMBDAS:
            ex.deploy(WASM[name], name, "wasm", path=lambda_path("coalesced"), entry=name)
        out["5"] = median_of([load(ex.udp_addr, [WASM["web"]], 1, dur, warm)["p50_us"] for _ in range(reps)])
        for i in range(MANY_ENTRIES - len(LAMBDAS)):
            name = LAMBDAS[i % len(LAMBDAS)]
            ex.deploy(1000 + 61 * i, f"{name}-{i}", "wasm", path=lambda_path("coalesced"), entry=name)
        out[str(MANY_ENTRIES)] = median_of([load(ex.udp_addr, [WASM["web"]], 1, dur, warm)["p50_us"] for _ in range(reps)])
        out["modules_compiled"] = ex.stats()["modules"]["live"]
    return out


def coalescing(dur: float, warm: float, reps: int, progress) -> dict:
    files = {name: lambda_path(name).stat().st_size for name in LAMBDAS}
    out: dict = {"label": "measured", "lambdas": list(LAMBDAS),
                 "module_bytes": {"separate": sum(files.values()), "coalesced": lambda_path("coalesced").stat().st_size,
                                  "per_lambda": files}}
    runs: dict = {"separate": [], "coalesced": []}
    for rep in range(reps):
        for mode in (("separate", "coalesced") if rep % 2 == 0 else ("coalesced", "separate")):  # no order bias
            runs[mode].append(_one_run(mode == "coalesced", dur, warm))
    for mode, rs in runs.items():
        out[mode] = {k: median_of([r[k] for r in rs]) for k in rs[0]} | {"repeats": len(rs)}
        progress(f"coalescing {mode:<9}: {out['module_bytes'][mode]:,} module bytes, {out[mode]['code_bytes']:,} code bytes, "
                 f"deploy {num(out[mode]['deploy_ms'], '.1f')} ms, web p50 {num(out[mode]['web_p50_us'], '.1f')} us, "
                 f"round robin {num(out[mode]['round_robin_req_per_s'], ',.0f')} req/s")
    sep, co = out["separate"], out["coalesced"]

    def change(a, b):
        return None if a is None or b is None or not a else round(100.0 * (b - a) / a, 1)

    out["change_pct"] = {"module_bytes": change(out["module_bytes"]["separate"], out["module_bytes"]["coalesced"]),
                         **{k: change(sep[k], co[k]) for k in ("code_bytes", "deploy_ms", "rss_kib", "web_p50_us",
                                                                 "round_robin_p50_us", "round_robin_req_per_s")}}
    out["match_entries"] = _match_entries(dur, warm, reps)
    progress(f"match table: web p50 {num(out['match_entries']['5'], '.1f')} us with 5 lambdas, "
             f"{num(out['match_entries'][str(MANY_ENTRIES)], '.1f')} us with {MANY_ENTRIES:,}")
    out["note"] = ("changes are medians of interleaved repeats on this machine; a p50 change within the repeats' spread "
                   "is noise, not a gain")
    out["repeat_spread"] = {mode: {"web_p50_us": [r["web_p50_us"] for r in rs]} for mode, rs in runs.items()}
    return out
