"""The per-function ``x-nearfaas:`` block of a stack file: where a function runs, what it reads,
which functions receive its output (chains) and which new objects call it (triggers).

Parsed by spec/stack.py with the rest of a function; also the wire format the gateway keeps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import (Collector, check_unknown_keys, did_you_mean, join_path, parse_bool, parse_duration, parse_int, parse_memory,
                     read_mapping, read_str_list, short_repr)

X_KEY = "x-nearfaas"
X_KEYS = {"accelerator", "placement", "inputs", "chain", "keep_intermediates", "idempotent", "queue_depth", "keep_alive", "triggers",
          "target", "fastpath", "stream", "buckets", "auth", "memory", "volume", "requirements", "tmp_size", "execution"}
MEMORY_KEYS = {"profile", "sample_ms"}
TARGETS = ("worker", "fastpath", "stream")
# A stream function (target: stream): one stage of the executor's per-connection pipeline.
STREAM_FUNCTIONS = ("parse", "filter", "topk", "frequent", "wasm")
STREAM_KEYS = {"fn", "k", "dtype", "variant", "min", "max", "module", "fuel", "timeout_ms"}
STREAM_DTYPES = ("u32", "f32")
STREAM_VARIANTS = ("insertion", "heap")
FASTPATH_KEYS = {"module", "native", "weight", "timeout_ms", "external", "entry"}
ENTRY_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")
NATIVE_LAMBDAS = ("web", "kv", "gray")
# How a worker runs sync handlers (runtime/worker.py): on its main thread, one call at a time, like
# a normal program (the default), or on a pool of threads, several calls at once.
EXECUTIONS = ("main", "threads")
DEFAULT_TMP_SIZE = 512 * 1024 * 1024  # each instance's private /tmp, unless tmp_size says otherwise: AWS Lambda's default
# Chain intermediates live here, written by the stage that made them onto its own node.
INTERMEDIATE_BUCKET = "nearfaas-intermediates"


def secrets_folder(state_dir, namespace: str | None):
    """Where the gateway keeps, and the nodes mount from, the secrets of a function namespace:
    ``<state>/secrets`` for the default one (``None``), else ``<state>/secrets-ns/<namespace>``
    (gateway/api/namespaces.py)."""
    from pathlib import Path

    return Path(state_dir) / "secrets" if not namespace else Path(state_dir) / "secrets-ns" / namespace


def secrets_namespace(spec: dict) -> str | None:
    """The namespace whose secrets a deployed function mounts: None for the default namespace,
    whose functions the gateway names without a namespace (only NAME.NAMESPACE holds a dot)."""
    return spec.get("namespace") if "." in str(spec.get("name", "")) else None
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
ACCELERATORS = ("dscs",)
PLACEMENTS = ("data", "compute", "auto")
_POINTER = re.compile(r"(/([^~/]|~[01])*)+")
_DOTTED = re.compile(r"[^.\s/]+(\.[^.\s/]+)*")


@dataclass
class NearfaasOptions:
    """The per-function `x-nearfaas:` block: where the function should run and what it reads."""

    accelerator: str | None = None          # "dscs": run on a storage node's computational storage
    placement: str = "auto"                 # "data": next to the object; "compute": on a compute node
    inputs: list[str] = field(default_factory=lambda: ["input"])  # where {bucket,key} sits in the request
    chain: list[str] = field(default_factory=list)  # functions that receive this one's output, in order
    keep_intermediates: bool = False        # keep objects written between chained steps
    idempotent: bool = False                # safe to run twice: a call lost with its node is retried elsewhere
    queue_depth: int = 100                  # calls that may wait for a free instance, then 429
    keep_alive: float = 60.0                # seconds an idle instance above scale.min stays warm
    triggers: list[str] = field(default_factory=list)  # "s3://bucket/prefix": a PUT there invokes this function
    target: str = "worker"                  # "fastpath": a tiny lambda run to completion by the fast path (docs/fastpath.md)
    fastpath: dict[str, Any] | None = None  # {module | native, weight, timeout_ms, external} when target is fastpath
    stream: dict[str, Any] | None = None    # {fn, k, dtype, variant, min, max} when target is stream
    # The buckets this function's own S3 key may use ("*": any but the chain intermediates), and
    # nothing else: a trigger's bucket must be listed here too (ungranted_triggers), never granted
    # by the trigger itself; intermediates take a chain call's own key (auth/function_keys.py).
    buckets: list[str] = field(default_factory=list)
    auth: bool = False                      # calls to /function/<name> need the cluster's credentials
    # Memory-tier profiling (docs/memory.md): {profile: true, sample_ms: 50} preloads the allocation
    # shim into this function's workers and samples their writes and accesses every sample_ms (0: allocations only).
    memory: dict[str, Any] | None = None
    # A private folder on each node's disk that outlives calls and instances (node/pool.py), for
    # functions that keep a store next to the data, e.g. a key-value store (examples/kv).
    volume: bool = False
    # The pip requirements file, relative to the handler folder; installed into the function's own
    # environment, which shadows the runtime's packages (node/pool.py).
    requirements: str = "requirements.txt"
    tmp_size: int = DEFAULT_TMP_SIZE        # bytes of the instance's private /tmp
    execution: str = "main"                 # see EXECUTIONS

    def allowed_buckets(self) -> frozenset[str] | None:
        """What the function's key may touch: its ``buckets``, and only those; None means every
        bucket (``buckets: ["*"]``). Intermediates: a chain call's own key (function_keys.py)."""
        if "*" in self.buckets:
            return None
        return frozenset(self.buckets)

    def ungranted_triggers(self) -> list[str]:
        """A message for each trigger whose bucket ``buckets`` does not list. A trigger used to
        add its bucket to the key's grant, so a deploy policy that checked ``buckets`` alone
        (forcing a tenant's own bucket) let a trigger on another tenant's bucket read all of it
        (red team, issue 39, round 6): what a key may touch is one list, and the deploy is
        refused where a trigger falls outside it."""
        if "*" in self.buckets:
            return []
        out = []
        for i, trigger in enumerate(self.triggers):
            bucket = trigger.removeprefix("s3://").split("/", 1)[0]
            if bucket not in self.buckets:
                out.append(f"x-nearfaas.triggers[{i}]: bucket {bucket!r} is not in x-nearfaas.buckets, and a function's key "
                           f"reaches only the buckets listed there (a trigger grants nothing); add {bucket!r} to "
                           "x-nearfaas.buckets, or drop the trigger")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "placement": self.placement, "inputs": list(self.inputs),
                "chain": list(self.chain), "keep_intermediates": self.keep_intermediates, "idempotent": self.idempotent,
                "queue_depth": self.queue_depth, "keep_alive": self.keep_alive, "triggers": list(self.triggers),
                "target": self.target, "fastpath": dict(self.fastpath) if self.fastpath else None,
                "stream": dict(self.stream) if self.stream else None,
                "buckets": list(self.buckets), "auth": self.auth, "memory": dict(self.memory) if self.memory else None,
                "volume": self.volume, "requirements": self.requirements, "tmp_size": self.tmp_size,
                "execution": self.execution}

    @classmethod
    def from_dict(cls, data: Any) -> NearfaasOptions:
        c = Collector()
        opts = parse_x(data, X_KEY, c)
        c.raise_if_any()
        return opts or cls()

    def triggered_by(self, bucket: str, key: str) -> bool:
        """True when a new object s3://bucket/key falls under one of this function's triggers."""
        for trigger in self.triggers:
            t_bucket, _, prefix = trigger.removeprefix("s3://").partition("/")
            if t_bucket == bucket and key.startswith(prefix):
                return True
        return False

    def object_refs(self, body: Any) -> list[dict[str, Any]]:
        """The {bucket, key} or {bucket, prefix} references a request body points at, following
        `inputs`.

        A path starting with "/" is a JSON pointer ("/job/source"); otherwise it is dotted
        ("input", "items.0"). A path may lead to one reference or a list of them. When no
        path finds anything and the body itself has bucket and key (or prefix), the body is
        the input. A prefix names every object whose key starts with it (a "directory").
        """
        refs: list[dict[str, Any]] = []
        for path in self.inputs:
            found = _walk(body, path)
            for item in found if isinstance(found, list) else [found]:
                if _is_ref(item):
                    refs.append(item)
        if not refs and _is_ref(body):
            refs.append(body)
        return refs


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("bucket"), str) and (
        isinstance(value.get("key"), str) or isinstance(value.get("prefix"), str))


