"""The cluster file's ``backend`` and ``ray`` block: where the cluster's processes run.

``backend: local`` (the default) starts the gateway and every node as processes on this host.
``backend: ray`` (or ``nearfaas up --ray ADDRESS``) runs each of them as a named, detached Ray
actor (cluster/ray_backend.py, docs/ray.md)::

    backend: ray
    ray:
      address: auto              # or host:port of the Ray head's GCS; auto: the running cluster
      namespace: ""              # "" = nearfaas-<hash of the state dir>: one cluster per namespace
      data_dir: ~/.nearfaas/ray  # per host: each actor keeps its node's objects here (NEARFAAS_RAY_DATA overrides)
      gateway_resource: ""       # a custom resource the gateway's host offers; "" = the host running `nearfaas up`
    nodes:
      - {name: storage-0, kind: storage, class: dscs}            # needs a Ray node offering nearfaas_storage_dscs
      - {name: storage-1, kind: storage, class: standard}        # ... nearfaas_storage
      - {name: compute-0, kind: compute, class: cpu, ray_resource: gpu_box}   # ... a resource named here

A node is scheduled on a Ray node that offers one unit of its custom resource: by default
``nearfaas_storage_dscs`` for a dscs storage node, ``nearfaas_storage`` for a standard one and
``nearfaas_compute`` for a compute node (``ray start --resources '{"nearfaas_storage": 1}'``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import Collector, check_unknown_keys, join_path, read_mapping, short_repr

BACKENDS = ("local", "ray")
RAY_KEYS = {"address", "namespace", "data_dir", "gateway_resource"}
DEFAULT_RESOURCES = {("storage", "dscs"): "nearfaas_storage_dscs", ("storage", "standard"): "nearfaas_storage",
                     ("compute", "cpu"): "nearfaas_compute"}
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}$")


@dataclass
class RaySpec:
    address: str = "auto"
    namespace: str = ""
    data_dir: str = "~/.nearfaas/ray"
    gateway_resource: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "namespace": self.namespace, "data_dir": self.data_dir,
                "gateway_resource": self.gateway_resource}


def node_resource(kind: str, cls: str, override: str | None) -> str:
    """The custom resource a node's actor needs one unit of."""
    return override or DEFAULT_RESOURCES[(kind, cls)]


def parse_backend(value: Any, c: Collector) -> str:
    if value is None:
        return "local"
    if value not in BACKENDS:
        c.error("backend", f"must be local or ray, got {short_repr(value)}",
                "write backend: local (processes on this host) or backend: ray (actors on a Ray cluster)")
        return "local"
    return value


def parse_ray(value: Any, c: Collector) -> RaySpec:
    spec = RaySpec()
    m = read_mapping(value, "ray", c)
    if m is None:
        return spec
    check_unknown_keys(m, RAY_KEYS, "ray", c, error=True)
    for key in RAY_KEYS:
        if key not in m:
            continue
        v = m[key]
        if not isinstance(v, str) or "\0" in v or (key != "namespace" and key != "gateway_resource" and not v.strip()):
            c.error(join_path("ray", key), f"must be a string, got {short_repr(v)}", f"write e.g. {key}: {getattr(spec, key) or 'nearfaas-demo'}")
            continue
        v = v.strip()
        if key in ("namespace", "gateway_resource") and v and not _NAME.match(v):
            c.error(join_path("ray", key), f"{short_repr(v)} has characters Ray names cannot hold",
                    "use letters, digits, '-', '_', '.' or ':' (at most 128)")
            continue
        setattr(spec, key, v)
    return spec


def check_resource(value: Any, path: str, c: Collector) -> str | None:
    """A node's ``ray_resource`` override."""
    if value is None:
        return None
    if not isinstance(value, str) or not _NAME.match(value):
        c.error(path, f"must be the name of a Ray custom resource, got {short_repr(value)}",
                "write e.g. ray_resource: nearfaas_storage (what `ray start --resources` offers on the node's host)")
        return None
    return value
