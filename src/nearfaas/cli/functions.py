"""`nearfaas deploy | remove | list | invoke | logs`: functions on the running cluster."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import click
from rich.table import Table
from rich.text import Text

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, gateway_url, http, split_s3
from nearfaas.present import chain_table, deployment_body


@click.command()
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
        fail(f"{stack_file} is not valid:\n{exc}")
    for warning in stack.warnings:
        err.print(str(warning), style="yellow", markup=False)
    url = gateway_url(state, gateway)
    names = [n for n in stack.functions if not only or n in only]
    for name in names:
        resp = http(state, "POST", f"{url}/system/functions", deployment_body(stack.functions[name]))
        if resp.status_code >= 300:
            fail(f"deploying {name} failed ({resp.status_code}): {resp.text.strip()}")
        console.print(f"[green]deployed[/] {name}")
    if wait:
        for name in names:
            fn = stack.functions[name]
            _wait_warm(state, url, f"{name}.{fn.namespace}" if fn.namespace else name, fn.scale_min)


def _wait_warm(state: str | None, url: str, name: str, want: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    with console.status(f"waiting for {name} to warm up..."):
        while time.monotonic() < deadline:
            resp = http(state, "GET", f"{url}/system/function/{name}")
            if resp.status_code == 200 and resp.json()["availableReplicas"] >= min(want, 1):
                return
            if resp.status_code == 200 and resp.json().get("coldStartError"):  # no point waiting: say why now
                fail(f"{name} is deployed but could not start:\n{resp.json()['coldStartError']}\n"
                     f"fix it and deploy again (`nearfaas logs {name}` has the whole output); the gateway retries "
                     "starting it meanwhile")
            time.sleep(0.1)
    err.print(f"[yellow]warning[/]: {name} has no warm replica after {timeout:g}s; the first call will show why (`nearfaas logs {name}`)")


@click.command()
@click.argument("names", nargs=-1, required=True)
@common_state
@common_gateway
def remove(names, state, gateway):
    """Remove deployed functions (their workers are stopped)."""
    url = gateway_url(state, gateway)
    for name in names:
        resp = http(state, "DELETE", f"{url}/system/functions", {"functionName": name})
        if resp.status_code >= 300:
            fail(f"removing {name}: {resp.text.strip()}")
        console.print(f"removed {name}")


@click.command("list")
@common_state
@common_gateway
@click.option("--json", "as_json", is_flag=True)
def list_functions(state, gateway, as_json):
    """List deployed functions."""
    functions = http(state, "GET", f"{gateway_url(state, gateway)}/system/functions").json()
    if as_json:
        click.echo(json.dumps(functions, indent=2))
        return
    table = Table("function", "invocations", "replicas", "available", "accelerator", "placement")
    for f in functions:
        x = f.get("x-nearfaas") or {}
        table.add_row(f["name"], str(f["invocationCount"]), str(f["replicas"]), str(f["availableReplicas"]),
                      str(x.get("accelerator") or "-"), str(x.get("placement")))
    console.print(table)


@click.command()
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
        bucket, key = split_s3(input_uri)
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
    url = gateway_url(state, gateway)
    path = "async-function" if is_async else "function"
    resp = http(state, "POST", f"{url}/{path}/{name}", body, headers, timeout=600)
    if verbose or resp.status_code >= 400:
        for h in ("X-Call-Id", "X-Nearfaas-App", "X-Nearfaas-Start", "X-Nearfaas-Node", "X-Nearfaas-Policy", "X-Nearfaas-Placement",
                  "X-Nearfaas-Timing", "X-Nearfaas-Link", "X-Nearfaas-Predicted", "X-Nearfaas-Chain-Failed", "X-Duration-Seconds"):
            if h in resp.headers:
                err.print(f"[dim]{h}: {resp.headers[h]}[/]")
        if "X-Nearfaas-Chain" in resp.headers:
            err.print(chain_table(json.loads(resp.headers["X-Nearfaas-Chain"])))
    sys.stdout.buffer.write(resp.content)
    if resp.content and not resp.content.endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    if resp.status_code >= 400:
        sys.exit(1)


@click.command()
@click.argument("name")
@click.option("--tail", type=int, default=100, show_default=True, help="last N lines (0 = all)")
@click.option("--since", default=None, help="RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
@common_state
@common_gateway
def logs(name, tail, since, state, gateway):
    """Print a function's stdout/stderr from every node."""
    # Encoded: a "+02:00" offset in --since would otherwise arrive as a space.
    params = urlencode({"name": name, "tail": tail} | ({"since": since} if since else {}))
    resp = http(state, "GET", f"{gateway_url(state, gateway)}/system/logs?{params}")
    if resp.status_code >= 300:
        fail(resp.text.strip())
    for line in resp.text.splitlines():
        record = json.loads(line)
        # Styled as a Text, not markup: the log's own text may hold [brackets], and a pipe gets plain text
        console.print(Text.assemble((f"{record['timestamp']} {record['instance']}", "dim"), " ", record["text"]), highlight=False)


COMMANDS = (deploy, remove, list_functions, invoke, logs)