def _walk(body: Any, path: str) -> Any:
    if path.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
    else:
        parts = path.split(".")
    node = body
    for part in parts:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def parse_x(value: Any, path: str, c: Collector) -> NearfaasOptions | None:
    """The x-nearfaas block. Unknown keys here are errors: this block is ours, so a typo
    would otherwise silently drop a placement decision."""
    m = read_mapping(value, path, c)
    if m is None:
        return None
    check_unknown_keys(m, X_KEYS, path, c, error=True)
    opts = NearfaasOptions()
    acc = m.get("accelerator")
    if isinstance(acc, str) and acc.strip().lower() in ("", "none"):
        acc = None
    if acc is not None and acc not in ACCELERATORS:
        c.error(join_path(path, "accelerator"), f"unknown accelerator {short_repr(acc)}",
                "use accelerator: dscs, or leave it out for none")
    else:
        opts.accelerator = acc
    placement = m.get("placement", "auto")
    if placement not in PLACEMENTS:
        c.error(join_path(path, "placement"), f"must be one of {', '.join(PLACEMENTS)}, got {short_repr(placement)}",
                "use placement: auto to let the scheduler decide")
    else:
        opts.placement = placement
    if "inputs" in m:
        inputs = read_str_list(m["inputs"], join_path(path, "inputs"), c, allow_single=True)
        for i, p in enumerate(inputs or []):
            if not (_POINTER.fullmatch(p) if p.startswith("/") else _DOTTED.fullmatch(p)):
                c.error(join_path(join_path(path, "inputs"), i), f"{short_repr(p)} is not a path into the request JSON",
                        'write a JSON pointer like "/job/source" or a dotted path like "input"')
        opts.inputs = inputs or []
        if opts.placement == "data" and inputs == []:
            c.error(join_path(path, "inputs"), "placement: data needs at least one input to place next to",
                    'add inputs: ["input"] or use placement: auto')
    if "chain" in m:
        opts.chain = read_str_list(m["chain"], join_path(path, "chain"), c, allow_single=True) or []
    if "triggers" in m:
        opts.triggers = parse_triggers(m["triggers"], join_path(path, "triggers"), c)
        if opts.triggers and "input" not in opts.inputs:
            c.error(join_path(path, "triggers"), "a trigger hands the new object over as `input`, which this function's "
                    "inputs do not read", 'add "input" to inputs, or drop the trigger')
    if opts.accelerator == "dscs" and opts.placement == "compute":
        c.error(join_path(path, "placement"), "accelerator: dscs runs on a storage node, but placement: compute "
                "forbids storage nodes", "use placement: data or auto, or drop the accelerator")
    if "queue_depth" in m:
        try:
            opts.queue_depth = parse_int(m["queue_depth"])
            if opts.queue_depth < 0:
                raise ValueError("must not be negative")
        except ValueError as exc:
            c.error(join_path(path, "queue_depth"), f"bad value {short_repr(m['queue_depth'])}: {exc}", "write e.g. queue_depth: 100")
    if "keep_alive" in m:
        try:
            opts.keep_alive = parse_duration(m["keep_alive"])
        except ValueError as exc:
            c.error(join_path(path, "keep_alive"), str(exc), 'write a duration, e.g. keep_alive: 60s')
    if "buckets" in m:
        buckets = read_str_list(m["buckets"], join_path(path, "buckets"), c, allow_single=True) or []
        for i, b in enumerate(buckets):
            if b != "*" and not _BUCKET.fullmatch(b):
                c.error(join_path(join_path(path, "buckets"), i), f"{short_repr(b)} is not a bucket name",
                        'list bucket names (3-63 lower-case letters, digits, "-" or "."), or "*" for every bucket')
        opts.buckets = buckets
    for flag in ("keep_intermediates", "idempotent", "auth", "volume"):
        if flag in m:
            try:
                setattr(opts, flag, parse_bool(m[flag]))
            except ValueError as exc:
                c.error(join_path(path, flag), str(exc), "write true or false")
    _parse_environment(m, path, opts, c)
    if m.get("memory") is not None:
        opts.memory = _parse_memory(m["memory"], join_path(path, "memory"), c)
    if m.get("target") is not None or m.get("fastpath") is not None or m.get("stream") is not None:
        _parse_fastpath(m, path, opts, c)
        _parse_stream(m, path, opts, c)
    # Returned even when something was wrong, so the chain can still be checked for
    # missing targets and cycles; callers decide validity by counting problems.
    return opts


