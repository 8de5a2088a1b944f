"""`make demo`: the whole platform in one run on this machine.

Starts a local cluster, deploys the example OpenFaaS stack, uploads an object with boto3, calls
a function on it by reference, runs the three-stage example chain under both placements and
the eight DSCS applications at tiny size, prints answers with placement and measured timing, and
shuts the cluster down (unless --keep).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import requests

from nearfaas.cluster import launcher
from nearfaas.present import chain_table, deployment_body, print_speedups
from nearfaas.spec.cluster import load_cluster
from nearfaas.spec.stack import load_stack
from nearfaas.telemetry.headers import parse_link, parse_timing

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SAMPLE = (
    "Near-data processing moves the computation to the data instead of the data to the computation.\n"
    "DSCS-Serverless places an acceleratable function on the storage drive that holds its input.\n"
) * 64


def _demo_chain(url: str, s3, console) -> int:
    """Step 4b: the three-stage application, once near the data and once the traditional way."""
    frame = bytes(range(256)) * (4 * 4096)  # a 4 MiB stand-in for a camera frame
    s3.put_object(Bucket="demo", Key="cams/frame-1.raw", Body=frame)
    for policy in ("near-data", "compute-only"):
        resp = requests.post(f"{url}/function/damage-detect", json={"input": {"bucket": "demo", "key": "cams/frame-1.raw"}},
                             headers={"X-Nearfaas-Policy": policy}, timeout=120)
        if resp.status_code != 200:
            console.print(f"[red]chain failed under {policy} ({resp.status_code}):[/] {resp.text}")
            return 1
        link = parse_link(resp.headers["X-Nearfaas-Link"])
        total = parse_timing(resp.headers["X-Nearfaas-Timing"])["total"]
        raw, wire = link["read"] + link["write"], link["read_wire"] + link["write_wire"]
        compressed = f" ({wire:,} on the wire after Bitar)" if wire < raw else ""  # only over a link where it pays
        console.print(f"[bold]4b. chain[/] damage-detect -> damage-classify -> damage-notify under [bold]{policy}[/]: "
                      f"{resp.json()['message']}; {raw:,} bytes over the link{compressed}, {total * 1e3:.1f} ms")
        console.print(chain_table(json.loads(resp.headers["X-Nearfaas-Chain"])))
    return 0


def _demo_apps(url: str, state_dir: Path, console) -> int:
    """Step 4c: the eight DSCS applications at tiny size, each run once near the data."""
    from rich import box
    from rich.table import Table

    from nearfaas.apps import APPS
    from nearfaas.jobs.apps import AppError, deploy_app, run_app
    from nearfaas.models import MODELS

    table = Table("app", "answer (f3's notification)", "stages on", "output shape", "total ms", "link bytes",
                  title="4c. the eight DSCS applications, tiny models (measured on this machine)", box=box.SIMPLE)
    failed = 0
    with console.status("deploying the eight applications (tiny models)...") as status:
        for key in APPS:
            try:
                deploy_app(url, state_dir, key, "tiny", on_step=status.update)
                status.update(f"running {key}...")
                result = run_app(url, state_dir, key)
            except AppError as exc:
                console.print(f"[red]{key}: {exc}[/]")
                failed += 1
                continue
            answer = result["answer"] if isinstance(result["answer"], dict) else {}
            primary = MODELS[APPS[key].model].outputs("tiny")[0][0]  # the output Table 1 lists
            shape = (answer.get("output_shapes") or {}).get(primary, "")
            if result["status"] >= 400:
                failed += 1
            table.add_row(key, f"{answer.get('severity', result['status'])}: {_headline(answer)}",
                          ", ".join(s["node"] for s in result["stages"]), str(shape),
                          f"{result['timing'].get('total', 0) * 1e3:.1f}", f"{result['link']['read'] + result['link']['write']:,}")
    console.print(table)
    return 1 if failed else 0


def _headline(answer: dict) -> str:
    """One line of an app's summary, whatever kind of model answered."""
    s = answer.get("summary") or {}
    if s.get("top5"):
        return f"top class {s['top5'][0]['label']} ({s['top5'][0]['probability']:.3f})"
    for key in ("answer", "detections", "refer", "classes_present", "generated_preview", "text"):
        if key in s:
            return f"{key}: {str(s[key])[:40]}"
    return ", ".join(f"{k}={str(v)[:16]}" for k, v in list(s.items())[:2])


