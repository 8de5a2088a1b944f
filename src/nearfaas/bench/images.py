"""Small OCI images made on this host with umoci, without Docker or a registry: what the image
function tests (tests/integration/test_images.py) and benchmarks/invoke_overhead.py run. One
busybox image (a classic-watchdog shell function) and one image of the host's own python3 and
part of its stdlib, configured three ways; the sample functions are examples/images/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[3] / "examples" / "images"  # the sample functions copied into /app
BUSYBOX = shutil.which("busybox")
PY_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
# The stdlib the test functions need (http.server, json, urllib): the rest is left out to keep the image small.
STDLIB_SKIP = ("test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "site-packages",
               "dist-packages", "config-*", "distutils", "unittest", "sqlite3")


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def python_rootfs(rootfs: Path) -> None:
    """The host's python3, the shared libraries it links and most of its stdlib."""
    exe = os.path.realpath("/usr/bin/python3")
    (rootfs / "usr/bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(exe, rootfs / "usr/bin/python3")
    for line in subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        lib = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if lib.startswith("/"):
            (rootfs / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(lib), rootfs / lib.lstrip("/"))
    shutil.copytree(Path("/usr/lib") / PY_VERSION, rootfs / "usr/lib" / PY_VERSION, ignore=shutil.ignore_patterns(*STDLIB_SKIP))


def busybox_rootfs(rootfs: Path) -> None:
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin/busybox")
    for applet in ("sh", "cat", "tr", "echo", "sleep", "ls", "id", "env"):
        os.symlink("busybox", rootfs / "bin" / applet)


def build(layout: Path, tag: str, fill, config: list[str]) -> None:
    """One image: an empty one from umoci, its rootfs filled by ``fill``, repacked, configured."""
    if not (layout / "index.json").exists():
        run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:{tag}")
    work = layout.parent / f"unpacked-{tag}"
    run("umoci", "unpack", "--image", f"{layout}:{tag}", str(work))
    fill(work / "rootfs")
    (work / "rootfs/app").mkdir(exist_ok=True)
    for script in SCRIPTS.iterdir():
        shutil.copy2(script, work / "rootfs/app" / script.name)
    run("umoci", "repack", "--image", f"{layout}:{tag}", str(work))
    run("umoci", "config", "--image", f"{layout}:{tag}", "--config.workingdir", "/app", *config)
    shutil.rmtree(work)


# A stand-in for OpenFaaS's classic watchdog (github.com/openfaas/classic-watchdog is not served
# by this machine's Go proxy): an image whose CMD is fwatchdog and which names no fprocess, as the
# functions/alpine images do, so the deployment's fprocess is what makes it run. Started with no
# fprocess it refuses as the real one does; nearfaas never starts it (it runs fprocess per call
# itself, node/oci/launch.py), so a call that reaches it means fprocess was lost on the way.
FWATCHDOG = """#!/bin/sh
if [ -z "$fprocess" ]; then
  echo "Provide a valid process via fprocess environmental variable." >&2
  exit 1
fi
echo "this stand-in serves no HTTP: nearfaas should have run fprocess itself" >&2
exit 2
"""


def watchdog_rootfs(rootfs: Path) -> None:
    busybox_rootfs(rootfs)
    (rootfs / "usr/bin").mkdir(parents=True, exist_ok=True)
    (rootfs / "usr/bin/fwatchdog").write_text(FWATCHDOG)
    os.chmod(rootfs / "usr/bin/fwatchdog", 0o755)


def build_images(root: Path) -> dict[str, str]:
    """Four images in one OCI layout under ``root``, two of them also as archives (every source
    kind): ``{"sh", "py-classic", "py-http", "watchdog"}`` -> the ``image:`` that names each."""
    os.chmod(root, 0o755)
    layout = root / "layout"
    build(layout, "sh", busybox_rootfs, ["--config.env", "fprocess=sh /app/shout.sh"])
    build(layout, "watchdog", watchdog_rootfs, ["--config.env", "PATH=/usr/bin:/bin", "--config.cmd", "fwatchdog"])
    build(layout, "py", python_rootfs, [])
    # Two configurations of one rootfs: new manifests, the same layer.
    run("umoci", "config", "--image", f"{layout}:py", "--tag", "py-classic", "--config.env", "fprocess=python3 /app/shout.py")
    run("umoci", "config", "--image", f"{layout}:py", "--tag", "py-http", "--config.env", "fprocess=python3 /app/server.py",
        "--config.env", "mode=http", "--config.env", "upstream_url=http://127.0.0.1:5000", "--config.exposedports", "5000/tcp")
    run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:py-http", f"oci-archive:{root / 'http.tar'}")
    run("skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:py-classic", f"docker-archive:{root / 'classic.tar'}:py:classic")
    return {"sh": f"oci:{layout}:sh", "watchdog": f"oci:{layout}:watchdog", "py-classic": f"docker-archive:{root / 'classic.tar'}", "py-http": f"oci-archive:{root / 'http.tar'}",
            "layout": str(layout), "root": str(root)}
