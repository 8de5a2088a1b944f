"""Cluster spec: which node processes to start on this machine and how they cooperate.

The defaults fit a 2-core box: one gateway, two storage nodes (one with the DSCS
computational-storage class, one standard) and one compute node, each with two workers.
`default_cluster.yml` beside this module documents every field and loads to exactly these
defaults. Unlike stack.yml this file is ours alone, so unknown keys are errors (a typo must
not silently fall back to a default), except under `link:`, which is kept open for later use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nearfaas.link.profiles import PROFILES
from nearfaas.placement.policy import POLICIES
from nearfaas.placement.copysets import check_scatter_width, default_scatter_width
from nearfaas.placement.replicas import SCHEMES

from .budgets import KEYS as BUDGET_KEYS, budgets_dict, read_budgets
from .fastpath import FastpathSpec, read_fastpath
from .fields import NAME as _NAME, read_int as _int, read_sizes, read_str as _str
from .ray import RaySpec, check_resource, parse_backend, parse_ray
from .errors import (Collector, Problem, SpecError, check_unknown_keys, join_path, load_yaml_text, parse_bool,
                     parse_duration, parse_memory, read_mapping, read_str_list, read_text_file, short_repr,
                     type_name)

MiB = 1024**2
GiB = 1024**3
DEFAULT_CLUSTER_FILE = Path(__file__).with_name("default_cluster.yml")
NODE_KINDS = ("storage", "compute")
NODE_CLASSES = ("dscs", "standard", "cpu")
# Which classes make sense for which kind: DSCS and standard are storage hardware; a compute
# node has only CPUs. Rejecting the other pairings catches swapped `kind`/`class` values.
CLASSES_FOR_KIND = {"storage": ("dscs", "standard"), "compute": ("cpu",)}
PLACEMENT_POLICIES = tuple(POLICIES)

MAX_GATEWAYS = 8
TOP_KEYS = {"state_dir", "host", "gateway", "nodes", "replication", "placement", "auth", "link", "fastpath", "isolation", "backend", "ray"}
GATEWAY_KEYS = {"port", "s3_max_body", "invoke_max_body", "max_inflight", "read_timeout", "handler_roots", "namespaces",
                "egress_allow", "replicas"}
GATEWAY_KEYS |= BUDGET_KEYS  # budgets against floods (spec/budgets.py)
NODE_KEYS = {"name", "kind", "class", "cls", "port", "workers_max", "prewarm", "cpus", "workers_memory", "ray_resource"}
REPLICATION_KEYS = {"factor", "dscs_replica", "anti_entropy", "tombstone_grace", "scheme", "scatter_width"}
AUTH_KEYS = {"access_key", "secret_key", "region", "keys_file"}


@dataclass
class GatewaySpec:
    port: int = 8080                 # 0 = pick a free port (tests run several clusters at once)
    # Gateway processes; past 1, HAProxy listens on `port` and spreads clients over them, each on
    # a port of its own (docs/replication.md, "Many gateways").
    replicas: int = 1
    s3_max_body: int = 5 * GiB       # largest single PUT, as in S3
    invoke_max_body: int = 8 * MiB   # largest /function/ request body; big data goes by object reference
    max_inflight: int = 32           # invocations forwarded at once, all functions together; 0 = unlimited
    read_timeout: float = 60.0       # seconds to wait for a client's request body
    max_inflight_per_client: int = 24  # budgets against floods: spec/budgets.py says what each is
    async_max_bytes: int = 256 * MiB  # queued async bodies held in memory; 0 = no cap
    max_response: int = 32 * MiB
    webhooks: list[str] = field(default_factory=list)
    webhook_max_names: int = 64
    webhook_keep_bytes: int = 1 * MiB
    webhook_total_bytes: int = 64 * MiB
    max_scale: int = 16
    max_instances_per_namespace: int = 16
    # Folders a deployment may name its handler under (a copy is deployed); empty: code comes
    # only as an uploaded bundle, which is what `nearfaas deploy` sends (spec/bundle.py).
    handler_roots: list[str] = field(default_factory=list)
    # OpenFaaS function namespaces; the first is the default (what a call that names none uses).
    namespaces: list[str] = field(default_factory=lambda: ["openfaas-fn"])
    # Destinations on loopback, private ranges or the cluster's own ports that requests on a
    # caller's behalf (async callbacks) may reach: "host", "address" or "host:port" (egress.py).
    egress_allow: list[str] = field(default_factory=list)


@dataclass
class NodeSpec:
    name: str
    kind: str                        # "storage" holds objects; "compute" only runs functions
    cls: str                         # "dscs" | "standard" (storage) or "cpu" (compute); YAML key `class`
    port: int = 0                    # 0 = pick a free port
    workers_max: int = 32            # function worker processes this node may run at once (~30 MB each)
    prewarm: int = 1                 # idle pre-warmed generic workers kept to cut cold starts; 0 = off
    # CPU capacity of the whole node (its agent, its queries, its workers), in cores; None = the
    # machine's. A storage node weaker than the compute node, as the thesis's SmartNIC is
    # (node/capacity.py enforces it with a cgroup CPU quota).
    cpus: float | None = None
    # Memory all its workers together may hold (their pages, /tmp tmpfs included), in bytes; None:
    # 3/4 of the host's memory shared evenly among the cluster's nodes (cluster/launcher.py). Past
    # it the kernel stops a worker of this node, never the gateway or another node.
    workers_memory: int | None = None
    ray_resource: str | None = None  # backend: ray: the custom resource its host offers (spec/ray.py has the defaults)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "class": self.cls, "port": self.port,
                "workers_max": self.workers_max, "prewarm": self.prewarm, "cpus": self.cpus,
                **({"workers_memory": self.workers_memory} if self.workers_memory else {}),
                **({"ray_resource": self.ray_resource} if self.ray_resource else {})}


@dataclass
class ReplicationSpec:
    factor: int = 2                  # copies of every object, on distinct storage nodes
    dscs_replica: bool = True        # one copy must sit on a dscs node so DSCS functions can run there
    anti_entropy: float = 30.0       # seconds between anti-entropy passes (replication/antientropy.py)
    tombstone_grace: float = 600.0   # seconds a delete is remembered after every replica has it
    scheme: str = "rendezvous"       # or "copyset" (placement/copysets.py): fewer node sets share objects
    scatter_width: int = 0           # copyset: other nodes a node's data may go to; 0 = 2 * (factor - 1)

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "dscs_replica": self.dscs_replica, "anti_entropy": self.anti_entropy,
                "tombstone_grace": self.tombstone_grace, "scheme": self.scheme, "scatter_width": self.scatter_width}

    @property
    def effective_scatter_width(self) -> int:
        return self.scatter_width or default_scatter_width(self.factor)


@dataclass
class AuthSpec:
    access_key: str
    secret_key: str = field(repr=False)  # kept out of repr so it does not end up in logs
    region: str = "us-east-1"            # SigV4 signing region clients must use
    generated: bool = False              # keys made by `nearfaas up` (kept in cluster.json), none given
    keys_file: str = ""                  # more keys, each with a policy (auth/keys.py); "" = <state>/keys.yml


def generated_auth() -> AuthSpec:
    """The default: the cluster makes its own random keys at `nearfaas up` (auth is on)."""
    return AuthSpec("", "", generated=True)


@dataclass
class LinkSpec:
    profile: str = "local"           # placeholder: how nodes reach each other ("local" = loopback)
    options: dict[str, Any] = field(default_factory=dict)  # other keys, kept for later use


#: The default storage nodes' CPU capacity: weaker than the compute node (which has the machine),
#: as the thesis's SmartNIC is weaker than its host (issue 17, "Node classes").
DEFAULT_STORAGE_CPUS = 0.5


def default_nodes() -> list[NodeSpec]:
    return [NodeSpec("storage-0", "storage", "dscs", cpus=DEFAULT_STORAGE_CPUS),
            NodeSpec("storage-1", "storage", "standard", cpus=DEFAULT_STORAGE_CPUS),
            NodeSpec("compute-0", "compute", "cpu")]


@dataclass
class ClusterSpec:
    state_dir: str = ".nearfaas"     # relative paths are taken from the working directory
    host: str = "127.0.0.1"          # every process binds here; loopback keeps the cluster private
    gateway: GatewaySpec = field(default_factory=GatewaySpec)
    nodes: list[NodeSpec] = field(default_factory=default_nodes)
    replication: ReplicationSpec = field(default_factory=ReplicationSpec)
    placement: str = "near-data"     # gateway placement policy, one of PLACEMENT_POLICIES
    # Keys for SigV4 and the /system API. The default makes random ones at `up`; None is the
    # unsigned local mode, an explicit opt-in (`auth: off`) for demos on a private machine.
    auth: AuthSpec | None = field(default_factory=generated_auth)
    isolation: bool = True           # workers unprivileged, in their own mount view; off only by choice (unsafe)
    link: LinkSpec = field(default_factory=LinkSpec)
    fastpath: FastpathSpec = field(default_factory=FastpathSpec)
    backend: str = "local"           # local: processes on this host; ray: detached Ray actors (spec/ray.py)
    ray: RaySpec = field(default_factory=RaySpec)

    @property
    def storage_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.kind == "storage"]

    @property
    def compute_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.kind == "compute"]

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def state_path(self, base: Path | None = None) -> Path:
        """state_dir as an absolute path, relative ones taken from `base` or the cwd."""
        return ((base or Path.cwd()) / self.state_dir).resolve()

    def to_dict(self) -> dict[str, Any]:
        """The same shape as the YAML file, so `from_dict(to_dict())` re-validates it."""
        g = self.gateway
        return {
            "state_dir": self.state_dir, "host": self.host,
            "gateway": {**budgets_dict(g), "port": g.port, "replicas": g.replicas, "s3_max_body": g.s3_max_body, "invoke_max_body": g.invoke_max_body,
                        "max_inflight": g.max_inflight, "read_timeout": g.read_timeout, "handler_roots": list(g.handler_roots),
                        "namespaces": list(g.namespaces), "egress_allow": list(g.egress_allow)},
            "nodes": [n.to_dict() for n in self.nodes],
            "replication": self.replication.to_dict(),
            "placement": self.placement,
            "auth": "off" if self.auth is None else _auth_dict(self.auth),
            "isolation": "on" if self.isolation else "off",
            "link": {**self.link.options, "profile": self.link.profile},
            "fastpath": {"enabled": self.fastpath.enabled, "workers": self.fastpath.workers, "sched": self.fastpath.sched,
                         "queue_depth": self.fastpath.queue_depth, "pin": self.fastpath.pin, "poll": self.fastpath.poll,
                         "slice_us": self.fastpath.slice_us, "tcp_idle_ms": self.fastpath.tcp_idle_ms,
                         "max_connections_per_peer": self.fastpath.max_connections_per_peer,
                         "max_weight": self.fastpath.max_weight, "max_timeout_ms": self.fastpath.max_timeout_ms,
                         "memory": self.fastpath.memory, "max_functions_per_namespace": self.fastpath.max_functions_per_namespace},
            "backend": self.backend, "ray": self.ray.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> ClusterSpec:
        return parse_cluster(data)


# ---------------------------------------------------------------- field readers

def _gateway(value: Any, c: Collector) -> GatewaySpec:
    g = GatewaySpec()
    m = read_mapping(value, "gateway", c)
    if m is None:
        return g
    check_unknown_keys(m, GATEWAY_KEYS, "gateway", c, error=True)
    g.port = _int(m, "port", "gateway", c, g.port, 0, 65535, "8080 (0 picks a free port)")
    g.max_inflight = _int(m, "max_inflight", "gateway", c, g.max_inflight, 0, None, "32 (0 means unlimited)")
    g.replicas = _int(m, "replicas", "gateway", c, g.replicas, 1, MAX_GATEWAYS, "1, or 2-8 behind HAProxy")
    read_sizes(m, ("s3_max_body", "invoke_max_body"), g, "gateway", c, '"5Gi" or "8Mi"')
    if "read_timeout" in m:
        try:
            g.read_timeout = parse_duration(m["read_timeout"])
            if g.read_timeout <= 0:
                raise ValueError("must be more than zero")
        except ValueError as exc:
            c.error("gateway.read_timeout", f"bad duration {short_repr(m['read_timeout'])}: {exc}",
                    'write e.g. "60s", "1m30s" or a number of seconds')
    read_budgets(m, g, c)
    if "handler_roots" in m:
        roots = read_str_list(m["handler_roots"], "gateway.handler_roots", c, allow_single=True) or []
        for i, root in enumerate(roots):
            if not Path(root).is_absolute():
                c.error(join_path("gateway.handler_roots", i), f"{short_repr(root)} is not an absolute path",
                        "list absolute folders, e.g. /srv/functions")
        g.handler_roots = [str(Path(r).resolve()) for r in roots if Path(r).is_absolute()]
    if "namespaces" in m:
        names = read_str_list(m["namespaces"], "gateway.namespaces", c, allow_single=True) or []
        for i, name in enumerate(names):
            if not _NAME.fullmatch(name):
                c.error(join_path("gateway.namespaces", i), f"{short_repr(name)} is not a namespace name",
                        "use lower-case letters, digits and '-', e.g. openfaas-fn or team-a")
        if not names:
            c.error("gateway.namespaces", "is empty", "list at least one namespace; the first is the default, e.g. [openfaas-fn]")
        elif len(set(names)) != len(names):
            c.error("gateway.namespaces", "names a namespace twice", "list each namespace once")
        else:
            g.namespaces = names
    if "egress_allow" in m:
        from nearfaas.egress import parse_allow_entry

        entries = read_str_list(m["egress_allow"], "gateway.egress_allow", c, allow_single=True) or []
        for i, entry in enumerate(entries):
            try:
                parse_allow_entry(entry)
            except ValueError as exc:
                c.error(join_path("gateway.egress_allow", i), str(exc),
                        'write a host, an address or host:port, e.g. "hooks.example.com" or "127.0.0.1:8099"')
        g.egress_allow = list(entries)
    return g


def _node(value: Any, path: str, c: Collector) -> NodeSpec | None:
    before = len(c.problems)
    m = read_mapping(value, path, c)
    if m is None or not m:
        if m is not None:
            c.error(path, "a node needs at least name, kind and class", "write {name: storage-2, kind: storage, "
                    "class: standard}")
        return None
    check_unknown_keys(m, NODE_KEYS, path, c, error=True)
    name = m.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        what = "is missing" if name is None else f"{short_repr(name)} is not a valid node name"
        c.error(join_path(path, "name"), what, "use lowercase letters, digits and '-', e.g. storage-2")
    kind = m.get("kind")
    if not isinstance(kind, str) or kind not in NODE_KINDS:
        c.error(join_path(path, "kind"), f"must be one of {', '.join(NODE_KINDS)}, got {short_repr(kind)}",
                "write kind: storage or kind: compute")
    if "class" in m and "cls" in m:
        c.error(join_path(path, "cls"), "give either class or cls, not both", "keep `class:`")
    ckey = "cls" if "cls" in m and "class" not in m else "class"
    cls = m.get(ckey)
    if not isinstance(cls, str) or cls not in NODE_CLASSES:
        c.error(join_path(path, ckey), f"must be one of {', '.join(NODE_CLASSES)}, got {short_repr(cls)}",
                "storage nodes are dscs or standard; compute nodes are cpu")
    elif isinstance(kind, str) and kind in CLASSES_FOR_KIND and cls not in CLASSES_FOR_KIND[kind]:
        c.error(join_path(path, ckey), f"a {kind} node cannot be class {cls}",
                f"use class: {' or '.join(CLASSES_FOR_KIND[kind])}")
    port = _int(m, "port", path, c, 0, 0, 65535, "0 (picks a free port)")
    workers = _int(m, "workers_max", path, c, 32, 1, None, "32")
    prewarm = _int(m, "prewarm", path, c, 1, 0, None, "1 (0 turns pre-warming off)")
    if prewarm > workers:  # idle generic workers beyond what the node may ever run would only hold memory
        c.error(join_path(path, "prewarm"), f"must not exceed workers_max ({workers}), got {prewarm}",
                f"lower prewarm to at most {workers} or raise workers_max")
    cpus = _cpus(m, path, c)
    workers_memory = _workers_memory(m, path, c)
    ray_resource = check_resource(m.get("ray_resource"), join_path(path, "ray_resource"), c)
    if len(c.problems) != before:
        return None
    return NodeSpec(name=str(name), kind=str(kind), cls=str(cls), port=port, workers_max=workers, prewarm=prewarm, cpus=cpus,
                    workers_memory=workers_memory, ray_resource=ray_resource)


def _workers_memory(m: dict[str, Any], path: str, c: Collector) -> int | None:
    value = m.get("workers_memory")
    if value is None:
        return None
    try:
        size = parse_memory(str(value)) if not isinstance(value, bool) else -1
    except ValueError:
        size = -1
    if size < 64 << 20:
        c.error(join_path(path, "workers_memory"), f"must be a memory quantity of at least 64Mi, got {short_repr(value)}",
                "write e.g. workers_memory: 4Gi, or leave it out for 3/4 of the host's memory shared among the nodes")
        return None
    return size


def _cpus(m: dict[str, Any], path: str, c: Collector) -> float | None:
    value = m.get("cpus")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        c.error(join_path(path, "cpus"), f"bad value {short_repr(value)}", "write e.g. cpus: 0.5 (half a core)")
        return None
    try:
        cpus = float(value)
    except ValueError:
        c.error(join_path(path, "cpus"), f"bad value {short_repr(value)}: not a number", "write e.g. cpus: 0.5 (half a core)")
        return None
    if not 0.05 <= cpus <= 1024:
        c.error(join_path(path, "cpus"), f"must be between 0.05 and 1024 cores, got {cpus:g}",
                "write e.g. cpus: 0.5, or leave it out for the machine's cores")
        return None
    return cpus


def _nodes(value: Any, c: Collector) -> list[tuple[int, NodeSpec]]:
    """The valid nodes, each with its index in the YAML list (for messages about it)."""
    if value is None:
        return list(enumerate(default_nodes()))
    if not isinstance(value, list):
        c.error("nodes", f"must be a list of nodes, got {type_name(value)}",
                "write one `- {name: ..., kind: ..., class: ...}` per node")
        return []
    nodes: list[tuple[int, NodeSpec]] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(value):
        node = _node(raw, join_path("nodes", i), c)
        if node is None:
            continue
        if node.name in seen:
            c.error(join_path(join_path("nodes", i), "name"), f"duplicate node name {node.name!r} "
                    f"(also nodes[{seen[node.name]}])", "give every node its own name")
        seen.setdefault(node.name, i)
        nodes.append((i, node))
    return nodes


def _replication(value: Any, storage: list[NodeSpec], nodes_ok: bool, c: Collector) -> ReplicationSpec:
    r = ReplicationSpec()
    m = read_mapping(value, "replication", c)
    if m is None:
        return r
    check_unknown_keys(m, REPLICATION_KEYS, "replication", c, error=True)
    r.factor = _int(m, "factor", "replication", c, r.factor, 1, None, "2")
    if "dscs_replica" in m:
        try:
            r.dscs_replica = parse_bool(m["dscs_replica"])
        except ValueError as exc:
            c.error("replication.dscs_replica", str(exc), "write true or false")
    if "scheme" in m:
        if m["scheme"] in SCHEMES:
            r.scheme = m["scheme"]
        else:
            c.error("replication.scheme", f"unknown scheme {short_repr(m['scheme'])}", f"write one of: {', '.join(SCHEMES)}")
    r.scatter_width = _int(m, "scatter_width", "replication", c, r.scatter_width, 0, None, "4")
    for key, least in (("anti_entropy", 0.05), ("tombstone_grace", 0.0)):
        if key in m:
            try:
                seconds = parse_duration(m[key])
                if seconds < least:
                    raise ValueError(f"must be at least {least:g}s")
                setattr(r, key, seconds)
            except ValueError as exc:
                c.error(f"replication.{key}", f"bad duration {short_repr(m[key])}: {exc}", 'write e.g. "30s", "10m" or a number of seconds')
    if not nodes_ok:
        return r  # the node list is already wrong; counting its storage nodes would mislead
    if storage and r.factor > len(storage):
        c.error("replication.factor", f"factor {r.factor} needs {r.factor} storage nodes, but there are "
                f"{len(storage)}", f"lower it to at most {len(storage)} or add storage nodes")
    if r.scheme == "copyset" and storage and r.factor < len(storage):
        try:
            check_scatter_width(r.effective_scatter_width, r.factor, len(storage))
        except ValueError as exc:
            c.error("replication.scatter_width" if r.factor >= 2 else "replication.factor", str(exc),
                    "change replication.scatter_width (or factor), or use scheme: rendezvous")
    if r.dscs_replica and storage and not any(n.cls == "dscs" for n in storage):
        c.error("replication.dscs_replica", "requires a storage node of class dscs, and there is none",
                "add a node with kind: storage, class: dscs, or set dscs_replica: false")
    return r


def _switch(value: Any) -> bool | None:
    """on/off (YAML also reads these as true/false); None when it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("on", "off", "true", "false"):
        return value.strip().lower() in ("on", "true")
    return None