def _parse_environment(m: dict, path: str, opts: NearfaasOptions, c: Collector) -> None:
    """requirements, tmp_size and execution: how the function's workers are set up."""
    if "requirements" in m:
        req = m["requirements"]
        if not isinstance(req, str) or not req or req.startswith("/") or ".." in req.split("/"):
            c.error(join_path(path, "requirements"), f"{short_repr(req)} is not a file inside the handler folder",
                    "name a pip requirements file relative to the handler folder, e.g. requirements: requirements-prod.txt")
        else:
            opts.requirements = req
    if "tmp_size" in m:
        try:
            size = parse_memory(str(m["tmp_size"]))
            if not 1024 * 1024 <= size <= 64 * 1024**3:
                raise ValueError(f"{size} bytes is outside 1Mi..64Gi")
            opts.tmp_size = size
        except ValueError as exc:
            c.error(join_path(path, "tmp_size"), str(exc), "write a size, e.g. tmp_size: 256Mi")
    if "execution" in m:
        if m["execution"] not in EXECUTIONS:
            c.error(join_path(path, "execution"), f"{short_repr(m['execution'])} is not a way to run handlers",
                    "write execution: main (one call at a time on the worker's main thread, the default) or "
                    "execution: threads (several calls at once on handler threads)")
        else:
            opts.execution = m["execution"]


