"""The cluster on Ray (``backend: ray``, ``nearfaas up --ray ADDRESS|auto``; docs/ray.md).

The gateway and every node run as named, detached actors of one Ray namespace
(cluster/ray_actors.py): Ray places each by a custom resource, restarts it when it dies and
tells the gateway and the CLI where it is. Nothing else changes: the HTTP/S3 endpoints, the
placement policy and the nodes' code are the local backend's, and Ray is never on a call's path
(the gateway asks Ray where its nodes are in the background, gateway/ray_nodes.py).

``up`` checks before it creates anything, so a failure names its cause:
1. Ray is reachable (nearfaas.fanout.connect; ``auto`` joins the running cluster, never a new
   local one: a cluster's nodes must outlive this command). A Ray GCS must answer at the address
   (for ``auto``: RAY_ADDRESS, else Ray's ray_current_cluster record) within seconds, else the
   error names the address, where it came from and `ray start --head` / ``--ray HOST:PORT``:
   ray.init itself would retry a dead one (a record left by a killed cluster) for minutes;
2. no actor of the namespace already has one of our names (another cluster, or this one still
   up): the error names the state dir that owns it;
3. every resource the nodes need is offered, by enough units, somewhere in the Ray cluster.
Then the gateway actor starts (on the resource ``ray.gateway_resource``, else on this host), then
every node actor, each told the gateway's URL; ``up`` returns when all of them answer.

Known caveats:
- ``up`` writes the layout to the local state dir as for the local backend (the CLI's commands
  read it), with the namespace and Ray's address: ``down`` and ``status`` need Ray to reach the
  actors; with Ray gone they say so.
- The fast-path executor is not started under Ray (it would need a host of its own to bind);
  ``fastpath.enabled: true`` is refused.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from nearfaas.spec.cluster import ClusterSpec
from nearfaas.spec.ray import node_resource

GATEWAY = "gateway"
UP_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 10.0


class RayClusterError(Exception):
    pass


def namespace_for(spec: ClusterSpec, state_dir: Path) -> str:
    return spec.ray.namespace or "nearfaas-" + hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


def connect(address: str):
    from nearfaas.fanout import FanoutError, connect as join

    try:
        return join(address, option="--ray", auto_local=False, quiet=True)
    except FanoutError as exc:
        raise RayClusterError(str(exc)) from None


def _actor(ray, name: str, namespace: str):
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def _describe(ray, actor, timeout: float = CALL_TIMEOUT_S) -> dict | None:
    try:
        return ray.get(actor.describe.remote(), timeout=timeout)
    except Exception:  # restarting, dead or slow: the caller says which it needs
        return None


def _check_free(ray, names: list[str], namespace: str) -> None:
    for name in names:
        actor = _actor(ray, name, namespace)
        if actor is not None:
            info = _describe(ray, actor) or {}
            owner = info.get("owner") or "an unknown state dir"
            raise RayClusterError(f"the Ray namespace {namespace!r} already has an actor named {name!r} (a cluster started from "
                                  f"{owner}); stop that cluster with `nearfaas down --state {owner}`, or give this one another "
                                  f"`ray.namespace` in its cluster file")


def _check_resources(ray, spec: ClusterSpec) -> None:
    offered = ray.cluster_resources()
    needed: dict[str, list[str]] = {}
    for node in spec.nodes:
        needed.setdefault(node_resource(node.kind, node.cls, node.ray_resource), []).append(node.name)
    if spec.ray.gateway_resource:
        needed.setdefault(spec.ray.gateway_resource, []).append(GATEWAY)
    for resource, names in needed.items():
        if offered.get(resource, 0) < len(names):
            raise RayClusterError(
                f"no Ray node offers enough of the resource {resource!r} ({len(names)} needed, by {', '.join(names)}; "
                f"{offered.get(resource, 0):g} offered). Start a raylet on the host that should hold them with "
                f"`ray start --address=<head> --resources='{{\"{resource}\": {len(names)}}}'`, or name another resource in "
                f"nodes[].ray_resource / ray.gateway_resource")


def up(spec: ClusterSpec, state_dir: Path, address: str, layout: dict, on_step=lambda message: None) -> dict:
    """Start the cluster's actors; ``layout`` is the launcher's common layout, completed here."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from nearfaas.cluster.ray_actors import remote_class

    if spec.fastpath.enabled == "true":
        raise RayClusterError("fastpath.enabled: true is not supported with backend: ray (the fast path runs on one host); "
                              "set fastpath.enabled: auto or false")
    on_step(f"joining the Ray cluster at {address}")
    ray = connect(address)
    namespace = namespace_for(spec, state_dir)
    names = [GATEWAY] + [n.name for n in spec.nodes]
    _check_free(ray, names, namespace)
    _check_resources(ray, spec)
    layout.update(backend="ray", ray={"address": ray.get_runtime_context().gcs_address, "namespace": namespace,
                                      "data_dir": spec.ray.data_dir}, fastpath=None)
    config = {"data_dir": spec.ray.data_dir, "owner": str(state_dir)}
    actor = remote_class()
    common = {"namespace": namespace, "lifetime": "detached", "max_restarts": -1, "num_cpus": 0}
    if spec.ray.gateway_resource:
        placed = {"resources": {spec.ray.gateway_resource: 1}}
    else:  # this host: the one the user runs the CLI on and will reach the gateway from
        placed = {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)}
    gateway_layout = dict(layout, nodes=[dict(n, url="") for n in layout["nodes"]])
    on_step(f"starting the gateway actor (namespace {namespace})")
    gateway = actor.options(name=GATEWAY, **common, **placed).remote(
        "gateway", GATEWAY, namespace, dict(config, layout=gateway_layout, port=spec.gateway.port))
    info = _await_ready(ray, gateway, GATEWAY)
    layout.update(gateway_url=info["url"], gateway_port=int(info["url"].rsplit(":", 1)[1]), host=info["host"])
    handles = []
    for node_spec, node in zip(spec.nodes, layout["nodes"], strict=True):
        resource = node_resource(node_spec.kind, node_spec.cls, node_spec.ray_resource)
        on_step(f"starting {node['kind']} node {node['name']} on a Ray node offering {resource}")
        node_layout = dict(layout, nodes=[node])
        handles.append((node, actor.options(name=node["name"], resources={resource: 1}, **common).remote(
            "node", node["name"], namespace, dict(config, layout=node_layout, node=node, port=node_spec.port))))
    for node, handle in handles:
        info = _await_ready(ray, handle, node["name"])
        node.update(url=info["url"], port=int(info["url"].rsplit(":", 1)[1]), ray_node_id=info["ray_node_id"])
        on_step(f"{node['name']} is ready at {info['url']} (Ray node {info['ray_node_id'][:12]})")
    on_step("waiting for the gateway to find every node through Ray")
    _await_located(layout)
    return layout


