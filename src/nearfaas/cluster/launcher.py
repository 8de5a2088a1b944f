"""Bring a local cluster up and down: one OS process per node plus the gateway.

The layout (ports, URLs, pids) is written to ``<state>/cluster.json`` so every later command,
and the gateway itself, reads one source of truth. ``down`` leaves no process behind: it stops
what it started, then sweeps any process of ours (node, gateway, worker, pip) whose command line
names this state directory (a worker orphaned by a node that was ``kill -9``-ed, say).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import secrets
import time
import urllib.error
import urllib.request
from pathlib import Path

from nearfaas import atomic
from nearfaas.auth import internal
from nearfaas.cgroups import MemoryGroup
from nearfaas.cluster import balancer
from nearfaas.gateway.peers import FIRST_ID, gateway_ids, own_dir
from nearfaas.spec.budgets import budgets_dict
from nearfaas.spec.cluster import ClusterSpec
from nearfaas.spec.fastpath import FastpathSpec
from nearfaas.pids import alive

READY_TIMEOUT_S = 30.0


class ClusterError(Exception):
    pass


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _free_port(host: str, taken: set[int] | None = None, floor: int = 10_000) -> int:
    """A port for a server we start, free now and unlike any in ``taken`` (added to it).

    Picked below the kernel's ephemeral range: a port the kernel hands out for ``bind(0)`` (the
    fast path's own listeners) or for a client's outgoing connection can never be one we picked,
    so nothing takes it between this pick and the server's bind. Before this, a node's port went
    to the fast-path executor's control listener now and then, and the launcher's readiness
    check met its HMAC challenge instead of HTTP (BadStatusLine)."""
    taken = taken if taken is not None else set()
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(200 if low > floor + 1_000 else 0):
        port = rng.randrange(floor, low)
        if port not in taken and not _port_in_use(host, port):
            taken.add(port)
            return port
    while True:  # no room below the ephemeral range: the kernel's pick
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def layout_path(state_dir: Path) -> Path:
    return state_dir / "cluster.json"


def read_layout(state_dir: Path) -> dict | None:
    try:
        return json.loads(layout_path(state_dir).read_text())
    except (FileNotFoundError, ValueError):
        return None


def is_running(state_dir: Path) -> bool:
    layout = read_layout(state_dir)
    return bool(layout) and any(alive(p["pid"]) for p in layout.get("processes", []))


def _get(url: str, timeout: float = 1.0, headers: dict | None = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as resp:
        return resp.read()


def signed_get(layout: dict, url: str, timeout: float = 1.0) -> bytes:
    """GET a node's internal API as the gateway does: signed with the cluster secret."""
    target = "/" + url.split("://", 1)[1].partition("/")[2]
    return _get(url, timeout, internal.sign(layout["internal_secret"], "GET", target))


