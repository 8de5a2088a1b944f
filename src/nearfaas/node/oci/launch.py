"""Start one instance of an image function: what node/pool.py's ``start`` calls for a spec with
an ``image_source`` (its one hook). The result is the same WorkerProcess a Python worker gives,
so the gateway, the reaper, scaling and logs treat both alike.

What differs from a Python worker's start, and why:
- no pre-warmed generic worker and no node/jail.py plan: the container is the jail (bundle.py),
  made by the OCI runtime that tools.py found working; without one the start fails, naming it;
- the image is imported and unpacked once per host (images.py, off the event loop); a second
  instance costs only the container's creation;
- the per-instance state (runtime config, plan, pid files) lies in ``<node>/oci/<instance>`` and
  the runtime's own state in ``<node>/oci/state``; containers a killed node left there are
  deleted when the node's first image instance starts;
- objects: the host process gets what a Python worker gets (the node's object socket, the
  function's own S3 key, the gateway and link) and serves the worker's S3 endpoint inside the
  container on ``S3_PORT``; the container's environment names it with a key pair made for this
  instance only, so the function's real key never enters the container.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from nearfaas.auth.internal import WORKER_TOKEN_HEADER
from nearfaas.node import jail
from nearfaas.node.oci import bundle, images, tools
from nearfaas.node.procs import kill_group, package_root, spawn_with_ready_pipe

DEFAULT_PORT = 8080  # of-watchdog's and most function images' port
S3_PORT = 9000  # the instance's S3 endpoint, on the container's own loopback (S3_PORT + 1 if the function listens on it)
_swept: set[int] = set()


def _pool_types():
    from nearfaas.node.pool import COLD_START_TIMEOUT_S, PoolError, WorkerProcess, credentials_env  # pool imports this lazily

    return COLD_START_TIMEOUT_S, PoolError, WorkerProcess, credentials_env


def function_env(spec: dict) -> dict[str, str]:
    """The variables a function's deployment gives its image: its ``fprocess`` (stack file
    ``fprocess:``, REST ``envProcess``, faas-cli ``--fprocess``) as the ``fprocess`` variable, then
    its environment, which wins on a clash, as faas-netes orders them (envVars after envProcess)."""
    env = {"fprocess": spec["fprocess"]} if spec.get("fprocess") else {}
    return env | {str(k): str(v) for k, v in (spec.get("environment") or {}).items()}


def how_to_run(config: dict, function_env: dict[str, str]) -> dict:
    """Mode, argv, environment, working folder and port of an image, as OpenFaaS's watchdogs
    read them: ``fprocess`` and ``mode`` from the image's Env or the function's environment
    (the function's wins), ``upstream_url``/``port`` for the http mode's port."""
    env = {"PATH": bundle.DEFAULT_PATH}
    for item in config.get("Env") or []:
        key, _, value = str(item).partition("=")
        env[key] = value
    env.update(function_env)
    fprocess = env.get("fprocess", "").strip()
    mode = env.get("mode", "").strip().lower()
    try:
        command = shlex.split(fprocess) if fprocess else [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
    except ValueError as exc:
        raise ValueError(f"fprocess {fprocess!r} cannot be split into a command: {exc}") from None
    if not command:
        raise ValueError("the image names no fprocess (in its Env or the function's environment), Entrypoint or Cmd: "
                         "nothing to run; set fprocess in the function's environment")
    classic = bool(fprocess) and mode not in ("http",)
    port = DEFAULT_PORT
    if not classic:
        if env.get("upstream_url"):
            port = urlsplit(env["upstream_url"]).port or 80
        elif env.get("port", "").isdigit():
            port = int(env["port"])
        else:
            exposed = [int(m.group(1)) for p in (config.get("ExposedPorts") or {}) if (m := re.match(r"(\d+)(/tcp)?$", p))]
            port = exposed[0] if exposed else DEFAULT_PORT
    return {"mode": "classic" if classic else "http", "args": command, "env": env, "cwd": config.get("WorkingDir") or "/",
            "port": port, "content_type": env.get("content_type", "")}


def s3_endpoint(run: dict) -> dict | None:
    """The instance's S3 endpoint (port and a key pair of its own), added to the container's
    environment as the AWS SDKs read it; None when the function names its own endpoint."""
    if run["env"].get("AWS_ENDPOINT_URL") or run["env"].get("AWS_ENDPOINT_URL_S3"):
        return None
    port = S3_PORT + 1 if run["port"] == S3_PORT else S3_PORT
    endpoint = {"port": port, "access_key": "nfi-" + secrets.token_hex(8), "secret_key": secrets.token_urlsafe(30), "region": "us-east-1"}
    url = f"http://127.0.0.1:{port}"
    run["env"].update(AWS_ENDPOINT_URL=url, AWS_ENDPOINT_URL_S3=url, AWS_ACCESS_KEY_ID=endpoint["access_key"],
                      AWS_SECRET_ACCESS_KEY=endpoint["secret_key"], AWS_REGION=endpoint["region"],
                      AWS_DEFAULT_REGION=endpoint["region"], AWS_EC2_METADATA_DISABLED="true", NEARFAAS_S3_ENDPOINT=url)
    return endpoint


async def start_image(pools, spec: dict, name: str):
    cold_timeout, PoolError, WorkerProcess, credentials_env = _pool_types()
    started = time.perf_counter()
    found = tools.find(pools.state_dir / "oci" / "probe")
    refusal = found.refusal()
    if refusal is not None:
        raise PoolError(refusal, status=503)
    try:
        uid = jail.function_uid(spec)
    except ValueError as exc:
        raise PoolError(f"cannot start {name!r}: {exc}", status=400) from None
    limits = pools._limits(spec)
    tmp_size = pools._tmp_size(spec)
    oci_dir = pools.node_dir / "oci"
    state = oci_dir / "state"
    await _sweep(pools, found.runtime, state)
    prepared = time.perf_counter()
    try:
        image = await asyncio.to_thread(images.prepare, spec["image_source"], pools.state_dir, found.umoci, found.skopeo)
        prepared = time.perf_counter() - prepared
    except images.ImageError as exc:
        raise PoolError(f"function {name!r}: {exc}", status=exc.status) from None
    try:
        run = how_to_run(image.config, function_env(spec))
    except ValueError as exc:
        raise PoolError(f"function {name!r} (image {spec.get('image')}): {exc}", status=400) from None
    endpoint = s3_endpoint(run)
    instance = f"{name}-{pools.node}-{uuid.uuid4().hex[:6]}"
    run_dir = oci_dir / instance
    secrets_dir = None
    process = None
    channel = pools.fds.open_channel() if pools.fds is not None else None  # this node's objects, as a Python worker reads them
    try:
        if channel is not None:
            channel.authorise(spec)
        secrets_dir = pools._mount_secrets(spec, instance, uid)
        proc = bundle.process(run["args"], run["env"], run["cwd"], uid)
        cfg = bundle.config(image.rootfs, proc, hostname=name, limits=limits, tmp_size=tmp_size, secrets_dir=secrets_dir,
                            cgroups_path=f"nearfaas-oci-{pools.node}/{instance}")
        bundle.write(run_dir, cfg)
        plan = {"runtime": found.runtime, "root": str(state), "id": instance, "bundle": str(run_dir), "name": name,
                "instance": instance, "token_header": WORKER_TOKEN_HEADER, "mode": run["mode"], "args": run["args"], "port": run["port"],
                "content_type": run["content_type"], "max_inflight": int(spec.get("max_inflight") or 0),
                "exec_timeout": float(spec.get("exec_timeout", 10.0)),
                "read_timeout": float(spec.get("read_timeout", 10.0)), "write_timeout": float(spec.get("write_timeout", 10.0)),
                "s3": endpoint}
        plan_file = run_dir / "plan.json"
        plan_file.write_text(json.dumps(plan))
        token = secrets.token_hex(16)
        env = pools.node_env | {"PATH": os.environ.get("PATH", bundle.DEFAULT_PATH), "PYTHONPATH": package_root(),
                                "NEARFAAS_CALL_TOKEN": token}
        env.update(credentials_env(spec))  # the host signs with them, never the container
        argv = [sys.executable, "-m", "nearfaas.runtime.image_host", "--plan", str(plan_file), "--instance", instance,
                "--gateway", pools.gateway_url, "--node", pools.node, "--link", pools.link]
        if channel is not None:
            argv += ["--object-fd", str(channel.worker_fd)]
        try:
            process, ready, transport = await spawn_with_ready_pipe(argv, log_path=pools.log_path(name), env=env, cwd=str(run_dir),
                                                                    extra_fds=(channel.child_fd,) if channel else ())
        finally:
            if channel is not None:
                channel.release_child()
        line = await pools.await_ready(process, ready, transport, name, cold_timeout, f"cold start of image function {name!r}",
                                       "", "")
    except BaseException:
        if process is not None and process.returncode is None:
            kill_group(process)
        if channel is not None:
            channel.close()
        await asyncio.to_thread(_remove, found.runtime, state, instance, run_dir, secrets_dir)
        raise
    elapsed = time.perf_counter() - started
    worker = WorkerProcess(instance, name, int(line.split()[1]), process, time.time(), elapsed, str(run_dir),
                           False, f"image function ({run['mode']} mode, {image.digest[:19]}, image ready in {prepared:.3f}s)", uid, channel,
                           [], token)
    try:  # the container's cgroup, found from its init (the runtime made it, under the host's)
        worker.cpu_cgroup = jail.cpu_cgroup_of(int((run_dir / "init.pid").read_text()))
    except (OSError, ValueError):
        pass
    pools.workers[instance] = worker
    pools.stats.cold_starts += 1
    pools.stats.cold_start_seconds_total += elapsed
    asyncio.get_running_loop().create_task(_reap(pools, worker, found.runtime, state, run_dir))
    return worker


async def _reap(pools, worker, runtime: str, state: Path, run_dir: Path) -> None:
    """The pool's reaper, then the container (the host deletes it when stopped; not when killed)."""
    await pools._reap(worker)
    await asyncio.to_thread(_remove, runtime, state, worker.id, run_dir, None)


def _remove(runtime: str, state: Path, cid: str, run_dir: Path, secrets_dir: Path | None) -> None:
    subprocess.run([runtime, "--root", str(state), "delete", "--force", cid], capture_output=True, timeout=30)
    shutil.rmtree(run_dir, ignore_errors=True)
    if secrets_dir is not None:
        shutil.rmtree(secrets_dir, ignore_errors=True)


async def _sweep(pools, runtime: str, state: Path) -> None:
    """Containers of this node that no live instance owns (the node was killed): deleted, once."""
    if id(pools) in _swept:
        return
    _swept.add(id(pools))
    if not state.is_dir():
        return

    def sweep() -> None:
        listed = subprocess.run([runtime, "--root", str(state), "list", "--quiet"], capture_output=True, text=True, timeout=30)
        for cid in listed.stdout.split():
            if cid not in pools.workers:
                _remove(runtime, state, cid, pools.node_dir / "oci" / cid, None)

    await asyncio.to_thread(sweep)
