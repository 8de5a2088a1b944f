"""The programs image functions need, found and tried once per node process: fail closed.

A runtime on the PATH is not enough: crun 1.8 (Debian 12) refuses every container on a host whose
cgroup v2 hierarchy holds a controller while v1 is mounted too ("cgroups in hybrid mode not
supported"), which is this project's VM. So each candidate (``NEARFAAS_OCI_RUNTIME``, else crun,
then runc) runs a probe container with the same confinement a function gets (bundle.py, a memory
limit included) whose program does not exist: a runtime that gets as far as exec'ing it works.
When none does, or umoci/skopeo are missing, starting an image function fails with a message
that names what is missing and how to install it; nothing ever runs unconfined instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from nearfaas.node.oci import bundle

CANDIDATES = ("crun", "runc")
PROBE_PROGRAM = "/nearfaas-probe-missing"
INSTALL = "run `make setup` as root (it installs crun, runc, umoci and skopeo from Debian), or apt-get install -y runc umoci skopeo"


@dataclass
class Tools:
    runtime: str | None = None                       # path of the OCI runtime that passed the probe
    umoci: str | None = None
    skopeo: str | None = None
    problems: list[str] = field(default_factory=list)  # why each missing or failing piece cannot be used

    def refusal(self) -> str | None:
        """The error an image function's start gets, or None when everything is there."""
        if self.runtime and self.umoci and self.skopeo:
            return None
        return "image functions cannot run on this node: " + "; ".join(self.problems) + f". Fix: {INSTALL}"


_cache: dict[str, Tools] = {}


def find(work_dir: Path) -> Tools:
    """The tools, probed once per process (``work_dir``: where the probe's bundle goes). Only a
    success is kept: after `make setup` the next start finds them, without a node restart."""
    key = str(work_dir)
    if key in _cache:
        return _cache[key]
    found = _find(work_dir)
    if found.refusal() is None:
        _cache[key] = found
    return found


def _find(work_dir: Path) -> Tools:
    tools = Tools(umoci=shutil.which("umoci"), skopeo=shutil.which("skopeo"))
    for name, path in (("umoci", tools.umoci), ("skopeo", tools.skopeo)):
        if path is None:
            tools.problems.append(f"{name} is not installed (it {'unpacks' if name == 'umoci' else 'imports'} images)")
    wanted = os.environ.get("NEARFAAS_OCI_RUNTIME")
    for candidate in ([wanted] if wanted else CANDIDATES):
        path = shutil.which(candidate)
        if path is None:
            tools.problems.append(f"the OCI runtime {candidate} is not installed")
            continue
        failure = probe(path, work_dir)
        if failure is None:
            tools.runtime = path
            tools.problems = [p for p in tools.problems if "OCI runtime" not in p]  # an earlier one's absence no longer matters
            break
        tools.problems.append(f"{candidate} cannot run containers here: {failure}")
    return tools


def probe(runtime: str, work_dir: Path, timeout: float = 20.0) -> str | None:
    """Run a probe container; None when the runtime reached exec, else what it said."""
    work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="probe-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        cid = f"nearfaas-probe-{uuid.uuid4().hex[:8]}"
        cfg = bundle.config(rootfs, bundle.process([PROBE_PROGRAM], {"PATH": bundle.DEFAULT_PATH}, "/", 65534),
                            hostname="probe", limits={"memory": 64 << 20, "pids": 16}, tmp_size=1 << 20, secrets_dir=None,
                            cgroups_path=None)
        cfg["mounts"] = [m for m in cfg["mounts"] if m["destination"] in ("/proc", "/dev", "/tmp")]
        bundle.write(Path(tmp), cfg)
        root = Path(tmp) / "state"
        try:
            done = subprocess.run([runtime, "--root", str(root), "run", "--bundle", tmp, cid], capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            subprocess.run([runtime, "--root", str(root), "delete", "--force", cid], capture_output=True, timeout=timeout)
        said = (done.stderr + done.stdout).strip()
        if PROBE_PROGRAM in said:
            return None  # it set everything up and tried to exec our missing program
        return said.splitlines()[-1] if said else f"exit {done.returncode} without a word"
