"""One nearfaas process (a node agent or the gateway) as a named, detached Ray actor.

Ray places the actor by a custom resource (a host that offers ``nearfaas_storage_dscs: 1`` gets a
dscs storage node), restarts it when it dies (``max_restarts``) and lets the gateway and the CLI
find it by name. The actor does not run the node in its own process: it starts the same command
the local backend starts (``python -m nearfaas.node.agent ...``), waits until it answers, and
watches it. So the node's code, its HTTP/S3 endpoints and its worker processes are exactly the
local backend's; Ray only supervises.

The ladder when something dies:
1. the node process exits on its own (a crash, an OOM kill): the actor exits too, Ray restarts
   the actor, and the new actor starts the node again on the same port, with the same folder;
2. the actor's process is killed (SIGKILL): the node process gets SIGTERM from the kernel
   (PR_SET_PDEATHSIG) and stops; Ray restarts the actor as in 1, which first waits for (then
   kills) a node process an earlier actor left, so two never share the port or the store;
3. the host leaves the Ray cluster: Ray restarts the actor on another host that offers the
   resource, if one does (its objects are not there: the gateway's re-replication and hinted
   handoff refill it, as for a replaced disk); if none does, the node stays down and the
   gateway routes around it, as for any dead node.

Worked example: ``storage-0`` of namespace ``nearfaas-3f2a`` lands on a host with
``NEARFAAS_RAY_DATA=/srv/nf``: its folder is ``/srv/nf/nearfaas-3f2a/storage-0`` (objects under
``nodes/storage-0``, its cluster.json with the internal secret, 0600), its port is picked once
and kept in ``port``, and ``describe()`` answers ``{"url": "http://10.0.0.7:41713", "ray_node_id":
..., "pid": ..., "actor_pid": ...}``.

Known caveats:
- The internal secret travels to the actor as a constructor argument, so Ray's GCS holds it: a
  Ray cluster is a trust boundary (as Ray's own docs say, run it on a private network only).
- A restarted actor reuses its port; if another program took it meanwhile, the start fails and
  Ray keeps retrying.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from nearfaas.cluster import launcher

STOP_TIMEOUT_S = 15.0
# Ray's own worker processes bind ports 10002-19999 (its default --min/max-worker-port): the
# nodes' ports are picked above, or a Ray worker started later could hold a restarted node's port.
RAY_WORKER_PORTS_END = 20_000


def data_root(configured: str) -> Path:
    """Where this host keeps the actors' folders: NEARFAAS_RAY_DATA (set on the host's raylet)
    or the cluster file's ``ray.data_dir``."""
    return Path(os.path.expanduser(os.environ.get("NEARFAAS_RAY_DATA") or configured)).resolve()


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the actor's process (its parent) dies."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ProcessActor:
    """``role`` is "node" or "gateway"; ``config`` has ``layout`` (what the process's cluster.json
    holds), ``data_dir``, ``owner`` (the state dir of the `nearfaas up` that made it) and, for a
    node, ``node`` (its layout entry)."""

    def __init__(self, role: str, name: str, namespace: str, config: dict):
        import ray

        self.role, self.name, self.namespace, self.config = role, name, namespace, config
        self.ray_node_id = ray.get_runtime_context().get_node_id()
        self.dir = data_root(config["data_dir"]) / namespace / name
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (self.dir / "logs").mkdir(exist_ok=True)
        self.incarnation = self._count_incarnation()
        self._reap_previous()
        self.host = config.get("bind") or ray.util.get_node_ip_address()
        self.port = self._port()
        self.url = f"http://{self.host}:{self.port}"
        self.stopping = False
        self.proc: subprocess.Popen | None = None
        layout = self._layout()
        launcher._write_layout(self.dir, layout)
        if role == "gateway":
            command = [sys.executable, "-m", "nearfaas.gateway.app", "--state", str(self.dir)]
            ready, env = f"{self.url}/healthz", {"PYTHONMALLOC": "malloc"}
        else:
            command = launcher._node_command(layout, layout["nodes"][0])
            ready, env = f"{self.url}/_nearfaas/health", {}
        log = self.dir / "logs" / f"{name}.log"
        started = threading.Event()
        # Spawned from a thread that lives as long as the process does: PR_SET_PDEATHSIG fires
        # when the *thread* that forked exits, and Ray's task threads may come and go.
        threading.Thread(target=self._run, args=(command, env, log, started), daemon=True, name="supervise").start()
        started.wait()
        if self.proc is None:
            raise RuntimeError(f"{name}: could not start {' '.join(command[:4])}; see {log}")
        launcher._wait_ready(ready, self.proc, name, log)

    # -- the supervised process ------------------------------------------------------------------
    def _run(self, command: list[str], env: dict, log: Path, started: threading.Event) -> None:
        try:
            with open(log, "ab") as out:
                self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir,
                                             env=launcher._child_env({}) | env, start_new_session=True, preexec_fn=_die_with_parent)
            (self.dir / "pid").write_text(str(self.proc.pid))
        finally:
            started.set()
        if self.proc is None:
            return
        code = self.proc.wait()
        if not self.stopping:
            # The process died under us: so does the actor, and Ray restarts both (the ladder, 1).
            print(f"{self.name}: its process exited with {code}; the actor exits so that Ray restarts it", file=sys.stderr, flush=True)
            os._exit(1)

    def _reap_previous(self) -> None:
        """A process an earlier incarnation of this actor started and that still runs (it is
        shutting down after a SIGTERM from PR_SET_PDEATHSIG): waited for, then killed."""
        try:
            pid = int((self.dir / "pid").read_text())
        except (OSError, ValueError):
            return
        args = launcher.cmdline(pid)
        if not launcher._is_ours(args, str(self.dir)):
            return  # the pid was reused by something else
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and launcher.cmdline(pid):
            time.sleep(0.1)
        launcher._stop_group(pid, timeout=2.0)
        for leftover in launcher.processes_of(self.dir):
            _kill(leftover)

    def _count_incarnation(self) -> int:
        path = self.dir / "incarnations"
        try:
            count = int(path.read_text()) + 1
        except (OSError, ValueError):
            count = 1
        path.write_text(str(count))
        return count

    def _port(self) -> int:
        """Picked once on this host, kept across restarts: the node's URL stays the same."""
        fixed = int(self.config.get("port") or 0)
        path = self.dir / "port"
        try:
            kept = int(path.read_text())
        except (OSError, ValueError):
            kept = 0
        port = fixed or kept or launcher._free_port(self.config.get("bind") or "0.0.0.0", floor=RAY_WORKER_PORTS_END)
        path.write_text(str(port))
        return port

    def _layout(self) -> dict:
        layout = dict(self.config["layout"], state_dir=str(self.dir), host=self.host, processes=[])
        if self.role == "gateway":
            layout.update(gateway_port=self.port, gateway_url=self.url)
        else:
            layout["nodes"] = [dict(self.config["node"], port=self.port, url=self.url)]
        return layout

    # -- what the CLI and the gateway ask ----------------------------------------------------------
    def describe(self) -> dict:
        return {"name": self.name, "role": self.role, "url": self.url, "host": self.host, "ray_node_id": self.ray_node_id,
                "pid": self.proc.pid if self.proc else None, "actor_pid": os.getpid(), "state_dir": str(self.dir),
                "owner": self.config.get("owner"), "incarnation": self.incarnation}

    def stop(self) -> int:
        """Stop the process and everything it started; returns how many processes were stopped."""
        self.stopping = True
        stopped = 0
        if self.proc is not None and self.proc.poll() is None:
            launcher._stop_group(self.proc.pid, timeout=STOP_TIMEOUT_S)
            stopped += 1
        for leftover in launcher.processes_of(self.dir):
            _kill(leftover)
            stopped += 1
        return stopped


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def remote_class():
    """The actor class, made remote on first use (importing this module needs no Ray)."""
    import ray

    global _REMOTE
    if _REMOTE is None:
        _REMOTE = ray.remote(ProcessActor)
    return _REMOTE


_REMOTE = None
