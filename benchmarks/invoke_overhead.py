#!/usr/bin/env python3
"""Warm-call overhead of the platform, side by side in one run (all numbers measured here).

Two clusters run at once, so the cost of trust is measured side by side:
  open      — the configuration before issue 12: `auth: off`, `isolation: off` (root workers)
  secured   — today's default: keys on every port, workers unprivileged in their own mount view
Systems, each serving a no-op that answers "ok":
  gateway        — GET /function/hello through a gateway to a warm Python worker (open function)
  gateway-auth   — (secured only) the same through a function with x-nearfaas auth: true, called
                   with the admin's basic-auth header: the cost of checking credentials per call
  worker         — the same warm worker, called directly (no gateway hop)
  image-gateway  — (secured only, where an OCI runtime works) the same call to an image-only
                   function in a container (of-watchdog HTTP mode, docs/images.md), built here
  baseline       — a plain Python http.server (ThreadingHTTPServer, keep-alive, TCP_NODELAY)
at 1 and 8 concurrent clients, several repeats each, interleaved; then cold starts on both (and
the image function's: container creation plus its server's start).

Load comes from `wrk` (C, keep-alive) when installed, so the client costs little CPU on this
2-core box; otherwise from a Python client, which is recorded in the result.

    python benchmarks/invoke_overhead.py [--duration 5] [--repeats 3] [--cold 15]

Target (issue 12): the secured configuration adds at most 15% to the open one's warm p50.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's nearfaas, whatever the venv installed
from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.bench.cluster import scratch_cluster
from nearfaas.bench.load import generator, http_load
from nearfaas.bench.results import ROOT, machine_facts, write_result
from nearfaas.stats import median, percentile
from nearfaas.cluster.launcher import admin_headers, signed_get
from nearfaas.spec.bundle import pack
from nearfaas.telemetry.headers import parse_timing

TARGET_P50_MS = 0.5
TARGET_RPS_8 = 3000
TARGET_TRUST_OVERHEAD = 0.15  # secured vs open warm p50 through the gateway


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the load generator resets its connections when a run ends; that is not an error


def start_baseline() -> tuple[subprocess.Popen, str]:
    """The baseline runs in its own process, like the worker, so it gets no help from ours."""
    here = str(Path(__file__).resolve().parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); from invoke_overhead import _Ok, QuietServer; "
        "s = QuietServer(('127.0.0.1', 0), _Ok); "
        "print(s.server_address[1], flush=True); s.serve_forever()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/"


def load(url: str, clients: int, duration: float, headers: dict | None = None) -> dict:
    """One closed-loop run of GETs (wrk, else the Python client), in milliseconds."""
    r = http_load(url, clients, duration, headers=headers)
    return {"p50_ms": r["p50_s"] * 1e3, "p99_ms": r["p99_s"] * 1e3, "rps": r["rps"], "errors": r["errors"]}


def warm_calls(systems: dict[str, tuple[str, dict]], duration: float, repeats: int) -> dict:
    """Repeats are interleaved (every system once per round) so that drift in this shared
    machine's speed lands on all systems alike instead of on whichever ran last."""
    results = {}
    for clients in (1, 8):
        runs: dict[str, list[dict]] = {name: [] for name in systems}
        for url, headers in systems.values():
            load(url, clients, 1.0, headers)  # warm-up: connections, caches
        for _ in range(repeats):
            for name, (url, headers) in systems.items():
                runs[name].append(load(url, clients, duration, headers))
        for name in systems:
            rs = runs[name]
            r = results[f"{name}@{clients}"] = {
                "system": name, "clients": clients, "runs": rs,
                "p50_ms": median([x["p50_ms"] for x in rs]), "p99_ms": median([x["p99_ms"] for x in rs]),
                "rps": median([x["rps"] for x in rs]), "errors": sum(x["errors"] for x in rs),
            }
            print(f"  {name:<22} clients={clients}  p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  {r['rps']:,.0f} req/s", flush=True)
    return results


def _post(url: str, body: dict, headers: dict) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json", **headers})
    urllib.request.urlopen(req, timeout=30).read()


def _status(gw: str, name: str, headers: dict) -> dict:
    return json.loads(urllib.request.urlopen(urllib.request.Request(f"{gw}/system/function/{name}", headers=headers), timeout=5).read())


