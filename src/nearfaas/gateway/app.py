"""The gateway process: OpenFaaS REST API, the cluster's S3 endpoint, invocation routing.

Started by ``nearfaas up`` with the cluster layout it wrote to ``<state>/cluster.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
from pathlib import Path

from aiohttp import web

from nearfaas import atomic
from nearfaas.auth import function_keys
from nearfaas.auth.admin import AdminGuard
from nearfaas.auth.bucket_policy import BucketAccessCache
from nearfaas.auth.internal import INTERNAL_ACCESS_KEY
from nearfaas.egress import EgressClient, EgressPolicy
from nearfaas.gateway.api import OpenFaaSAPI, on_prepare, stamp_calls
from nearfaas.gateway.api.common import error
from nearfaas.gateway.autoscale import Autoscaler
from nearfaas.gateway.chains import ChainRunner
from nearfaas.gateway.api.node_files import NodeFiles
from nearfaas.gateway.api.query import QueryAPI
from nearfaas.gateway.cluster_backend import ClusterBackend
from nearfaas.replication.antientropy import AntiEntropy
from nearfaas.replication.replaced import ReplacedStores
from nearfaas.replication.hints import HintLog, HintTail, replay_forever
from nearfaas.replication.version import RESERVE_MS, HybridClock
from nearfaas.replication.metrics import ReplicationCollector
from nearfaas.gateway.invoker import Invoker
from nearfaas.gateway.nodes import Node, NodeDirectory
from nearfaas.gateway.shared_scale import SharedScale
from nearfaas.gateway.select_planner import SelectPlanner, load_models
from nearfaas.gateway.keys_api import KeysAPI
from nearfaas.gateway.webhooks import WebhookSink
from nearfaas.gateway.worker_client import MAX_RESPONSE
from nearfaas.gateway import peers
from nearfaas.gateway.async_queue import DEFAULT_MAX_BYTES as ASYNC_MAX_BYTES, AsyncQueue
from nearfaas.gateway.client_identity import identify
from nearfaas.link.profiles import get_profile
from nearfaas.placement.policy import make_policy
from nearfaas.placement.copysets import default_scatter_width
from nearfaas.placement.replicas import Scheme
from nearfaas.bitar import transfer
from nearfaas.s3.frontend import S3Frontend
from nearfaas.s3.node_client import NodeClient
from nearfaas.serving import KEEPALIVE_TIMEOUT_S, MAX_CONNECTIONS, GuardCollector
from nearfaas.serving import serve as serve_guarded, serve_unix
from nearfaas.spec.options import INTERMEDIATE_BUCKET
from nearfaas.telemetry.metrics import BitarCollector, GatewayMetrics


class _StoreCollector:
    """Per-node object-store counters, as last reported by each node's health poll."""

    def __init__(self, nodes: NodeDirectory):
        self.nodes = nodes

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families = {
            "bytes_in": CounterMetricFamily("nearfaas_object_bytes_in", "Object bytes written per storage node (measured)", labels=["node", "class"]),
            "bytes_out": CounterMetricFamily("nearfaas_object_bytes_out", "Object bytes read per storage node (measured)", labels=["node", "class"]),
            "objects": GaugeMetricFamily("nearfaas_objects", "Objects stored per storage node", labels=["node", "class"]),
            "uploads_expired": CounterMetricFamily("nearfaas_multipart_uploads_expired", "Unfinished multipart uploads a node "
                                                   "expired or cleaned up (measured)", labels=["node", "class"]),
            "upload_bytes_reclaimed": CounterMetricFamily("nearfaas_multipart_bytes_reclaimed", "Bytes of expired multipart "
                                                          "parts removed (measured)", labels=["node", "class"]),
        }
        up = GaugeMetricFamily("nearfaas_node_up", "1 when the node answered its last health poll", labels=["node", "kind", "class"])
        for node in self.nodes.nodes.values():
            up.add_metric([node.name, node.kind, node.cls], 1 if node.healthy else 0)
            store = (node.status or {}).get("store") or {}
            for field, family in families.items():
                if field in store:
                    family.add_metric([node.name, node.cls], store[field])
        yield up
        yield from families.values()


async def _object_sizes(backend: ClusterBackend, bucket: str, prefix: str, limit: int) -> list[tuple[str, int]]:
    """(key, size) of the first ``limit`` objects under a prefix: where a prefix input's bytes are."""
    listed = await backend.list_objects(bucket, prefix, max_keys=limit)
    return [(info.key, info.size) for info in listed.contents]