def run_demo(state_dir: Path, keep: bool, console, report_dir: Path = Path("twin-report")) -> int:
    """The live cluster part, then the twin's projection of the same apps onto hardware we lack."""
    return _cluster_demo(state_dir, keep, console) or _demo_twin(report_dir, console)


def _demo_twin(report_dir: Path, console) -> int:
    from nearfaas.twin import render, report

    with console.status("6. twin: the eight apps on seven platforms, a 20-node rack, four sensitivity studies...") as status:
        results = report.build(quick=True, progress=lambda m: status.update(f"6. twin: {m}..."))
        paths = render.write(results, report_dir)
    console.print(f"[bold]6. twin[/] (modelled; built in {results['wall_s']:.1f}s):")
    print_speedups(results, console)
    console.print(f"   HTML report: {paths['html'].resolve()}")
    return 0


def _cluster_demo(state_dir: Path, keep: bool, console) -> int:
    from nearfaas.client import gateway_session, s3_client

    if launcher.is_running(state_dir):
        launcher.down(state_dir)
    shutil.rmtree(state_dir, ignore_errors=True)
    spec = load_cluster(None)
    spec.gateway.port = 0  # a free port: the demo must not collide with anything already running
    started = time.perf_counter()
    try:
        with console.status("starting the local cluster...") as status:
            layout = launcher.up(spec, state_dir, on_step=status.update)
        url = layout["gateway_url"]
        console.print(f"[bold]1. cluster up[/] in {time.perf_counter() - started:.1f}s: gateway {url}, "
                      + ", ".join(f"{n['name']} ({n['kind']}/{n['class']})" for n in layout["nodes"]))

        stack = load_stack(EXAMPLES / "stack.yml")
        admin = gateway_session(layout=layout)  # the cluster's own keys: auth is on, as by default
        for fn in stack.functions.values():
            resp = admin.post(f"{url}/system/functions", json=deployment_body(fn), timeout=30)
            resp.raise_for_status()
        with console.status("waiting for warm replicas..."):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                ready = [admin.get(f"{url}/system/function/{n}", timeout=5).json()["availableReplicas"] for n in stack.functions]
                if all(r >= 1 for r in ready):
                    break
                time.sleep(0.1)
        console.print(f"[bold]2. deployed[/] {', '.join(stack.functions)} from examples/stack.yml (OpenFaaS format)")

        s3 = s3_client(url, state_dir)
        s3.create_bucket(Bucket="demo")
        s3.put_object(Bucket="demo", Key="docs/near-data.txt", Body=SAMPLE.encode())
        head = s3.head_object(Bucket="demo", Key="docs/near-data.txt")
        console.print(f"[bold]3. uploaded[/] s3://demo/docs/near-data.txt with boto3 ({head['ContentLength']} bytes, ETag {head['ETag']})")

        resp = requests.post(f"{url}/function/wordcount", json={"input": {"bucket": "demo", "key": "docs/near-data.txt"}}, timeout=60)
        if resp.status_code != 200:
            console.print(f"[red]invocation failed ({resp.status_code}):[/] {resp.text}")
            return 1
        result = resp.json()
        console.print("[bold]4. invoked[/] wordcount by object reference:")
        console.print_json(json.dumps(result))
        timing = parse_timing(resp.headers["X-Nearfaas-Timing"])
        console.print(f"   placed on [bold]{resp.headers['X-Nearfaas-Node']}[/] ({resp.headers['X-Nearfaas-Placement']}), "
                      f"start={resp.headers['X-Nearfaas-Start']}")
        console.print("   timing (measured on this machine): " + ", ".join(f"{k} {float(v) * 1e3:.3f} ms" for k, v in timing.items()))
        return _demo_chain(url, s3, console) or _demo_apps(url, state_dir, console)
    finally:
        if keep:
            console.print(f"cluster left running; stop it with: nearfaas down --state {state_dir}")
        else:
            stopped = launcher.down(state_dir)
            left = launcher.processes_of(state_dir)
            console.print(f"[bold]5. cluster down[/]: stopped {stopped} process(es); {len(left)} left behind")
