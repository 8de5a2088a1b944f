"""Independent points of a sweep, run here or as Ray tasks (issue 24): ``hw dse``'s configs, the
twin's Monte Carlo draws, sensitivity studies and rack simulations.

``run_points(fn, points, shared=..., ray_address=None, progress=None) -> list``: ``fn(shared,
point)`` (or ``fn(point)`` without ``shared``) for every point, results in the points' order.
Without ``ray_address`` a plain loop in this process. With one, the points go out in chunks as
``ray.remote`` tasks, ``shared`` is put in Ray's object store once, results are gathered with
``ray.wait`` as they finish (the progress bar advances then) and put back in input order, so the
output is the local run's, byte for byte, as long as ``fn`` depends only on its arguments (any
randomness from seeds in the point, never from the order points run in).

``fn`` must be a module-level function (Ray pickles it by reference; workers import nearfaas
from the same venv, or from this checkout's src via PYTHONPATH when this module starts Ray).

``connect(address)``: ``None`` or ``"local"`` starts a local Ray; ``"auto"`` joins the cluster
``ray start --head`` left running here (``RAY_ADDRESS``, else Ray's record of it in
``<RAY_TMPDIR or TMPDIR or /tmp>/ray/ray_current_cluster``) and, when none answers there, starts
a local one and says why on stderr (with ``auto_local=False``, as ``nearfaas up --ray auto`` and
``sift --ray-address auto`` ask, it is an error within seconds that names the address tried and
where it came from: a record left by a killed cluster made ray.init retry for about seven
minutes); ``host:port`` joins that cluster. Every address is first checked (``probe``: a TCP
connection and the opening of a gRPC one, 3 s each at most), so an unreachable address, or a
port that is no Ray GCS, is a clear error at once, not ray.init's minutes of retries.

Example::

    from nearfaas.fanout import run_points
    squares = run_points(pow2, range(100), ray_address="auto", progress=True)
"""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SRC = str(Path(__file__).resolve().parents[1])  # the directory holding the nearfaas package
_NONE = object()


class FanoutError(RuntimeError):
    """Ray cannot be reached or joined, or an address is malformed."""


def _ray():
    try:
        import ray
    except ImportError as e:  # pragma: no cover - make setup installs ray
        raise FanoutError("--ray needs Ray: run `make setup` (pip install ray)") from e
    return ray


