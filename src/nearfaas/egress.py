"""Egress: the one way out for requests the platform makes on behalf of a user's input.

Mechanism. A URL a caller hands the platform (``X-Callback-Url`` of an async call today) is the
caller's input, but the request to it leaves from inside the cluster: from the gateway's host,
which reaches every node's internal API, the fast path's ports and whatever else listens on
loopback or a private network. Sent naively it makes the platform a confused deputy (issue 39,
finding 1: a callback to a node's ``/_nearfaas/functions/x/workers`` started a worker as root).
So every such request goes through ``EgressClient``, which

- carries no platform credentials: its own session, no default headers, no auth, no cookies
  kept, no proxy settings from the environment (``trust_env=False``);
- resolves the host itself and checks every address the name resolves to (``EgressPolicy``):
  loopback, link-local, private and otherwise non-global ranges, this machine's own addresses
  and the cluster's own ports (gateway, nodes, fast path) are refused unless the operator names
  them in ``gateway.egress_allow`` of the cluster file; IPv4-mapped/-compatible and NAT64 IPv6
  spellings are judged by the IPv4 address inside;
- connects only to an address it checked: the check runs inside the connector's resolver, so the
  address connected to is the address that was checked (a second DNS answer cannot rebind it),
  and the connected peer is checked again before the answer is used;
- never follows a redirect (a 3xx is the answer; nothing is sent to its Location).

Allow-list entries (``gateway.egress_allow``): ``"hooks.example.com"`` or ``"10.1.2.3"`` lets
that name or address through at any port except the cluster's own; ``"127.0.0.1:8099"`` (or
``"[::1]:8099"``) lets exactly that port through, even one of the cluster's.

Worked example::

    policy = EgressPolicy.from_layout(layout)          # egress_allow + the cluster's own ports
    client = EgressClient(policy)
    status = await client.post("http://hooks.example.com/done", data=b"...", headers={})
    await client.post("http://127.0.0.1:18512/_nearfaas/...", data=b"")   # EgressRefused:
    #   "127.0.0.1:18512 is the cluster's own port (loopback); name it in gateway.egress_allow ..."

Besides URLs, a fast-path lambda's ``external`` address (the memcached-style service its
external calls go to, gateway/fastpath.py) is judged at deploy the same way, and the executor is
handed the checked address, not the name: the executor runs on the host network, so without the
check a deployer's lambda could make it talk to any loopback or private service.

Known caveats:
- Registry pulls (node/oci/images.py runs skopeo) are judged by this policy before the pull
  (node/worker_spec.py), but skopeo resolves the registry's name again itself: a name whose
  answer changes in between is not caught. A function's own outgoing requests do not go through
  here at all: its network access is the jail's business (docs/isolation.md).
- An allow entry naming a host (not an address) trusts that name's DNS answers, whatever
  address they give, except the cluster's own ports.
- A name that resolves to both a public and a refused address is refused as a whole.
- "This machine's addresses" are found by trying to bind a socket to the address: an address of
  another host on the same private network is refused as private anyway.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver
from yarl import URL

ALLOW_FIELD = "gateway.egress_allow"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EgressRefused(Exception):
    """The platform will not send this request; the message says why and what to allow."""


def parse_allow_entry(entry: str) -> tuple[str, int | None]:
    """``"host"`` / ``"host:port"`` / ``"[v6]:port"`` / a bare IPv6 address -> (host, port or
    None); ValueError names what is wrong."""
    text = entry.strip().lower()
    if not text or "/" in text or "@" in text or " " in text:
        raise ValueError(f"{entry!r} is not a host name, an address or host:port")
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if not bracket or (rest and port_text is None):
            raise ValueError(f"{entry!r} is not [address]:port")
    elif text.count(":") > 1:  # a bare IPv6 address
        host, port_text = text, None
    else:
        host, _, port_text = text.partition(":")
        port_text = port_text if ":" in text else None
    if port_text is not None:
        if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ValueError(f"{entry!r} has a port that is not a number from 1 to 65535")
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        if not host or not all(c.isascii() and (c.isalnum() or c in "-._") for c in host):
            raise ValueError(f"{entry!r} is not a host name or an address") from None
    return host, int(port_text) if port_text is not None else None


def _embedded_v4(ip: ipaddress._BaseAddress) -> ipaddress._BaseAddress:
    """The IPv4 address an IPv6 spelling carries (mapped, compatible, 6to4, NAT64), else ip."""
    if ip.version != 6:
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # 64:ff9b::a.b.c.d, ::a.b.c.d
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_problem(ip_text: str) -> str | None:
    """Why an address is not a public destination ("loopback", "a private range", ...), or None."""
    ip = ipaddress.ip_address(ip_text.split("%", 1)[0])
    inner = _embedded_v4(ip)
    for candidate in {ip, inner}:
        for attr, why in (("is_loopback", "loopback"), ("is_link_local", "link-local"), ("is_unspecified", "unspecified"),
                          ("is_multicast", "multicast"), ("is_private", "a private range"), ("is_reserved", "a reserved range")):
            if getattr(candidate, attr):
                return why
        if not candidate.is_global:
            return "not a public address"
    return None


def is_own_address(ip_text: str) -> bool:
    """Whether this machine holds the address (a socket can be bound to it)."""
    ip = ipaddress.ip_address(ip_text.split("%", 1)[0])
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((str(ip), 0))
            return True
        except OSError:
            return False


@dataclass(frozen=True)
class EgressPolicy:
    """Which destinations requests on a user's behalf may reach (see the module's opening)."""

    allow: tuple[tuple[str, int | None], ...] = ()
    cluster_ports: frozenset[int] = frozenset()
    cluster_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_layout(cls, layout: dict) -> EgressPolicy:
        ports = {layout.get("gateway_port")} | {n.get("port") for n in layout.get("nodes") or []}
        fp = layout.get("fastpath") or {}
        ports |= {fp.get(k) for k in ("host_port", "udp", "tcp", "control", "stream")}
        hosts = set()
        for host in (layout.get("host"),):
            try:
                hosts.add(str(ipaddress.ip_address(host)))
            except (TypeError, ValueError):
                pass
        return cls(tuple(parse_allow_entry(e) for e in layout.get("egress_allow") or []),
                   frozenset(int(p) for p in ports if isinstance(p, int) and p > 0), frozenset(hosts))

    def _allowed(self, names: set[str], port: int, with_port_only: bool) -> bool:
        return any(host in names and (p == port if with_port_only else p in (None, port)) for host, p in self.allow)

    def problem(self, host: str, ip: str, port: int) -> str | None:
        """Why ``ip`` (what ``host`` resolved to) at ``port`` is refused, or None if it may be reached."""
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
        inner = _embedded_v4(addr)
        names = {host.lower().strip("[]"), str(addr), str(inner)}
        where = f"{host}:{port}" + (f" ({ip})" if ip != host else "")
        why = address_problem(ip)
        own = bool({str(addr), str(inner)} & self.cluster_hosts) or is_own_address(str(inner))
        if own and port in self.cluster_ports:
            if self._allowed(names, port, with_port_only=True):
                return None
            return (f"{where} is the cluster's own port ({why or 'this host'}); name it as host:port in {ALLOW_FIELD} "
                    "of the cluster file only if it is not a nearfaas server")
        if why is None and own:
            why = "an address of this host"
        if why is None or self._allowed(names, port, with_port_only=False):
            return None
        return f"{where} is {why}; name it in {ALLOW_FIELD} of the cluster file to allow it"

    def check(self, host: str, ip: str, port: int) -> None:
        if (why := self.problem(host, ip, port)) is not None:
            raise EgressRefused(why)

    def checked_addresses(self, host: str, port: int) -> list[str]:
        """Every address ``host`` resolves to, each allowed at ``port`` (EgressRefused names the
        first that is not; OSError when the name does not resolve). Hand what connects the
        address, not the name, so a second DNS answer cannot rebind it (blocking: a thread's job
        in async code)."""
        host = host.strip("[]")
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = sorted({info[4][0] for info in infos})
        for address in addresses:
            self.check(host, address, port)
        return addresses


def _target(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL; EgressRefused for anything else."""
    try:
        u = URL(url)
    except (ValueError, TypeError):
        raise EgressRefused(f"{url!r} is not a URL") from None
    if u.scheme not in ("http", "https") or not u.host:
        raise EgressRefused(f"{url!r} is not an http:// or https:// URL with a host")
    return u.host, u.port or (443 if u.scheme == "https" else 80)


