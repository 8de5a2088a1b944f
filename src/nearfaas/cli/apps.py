"""`nearfaas apps …`: the eight DSCS-Serverless applications (Table 1 of the paper).

    nearfaas apps list
    nearfaas apps deploy asset_damage --size tiny      (or: all)
    nearfaas apps run asset_damage --policy compute-only
"""

from __future__ import annotations

import json
import sys

import click
from rich.table import Table

from nearfaas.cli.common import common_gateway, common_state, console, err, fail, gateway_url, state_path
from nearfaas.present import chain_table

# Real-weight variants (docs/models.md) have other input and output shapes than Table 1's, so
# the applications run the random-weight builds: tiny for tests and demos, full for Table 1.
SIZES = ("tiny", "full")
POLICY = click.Choice(["near-data", "compute-only", "auto"])


@click.group()
def apps() -> None:
    """The eight DSCS applications: pre-processing -> inference (ONNX Runtime) -> notification.

    Models are built in code (no downloads) with seeded random weights at two sizes: tiny (a few
    MB, Table 1's input and output shapes) and full (Table 1's architecture and parameter count;
    GPT-2 XL is 6 GB). See docs/apps.md and docs/models.md."""


def _names(name: str) -> list[str]:
    from nearfaas.apps import APPS

    if name == "all":
        return list(APPS)
    if name not in APPS:
        fail(f"unknown app {name!r}; choose one of: {', '.join(APPS)} or all")
    return [name]


@apps.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable")
def apps_list(as_json):
    """The applications, their stages and models, next to Table 1."""
    from nearfaas.apps import APPS
    from nearfaas.models import MODELS

    rows = []
    for key, card in APPS.items():
        model = MODELS[card.model]
        rows.append({"app": key, "title": card.title, "functions": list(card.functions), "model": card.model,
                     "table1_params": model.table1_params, "input": list(model.table1_input), "output": list(model.table1_output),
                     "sizes": list(model.sizes)})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich import box

    table = Table("app", "title", "call (POST /function/...)", "model", "Table 1 params", "input -> output", box=box.SIMPLE,
                  caption="each app is a chain <call> -> ...-infer -> ...-notify; sizes: tiny, full")
    for r in rows:
        table.add_row(r["app"], r["title"], r["functions"][0], r["model"], f"{r['table1_params']:,}",
                      f"{tuple(r['input'])} -> {tuple(r['output'])}")
    console.print(table)


@apps.command("deploy")
@click.argument("name")
@click.option("--size", type=click.Choice(SIZES), default="tiny", show_default=True, help="model size")
@common_state
@common_gateway
def apps_deploy(name, size, state, gateway):
    """Build the model (cached under the state dir) and deploy an app's three stages; NAME or all."""
    from nearfaas.jobs.apps import AppError, deploy_app

    url = gateway_url(state, gateway)
    for key in _names(name):
        try:
            with err.status(f"{key}...") as status:
                info = deploy_app(url, state_path(state), key, size, on_step=status.update)
        except (AppError, ValueError) as exc:
            fail(str(exc))
        console.print(f"deployed [bold]{key}[/] ({size}): {' -> '.join(info['functions'])}; model {info['model']} "
                      f"(built or found in {info['model_build_s']:.1f}s)")


@apps.command("run")
@click.argument("name")
@click.option("--policy", type=POLICY, default=None, help="placement policy for this call (default: the cluster's)")
@click.option("--seed", type=int, default=0, show_default=True, help="which generated input")
@click.option("--deploy", "size", type=click.Choice(SIZES), default=None, help="deploy the app at this size first")
@click.option("--json", "as_json", is_flag=True, help="print the whole result as JSON")
@common_state
@common_gateway
def apps_run(name, policy, seed, size, as_json, state, gateway):
    """Upload a generated input, run the app once, print its answer and the per-stage breakdown."""
    from nearfaas.jobs.apps import AppError, deploy_app, run_app

    url = gateway_url(state, gateway)
    results = []
    for key in _names(name):
        try:
            if size:
                with err.status(f"{key}...") as status:
                    deploy_app(url, state_path(state), key, size, on_step=status.update)
            with err.status(f"running {key}..."):
                result = run_app(url, state_path(state), key, policy, seed)
        except (AppError, ValueError) as exc:
            fail(str(exc))
        results.append(result)
        if not as_json:
            _print_run(result)
    if as_json:
        click.echo(json.dumps(results if len(results) > 1 else results[0], indent=2))
    if any(r["status"] >= 400 for r in results):
        sys.exit(1)


def _print_run(result: dict) -> None:
    ok = result["status"] < 400
    head = f"[bold]{result['app']}[/] on {result['input']} ({result['input_bytes']:,} bytes): "
    head += f"HTTP {result['status']}" + ("" if ok else f", failed at [red]{result['failed_stage']}[/]")
    console.print(head)
    console.print_json(json.dumps(result["answer"]))
    if result["stages"]:
        console.print(chain_table(result["stages"]))
    t, link = result["timing"], result["link"]
    if t:
        console.print(f"measured: total {t['total'] * 1e3:.1f} ms (stack {t['stack'] * 1e3:.1f}, data {t['data'] * 1e3:.1f}, "
                      f"compute {t['compute'] * 1e3:.1f}, cold start {t['cold_start'] * 1e3:.1f}); "
                      f"link {link['read'] + link['write']:,} bytes ({link['profile']}); policy {result['policy']}")
