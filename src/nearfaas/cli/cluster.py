"""`nearfaas up | down | status | credentials | accelerator`: the local cluster and its nodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.table import Table

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, gateway_url, http, state_path


@click.command()
@click.option("-c", "--config", "config", type=click.Path(exists=True, dir_okay=False), help="cluster YAML (default: built-in 3-node layout)")
@common_state
@click.option("--port", type=int, default=None, help="gateway port (0 = pick a free one); overrides the cluster file")
@click.option("--ray", "ray_address", metavar="ADDRESS|auto", default=None,
              help="run the nodes and the gateway as actors of the Ray cluster at ADDRESS (host:port of its head; auto: the one "
                   "`ray start` runs here), placed by custom resources; see docs/ray.md")
def up(config, state, port, ray_address):
    """Start a cluster: each node and the gateway are separate OS processes on 127.0.0.1, or
    (--ray, or `backend: ray` in the cluster file) detached Ray actors on many hosts.

    \b
    nearfaas up                                   # three nodes and a gateway on this host
    nearfaas up -c cluster.yml --ray auto         # the same on the Ray cluster running here
    ray start --head --resources '{"nearfaas_storage_dscs": 1, "nearfaas_compute": 1}'   # a host, for --ray"""
    from nearfaas.cluster.launcher import ClusterError, up as cluster_up
    from nearfaas.spec.cluster import load_cluster
    from nearfaas.spec.errors import SpecError

    try:
        spec = load_cluster(config)
    except SpecError as exc:
        fail(f"invalid cluster file {config}:\n{exc}")
    if port is not None:
        spec.gateway.port = port
    state_dir = state_path(state) if state or os.environ.get("NEARFAAS_STATE") else Path(spec.state_dir)
    try:
        with console.status("starting cluster...") as status:
            layout = cluster_up(spec, state_dir, on_step=lambda m: status.update(m), ray_address=ray_address)
    except ClusterError as exc:
        fail(str(exc))
    for node in layout["nodes"]:
        where = f"  Ray node {node['ray_node_id'][:12]}" if node.get("ray_node_id") else ""
        console.print(f"  [green]✓[/] {node['kind']:<8} {node['name']:<12} class={node['class']:<9} {node['url']}{where}")
    console.print(f"gateway: [bold]{layout['gateway_url']}[/]   (state: {state_dir})")
    if layout.get("auth"):
        console.print(f"credentials: access key {layout['auth']['access_key']}; `nearfaas credentials` prints them for "
                      "boto3, aws-cli and faas-cli", markup=False, highlight=False)
    _warn(unsafe_warnings(layout) + exposed_secret_files(config, spec))
    if state_dir.resolve() != state_path(None).resolve():
        # Every later command (down, status, deploy...) looks in state_path(None) unless told: say so,
        # or `nearfaas down` would miss this cluster. On stderr: stdout's last line is the URL.
        err.print(f"note: this cluster's state is in {state_dir}; pass --state {state_dir} to later commands "
                  f"(down, status, deploy...) or run: export NEARFAAS_STATE={state_dir}", markup=False, highlight=False, soft_wrap=True)
    click.echo(layout["gateway_url"])


def unsafe_warnings(layout: dict) -> list[str]:
    """What the cluster file turned off that keeps tenants and the host safe, one line each."""
    warnings = []
    if not layout.get("auth"):
        warnings.append("warning: auth is off (`auth: off`): anyone on this host may deploy code and read every object")
    if layout.get("isolation") is False:
        warnings.append("warning: isolation is off (`isolation: off`): functions run as root, unconfined, and may read "
                        "every secret, object and the cluster's keys; remove `isolation: off` from the cluster file")
    return warnings


def exposed_secret_files(config, spec) -> list[str]:
    """A warning for each file holding keys that other users of this host may read: the
    cluster file when it gives ``auth.secret_key``, and the keys file. Whoever reads the admin
    key is the admin (red team round 6 read one from a 0644 cluster file)."""
    files = []
    auth = getattr(spec, "auth", None)
    if config and auth is not None and auth.secret_key and not auth.generated:
        files.append((Path(config), "the admin's auth.secret_key"))
    if auth is not None and auth.keys_file:
        files.append((Path(auth.keys_file), "access keys"))
    warnings = []
    for path, what in files:
        try:
            mode = path.stat().st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            warnings.append(f"warning: {path} holds {what} and other users of this host may read it (mode {mode:04o}): "
                            f"whoever reads them controls the cluster; run: chmod 600 {path}")
    return warnings