def _cluster_backend(nodes: NodeDirectory, factor: int, dscs: bool, hints: HintLog, scheme: Scheme, clock_file: Path,
                     origin: str = peers.FIRST_ID) -> ClusterBackend:
    clients: dict[str, NodeClient] = {}
    credentials = (INTERNAL_ACCESS_KEY, nodes.secret) if nodes.secret else None  # nodes answer only the gateway

    def client_for(name: str) -> NodeClient:
        url = nodes.nodes[name].url
        if name not in clients or clients[name].base_url != url.rstrip("/"):  # new, or moved (backend: ray)
            clients[name] = NodeClient(name, url, session=nodes.session, credentials=credentials)
        return clients[name]

    # Its ceiling on disk: a gateway restarted with its clock behind stamps above it (replication/version.py).
    atomic.private_dir(clock_file.parent)
    clock = HybridClock(origin, ceiling_file=clock_file)  # the gateway's id breaks ties between gateways
    return ClusterBackend(nodes, client_for, factor, dscs, hints=hints, scheme=scheme, clock=clock)


def _stage_profiles():
    """The applications' measured stage costs; a malformed file is reported and not used."""
    from nearfaas.apps.profiles import Profiles, load

    try:
        return load()
    except ValueError as exc:
        print(json.dumps({"event": "profiles-ignored", "error": str(exc)}), flush=True)
        return Profiles()


def _not_intermediates(action: str, bucket: str | None, key: str | None) -> bool:
    """A function key never reaches the intermediates, not even with ``buckets: ["*"]``."""
    return bucket != INTERMEDIATE_BUCKET


def _function_key_resolver(invoker: Invoker, secret: str):
    """S3 keys of deployed functions (each may use only the buckets its spec allows) and of chain
    calls (each may use only its own intermediates; auth/function_keys.py)."""
    from nearfaas.s3.sigv4 import Principal

    def resolve(access: str):
        if (prefix := function_keys.run_prefix(access)) is not None:  # a chain call's own key: its prefix only
            return Principal(f"chain-call key {access}", function_keys.secret_key(secret, access), frozenset({INTERMEDIATE_BUCKET}),
                             authorizer=function_keys.run_authorizer(prefix))
        parsed = function_keys.parse(access)
        state = invoker.functions.get(parsed[0]) if parsed else None
        if state is None or state.spec.get("uid") != parsed[1]:
            return None  # not a function key, or its function is gone (or was redeployed anew)
        return Principal(f"function key {access}", function_keys.secret_key(secret, access), state.options.allowed_buckets(),
                         authorizer=_not_intermediates)

    return resolve


