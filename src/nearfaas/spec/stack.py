"""OpenFaaS `stack.yml` loader: turns the file users already have into `FunctionSpec`s.

A function is a folder with `handler.py`, run by our Python runner. Every supported `lang` maps
onto it (see `SUPPORTED_LANGS`). Fields that only matter for building images (`build_args`,
...) are accepted and ignored so that a stack file works unchanged with `faas-cli` too; `image`
is informational when a handler is given. A function with only an `image:` runs that image in a
container (node/oci/, docs/images.md): `_image_source` resolves where the image comes from. nearfaas's own options live under a
per-function `x-nearfaas:` key, which faas-cli ignores (parsed in spec/options.py).

As with OpenFaaS's watchdog, timeouts and concurrency come from the function's environment
(`read_timeout`, `write_timeout`, `exec_timeout`, `max_inflight`) and autoscaling from the
`com.openfaas.scale.*` labels. `environment_file` values lie under the inline `environment`.

The loader never stops at the first mistake and never lets a wrong type escape as a
TypeError: every problem becomes a `Problem` naming its YAML path, raised together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import (Collector, Problem, SpecError, SpecWarning, WireReader, check_unknown_keys, did_you_mean,
                     join_path, load_yaml_text, parse_bool, parse_duration, parse_int, parse_memory, read_mapping,
                     read_str_list, read_str_map, read_text_file, short_repr, type_name)
from .lambda_entry import entry_point, event_shape
from .options import X_KEY, NearfaasOptions, check_chains, parse_x

# lang -> calling convention of handler.py. "http": `handle(event, context)` returning a
# dict/str, as in the of-watchdog python3-http templates; "classic": `handle(req: str) -> str`
# as in the classic-watchdog python3 and the python3-flask templates. The -debian variant
# only differs in its base image, which means nothing without containers. "lambda": AWS Lambda's
# `handler(event, context)` in the module the `_HANDLER` environment variable names
# (runtime/lambda_style.py), so Lambda code runs unchanged.
SUPPORTED_LANGS: dict[str, str] = {
    "python3-http": "http",
    "python3-http-debian": "http",
    "python3": "classic",
    "python3-flask": "classic",
    "python3-lambda": "lambda",
}

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_SCALE_MIN = 1
DEFAULT_SCALE_MAX = 5
LABEL_SCALE_MIN = "com.openfaas.scale.min"
LABEL_SCALE_MAX = "com.openfaas.scale.max"
LABEL_SCALE_ZERO = "com.openfaas.scale.zero"
LABEL_ZERO_DURATION = "com.openfaas.scale.zero-duration"  # idle time before scaling to zero (faas-idler)

KNOWN_TOP_KEYS = {"version", "provider", "functions", "configuration"}
KNOWN_PROVIDER_KEYS = {"name", "gateway", "network"}
# Everything faas-cli knows about a function; build-time ones are accepted and ignored.
KNOWN_FUNCTION_KEYS = {
    "lang", "handler", "image", "fprocess", "environment", "environment_file", "labels",
    "annotations", "limits", "requests", "secrets", "constraints", "build_args",
    "build_options", "build_secrets", "readonly_root_filesystem", "skip_build", "namespace",
    "platforms", X_KEY,
}

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_CPU = re.compile(r"\d+(?:\.\d+)?m?")
# An image-only function has no folder of code. The wire format wants an absolute path: this one
# never exists, so whatever would read or pack a handler folder fails at once instead of walking "/".
IMAGE_ONLY_HANDLER = Path("/.nearfaas-image-only")


def local_image_path(source: str) -> Path | None:
    """The folder or file an image reference reads from this host's disk (``oci:DIR[:TAG]``,
    ``oci-archive:FILE``, ``docker-archive:FILE``), resolved; None for a registry reference.
    The gateway and the node check it against gateway.handler_roots with this one reading."""
    transport, _, rest = source.partition(":")
    if transport not in ("oci", "oci-archive", "docker-archive"):
        return None
    return Path(rest.rpartition(":")[0] if transport == "oci" and rest.count(":") else rest).resolve()
DURATION_FIX = 'write a duration like "30s", "1m30s", "500ms", "2m" or a plain number of seconds'


# ---------------------------------------------------------------- dataclasses

@dataclass
class FunctionSpec:
    """One deployable function, fully validated; also the wire format between gateway and nodes."""

    name: str
    lang: str
    handler_dir: Path                       # absolute; contains handler.py
    environment: dict[str, str] = field(default_factory=dict)
    read_timeout: float = DEFAULT_TIMEOUT_S  # seconds
    write_timeout: float = DEFAULT_TIMEOUT_S
    exec_timeout: float = DEFAULT_TIMEOUT_S
    max_inflight: int = 0                   # concurrent requests per replica; 0 = unlimited
    scale_min: int = DEFAULT_SCALE_MIN
    scale_max: int = DEFAULT_SCALE_MAX
    scale_zero: bool = False
    scale_zero_after: float = 300.0         # com.openfaas.scale.zero-duration, seconds
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)     # {"memory": "128Mi", "cpu": "500m"}
    secrets: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    x: NearfaasOptions = field(default_factory=NearfaasOptions)
    requests: dict[str, str] = field(default_factory=dict)   # same shape as limits
    image: str = ""                         # as given; reported by the REST API
    image_source: str = ""                  # image-only functions: where the node reads the image (_image_source)
    namespace: str = ""                     # the OpenFaaS namespace it is deployed into ("": the cluster's default)
    fprocess: str = ""                      # an image's watchdog process (stack fprocess:, REST envProcess)

    @property
    def handler_style(self) -> str:
        """"http" (handle(event, context)) or "classic" (handle(req) -> str)."""
        return SUPPORTED_LANGS.get(self.lang, "http")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "lang": self.lang, "handler_dir": str(self.handler_dir),
            "environment": dict(self.environment), "read_timeout": self.read_timeout,
            "write_timeout": self.write_timeout, "exec_timeout": self.exec_timeout,
            "max_inflight": self.max_inflight, "scale_min": self.scale_min, "scale_max": self.scale_max,
            "scale_zero": self.scale_zero, "scale_zero_after": self.scale_zero_after, "labels": dict(self.labels), "annotations": dict(self.annotations),
            "limits": dict(self.limits), "secrets": list(self.secrets), "constraints": list(self.constraints),
            "x": self.x.to_dict(), "requests": dict(self.requests), "image": self.image,
            **({"image_source": self.image_source} if self.image_source else {}),
            **({"namespace": self.namespace} if self.namespace else {}),
            **({"fprocess": self.fprocess} if self.fprocess else {}),
        }

    @classmethod
    def from_dict(cls, data: Any) -> FunctionSpec:
        """Rebuild from `to_dict()` output; a malformed record raises SpecError, not TypeError."""
        c = Collector()
        base = "function"
        if not isinstance(data, dict):
            raise SpecError(Problem(base, f"must be a mapping, got {type_name(data)}"))
        if isinstance(data.get("name"), str):
            base = f"function {data['name']}"
        r = WireReader(data, base, c)
        name, lang, hdir = r.get("name", str), r.get("lang", str), r.get("handler_dir", str)
        if isinstance(hdir, str) and not Path(hdir).is_absolute():
            c.error(join_path(base, "handler_dir"), f"must be an absolute path, got {short_repr(hdir)}")
        x = parse_x(data.get("x"), join_path(base, "x"), c)
        values = {key: r.get(key, kind, default) for key, (kind, default) in _WIRE_OPTIONAL.items()}
        c.raise_if_any()
        return cls(name=name, lang=lang, handler_dir=Path(hdir), x=x, **values)  # type: ignore[arg-type]


# Optional wire fields: type and the default used when a record omits them (older senders).
_WIRE_OPTIONAL: dict[str, tuple[type, Any]] = {
    "environment": (dict, {}), "read_timeout": (float, DEFAULT_TIMEOUT_S), "write_timeout": (float, DEFAULT_TIMEOUT_S),
    "exec_timeout": (float, DEFAULT_TIMEOUT_S), "max_inflight": (int, 0), "scale_min": (int, DEFAULT_SCALE_MIN),
    "scale_max": (int, DEFAULT_SCALE_MAX), "scale_zero": (bool, False), "scale_zero_after": (float, 300.0), "labels": (dict, {}),
    "annotations": (dict, {}), "limits": (dict, {}), "secrets": (list, []), "constraints": (list, []),
    "requests": (dict, {}), "image": (str, ""), "image_source": (str, ""), "namespace": (str, ""),
    "fprocess": (str, ""),
}


@dataclass
class Stack:
    """A loaded stack.yml: functions by name plus the warnings worth showing the user."""

    version: str
    provider_name: str
    gateway: str
    functions: dict[str, FunctionSpec]
    warnings: list[SpecWarning] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "provider_name": self.provider_name, "gateway": self.gateway,
                "functions": {n: f.to_dict() for n, f in self.functions.items()},
                "warnings": [w.to_dict() for w in self.warnings]}

    @classmethod
    def from_dict(cls, data: Any) -> Stack:
        if not isinstance(data, dict) or not isinstance(data.get("functions"), dict):
            raise SpecError(Problem("stack", "must be a mapping with a functions mapping"))
        problems: list[Problem] = []
        functions: dict[str, FunctionSpec] = {}
        for name, raw in data["functions"].items():
            try:
                functions[str(name)] = FunctionSpec.from_dict(raw)
            except SpecError as exc:
                problems.extend(exc.problems)
        raw_warnings = data.get("warnings")
        warnings = [SpecWarning(**{k: str(w.get(k, "")) for k in ("path", "message", "fix")})
                    for w in (raw_warnings if isinstance(raw_warnings, list) else []) if isinstance(w, dict)]
        if problems:
            raise SpecError(problems)
        return cls(str(data.get("version", "1.0")), str(data.get("provider_name", "openfaas")),
                   str(data.get("gateway", "")), functions, warnings)


# ---------------------------------------------------------------- parsing helpers

def _resources(value: Any, path: str, c: Collector) -> dict[str, str] | None:
    """limits/requests: {memory: 128Mi, cpu: 500m}, validated and stringified."""
    m = read_str_map(value, path, c)
    if m is None:
        return None
    check_unknown_keys(m, {"memory", "cpu"}, path, c)
    mem = m.get("memory")
    if mem is not None:
        if re.fullmatch(r"\d+(\.\d+)?m", mem.strip()):
            c.error(join_path(path, "memory"), f"{short_repr(mem)} means milli-bytes in Kubernetes units",
                    f'write "{mem.strip()[:-1]}Mi" for mebibytes')
        else:
            try:
                parse_memory(mem)
            except ValueError:
                c.error(join_path(path, "memory"), f"{short_repr(mem)} is not a memory quantity",
                        'write e.g. "128Mi" or "1Gi"')
    cpu = m.get("cpu")
    if cpu is not None and not _CPU.fullmatch(cpu.strip()):
        c.error(join_path(path, "cpu"), f"{short_repr(cpu)} is not a CPU quantity", 'write e.g. "500m" or "0.5" or "1"')
    return m


def _timeouts_and_inflight(env: dict[str, str], origin: dict[str, str], c: Collector) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("read_timeout", "write_timeout", "exec_timeout"):
        if key in env:
            try:
                seconds = parse_duration(env[key])
                if seconds <= 0:
                    raise ValueError("must be more than zero")
                out[key] = seconds
            except ValueError as exc:
                c.error(origin[key], f"bad duration {short_repr(env[key])}: {exc}", DURATION_FIX)
    if "max_inflight" in env:
        try:
            n = parse_int(env["max_inflight"])
            if n < 0:
                raise ValueError("must not be negative")
            out["max_inflight"] = n
        except ValueError as exc:
            c.error(origin["max_inflight"], f"bad max_inflight {short_repr(env['max_inflight'])}: {exc}",
                    'write a whole number such as "10"; 0 means unlimited')
    return out


def _environment(fn: dict[str, Any], path: str, base_dir: Path, c: Collector) -> tuple[dict[str, str], dict[str, str]]:
    """environment_file entries first (later files win), then inline `environment:` on top.
    Returns the merged values and, per key, the YAML path that set it (for messages)."""
    env: dict[str, str] = {}
    origin: dict[str, str] = {}
    files = read_str_list(fn.get("environment_file"), join_path(path, "environment_file"), c)
    for i, rel in enumerate(files or []):
        where = join_path(join_path(path, "environment_file"), i)
        try:
            fpath = (base_dir / rel).resolve()
            data = load_yaml_text(read_text_file(fpath, where), f"{where} ({rel})")
        except SpecError as exc:
            c.problems.extend(exc.problems)
            continue
        except (OSError, ValueError, RuntimeError) as exc:
            c.error(where, f"cannot use {short_repr(rel)}: {exc}", "give a path relative to the stack file")
            continue
        if not isinstance(data, dict) or "environment" not in data:
            c.error(where, f"{rel} must be a YAML mapping with an `environment:` key",
                    "write `environment:` and indent `NAME: value` lines under it")
            continue
        values = read_str_map(data["environment"], join_path(where, "environment"), c, env=True)
        for k, v in (values or {}).items():
            env[k], origin[k] = v, join_path(join_path(where, "environment"), k)
    inline = read_str_map(fn.get("environment"), join_path(path, "environment"), c, env=True)
    for k, v in (inline or {}).items():
        env[k], origin[k] = v, join_path(join_path(path, "environment"), k)
    for k in env:
        if interpreter_variable(k):
            c.error(origin[k], f"{k} changes how the interpreter, the loader or a library starts, and runs code the "
                    "platform did not deploy", "remove it: put settings in your handler's code or in a file of its "
                    "folder, and dependencies in requirements.txt")
    return env, origin


# Variables that make an interpreter, the dynamic loader or a common library load or run other
# code (PYTHONSTARTUP, LD_PRELOAD, PYTHONWARNINGS=...:module.Class, BROWSER, ...), or that the
# platform sets for the worker itself (NEARFAAS_*: its node, its keys).
_INTERPRETER_PREFIXES = ("PYTHON", "LD_", "NEARFAAS_", "MALLOC_", "GCONV", "PERL", "RUBY", "NODE_", "JAVA_TOOL", "_JAVA",
                         "BASH_FUNC_", "DYLD_", "OPENSSL_", "SSL_CERT", "GIT_")
_INTERPRETER_NAMES = {"GLIBC_TUNABLES", "BROWSER", "BASH_ENV", "ENV", "SHELLOPTS", "PS4", "IFS", "PATH", "HOME", "TMPDIR",
                      "HOSTALIASES", "LOCPATH", "NLSPATH", "RESOLV_HOST_CONF", "LOCALDOMAIN", "EDITOR", "VISUAL", "PAGER",
                      "TERMINFO", "TZDIR", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "NO_PROXY",
                      "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "OMP_TOOL_LIBRARIES", "KMP_TOOL_LIBRARIES"}


def interpreter_variable(name: str) -> bool:
    """Whether a function may not set the environment variable ``name``."""
    return name in _INTERPRETER_NAMES or name.upper().startswith(_INTERPRETER_PREFIXES)


def _scale(labels: dict[str, str], path: str, c: Collector) -> dict[str, Any]:
    """OpenFaaS autoscaling labels; the values are strings in OpenFaaS, numbers accepted too."""
    out: dict[str, Any] = {"scale_min": DEFAULT_SCALE_MIN, "scale_max": DEFAULT_SCALE_MAX, "scale_zero": False,
                           "scale_zero_after": 300.0}
    if LABEL_ZERO_DURATION in labels:
        try:
            out["scale_zero_after"] = parse_duration(labels[LABEL_ZERO_DURATION])
        except ValueError as exc:
            c.error(join_path(path, LABEL_ZERO_DURATION), str(exc), f'write a duration, e.g. {LABEL_ZERO_DURATION}: "5m"')
    both_ok = True
    for label, key in ((LABEL_SCALE_MIN, "scale_min"), (LABEL_SCALE_MAX, "scale_max")):
        if label in labels:
            try:
                out[key] = parse_int(labels[label])
                if out[key] < 0:
                    raise ValueError("must not be negative")
            except ValueError as exc:
                both_ok = False
                c.error(join_path(path, label), f"bad value {short_repr(labels[label])}: {exc}",
                        f'write a whole number, e.g. {label}: "2"')
    if not both_ok:
        pass  # comparing min and max would only repeat the problem just reported
    elif out["scale_max"] < 1:
        c.error(join_path(path, LABEL_SCALE_MAX), "must be at least 1", f'write e.g. {LABEL_SCALE_MAX}: "5"')
    elif out["scale_min"] > out["scale_max"]:
        c.error(join_path(path, LABEL_SCALE_MIN), f"min {out['scale_min']} is above max {out['scale_max']}",
                f"lower {LABEL_SCALE_MIN} or raise {LABEL_SCALE_MAX}")
    if LABEL_SCALE_ZERO in labels:
        try:
            out["scale_zero"] = parse_bool(labels[LABEL_SCALE_ZERO])
        except ValueError as exc:
            c.error(join_path(path, LABEL_SCALE_ZERO), str(exc), f'write {LABEL_SCALE_ZERO}: "true" or "false"')
    return out


def _handler(fn: dict[str, Any], name: str, path: str, base_dir: Path, c: Collector, needs: str | None = "handler.py") -> Path | None:
    """The handler folder, resolved; it must hold ``needs`` (handler.py, or a fast-path lambda's
    module; None for a native lambda)."""
    hpath = join_path(path, "handler")
    handler = fn.get("handler")
    if handler is None:
        c.error(hpath, "is missing", f"add `handler: ./{name}`, a folder holding handler.py, or `image:` to run an image")
        return None
    if not isinstance(handler, str) or not handler.strip():
        c.error(hpath, f"must be a folder path, got {type_name(handler)}", f"write `handler: ./{name}`")
        return None
    try:
        resolved = (base_dir / handler.strip()).resolve()
        is_dir, has_py = resolved.is_dir(), needs is None or (resolved / needs).is_file()
    except (OSError, ValueError, RuntimeError) as exc:
        c.error(hpath, f"cannot use {short_repr(handler)}: {exc}", "give a folder path relative to the stack file")
        return None
    if not is_dir:
        c.error(hpath, f"folder {resolved} does not exist", "create it, or fix the path (relative to the stack file)")
        return None
    if not has_py:
        if needs == "handler.py":
            fix = "add handler.py defining handle(event, context) (lang python3-lambda: handler(event, context))"
        elif needs.endswith(".py"):
            fix = f"add {needs}, or set environment _HANDLER to the module.function Lambda's Handler setting names"
        else:
            fix = "build the module into that folder (e.g. make -C fastpath/lambdas), or fix fastpath.module"
        c.error(hpath, f"folder {resolved} has no {needs}", fix)
        return None
    return resolved


def _parse_function(name: str, raw: Any, base_dir: Path,
                    c: Collector) -> tuple[FunctionSpec | None, NearfaasOptions | None]:
    path = join_path("functions", name)
    before = len(c.problems)
    if not _DNS_LABEL.fullmatch(name):
        c.error(path, f"function name {short_repr(name)} is not a DNS-1123 label",
                "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit")
    fn = read_mapping(raw, path, c)
    if fn is None:
        return None, None
    check_unknown_keys(fn, KNOWN_FUNCTION_KEYS, path, c)
    x = parse_x(fn.get(X_KEY), join_path(path, X_KEY), c)
    fast = x.fastpath if x is not None and x.target == "fastpath" else None
    stream = x.stream if x is not None and x.target == "stream" else None
    lang = fn.get("lang")
    image = fn.get("image")
    image_only = fn.get("handler") is None and isinstance(image, str) and bool(image.strip())
    image_source = ""
    if image_only:  # any lang: it built the image, which now says what runs (docs/images.md)
        lang = lang if isinstance(lang, str) and lang else "dockerfile"
        if fast is not None or stream is not None:
            c.error(join_path(path, X_KEY), "an image function runs in a container, not on the fast path",
                    "remove x-nearfaas target, or give a handler instead of the image")
        image_source = _image_source(image.strip(), join_path(path, "image"), base_dir, c)
    elif stream is not None:
        want = "wasm" if stream.get("fn") == "wasm" else "native"
        if lang != want:
            c.error(join_path(path, "lang"), f"a {'WebAssembly' if want == 'wasm' else 'native'} stream function needs lang: {want}, "
                    f"got {short_repr(lang)}", f"write lang: {want}")
    elif fast is not None:
        want = "native" if fast["native"] else "wasm"
        if lang != want:
            c.error(join_path(path, "lang"), f"a fast-path lambda with {'native' if fast['native'] else 'module'}: needs lang: {want}, "
                    f"got {short_repr(lang)}", f"write lang: {want}")
    elif not isinstance(lang, str) or lang not in SUPPORTED_LANGS:
        what = "is missing" if lang is None else f"{short_repr(lang)} is not supported"
        c.error(join_path(path, "lang"), f"{what}; supported: {', '.join(SUPPORTED_LANGS)}",
                "use lang: python3-http (handler.py defines handle(event, context)), or lang: wasm with x-nearfaas target: fastpath")
    needs = fast["module"] if fast else (stream.get("module") if stream is not None else "handler.py")
    if lang == "python3-lambda" and not image_only:  # the module _HANDLER names (runtime/lambda_style.py)
        try:
            raw_env = fn.get("environment") if isinstance(fn.get("environment"), dict) else {}
            needs = entry_point(raw_env)[0]
            event_shape(raw_env)
        except ValueError as exc:
            c.error(join_path(join_path(path, "environment"), "_HANDLER" if "_HANDLER" in str(exc) else "LAMBDA_EVENT"), str(exc),
                    "write _HANDLER: lambda_function.lambda_handler (module.function), LAMBDA_EVENT: invoke or http")
    handler_dir = IMAGE_ONLY_HANDLER if image_only else _handler(fn, name, path, base_dir, c, needs=needs)
    if image is not None and not isinstance(image, str):
        c.error(join_path(path, "image"), f"must be a string, got {type_name(image)}")
    env, origin = _environment(fn, path, base_dir, c)
    tune = _timeouts_and_inflight(env, origin, c)
    labels = read_str_map(fn.get("labels"), join_path(path, "labels"), c)
    scale = _scale(labels or {}, join_path(path, "labels"), c)
    annotations = read_str_map(fn.get("annotations"), join_path(path, "annotations"), c)
    limits = _resources(fn.get("limits"), join_path(path, "limits"), c)
    requests = _resources(fn.get("requests"), join_path(path, "requests"), c)
    secrets = read_str_list(fn.get("secrets"), join_path(path, "secrets"), c)
    for i, s in enumerate(secrets or []):
        if "/" in s or "\0" in s or s in (".", ".."):
            c.error(join_path(join_path(path, "secrets"), i), f"{short_repr(s)} is not a secret name",
                    "use a plain name like db-password")
    constraints = read_str_list(fn.get("constraints"), join_path(path, "constraints"), c)
    namespace = fn.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _DNS_LABEL.fullmatch(namespace)):
        c.error(join_path(path, "namespace"), f"{short_repr(namespace)} is not a namespace name",
                "use one of the cluster's gateway.namespaces, e.g. openfaas-fn")
    fprocess = fn.get("fprocess")
    if fprocess is not None and not isinstance(fprocess, str):
        c.error(join_path(path, "fprocess"), f"must be a command line, got {type_name(fprocess)}", 'write e.g. fprocess: "cat"')
    if len(c.problems) != before:
        return None, x
    spec = FunctionSpec(
        name=name, lang=str(lang), handler_dir=handler_dir, environment=env,  # type: ignore[arg-type]
        labels=labels or {}, annotations=annotations or {}, limits=limits or {}, requests=requests or {},
        secrets=secrets or [], constraints=constraints or [], x=x or NearfaasOptions(),
        image=image or "", image_source=image_source, namespace=namespace or "",
        fprocess=(fprocess or "").strip(), **tune, **scale)
    return spec, x


_IMAGE_FIX = ("give an OCI layout folder (image: oci:/path/layout:tag), an archive (image: oci-archive:/path/image.tar or "
              "docker-archive:/path/image.tar, as `skopeo copy` or `docker save` write them) or a registry reference")


def _image_source(image: str, path: str, base_dir: Path, c: Collector) -> str:
    """Where an image-only function's image comes from, checked as far as the disk allows, so a
    missing or broken image is a 400 at deploy, not a failed first call. A path resolves against
    the stack file's folder (the REST API: "/"); a bare reference (name:tag) means a registry,
    or the node's own image store, which only the node can look at."""
    import json
    import tarfile

    transport, sep, rest = image.partition(":")
    if image.startswith("docker://") or (not image.startswith(("/", "./", "../")) and transport not in ("oci", "oci-archive", "docker-archive")):
        return image if image.startswith("docker://") else f"docker://{image}"
    if not sep or transport not in ("oci", "oci-archive", "docker-archive"):
        transport, rest = "", image  # a plain path: a folder is a layout, a file an archive
    file, _, tag = rest.partition(":") if transport in ("", "oci") else (rest, "", "")
    try:
        where = (base_dir / file).resolve()
        if not where.exists():
            c.error(path, f"{short_repr(image)}: {where} does not exist", _IMAGE_FIX)
            return ""
        if where.is_dir():
            if transport not in ("", "oci"):
                raise ValueError(f"{where} is a folder, not a {transport} file")
            index = json.loads((where / "index.json").read_text())
            if not (where / "oci-layout").is_file():
                raise ValueError("it has no oci-layout file")
            tags = [(m.get("annotations") or {}).get("org.opencontainers.image.ref.name") for m in index.get("manifests") or []]
            if tag and tag not in tags:
                raise ValueError(f"it has no image tagged {tag!r} (tags: {', '.join(t for t in tags if t) or 'none'})")
            if not tag and len(tags) != 1:
                raise ValueError(f"it holds {len(tags)} images; name one as oci:{file}:TAG")
            return f"oci:{where}" + (f":{tag}" if tag else "")
        with tarfile.open(where) as tar:
            names = {n.lstrip("./") for n in tar.getnames()}
        kind = transport or ("oci-archive" if "index.json" in names else "docker-archive")
        if not ({"index.json", "oci-layout"} <= names if kind == "oci-archive" else "manifest.json" in names):
            raise ValueError(f"it has no {'index.json and oci-layout' if kind == 'oci-archive' else 'manifest.json'}")
        return f"{kind}:{where}"
    except (OSError, ValueError, RuntimeError, tarfile.TarError) as exc:
        c.error(path, f"{short_repr(image)} is not a usable image: {exc}", _IMAGE_FIX)
        return ""


