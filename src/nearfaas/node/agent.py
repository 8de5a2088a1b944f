"""A node agent: one OS process per node of the cluster.

A storage node serves its durable object store over the S3 API (the software analogue of a
computational storage drive) *and* runs functions next to those objects; a compute node only
runs functions. Both answer the gateway's small internal API under ``/_nearfaas/``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from nearfaas.node import worker_spec
from nearfaas.node.pool import PoolError, WorkerPools
from nearfaas.serving import KEEPALIVE_TIMEOUT_S
from nearfaas.serving import serve as serve_guarded
from nearfaas.spec.options import INTERMEDIATE_BUCKET

INTERNAL = "/_nearfaas"


class NodeAgent:
    def __init__(self, name: str, kind: str, cls: str, state_dir: Path, gateway_url: str, workers_max: int = 32,
                 link: str = "local", prewarm: int = 1, url: str | None = None, isolation: bool = True,
                 cpus: float | None = None, files_from_gateway: bool = False, workers_memory: int | None = None,
                 workers_pids: int | None = None):
        self.name, self.kind, self.cls = name, kind, cls

        self.started = time.time()
        self.store = None
        self.s3 = None
        self.stats = None
        store_root = None
        # Who may use this node's S3 port: the gateway and this node's own workers (their keys).
        self._s3_auth = _node_s3_auth(_cluster_secret(state_dir))
        if kind == "storage":
            from nearfaas.node.objectstore import ObjectStore
            from nearfaas.s3.frontend import S3Frontend
            from nearfaas.node.local_backend import LocalBackend

            store_root = state_dir / "nodes" / name / "store"
            self.store = ObjectStore(store_root, clock_origin=re.sub(r"[^A-Za-z0-9_-]", "-", name)[:64] or "node")
            # Chain intermediates land here from this node's own workers; every storage node has
            # the bucket from its start, so no chain waits on (or fails with) a node that is down.
            self.store.create_bucket(INTERMEDIATE_BUCKET)
            # The node's S3 port answers the gateway (signed with the cluster secret) and this
            # node's own workers writing a chain intermediate (their function keys), no one else.
            from nearfaas.node.tabular_stats import StatsKeeper

            self.stats = StatsKeeper(self.store, store_root)
            self.s3 = S3Frontend(LocalBackend(self.store, on_written=self.stats.soon),
                                 auth=self._s3_auth, version_writer=_is_gateway)
        # What a worker spec is checked against (node/worker_spec.py): the gateway copies every
        # deployment's code under <state>/functions; with files_from_gateway the code comes by name.
        self.functions_dir = None if files_from_gateway else state_dir / "functions"
        self.secret, self.handler_roots, self.egress = _spec_trust(state_dir)
        self.pools = WorkerPools(name, state_dir, gateway_url, store_root, workers_max, link, prewarm=prewarm, node_url=url,
                                 isolation=isolation, workers_memory=workers_memory, workers_pids=workers_pids)
        if files_from_gateway:  # another host than the gateway's (backend: ray): code and secrets come over HTTP
            from nearfaas.node.function_files import GatewayFiles

            self.pools.files = GatewayFiles(gateway_url, _cluster_secret(state_dir), self.pools.node_dir)
        from nearfaas.node.capacity import CpuCap

        # After the pools know where the node's groups hang, before any worker starts: the agent
        # moves into the node's capped group, and every worker group is made under it.
        self.capacity = CpuCap(state_dir, name, cpus)
        self.registry = CollectorRegistry()
        self.registry.register(_NodeCollector(self))

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{INTERNAL}/health", self.health)
        app.router.add_post(f"{INTERNAL}/functions/{{name}}/workers", self.start_worker)
        app.router.add_delete(f"{INTERNAL}/functions/{{name}}", self.stop_function)
        app.router.add_delete(f"{INTERNAL}/workers/{{id}}", self.stop_worker)
        app.router.add_get(f"{INTERNAL}/logs/{{name}}", self.logs)
        app.router.add_get(f"{INTERNAL}/memory/{{name}}", self.memory_profiles)
        app.router.add_get(f"{INTERNAL}/memory/{{name}}/tiers", self.memory_tiers)
        app.router.add_get("/metrics", self.metrics)
        if self.s3 is not None:
            from nearfaas.node.replica_api import add_replica_routes

            add_replica_routes(app, self.store, INTERNAL)
            app.router.add_get(f"{INTERNAL}/stats", self.tabular_stats)
            app.router.add_post(f"{INTERNAL}/query", self.query)
            self.s3.mount(app)
        else:  # a compute node holds no objects, but says so only to a signed caller (like a storage node)
            app.router.add_route("*", r"/{s3_path:[\s\S]*}", self.no_objects)

    async def no_objects(self, request: web.Request) -> web.Response:
        """Any S3 request to a compute node: authenticated first, as on a storage node, so an
        unsigned one gets 403 (not a 404 that tells a stranger what kind of node this is)."""
        from urllib.parse import parse_qsl

        from nearfaas.s3.errors import S3Error

        raw_path, _, raw_query = request.raw_path.partition("?")
        try:
            self._s3_auth.authenticate(request.method, raw_path, parse_qsl(raw_query, keep_blank_values=True), request.headers)
            error = S3Error("NoSuchBucket", f"node {self.name} is a compute node: it holds no objects; use the gateway")
        except S3Error as exc:
            error = exc
        error.resource = error.resource or raw_path
        return web.Response(status=error.status, body=b"" if request.method == "HEAD" else error.to_xml(),
                            content_type="application/xml", headers={"x-nearfaas-error-code": error.code})

    def describe(self) -> dict:
        store = self.store.counters.snapshot() if self.store is not None else None
        return {"name": self.name, "kind": self.kind, "class": self.cls, "pid": os.getpid(), "uptime_s": time.time() - self.started,
                "workers": [w.describe() for w in self.pools.workers.values()], "store": store,
                "cold_starts": self.pools.stats.cold_starts, "capacity": self.capacity.describe(),
                "tabular_stats": self.stats.describe() if self.stats is not None else None,
                "prewarm": self.pools.prewarm.describe() | {"prewarmed_starts": self.pools.stats.prewarmed_starts},
                # the newest version it holds or stamped: a gateway's clock goes past it (replication/version.py)
                "clock": self.store.clock.high_water() if self.store is not None else "",
                # its store's identity: a new one after a replaced disk (replication/replaced.py)
                "store_id": self.store.store_id if self.store is not None else ""}

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(self.describe())

    async def start_worker(self, request: web.Request) -> web.Response:
        try:
            spec = await request.json()
        except ValueError:
            return web.json_response({"error": "body must be the function spec as JSON"}, status=400)
        # Signed by the gateway is not enough: only a spec it builds from a deployed function
        # starts a worker (node/worker_spec.py; issue 39, a relayed spec ran code as root).
        check = functools.partial(worker_spec.check, spec, request.match_info["name"], functions_dir=self.functions_dir,
                                  handler_roots=self.handler_roots, cluster_secret=self.secret, egress=self.egress)
        try:  # in a thread only when a registry's name may be resolved (a thread hop cost ~1 ms of a cold start)
            await asyncio.to_thread(check) if worker_spec.resolves_names(spec) else check()
        except worker_spec.WorkerSpecError as exc:
            print(json.dumps({"event": "worker-spec-refused", "node": self.name, "function": request.match_info["name"],
                              "field": exc.field, "reason": str(exc)}), flush=True)
            return web.json_response({"error": f"refused worker spec: {exc}", "field": exc.field, "layer": "node",
                                      "node": self.name}, status=400)
        try:
            worker = await self.pools.start(spec)
            # Which gateway asked (many gateways share the nodes): a restarted one, or one taking
            # over a dead peer's duties, stops only the leftovers of that gateway (gateway/peers.py).
            worker.owner = request.query.get("owner", "")[:64]
        except PoolError as exc:
            return web.json_response({"error": str(exc), "layer": "cold-start", "node": self.name}, status=exc.status)
        except Exception as exc:  # e.g. the handler folder vanished after deploy: still an answer, not a 500
            return web.json_response({"error": f"cold start of {spec['name']!r} failed on {self.name}: {type(exc).__name__}: {exc}",
                                      "layer": "cold-start", "node": self.name}, status=502)
        return web.json_response(worker.describe() | {"node": self.name})

    async def stop_worker(self, request: web.Request) -> web.Response:
        found = await self.pools.stop(request.match_info["id"])
        return web.json_response({"stopped": found}, status=200 if found else 404)

    async def stop_function(self, request: web.Request) -> web.Response:
        return web.json_response({"stopped": await self.pools.stop_function(request.match_info["name"])})

    async def logs(self, request: web.Request) -> web.Response:
        try:
            since = float(request.query.get("since", 0))
            tail = int(request.query.get("tail", 0))
        except ValueError:
            return web.json_response({"error": "since must be unix seconds and tail an integer"}, status=400)
        return web.json_response(self.pools.read_logs(request.match_info["name"], since, tail))

    async def memory_profiles(self, request: web.Request) -> web.Response:
        """The memory profiles (memory/profile.py) of this node's profiled workers of a function,
        one per instance log (x-nearfaas.memory.profile); ?period_ms= is the function's sample_ms."""
        from nearfaas.memory.profile import read_profiles

        name = request.match_info["name"]
        try:
            period = float(request.query.get("period_ms", 10))
            if not period > 0:
                raise ValueError
        except ValueError:
            return web.json_response({"error": "period_ms: the sampling period in milliseconds, > 0"}, status=400)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", name) or ".." in name:
            return web.json_response({"error": f"{name!r} is not a function name"}, status=400)
        found = await asyncio.to_thread(read_profiles, self.pools.memory_log_dir(name), period)
        return web.json_response({"node": self.name, "function": name, "instances": found})

    async def memory_tiers(self, request: web.Request) -> web.Response:
        """Every tier policy over each profiled run of a function on this node (memory/tiersim.py),
        priced at ?delta_ns=&dram_share=&boundness=&fast_ns=&period_ms=."""
        from nearfaas.memory.profile import simulate_runs

        name = request.match_info["name"]
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", name) or ".." in name:
            return web.json_response({"error": f"{name!r} is not a function name"}, status=400)
        args = {}
        for key, lo, hi in (("period_ms", 0.1, 1e4), ("delta_ns", 0, 1e4), ("dram_share", 0, 1), ("boundness", 0, 1),
                            ("fast_ns", 1, 1e4)):
            try:
                args[key] = float(request.query[key])
                if not lo <= args[key] <= hi:
                    raise ValueError
            except (KeyError, ValueError):
                return web.json_response({"error": f"{key}: required, a number from {lo:g} to {hi:g}"}, status=400)
        runs = await asyncio.to_thread(simulate_runs, self.pools.memory_log_dir(name), **args)
        return web.json_response({"node": self.name, "function": name, "runs": runs})

    async def tabular_stats(self, request: web.Request) -> web.Response:
        """Column statistics of this node's tabular objects under ?bucket=&prefix= (node/tabular_stats.py)."""
        bucket = request.query.get("bucket", "")
        if not bucket:
            return web.json_response({"error": "bucket: required"}, status=400)
        docs = await asyncio.to_thread(self.stats.read, bucket, request.query.get("prefix", ""))
        return web.json_response({"node": self.name, "objects": docs, "keeper": self.stats.describe()})

    async def query(self, request: web.Request) -> web.Response:
        """Run a query on this node's copy of one object (the gateway's offload of a /system/query
        part): {"bucket", "key", "sql"} -> the result as an Arrow IPC stream."""
        from nearfaas.dataservices.select import query_local_object

        try:
            body = await request.json()
            bucket, key, text = body["bucket"], body["key"], body["sql"]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "body: {bucket, key, sql} as JSON"}, status=400)
        status, payload = await query_local_object(self.s3.backend, bucket, key, text)
        if status != 200:
            return web.json_response({"error": payload}, status=status)
        return web.Response(body=payload, content_type="application/vnd.apache.arrow.stream")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain", charset="utf-8")