def said_ready(log: Path, pid: int) -> bool:
    """Whether process ``pid`` wrote its ready line (``{"event": "ready", ..., "pid": PID}``,
    printed once it has bound its port) to ``log``. Logs are appended to across restarts, so the
    line is matched by pid; the last MiB is enough (the line comes right after start-up)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - (1 << 20)))
            tail = f.read()
    except OSError:
        return False
    mine = f'"pid": {pid}}}'.encode()
    return any(b'"event": "ready"' in line and line.rstrip().endswith(mine) for line in tail.splitlines())


def _wait_ready(url: str | Path, process: subprocess.Popen, name: str, log: Path, cpus: float | None = None,
                said=said_ready) -> None:
    """Until ``url`` answers and the process has said it is ready (a Path: until that ready file
    exists), or the process dies. An answer at the URL alone is not enough: another server (another
    cluster's, whose random port pick was the same at the same moment) may hold the port, and our
    process then fails to bind and exits; before, the launcher returned a layout pointing at that
    other server. A node capped at ``cpus`` below one core gets the time its start-up CPU takes
    at that share (its imports and first answers run under its own quota: at 0.05 core, 20 times
    as long), up to ten minutes."""
    timeout = READY_TIMEOUT_S if not cpus or cpus >= 1 else min(600.0, READY_TIMEOUT_S / cpus)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-10:] if log.exists() else []
            raise ClusterError(f"{name} exited with code {process.returncode} while starting; its log ({log}) ends:\n" + "\n".join(tail))
        if isinstance(url, Path):
            if url.exists():
                return
            time.sleep(0.02)
            continue
        try:
            _get(url, timeout=0.5)
            answered = True
        except urllib.error.HTTPError:  # it answered (a node's API refuses unsigned calls): it is up
            answered = True
        except OSError:
            answered = False
        if answered and said(log, process.pid):
            return
        time.sleep(0.05)
    raise ClusterError(f"{name} did not answer {url} within {timeout:g}s; see {log}")


def up(spec: ClusterSpec, state_dir: Path, on_step=lambda message: None, ray_address: str | None = None) -> dict:
    """Start the cluster: processes on this host, or (``backend: ray`` / ``ray_address``) actors
    on a Ray cluster (cluster/ray_backend.py)."""
    state_dir = state_dir.resolve()
    if is_running(state_dir):
        layout = read_layout(state_dir)
        raise ClusterError(f"a cluster is already running from {state_dir} at {layout['gateway_url']}; run `nearfaas down` first")
    # The state directory is the platform's alone (0700): objects, records, keys and logs below
    # it are out of every other local user's reach even where a file's own mode would allow
    # more. Functions, which run as uids of their own, see only their own files in it, through
    # the bind mounts of their jail (node/jail.py), which do not pass through this folder.
    atomic.private_dir(state_dir / "logs")
    os.chmod(state_dir, 0o700)
    on_ray = ray_address is not None or spec.backend == "ray"
    host = spec.host
    taken: set[int] = set()  # ports given out in this cluster: no two of its servers get the same
    gateway_port = 0 if on_ray else spec.gateway.port or _free_port(host, taken)
    if not on_ray and spec.gateway.port and _port_in_use(host, gateway_port):
        raise ClusterError(f"port {gateway_port} on {host} is in use; set gateway.port in the cluster file or pass --port 0 for a free one")
    gateway_url = f"http://{host}:{gateway_port}"
    many = spec.gateway.replicas > 1
    if many and on_ray:
        raise ClusterError(f"gateway.replicas is {spec.gateway.replicas}, but on Ray the cluster runs one gateway actor; "
                           "set gateway.replicas: 1 to start it on Ray")
    gateways, balancer_binary = _gateways(spec, host, gateway_port, state_dir, taken)
    # The fast-path executor answers one gateway (its misses, its control port): off with many.
    fastpath = None if on_ray or many else _fastpath_layout(spec, host, state_dir, taken)
    if many and spec.fastpath.enabled == "auto":
        on_step(f"fast path off: gateway.replicas is {spec.gateway.replicas} (the executor answers one gateway)")
    # The host's budget adds up: the executor's cgroup limit comes out of what the nodes'
    # workers get by default (red team round 5, N2).
    node_default = None if all(n.workers_memory for n in spec.nodes) else \
        default_workers_memory(len(spec.nodes), fastpath["cgroup_limit"] if fastpath else 0)
    nodes = []
    for node in spec.nodes:
        port = 0 if on_ray else node.port or _free_port(host, taken)  # on Ray: each actor picks one on its own host
        nodes.append({"name": node.name, "kind": node.kind, "class": node.cls, "port": port, "url": f"http://{host}:{port}",
                      "workers_max": node.workers_max, "prewarm": node.prewarm, "cpus": node.cpus,
                      "workers_memory": node.workers_memory or node_default, "workers_pids": default_workers_pids(len(spec.nodes))})
    layout = {
        "internal_secret": internal.new_secret(),  # signs gateway -> node calls (auth/internal.py)
        "isolation": spec.isolation,
        "host": host, "gateway_port": gateway_port, "gateway_url": gateway_url,
        # Each gateway's own address (many behind HAProxy); on Ray the one gateway actor picks its port.
        "gateways": None if on_ray else gateways, "nodes": nodes,
        "replication": spec.replication.to_dict(),
        "placement": spec.placement, "s3_max_body": spec.gateway.s3_max_body,
        "invoke_max_body": spec.gateway.invoke_max_body, "gateway_max_inflight": spec.gateway.max_inflight,
        "read_timeout": spec.gateway.read_timeout, "link_profile": spec.link.profile, "handler_roots": spec.gateway.handler_roots,
        "namespaces": spec.gateway.namespaces, "egress_allow": spec.gateway.egress_allow,
        "budgets": budgets_dict(spec.gateway),  # against floods (spec/budgets.py)
        "auth": _client_keys(spec, state_dir),
        "state_dir": str(state_dir), "processes": [], "started": time.time(),
        "fastpath": fastpath,
    }
    if on_ray:
        from nearfaas.cluster import ray_backend

        try:
            layout = ray_backend.up(spec, state_dir, ray_address or spec.ray.address, layout, on_step)
        except ray_backend.RayClusterError as exc:
            started = layout.get("backend") == "ray"  # actors were made before it failed
            hint = f"; `nearfaas down --state {state_dir}` removes the actors that did start" if started else ""
            raise ClusterError(f"{exc}{hint}") from None
        finally:
            if layout.get("backend") == "ray":  # written even when it failed half way: `nearfaas down` cleans up
                _write_layout(state_dir, layout)
        return layout
    _write_layout(state_dir, layout)
    env = _child_env(layout)
    started: list[tuple[str, subprocess.Popen, str, Path]] = []
    try:
        group = _fastpath_group(layout, state_dir)
        for node in nodes:
            on_step(f"starting {node['kind']} node {node['name']} ({node['class']}) on {node['url']}")
            # 0700 whatever the node makes below it: its store, specs, logs, secrets (0700 up
            # to here, so a folder the node leaves 0755 inside is still nobody else's)
            atomic.private_dir(state_dir / "nodes" / node["name"])
            started.append(_spawn(node["name"], _node_command(layout, node), state_dir, env, f"{node['url']}/_nearfaas/health"))
        if layout["fastpath"]:
            fp = layout["fastpath"]
            on_step(f"starting the fast path on {host} ({fp['workers']} worker(s), {fp['sched']})")
            Path(fp["ready_file"]).unlink(missing_ok=True)
            started.append(_spawn("fastpath", _fastpath_command(layout), state_dir, env, Path(fp["ready_file"]), umask=0o077))
            if group is not None:  # before the gateway starts: no tenant code has run in it yet
                try:
                    group.join(started[-1][1].pid)
                except OSError as exc:
                    raise ClusterError(f"cannot move the fast-path executor into its memory cgroup {group.folder}: {exc}") from None
        # The nodes answer before the gateway starts: its first health poll must find them up, or
        # it would count them down (and fail S3 calls fast) until its next poll.
        _record_started(state_dir, layout, started)
        cpus = {n["name"]: n.get("cpus") for n in layout["nodes"]}
        for name, proc, url, log in started:
            _wait_ready(url, proc, name, log, cpus.get(name))
            on_step(f"{name} is ready")
        if layout["fastpath"]:
            _record_fastpath_ports(layout["fastpath"])
            _write_layout(state_dir, layout)
        # The gateway faces every client: after a flood of connections, pymalloc's arenas stay
        # pinned by a few survivors (+16 MiB for good after 20,000 idle sockets), while glibc's
        # malloc hands freed memory back when serving.py trims it (+4 MiB).
        first = len(started)
        for g in gateways:
            on_step(f"starting gateway {g['id']} on {g['url']}")
            started.append(_spawn(gateway_process_name(g["id"]), _gateway_command(state_dir, g["id"]), state_dir,
                                  {**env, "PYTHONMALLOC": "malloc"}, f"{g['url']}/healthz", umask=0o077))
        _record_started(state_dir, layout, started)
        for name, proc, url, log in started[first:]:
            _wait_ready(url, proc, name, log)
            on_step(f"{name} is ready")
        if many:
            on_step(f"starting HAProxy on {gateway_url} in front of {len(gateways)} gateways")
            cfg = balancer.write_config(state_dir, host, gateway_port, gateways, spec.gateway.read_timeout)
            started.append(_spawn("balancer", balancer.command(balancer_binary, cfg), state_dir, env, f"{gateway_url}/healthz",
                                  umask=0o077))
            _record_started(state_dir, layout, started)
            # HAProxy prints no ready line; its port was free (or checked) and it exits if it cannot bind it.
            _wait_ready(f"{gateway_url}/healthz", started[-1][1], "balancer", started[-1][3], said=lambda log, pid: True)
            on_step("balancer is ready")
    except BaseException:
        _stop_groups([proc.pid for _, proc, _, _ in started])
        _remove_fastpath_group(layout, state_dir)
        layout["processes"] = []
        _write_layout(state_dir, layout)
        raise
    return layout


def _gateways(spec: ClusterSpec, host: str, gateway_port: int, state_dir: Path, taken: set[int]) -> tuple[list[dict], str | None]:
    """Each gateway's id, port, URL and (behind HAProxy) Unix socket, and the haproxy binary when
    there are many. One gateway listens on gateway.port itself; many listen on ports of their own
    behind HAProxy on gateway.port (cluster/balancer.py, gateway/peers.py)."""
    many = spec.gateway.replicas > 1
    gateways = [{"id": gid, "port": _free_port(host, taken) if many else gateway_port} for gid in gateway_ids(spec.gateway.replicas)]
    for g in gateways:
        g["url"] = f"http://{host}:{g['port']}"
        # HAProxy reaches each gateway over a Unix socket in the state folder, so the gateway may
        # believe the client address HAProxy tells it (gateway/client_identity.py); a path too
        # long for a socket falls back to TCP, where every caller looks like the balancer.
        socket_path = own_dir(state_dir, g["id"]) / "balancer.sock"
        if many and len(str(socket_path)) <= balancer.MAX_SOCKET_PATH:
            g["socket"] = str(socket_path)
    binary = balancer.haproxy_binary() if many else None
    if many and binary is None:
        raise ClusterError(f"gateway.replicas is {spec.gateway.replicas}, which needs HAProxy in front of the gateways, and "
                           "haproxy is not installed; run `make setup` (it installs it) or `apt-get install haproxy`, "
                           "or set gateway.replicas: 1")
    return gateways, binary


def _record_started(state_dir: Path, layout: dict, started: list) -> None:
    """cluster.json names every process started so far: `nearfaas down` stops them whatever fails next."""
    layout["processes"] = [{"name": name, "pid": proc.pid} for name, proc, _, _ in started]
    _write_layout(state_dir, layout)


def _fastpath_group(layout: dict, state_dir: Path) -> MemoryGroup | None:
    """The executor's memory cgroup, made and limited (fastpath.memory and its headroom), its
    folder recorded in the layout; None without isolation or without the fast path. Fail
    closed: with isolation on, a host that cannot make it gets no cluster (the executor outside
    every limit grew by 16 MiB per tenant lambda, red team round 5, N2)."""
    fp = layout["fastpath"]
    if not fp or not layout.get("isolation", True):
        return None
    group = MemoryGroup(state_dir, "fastpath")
    try:
        fp["cgroup"] = group.create(fp["cgroup_limit"])
    except OSError as exc:
        raise ClusterError(f"cannot give the fast-path executor its memory cgroup ({fp['cgroup_limit']} bytes: fastpath.memory and "
                           f"its headroom): {exc}; fix that, or set fastpath.enabled: false (no fast path), or isolation: "
                           "false (no limits at all)") from None
    _write_layout(state_dir, layout)
    return group


def _remove_fastpath_group(layout: dict, state_dir: Path) -> None:
    """Remove the executor's memory cgroup (``down``, or ``up`` failing): whatever is left in it
    is killed first; an executor just killed may take a moment to leave it."""
    folder = (layout.get("fastpath") or {}).get("cgroup")
    if not folder:
        return
    group = MemoryGroup(state_dir, "fastpath", folder=folder)
    deadline = time.monotonic() + 5
    while group.remove() and time.monotonic() < deadline:
        time.sleep(0.05)


def _remove_relay_folders(layout: dict, state_dir: Path) -> None:
    """The nodes' relay folders under /run/nearfaas-net (node/netrelay.py): a node sweeps its own
    when it starts, but a cluster that is not started again left them behind (1,224 folders of
    stale sockets on the host of red team round 7)."""
    from nearfaas.node import netrelay

    for node in layout.get("nodes", []):
        shutil.rmtree(netrelay.node_folder(state_dir / "nodes" / node["name"]), ignore_errors=True)


def _client_keys(spec: ClusterSpec, state_dir: Path) -> dict | None:
    """The keys clients use (S3 SigV4, and the /system API's admin password); None in unsigned
    local mode. Keys the cluster made itself are kept across `down`/`up` of one state dir, so a
    configured boto3 or faas-cli keeps working."""
    if spec.auth is None:
        return None
    # More keys, each with a policy, live in a keys file (auth/keys.py); the gateway finds it here.
    extra = {"keys_file": spec.auth.keys_file} if spec.auth.keys_file else {}
    if not spec.auth.generated:
        return {"access_key": spec.auth.access_key, "secret_key": spec.auth.secret_key, "region": spec.auth.region,
                "generated": False, **extra}
    old = (read_layout(state_dir) or {}).get("auth") or {}
    if old.get("generated"):
        old.pop("keys_file", None)
        return {**old, **extra}
    return {"access_key": "NF" + secrets.token_hex(8).upper(), "secret_key": secrets.token_urlsafe(30), "region": spec.auth.region,
            "generated": True, **extra}


def _child_env(layout: dict) -> dict:
    # No key travels in the environment: each process reads what it needs from cluster.json,
    # which only root can read, and workers get keys of their own (auth/function_keys.py).
    env = {k: v for k, v in os.environ.items() if k not in ("NEARFAAS_ACCESS_KEY", "NEARFAAS_SECRET_KEY")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH")) if p)
    return env


def _fastpath_layout(spec: ClusterSpec, host: str, state_dir: Path, taken: set[int]) -> dict | None:
    """Ports and files of the fast-path executor, or None when it is not to run."""
    from nearfaas.fastpath.auth import new_key_file
    from nearfaas.fastpath.executor import binary_path

    fp = spec.fastpath
    binary = binary_path()
    if fp.enabled == "false" or (fp.enabled == "auto" and not binary.exists()):
        return None
    if not binary.exists():
        raise ClusterError(f"fastpath.enabled is true but {binary} is not built; run `make setup` (it builds the fast path), "
                           "or set fastpath.enabled: auto")
    # A fresh per-cluster secret for the control port (mode 0600 from creation): only the gateway,
    # which reads it from here, can install or swap lambdas (docs/fastpath.md, "Security").
    key_file = new_key_file(state_dir / "fastpath.key")
    # Port 0: the executor binds its listeners itself and the launcher records what it got
    # (_record_fastpath_ports). Picking a free port here and passing it on would race with every
    # other process taking ports meanwhile (a benchmark's clients open thousands a second).
    return {"binary": str(binary), "udp": 0, "tcp": 0, "control": 0, "stream": 0,
            "host_port": _free_port(host, taken), "unix": str(state_dir / "fastpath.sock"), "ready_file": str(state_dir / "fastpath.ready"),
            # The gateway's own sockets (mode 0600): its calls never compete with other local
            # clients for the TCP ports' connections (red team round 7; docs/fastpath.md).
            "tcp_unix": str(state_dir / "fastpath-tcp.sock"), "stream_unix": str(state_dir / "fastpath-stream.sock"),
            "control_unix": str(state_dir / "fastpath-control.sock"),
            "workers": fp.workers, "sched": fp.sched, "queue_depth": fp.queue_depth, "pin": fp.pin, "poll": fp.poll,
            "slice_us": fp.slice_us, "tcp_idle_ms": fp.tcp_idle_ms, "max_connections_per_peer": fp.max_connections_per_peer,
            "max_weight": fp.max_weight, "max_timeout_ms": fp.max_timeout_ms, "control_key_file": str(key_file), "ids_file": str(state_dir / "gateway" / "lambda_ids.json"),
            "max_frame": 2 << 20, "max_connections": 256, "memory": fp.memory, "cgroup_limit": fp.cgroup_limit(),
            "max_functions_per_namespace": fp.max_functions_per_namespace}


def _record_fastpath_ports(fp: dict) -> None:
    """The ports the executor bound (its ready file), into its layout entry, for the gateway."""
    try:
        ready = json.loads(Path(fp["ready_file"]).read_text())
        fp.update({key: int(ready[key]) for key in ("udp", "tcp", "control", "stream") if ready.get(key) is not None})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"the fast path's ready file {fp['ready_file']} is unreadable: {exc}") from None


def _fastpath_command(layout: dict) -> list[str]:
    fp, host = layout["fastpath"], layout["host"]
    return [fp["binary"], "--udp", f"{host}:{fp['udp']}", "--tcp", f"{host}:{fp['tcp']}", "--control", f"{host}:{fp['control']}",
            "--unix", fp["unix"], "--workers", str(fp["workers"]), "--sched", fp["sched"], "--queue-depth", str(fp["queue_depth"]),
            "--host", f"{host}:{fp['host_port']}", "--ready-file", fp["ready_file"],
            "--control-key-file", fp["control_key_file"], "--max-frame", str(fp.get("max_frame", 2 << 20)),
            "--max-connections", str(fp.get("max_connections", 256)), "--poll", fp.get("poll", "adaptive"),
            "--slice-us", str(fp.get("slice_us", 50)), "--tcp-idle-ms", str(fp.get("tcp_idle_ms", 5000)),
            "--max-connections-per-peer", str(fp.get("max_connections_per_peer", 128)),
            "--pool-memory", str(fp.get("memory", FastpathSpec.memory))] + \
        (["--pin"] if fp.get("pin") else []) + \
        (["--tcp-unix", fp["tcp_unix"]] if fp.get("tcp_unix") else []) + \
        (["--control-unix", fp["control_unix"]] if fp.get("control_unix") else []) + \
        (["--stream", f"{host}:{fp['stream']}"] + (["--stream-unix", fp["stream_unix"]] if fp.get("stream_unix") else [])
         if fp.get("stream") is not None else [])


def default_workers_memory(nodes: int, fastpath: int = 0) -> int:
    """A node's workers' memory when the cluster file gives none: 3/4 of this host's memory
    less ``fastpath`` (the fast-path executor's cgroup limit, FastpathSpec.cgroup_limit),
    shared evenly by the cluster's nodes (the rest is the gateway's, the agents' and the
    host's), so nodes and executor together stay within the 3/4. On Ray each node's host may
    differ; this host's figure is the one known here."""
    budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    share = (budget - fastpath) // max(1, nodes)
    if share < 64 << 20:
        raise ClusterError(f"this host's memory budget (3/4 of its memory, {budget >> 20} MiB) less the fast path's "
                           f"{fastpath >> 20} MiB (fastpath.memory and the executor's headroom) leaves {max(0, share) >> 20} MiB "
                           f"for each of the {nodes} node(s)' workers, under the 64 MiB minimum; lower fastpath.memory "
                           "(at least 144Mi), set fastpath.enabled: false, or give each node its workers_memory")
    return share


def default_workers_pids(nodes: int) -> int:
    """Processes and threads a node's workers may have together: half of this host's pid space
    (``kernel.pid_max``) shared evenly by the cluster's nodes, at least 1024. Each worker alone
    is held to 256 (cgroups.DEFAULT_PIDS), but 3 nodes × 32 workers × 256 is 24,576 of the
    32,768 pids this host has: one tenant's fork bombs in many workers would leave the gateway,
    the nodes and everything else on the host unable to fork."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768  # the kernel's default
    return max(1024, pid_max // 2 // max(1, nodes))


def _node_command(layout: dict, node: dict) -> list[str]:
    return [sys.executable, "-m", "nearfaas.node.agent", "--name", node["name"], "--kind", node["kind"],
            "--class", node["class"], "--host", layout["host"], "--port", str(node["port"]),
            "--state", layout["state_dir"], "--gateway", layout["gateway_url"], "--workers-max", str(node.get("workers_max", 32)),
            "--link", layout.get("link_profile", "local"), "--prewarm", str(node.get("prewarm", 1)),
            "--isolation", "on" if layout.get("isolation", True) else "off"] + \
        (["--cpus", str(node["cpus"])] if node.get("cpus") else []) + \
        (["--workers-memory", str(node["workers_memory"])] if node.get("workers_memory") else []) + \
        (["--workers-pids", str(node["workers_pids"])] if node.get("workers_pids") else []) + \
        (["--files-from-gateway"] if layout.get("backend") == "ray" else [])


def restart_node(state_dir: Path, name: str, env: dict | None = None) -> int:
    """Start one node again on its old port (after a crash, say); returns its pid. ``env`` adds to
    its environment (the tests' libfaketime, to start it with its clock off)."""
    state_dir = state_dir.resolve()
    layout = read_layout(state_dir)
    node = next((n for n in (layout or {}).get("nodes", []) if n["name"] == name), None)
    if node is None:
        raise ClusterError(f"no node named {name!r} in {state_dir}")
    for proc in layout["processes"]:
        if proc["name"] == name and alive(proc["pid"]):
            raise ClusterError(f"node {name} is still running (pid {proc['pid']})")
    _, proc, url, log = _spawn(name, _node_command(layout, node), state_dir, {**_child_env(layout), **(env or {})},
                               f"{node['url']}/_nearfaas/health")
    layout["processes"] = [p for p in layout["processes"] if p["name"] != name] + [{"name": name, "pid": proc.pid}]
    _write_layout(state_dir, layout)
    _wait_ready(url, proc, name, log, node.get("cpus"))
    return proc.pid


def _gateway_command(state_dir: Path, gateway_id: str = FIRST_ID) -> list[str]:
    return [sys.executable, "-m", "nearfaas.gateway.app", "--state", str(state_dir), "--id", gateway_id]


def gateway_process_name(gateway_id: str) -> str:
    """Its name in cluster.json's processes and its log's: ``gateway`` for the first (one gateway's
    name, as it always was), ``gateway-gw1`` ... for the others."""
    return "gateway" if gateway_id == FIRST_ID else f"gateway-{gateway_id}"


def gateways_of(layout: dict) -> list[dict]:
    """The cluster's gateways (``id``, ``port``, ``url``); a layout from before there were many has one."""
    return layout.get("gateways") or [{"id": FIRST_ID, "port": layout["gateway_port"], "url": layout["gateway_url"]}]


def restart_gateway(state_dir: Path, env: dict | None = None, gateway_id: str = FIRST_ID) -> int:
    """Start a gateway again (after a crash, say) on its old port; returns its pid. ``env`` adds
    to its environment (the tests' libfaketime, to start it with its clock behind)."""
    state_dir = state_dir.resolve()
    layout = read_layout(state_dir)
    if layout is None:
        raise ClusterError(f"no cluster in {state_dir}")
    gateway = next((g for g in gateways_of(layout) if g["id"] == gateway_id), None)
    if gateway is None:
        raise ClusterError(f"this cluster has no gateway {gateway_id!r}; it has {', '.join(g['id'] for g in gateways_of(layout))}")
    name = gateway_process_name(gateway_id)
    for proc in layout["processes"]:
        if proc["name"] == name and alive(proc["pid"]):
            raise ClusterError(f"gateway {gateway_id} is still running (pid {proc['pid']})")
    _, proc, url, log = _spawn(name, _gateway_command(state_dir, gateway_id), state_dir,
                               {**_child_env(layout), "PYTHONMALLOC": "malloc", **(env or {})}, f"{gateway['url']}/healthz",
                               umask=0o077)
    layout["processes"] = [p for p in layout["processes"] if p["name"] != name] + [{"name": name, "pid": proc.pid}]
    _write_layout(state_dir, layout)
    _wait_ready(url, proc, name, log)
    return proc.pid


def admin_headers(layout: dict) -> dict[str, str]:
    """The Authorization header of the cluster's admin for its /system API ({} in unsigned mode)."""
    import base64

    keys = layout.get("auth")
    if not keys:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(f"admin:{keys['secret_key']}".encode()).decode()}


def _spawn(name: str, cmd: list[str], state_dir: Path, env: dict, ready_url: str, umask: int = -1):
    """Start one of the cluster's processes, its output to logs/<name>.log. ``umask=0o077``: all
    it creates is the platform's alone (the gateway and the fast path, which make nothing a
    function reads by path). Nodes keep the caller's umask for now: a jailed function reads the
    requirements environments their pip installs (see docs/security.md, "Files")."""
    log = state_dir / "logs" / f"{name}.log"
    # 0600: a log names functions, callers and keys' names; an older, 0644 one is narrowed
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=state_dir, umask=umask)
    return name, proc, ready_url, log


def _write_layout(state_dir: Path, layout: dict) -> None:
    path = layout_path(state_dir)
    atomic.write_text(path, json.dumps(layout, indent=2), 0o600)  # may hold the S3 secret key


def _stop_group(pid: int, timeout: float = 5.0) -> None:
    _stop_groups([pid], timeout)


def _stop_groups(pids: list[int], timeout: float = 5.0) -> None:
    """SIGTERM the process groups led by ``pids`` at once, then SIGKILL whatever has not exited
    within ``timeout``: stopping them side by side costs one graceful shutdown, not one each."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = []
        for pid in pids:
            try:
                os.killpg(pid, sig)
                left.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(alive(pid) for pid in left):
            time.sleep(0.02)
        pids = [pid for pid in left if alive(pid)]
        if not pids:
            return


# The command lines this cluster starts: node agents, the gateway, workers and pre-warmed
# generic workers (see node/pool.py, node/prewarm.py).
_OUR_MODULES = {"nearfaas.node.agent", "nearfaas.gateway.app", "nearfaas.runtime.worker", "nearfaas.runtime.jailed_start",
                "nearfaas.runtime.prewarm"}


def _ancestors() -> set[int]:
    """This process and every process above it (``down`` must never kill its own caller)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # field 4, after "(comm)"
        except (OSError, ValueError, IndexError):
            break
    return pids


def _is_ours(args: list[str], root: str) -> bool:
    """Whether a command line is a process this cluster started, under the state dir ``root``.

    Matching the path as a plain substring would also catch ``<root>-demo`` (another cluster),
    ``tail -f <root>/logs/...`` or a test runner given the path, so an argument must be the
    path itself or lie under it, and the command must be one of the ones we start.
    """
    if not any(a == root or a.startswith(root + "/") for a in args):
        return False
    if args and os.path.basename(args[0]) == "nearfaas-fastpath":
        return True
    modules = {args[i + 1] for i in range(len(args) - 1) if args[i] == "-m"}
    if modules & _OUR_MODULES:
        return True
    # A node installing a function's requirements: python -m pip install ... --target <root>/envs/...
    if "pip" in modules and "install" in args:
        targets = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--target"]
        return any(t.startswith(root + "/envs/") for t in targets)
    return False


def cmdline(pid: int) -> list[str]:
    """The arguments of a live process ([] when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="surrogateescape") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def processes_of(state_dir: Path) -> list[int]:
    """Every live process this cluster started, judged by its command line (see ``_is_ours``)."""
    root = str(state_dir.resolve())
    skip = _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        args = cmdline(int(entry))
        if args and _is_ours(args, root) and alive(int(entry)):
            found.append(int(entry))
    return found


def down(state_dir: Path) -> int:
    """Stop the cluster; returns how many processes were stopped."""
    state_dir = state_dir.resolve()
    layout = read_layout(state_dir) or {}
    stopped = 0
    if layout.get("backend") == "ray":
        from nearfaas.cluster import ray_backend

        try:
            stopped += ray_backend.down(layout)
        except ray_backend.RayClusterError as exc:
            raise ClusterError(f"{exc}; the cluster's actors (namespace {layout['ray']['namespace']}) could not be stopped") from None
    # The balancer and the gateways first, so nothing new is routed to nodes that are going away;
    # then the rest side by side.
    running = [p for p in layout.get("processes", []) if alive(p["pid"])]
    front = {"balancer", *(gateway_process_name(g["id"]) for g in gateways_of(layout))} if layout else set()
    for group in ([p["pid"] for p in running if p["name"] in front], [p["pid"] for p in running if p["name"] not in front]):
        if group:
            _stop_groups(group)
    stopped += len(running)
    for pid in processes_of(state_dir):
        try:
            os.kill(pid, signal.SIGKILL)
            stopped += 1
        except ProcessLookupError:
            pass
    _remove_fastpath_group(layout, state_dir)
    _remove_relay_folders(layout, state_dir)
    if layout:
        layout["processes"] = []
        _write_layout(state_dir, layout)
    return stopped


def _answers(url: str) -> bool:
    try:
        _get(url, timeout=1.0)
        return True
    except OSError:
        return False


def status(state_dir: Path) -> dict:
    state_dir = state_dir.resolve()
    layout = read_layout(state_dir)
    if not layout:
        return {"running": False, "state_dir": str(state_dir)}
    pids = {p["name"]: p["pid"] for p in layout.get("processes", [])}
    actors: dict = {}
    if layout.get("backend") == "ray":  # where each actor is now (its URL may have moved with a restart)
        from nearfaas.cluster import ray_backend

        try:
            actors = ray_backend.describe_all(layout)
        except ray_backend.RayClusterError as exc:
            return {"running": False, "state_dir": str(state_dir), "backend": "ray", "error": str(exc)}
        if actors.get("gateway"):
            layout["gateway_url"] = actors["gateway"]["url"]
    nodes = []
    for node in layout["nodes"]:
        actor = actors.get(node["name"]) or {}
        node = dict(node, url=actor.get("url", node["url"]))
        entry = {k: node[k] for k in ("name", "kind", "class", "url")} | {"pid": actor.get("pid", pids.get(node["name"])), "healthy": False}
        if layout.get("backend") == "ray":
            entry.update(ray_node_id=actor.get("ray_node_id"), actor_pid=actor.get("actor_pid"), host=actor.get("host"),
                         actor="alive" if actor else "down")
        try:
            health = json.loads(signed_get(layout, f"{node['url']}/_nearfaas/health"))
            entry.update(healthy=True, workers=len(health.get("workers", [])), store=health.get("store"))
        except (OSError, ValueError):
            pass
        nodes.append(entry)
    functions = []
    gateway_ok = False
    try:
        functions = [{"name": f["name"], "replicas": f["replicas"], "available": f["availableReplicas"],
                      "invocations": f["invocationCount"], "placement": (f.get("x-nearfaas") or {}).get("placement")}
                     for f in json.loads(_get(f"{layout['gateway_url']}/system/functions", headers=admin_headers(layout)))]
        gateway_ok = True
    except (OSError, ValueError):
        pass
    gateway = {"pid": (actors.get("gateway") or {}).get("pid", pids.get("gateway")), "healthy": gateway_ok}
    if layout.get("backend") == "ray":
        gateway["ray_node_id"] = (actors.get("gateway") or {}).get("ray_node_id")
    else:  # each gateway on its own port (behind the balancer when there are many)
        gateway["gateways"] = [{"id": g["id"], "url": g["url"], "pid": pids.get(gateway_process_name(g["id"])),
                                "healthy": _answers(f"{g['url']}/healthz")} for g in gateways_of(layout)]
        if "balancer" in pids:
            gateway["balancer"] = {"pid": pids["balancer"], "url": layout["gateway_url"], "healthy": gateway_ok}
    return {"running": gateway_ok or any(n["healthy"] for n in nodes), "gateway_url": layout["gateway_url"],
            "backend": layout.get("backend", "local"), "gateway": gateway, "state_dir": str(state_dir),
            # the cluster file's choices a function's timing depends on (a layout from before they were kept: null)
            "placement": layout.get("placement"), "link_profile": layout.get("link_profile"),
            "nodes": nodes, "functions": functions}