def _warn(warnings: list[str]) -> None:
    for line in warnings:  # on stderr, every time: stdout's last line of `up` is the URL
        err.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)


@click.command()
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

    layout = read_layout(state_path(state))
    if not layout:
        fail(f"no cluster found in {state_path(state)}; start one with `nearfaas up`")
    keys = layout.get("auth")
    if not keys:
        fail("this cluster runs with `auth: off`: it takes no credentials (and anyone on the host may use it)")
    if as_json:
        click.echo(json.dumps({"gateway": layout["gateway_url"], "access_key": keys["access_key"], "secret_key": keys["secret_key"],
                               "region": keys.get("region", "us-east-1"), "admin_user": "admin"}))
        return
    click.echo(f"export AWS_ACCESS_KEY_ID={keys['access_key']}\nexport AWS_SECRET_ACCESS_KEY={keys['secret_key']}\n"
               f"export AWS_ENDPOINT_URL={layout['gateway_url']}\nexport OPENFAAS_URL={layout['gateway_url']}")


@click.command()
@common_state
def down(state):
    """Stop every process the cluster started (workers included)."""
    from nearfaas.cluster.launcher import ClusterError, down as cluster_down

    try:
        stopped = cluster_down(state_path(state))
    except ClusterError as exc:
        fail(str(exc))
    console.print(f"stopped {stopped} process(es); cluster in {state_path(state)} is down")


@click.command()
@common_state
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (includes gateway_url)")
def status(state, as_json):
    """Nodes, their health, deployed functions and replicas."""
    from nearfaas.cluster.launcher import read_layout, status as cluster_status

    info = cluster_status(state_path(state))
    layout = read_layout(state_path(state)) if info.get("running") else None
    warnings = unsafe_warnings(layout) if layout else []
    if as_json:
        click.echo(json.dumps(info | {"warnings": warnings}, indent=2))
        _warn(warnings)
        return
    if not info.get("running"):
        console.print(f"no cluster is running from {info['state_dir']}{': ' + info['error'] if info.get('error') else ''}; "
                      f"start one with `nearfaas up`")
        return
    console.print(f"gateway {info['gateway_url']}  {'[green]healthy[/]' if info['gateway']['healthy'] else '[red]down[/]'}  "
                  f"placement {info.get('placement') or '-'}  link {info.get('link_profile') or '-'}")
    if len(info["gateway"].get("gateways") or ()) > 1:  # many gateways behind HAProxy (gateway.replicas)
        gateways = Table("gateway", "health", "pid", "url", title=f"gateways (HAProxy on {info['gateway_url']})")
        for g in info["gateway"]["gateways"]:
            gateways.add_row(g["id"], "[green]up[/]" if g["healthy"] else "[red]down[/]", str(g.get("pid") or "-"), g["url"])
        console.print(gateways)
    on_ray = info.get("backend") == "ray"
    nodes = Table("node", "kind", "class", "health", "workers", "objects", "url", *(["Ray node"] if on_ray else []), title="nodes")
    for n in info["nodes"]:
        nodes.add_row(n["name"], n["kind"], n["class"], "[green]up[/]" if n["healthy"] else "[red]down[/]",
                      str(n.get("workers", "-")), str((n.get("store") or {}).get("objects", "-")), n["url"],
                      *([(n.get("ray_node_id") or "(actor down)")[:16]] if on_ray else []))
    console.print(nodes)
    functions = Table("function", "replicas", "available", "invocations", "placement", title="functions")
    for f in info["functions"]:
        functions.add_row(f["name"], str(f["replicas"]), str(f["available"]), str(f["invocations"]), str(f["placement"]))
    console.print(functions)
    _warn(warnings)


@click.command()
@click.argument("node")
@click.argument("state_", metavar="on|off", type=click.Choice(["on", "off"]))
@common_state
@common_gateway
def accelerator(node, state_, state, gateway):
    """Mark a dscs node's accelerator available (on) or unavailable (off).

    While it is off, functions marked `accelerator: dscs` fall back to CPU compute nodes."""
    resp = http(state, "POST", f"{gateway_url(state, gateway)}/system/nodes/{node}/accelerator", {"available": state_ == "on"})
    if resp.status_code >= 300:
        fail(resp.text.strip())
    console.print(f"accelerator of {node}: {'available' if state_ == 'on' else 'unavailable'}")


COMMANDS = (up, down, status, credentials, accelerator)