def _await_located(layout: dict) -> None:
    """Until the gateway reports every node healthy: it learns their addresses from Ray in the
    background, and a client's first call must not find them still unknown."""
    import json

    from nearfaas.cluster.launcher import _get, admin_headers

    deadline = time.monotonic() + UP_TIMEOUT_S
    waiting: list = []
    while time.monotonic() < deadline:
        try:
            nodes = json.loads(_get(f"{layout['gateway_url']}/system/nodes", timeout=5, headers=admin_headers(layout)))
            waiting = [n["name"] for n in nodes if not n.get("healthy")]
            if not waiting:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise RayClusterError(f"the gateway did not find {', '.join(waiting) or 'its nodes'} through Ray within {UP_TIMEOUT_S:g}s; "
                          f"see its log under the gateway actor's folder")


def _await_ready(ray, handle, name: str) -> dict:
    """Until the actor's constructor returned (its process answers), or why it cannot."""
    ref = handle.describe.remote()
    try:
        ready, _ = ray.wait([ref], timeout=UP_TIMEOUT_S)
        if not ready:
            raise RayClusterError(f"{name} did not start within {UP_TIMEOUT_S:g}s (is its resource free? `ray status` shows "
                                  f"what each Ray node offers and uses)")
        return ray.get(ref)
    except RayClusterError:
        raise
    except Exception as exc:  # the constructor raised: its message says why (a port, a missing tool)
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise RayClusterError(f"{name} could not start: {lines[-1] if lines else exc}") from None


def describe_all(layout: dict) -> dict[str, dict | None]:
    """Each actor's answer (None: not there, restarting or not answering)."""
    ray = connect(layout["ray"]["address"])
    namespace = layout["ray"]["namespace"]
    out = {}
    for name in [GATEWAY] + [n["name"] for n in layout["nodes"]]:
        actor = _actor(ray, name, namespace)
        out[name] = _describe(ray, actor, 5.0) if actor is not None else None
    return out


def down(layout: dict) -> int:
    """Stop the gateway, then every node (each stops its processes), then remove the actors."""
    ray = connect(layout["ray"]["address"])
    namespace = layout["ray"]["namespace"]
    stopped = 0
    for name in [GATEWAY] + [n["name"] for n in layout["nodes"]]:
        actor = _actor(ray, name, namespace)
        if actor is None:
            continue
        try:
            stopped += ray.get(actor.stop.remote(), timeout=60)
        except Exception:  # restarting or hung: killing the actor kills its process (PR_SET_PDEATHSIG)
            pass
        ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_actor(ray, n, namespace) is not None for n in [GATEWAY] + [n["name"] for n in layout["nodes"]]):
        time.sleep(0.2)
    return stopped
