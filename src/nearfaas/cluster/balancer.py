"""HAProxy in front of many gateways: the one address clients use when ``gateway.replicas > 1``.

Mechanism. ``nearfaas up`` writes ``<state>/balancer/haproxy.cfg`` and starts ``haproxy -db``
(foreground, in its own process group like every other part) listening on ``gateway.port``;
it reaches each gateway on that gateway's Unix socket, and each gateway also listens on a port of
its own (``cluster.json``'s ``gateways`` list, which clients
that balance themselves may use directly). HAProxy checks every gateway's ``/healthz`` every
``CHECK_INTERVAL_MS`` and takes one out after ``FALL`` failed checks; a request whose connection
to a gateway fails (the gateway is dead) is sent to another one (``retry-on conn-failure`` with
``option redispatch``), so a SIGKILLed gateway costs clients nothing but the requests it was
serving, which fail (a reset or a 502: every S3 SDK retries both).

Worked example: gateways ``gw`` on :41001 and ``gw1`` on :41002 behind :8080; ``kill -9`` the
second. New connections it would have got are refused and redispatched to ``gw`` at once; its
health checks fail and it leaves the rotation within ``FALL * CHECK_INTERVAL_MS`` (0.5 s).

Known caveats:
- Only connection failures are retried by HAProxy: a request that reached a gateway that then
  died is answered 502 or reset, and the client retries it (for a POST /function/ call, the
  function may then run twice, as with any lost answer).
- HAProxy reaches each gateway over a Unix socket in the state folder (0600 in a 0700 folder:
  no function or other user reaches it) and tells it the client's address
  (``X-Nearfaas-Client``), which a gateway believes only there, for anonymous callers'
  per-client budgets. Where the socket's path would be too long (over ``MAX_SOCKET_PATH``), that
  gateway is reached over TCP and every anonymous caller behind the balancer shares one budget.
- A SIGSTOPped gateway holds the requests it had until HAProxy's server timeout; new ones go
  elsewhere once its checks time out (``CHECK_TIMEOUT_MS``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nearfaas import atomic

CHECK_INTERVAL_MS = 250
MAX_SOCKET_PATH = 100  # a Unix socket's path must fit sun_path (108 bytes)
CHECK_TIMEOUT_MS = 500
FALL, RISE = 2, 2


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None)


def config(host: str, port: int, gateways: list[dict], read_timeout_s: float) -> str:
    """The HAProxy configuration for ``gateways`` (each ``{"id", "port"}``) behind ``host:port``."""
    servers = "\n".join(_server(g, host) for g in gateways)
    # A function call may run for as long as its exec_timeout and a body may stream for
    # read_timeout: the server-side timeout is generous, the checks are not.
    server_timeout_s = max(300, int(read_timeout_s * 2))
    return f"""# Written by `nearfaas up` (cluster/balancer.py); rewritten at every start.
global
    maxconn 8000
    nbthread 2

defaults
    mode http
    timeout connect 2s
    timeout client {server_timeout_s}s
    timeout server {server_timeout_s}s
    timeout http-request {int(read_timeout_s)}s
    timeout http-keep-alive 60s
    timeout check {CHECK_TIMEOUT_MS}ms
    retries 3
    option redispatch 1
    retry-on conn-failure

frontend nearfaas
    bind {host}:{port}
    # The client's address, for the gateways' per-client budgets; replaces any a client sent,
    # and a gateway believes it only over its Unix socket (gateway/client_identity.py).
    http-request set-header X-Nearfaas-Client %[src]
    default_backend gateways

backend gateways
    balance leastconn
    option httpchk GET /healthz
    http-check expect status 200
{servers}
"""


def _server(gateway: dict, host: str) -> str:
    """Its backend line: its Unix socket when it has one (the address it may believe), else TCP."""
    where = f"unix@{gateway['socket']}" if gateway.get("socket") else f"{host}:{gateway['port']}"
    return f"    server {gateway['id']} {where} check inter {CHECK_INTERVAL_MS} fall {FALL} rise {RISE}"


def write_config(state_dir: Path, host: str, port: int, gateways: list[dict], read_timeout_s: float) -> Path:
    path = atomic.private_dir(Path(state_dir) / "balancer") / "haproxy.cfg"
    atomic.write_text(path, config(host, port, gateways, read_timeout_s))
    return path


def command(binary: str, config_path: Path) -> list[str]:
    return [binary, "-db", "-f", str(config_path)]
