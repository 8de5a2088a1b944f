"""`nearfaas secret create`: secrets, mounted into workers as files."""

from __future__ import annotations

from pathlib import Path

import click

from nearfaas.cli.common import common_gateway, common_state, console, fail, gateway_url, http


@click.group()
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
        fail("give exactly one of --from-literal VALUE or --from-file PATH")
    value = literal if literal is not None else Path(from_file).read_text()
    resp = http(state, "PUT", f"{gateway_url(state, gateway)}/system/secrets", {"name": name, "value": value})
    if resp.status_code >= 300:
        fail(resp.text.strip())
    console.print(f"secret {name} stored")


COMMANDS = (secret,)
