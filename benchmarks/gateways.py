#!/usr/bin/env python3
"""One gateway against two behind HAProxy, side by side in one run (issue 43; all measured here).

Two clusters run at once (3 nodes each, replication factor 2, no client auth so that `wrk` can
drive S3 unsigned), one with ``gateway.replicas: 1`` and one with 2 (behind HAProxy, as
`nearfaas up` starts them). The one-gateway cluster is measured twice: clients straight to its
gateway, and through HAProxy configured the same way, so that the balancer's own cost is apart
from what the second gateway adds. Rounds rotate the three; each round measures, per setup:

  s3-get     GET of a 4 KiB object, closed loop
  s3-put     PUT of 4 KiB to one key, closed loop (fsynced on both replicas before each answer)
  invoke     warm POST /function/hello (examples/hello)

and reports throughput and latency medians over the rounds with the ratios 2 gateways / 1. The
twin then projects a 200-node rack behind 1, 4 and 16 gateways of the measured warm-call
capacity (twin/gateway_tier.py; labelled modelled).
Then, on the two-gateway cluster, ``failover``: client threads PUT through the balancer (boto3,
standard retries) while one gateway is SIGKILLed; the time from the kill until every client has
had a request issued after it succeed (goal: <= 2 s), and how many requests failed.

The machine's core count is in the result: with 2 cores the gateways, the nodes and the load
generator share them, so a second gateway adds parallel Python but no core of its own.

    python benchmarks/gateways.py [--rounds 3] [--seconds 4] [--clients 16] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's nearfaas, whatever the venv installed
import requests  # noqa: E402

from nearfaas.bench.cluster import scratch_cluster  # noqa: E402
from nearfaas.bench.load import generator, http_load  # noqa: E402
from nearfaas.bench.results import machine_facts, write_result  # noqa: E402
from nearfaas.cluster import launcher  # noqa: E402
from nearfaas.spec.bundle import pack  # noqa: E402
from nearfaas.stats import median  # noqa: E402

BODY = os.urandom(4096)
TESTS = ("s3-get", "s3-put", "invoke")


def _prepare(url: str) -> None:
    requests.put(f"{url}/bench", timeout=30).raise_for_status()
    requests.put(f"{url}/bench/obj", data=BODY, timeout=30).raise_for_status()
    resp = requests.post(f"{url}/system/functions", json={"service": "hello", "lang": "python3-http", "bundle": pack(ROOT / "examples" / "hello"),
                                                          "labels": {"com.openfaas.scale.min": "1"}}, timeout=60)
    resp.raise_for_status()
    deadline = time.monotonic() + 60
    while requests.post(f"{url}/function/hello", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "hello never answered"
        time.sleep(0.1)


def _measure(url: str, test: str, clients: int, seconds: float) -> dict:
    if test == "s3-get":
        return http_load(f"{url}/bench/obj", clients, seconds)
    if test == "s3-put":
        return http_load(f"{url}/bench/put", clients, seconds, method="PUT", body=BODY)
    return http_load(f"{url}/function/hello", clients, seconds, method="POST", body=b"")


@contextlib.contextmanager
def _balanced(layout: dict, scratch: Path):
    """HAProxy, configured as `nearfaas up` configures it for many gateways, in front of a
    one-gateway cluster: the balancer's own cost, apart from the second gateway's gain."""
    from nearfaas.cluster import balancer
    from nearfaas.cluster.launcher import _free_port, gateways_of

    port = _free_port(layout["host"])
    cfg = scratch / "haproxy.cfg"
    cfg.write_text(balancer.config(layout["host"], port, gateways_of(layout), 60.0))
    proc = subprocess.Popen(balancer.command(balancer.haproxy_binary(), cfg), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://{layout['host']}:{port}"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "HAProxy did not start"
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _failover(layout: dict, state: Path, clients: int = 4) -> dict:
    """Time from one gateway's SIGKILL until every client thread had a request it issued after
    the kill succeed; failures counted (boto3 retries as configured by default: standard, 3)."""
    import boto3
    from botocore.config import Config

    url = layout["gateway_url"]
    done, killed = threading.Event(), threading.Event()
    kill_at = [0.0]
    recovered: list[float] = []
    failures: list[str] = []
    ops = [0]

    def client(_):
        s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id="x", aws_secret_access_key="y", region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3}))
        mine = None
        while not done.is_set():
            issued = time.monotonic()
            try:
                s3.put_object(Bucket="bench", Key=f"fo-{uuid.uuid4().hex}", Body=BODY)
                ops[0] += 1
                if mine is None and killed.is_set() and issued >= kill_at[0]:
                    mine = time.monotonic() - kill_at[0]
                    recovered.append(mine)
            except Exception as exc:
                failures.append(repr(exc)[:200])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    pid = next(p["pid"] for p in launcher.read_layout(state)["processes"] if p["name"] == "gateway-gw1")
    kill_at[0] = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    killed.set()
    deadline = time.monotonic() + 30
    while len(recovered) < clients and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    for t in threads:
        t.join()
    launcher.restart_gateway(state, gateway_id="gw1")
    return {"clients": clients, "recovered_all_s": round(max(recovered), 3) if len(recovered) == clients else None,
            "recovered_s": sorted(round(r, 3) for r in recovered), "failed_requests": len(failures), "failures": failures[:5],
            "operations": ops[0], "goal_s": 2.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per test, per cluster, per round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 2 s")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 2.0
    from nearfaas.spec.cluster import GatewaySpec

    # 1: one gateway, clients straight to it; "1+lb": the same gateway behind HAProxy; 2: two
    # gateways behind HAProxy (what `nearfaas up` starts for gateway.replicas: 2).
    configs = (1, "1+lb", 2)
    runs: dict = {n: {t: [] for t in TESTS} for n in configs}
    with scratch_cluster(auth=None, gateway=GatewaySpec(port=0, replicas=1)) as (one, one_state), \
            scratch_cluster(auth=None, gateway=GatewaySpec(port=0, replicas=2)) as (two, two_state), \
            _balanced(one, one_state.parent) as one_balanced:
        urls = {1: one["gateway_url"], "1+lb": one_balanced, 2: two["gateway_url"]}
        for n in (1, 2):
            _prepare(urls[n])
        for r in range(args.rounds):
            order = configs[r % 3:] + configs[:r % 3]  # interleaved: none always goes first
            for test in TESTS:
                for n in order:
                    result = _measure(urls[n], test, args.clients, args.seconds)
                    runs[n][test].append(result)
                    print(f"round {r + 1} {test:7} {n!s:>4} gateway(s): {result['rps']:8.0f} req/s  p50 {result['p50_s'] * 1e3:6.2f} ms  "
                          f"p99 {result['p99_s'] * 1e3:6.2f} ms  errors {result['errors']} (measured)", flush=True)
        failover = _failover(two, two_state)
    summary = {}
    for test in TESTS:
        row = {str(n): {"rps": median([x["rps"] for x in runs[n][test]]), "p50_ms": median([x["p50_s"] * 1e3 for x in runs[n][test]]),
                        "p99_ms": median([x["p99_s"] * 1e3 for x in runs[n][test]]), "errors": sum(x["errors"] for x in runs[n][test])}
               for n in configs}
        row["ratio_rps_2_over_1"] = round(row["2"]["rps"] / row["1"]["rps"], 3) if row["1"]["rps"] else None
        row["ratio_rps_2_over_1_behind_haproxy"] = round(row["2"]["rps"] / row["1+lb"]["rps"], 3) if row["1+lb"]["rps"] else None
        summary[test] = row
        print(f"{test:7}: 1 gateway {row['1']['rps']:.0f} req/s (behind HAProxy {row['1+lb']['rps']:.0f}), 2 gateways "
              f"{row['2']['rps']:.0f} req/s: x{row['ratio_rps_2_over_1']} (x{row['ratio_rps_2_over_1_behind_haproxy']} against "
              f"one behind HAProxy; measured, medians of {args.rounds} rounds)")
    # The twin's projection: a 200-node rack behind 1, 4 and 16 gateways of the measured capacity.
    from nearfaas.twin.gateway_tier import project

    stages_per_s = summary["invoke"]["1"]["rps"]  # one warm call is one routed stage
    print(f"rack projection with one gateway routing {stages_per_s:.0f} stages/s (measured above; the rest modelled):")
    projection = project(stages_per_s, on_case=lambda c: print(
        f"  {c['offered_calls_per_s']:>8.1f} calls/s, {c['gateways']:>2} gateway(s): offered utilisation {c['gateway_offered_utilisation']:.2f}, "
        f"gateway wait {c['gateway_wait_ms_mean']:.1f} ms, p99 {c['latency_ms']['p99']:.0f} ms, bottleneck {c['bottleneck']} (modelled)",
        flush=True))
    print(f"failover: every client succeeded again {failover['recovered_all_s']} s after a gateway's SIGKILL "
          f"(goal <= 2 s), {failover['failed_requests']} failed requests of {failover['operations']} (measured)")
    machine = machine_facts()
    path = write_result("gateways", {"benchmark": "gateways", "label": "measured", "machine": machine, "cores": os.cpu_count(),
                                     "generator": generator(), "args": vars(args), "summary": summary, "failover": failover,
                                     "rack_projection": projection,
                                     "rounds": {str(n): runs[n] for n in configs}})
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