# ---------------------------------------------------------------- entry points

def parse_stack(data: Any, base_dir: Path | str, *, whole: bool = True) -> Stack:
    """Validate an already-parsed stack mapping; handler paths resolve against base_dir.

    ``whole=False`` is for one function deployed on its own (the REST API): its chain may name
    functions deployed separately, so chain targets are resolved when the chain is called."""
    c = Collector()
    base_dir = Path(base_dir)
    if data is None:
        raise SpecError(Problem("", "the stack file is empty", "add `version: 1.0`, `provider:` and `functions:`"))
    if not isinstance(data, dict):
        raise SpecError(Problem("", f"a stack file must be a mapping, got {type_name(data)}",
                                "start with `version: 1.0`, then `provider:` and `functions:`"))
    for k in data:
        if not isinstance(k, str):
            c.warn(short_repr(k), f"unknown top-level field ({type_name(k)} key), ignored")
        elif k not in KNOWN_TOP_KEYS and not k.startswith("x-"):  # x-* hold YAML anchors, as in compose
            c.warn(k, "unknown top-level field, ignored", did_you_mean(k, KNOWN_TOP_KEYS))
    version = data.get("version")
    if version is None:
        c.warn("version", "missing; assuming 1.0", "add `version: 1.0`")
    elif version not in ("1.0", 1.0) or isinstance(version, bool):
        c.error("version", f"unsupported version {short_repr(version)}", "write `version: 1.0`")
    provider_name, gateway = "openfaas", "http://127.0.0.1:8080"
    provider = read_mapping(data.get("provider"), "provider", c)
    if "provider" not in data:
        c.warn("provider", "missing; assuming openfaas at http://127.0.0.1:8080")
    if provider:
        check_unknown_keys(provider, KNOWN_PROVIDER_KEYS, "provider", c)
        pname = provider.get("name", "openfaas")
        if pname == "faas":  # the name used before OpenFaaS renamed itself
            c.warn("provider.name", "legacy provider name 'faas'", "write `name: openfaas`")
        elif pname != "openfaas":
            c.error("provider.name", f"must be openfaas, got {short_repr(pname)}", "write `name: openfaas`")
        gw = provider.get("gateway", gateway)
        if not isinstance(gw, str) or not re.fullmatch(r"https?://\S+", gw.strip()):
            c.error("provider.gateway", f"must be an http(s) URL, got {short_repr(gw)}",
                    "write e.g. `gateway: http://127.0.0.1:8080`")
        else:
            gateway = gw.strip()
    if "configuration" in data and not isinstance(data["configuration"], (dict, type(None))):
        c.warn("configuration", f"should be a mapping, got {type_name(data['configuration'])}; ignored")
    functions: dict[str, FunctionSpec] = {}
    raw_functions = data.get("functions")
    if raw_functions is None or raw_functions == {}:
        c.error("functions", "no functions defined", "add `functions:` with at least one `name: {lang, handler}` entry")
    else:
        fmap = read_mapping(raw_functions, "functions", c)
        chains: dict[str, list[str]] = {}
        for name, raw in (fmap or {}).items():
            spec, x = _parse_function(name, raw, base_dir, c)
            if spec is not None:
                functions[name] = spec
            if x is not None and x.chain:
                chains[name] = x.chain
        if whole:
            check_chains(chains, set(fmap or {}), c)
    c.raise_if_any()
    return Stack("1.0", provider_name, gateway, functions, c.warnings)


def load_stack(source: str | Path, *, base_dir: Path | None = None) -> Stack:
    """Load a stack from a file path or from YAML text.

    A `Path`, or a one-line string naming an existing file or ending in .yml/.yaml, is read
    as a file and handlers resolve against its folder. Anything else is YAML text, resolved
    against `base_dir` or the current directory.
    """
    if not isinstance(source, (str, Path)):
        raise SpecError(Problem("", f"expected a path or YAML text, got {type_name(source)}"))
    as_file = isinstance(source, Path)
    if isinstance(source, str) and "\n" not in source and source.strip():
        try:
            as_file = Path(source).is_file() or source.strip().endswith((".yml", ".yaml"))
        except (OSError, ValueError):
            as_file = False
    if as_file:
        path = Path(source).expanduser()
        text = read_text_file(path, path.name or str(path))
        where = path.name
        try:
            base = base_dir or path.resolve().parent
        except (OSError, RuntimeError) as exc:
            raise SpecError(Problem(where, f"cannot resolve {path}: {exc}")) from None
    else:
        text, where, base = str(source), "<stack>", base_dir or Path.cwd()
    return parse_stack(load_yaml_text(text, where), base)