def _available(gw: str, name: str, headers: dict) -> int:
    return _status(gw, name, headers)["availableReplicas"]


def _pools_refilled(layout: dict) -> bool:
    """Every node's pre-warmed generic workers are back (signed health, as the gateway asks)."""
    for node in layout["nodes"]:
        pool = json.loads(signed_get(layout, f"{node['url']}/_nearfaas/health", timeout=5)).get("prewarm") or {}
        if pool.get("idle", 0) < pool.get("target", 0):
            return False
    return True


def cold_starts(layout: dict, count: int, headers: dict, name: str = "hello") -> dict:
    """Scale to zero, let the nodes refill their pre-warmed pools, then call: the call pays the
    cold start a function sees at a steady pace (specialise a generic worker + import + init;
    for an image function: create the container and wait for its server)."""
    gw = layout["gateway_url"]
    cold, end_to_end = [], []
    for _ in range(count):
        _post(f"{gw}/system/scale-function/{name}", {"replicas": 0}, headers)
        deadline = time.monotonic() + 10
        while (_available(gw, name, headers) or not _pools_refilled(layout)) and time.monotonic() < deadline:
            time.sleep(0.02)
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{gw}/function/{name}", timeout=60) as resp:
            resp.read()
            elapsed = time.perf_counter() - t0
            assert resp.headers["X-Nearfaas-Start"] == "cold", resp.headers
            timing = parse_timing(resp.headers["X-Nearfaas-Timing"])
        cold.append(float(timing["cold_start"]) * 1e3)
        end_to_end.append(elapsed * 1e3)
    _post(f"{gw}/system/scale-function/{name}", {"replicas": 1}, headers)
    return {"count": count, "cold_start_p50_ms": percentile(cold, 50), "cold_start_p95_ms": percentile(cold, 95),
            "cold_call_p50_ms": percentile(end_to_end, 50), "cold_call_p95_ms": percentile(end_to_end, 95),
            "samples_ms": [round(c, 2) for c in cold]}


def _deploy_hello(gw: str, headers: dict, name: str = "hello", auth: bool = False) -> tuple[str, dict]:
    """Deploy the no-op (uploaded as a bundle); the URL of its warm worker and the headers a
    direct call needs (the instance's token, which only the gateway's admin API shows)."""
    _post(f"{gw}/system/functions", {"service": name, "lang": "python3-http", "bundle": pack(ROOT / "examples" / "hello"),
                                     "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"},
                                     "x-nearfaas": {"auth": auth}}, headers)
    deadline = time.monotonic() + 30
    while not _available(gw, name, headers):
        assert time.monotonic() < deadline, f"{name} never warmed up"
        time.sleep(0.05)
    instance = _status(gw, name, headers)["instances"][0]
    return instance["url"] + "/", {WORKER_TOKEN_HEADER: instance["token"]}