def _parse_memory(value: Any, path: str, c: Collector) -> dict[str, Any] | None:
    """``memory: {profile: true, sample_ms: 50}``: profile the function's allocations (and, with
    sample_ms > 0, its writes and accesses every that many milliseconds)."""
    m = read_mapping(value, path, c)
    if m is None:
        return None
    check_unknown_keys(m, MEMORY_KEYS, path, c, error=True)
    out: dict[str, Any] = {"profile": False, "sample_ms": 50}
    if "profile" in m:
        try:
            out["profile"] = parse_bool(m["profile"])
        except ValueError as exc:
            c.error(join_path(path, "profile"), str(exc), "write profile: true or false")
    if "sample_ms" in m:
        try:
            out["sample_ms"] = parse_int(m["sample_ms"])
            if not 0 <= out["sample_ms"] <= 10_000:
                raise ValueError("must be 0 (allocations only) to 10000")
        except ValueError as exc:
            c.error(join_path(path, "sample_ms"), f"bad value {short_repr(m['sample_ms'])}: {exc}",
                    "write e.g. sample_ms: 50 (milliseconds between samples)")
    return out


def _parse_fastpath(m: dict, path: str, opts: NearfaasOptions, c: Collector) -> None:
    target = m.get("target") or "worker"
    if target not in TARGETS:
        c.error(join_path(path, "target"), f"must be one of {', '.join(TARGETS)}, got {short_repr(target)}",
                "use target: fastpath for a tiny lambda run by the fast path, or leave it out")
        return
    opts.target = target
    fpath = join_path(path, "fastpath")
    if target != "fastpath":
        if m.get("fastpath") is not None:
            c.error(fpath, "only means something with target: fastpath", "add target: fastpath or remove this block")
        return
    fp = read_mapping(m.get("fastpath"), fpath, c) if m.get("fastpath") is not None else None
    if fp is None:
        if m.get("fastpath") is None:
            c.error(fpath, "is missing: target: fastpath needs to know which lambda to run",
                    "add fastpath: {module: lambda.wasm} (a file in the handler folder) or fastpath: {native: web}")
        return
    check_unknown_keys(fp, FASTPATH_KEYS, fpath, c, error=True)
    out: dict[str, Any] = {"module": None, "native": None, "weight": 1, "timeout_ms": 50, "external": None, "entry": None}
    module, native = fp.get("module"), fp.get("native")
    if (module is None) == (native is None):
        c.error(fpath, "give exactly one of module or native",
                f"module: lambda.wasm (a WebAssembly module in the handler folder) or native: one of {', '.join(NATIVE_LAMBDAS)}")
    elif module is not None:
        if not isinstance(module, str) or not module.endswith(".wasm") or "/" in module or module.startswith("."):
            c.error(join_path(fpath, "module"), f"{short_repr(module)} is not a .wasm file name", "name a file in the handler folder, e.g. web.wasm")
        else:
            out["module"] = module
    elif native not in NATIVE_LAMBDAS:
        c.error(join_path(fpath, "native"), f"unknown native lambda {short_repr(native)}", f"use one of {', '.join(NATIVE_LAMBDAS)}")
    else:
        out["native"] = native
    for key, lo, hi, fix in (("weight", 1, 1000, "weight: 1 (its share under weighted fair queueing)"),
                             ("timeout_ms", 1, 60_000, "timeout_ms: 50 (a lambda running longer is interrupted)")):
        if key in fp:
            _bounded_int(fp, key, lo, hi, fpath, fix, out, c)
    ext = fp.get("external")
    if ext is not None:
        host, _, port = str(ext).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            c.error(join_path(fpath, "external"), f"{short_repr(ext)} is not host:port", "write e.g. external: 127.0.0.1:11211 (a memcached)")
        else:
            out["external"] = str(ext)
    entry = fp.get("entry")
    if entry is not None:  # the lambda's entry in a coalesced module (docs/fastpath.md, "Lambda coalescing")
        if native is not None:
            c.error(join_path(fpath, "entry"), "only a module has entries", "remove entry, or use module: coalesced.wasm with entry: web2")
        elif not isinstance(entry, str) or not ENTRY_NAME.fullmatch(entry):
            c.error(join_path(fpath, "entry"), f"{short_repr(entry)} is not an entry name",
                    "write 1 to 64 letters, digits or _, e.g. entry: web2 (its exports are web2.nf_handle, ...)")
        else:
            out["entry"] = entry
    opts.fastpath = out


