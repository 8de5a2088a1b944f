"""The node's check of a worker spec: only what the gateway builds from a deployed function.

Mechanism. ``POST /_nearfaas/functions/<name>/workers`` starts a worker from the spec in its
body. The call is signed by the gateway (auth/internal.py), but a signature says who sent the
bytes, not that the gateway meant them: issue 39 found a callback the gateway delivered on its
signing session make a node start a worker from a function's answer, with ``PYTHONWARNINGS``
and ``BROWSER`` in its environment, which ran code as root. So the node re-checks every spec
against what the gateway can have built from a deployed function record
(gateway/api/functions.py ``_spec_from_request`` plus ``credentials`` from gateway/nodes.py):

- keys: the wire fields of ``FunctionSpec`` plus ``uid``, ``buckets``, ``openfaas`` and
  ``credentials``; any other key is refused;
- the wire fields are re-validated by ``FunctionSpec.from_dict`` (types, ``x-nearfaas``);
- ``environment``: the deploy-time rule (``spec.stack.interpreter_variable``), imported, so a
  name refused at deploy (``PYTHON*``, ``LD_*``, ``BROWSER``, ``NEARFAAS_*``, ``PATH`` ...) is
  refused here too;
- ``handler_dir``: inside the node's function store (``<state>/functions``, where the gateway
  copies every deployment's code), or the image-only placeholder for an image function;
  ``x-nearfaas.requirements`` a relative path inside it; ``secrets`` plain names; the name a
  function name (it names files and folders on the node);
- ``uid``: a function uid (node/jail.py's range, never root); ``credentials``: exactly the key
  the gateway derives for this function and uid (auth/function_keys.py), never another;
- ``image_source``: a path under the cluster's gateway.handler_roots, or a registry reference
  whose registry the egress policy allows (nearfaas/egress.py: not loopback, a private range or
  the cluster's own ports unless gateway.egress_allow names it): the node's skopeo pulls it as
  root, with root's registry logins.

A refused spec is answered 400 with the field and why, and logged (``worker-spec-refused``).

Worked example::

    check({"name": "echo", "lang": "python3-http", "handler_dir": "/srv/nf/functions/echo-1a2b",
           "environment": {"BROWSER": "sh -c id"}, "uid": 200001, ...}, "echo", ...)
    # WorkerSpecError: field environment.BROWSER: changes how the interpreter ... starts

Known caveats:
- With ``files_from_gateway`` (nodes on other hosts, backend: ray) the node fetches the code by
  the function's name and never reads ``handler_dir``, so its location is not checked there.
- The node cannot tell a current deployment from an older one of the same function: a replayed
  signed spec (within auth/internal.py's clock skew) starts what was deployed then.
- A registry's name is resolved and checked here, then resolved again by skopeo: a name whose
  answer changes in between (DNS rebinding) is not caught; allow registries by address.
- ``check`` may resolve a registry's name: call it off the event loop.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path, PurePosixPath

from nearfaas.auth import function_keys
from nearfaas.egress import EgressPolicy, EgressRefused
from nearfaas.node import jail
from nearfaas.spec.errors import SpecError
from nearfaas.spec.stack import IMAGE_ONLY_HANDLER, FunctionSpec, interpreter_variable, local_image_path

# What the gateway adds to FunctionSpec.to_dict(): its uid, readable buckets, OpenFaaS echo
# fields (gateway/api/functions.py) and the function's own S3 key (gateway/nodes.py).
GATEWAY_KEYS = frozenset({"uid", "buckets", "openfaas", "credentials"})
WIRE_KEYS = frozenset(f.name for f in dataclasses.fields(FunctionSpec))
# A function's gateway-internal name: NAME or NAME.NAMESPACE (gateway/api/namespaces.py).
_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_FUNCTION_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})?")
_SECRET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class WorkerSpecError(ValueError):
    """A spec the node will not start; ``field`` names the part that is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def check(spec, url_name: str, *, functions_dir: Path | None, handler_roots: list[str], cluster_secret: str | None,
          egress: EgressPolicy | None = None) -> None:
    """Raise WorkerSpecError unless ``spec`` is one the gateway builds (see the opening)."""
    if not isinstance(spec, dict):
        raise WorkerSpecError("spec", "must be a JSON object, the function's deployed spec")
    name = spec.get("name")
    if name != url_name:
        raise WorkerSpecError("name", f"{name!r} does not match the function named in the URL ({url_name!r})")
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise WorkerSpecError("name", f"{name!r} is not a function name")
    unknown = sorted(set(spec) - WIRE_KEYS - GATEWAY_KEYS)
    if unknown:
        raise WorkerSpecError(unknown[0], "is not a field of a deployed function's spec; the node takes only what the gateway sends")
    try:
        FunctionSpec.from_dict({k: v for k, v in spec.items() if k in WIRE_KEYS})
    except SpecError as exc:
        problem = exc.problems[0]
        raise WorkerSpecError(problem.path.removeprefix(f"function {name}").lstrip(".") or "spec", problem.message) from None
    for key in spec.get("environment") or {}:
        if interpreter_variable(str(key)):
            raise WorkerSpecError(f"environment.{key}", "changes how the interpreter, the loader or a library starts; "
                                  "the gateway refuses it at deploy, so no deployed function has it")
    _check_paths(spec, functions_dir, handler_roots)
    _check_registry(str(spec.get("image_source") or ""), egress or EgressPolicy())
    try:
        uid = jail.function_uid(spec) if "uid" in spec else None
    except ValueError as exc:
        raise WorkerSpecError("uid", str(exc)) from None
    if uid is None:
        raise WorkerSpecError("uid", "is missing; the gateway gives every deployed function one")
    _check_credentials(spec, uid, cluster_secret)
    buckets = spec.get("buckets", [])
    if not isinstance(buckets, list) or not all(isinstance(b, str) for b in buckets):
        raise WorkerSpecError("buckets", "must be a list of bucket names")
    if not isinstance(spec.get("openfaas", {}), dict):
        raise WorkerSpecError("openfaas", "must be a mapping")


