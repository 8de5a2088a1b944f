"""What every command module shares: the consoles, the state dir and gateway they talk to, and
the --state/--gateway options."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import click
from rich.console import Console

# Off a terminal (make, CI logs, pipes) rich would assume 80 columns and squeeze tables; logs are
# read in wide windows, so give them 120 unless COLUMNS says otherwise.
WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
console = Console(width=WIDTH)
err = Console(stderr=True, width=WIDTH)

STATE_HELP = "state directory of the local cluster (objects, logs, pids) [env NEARFAAS_STATE; default .nearfaas]"


def state_path(state: str | None) -> Path:
    return Path(state or os.environ.get("NEARFAAS_STATE") or ".nearfaas")


def gateway_url(state: str | None, gateway: str | None) -> str:
    if gateway or os.environ.get("NEARFAAS_GATEWAY"):
        return (gateway or os.environ["NEARFAAS_GATEWAY"]).rstrip("/")
    from nearfaas.cluster.launcher import read_layout

    layout = read_layout(state_path(state))
    if not layout:
        raise click.ClickException(f"no cluster found in {state_path(state)}; start one with `nearfaas up` or pass --gateway URL")
    return layout["gateway_url"]


def fail(message: str) -> NoReturn:
    raise click.ClickException(message)


def http(state: str | None, method: str, url: str, body=None, headers=None, timeout: float = 60.0):
    import requests

    from nearfaas.client import gateway_session

    try:
        return gateway_session(state_path(state)).request(method, url, json=body if not isinstance(body, (bytes, str)) else None,
                                data=body if isinstance(body, (bytes, str)) else None, headers=headers, timeout=timeout)
    except requests.ConnectionError:
        fail(f"cannot reach the gateway at {url}; is the cluster up? (`nearfaas status`)")


def s3_for(state, gateway):
    from nearfaas.client import s3_client

    return s3_client(gateway_url(state, gateway), state_dir=state_path(state))


def split_s3(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc:
        fail(f"{uri!r} is not an s3://bucket/key URI")
    return parts.netloc, parts.path.lstrip("/")


common_state = click.option("--state", default=None, help=STATE_HELP)
common_gateway = click.option("--gateway", default=None, help="gateway URL [env NEARFAAS_GATEWAY; default: from the state dir]")


class Quantity(click.ParamType):
    """A count or byte size written the way people write them: 1M, 64MB, 1.5G, 512Ki, 1000."""

    name = "quantity"
    _UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        import re

        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?\s*", str(value), re.IGNORECASE)
        if not m:
            self.fail(f"{value!r} is not a quantity; write e.g. 1000, 1M, 64MB or 512Ki", param, ctx)
        return int(round(float(m.group(1)) * self._UNITS[(m.group(2) or "").upper()]))