def _bounded_int(block: dict, key: str, lo: int, hi: int, path: str, example: str, out: dict, c: Collector) -> None:
    """``out[key]`` = ``block[key]`` as an int in [lo, hi], or an error naming the field."""
    try:
        v = parse_int(block[key])
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        out[key] = v
    except ValueError as exc:
        c.error(join_path(path, key), f"bad value {short_repr(block[key])}: {exc}", f"write e.g. {example}")


def _parse_stream(m: dict, path: str, opts: NearfaasOptions, c: Collector) -> None:
    """``target: stream``: a stage of the executor's per-connection stream pipeline (docs/fastpath.md)."""
    spath = join_path(path, "stream")
    if (m.get("target") or "worker") != "stream":
        if m.get("stream") is not None:
            c.error(spath, "only means something with target: stream", "add target: stream or remove this block")
        return
    st = read_mapping(m.get("stream"), spath, c) if m.get("stream") is not None else None
    if st is None:
        if m.get("stream") is None:
            c.error(spath, "is missing: target: stream needs to know which stream function to run",
                    f"add stream: {{fn: topk, k: 16}} (fn one of {', '.join(STREAM_FUNCTIONS)})")
        return
    check_unknown_keys(st, STREAM_KEYS, spath, c, error=True)
    out: dict[str, Any] = {"fn": st.get("fn")}
    if out["fn"] not in STREAM_FUNCTIONS:
        c.error(join_path(spath, "fn"), f"unknown stream function {short_repr(st.get('fn'))}", f"use one of {', '.join(STREAM_FUNCTIONS)}")
        return
    if out["fn"] == "wasm":
        module = st.get("module")
        if not isinstance(module, str) or not module.endswith(".wasm") or "/" in module or module.startswith("."):
            c.error(join_path(spath, "module"), f"{short_repr(module)} is not a .wasm file name",
                    "name a module in the handler folder that exports the stream ABI (docs/fastpath.md), e.g. topk_stream.wasm")
        else:
            out["module"] = module
        for key, lo, hi in (("fuel", 1, 10**12), ("timeout_ms", 1, 10_000)):
            if key in st:
                _bounded_int(st, key, lo, hi, spath, f"{key}: {hi // 100}", out, c)
    if out["fn"] in ("topk", "frequent", "wasm"):
        _bounded_int({"k": 16, **st}, "k", 1, 4096, spath, "k: 16", out, c)
    if out["fn"] in ("topk", "filter"):
        dtype = st.get("dtype", "u32")
        if dtype not in STREAM_DTYPES:
            c.error(join_path(spath, "dtype"), f"must be one of {', '.join(STREAM_DTYPES)}, got {short_repr(dtype)}", "write dtype: u32")
        out["dtype"] = dtype
    if out["fn"] == "topk":
        variant = st.get("variant", "insertion")
        if variant not in STREAM_VARIANTS:
            c.error(join_path(spath, "variant"), f"must be one of {', '.join(STREAM_VARIANTS)}, got {short_repr(variant)}",
                    "write variant: insertion (the FPGA's sorted-insertion network) or heap")
        out["variant"] = variant
    if out["fn"] == "filter":
        for key in ("min", "max"):
            if key in st:
                value = st[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    c.error(join_path(spath, key), f"must be a number, got {short_repr(value)}", f"write e.g. {key}: 100")
                else:
                    out[key] = value
    opts.stream = out


def parse_triggers(value: Any, path: str, c: Collector) -> list[str]:
    """Object-PUT triggers, written "s3://bucket/prefix" (the prefix may be empty)."""
    out = []
    for i, raw in enumerate(read_str_list(value, path, c, allow_single=True) or []):
        bucket, slash, prefix = raw.strip().removeprefix("s3://").partition("/")
        if not raw.strip().startswith("s3://") or not _BUCKET.fullmatch(bucket):
            c.error(join_path(path, i), f"{short_repr(raw)} is not an object prefix",
                    'write "s3://bucket/prefix/" (every new object under it calls the function) or "s3://bucket/" for the whole bucket')
        elif bucket == INTERMEDIATE_BUCKET:
            c.error(join_path(path, i), f"bucket {bucket} holds chain intermediates, which never trigger functions",
                    "trigger on the bucket your clients write to")
        else:
            out.append(f"s3://{bucket}/{prefix if slash else ''}")
    return out


def check_chain_cycles(chains: dict[str, list[str]]) -> None:
    """Raise SpecError when following these chains never ends. Targets missing from ``chains``
    are allowed: the REST API deploys one function at a time, and a chain may name a function
    deployed later (a call then answers 404 until it is)."""
    c = Collector()
    check_chains(chains, set(chains) | {t for chain in chains.values() for t in chain}, c)
    c.raise_if_any()


def check_chains(chains: dict[str, list[str]], declared: set[str], c: Collector) -> None:
    """Every chain target must exist, and following chains must always end (no cycles)."""
    graph: dict[str, list[str]] = {}
    for name, chain in chains.items():
        cpath = join_path(join_path(join_path("functions", name), X_KEY), "chain")
        for i, target in enumerate(chain):
            if target not in declared:
                c.error(join_path(cpath, i), f"names function {short_repr(target)}, which is not in this stack",
                        did_you_mean(target, declared) or "add it under functions: or remove it from the chain")
        graph[name] = [t for t in chain if t in declared]
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    reported: set[frozenset[str]] = set()
    for start in graph:
        if state.get(start):
            continue
        path: list[str] = [start]
        iters = [iter(graph.get(start, []))]
        state[start] = 1
        while iters:  # iterative DFS: a long chain must not hit the recursion limit
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    c.error(join_path(join_path(join_path("functions", nxt), X_KEY), "chain"),
                            f"chain forms a cycle: {' -> '.join(cycle)}", "remove one link so that the chain ends")
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(graph.get(nxt, [])))