def _check_paths(spec: dict, functions_dir: Path | None, handler_roots: list[str]) -> None:
    handler = PurePosixPath(str(spec["handler_dir"]))
    if spec.get("image_source") and handler == PurePosixPath(IMAGE_ONLY_HANDLER):
        pass  # an image-only function: no folder of code
    elif functions_dir is not None:
        store = functions_dir.resolve()
        where = Path(handler).resolve()
        if where == store or not where.is_relative_to(store):
            raise WorkerSpecError("handler_dir", f"{handler} is not inside this node's function store ({store}), "
                                  "where the gateway puts every deployed function's code")
    requirements = (spec.get("x") or {}).get("requirements")
    if requirements is not None:
        req = PurePosixPath(str(requirements))
        if req.is_absolute() or ".." in req.parts:
            raise WorkerSpecError("x.requirements", f"{requirements!r} must be a relative path inside the handler folder")
    secrets = spec.get("secrets") or []
    for i, secret in enumerate(secrets):
        if not isinstance(secret, str) or not _SECRET_NAME.fullmatch(secret) or secret in (".", ".."):
            raise WorkerSpecError(f"secrets.{i}", f"{secret!r} is not a secret name")
    where = local_image_path(str(spec.get("image_source") or ""))
    # Read from this host's disk: only where the gateway would take it from.
    if where is not None and not any(where.is_relative_to(root) for root in handler_roots):
        raise WorkerSpecError("image_source", f"{where} is not under the cluster's gateway.handler_roots")


def _check_credentials(spec: dict, uid: int, cluster_secret: str | None) -> None:
    if "credentials" not in spec:
        return
    got = spec["credentials"]
    if cluster_secret is None or got != function_keys.credentials(cluster_secret, spec["name"], uid):
        raise WorkerSpecError("credentials", "are not this function's own key (the gateway sends only the key it derives "
                              "for the function's name and uid)")


def resolves_names(spec) -> bool:
    """Whether ``check`` may resolve a host name (a ``docker://`` registry, below): a caller on an
    event loop runs it in a thread then, and inline otherwise."""
    return isinstance(spec, dict) and str(spec.get("image_source") or "").startswith("docker://")


def _check_registry(source: str, egress: EgressPolicy) -> None:
    """A ``docker://`` reference's registry must be one the egress policy lets the node reach."""
    if not source.startswith("docker://"):
        return
    first, slash, _ = source.removeprefix("docker://").partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        return  # docker.io/library/...: Docker Hub
    if first.startswith("["):  # [v6]:port
        host, _, rest = first[1:].partition("]")
        port_text = rest[1:]
    else:
        host, _, port_text = first.partition(":")
    port = int(port_text) if port_text.isascii() and port_text.isdigit() else 443
    try:
        egress.checked_addresses(host, port)
    except (OSError, UnicodeError):
        return  # skopeo cannot reach it either: the pull fails with its own message
    except EgressRefused as exc:
        raise WorkerSpecError("image_source", f"the registry is refused: {exc}") from None
