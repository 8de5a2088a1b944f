"""Warm worker processes on one node.

The node agent owns process lifetimes: it starts a worker (a cold start: specialise a
pre-warmed generic worker, or spawn + import, then handler init), learns its port from a ready
pipe, watches it, and reaps it. Which node runs how many instances is the gateway's decision;
this module only does what it is asked, quickly.

Every worker is isolated (node/jail.py) unless the node runs with ``--isolation off``: its own
uid, a mount namespace without the state directory, cgroup limits, a network namespace with
loopback only (node/netns.py): the gateway calls its serving socket directly, the node relays
its connections to the gateway out (node/netrelay.py), and the port a worker is known by is
the node's relay's, for other local callers. Either way its environment
is built from an allow-list (never the node's own, which may hold keys), and on a storage node
it reads local objects through file descriptors the node hands it (node/objectfds.py).

Every instance has a /tmp of its own, empty when it starts and gone when it retires: jailed, a
tmpfs of ``x-nearfaas.tmp_size`` in its own mount namespace (freed with its last process);
unjailed, the folder ``<node>/tmp/<instance>`` (TMPDIR, TMP, TEMP and HOME point there), removed
when the worker is reaped and swept when the node starts. Only the jail bounds its size and
hides the host's /tmp.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from nearfaas import atomic
from nearfaas.node import build, jail, netrelay, profiling, spawning, worker_dirs, worker_logs, worker_secrets
from nearfaas.node.build import PIP_FLAGS, PIP_TIMEOUT_S  # noqa: F401  (their home moved)
from nearfaas.node.objectfds import Channel, ObjectFdServer
from nearfaas.node.oci import is_image_function
from nearfaas.node.pool_error import PoolError
from nearfaas.node.prewarm import GenericWorker, PrewarmPool
from nearfaas.node.procs import package_root, terminate_group
from nearfaas.spec.options import DEFAULT_TMP_SIZE, secrets_folder, secrets_namespace

COLD_START_TIMEOUT_S = 60.0
DEFAULT_REQUIREMENTS = "requirements.txt"
DEFAULT_NAMESPACE = "openfaas-fn"  # what OpenFaaS calls the namespace of functions


def credentials_env(spec: dict) -> dict[str, str]:
    """The function's own S3 keys, scoped to it by the gateway, as its worker (or an image
    function's host) reads them (runtime/context.py); {} when the spec carries none."""
    credentials = spec.get("credentials") or {}
    if credentials.get("access_key") and credentials.get("secret_key") is not None:
        return {"NEARFAAS_ACCESS_KEY": str(credentials["access_key"]), "NEARFAAS_SECRET_KEY": str(credentials["secret_key"])}
    return {}


@dataclass
class WorkerProcess:
    id: str
    function: str
    port: int
    process: asyncio.subprocess.Process
    started: float
    cold_start_seconds: float
    handler_dir: str
    prewarmed: bool = False          # specialised from a pre-warmed generic worker
    spawn_reason: str | None = None  # why it was spawned instead, when it was
    uid: int | None = None           # the function's uid, when isolated
    channel: Channel | None = None   # its object socket, on a storage node
    cgroups: list = field(default_factory=list)
    token: str = ""                  # what a caller must show the worker (the gateway learns it here)
    profiled: bool = False           # runs under the memory shim (x-nearfaas.memory.profile)
    tmp_dir: Path | None = None      # its private /tmp on the host, when unjailed (removed when reaped)
    cpu_cgroup: str | None = None    # the cgroup that meters its CPU time (a container's), when not among ``cgroups``
    relay: netrelay.Relay | None = None  # its only ways in and out of its network namespace, when jailed
    owner: str = ""                  # the gateway that started it: a restarted one stops only its own leftovers

    def describe(self) -> dict:
        return {"id": self.id, "function": self.function, "port": self.port, "pid": self.process.pid,
                "started": self.started, "cold_start_seconds": self.cold_start_seconds, "prewarmed": self.prewarmed,
                "spawn_reason": self.spawn_reason, "uid": self.uid, "token": self.token, "cpu_seconds": self.cpu_seconds(),
                "owner": self.owner,
                # jailed: the socket it answers on, which the gateway (root, this host) calls directly
                **({"socket": self.relay.serve_path} if self.relay is not None else {})}

    def cpu_seconds(self) -> float | None:
        """Measured CPU time of the instance so far, from its cgroup (what the autoscaler's
        ``cpu`` type reads); None when unjailed (no group of its own)."""
        return jail.cpu_seconds([self.cpu_cgroup] if self.cpu_cgroup else self.cgroups)


