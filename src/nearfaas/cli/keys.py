"""`nearfaas keys add/list/revoke`: access keys besides the cluster's own, each with a policy.

They edit the keys file (auth/keys.py) in place, atomically; the running gateway picks the
change up on the next request with no restart. The secret is printed once, by `add`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from nearfaas.cli.common import common_state, console, fail, state_path

_FILE = click.option("--file", "keys_file", default=None, type=click.Path(dir_okay=False),
                     help="the keys file [default: the cluster's auth.keys_file, else <state>/keys.yml]")


def _keys_file(state: str | None, keys_file: str | None) -> tuple[Path, set[str]]:
    from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
    from nearfaas.auth.keys import keys_path
    from nearfaas.cluster.launcher import read_layout

    if keys_file:
        return Path(keys_file), {INTERNAL_ACCESS_KEY}
    layout = read_layout(state_path(state)) or {}
    auth = layout.get("auth") or {}
    reserved = {INTERNAL_ACCESS_KEY} | ({auth["access_key"]} if auth.get("access_key") else set())
    return keys_path(auth, state_path(state)), reserved


@click.group()
def keys():
    """Access keys limited by S3 bucket policies (docs/security.md)."""


@keys.command("add")
@click.argument("name")
@click.option("--policy", "policy_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help='a JSON policy: {"Version": "2012-10-17", "Statement": [...]}')
@click.option("--access-key", default=None, help="the access key id [default: a random NK... id]")
@click.option("--json", "as_json", is_flag=True, help="print the new key as JSON")
@_FILE
@common_state
def keys_add(name, policy_file, access_key, as_json, keys_file, state):
    """Add a key; prints its access key and secret (the only time the secret is shown)."""
    from nearfaas.auth.keys import KeysFileError, add_key
    from nearfaas.auth.policy import PolicyError

    path, reserved = _keys_file(state, keys_file)
    try:
        policy = json.loads(Path(policy_file).read_text())
        entry = add_key(path, name, policy, access_key=access_key, reserved=reserved)
    except ValueError as e:  # KeysFileError, PolicyError, bad JSON
        fail(str(e) if isinstance(e, (KeysFileError, PolicyError)) else f"{policy_file}: not valid JSON ({e})")
    if as_json:
        click.echo(json.dumps({"name": entry.name, "access_key": entry.access_key, "secret_key": entry.secret_key}))
        return
    console.print(f"key {entry.name} added to {path} (in force now, no restart)")
    click.echo(f"AWS_ACCESS_KEY_ID={entry.access_key}\nAWS_SECRET_ACCESS_KEY={entry.secret_key}")
    console.print("the secret is not shown again: store it now")


@keys.command("list")
@click.option("--json", "as_json", is_flag=True)
@_FILE
@common_state
def keys_list(as_json, keys_file, state):
    """The keys and their policies (never their secrets)."""
    from nearfaas.auth.keys import KeysFileError, list_keys

    path, _ = _keys_file(state, keys_file)
    try:
        entries = list_keys(path)
    except KeysFileError as e:
        fail(str(e))
    rows = [{"name": e.name, "access_key": e.access_key, "policy": e.document} for e in entries]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        console.print(f"no keys in {path} (the cluster's own key has full access); add one with `nearfaas keys add`")
        return
    for row in rows:
        console.print(f"[bold]{row['name']}[/]  {row['access_key']}")
        click.echo(json.dumps(row["policy"], indent=2))


@keys.command("revoke")
@click.argument("name")
@_FILE
@common_state
def keys_revoke(name, keys_file, state):
    """Remove a key (by name or access key); refused from the next request on."""
    from nearfaas.auth.keys import KeysFileError, revoke_key

    path, _ = _keys_file(state, keys_file)
    try:
        gone = revoke_key(path, name)
    except KeysFileError as e:
        fail(str(e))
    console.print(f"key {gone} revoked")


COMMANDS = (keys,)
