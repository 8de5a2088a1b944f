"""Images from disk or a registry, imported once and unpacked once per host.

``image_source`` (spec/stack.py resolved it at deploy) is one of ``oci:/abs/layout[:tag]``,
``oci-archive:/abs/file.tar``, ``docker-archive:/abs/file.tar`` or ``docker://reference``. Each
is copied by skopeo into one OCI layout of the host's own (``<state>/oci/layout``, blobs shared
between images), tagged by a key of the source: a file's path, size and mtime, a layout's path,
tag and index, a registry reference as written. skopeo does the conversions (docker archives,
multi-platform indexes), and the user's files are never written to. A registry reference is
looked up first in that layout (``nearfaas``'s local store: import an image there by hand with
skopeo, docs/images.md), then pulled when a registry answers: over TLS, except from a registry on
this host's loopback (``localhost:5000``, as kind and k3d users run one) or one named in
``NEARFAAS_INSECURE_REGISTRIES`` (comma-separated ``host:port``), which speak plain HTTP.

The manifest's layers key the unpacked bundle (``<state>/oci/bundles/<key>/rootfs``, by umoci):
instances and functions that use the same image share one read-only rootfs, so a second instance
starts without touching the image again. Layers, not the manifest's digest: images that differ
only in their config (another fprocess, the same files: what ``umoci config`` or a Dockerfile's
ENV line makes) share one rootfs too; their configs are read from their own manifests. Imports and unpacks hold a lock file: two nodes
of one host never unpack the same image twice, nor write the layout's index.json at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from nearfaas import atomic

IMPORT_TIMEOUT_S = 300.0
REGISTRY_TIMEOUT_S = 60.0
TRANSPORTS = ("oci:", "oci-archive:", "docker-archive:", "docker://")


class ImageError(Exception):
    """The image cannot be used; ``status`` 400 when the deployment must change, 502 otherwise."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Image:
    source: str
    digest: str          # the manifest's, "sha256:..."
    rootfs: Path
    config: dict         # the image config's "config" object: Entrypoint, Cmd, Env, WorkingDir, ExposedPorts, User

    def env(self) -> dict[str, str]:
        out = {}
        for item in self.config.get("Env") or []:
            key, _, value = str(item).partition("=")
            out[key] = value
        return out


def prepare(source: str, state_dir: Path, umoci: str, skopeo: str) -> Image:
    """The image of ``source``, imported and unpacked (blocking: run it off the event loop)."""
    root = state_dir / "oci"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    layout = root / "layout"
    tag = _key(source)
    with _locked(root / "layout.lock"):
        digest = _digest_of(layout, tag)
        if digest is None:
            _import(source, layout, tag, skopeo)
            digest = _digest_of(layout, tag)
            if digest is None:
                raise ImageError(f"image: skopeo imported {source} but the layout has no manifest tagged {tag}", status=502)
    manifest = _blob(layout, digest)
    config = (_blob(layout, manifest["config"]["digest"]).get("config")) or {}
    layers = "\n".join(layer["digest"] for layer in manifest.get("layers") or [])
    bundle = root / "bundles" / hashlib.sha256(layers.encode()).hexdigest()[:32]
    if not (bundle / ".complete").exists():
        bundle.parent.mkdir(parents=True, exist_ok=True)
        with _locked(bundle.parent / f"{bundle.name}.lock"):
            if not (bundle / ".complete").exists():
                _unpack(layout, tag, bundle, umoci)
    return Image(source, digest, bundle / "rootfs", config)


def _key(source: str) -> str:
    """The layout tag of a source: it changes when the file or layout does (a rebuilt image)."""
    if source.startswith("docker://"):
        ident = source  # pulled once; redeploy under a new tag to pull again
    else:
        transport, _, rest = source.partition(":")
        path = rest.split(":", 1)[0]
        try:
            st = os.stat(path)
            marker = Path(path) / "index.json" if transport == "oci" else Path(path)
            mt = os.stat(marker)
            ident = f"{source}|{st.st_ino}|{mt.st_size}|{mt.st_mtime_ns}"
        except OSError as exc:
            raise ImageError(f"image: {path} cannot be read on this node ({exc.strerror}); put the image there, or give "
                             f"image: a path every node can read") from None
    return "k-" + hashlib.sha256(ident.encode()).hexdigest()[:24]


