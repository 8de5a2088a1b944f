"""A function's code travels as a bundle: a gzipped tar of its handler folder.

The gateway never runs code from a path a client names. ``nearfaas deploy`` packs the handler
folder (:func:`pack`) and sends it in the FunctionDeployment as ``"bundle"`` (base64); the
gateway unpacks it (:func:`unpack`) into ``<state>/functions/<name>/<digest>/``, a folder no
function can see but its own workers (read-only), and deploys from there. A deployment that
names a ``handler`` path instead is copied the same way, and only from under the cluster's
``gateway.handler_roots``.

Worked example: ``examples/hello`` (one handler.py of 300 bytes) packs to ~250 bytes of
base64; deploying it twice with the same content reuses ``functions/hello/<digest>/``.

Known caveats:
- Only regular files and folders are packed and unpacked: a symlink, device or hard link in a
  handler folder is an error that names it, never followed.
- A bundle is capped at ``MAX_BUNDLE_BYTES`` unpacked and ``MAX_FILES`` entries; large data
  belongs in objects, and dependencies in requirements.txt.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import shutil
import tarfile
import zlib
from pathlib import Path

from nearfaas import atomic

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_FILES = 10_000
_SKIP = {"__pycache__", ".git", ".venv"}


class BundleError(ValueError):
    """The bundle or handler folder cannot be used; the message says why and what to do."""


def pack(folder: Path) -> str:
    """The handler folder as base64 of a gzipped tar (sorted, no times or owners)."""
    return base64.b64encode(pack_bytes(folder)).decode()


def pack_bytes(folder: Path) -> bytes:
    """The handler folder as a gzipped tar (what ``unpack_into`` takes)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BundleError(f"handler folder {folder} does not exist")
    raw = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=6) as tar:
        for path in _walk(folder):
            rel = path.relative_to(folder).as_posix()
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            total += info.size
            if total > MAX_BUNDLE_BYTES:
                raise BundleError(f"handler folder {folder} holds over {MAX_BUNDLE_BYTES >> 20} MiB; keep data in objects "
                                  "and dependencies in requirements.txt")
            with open(path, "rb") as f:
                tar.addfile(info, f)
    return raw.getvalue()


def _walk(folder: Path):
    for path in sorted(folder.rglob("*")):
        if any(part in _SKIP for part in path.relative_to(folder).parts):
            continue
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise BundleError(f"{path} is a link or special file; a handler folder may hold only files and folders")
        yield path


def unpack(data: str, functions_dir: Path, name: str) -> Path:
    """Unpack a base64 bundle into ``functions_dir/<name>/<digest>`` (reused when it exists)."""
    if not isinstance(data, str):
        raise BundleError("bundle: must be a string, the handler folder as base64 of a .tar.gz (nearfaas deploy makes it)")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BundleError("bundle: is not valid base64") from None
    return unpack_into(blob, functions_dir / name / hashlib.sha256(blob).hexdigest()[:20])


def unpack_into(blob: bytes, target: Path) -> Path:
    """Unpack a gzipped tar into ``target`` (all or nothing; reused when it is complete)."""
    if (target / ".complete").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    # functions/ and functions/<name> are the platform's (0700); the bundle itself is 0755/0644:
    # the function's uid reads it through the bind mount its jail makes (node/jail.py).
    atomic.private_dir(staging.parent)
    staging.mkdir(mode=0o755)
    os.chmod(staging, 0o755)  # whatever the umask
    try:
        _extract(blob, staging)
        (staging / ".complete").touch()
        if target.exists():  # another deploy of the same content won the race
            shutil.rmtree(staging)
        else:
            atomic.publish(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _extract(blob: bytes, dest: Path) -> None:
    total = count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for member in tar:
                count += 1
                if count > MAX_FILES:
                    raise BundleError(f"bundle: holds over {MAX_FILES} entries")
                parts = Path(member.name).parts
                if member.name.startswith("/") or ".." in parts or not parts:
                    raise BundleError(f"bundle: entry {member.name!r} leaves the handler folder")
                if not (member.isfile() or member.isdir()):
                    raise BundleError(f"bundle: entry {member.name!r} is a link or special file; only files and folders are allowed")
                total += member.size
                if total > MAX_BUNDLE_BYTES:
                    raise BundleError(f"bundle: unpacks to over {MAX_BUNDLE_BYTES >> 20} MiB")
                path = dest.joinpath(*parts)
                if member.isdir():
                    atomic.private_dir(path, 0o755)
                    continue
                atomic.private_dir(path.parent, 0o755)
                with tar.extractfile(member) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(path, 0o755 if member.mode & 0o100 else 0o644)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise BundleError(f"bundle: is not a readable .tar.gz ({exc})") from None


def copy_folder(folder: Path, functions_dir: Path, name: str) -> Path:
    """A handler folder given by path, copied into the state dir as a bundle would be."""
    return unpack(pack(folder), functions_dir, name)