def _deploy_image(gw: str, headers: dict, image: str, name: str = "hello-image") -> None:
    """The of-watchdog HTTP-mode image function (bench/images.py), one warm replica."""
    _post(f"{gw}/system/functions", {"service": name, "image": image,
                                     "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}}, headers)
    deadline = time.monotonic() + 60
    while not _available(gw, name, headers):
        assert time.monotonic() < deadline, f"{name} never warmed up"
        time.sleep(0.05)


def _images(scratch: Path) -> dict | None:
    """Local images for the image-function rows, or None (with the reason printed) where no OCI
    runtime can run a container here (docs/images.md)."""
    from nearfaas.bench.images import BUSYBOX, build_images
    from nearfaas.node.oci import tools

    refusal = tools.find(scratch / "probe").refusal() or (None if BUSYBOX else "busybox is not installed")
    if refusal is not None:
        print(f"image-function rows skipped: {refusal}")
        return None
    return build_images(scratch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measured run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", type=int, default=15, help="cold starts to measure, per configuration")
    args = parser.parse_args()
    print(f"load generator: {generator()}")
    baseline, baseline_url = start_baseline()
    scratch = Path(tempfile.mkdtemp(prefix="nearfaas-images-"))
    try:
        images = _images(scratch)
        with scratch_cluster(auth=None, isolation=False) as (open_layout, _), \
                scratch_cluster(handler_roots=[str(scratch)]) as (layout, _):
            open_gw, gw, admin = open_layout["gateway_url"], layout["gateway_url"], admin_headers(layout)
            systems = {"open/gateway": (f"{open_gw}/function/hello", {}),
                       "open/worker": _deploy_hello(open_gw, {}),
                       "secured/gateway": (f"{gw}/function/hello", {}),
                       "secured/worker": _deploy_hello(gw, admin),
                       "secured/gateway-auth": (f"{gw}/function/hello-auth", admin),
                       "baseline": (baseline_url, {})}
            _deploy_hello(gw, admin, "hello-auth", auth=True)
            if images is not None:  # an image function (HTTP mode) next to the Python worker
                _deploy_image(gw, admin, images["py-http"])
                systems["secured/image-gateway"] = (f"{gw}/function/hello-image", {})
            print("warm no-op calls (measured):")
            warm = warm_calls(systems, args.duration, args.repeats)
            cold = {}
            runs = [("open", open_layout, {}, "hello"), ("secured", layout, admin, "hello")]
            runs += [("secured-image", layout, admin, "hello-image")] if images is not None else []
            for config, config_layout, headers, name in runs:
                print(f"cold starts, {config} (measured):")
                cold[config] = c = cold_starts(config_layout, args.cold, headers, name)
                print(f"  cold start p50 {c['cold_start_p50_ms']:.0f} ms, p95 {c['cold_start_p95_ms']:.0f} ms; "
                      f"cold call p50 {c['cold_call_p50_ms']:.0f} ms, p95 {c['cold_call_p95_ms']:.0f} ms")
    finally:
        baseline.terminate()
        shutil.rmtree(scratch, ignore_errors=True)
    g1, g8 = warm["secured/gateway@1"], warm["secured/gateway@8"]
    trust = {f"{system}@{c}": warm[f"secured/{system}@{c}"]["p50_ms"] / warm[f"open/{other}@{c}"]["p50_ms"] - 1
             for system, other in (("gateway", "gateway"), ("gateway-auth", "gateway"), ("worker", "worker")) for c in (1, 8)}
    worst = max(trust[f"{s}@{c}"] for s in ("gateway", "gateway-auth") for c in (1, 8))
    targets = {
        "gateway_p50_ms_at_1_client": {"target": f"<= {TARGET_P50_MS}", "measured": g1["p50_ms"], "met": g1["p50_ms"] <= TARGET_P50_MS,
                                       "off_by": f"{g1['p50_ms'] / TARGET_P50_MS:.2f}x the target"},
        "gateway_rps_at_8_clients": {"target": f">= {TARGET_RPS_8}", "measured": g8["rps"], "met": g8["rps"] >= TARGET_RPS_8,
                                     "off_by": f"{g8['rps'] / TARGET_RPS_8:.2f}x the target"},
        "trust_added_to_warm_p50": {"target": f"<= {TARGET_TRUST_OVERHEAD:.0%}", "measured": worst, "met": worst <= TARGET_TRUST_OVERHEAD,
                                    "off_by": f"{worst:+.1%} (secured vs open, worst of gateway and gateway-auth at 1 and 8 clients)"},
    }
    ratios = {f"{cfg}/gateway_vs_{other}@{c}": {"p50": warm[f"{cfg}/gateway@{c}"]["p50_ms"] / warm[f"{o}@{c}"]["p50_ms"],
                                                 "rps": warm[f"{cfg}/gateway@{c}"]["rps"] / warm[f"{o}@{c}"]["rps"]}
              for cfg in ("open", "secured") for other, o in (("worker", f"{cfg}/worker"), ("baseline", "baseline")) for c in (1, 8)}
    result = {"benchmark": "invoke_overhead", "label": "measured", "load_generator": generator(),
              "duration_s": args.duration, "repeats": args.repeats, "machine": machine_facts(),
              "configurations": {"open": "auth: off, isolation: off (before issue 12)",
                                 "secured": "auth and isolation on (the default)"},
              "warm": warm, "ratios": ratios, "trust_overhead_p50": trust, "cold": cold, "targets": targets}
    path = write_result("invoke_overhead", result)
    for name, value in trust.items():
        print(f"secured vs open, {name}: warm p50 {value:+.1%}")
    for name, t in targets.items():
        print(f"target {name}: {t['target']}, measured {t['measured']:.3f} -> {'MET' if t['met'] else 'MISSED'} ({t['off_by']})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
