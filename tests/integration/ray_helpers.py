"""A real multi-node Ray cluster on this machine for the tests (test_sift_ray.py,
test_ray_backend.py): `ray start --head` plus more raylets, each started with `--block` so that
stopping its process stops that node (never `ray stop`, which would hit every Ray here), with
token authentication as Ray now defaults to. Each raylet may offer custom resources and get
environment variables of its own (NEARFAAS_RAY_DATA: the "host's" disk)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")


def set_token() -> None:
    """Ray reads its authentication mode when it is imported: call before `import ray`."""
    if "ray" not in sys.modules:
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"})


def _free_port() -> int:
    """Above Ray's worker port range (10002-19999), below the kernel's ephemeral one."""
    from nearfaas.cluster.launcher import _free_port as pick

    return pick("127.0.0.1", floor=20_000)


def _start(i: int, raylet: dict, port: int, address: str, logs: Path, common: list[str], attempt) -> subprocess.Popen:
    args = ["--head", f"--port={port}", "--include-dashboard=false"] if i == 0 else [f"--address={address}"]
    if raylet.get("resources"):
        args.append(f"--resources={json.dumps(raylet['resources'])}")
    env = dict(os.environ) | raylet.get("env", {})
    with open(logs / f"raylet-{i}-{attempt}.log", "w") as out:
        return subprocess.Popen([str(RAY), "start", *args, *common], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait_port(port: int) -> None:
    for _ in range(240):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)


def _wait_nodes(ray, count: int, proc: subprocess.Popen) -> bool:
    """Until ``count`` nodes are alive; False once the raylet's `ray start` gave up."""
    for _ in range(360):
        if len([n for n in ray.nodes() if n["Alive"]]) >= count:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL: a raylet drains for up to 30 s on SIGTERM, and nothing here needs that."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def ray_cluster(logs: Path, raylets: list[dict], cpus_each: int = 1):
    """``raylets``: one dict per node, the head first: ``{"resources": {...}, "env": {...}}``.
    Yields ``{"address", "env", "node_ids"}`` (node ids in the order given)."""
    import ray

    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    common = [f"--num-cpus={cpus_each}", "--disable-usage-stats", "--block"]
    try:
        for i, raylet in enumerate(raylets):
            # one at a time, each joined before the next starts (several at once time out on two
            # busy cores); a raylet that fails to start is tried once more
            for attempt in (1, 2):
                procs.append(_start(i, raylet, port, address, logs, common, attempt))
                if i == 0:
                    _wait_port(port)
                    ray.init(address=address, log_to_driver=False, configure_logging=False)
                if _wait_nodes(ray, i + 1, procs[-1]):
                    break
                _stop(procs.pop())
            else:
                raise RuntimeError(f"raylet {i} did not join twice; see {logs}")
        alive = [n for n in ray.nodes() if n["Alive"]]
        order = []
        for raylet in raylets:  # which node is which: by the resources each was started with
            wanted = raylet.get("resources") or {}
            order.append(next((n["NodeID"] for n in alive if all(n["Resources"].get(k) == v for k, v in wanted.items())
                               and n["NodeID"] not in order), None))
        yield {"address": address, "env": dict(os.environ), "node_ids": order, "port": port, "logs": logs, "common": common}
    finally:
        ray.shutdown()
        for proc in reversed(procs):
            _stop(proc)


def add_raylet(cluster: dict, raylet: dict, tag: str) -> subprocess.Popen:
    """One more raylet joining ``cluster`` (what ray_cluster yielded); stop it with ``stop_raylet``."""
    import ray

    before = len([n for n in ray.nodes() if n["Alive"]])
    proc = _start(1, raylet, cluster["port"], cluster["address"], cluster["logs"], cluster["common"], tag)
    if not _wait_nodes(ray, before + 1, proc):
        _stop(proc)
        raise RuntimeError(f"the raylet {tag} did not join; see {cluster['logs']}")
    return proc


def kill_raylet(proc: subprocess.Popen) -> None:
    """The host is gone at once: SIGKILL to the raylet and everything it runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