def build_app(layout: dict, state_dir: Path, gateway_id: str = peers.FIRST_ID) -> web.Application:
    own = peers.own_dir(state_dir, gateway_id)  # its clock ceiling and journals (gateway/peers.py)
    atomic.private_dir(own)
    nodes = NodeDirectory([Node(n["name"], n["kind"], n["class"], n["url"]) for n in layout["nodes"]],
                          secret=layout.get("internal_secret"), owner=gateway_id)
    metrics = GatewayMetrics()
    metrics.add_collector(_StoreCollector(nodes))
    connections = GuardCollector("gateway")  # filled in once the gateway listens (serve below)
    metrics.add_collector(connections)
    replication = layout.get("replication", {})
    factor, dscs = int(replication.get("factor", 2)), bool(replication.get("dscs_replica", True))
    scheme = Scheme(replication.get("scheme", "rendezvous"), int(replication.get("scatter_width") or 0) or default_scatter_width(factor))
    invoker = Invoker(nodes, make_policy(layout.get("placement", "near-data")), metrics, factor, dscs,
                      link=get_profile(layout.get("link_profile", "local")), profiled_compute_s=_stage_profiles().for_deployment,
                      scheme=scheme)
    backend = _cluster_backend(nodes, factor, dscs, HintLog(own), scheme, own / "clock", gateway_id)
    invoker.inputs.lister = functools.partial(_object_sizes, backend)
    backend.planner = SelectPlanner(nodes, layout.get("link_profile", "local"), load_models(), metrics.registry)
    anti_entropy = AntiEntropy(backend, backend.repairer, nodes, interval_s=float(replication.get("anti_entropy", 30.0)),
                               tombstone_grace_s=float(replication.get("tombstone_grace", 600.0)),
                               local_buckets=frozenset({INTERMEDIATE_BUCKET}))
    metrics.add_collector(ReplicationCollector(backend, anti_entropy))
    # A node back on an empty disk is not the last word until anti-entropy has refilled it.
    backend.replaced = anti_entropy.replaced = ReplacedStores(state_dir / "gateway" / "stores.json", wake=anti_entropy.wake)
    nodes.on_poll.append(backend.replaced.on_poll)
    chains = ChainRunner(invoker, backend)
    api = OpenFaaSAPI(chains, nodes, metrics, state_dir, int(layout.get("invoke_max_body", 8 * 1024 * 1024)),
                      max_inflight=int(layout.get("gateway_max_inflight", 0)), read_timeout=float(layout.get("read_timeout", 60.0)),
                      fastpath_layout={**layout["fastpath"], "host": layout["host"]} if layout.get("fastpath") else None,
                      handler_roots=layout.get("handler_roots") or [], namespaces=layout.get("namespaces"), journal_dir=own)
    egress = EgressPolicy.from_layout(layout)  # egress_allow and the cluster's own ports
    api.queue.egress = EgressClient(egress)    # async callbacks
    api.fastpath.egress = egress               # fast-path lambdas' external addresses
    auth = key_store = None
    buckets = BucketAccessCache(backend.head_bucket)  # owners and bucket policies (auth/bucket_policy.py)
    if layout.get("auth"):
        from nearfaas.s3.sigv4 import S3Auth

        from nearfaas.auth import keys as access_keys

        # Keys of the keys file, each limited by its policy, reloaded when the file changes (auth/keys.py).
        key_store = access_keys.KeyStore(access_keys.keys_path(layout["auth"], state_dir),
                                         reserved={layout["auth"]["access_key"], INTERNAL_ACCESS_KEY})
        auth = S3Auth({layout["auth"]["access_key"]: layout["auth"]["secret_key"]},
                      resolver=access_keys.resolver(key_store, _function_key_resolver(invoker, layout["internal_secret"]), buckets))
    s3 = S3Frontend(backend, auth=auth, max_body=int(layout.get("s3_max_body", 5 * 1024**3)), on_created=api.object_created,
                    hidden_buckets={INTERMEDIATE_BUCKET}, buckets=buckets)
    s3.transfer = transfer.Server()  # compressed GETs for clients that opt in (bitar/transfer.py)
    metrics.add_collector(BitarCollector(s3.transfer.counters))
    guard = AdminGuard(layout.get("auth"), auth, protected=api.requires_auth)

    app = web.Application(middlewares=[guard.middleware, stamp_calls, api.follow], client_max_size=1024**3)
    app.on_response_prepare.append(on_prepare)
    api.routes(app)
    QueryAPI(backend, nodes).routes(app.router)
    NodeFiles(invoker.functions, state_dir, layout.get("internal_secret")).routes(app.router)  # code and secrets for nodes on other hosts
    # Budgets against floods (spec/budgets.py): per-client calls, answers from workers, webhooks.
    budgets = layout.get("budgets") or {}
    api.invocations.max_per_client = int(budgets.get("max_inflight_per_client", 24))
    if layout.get("auth"):  # per-client budgets by verified identity, else peer address (gateway/client_identity.py)
        api.invocations.identify = functools.partial(identify, guard)
    api.queue.max_bytes = int(budgets.get("async_max_bytes", ASYNC_MAX_BYTES))  # queued async bodies (async_queue.py)
    invoker.pool.workers.max_response = int(budgets.get("max_response", MAX_RESPONSE))
    api.functions.max_scale = int(budgets.get("max_scale", api.functions.max_scale))  # instances one function may have
    invoker.pool.max_per_namespace = int(budgets.get("max_instances_per_namespace", 16))  # ... one namespace's together
    WebhookSink(budgets.get("webhooks") or (), int(budgets.get("webhook_max_names", 64)), int(budgets.get("webhook_keep_bytes", 1 << 20)),
                deployed=lambda: [s.spec for s in invoker.functions.values()],
                authenticate=guard.check if layout.get("auth") else None,
                read_timeout=float(layout.get("read_timeout", 60.0)),
                total_bytes=int(budgets.get("webhook_total_bytes", 64 << 20))).routes(app)
    if key_store is not None:  # /system/keys: the keys file over the admin API (gateway/keys_api.py)
        KeysAPI(key_store.path, set(key_store.reserved)).routes(app)
    # Any other /system path is the OpenFaaS API's 404, not the S3 handler's (system is a reserved
    # bucket name): a client of a newer OpenFaaS endpoint is told what exists, not about SigV4.
    app.router.add_route("*", "/system/{tail:.*}", unknown_system_path)
    s3.mount(app)

    located = None
    if layout.get("backend") == "ray":  # no static port list: Ray says where each node is (gateway/ray_nodes.py)
        from nearfaas.gateway.ray_nodes import RayNodes

        located = RayNodes(nodes, layout["ray"]["address"], layout["ray"]["namespace"])

    owner_lock = peers.OwnerLock(own)
    watch = None
    if len(gateways := [g["id"] for g in layout.get("gateways") or ()]) > 1:
        def queue_for(folder: Path):
            queue = AsyncQueue(api.queue.calls, metrics, folder, egress=EgressClient(egress))
            queue.max_bytes = api.queue.max_bytes
            return queue

        watch = peers.PeerWatch(state_dir, gateway_id, gateways, backend.hints, backend.clock, queue_for,
                                invoker.pool.stop_workers_of)
        # What the others owe counts for reads here: a write acknowledged through one of them with a
        # replica down is not read older through this one (fault injection, issue 43).
        backend.hints.peers = [HintTail(peers.own_dir(state_dir, p)) for p in gateways if p != gateway_id]
        api.functions.shared_scale = SharedScale(state_dir / "gateway" / "scale.json", gateways.index(gateway_id), len(gateways))

    async def startup(app):
        # Its journals are its own only once it holds their lock: a peer may still be running them.
        await owner_lock.acquire(on_wait=lambda: print(json.dumps({"event": "waiting-for-adopter", "gateway": gateway_id}),
                                                        flush=True))
        if located is not None:
            located.connect()  # blocking (about a second), before the gateway serves; Ray wants its main thread
            await located.locate_all()
        await nodes.start()
        backend.hints.load()  # what replicas were owed when the gateway last stopped
        backend.clock.observe(backend.hints.newest_version())  # owed versions may sit only on nodes that are down
        if watch is not None and 0 < (lead := backend.clock.lead_s()) <= 2 * RESERVE_MS / 1000:
            # Restarted from its ceiling, ahead of the wall clock its peers stamp by: wait the lead
            # out, or its next writes would order above their later ones (replication/version.py).
            await asyncio.sleep(lead)
        await api.restore()
        loop = asyncio.get_running_loop()
        app["background"] = [loop.create_task(invoker.reap_idle_forever()),
                             loop.create_task(Autoscaler(invoker.pool, metrics.registry).run_forever()),
                             loop.create_task(replay_forever(backend.hints, nodes, backend.repairer)),
                             loop.create_task(anti_entropy.run_forever())]
        if located is not None:
            app["background"].append(loop.create_task(located.run_forever()))
        if watch is not None:
            app["background"].append(loop.create_task(watch.run_forever()))
        app["background"].append(loop.create_task(api.follow_forever()))  # the other gateways' changes

    async def cleanup(app):
        for task in app["background"]:
            task.cancel()
        await asyncio.gather(*app["background"], return_exceptions=True)
        await backend.hints.close()
        await api.queue.stop()
        await api.fastpath.stop()
        await nodes.stop()
        s3.transfer.close()
        owner_lock.release()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app["invoker"], app["nodes"], app["api"], app["connections"] = invoker, nodes, api, connections
    return app


