"""`nearfaas demo`: the whole platform in one run (the steps are in nearfaas.jobs.demo)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nearfaas.cli.common import common_state, console, state_path


@click.command()
@click.option("--keep", is_flag=True, help="leave the cluster running afterwards")
@common_state
def demo(keep, state):
    """Bring up a cluster, deploy the example stack, run a function, a chain and the eight apps on
    objects, shut down; then the twin projects the apps onto seven platforms (twin-report/)."""
    from nearfaas.jobs.demo import run_demo

    sys.exit(run_demo(state_path(state) if state else Path(".nearfaas-demo"), keep=keep, console=console))


COMMANDS = (demo,)