def parse_address(address: str, option: str = "--ray") -> tuple[str, int]:
    """``host:port`` -> (host, port); anything else is a FanoutError naming the option."""
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit():
        raise FanoutError(f"{option} must be host:port (e.g. 127.0.0.1:6379) or auto, got {address!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


# An HTTP/2 client's opening (RFC 9113 3.4): the preface, then an empty SETTINGS frame. A gRPC
# server, as Ray's GCS is, answers with a SETTINGS frame of its own (type 4) before anything else.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_H2_SETTINGS = 4
_UNIMPLEMENTED = 12  # the gRPC status of a server without the GCS's services (a raylet's port)
_TOKEN_HINT = ("if the cluster uses token authentication (Ray's default for `ray start --head`), set RAY_AUTH_MODE=token "
               "and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) here too")


def _gcs_problem(address: str, option: str, timeout_s: float) -> tuple[str, str]:
    """Whether a Ray GCS answers at ``address``, as (kind, why): ("ok", ""), ("unreachable", why)
    when no TCP connection was made within ``timeout_s``, ("not-gcs", why) when something else
    listens there, ("refused", why) when the GCS turns this client away (its token).

    Three steps, each bounded, so that none of these is ray.init's minutes of retries (20 tries,
    each a GCS connection that times out after 5 s, or after 40 when the port is no GCS): a TCP
    connection; the opening of an HTTP/2 (gRPC) one, which a silent listener, a hung GCS or an
    HTTP/1 server (the dashboard's 8265) fails within ``timeout_s``; then one GCS call of Ray's own
    client (its cluster id), which a gRPC server without the GCS's services (a raylet's port) or
    a token mismatch fails at once. Under RAY_USE_TLS the opening is encrypted: it is skipped."""
    host, port = parse_address(address, option)
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        return "unreachable", str(e) or type(e).__name__
    with sock:
        head = b""
        if os.environ.get("RAY_USE_TLS", "0").lower() not in ("1", "true"):
            try:
                sock.settimeout(timeout_s)
                sock.sendall(_H2_PREFACE)
                while len(head) < 9:
                    chunk = sock.recv(9 - len(head))
                    if not chunk:
                        break
                    head += chunk
            except OSError:  # a time-out, or reset by a server that took the preface for garbage
                pass
            if not (len(head) == 9 and head[3] == _H2_SETTINGS):
                if head.startswith(b"HTTP/"):
                    return "not-gcs", "it answers HTTP/1, not gRPC as a Ray GCS does (the dashboard's port, 8265 by default?)"
                if head:
                    return "not-gcs", "it answers, but not gRPC as a Ray GCS does"
                return "not-gcs", f"something accepts connections there, but no Ray GCS answered within {timeout_s:g}s"
    try:
        from ray._raylet import GcsClient
    except ImportError:  # pragma: no cover - a Ray without it: ray.init tells
        return "ok", ""
    try:
        GcsClient(address=f"{host}:{port}", cluster_id=None)
    except Exception as e:  # Ray's errors: AuthenticationError, RpcError and kin
        first = (str(e).split(". Note:")[0].splitlines() or [type(e).__name__])[0].strip()
        if type(e).__name__ == "AuthenticationError":
            return "refused", f"{first}; {_TOKEN_HINT}"
        if getattr(e, "rpc_code", None) == _UNIMPLEMENTED:
            return "not-gcs", "it answers gRPC, but has no Ray GCS service (a raylet's or another Ray process's port?)"
        return "not-gcs", f"its GCS did not answer ({type(e).__name__}: {first or 'no detail'})"
    return "ok", ""


def probe(address: str, option: str = "--ray", timeout_s: float = 3.0) -> None:
    """A Ray GCS answers at ``address`` (``_gcs_problem``: within ``timeout_s`` for each of its
    steps), else a clear error naming it and what to do."""
    kind, why = _gcs_problem(address, option, timeout_s)
    if kind == "unreachable":
        raise FanoutError(f"cannot reach a Ray cluster at {address}: {why}; start one with `ray start --head` "
                          f"or leave {option} out to run on a local Ray") from None
    if kind == "refused":
        raise FanoutError(f"the Ray cluster at {address} refuses this client: {why}") from None
    if kind != "ok":
        raise FanoutError(f"no Ray cluster at {address}: {why}; name the head's GCS address (`ray start --head` prints "
                          f"it, port 6379 by default) with {option} HOST:PORT") from None


def _ray_address_file() -> Path:
    """Where ``ray start`` records its cluster's address and ``ray.init("auto")`` reads it."""
    try:
        from ray._common.utils import get_ray_address_file

        return Path(get_ray_address_file(None))
    except Exception:  # a private helper of Ray's (2.x): its rule, RAY_TMPDIR, else TMPDIR, else /tmp
        tmp = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
        return Path(tmp or "/tmp") / "ray" / "ray_current_cluster"


def recorded_address() -> tuple[str | None, str]:
    """The address ``ray.init(address="auto")`` would try, and where it comes from: RAY_ADDRESS,
    else the file ``ray start`` writes (``<RAY_TMPDIR, else TMPDIR, else /tmp>/ray/ray_current_cluster``),
    which stays behind when that cluster is killed. (None, where it looked) when neither names one.
    (Ray's own ``auto`` also joins a raylet's cluster found among this host's processes when the
    file names none or several run; that is never taken here, only named in the error: joining
    whatever Ray another user runs on this host is not what ``auto`` promises.)"""
    addr = os.environ.get("RAY_ADDRESS")
    if addr and addr not in ("auto", "local"):
        return addr, "RAY_ADDRESS"
    path = _ray_address_file()
    try:
        addr = path.read_text().strip()
    except OSError:
        return None, f"RAY_ADDRESS is unset and {path} does not exist"
    return (addr or None), str(path)


def _local_raylets() -> list[str]:
    """The GCS addresses of the raylets running on this host (Ray's own ``auto`` considers them)."""
    try:
        from ray._private.services import find_gcs_addresses

        return sorted(find_gcs_addresses())
    except Exception:  # a private helper: no hint then
        return []


def _auto(option: str, timeout_s: float) -> tuple[str | None, str, bool]:
    """(the live address ``auto`` names, "", False) or (None, why there is none: what was tried
    and where it came from, whether a cluster is there but refuses this client)."""
    addr, source = recorded_address()
    if addr is None:
        return None, f"no Ray cluster is recorded on this machine ({source})", False
    if addr.startswith("ray://"):
        return None, (f"{source} names {addr}, a Ray Client address; nearfaas joins Ray as a driver and needs the "
                      f"head's GCS address (host:port, 6379 by default)"), False
    try:
        kind, why = _gcs_problem(addr, option, timeout_s)
    except FanoutError:
        return None, f"read {addr!r} from {source}, which is not host:port", False
    if kind == "ok":
        return addr, "", False
    if kind == "refused":
        return None, f"read {addr} from {source}; the Ray cluster there refuses this client: {why}", True
    stale = ("; a stale record: the cluster that wrote it is gone (a killed `ray start`)"
             if source != "RAY_ADDRESS" and kind == "unreachable" else "")
    others = [a for a in _local_raylets() if a != addr]
    running = (f"; this host does run a raylet of the Ray cluster at {' and '.join(others)} ({option} HOST:PORT joins it)"
               if others else "")
    return None, f"read {addr} from {source}, but no Ray cluster answers there ({why}){stale}{running}", False


def resolve_auto(option: str = "--ray", timeout_s: float = 3.0) -> str:
    """``auto`` -> the live cluster's address, or a FanoutError that names the address tried,
    where it came from and what to do; never ray.init's minutes of GCS time-outs on a dead one."""
    addr, why, refused = _auto(option, timeout_s)
    if refused:
        raise FanoutError(f"{option} auto: {why}") from None
    if addr is None:
        raise FanoutError(f"{option} auto: {why}; start one here with `ray start --head`, or name a live one with "
                          f"{option} HOST:PORT") from None
    return addr


def _runtime_env() -> dict:
    """Workers import nearfaas from this checkout too (an editable install already does)."""
    path = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def connect(address: str | None = None, num_cpus: int | None = None, *, option: str = "--ray", auto_local: bool = True,
            quiet: bool = False):
    """Join the Ray cluster at ``address`` or start a local one (see the module's docstring);
    returns the ``ray`` module. ``auto_local=False`` keeps ``auto`` strict (no cluster: error)."""
    ray = _ray()
    if address and address not in ("auto", "local"):
        probe(address, option)
    if ray.is_initialized():
        return ray
    target = address or "local"
    if address == "auto" and not auto_local:
        target = resolve_auto(option)
    elif address == "auto":
        found, why, refused = _auto(option, 1.0)
        if refused:  # a cluster runs here: a local Ray instead would hide that it cannot be joined
            raise FanoutError(f"{option} auto: {why}")
        if found is None:
            if not quiet:
                print(f"{option} auto: no running Ray cluster found here ({why}); starting a local one "
                      f"({num_cpus or os.cpu_count()} CPUs)", file=sys.stderr, flush=True)
            target = "local"
        else:
            target = found
    try:
        # "local" starts a fresh local Ray: without it, ray.init joins whatever `ray start` ran
        # last on this machine (its address is remembered in /tmp/ray), even one long gone.
        ray.init(address=target, num_cpus=num_cpus if target == "local" else None, include_dashboard=False,
                 log_to_driver=False, configure_logging=False, ignore_reinit_error=True, runtime_env=_runtime_env())
    except (ConnectionError, RuntimeError) as e:
        hint = f" — {_TOKEN_HINT}" if address else ""
        where = f"{target} ({option} auto)" if address == "auto" else address or "local"
        raise FanoutError(f"cannot join the Ray cluster at {where}: {str(e).splitlines()[0]}{hint}") from None
    return ray


# ------------------------------------------------------------------ running points


def _call(fn: Callable, shared: Any, point: Any) -> Any:
    return fn(point) if shared is _NONE else fn(shared, point)


_SHARED: dict = {}  # a Ray worker's copy of the latest sweep's ``shared`` (by object ref)


def _chunk(fn: Callable, shared_ref: list, points: list) -> list:
    """One Ray task: a run of consecutive points. ``shared`` is fetched once per worker process
    and sweep (the ref arrives nested, so Ray does not deserialize it for every task), so what
    ``fn`` caches on it (dse's per-lane VPU cycles) lasts across the worker's tasks."""
    if not shared_ref:
        return [fn(p) for p in points]
    key = shared_ref[0].hex()
    if key not in _SHARED:
        import ray

        _SHARED.clear()
        _SHARED[key] = ray.get(shared_ref[0])
    shared = _SHARED[key]
    return [fn(shared, p) for p in points]


@contextmanager
def _bar(description: str, total: int):
    """A transient rich progress bar on stderr; yields advance(n)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def run_points(fn: Callable, points: Iterable, *, shared: Any = _NONE, ray_address: str | None = None,
               progress: bool | Callable[[int], None] | None = None, description: str = "points",
               chunk: int | None = None, num_cpus: int | None = None) -> list:
    """``fn`` over ``points``, here or on Ray (``ray_address``: host:port, ``auto`` or ``local``).

    ``progress``: None (silent), True (a rich bar on stderr named ``description``) or a callable
    advanced by the number of points finished. ``chunk``: points per Ray task (default: about
    four tasks per CPU of the cluster). Results are in the order of ``points``."""
    points = list(points)
    if progress is True:
        with _bar(description, len(points)) as advance:
            return run_points(fn, points, shared=shared, ray_address=ray_address, progress=advance, chunk=chunk,
                              num_cpus=num_cpus)
    advance = progress or (lambda _n: None)
    if not ray_address:
        out = []
        for p in points:
            out.append(_call(fn, shared, p))
            advance(1)
        return out
    ray = connect(ray_address, num_cpus)
    if not points:
        return []
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    size = chunk or max(1, math.ceil(len(points) / (4 * cpus)))
    remote = ray.remote(num_cpus=1, max_retries=0)(_chunk)
    ref = [] if shared is _NONE else [ray.put(shared)]
    pending = {remote.remote(fn, ref, points[i:i + size]): i for i in range(0, len(points), size)}
    out: list = [None] * len(points)
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for r in done:
                start = pending.pop(r)
                try:
                    part = ray.get(r)
                except ray.exceptions.RayTaskError as e:  # the point's own exception, as raised locally
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else e) from None
                out[start:start + len(part)] = part
                advance(len(part))
    finally:
        for r in pending:
            ray.cancel(r)
    return out


def shutdown() -> None:
    """Disconnect from Ray (and stop a local Ray this process started)."""
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


__all__: Sequence[str] = ("FanoutError", "connect", "parse_address", "probe", "recorded_address", "resolve_auto", "run_points",
                          "shutdown")
