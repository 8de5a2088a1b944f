"""A private local cluster for one benchmark (never the user's), and an S3 client for it.

Every benchmark that measures the platform starts its own cluster here: free ports, a temporary
state directory, always torn down, so benchmarks run side by side and leave nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


@contextlib.contextmanager
def scratch_cluster(src_root: Path | None = None, **overrides):
    """A fresh local cluster on free ports in a temporary state directory: yields ``(layout,
    state)``; always torn down. ``overrides`` set ClusterSpec fields (e.g. ``auth=None,
    isolation=False``, ``link=LinkSpec(...)``, ``nodes=[...]``). ``state.parent`` is a scratch
    folder of the caller's too (handler folders, say), removed with the cluster.

    ``src_root``: run the cluster from another checkout's ``src/`` (a git worktree of an older
    commit, for a before/after comparison) instead of this one. Each call has its own state
    directory, and the launcher picks free ports while earlier clusters hold theirs, so two
    scratch clusters at once share neither."""
    from nearfaas.cluster import launcher
    from nearfaas.spec.cluster import load_cluster

    with tempfile.TemporaryDirectory(prefix="nearfaas-bench-") as tmp:
        state = Path(tmp) / "state"
        spec = load_cluster(None)
        spec.gateway.port = 0
        for key, value in overrides.items():
            if key == "handler_roots":  # the gateway's: folders (and images) the REST API may name
                spec.gateway.handler_roots = list(value)
            else:
                setattr(spec, key, value)
        if src_root is None:
            layout = launcher.up(spec, state)
            try:
                yield layout, state
            finally:
                launcher.down(state)
            return
        env = _env_for(Path(src_root))
        try:
            layout = _up_elsewhere(spec, Path(tmp), state, env)
            yield layout, state
        finally:
            # That code's own `down`; then ours, which sweeps by command line under the state dir,
            # in case the other version's `down` failed or left a process behind.
            subprocess.run([sys.executable, "-c", _CLI, "down", "--state", str(state)], env=env, cwd=tmp, capture_output=True)
            launcher.down(state)


# The CLI's entry point, called the same way in any version (older ones lack `python -m nearfaas.cli`).
_CLI = "from nearfaas.cli import main; main(prog_name='nearfaas')"


def _env_for(src_root: Path) -> dict:
    """The environment under which ``python`` imports nearfaas from ``src_root``. PYTHONPATH comes
    before site-packages, so it wins over this venv's editable install of /work/main/src; the
    launcher then hands its own src/ to every process it starts (launcher._child_env)."""
    env = {**os.environ, "PYTHONPATH": str(src_root.resolve())}
    found = subprocess.run([sys.executable, "-c", "import nearfaas; print(nearfaas.__file__)"], env=env, cwd="/",
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(src_root.resolve()):  # an import hook would beat PYTHONPATH
        raise RuntimeError(f"with PYTHONPATH={src_root}, python still imports nearfaas from {found}")
    return env


def _up_elsewhere(spec, tmp: Path, state: Path, env: dict) -> dict:
    """`nearfaas up` of the code on ``env``'s PYTHONPATH, with the fields of ``spec`` that differ from
    our defaults. Only those go in its cluster file: the other version fills in its own defaults,
    so a field added since then does not trip its strict parser."""
    from nearfaas.cluster import launcher
    from nearfaas.spec.cluster import ClusterSpec

    ours, default = spec.to_dict(), ClusterSpec().to_dict()
    changed = {}
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(default.get(key), dict):
            value = {k: v for k, v in value.items() if default[key].get(k) != v}
            if value:
                changed[key] = value
        elif value != default.get(key):
            changed[key] = value
    config = tmp / "cluster.yml"
    config.write_text(json.dumps(changed))  # JSON is YAML
    proc = subprocess.run([sys.executable, "-c", _CLI, "up", "-c", str(config), "--state", str(state)], env=env, cwd=tmp,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`nearfaas up` from {env['PYTHONPATH']} failed:\n{proc.stdout}{proc.stderr}")
    return launcher.read_layout(state)


def s3_client(url: str, access_key: str, secret_key: str, timeout: float | None = None):
    """A boto3 S3 client for a benchmark: path-style, and no retries, so a failure is counted as
    one instead of hidden behind a second try. ``timeout``: connect and read (botocore's 60 s
    when None)."""
    import boto3
    from botocore.config import Config

    limits = {} if timeout is None else {"connect_timeout": timeout, "read_timeout": timeout}
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4", **limits))