@dataclass
class PoolStats:
    cold_starts: int = 0
    cold_start_seconds_total: float = 0.0
    prewarmed_starts: int = 0        # cold starts served by a pre-warmed generic worker (a subset of cold_starts)
    exits: dict = field(default_factory=dict)  # exit code -> count


class WorkerPools:
    def __init__(self, node: str, state_dir: Path, gateway_url: str, store_root: Path | None, workers_max: int = 32,
                 link: str = "local", prewarm: int = 1, node_url: str | None = None, isolation: bool = True,
                 workers_memory: int | None = None, workers_pids: int | None = None):
        self.node = node
        self.link = link
        self.workers_max = workers_max
        self._starting = 0
        self._log_versions: dict[str, str] = {}  # function -> the spec digest its log is of (_log_per_deployment)
        self.state_dir = state_dir
        self.node_dir = state_dir / "nodes" / node
        self.gateway_url = gateway_url
        self.store_root = store_root
        self.workers: dict[str, WorkerProcess] = {}
        self.stats = PoolStats()
        self._env_locks: dict[str, asyncio.Lock] = {}
        self._builds = build.RunningBuilds()  # stopped with their function (stop_function)
        atomic.private_dir(self.node_dir / "logs")  # logs and specs name functions: the node's alone
        atomic.private_dir(self.node_dir / "specs")
        # Unjailed instances' /tmp folders a previous run of this node left (it was killed with -9).
        shutil.rmtree(self.node_dir / "tmp", ignore_errors=True)
        shutil.rmtree(netrelay.node_folder(self.node_dir), ignore_errors=True)  # and jailed ones' relay folders
        self.isolation = isolation
        # Checked once (cached per process: the node agent probed already before it started);
        # while anything is missing every start fails, naming it: never a silent unisolated run.
        self.jail_problems = jail.probe(state_dir, node) if isolation else []
        self.cgroups = jail.Cgroups(state_dir, node) if isolation else None
        if self.cgroups is not None and not self.jail_problems:
            self.cgroups.sweep()
            if workers_memory:  # every worker group hangs below: together they hold at most this
                self.cgroups.limit_total("memory", workers_memory)
            if workers_pids:  # and at most this many processes and threads
                self.cgroups.limit_total("pids", workers_pids)
        self.fds = ObjectFdServer(store_root) if store_root is not None else None
        self.files = None  # node/function_files.GatewayFiles where this node does not share the gateway's disk
        # What every worker of this node gets, before its function's own environment.
        self.node_env = {"NEARFAAS_NODE": node, "PYTHONUNBUFFERED": "1"}
        if node_url:
            self.node_env["NEARFAAS_NODE_URL"] = node_url  # the node's own base URL (its S3 endpoint on storage nodes)
        # Never the node's whole environment: it may hold the cluster's keys.
        self.base_env = jail.allowed_env(os.environ) | {"HOME": "/tmp"}
        if os.environ.get("PYTHONPATH"):
            self.base_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        base = dict(self.base_env)
        base["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), base.get("PYTHONPATH")) if p)
        # A name no function can have (function names are DNS labels), so read_logs never mixes it in.
        self.prewarm = PrewarmPool(prewarm, self.node_dir, base | self.node_env, self.node_dir / "logs" / "_prewarm.log", self.fds,
                                   self.cgroups if not self.jail_problems else None)

    def start_prewarming(self) -> None:
        """Fill the pre-warmed pool and start the log trimmer; call once the event loop runs (the node
        agent does at start-up)."""
        self.prewarm.fill()
        self._log_trimmer = asyncio.get_running_loop().create_task(self._trim_logs())

    async def _trim_logs(self) -> None:
        """Keep every function log on this node within worker_logs.MAX_BYTES (a disk-filling log)."""
        while True:
            await asyncio.sleep(worker_logs.TRIM_EVERY_S)
            await asyncio.to_thread(worker_logs.trim, self.node_dir / "logs")

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, spec: dict) -> WorkerProcess:
        name = spec["name"]
        if len(self.workers) + self._starting >= self.workers_max:
            raise PoolError(f"node {self.node} already runs its workers_max={self.workers_max} workers; "
                            f"remove or scale down functions, or raise nodes[].workers_max in the cluster file", status=429)
        self._starting += 1
        try:
            self._log_per_deployment(spec)
            if self.files is not None:
                spec = await self._localise(spec)
            if is_image_function(spec):  # an image-only OpenFaaS function: a container behind the same contract (node/oci/)
                from nearfaas.node.oci.launch import start_image

                return await start_image(self, spec, name)
            return await self._start(spec, name)
        finally:
            self._starting -= 1
            self.prewarm.fill()  # refill after the start, so a new generic worker does not compete with it for CPU

    async def _start(self, spec: dict, name: str) -> WorkerProcess:
        started = time.perf_counter()
        instance = f"{name}-{self.node}-{uuid.uuid4().hex[:6]}"
        uid = self._uid(spec)
        tmp_size = self._tmp_size(spec)
        requirements = self._requirements_file(spec)
        extra_path = await self._ensure_requirements(spec, requirements, uid)
        held = _Held()  # what this start has made, undone unless a worker takes it over
        try:
            secrets_dir = held.secrets = self._mount_secrets(spec, instance, uid)
            spec_file = self.node_dir / "specs" / f"{name}.json"
            # The credentials go into the environment only; the spec file keeps no keys. Written anew
            # by every start and read only by its worker: no fsync (two of them cost ~4 ms here).
            atomic.write_text(spec_file, json.dumps({k: v for k, v in spec.items() if k != "credentials"}), durable=False)
            held.tmp = self._private_tmp(instance) if uid is None else None  # jailed: a tmpfs of its own
            env = self._function_env(spec, extra_path, held.tmp)
            profiled = self._memory_profile(spec, instance, env)
            if profiled:  # Porter's placement from this function's earlier runs here (off the event loop: it reads logs)
                env.update(await asyncio.to_thread(self._placement, spec))
            # Workers listen on loopback, where other functions run too: a call must carry this
            # instance's token, which only the gateway learns (from this node's signed answer).
            token = env["NEARFAAS_CALL_TOKEN"] = secrets.token_hex(16)
            limits = self._limits(spec) if uid is not None else None
            show = [p for p in (spec["handler_dir"], extra_path, secrets_dir and str(secrets_dir)) if p]
            volume = self._volume(spec, uid)
            if volume is not None:
                env["NEARFAAS_VOLUME"] = str(volume)
            net = await self._relay(held, instance, uid)
            # The worker's arguments, named as worker.main's parser names them.
            args = {"spec": str(spec_file), "node": self.node, "gateway": self.gateway_url, "instance": instance,
                    "secrets_dir": str(secrets_dir) if secrets_dir else None, "link": self.link, "sys_path": extra_path}
            if profiled:  # the shim is preloaded when a process starts: a pre-warmed one started without it
                generic, spawn_reason = None, "memory profiling preloads the allocation shim into a fresh process"
            else:
                generic, spawn_reason = self.prewarm.take(spec.get("environment") or {}, extra_path,
                                                          requirements.name if requirements else DEFAULT_REQUIREMENTS)
            if generic is not None and uid is not None:
                try:  # it is in its own groups already: they get the function's limits
                    self.cgroups.set_limits(generic.cgroups, limits)
                except OSError as exc:
                    generic.discard()
                    generic, spawn_reason = None, f"the pre-warmed worker's cgroups refused the function's limits ({exc})"
            launched = None
            if generic is not None:
                held.channel = generic.channel
                if held.channel is not None:
                    held.channel.authorise(spec)
                held.cgroups, generic.cgroups = generic.cgroups, []  # the worker's from now on
                plan = self._plan(uid, show, [], volume, tmp_size, secrets_dir, net) if uid is not None else None  # groups joined at spawn
                launched = await self._specialise(generic, args, plan, env, extra_path, spec["handler_dir"], name)
                if launched is None:
                    spawn_reason = "the pre-warmed worker exited before it could be used"
                    held.channel = None  # closed with the generic worker
                    await _remove_cgroups(held.cgroups)
                    held.cgroups = []
            if launched is None:
                held.channel = self.fds.open_channel() if self.fds is not None else None
                if held.channel is not None:
                    held.channel.authorise(spec)
                plan = None
                if uid is not None:
                    held.cgroups = self._cgroups(instance, limits)
                    plan = self._plan(uid, show, held.cgroups, volume, tmp_size, secrets_dir, net)
                launched = await self._spawn(args, plan, held.channel, env, spec["handler_dir"], name)
            process, ready, transport = launched
            prewarmed = spawn_reason is None
            line = await self.await_ready(process, ready, transport, name, COLD_START_TIMEOUT_S, f"cold start of {name!r}",
                                          "(handler import or init() is too slow)", "the handler could not be loaded:")
            port = int(line.split()[1]) if held.relay is None else await held.relay.listen()
        except BaseException:
            await self._release(held)
            raise
        elapsed = time.perf_counter() - started
        worker = WorkerProcess(instance, name, port, process, time.time(), elapsed, spec["handler_dir"],
                               prewarmed, spawn_reason, uid, held.channel, held.cgroups, token)
        worker.profiled = profiled
        worker.tmp_dir, held.tmp = held.tmp, None
        worker.relay, held.relay = held.relay, None
        self.workers[instance] = worker
        self.stats.cold_starts += 1
        self.stats.prewarmed_starts += prewarmed
        self.stats.cold_start_seconds_total += elapsed
        asyncio.get_running_loop().create_task(self._reap(worker))
        return worker

    async def _localise(self, spec: dict) -> dict:
        from nearfaas.node.function_files import FetchError

        try:
            return await asyncio.to_thread(self.files.localise, spec)
        except FetchError as exc:
            raise PoolError(f"cannot start {spec['name']!r} on {self.node}: {exc}", status=503) from None

    def _uid(self, spec: dict) -> int | None:
        """The function's uid, or None when this node runs unisolated (``--isolation off``)."""
        if not self.isolation:
            return None
        if self.jail_problems:
            raise PoolError(jail.refusal(self.node, self.jail_problems), status=503)
        try:
            return jail.function_uid(spec)
        except ValueError as exc:
            raise PoolError(f"cannot start {spec['name']!r}: {exc}", status=400) from None

    @staticmethod
    def _limits(spec: dict) -> dict:
        try:
            return jail.limits_of(spec)
        except ValueError as exc:
            raise PoolError(f"function {spec['name']!r} has invalid limits: {exc}; write e.g. memory: 128Mi, cpu: 500m",
                            status=400) from None

    def _cgroups(self, instance: str, limits: dict) -> list[str]:
        try:
            return self.cgroups.create(instance, limits)
        except OSError as exc:
            raise PoolError(f"could not create the cgroups of {instance} on {self.node}: {exc}", status=503) from None

    async def _relay(self, held: _Held, instance: str, uid: int | None) -> dict | None:
        """A jailed instance's network (node/netrelay.py): it reaches the gateway and, on a storage
        node, this node's own S3 endpoint; nothing else. Its jail plan's ``net``."""
        if uid is None:
            return None
        targets = [self.gateway_url] + ([self.node_env["NEARFAAS_NODE_URL"]] if self.fds is not None and "NEARFAAS_NODE_URL" in self.node_env else [])
        held.relay = netrelay.Relay(netrelay.instance_folder(self.node_dir, instance), uid, targets)
        try:
            return await held.relay.start()
        except (OSError, ValueError) as exc:
            raise PoolError(f"could not set up the network of {instance} on {self.node}: {exc}", status=503) from None

    async def _release(self, held: _Held) -> None:
        if held.relay is not None:
            await held.relay.close()
        if held.channel is not None:
            held.channel.close()
        if held.secrets is not None:
            shutil.rmtree(held.secrets, ignore_errors=True)
        await _remove_cgroups(held.cgroups)
        await _remove_tmp(held.tmp)

    @staticmethod
    def _tmp_size(spec: dict) -> int:
        """Bytes of a jailed instance's private /tmp (and /dev/shm): ``x-nearfaas.tmp_size``."""
        from nearfaas.spec.errors import parse_memory

        size = (spec.get("x") or {}).get("tmp_size") or DEFAULT_TMP_SIZE
        try:
            return size if isinstance(size, int) else parse_memory(str(size))
        except ValueError as exc:
            raise PoolError(f"function {spec['name']!r} has an invalid x-nearfaas.tmp_size: {exc}; write e.g. tmp_size: 256Mi",
                            status=400) from None

    def _plan(self, uid: int, show: list[str], cgroups: list[str], volume: Path | None, tmp_size: int,
              secrets_dir: Path | None = None, net: dict | None = None) -> dict:
        """The jail plan of an instance: its view, its groups, its volume, its /tmp's size and its
        secrets (also at /var/openfaas/secrets, where OpenFaaS functions read them)."""
        return jail.plan(uid, self.state_dir, show, cgroups, [volume] if volume else [], tmp_size=tmp_size, secrets=secrets_dir,
                         net=net)

    async def await_ready(self, process, ready, transport, name: str, timeout: float, what: str, slow: str, failed: str) -> str:
        """node/spawning.await_ready, its log tail this function's (image functions use it too)."""
        return await spawning.await_ready(process, ready, transport, self.node, timeout, what, slow, failed,
                                          lambda: self.tail_log(name, 8))

    def _private_tmp(self, instance: str) -> Path:
        return worker_dirs.private_tmp(self.node_dir, instance)

    def _volume(self, spec: dict, uid: int | None) -> Path | None:
        return worker_dirs.volume(self.node_dir, spec, uid)

    def memory_log_dir(self, name: str) -> Path:
        return profiling.memory_log_dir(self.node_dir, name)

    def _memory_profile(self, spec: dict, instance: str, env: dict) -> bool:
        """With ``x-nearfaas.memory.profile``: the shim's variables into ``env`` (node/profiling.py)."""
        shim = profiling.shim_env(spec, self.node, self.node_dir, instance)
        if shim is not None:
            env.update(shim)
        return shim is not None

    def _placement(self, spec: dict) -> dict:
        return profiling.placement(spec, self.node, self.node_dir, sum(1 for w in self.workers.values() if w.profiled))

    def _function_env(self, spec: dict, extra_path: str | None, tmp_dir: Path | None = None) -> dict:
        """The environment a worker of this function runs with, whichever way it is started.

        ``extra_path`` (its requirements env) is NOT on PYTHONPATH: the worker starts as root and
        puts it first on sys.path only once jailed (runtime/jailed_start.py), so its
        packages shadow the runtime's for the handler alone; ``tmp_dir`` is an unjailed instance's private /tmp (jailed: /tmp itself,
        a tmpfs of its own). OPENFAAS_URL is the gateway, as in OpenFaaS, unless the function's
        own environment names another; the NEARFAAS_* variables are always the platform's."""
        env = dict(self.base_env, OPENFAAS_URL=self.gateway_url)
        env.update({str(k): str(v) for k, v in (spec.get("environment") or {}).items()})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), env.get("PYTHONPATH")) if p)
        env.update(self.node_env, NEARFAAS_FUNCTION=spec["name"], NEARFAAS_NAMESPACE=str(spec.get("namespace") or DEFAULT_NAMESPACE),
                   NEARFAAS_GATEWAY_URL=self.gateway_url)
        tmp = str(tmp_dir) if tmp_dir is not None else "/tmp"
        env.update(TMPDIR=tmp, TMP=tmp, TEMP=tmp)
        if tmp_dir is not None:
            env["HOME"] = tmp  # unjailed: never the host's shared /tmp
        env.update(credentials_env(spec))
        return env

    async def _spawn(self, args: dict, plan: dict | None, channel: Channel | None, env: dict, cwd: str, name: str):
        return await spawning.spawn(args, plan, channel, env, cwd, self.log_path(name))

    async def _specialise(self, generic: GenericWorker, args: dict, plan: dict | None, env: dict, extra_path: str | None,
                          cwd: str, name: str):
        """Turn a pre-warmed generic worker into this function's worker; None if it was gone."""
        base = self.prewarm.env
        message = dict(args, env={k: v for k, v in env.items() if base.get(k) != v}, sys_path=extra_path, cwd=cwd,
                       log=str(self.log_path(name)), jail=plan,
                       object_fd=generic.channel.worker_fd if generic.channel is not None else None)
        if not await self.prewarm.hand_over(generic, message):
            return None
        return generic.process, generic.ready, generic.transport

    async def _reap(self, worker: WorkerProcess) -> None:
        code = await worker.process.wait()
        self.workers.pop(worker.id, None)
        shutil.rmtree(self.node_dir / "secrets" / worker.id, ignore_errors=True)
        if worker.channel is not None:
            worker.channel.close()
        if worker.relay is not None:
            await worker.relay.close()
        await _remove_cgroups(worker.cgroups)  # kills what the handler left running first
        await _remove_tmp(worker.tmp_dir)
        self.stats.exits[code] = self.stats.exits.get(code, 0) + 1

    async def stop(self, worker_id: str) -> bool:
        worker = self.workers.pop(worker_id, None)
        if worker is None:
            return False
        await terminate_group(worker.process)
        return True

    async def stop_function(self, name: str) -> int:
        ids = [w.id for w in self.workers.values() if w.function == name]
        self._builds.stop(name)  # a build nobody will use: its process group now, its cgroups as it ends
        await asyncio.gather(*(self.stop(i) for i in ids))
        for path in (self.log_path(name), worker_logs.previous(self.log_path(name))):
            path.unlink(missing_ok=True)  # a removed function's log goes with it
        self._log_versions.pop(name, None)
        return len(ids)

    def _log_per_deployment(self, spec: dict) -> None:
        """A new deployment of a function (another spec: new code, image, environment...) starts a
        log of its own, as a new OpenFaaS deployment's pods do: the last one's is set aside
        (worker_logs.previous; its instances still draining write there), so `faas-cli logs`
        shows no lines of an earlier deployment of the name. A secret's restart keeps the spec."""
        name = spec["name"]
        version = hashlib.sha256(json.dumps({k: v for k, v in spec.items() if k != "credentials"}, sort_keys=True,
                                            default=str).encode()).hexdigest()
        last, self._log_versions[name] = self._log_versions.get(name), version
        if last is not None and last != version:
            try:
                atomic.move(self.log_path(name), worker_logs.previous(self.log_path(name)))
            except FileNotFoundError:
                pass

    async def shutdown(self) -> None:
        if getattr(self, "_log_trimmer", None) is not None:
            self._log_trimmer.cancel()
        workers = list(self.workers.values())
        await asyncio.gather(self.prewarm.shutdown(), *(self.stop(w.id) for w in workers))
        for worker in workers:  # their reapers may not have run yet; removing twice is harmless
            await _remove_cgroups(worker.cgroups)
            if worker.relay is not None:
                await worker.relay.close()
            await _remove_tmp(worker.tmp_dir)
        if self.fds is not None:
            self.fds.close()
        if self.cgroups is not None:
            self.cgroups.close()

    # -- per-function environment ----------------------------------------------------------------
    def _requirements_file(self, spec: dict) -> Path | None:
        """The function's pip requirements: ``x-nearfaas.requirements`` (a file in the handler
        folder), else its requirements.txt when it has one."""
        named = str((spec.get("x") or {}).get("requirements") or DEFAULT_REQUIREMENTS)
        handler = Path(spec["handler_dir"])
        req = handler / named
        if not os.path.realpath(req).startswith(os.path.realpath(handler) + os.sep):
            raise PoolError(f"function {spec['name']!r}: x-nearfaas.requirements {named!r} is not a file inside its handler "
                            f"folder; name one relative to the handler folder, e.g. requirements: requirements-prod.txt",
                            status=400)
        if req.is_file():
            return req
        if named == DEFAULT_REQUIREMENTS:
            return None  # requirements.txt is optional
        raise PoolError(f"function {spec['name']!r} names the requirements file {named!r} (x-nearfaas.requirements), which "
                        f"is not in its handler folder; add {named} to the handler folder and deploy again, or remove "
                        f"x-nearfaas.requirements to use requirements.txt", status=400)

    async def _ensure_requirements(self, spec: dict, req: Path | None, uid: int | None = None) -> str | None:
        """The function's requirements env (node/build.py: pip runs in the function's jail, as its
        uid, when this node isolates), built once per key and shared by every node on this host."""
        if not build.has_requirements(req):
            return None
        try:
            return await build.ensure(self.state_dir / "envs", spec["name"], spec["handler_dir"], req, uid, self._env_locks,
                                      self.log_path(spec["name"]), self.cgroups, self._builds)
        except build.BuildError as exc:
            raise PoolError(str(exc), status=exc.status) from None
        except OSError as exc:  # the build's folders or cgroups could not be made
            raise PoolError(f"could not set up the requirements build of {spec['name']!r} on {self.node}: {exc}", status=503) from None

    def _mount_secrets(self, spec: dict, instance: str, uid: int | None = None) -> Path | None:
        """The function's secrets, copied for this instance (node/worker_secrets.py) from its
        namespace's folder: the gateway's, or this node's fetched copy of it."""
        if not spec.get("secrets"):
            return None
        source = self.files.secrets_dir(spec) if self.files is not None else secrets_folder(self.state_dir, secrets_namespace(spec))
        return worker_secrets.mount(spec, source, self.node_dir / "secrets" / instance, uid)

    # -- logs ------------------------------------------------------------------------------------
    def log_path(self, name: str) -> Path:
        return worker_logs.log_path(self.node_dir, name)

    def tail_log(self, name: str, lines: int) -> str:
        return worker_logs.tail(self.log_path(name), lines)

    def read_logs(self, name: str, since: float = 0.0, tail: int = 0) -> list[dict]:
        """Log records of a function on this node (node/worker_logs.py)."""
        return worker_logs.read(self.log_path(name), name, self.node, since, tail)


@dataclass
class _Held:
    """What a start has made so far (undone if the start fails)."""

    secrets: Path | None = None
    channel: Channel | None = None
    cgroups: list = field(default_factory=list)
    tmp: Path | None = None
    relay: netrelay.Relay | None = None


_remove_tmp = worker_dirs.remove_tmp


async def _remove_cgroups(dirs: list[str]) -> None:
    """Remove a reaped worker's cgroups; a straggler it started is killed first and may take a
    moment to leave its group."""
    for _ in range(50):
        dirs = jail.remove_cgroups(dirs)
        if not dirs:
            return
        await asyncio.sleep(0.02)