def _import(source: str, layout: Path, tag: str, skopeo: str) -> None:
    """skopeo copy SOURCE into the host's layout. A registry reference first looks for a tag of
    that name in the layout (images imported by hand); only then is a registry asked."""
    if source.startswith("docker://"):
        ref = source.removeprefix("docker://")
        local = _digest_of(layout, ref)
        if local is not None:
            _tag(layout, ref, tag)
            return
    timeout = REGISTRY_TIMEOUT_S if source.startswith("docker://") else IMPORT_TIMEOUT_S
    argv = [skopeo, "--insecure-policy", "copy", "--quiet", source, f"oci:{layout}:{tag}"]
    if source.startswith("docker://") and plain_http_registry(source.removeprefix("docker://")):
        argv[3:3] = ["--src-tls-verify=false"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"image: importing {source} took over {timeout:g}s", status=504) from None
    if done.returncode == 0:
        return
    said = " ".join((done.stderr or done.stdout).strip().split())[-400:]
    if source.startswith("docker://"):
        ref = source.removeprefix("docker://")
        raise ImageError(f"image: {ref!r} is not in this host's image store and could not be pulled from its registry ({said}). "
                         f"Fix: push it there (a registry on loopback, or one in NEARFAAS_INSECURE_REGISTRIES, may be plain HTTP), save the "
                         f"image to a file (docker save, or skopeo copy ... docker-archive:IMG.tar) and deploy "
                         f"image: docker-archive:/path/IMG.tar (or oci-archive:/ oci:), or import it once with "
                         f"skopeo copy docker-archive:IMG.tar oci:{layout}:{ref}", status=502)
    raise ImageError(f"image: {source} is not a readable image ({said}). Fix: export it again (skopeo copy ... "
                     f"oci-archive:FILE, docker save -o FILE) or give the OCI layout folder as oci:/path[:tag]")


def plain_http_registry(reference: str) -> bool:
    """Whether the registry of ``reference`` is spoken to over plain HTTP: one on loopback (its
    traffic never leaves the host) or one the operator listed in NEARFAAS_INSECURE_REGISTRIES."""
    first = reference.split("/", 1)[0]
    if "/" not in reference or not ("." in first or ":" in first or first == "localhost"):
        return False  # docker.io/library/...: a public registry, always TLS
    host = first[1:first.find("]")] if first.startswith("[") else first.partition(":")[0]  # [::1]:5000, host:5000
    listed = {r.strip() for r in os.environ.get("NEARFAAS_INSECURE_REGISTRIES", "").split(",") if r.strip()}
    return host in ("localhost", "::1") or host.startswith("127.") or first in listed


def _tag(layout: Path, existing: str, tag: str) -> None:
    """Give the manifest tagged ``existing`` the extra tag ``tag`` (same manifest, no copy)."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    entry = next(m for m in index["manifests"] if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == existing)
    index["manifests"].append(dict(entry, annotations=dict(entry.get("annotations") or {}, **{"org.opencontainers.image.ref.name": tag})))
    atomic.write_text(index_path, json.dumps(index), 0o600)


def _digest_of(layout: Path, tag: str) -> str | None:
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        return None
    for entry in index.get("manifests") or []:
        if (entry.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag:
            return entry["digest"]
    return None


def _blob(layout: Path, digest: str) -> dict:
    algo, _, hexdigest = digest.partition(":")
    return json.loads((layout / "blobs" / algo / hexdigest).read_text())


def _unpack(layout: Path, tag: str, bundle: Path, umoci: str) -> None:
    """umoci unpack into ``<bundle>.partial``, renamed when complete: a crash leaves no half rootfs."""
    partial = bundle.with_name(bundle.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(bundle, ignore_errors=True)
    done = subprocess.run([umoci, "unpack", "--image", f"{layout}:{tag}", str(partial)], capture_output=True, text=True,
                          timeout=IMPORT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        said = " ".join((done.stderr or done.stdout).strip().split())[-400:]
        raise ImageError(f"image: umoci could not unpack the image ({said}); rebuild or export it again", status=502)
    os.chmod(partial, 0o755)  # the function's uid walks to rootfs/ (umoci makes the bundle folder 0700)
    (partial / ".complete").touch()
    atomic.publish(partial, bundle)


class _locked:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.file = open(self.path, "w")
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.file.close()
