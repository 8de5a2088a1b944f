"""A node that does not share the gateway's disk (backend: ray, on another host) fetches what a
worker needs from the gateway instead of reading the gateway's state dir: the deployed code of
a function, once per code digest, and its secrets, on every start (gateway/api/node_files.py is
the other side; both calls are signed with the cluster's internal secret).

Worked example: storage-1 on host B is asked for a worker of ``resize``, whose spec says
``handler_dir: /srv/gw/functions/resize/3f2a...``. ``localise`` finds no
``<node>/code/resize/3f2a...`` here, GETs ``/_nearfaas/code/resize/3f2a...`` (a .tar.gz),
unpacks it there (all or nothing, spec/bundle.py's checks) and hands the pool a spec whose
``handler_dir`` is that folder; the next instance of the same code starts without a fetch. The
function's secrets are written into ``<node>/fetched-secrets/<namespace>/`` (0600), which the
pool copies per instance as it copies the gateway's folder on one host.

Known caveats:
- Image functions named by a path are not fetched: give them a registry reference, or a path
  that exists on every host (docs/ray.md).
- A fetch that fails (the gateway is down or the function was redeployed meanwhile) fails the
  start with a 503 naming it; the gateway retries as for any failed cold start.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from nearfaas import atomic
from nearfaas.auth import internal
from nearfaas.node.oci import is_image_function
from nearfaas.spec.bundle import BundleError, unpack_into
from nearfaas.spec.options import secrets_folder, secrets_namespace

FETCH_TIMEOUT_S = 60.0


class FetchError(Exception):
    pass


class GatewayFiles:
    def __init__(self, gateway_url: str, secret: str, node_dir: Path):
        self.gateway_url, self.secret = gateway_url.rstrip("/"), secret
        self.code_root = node_dir / "code"
        self.secrets_root = node_dir / "fetched-secrets"

    def localise(self, spec: dict) -> dict:
        """``spec`` with its code and secrets on this node (blocking: call it off the event loop)."""
        if spec.get("secrets"):
            self._fetch_secrets(spec)
        if is_image_function(spec) or not spec.get("handler_dir"):
            return spec
        digest = Path(str(spec["handler_dir"])).name
        target = self.code_root / spec["name"] / digest
        if not (target / ".complete").exists():
            blob = self._get(f"/_nearfaas/code/{quote(spec['name'])}/{quote(digest)}")
            try:
                unpack_into(blob, target)
            except BundleError as exc:
                raise FetchError(f"the code of {spec['name']!r} from the gateway could not be unpacked: {exc}") from None
        return dict(spec, handler_dir=str(target))

    def secrets_dir(self, spec: dict) -> Path:
        """Where the pool copies this function's secrets from (``_fetch_secrets`` wrote them)."""
        return secrets_folder(self.secrets_root, secrets_namespace(spec))

    def _fetch_secrets(self, spec: dict) -> None:
        try:
            values = json.loads(self._get(f"/_nearfaas/secrets/{quote(spec['name'])}"))
        except ValueError:
            raise FetchError(f"the gateway's answer for the secrets of {spec['name']!r} is not JSON") from None
        folder = self.secrets_dir(spec)
        atomic.private_dir(folder)
        for name, value in values.items():
            if "/" in name or name.startswith("."):
                raise FetchError(f"the gateway named a secret {name!r}, which is not a file name")
            atomic.write_bytes(folder / name, base64.b64decode(value), 0o600)

    def _get(self, target: str) -> bytes:
        request = urllib.request.Request(self.gateway_url + target, headers=internal.sign(self.secret, "GET", target))
        try:
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            try:
                why = json.loads(exc.read()).get("error", "")
            except (ValueError, AttributeError, OSError):
                why = ""
            raise FetchError(f"the gateway refused {target} ({exc.code}): {why or exc.reason}") from None
        except OSError as exc:
            raise FetchError(f"the gateway could not be reached for {target}: {exc}") from None