def _cluster_secret(state_dir: Path) -> str:
    """The cluster secret from cluster.json (root-only, hidden from functions): never from the
    environment, which workers could inherit."""
    try:
        secret = json.loads((state_dir / "cluster.json").read_text()).get("internal_secret")
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the cluster secret from {state_dir / 'cluster.json'}: {exc}; start nodes with `nearfaas up`") from None
    if not secret:
        raise SystemExit(f"{state_dir / 'cluster.json'} has no internal_secret; it was written by an older nearfaas: "
                         "run `nearfaas down` and `nearfaas up` again")
    return secret


def _spec_trust(state_dir: Path):
    """The cluster secret, gateway.handler_roots and the egress policy (registries) from
    cluster.json, for checking worker specs; without one (a node driven by a test) no spec with
    credentials, a local image or a registry on a private address starts."""
    from nearfaas.egress import EgressPolicy

    try:
        layout = json.loads((state_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return None, [], EgressPolicy()
    return layout.get("internal_secret"), [str(r) for r in layout.get("handler_roots") or []], EgressPolicy.from_layout(layout)


def _is_gateway(principal) -> bool:
    """Only the gateway (signing with the cluster secret) may order writes by version."""
    from nearfaas.auth.internal import INTERNAL_ACCESS_KEY

    return principal is not None and principal.name == INTERNAL_ACCESS_KEY


def _node_s3_auth(secret: str):
    from nearfaas.auth import function_keys
    from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
    from nearfaas.node import objectfds
    from nearfaas.s3.sigv4 import Principal, S3Auth

    # A storage node's S3 port takes a chain call's key for that call's intermediates (a stage's
    # local output), never a function key; its fd hand-off checks the same keys (objectfds.py).
    objectfds.trust_chain_keys(secret)

    def function_key(access: str):
        if (prefix := function_keys.run_prefix(access)) is None:
            return None
        return Principal(f"chain-call key {access}", function_keys.secret_key(secret, access), frozenset({INTERMEDIATE_BUCKET}),
                         authorizer=function_keys.run_authorizer(prefix))

    return S3Auth({INTERNAL_ACCESS_KEY: secret}, resolver=function_key)


class _NodeCollector:
    """Exports the node's own counters at scrape time; nothing to keep in sync."""

    def __init__(self, agent: NodeAgent):
        self.agent = agent

    def collect(self):
        labels = [self.agent.name, self.agent.cls]
        cold = CounterMetricFamily("nearfaas_node_cold_starts", "Worker cold starts on this node (measured)", labels=["node", "class"])
        cold.add_metric(labels, self.agent.pools.stats.cold_starts)
        yield cold
        warm = GaugeMetricFamily("nearfaas_node_workers", "Warm worker processes on this node", labels=["node", "class"])
        warm.add_metric(labels, len(self.agent.pools.workers))
        yield warm
        prewarmed = CounterMetricFamily("nearfaas_node_prewarmed_starts", "Cold starts served by a pre-warmed generic worker "
                                        "(a subset of nearfaas_node_cold_starts)", labels=["node", "class"])
        prewarmed.add_metric(labels, self.agent.pools.stats.prewarmed_starts)
        yield prewarmed
        idle = GaugeMetricFamily("nearfaas_node_prewarm_idle", "Pre-warmed generic workers idle on this node", labels=["node", "class"])
        idle.add_metric(labels, len(self.agent.pools.prewarm.idle))
        yield idle
        if self.agent.store is not None:
            stats = self.agent.store.counters.snapshot() | {"tombstones": self.agent.store.tombstone_count()}
            for field, kind, help_text in (("bytes_in", CounterMetricFamily, "Object bytes written to this node"),
                                           ("bytes_out", CounterMetricFamily, "Object bytes read from this node"),
                                           ("objects", GaugeMetricFamily, "Objects stored on this node"),
                                           ("uploads_expired", CounterMetricFamily, "Unfinished multipart uploads expired or cleaned up"),
                                           ("upload_bytes_reclaimed", CounterMetricFamily, "Bytes of expired multipart parts removed"),
                                           ("tombstones", GaugeMetricFamily, "Deleted keys remembered until every replica has the delete")):
                metric = kind(f"nearfaas_node_object_{field}", help_text, labels=["node", "class"])
                metric.add_metric(labels, stats.get(field, 0))
                yield metric


async def serve(args) -> None:
    agent = NodeAgent(args.name, args.kind, args.cls, Path(args.state), args.gateway, args.workers_max, args.link,
                      prewarm=args.prewarm, url=node_url(args.host, args.port), isolation=args.isolation == "on",
                      cpus=args.cpus, files_from_gateway=args.files_from_gateway, workers_memory=args.workers_memory,
                      workers_pids=args.workers_pids)
    from nearfaas.auth.internal import server_middleware

    app = web.Application(client_max_size=1024**3, middlewares=[server_middleware(_cluster_secret(Path(args.state)), INTERNAL)])
    agent.routes(app)
    # Bodies pass as sent: an S3 PUT with Content-Encoding: gzip is stored as those bytes (S3's
    # semantics), and a Bitar-compressed one is decoded by the S3 frontend (bitar/transfer.py).
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=KEEPALIVE_TIMEOUT_S,
                           auto_decompress=False)
    await runner.setup()
    server, _ = await serve_guarded(runner, args.host, args.port, backlog=1024, name=args.name)  # serving.py
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent.pools.start_prewarming()
    sweeper = None
    if agent.store is not None:  # abandoned multipart uploads expire (node/multipart.py)
        from nearfaas.node.multipart import sweep_expired_uploads

        sweeper = asyncio.ensure_future(sweep_expired_uploads(agent.store.uploads, args.multipart_expiry))
    print(json.dumps({"event": "ready", "node": args.name, "port": args.port, "pid": os.getpid()}), flush=True)  # last: launcher.said_ready
    await stop.wait()
    if sweeper is not None:
        sweeper.cancel()
    agent.capacity.release()
    await agent.pools.shutdown()
    server.close()
    await runner.cleanup()


def node_url(host: str, port: int) -> str:
    """The base URL workers reach this node at (they run on the same machine)."""
    if host in ("", "0.0.0.0", "::"):  # a wildcard bind is not an address to connect to
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _count(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="nearfaas node agent (started by `nearfaas up`)")
    parser.add_argument("--name", required=True)
    parser.add_argument("--kind", choices=["storage", "compute"], required=True)
    parser.add_argument("--class", dest="cls", default="standard")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--workers-max", type=int, default=32, help="worker processes this node may run at once")
    parser.add_argument("--link", default="local", help="link profile its workers' remote object I/O crosses")
    parser.add_argument("--prewarm", type=_count, default=1,
                        help="pre-warmed generic workers kept idle to cut cold starts (0 turns it off)")
    parser.add_argument("--isolation", choices=["on", "off"], default="on",
                        help="run workers unprivileged in their own mount view (node/jail.py); off is unsafe")
    parser.add_argument("--workers-memory", type=int, default=None, metavar="BYTES",
                        help="memory all of the node's workers together may hold (a cgroup limit over them); default: none")
    parser.add_argument("--workers-pids", type=int, default=None, metavar="N",
                        help="processes and threads all of the node's workers together may have (a pids cgroup "
                             "limit over them); default: none")
    parser.add_argument("--cpus", type=float, default=None,
                        help="CPU capacity of the whole node in cores (node/capacity.py); default: the machine's")
    parser.add_argument("--multipart-expiry", type=_seconds, default=24 * 3600.0, metavar="SECONDS",
                        help="abort multipart uploads not completed or aborted this long after they began "
                             "(storage nodes; default 86400)")
    parser.add_argument("--files-from-gateway", action="store_true",
                        help="fetch functions' code and secrets from the gateway (a node on another host than the gateway's)")
    args = parser.parse_args(argv)
    if args.isolation == "on":
        # Fail closed: a node that cannot isolate functions does not start (node/jail.py).
        # Probed here, before the event loop and its threads exist, in a forked child.
        from nearfaas.node import jail

        problems = jail.probe(Path(args.state), args.name)
        if problems:
            print(jail.refusal(args.name, problems), file=sys.stderr, flush=True)
            sys.exit(2)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
