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
``ray start --head`` left running here (``RAY_ADDRESS`` or Ray's own record of it) and, when
there is none, starts a local one and says so on stderr (with ``auto_local=False``, as
``nearfaas up --ray auto`` asks, it is an error within seconds that names the address tried and
where it came from: a record left by a killed cluster would make ray.init retry for minutes); ``host:port`` joins that cluster after
a 3 s TCP probe, so an unreachable address is a clear error at once, not a minute-long hang.

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
    return host, int(port)


def probe(address: str, option: str = "--ray", timeout_s: float = 3.0) -> None:
    """A TCP connection to the cluster's GCS port within ``timeout_s``, else a clear error."""
    host, port = parse_address(address, option)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise FanoutError(f"cannot reach a Ray cluster at {address}: {e}; start one with `ray start --head` "
                          f"or leave {option} out to run on a local Ray") from None


def recorded_address() -> tuple[str | None, str]:
    """The address ``ray.init(address="auto")`` would try, and where it comes from: RAY_ADDRESS,
    else the file ``ray start`` writes (``<RAY_TMPDIR or /tmp>/ray/ray_current_cluster``), which
    stays behind when that cluster is killed. (None, where it looked) when neither names one."""
    addr = os.environ.get("RAY_ADDRESS")
    if addr and addr not in ("auto", "local"):
        return addr.removeprefix("ray://"), "RAY_ADDRESS"
    try:
        from ray._common.utils import get_ray_address_file

        path = Path(get_ray_address_file(None))
    except Exception:  # a private helper of Ray's: fall back to its documented default
        path = Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"
    try:
        addr = path.read_text().strip()
    except OSError:
        return None, f"RAY_ADDRESS is unset and {path} does not exist"
    return (addr.removeprefix("ray://") or None), str(path)


def resolve_auto(option: str = "--ray", timeout_s: float = 3.0) -> str:
    """``auto`` -> the live cluster's address, or a FanoutError that names the address tried,
    where it came from and what to do; never ray.init's minutes of GCS time-outs on a dead one."""
    addr, source = recorded_address()
    hint = f"start one here with `ray start --head`, or name one with {option} HOST:PORT"
    if addr is None:
        raise FanoutError(f"{option} auto: no Ray cluster is recorded on this machine ({source}); {hint}")
    host, port = parse_address(addr, f"{option} auto ({source})")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        stale = f" (a stale record: the cluster that wrote {source} is gone)" if source != "RAY_ADDRESS" else ""
        raise FanoutError(f"{option} auto: no Ray cluster answers at {addr}, the address from {source}{stale}: {e}; {hint}") from None
    return addr


def _running_cluster() -> str | None:
    """The live cluster ``auto`` names, or None (nothing recorded, or nothing answers there)."""
    try:
        return resolve_auto(timeout_s=1.0)
    except FanoutError:
        return None


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
        found = _running_cluster()
        if found is None:
            if not quiet:
                print(f"{option} auto: no running Ray cluster found here; starting a local one "
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
        hint = (" — if the cluster uses token authentication (Ray's default for `ray start --head`), "
                "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) here too") if address else ""
        raise FanoutError(f"cannot join the Ray cluster at {address or 'local'}: {str(e).splitlines()[0]}{hint}") from None
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


__all__: Sequence[str] = ("FanoutError", "connect", "parse_address", "probe", "run_points", "shutdown")