async def unknown_system_path(request: web.Request) -> web.Response:
    return error(404, f"{request.method} {request.path} is not part of this gateway's /system API; "
                      "GET /system/openapi.json lists what is")


async def serve(args) -> None:
    state_dir = Path(args.state)
    layout = json.loads((state_dir / "cluster.json").read_text())
    app = build_app(layout, state_dir, args.id)
    me = next((g for g in layout.get("gateways") or () if g["id"] == args.id), {"port": layout["gateway_port"], "url": layout["gateway_url"]})
    # Bodies pass as sent: an S3 PUT with Content-Encoding: gzip is stored as those bytes (S3's
    # semantics), and a Bitar-compressed one is decoded by the S3 frontend (bitar/transfer.py).
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=KEEPALIVE_TIMEOUT_S,
                           auto_decompress=False)
    await runner.setup()
    # A connection cap and a deadline for each connection's first request (serving.py).
    server, guard = await serve_guarded(runner, layout["host"], me["port"], backlog=2048, name="gateway",
                                        max_connections=int(layout.get("max_connections", MAX_CONNECTIONS)))
    app["connections"].guard = guard
    balancer_way = await serve_unix(runner, me["socket"], guard) if me.get("socket") else None  # HAProxy's (cluster/balancer.py)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"event": "ready", "gateway": me["url"], "id": args.id, "pid": os.getpid()}), flush=True)  # last: launcher.said_ready
    await stop.wait()
    # Running async calls may still use the gateway (their functions' S3 calls): let them finish
    # (or hand them back to the journal) before the listener closes.
    await app["api"].queue.drain()
    server.close()
    if balancer_way is not None:
        balancer_way.close()
    await runner.cleanup()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="nearfaas gateway (started by `nearfaas up`)")
    parser.add_argument("--state", required=True, help="state directory holding cluster.json")
    parser.add_argument("--id", default=peers.FIRST_ID, help="which of the cluster's gateways this is (cluster.json's gateways)")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