def _auth(value: Any, c: Collector) -> AuthSpec | None:
    if value is None or value == "generate":
        return generated_auth()
    if _switch(value) is False:
        return None  # unsigned local mode, asked for by name
    if not isinstance(value, dict):
        c.error("auth", f"must be off, generate, or a mapping with access_key and secret_key; got {short_repr(value)}",
                "write `auth: off` for unsigned local mode, or give `auth: {access_key: ..., secret_key: ...}`")
        return generated_auth()
    m = read_mapping(value, "auth", c)
    if m is None:
        return None
    check_unknown_keys(m, AUTH_KEYS, "auth", c, error=True)
    keys_file = _str(m, "keys_file", "auth", c, "", "keys.yml")
    if "access_key" not in m and "secret_key" not in m and "keys_file" in m:
        region = _str(m, "region", "auth", c, "us-east-1", "us-east-1")  # the cluster's own key made at `up`
        return AuthSpec("", "", region, generated=True, keys_file=keys_file)
    for key in ("access_key", "secret_key"):
        if key not in m:
            c.error(join_path("auth", key), "is missing", "give both access_key and secret_key, or remove auth "
                    "to have `nearfaas up` make random keys")
    access = _str(m, "access_key", "auth", c, "", "AKIAEXAMPLE")
    secret = _str(m, "secret_key", "auth", c, "", '"a-long-random-string"')
    region = _str(m, "region", "auth", c, "us-east-1", "us-east-1")
    return AuthSpec(access, secret, region, keys_file=keys_file) if access and secret else None


