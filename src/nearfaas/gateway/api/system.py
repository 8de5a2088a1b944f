"""/healthz, /metrics, /system/info, /system/openapi.json, /system/nodes, /system/logs: the
gateway and its nodes as the operator sees them."""

from __future__ import annotations

import datetime as dt
import functools
import json
import platform
import subprocess
from pathlib import Path

from aiohttp import web

from nearfaas import __version__
from nearfaas.gateway.api.namespaces import Namespaces
from nearfaas.gateway.api.common import error, json_body, rfc3339


class SystemAPI:
    def __init__(self, invoker, nodes, metrics, namespaces: Namespaces | None = None):
        self.invoker, self.nodes, self.metrics = invoker, nodes, metrics
        self.namespaces = namespaces or Namespaces()

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/healthz", self.healthz)
        r.add_get("/metrics", self.metrics_endpoint)
        r.add_get("/system/info", self.info)
        r.add_get("/system/openapi.json", self.openapi)
        r.add_get("/system/logs", self.logs)
        r.add_get("/system/nodes", self.list_nodes)
        r.add_post("/system/nodes/{name}/accelerator", self.set_accelerator)

    async def healthz(self, request):
        return web.Response(text="OK")

    async def metrics_endpoint(self, request):
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def info(self, request):
        version = {"release": __version__, **_git_facts()}
        return web.json_response({"provider": {"provider": "nearfaas", "orchestration": "nearfaas-local", "version": version},
                                  "version": version, "arch": platform.machine()})

    async def openapi(self, request):
        import yaml

        text = (Path(__file__).parent.parent / "openapi.yaml").read_text()
        return web.json_response(yaml.safe_load(text))

    async def logs(self, request):
        name = request.query.get("name")
        if not name:
            return error(400, "name: required query parameter, the function whose logs to read")
        internal = self.namespaces.resolve(name, request)
        if isinstance(internal, web.Response):
            return internal
        name, namespace = self.namespaces.of(internal)
        if internal not in self.invoker.functions:
            return error(404, f"function {name!r} not found")
        try:
            tail = max(int(request.query.get("tail", "0") or 0), 0)  # 0 or below: every line (faas-cli sends -1)
            since_raw = request.query.get("since")
            since = dt.datetime.fromisoformat(since_raw.replace("Z", "+00:00")).timestamp() if since_raw else 0.0
        except ValueError:
            return error(400, "tail must be an integer (0 or -1: every line) and since an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)")
        records = await self.nodes.logs(internal, since, tail)
        lines = [json.dumps({"name": name, "namespace": namespace, "instance": r.get("instance", ""),
                             "timestamp": rfc3339(r.get("timestamp", 0)), "text": r.get("text", "")}) for r in records]
        return web.Response(text="".join(line + "\n" for line in lines), content_type="application/x-ndjson")

    def _node_status(self, node) -> dict:
        accel = node.cls == "dscs"
        return {"name": node.name, "kind": node.kind, "class": node.cls, "healthy": node.healthy, "url": node.url,
                "accelerator": {"available": self.invoker.accel_available.get(node.name, True),
                                "busy": self.invoker.accel_inflight.get(node.name, 0) > 0} if accel else None,
                # CPU capacity and how it is enforced, from the node's last health answer (node/capacity.py).
                "capacity": node.status.get("capacity")}

    async def list_nodes(self, request):
        return web.json_response([self._node_status(n) for n in self.nodes.nodes.values()])

    async def set_accelerator(self, request):
        """Mark a dscs node's accelerator available or not (DSCS-Serverless 5.3 fail-over): while
        it is unavailable, its acceleratable functions fall back to CPU compute nodes."""
        node = self.nodes.nodes.get(request.match_info["name"])
        if node is None:
            return error(404, f"node {request.match_info['name']!r} not found; see GET /system/nodes")
        if node.cls != "dscs":
            return error(400, f"node {node.name!r} is of class {node.cls!r} and has no accelerator; only dscs nodes do")
        body = await json_body(request)
        available = body.get("available")
        if not isinstance(available, bool):
            return error(400, 'available: required, true or false (e.g. {"available": false})')
        self.invoker.accel_available[node.name] = available
        return web.json_response(self._node_status(node))


@functools.cache
def _git_facts() -> dict[str, str]:
    """The commit this gateway runs (`sha`, `commit_message`), when it runs from a git checkout;
    "unknown" otherwise (an installed package carries only its release)."""
    root = Path(__file__).resolve().parents[4]
    try:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H%n%s"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.split("\n", 1)
        return {"sha": out[0].strip(), "commit_message": out[1].strip() if len(out) > 1 else ""}
    except (OSError, subprocess.SubprocessError):
        return {"sha": "unknown", "commit_message": ""}
