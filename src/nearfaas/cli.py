"""The one nearfaas command line.

    nearfaas up                      start a local cluster (gateway + storage + compute nodes)
    nearfaas deploy -f stack.yml     deploy the functions of an OpenFaaS stack file
    nearfaas put ./cat.jpg s3://photos/cat.jpg
    nearfaas invoke resize --input s3://photos/cat.jpg
    nearfaas down                    stop everything, leave no process behind
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import click
from rich.console import Console
from rich.table import Table

# Off a terminal (make, CI logs, pipes) rich would assume 80 columns and squeeze tables; logs are
# read in wide windows, so give them 120 unless COLUMNS says otherwise.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
console = Console(width=_WIDTH)
err = Console(stderr=True, width=_WIDTH)

STATE_HELP = "state directory of the local cluster (objects, logs, pids) [env NEARFAAS_STATE; default .nearfaas]"


def _state(state: str | None) -> Path:
    return Path(state or os.environ.get("NEARFAAS_STATE") or ".nearfaas")


def _gateway(state: str | None, gateway: str | None) -> str:
    if gateway or os.environ.get("NEARFAAS_GATEWAY"):
        return (gateway or os.environ["NEARFAAS_GATEWAY"]).rstrip("/")
    from nearfaas.cluster.launcher import read_layout

    layout = read_layout(_state(state))
    if not layout:
        raise click.ClickException(f"no cluster found in {_state(state)}; start one with `nearfaas up` or pass --gateway URL")
    return layout["gateway_url"]


def _fail(message: str) -> None:
    raise click.ClickException(message)


def _http(state: str | None, method: str, url: str, body=None, headers=None, timeout: float = 60.0):
    import requests

    from nearfaas.client import gateway_session

    try:
        return gateway_session(_state(state)).request(method, url, json=body if not isinstance(body, (bytes, str)) else None,
                                data=body if isinstance(body, (bytes, str)) else None, headers=headers, timeout=timeout)
    except requests.ConnectionError:
        _fail(f"cannot reach the gateway at {url}; is the cluster up? (`nearfaas status`)")


def _s3(state, gateway):
    from nearfaas.client import s3_client

    return s3_client(_gateway(state, gateway), state_dir=_state(state))


def _split_s3(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc:
        _fail(f"{uri!r} is not an s3://bucket/key URI")
    return parts.netloc, parts.path.lstrip("/")


common_state = click.option("--state", default=None, help=STATE_HELP)
common_gateway = click.option("--gateway", default=None, help="gateway URL [env NEARFAAS_GATEWAY; default: from the state dir]")


class _LazyGroup(click.Group):
    """Subcommand groups kept in their own modules (they import this one for its helpers) load
    only when used: `nearfaas up` need not import ONNX for `nearfaas hw`."""

    lazy = {"apps": "nearfaas.cli_apps:apps", "models": "nearfaas.cli_apps:models", "hw": "nearfaas.cli_hw:hw", "twin": "nearfaas.cli_twin:twin"}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            import importlib

            module, attr = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="nearfaas")
def main() -> None:
    """nearfaas: a serverless platform that runs each function where its data lives.

    \b
    Quick start:
      nearfaas up                                  # gateway + 2 storage nodes + 1 compute node
      nearfaas deploy -f examples/stack.yml        # OpenFaaS stack file, Python handlers
      nearfaas put photo.jpg s3://photos/cat.jpg   # any S3 client works: boto3, aws-cli
      nearfaas invoke wordcount --input s3://photos/cat.jpg
      nearfaas status                              # nodes, functions, replicas
      nearfaas down

    The gateway speaks the OpenFaaS REST API (/system/*, /function/<name>) and the S3 API on the
    same port. Every number it reports is measured on this machine unless labelled modelled.
    """


# -- cluster -------------------------------------------------------------------------------------
@main.command()
@click.option("-c", "--config", "config", type=click.Path(exists=True, dir_okay=False), help="cluster YAML (default: built-in 3-node layout)")
@common_state
@click.option("--port", type=int, default=None, help="gateway port (0 = pick a free one); overrides the cluster file")
def up(config, state, port):
    """Start a local cluster: each node and the gateway are separate OS processes on 127.0.0.1."""
    from nearfaas.cluster.launcher import ClusterError, up as cluster_up
    from nearfaas.spec.cluster import load_cluster
    from nearfaas.spec.errors import SpecError

    try:
        spec = load_cluster(config)
    except SpecError as exc:
        _fail(f"invalid cluster file {config}:\n{exc}")
    if port is not None:
        spec.gateway.port = port
    state_dir = _state(state) if state or os.environ.get("NEARFAAS_STATE") else Path(spec.state_dir)
    try:
        with console.status("starting cluster...") as status:
            layout = cluster_up(spec, state_dir, on_step=lambda m: status.update(m))
    except ClusterError as exc:
        _fail(str(exc))
    for node in layout["nodes"]:
        console.print(f"  [green]✓[/] {node['kind']:<8} {node['name']:<12} class={node['class']:<9} {node['url']}")
    console.print(f"gateway: [bold]{layout['gateway_url']}[/]   (state: {state_dir})")
    if layout.get("auth"):
        console.print(f"credentials: access key {layout['auth']['access_key']}; `nearfaas credentials` prints them for "
                      "boto3, aws-cli and faas-cli", markup=False, highlight=False)
    else:
        err.print("warning: auth is off: anyone on this host may deploy code and read every object", style="yellow")
    if state_dir.resolve() != _state(None).resolve():
        # Every later command (down, status, deploy...) looks in _state(None) unless told: say so,
        # or `nearfaas down` would miss this cluster. On stderr: stdout's last line is the URL.
        err.print(f"note: this cluster's state is in {state_dir}; pass --state {state_dir} to later commands "
                  f"(down, status, deploy...) or run: export NEARFAAS_STATE={state_dir}", markup=False, highlight=False, soft_wrap=True)
    click.echo(layout["gateway_url"])


@main.command()
@common_state
@click.option("--json", "as_json", is_flag=True, help="print them as JSON")
def credentials(state, as_json):
    """The cluster's keys: for S3 clients (SigV4) and the /system API (basic auth as admin).

    \b
    eval "$(nearfaas credentials)"           # AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for aws-cli, boto3
    nearfaas credentials --json
    faas-cli login -g <gateway> -u admin -p "$AWS_SECRET_ACCESS_KEY"
    """
    from nearfaas.cluster.launcher import read_layout

    layout = read_layout(_state(state))
    if not layout:
        _fail(f"no cluster found in {_state(state)}; start one with `nearfaas up`")
    keys = layout.get("auth")
    if not keys:
        _fail("this cluster runs with `auth: off`: it takes no credentials (and anyone on the host may use it)")
    if as_json:
        click.echo(json.dumps({"gateway": layout["gateway_url"], "access_key": keys["access_key"], "secret_key": keys["secret_key"],
                               "region": keys.get("region", "us-east-1"), "admin_user": "admin"}))
        return
    click.echo(f"export AWS_ACCESS_KEY_ID={keys['access_key']}\nexport AWS_SECRET_ACCESS_KEY={keys['secret_key']}\n"
               f"export AWS_ENDPOINT_URL={layout['gateway_url']}\nexport OPENFAAS_URL={layout['gateway_url']}")


@main.command()
@common_state
def down(state):
    """Stop every process the cluster started (workers included)."""
    from nearfaas.cluster.launcher import down as cluster_down

    stopped = cluster_down(_state(state))
    console.print(f"stopped {stopped} process(es); cluster in {_state(state)} is down")


@main.command()
@common_state
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (includes gateway_url)")
def status(state, as_json):
    """Nodes, their health, deployed functions and replicas."""
    from nearfaas.cluster.launcher import status as cluster_status

    info = cluster_status(_state(state))
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    if not info.get("running"):
        console.print(f"no cluster is running from {info['state_dir']}; start one with `nearfaas up`")
        return
    console.print(f"gateway {info['gateway_url']}  {'[green]healthy[/]' if info['gateway']['healthy'] else '[red]down[/]'}")
    nodes = Table("node", "kind", "class", "health", "workers", "objects", "url", title="nodes")
    for n in info["nodes"]:
        nodes.add_row(n["name"], n["kind"], n["class"], "[green]up[/]" if n["healthy"] else "[red]down[/]",
                      str(n.get("workers", "-")), str((n.get("store") or {}).get("objects", "-")), n["url"])
    console.print(nodes)
    functions = Table("function", "replicas", "available", "invocations", "placement", title="functions")
    for f in info["functions"]:
        functions.add_row(f["name"], str(f["replicas"]), str(f["available"]), str(f["invocations"]), str(f["placement"]))
    console.print(functions)


# -- functions -----------------------------------------------------------------------------------
@main.command()
@click.option("-f", "--file", "stack_file", required=True, type=click.Path(exists=True, dir_okay=False), help="OpenFaaS stack.yml")
@click.option("--filter", "only", multiple=True, help="deploy only these functions (repeatable)")
@click.option("--wait/--no-wait", default=True, help="wait until each function has a warm replica")
@common_state
@common_gateway
def deploy(stack_file, only, wait, state, gateway):
    """Deploy the functions of an OpenFaaS stack.yml (handlers in python3-http style)."""
    from nearfaas.spec.errors import SpecError
    from nearfaas.spec.stack import load_stack

    try:
        stack = load_stack(Path(stack_file))
    except SpecError as exc:
        _fail(f"{stack_file} is not valid:\n{exc}")
    for warning in stack.warnings:
        err.print(str(warning), style="yellow", markup=False)
    url = _gateway(state, gateway)
    names = [n for n in stack.functions if not only or n in only]
    for name in names:
        resp = _http(state, "POST", f"{url}/system/functions", deployment_body(stack.functions[name]))
        if resp.status_code >= 300:
            _fail(f"deploying {name} failed ({resp.status_code}): {resp.text.strip()}")
        console.print(f"[green]deployed[/] {name}")
    if wait:
        for name in names:
            _wait_warm(state, url, name, stack.functions[name].scale_min)


def deployment_body(fn) -> dict:
    """An OpenFaaS FunctionDeployment for a parsed FunctionSpec (plus nearfaas's own fields)."""
    from nearfaas.spec.bundle import pack

    d = fn.to_dict()
    # The code travels with the deployment (spec/bundle.py): the gateway runs no path it is told.
    return {"service": fn.name, "lang": fn.lang, "bundle": pack(fn.handler_dir), "envVars": fn.environment,
            "labels": fn.labels, "annotations": fn.annotations, "secrets": fn.secrets, "limits": fn.limits or None,
            "constraints": fn.constraints, "x-nearfaas": d.get("x")}


def _wait_warm(state: str | None, url: str, name: str, want: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    with console.status(f"waiting for {name} to warm up..."):
        while time.monotonic() < deadline:
            resp = _http(state, "GET", f"{url}/system/function/{name}")
            if resp.status_code == 200 and resp.json()["availableReplicas"] >= min(want, 1):
                return
            time.sleep(0.1)
    err.print(f"[yellow]warning[/]: {name} has no warm replica after {timeout:g}s; the first call will show why (`nearfaas logs {name}`)")


@main.command()
@click.argument("names", nargs=-1, required=True)
@common_state
@common_gateway
def remove(names, state, gateway):
    """Remove deployed functions (their workers are stopped)."""
    url = _gateway(state, gateway)
    for name in names:
        resp = _http(state, "DELETE", f"{url}/system/functions", {"functionName": name})
        if resp.status_code >= 300:
            _fail(f"removing {name}: {resp.text.strip()}")
        console.print(f"removed {name}")


@main.command("list")
@common_state
@common_gateway
@click.option("--json", "as_json", is_flag=True)
def list_functions(state, gateway, as_json):
    """List deployed functions."""
    functions = _http(state, "GET", f"{_gateway(state, gateway)}/system/functions").json()
    if as_json:
        click.echo(json.dumps(functions, indent=2))
        return
    table = Table("function", "invocations", "replicas", "available", "accelerator", "placement")
    for f in functions:
        x = f.get("x-nearfaas") or {}
        table.add_row(f["name"], str(f["invocationCount"]), str(f["replicas"]), str(f["availableReplicas"]),
                      str(x.get("accelerator") or "-"), str(x.get("placement")))
    console.print(table)


@main.command()
@click.argument("name")
@click.option("-d", "--data", default=None, help="request body; @file reads a file, - reads stdin")
@click.option("--input", "input_uri", default=None, help="pass an object reference: s3://bucket/key (sent as {\"input\": ...})")
@click.option("--async", "is_async", is_flag=True, help="queue the call (202) instead of waiting")
@click.option("--callback", default=None, help="with --async: URL that receives the result")
@click.option("-v", "--verbose", is_flag=True, help="print the timing breakdown and placement headers")
@click.option("--policy", type=click.Choice(["near-data", "compute-only", "auto"]), default=None,
              help="placement policy for this call (default: the cluster's)")
@common_state
@common_gateway
def invoke(name, data, input_uri, is_async, callback, verbose, policy, state, gateway):
    """Call a function and print its answer."""
    body: bytes = b""
    headers = {}
    if input_uri:
        bucket, key = _split_s3(input_uri)
        body = json.dumps({"input": {"bucket": bucket, "key": key}}).encode()
        headers["Content-Type"] = "application/json"
    elif data == "-":
        body = sys.stdin.buffer.read()
    elif data and data.startswith("@"):
        body = Path(data[1:]).read_bytes()
    elif data:
        body = data.encode()
    if callback:
        headers["X-Callback-Url"] = callback
    if policy:
        headers["X-Nearfaas-Policy"] = policy
    url = _gateway(state, gateway)
    path = "async-function" if is_async else "function"
    resp = _http(state, "POST", f"{url}/{path}/{name}", body, headers, timeout=600)
    if verbose or resp.status_code >= 400:
        for h in ("X-Call-Id", "X-Nearfaas-App", "X-Nearfaas-Start", "X-Nearfaas-Node", "X-Nearfaas-Policy", "X-Nearfaas-Placement",
                  "X-Nearfaas-Timing", "X-Nearfaas-Link", "X-Nearfaas-Predicted", "X-Nearfaas-Chain-Failed", "X-Duration-Seconds"):
            if h in resp.headers:
                err.print(f"[dim]{h}: {resp.headers[h]}[/]")
        if "X-Nearfaas-Chain" in resp.headers:
            err.print(_chain_table(json.loads(resp.headers["X-Nearfaas-Chain"])))
    sys.stdout.buffer.write(resp.content)
    if resp.content and not resp.content.endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    if resp.status_code >= 400:
        sys.exit(1)


def _chain_table(stages: list[dict]) -> Table:
    from nearfaas.telemetry.headers import parse_timing

    from rich import box

    table = Table("stage", "node", "placement", "start", "stack/data/compute ms", "link read/write B", "output",
                  title="chain stages (measured on this machine)", box=box.SIMPLE)
    for st in stages:
        t = parse_timing(st["timing"])
        table.add_row(st["function"], st["node"], f"{st['target']};{st['reason']}", st["start"],
                      "/".join(f"{t.get(k, 0) * 1e3:.1f}" for k in ("stack", "data", "compute")),
                      f"{st['link']['read']:,}/{st['link']['write']:,}", st["output"])
    return table


@main.command()
@click.argument("name")
@click.option("--tail", type=int, default=100, show_default=True, help="last N lines (0 = all)")
@click.option("--since", default=None, help="RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
@common_state
@common_gateway
def logs(name, tail, since, state, gateway):
    """Print a function's stdout/stderr from every node."""
    # Encoded: a "+02:00" offset in --since would otherwise arrive as a space.
    params = urlencode({"name": name, "tail": tail} | ({"since": since} if since else {}))
    resp = _http(state, "GET", f"{_gateway(state, gateway)}/system/logs?{params}")
    if resp.status_code >= 300:
        _fail(resp.text.strip())
    for line in resp.text.splitlines():
        record = json.loads(line)
        console.print(f"[dim]{record['timestamp']} {record['instance']}[/] {record['text']}", highlight=False, markup=False)


# -- objects -------------------------------------------------------------------------------------
@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("target")
@common_state
@common_gateway
def put(source, target, state, gateway):
    """Upload a file: nearfaas put FILE s3://bucket/key (the bucket is created if missing)."""
    bucket, key = _split_s3(target)
    key = key or Path(source).name
    client = _s3(state, gateway)
    _ensure_bucket(client, bucket)
    size = Path(source).stat().st_size
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    with Progress(*Progress.get_default_columns(), DownloadColumn(), TransferSpeedColumn(), console=err, transient=True) as progress:
        task = progress.add_task(f"put {key}", total=size)
        client.upload_file(source, bucket, key, Callback=lambda n: progress.advance(task, n))
    console.print(f"uploaded {size} bytes to s3://{bucket}/{key}")


def _ensure_bucket(client, bucket: str) -> None:
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as exc:
            _fail(f"cannot create bucket {bucket!r}: {exc.response['Error'].get('Message')}")
        err.print(f"created bucket {bucket}")


@main.command()
@click.argument("source")
@click.argument("target", required=False)
@common_state
@common_gateway
def get(source, target, state, gateway):
    """Download an object: nearfaas get s3://bucket/key [FILE] (stdout without FILE)."""
    from botocore.exceptions import ClientError

    bucket, key = _split_s3(source)
    client = _s3(state, gateway)
    try:
        if target:
            client.download_file(bucket, key, target)
            console.print(f"wrote s3://{bucket}/{key} to {target}")
        else:
            sys.stdout.buffer.write(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as exc:
        _fail(f"s3://{bucket}/{key}: {exc.response['Error'].get('Code')} {exc.response['Error'].get('Message', '')}")


@main.command()
@click.argument("uri", required=False)
@common_state
@common_gateway
def ls(uri, state, gateway):
    """List buckets, or objects under s3://bucket/prefix."""
    client = _s3(state, gateway)
    if not uri:
        for b in client.list_buckets().get("Buckets", []):
            console.print(f"{b['CreationDate']:%Y-%m-%d %H:%M:%S}  {b['Name']}")
        return
    bucket, prefix = _split_s3(uri if "://" in uri else f"s3://{uri}")
    from botocore.exceptions import ClientError

    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                console.print(f"{'PRE':>30}  {cp['Prefix']}")
            for obj in page.get("Contents", []):
                console.print(f"{obj['LastModified']:%Y-%m-%d %H:%M:%S} {obj['Size']:>10}  {obj['Key']}", highlight=False)
    except ClientError as exc:
        _fail(f"{uri}: {exc.response['Error'].get('Code')}")


@main.command()
@click.argument("node")
@click.argument("state_", metavar="on|off", type=click.Choice(["on", "off"]))
@common_state
@common_gateway
def accelerator(node, state_, state, gateway):
    """Mark a dscs node's accelerator available (on) or unavailable (off).

    While it is off, functions marked `accelerator: dscs` fall back to CPU compute nodes."""
    resp = _http(state, "POST", f"{_gateway(state, gateway)}/system/nodes/{node}/accelerator", {"available": state_ == "on"})
    if resp.status_code >= 300:
        _fail(resp.text.strip())
    console.print(f"accelerator of {node}: {'available' if state_ == 'on' else 'unavailable'}")


# -- secrets -------------------------------------------------------------------------------------
@main.group()
def secret():
    """Secrets, mounted into workers as files (context.secrets["name"])."""


@secret.command("create")
@click.argument("name")
@click.option("--from-literal", "literal", default=None)
@click.option("--from-file", "from_file", type=click.Path(exists=True, dir_okay=False), default=None)
@common_state
@common_gateway
def secret_create(name, literal, from_file, state, gateway):
    """Create or replace a secret."""
    if (literal is None) == (from_file is None):
        _fail("give exactly one of --from-literal VALUE or --from-file PATH")
    value = literal if literal is not None else Path(from_file).read_text()
    resp = _http(state, "PUT", f"{_gateway(state, gateway)}/system/secrets", {"name": name, "value": value})
    if resp.status_code >= 300:
        _fail(resp.text.strip())
    console.print(f"secret {name} stored")


@main.group()
def bench():
    """Benchmarks that run on private clusters of their own (all numbers measured here)."""


@bench.command("placement")
@click.option("--quick", is_flag=True, help="two input sizes over the s3-like link (about a minute)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (per policy: link_bytes, p50_ms)")
def bench_placement(quick, as_json):
    """The same 3-stage chain under near-data and compute-only placement, side by side.

    Each input size runs over each link profile under both policies (5 measured calls each, 3
    with --quick) on a private cluster; outputs are checked to be byte-identical."""
    from rich.progress import Progress

    from nearfaas.bench.placement import run, steps

    with Progress(console=err, transient=as_json) as progress:
        task = progress.add_task("starting clusters...", total=steps(quick))
        result = run(quick, progress=lambda m: progress.update(task, advance=1, description=m))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    table = Table("link", "input", "near-data p50 ms", "link MB", "compute-only p50 ms", "link MB", "data share", "speedup",
                  title="placement (measured; link delays injected from the profiles)")
    for profile, sizes in result["results"].items():
        for size, p in sizes.items():
            nd, co = p["near-data"], p["compute-only"]
            table.add_row(profile, f"{int(size) // 1024} KiB", f"{nd['p50_ms']:.1f}", f"{nd['link_bytes'] / 1e6:.2f}",
                          f"{co['p50_ms']:.1f}", f"{co['link_bytes'] / 1e6:.2f}", f"{co['data_share']:.0%}",
                          f"{co['p50_ms'] / nd['p50_ms']:.2f}x")
    console.print(table)


@bench.command("fastpath")
@click.option("--quick", is_flag=True, help="one repeat of each measurement, the web lambda first (under a minute)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON (fastpath_p50_us, forking_p50_us, threading_p50_us, ...)")
def bench_fastpath(quick, as_json):
    """The fast path against λ-NIC's baselines re-implemented here, side by side on the same inputs.

    The executor with WebAssembly lambdas and with native ones; B1, a Python ForkingUDPServer
    that forks per request; B2, a ThreadingUDPServer; B3, the gateway with a warm Python
    worker. Every number is measured on this machine (docs/fastpath.md)."""
    from nearfaas.bench.fastpath import run

    with err.status("building and starting the fast path...") as status:
        try:
            result = run(quick, progress=lambda m: status.update(m))
        except RuntimeError as exc:  # not built, memcached missing, ...: say what to do
            _fail(str(exc))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    console.print_json(json.dumps({k: v for k, v in result.items() if k.endswith("_us") or k.endswith("_per_s")}))


@main.command()
@click.option("--keep", is_flag=True, help="leave the cluster running afterwards")
@common_state
def demo(keep, state):
    """Bring up a cluster, deploy the example stack, run a function, a chain and the eight apps on
    objects, shut down; then the twin projects the apps onto seven platforms (twin-report/)."""
    from nearfaas.cluster.demo import run_demo

    sys.exit(run_demo(_state(state) if state else Path(".nearfaas-demo"), keep=keep, console=console))


if __name__ == "__main__":
    # `python -m nearfaas.cli`: run the package's module, so that the subcommand modules (which
    # import nearfaas.cli) find one fully built module rather than this __main__ copy.
    from nearfaas.cli import main as _package_main

    _package_main()