class _CheckingResolver(AbstractResolver):
    """Resolves a name and hands the connector only addresses the policy allows: what it
    connects to is what was checked (no second lookup to rebind)."""

    def __init__(self, policy: EgressPolicy):
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
        except socket.gaierror as exc:
            raise OSError(f"cannot resolve {host!r}: {exc}") from None
        out = []
        for fam, _, proto, _, sockaddr in infos:
            ip = sockaddr[0]
            self.policy.check(host, ip, port)  # one refused address refuses the name
            out.append({"hostname": host, "host": ip, "port": port, "family": fam, "proto": proto,
                        "flags": socket.AI_NUMERICHOST})
        return out

    async def close(self) -> None:
        pass


class EgressClient:
    """Requests on a user's behalf: checked destinations, no credentials, no redirects."""

    def __init__(self, policy: EgressPolicy | None = None, *, limit: int = 100):
        self.policy = policy or EgressPolicy()
        self.limit = limit
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        """Made on first use (inside the event loop); no DNS cache, so every request is checked."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.limit, resolver=_CheckingResolver(self.policy), use_dns_cache=False)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def post(self, url: str, *, data: bytes, headers, timeout: float = 30.0) -> int:
        """POST and read the answer; its status (a 3xx is not followed). EgressRefused if the
        destination is not allowed, aiohttp.ClientError / TimeoutError if it could not be reached."""
        host, port = _target(url)
        try:
            ipaddress.ip_address(host.strip("[]"))
            self.policy.check(host, host.strip("[]"), port)  # a literal address never reaches the resolver
        except ValueError:
            pass  # a name: checked by the resolver, address by address
        try:
            async with self.session().post(url, data=data, headers=headers, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                peer = resp.connection.transport.get_extra_info("peername") if resp.connection and resp.connection.transport else None
                if peer:
                    self.policy.check(host, peer[0], port)
                await resp.read()
                return resp.status
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, EgressRefused):
                raise exc.os_error from None
            raise
        except aiohttp.ClientError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, EgressRefused):
                raise cause from None
            raise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