def _auth_dict(auth: AuthSpec) -> str | dict:
    extra = {"keys_file": auth.keys_file} if auth.keys_file else {}
    if auth.generated:
        return {**extra, "region": auth.region} if extra else "generate"
    return {"access_key": auth.access_key, "secret_key": auth.secret_key, "region": auth.region, **extra}


def _link(value: Any, c: Collector) -> LinkSpec:
    m = read_mapping(value, "link", c)
    if m is None:
        return LinkSpec()
    profile = _str(m, "profile", "link", c, "local", "local")
    if profile not in PROFILES:
        c.error("link.profile", f"unknown link profile {short_repr(profile)}",
                f"use one of: {', '.join(PROFILES)} (see src/nearfaas/link/profiles.py for their numbers)")
        profile = "local"
    return LinkSpec(profile=profile, options={k: v for k, v in m.items() if k != "profile"})


# ---------------------------------------------------------------- entry points

def parse_cluster(data: Any) -> ClusterSpec:
    """Validate a parsed cluster mapping (null = all defaults), collecting every problem."""
    c = Collector()
    m = read_mapping(data, "", c)
    if m is None:
        raise SpecError(Problem("", f"a cluster file must be a mapping, got {type_name(data)}",
                                "start with keys such as `gateway:` and `nodes:`, or leave the file empty"))
    check_unknown_keys(m, TOP_KEYS, "", c, error=True)
    spec = ClusterSpec()
    spec.state_dir = _str(m, "state_dir", "", c, spec.state_dir, ".nearfaas")
    spec.host = _str(m, "host", "", c, spec.host, "127.0.0.1")
    if any(ch.isspace() for ch in spec.host):
        c.error("host", f"{short_repr(spec.host)} is not a host name or address", "write e.g. host: 127.0.0.1")
    spec.gateway = _gateway(m.get("gateway"), c)
    before = len(c.problems)
    indexed = _nodes(m.get("nodes"), c)
    spec.nodes = [n for _, n in indexed]
    nodes_ok = len(c.problems) == before
    storage = [n for n in spec.nodes if n.kind == "storage"]
    if nodes_ok and not storage:
        c.error("nodes", "at least one storage node is needed to hold objects",
                "add `- {name: storage-0, kind: storage, class: dscs}`")
    ports: dict[int, str] = {spec.gateway.port: "gateway.port"} if spec.gateway.port else {}
    for i, n in indexed:  # fixed ports must not collide; 0 ports are picked later
        if n.port and n.port in ports:
            c.error(join_path(join_path("nodes", i), "port"), f"port {n.port} is also used by {ports[n.port]}",
                    "give each process its own port, or 0 to pick a free one")
        elif n.port:
            ports[n.port] = f"node {n.name}"
    spec.replication = _replication(m.get("replication"), storage, nodes_ok, c)
    placement = m.get("placement", spec.placement)
    if not isinstance(placement, str) or placement not in PLACEMENT_POLICIES:
        c.error("placement", f"must be one of {', '.join(PLACEMENT_POLICIES)}, got {short_repr(placement)}",
                "write placement: near-data (run functions where their objects are)")
    else:
        spec.placement = placement
    spec.auth = _auth(m.get("auth"), c)
    if "isolation" in m:
        isolation = _switch(m["isolation"])
        if isolation is None:
            c.error("isolation", f"must be on or off, got {short_repr(m['isolation'])}",
                    "leave it on (functions run unprivileged in their own mount view); off runs them as the node's user, unsafe")
        else:
            spec.isolation = isolation
    spec.link = _link(m.get("link"), c)
    spec.fastpath = read_fastpath(m.get("fastpath"), c)
    spec.backend = parse_backend(m.get("backend"), c)
    spec.ray = parse_ray(m.get("ray"), c)
    if spec.gateway.replicas > 1:
        if spec.backend == "ray":
            c.error("gateway.replicas", f"is {spec.gateway.replicas}, but the Ray backend runs one gateway actor",
                    "leave replicas at 1 with backend: ray; many gateways share a state folder on one host (backend: local)")
        if spec.fastpath.enabled == "true":
            c.error("fastpath.enabled", f"is true, but gateway.replicas is {spec.gateway.replicas}: the fast-path executor "
                    "answers one gateway", "write enabled: auto (off with many gateways) or gateway.replicas: 1")
    c.raise_if_any()
    return spec


def load_cluster(path: str | Path | None = None) -> ClusterSpec:
    """Load a cluster file; None gives the defaults (the same as default_cluster.yml)."""
    if path is None:
        return ClusterSpec()
    if not isinstance(path, (str, Path)):
        raise SpecError(Problem("", f"expected a path to a cluster file, got {type_name(path)}"))
    p = Path(path).expanduser()
    where = p.name or str(p)
    return parse_cluster(load_yaml_text(read_text_file(p, where), where))
