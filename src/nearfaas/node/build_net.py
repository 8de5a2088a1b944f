"""A requirements build's network: the package index the operator configured, nothing else.

pip runs code the deployer wrote (node/build.py), so the build gets a network namespace of its
own with loopback only (node/netns.py, the same as a worker's) and one way out: an HTTP proxy
on ``127.0.0.1:3128`` inside it, which the node serves through a unix socket (node/netrelay.py's
relay) and which goes only to the index hosts. pip is pointed at it with ``HTTPS_PROXY`` /
``HTTP_PROXY``; pip resolves no names inside (there is no DNS there), the node does.

The index hosts are the node's own pip configuration, which is the operator's: ``index-url``
and ``extra-index-url`` from ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` or ``/etc/pip.conf``
(``[global]`` / ``[install]``), by default PyPI (``pypi.org`` and ``files.pythonhosted.org``,
where its files are), each at its URL's port. ``CONNECT host:port`` (https) to one of them is
spliced through; a plain ``GET http://host:port/...`` to one of them is sent on in origin form
with ``Connection: close``; anything else is answered 403 and logged in the function's log by
pip's own failure.

Worked example: ``PIP_INDEX_URL=https://pypi.org/simple``: inside the build,
``CONNECT pypi.org:443`` and ``CONNECT files.pythonhosted.org:443`` are spliced; ``CONNECT
127.0.0.1:8080`` (the gateway), ``CONNECT evil.example:443`` and a direct ``connect()`` to any
address (ENETUNREACH / ECONNREFUSED) get nowhere.

Known caveats:
- ``find-links`` and ``file:`` sources are paths, read through the jail's view of the disk, not
  the network; a find-links URL (http) is not an index and is refused.
- The index's credentials in ``PIP_INDEX_URL`` still reach the build (pip needs them), so a
  build backend can read them; an index that needs none is the safe configuration.
- A build that is not isolated (``isolation: off``) has the node's network, as its functions do.
"""

from __future__ import annotations

import asyncio
import configparser
from pathlib import Path
from urllib.parse import urlsplit

from nearfaas.node.netrelay import CHUNK, Relay, splice

PROXY_PORT = 3128  # inside the build's own namespace: no other listener there to clash with
PYPI = ("https://pypi.org/simple",)
PYPI_FILES = ("files.pythonhosted.org", 443)
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 30.0


def index_urls(environ: dict, pip_conf: Path = Path("/etc/pip.conf")) -> list[str]:
    """The index URLs the node's pip would use: the index (``PIP_INDEX_URL``, else pip.conf's
    ``index-url``, else PyPI) and the extra ones (``PIP_EXTRA_INDEX_URL`` and pip.conf's)."""
    conf = configparser.ConfigParser()
    try:
        conf.read(pip_conf)
    except (configparser.Error, OSError):
        pass

    def from_conf(key: str) -> list[str]:
        return [u for section in ("global", "install") for u in conf.get(section, key, fallback="").split()]

    index = environ.get("PIP_INDEX_URL", "").split() or from_conf("index-url")[:1] or list(PYPI)
    return index + environ.get("PIP_EXTRA_INDEX_URL", "").split() + from_conf("extra-index-url")


def index_hosts(urls: list[str]) -> frozenset[tuple[str, int]]:
    """(host, port) of each http(s) index; PyPI brings the host its files are served from."""
    hosts = set()
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.hostname:
            hosts.add((parts.hostname.lower(), parts.port or (443 if parts.scheme == "https" else 80)))
    if ("pypi.org", 443) in hosts:
        hosts.add(PYPI_FILES)
    return frozenset(hosts)


def proxy_env() -> dict[str, str]:
    """The variables that send pip's requests to the proxy (both spellings requests reads)."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    return {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")} | {"NO_PROXY": "", "no_proxy": ""}


def _split_host_port(text: str, default_port: int) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, str(default_port)
    if not port.isascii() or not port.isdigit():
        return None
    return host.strip("[]").lower(), int(port)


class IndexProxy(Relay):
    """The node's half: a relay whose one outbound socket speaks HTTP proxy to the index hosts."""

    def __init__(self, folder: Path, gid: int, allowed: frozenset[tuple[str, int]]):
        super().__init__(folder, gid, [f"http://127.0.0.1:{PROXY_PORT}"])
        self.allowed = allowed
        self.refused: list[str] = []  # what the build asked for and did not get (for its error)

    @property
    def plan(self) -> dict:
        return {"folder": str(self.folder), "forward": super().plan["forward"]}  # nothing is served inside

    async def _out(self, reader, writer, host: str, port: int) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            writer.close()
            return
        if len(head) > HEAD_LIMIT:
            return self._answer(writer, 431, "request head too large")
        line, *fields = head.decode("latin-1").split("\r\n")
        method, _, rest = line.partition(" ")
        target, _, version = rest.partition(" ")
        if method == "CONNECT":
            where = _split_host_port(target, 443)
            send = b""
        else:
            url = urlsplit(target)
            where = (url.hostname.lower(), url.port or 80) if url.scheme == "http" and url.hostname else None
            keep = [f for f in fields if f and not f.lower().startswith(("proxy-", "connection:", "keep-alive:"))]
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            send = "\r\n".join([f"{method} {path} {version}", *keep, "Connection: close", "", ""]).encode("latin-1")
        if where is None or where not in self.allowed:
            self.refused.append(target)
            return self._answer(writer, 403, f"{target} is not a package index this node's pip is configured with")
        try:
            upstream = await asyncio.open_connection(*where, limit=CHUNK)
        except OSError as exc:
            return self._answer(writer, 502, f"cannot reach {where[0]}:{where[1]}: {exc}")
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(send)
        ends = {writer, upstream[1]}
        self.open |= ends
        try:
            await splice((reader, writer), upstream)
        finally:
            self.open -= ends

    @staticmethod
    def _answer(writer, status: int, why: str) -> None:
        body = (why + "\n").encode()
        reason = {403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        writer.close()
