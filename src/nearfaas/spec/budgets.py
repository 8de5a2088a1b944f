"""The gateway's budgets against floods, as the cluster file sets them (``gateway:``):

    max_inflight_per_client: 24   calls one client has open at once, body reading included; a client
                                  is a verified identity (admin basic auth, a SigV4 key) or else a
                                  peer address; 0 = no per-client cap (gateway/api/invoke.py)
    async_max_bytes: 256Mi        bodies of queued async calls held at once, all clients; one client
                                  may hold a quarter of it; 0 = no cap (gateway/async_queue.py)
    max_response: 32Mi            largest answer the gateway takes from a worker (gateway/worker_client.py)
    webhooks: [alerts]            webhook names open to posts without credentials (gateway/webhooks.py)
    webhook_max_names: 64         undeclared webhook names the sink keeps at once
    webhook_keep_bytes: 1Mi       events kept per webhook name, newest first
    webhook_total_bytes: 64Mi     events kept by every name together (declared ones too), oldest dropped first
    max_scale: 16                 instances one function may have (its com.openfaas.scale.max and
                                  scale.min are the deployer's wish under this ceiling): one function
                                  must not take a node's every worker slot from the others
    max_instances_per_namespace: 16   instances the functions of one tenant namespace may have on
                                  one node, running or starting (a start past it is a 429 for that
                                  namespace's call; scale.min floors over it are a 400 at deploy); the
                                  default namespace (the operator's) is not capped; 0 = no cap: two
                                  functions at max_scale took a node's every slot (gateway/instances.py)

Kept apart from spec/cluster.py (which holds the fields' defaults in ``GatewaySpec``) so that
module stays one screenful per section; docs/security.md says what each budget defends.
"""

from __future__ import annotations

from typing import Any

from .errors import Collector
from .fields import read_int as _int, read_names, read_sizes

KEYS = {"max_inflight_per_client", "async_max_bytes", "max_response", "webhooks", "webhook_max_names", "webhook_keep_bytes",
        "webhook_total_bytes", "max_scale", "max_instances_per_namespace"}


def budgets_dict(g) -> dict[str, Any]:
    return {"max_inflight_per_client": g.max_inflight_per_client, "async_max_bytes": g.async_max_bytes, "max_response": g.max_response, "webhooks": list(g.webhooks),
            "webhook_max_names": g.webhook_max_names, "webhook_keep_bytes": g.webhook_keep_bytes, "webhook_total_bytes": g.webhook_total_bytes, "max_scale": g.max_scale,
            "max_instances_per_namespace": g.max_instances_per_namespace}


def read_budgets(m: dict[str, Any], g, c: Collector) -> None:
    g.max_inflight_per_client = _int(m, "max_inflight_per_client", "gateway", c, g.max_inflight_per_client, 0, None,
                                     "24 (0 means no per-client cap)")
    g.webhook_max_names = _int(m, "webhook_max_names", "gateway", c, g.webhook_max_names, 0, None, "64")
    g.max_scale = _int(m, "max_scale", "gateway", c, g.max_scale, 1, None, "16")
    g.max_instances_per_namespace = _int(m, "max_instances_per_namespace", "gateway", c, g.max_instances_per_namespace, 0, None,
                                         "16 (0 means no cap)")
    read_sizes(m, ("max_response", "webhook_keep_bytes", "webhook_total_bytes", "async_max_bytes"), g, "gateway", c, '"32Mi" or "1Mi"',
               zero_ok=("async_max_bytes",))  # async_max_bytes: 0 = no cap
    if "webhooks" in m:
        g.webhooks = read_names(m["webhooks"], "gateway.webhooks", c, "webhook", "alerts")
