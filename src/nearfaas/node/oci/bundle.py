"""One container's OCI runtime config (config.json), written by nearfaas rather than taken from
``umoci unpack``: the image says what to run, the platform says how it is confined.

The confinement, and why:
- the image's rootfs, shared by every instance of every function that uses the image, is mounted
  read-only (readOnlyRootFilesystem, as OpenFaaS offers it): no instance can change what another
  sees; /tmp and /dev/shm are tmpfs of the instance's own, sized like a Python worker's /tmp;
- new pid, mount, ipc, uts and network namespaces: the host's processes, files and ports are out
  of sight; the network namespace has only loopback (the runtime brings it up), which the host
  process reaches by entering it (runtime/image_host.py), so two instances never contend for port 8080;
- the process runs as the function's own uid (the one its Python workers would have), no
  capabilities, no_new_privs: root in the image is not root on the host;
- the default seccomp profile of node/seccomp.py (the one Python workers load): no namespaces,
  mounts, ptrace, keyrings, bpf, ... (EPERM);
- memory, pids and CPU limits through the runtime's cgroups, from the spec's ``limits``;
- the function's secrets, copied per instance by node/pool.py, bound read-only at
  /var/openfaas/secrets, where OpenFaaS functions read them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nearfaas.node import seccomp

SECRETS_AT = "/var/openfaas/secrets"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CPU_PERIOD_US = 100_000


def process(args: list[str], env: dict[str, str], cwd: str, uid: int) -> dict:
    """An OCI ``process`` object (also what ``runtime exec --process`` takes, per call)."""
    return {
        "terminal": False, "user": {"uid": uid, "gid": uid}, "args": args,
        "env": [f"{k}={v}" for k, v in env.items()], "cwd": cwd or "/",
        "capabilities": {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")},
        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
        "noNewPrivileges": True,
    }


def config(rootfs: Path, proc: dict, *, hostname: str, limits: dict, tmp_size: int, secrets_dir: Path | None,
           cgroups_path: str | None) -> dict:
    """The runtime config of one instance; ``limits`` as node/jail.limits_of returns them."""
    tmp = f"size={tmp_size},mode=1777"
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", tmp]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", tmp]},
    ]
    if secrets_dir is not None:
        mounts.append({"destination": SECRETS_AT, "type": "bind", "source": str(secrets_dir),
                       "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]})
    resources: dict = {"devices": [{"allow": False, "access": "rwm"}]}
    if limits.get("memory"):
        # swap equal to the limit: no swap on top of it (v1 counts memory+swap together)
        resources["memory"] = {"limit": int(limits["memory"]), "swap": int(limits["memory"])}
    if limits.get("pids"):
        resources["pids"] = {"limit": int(limits["pids"])}
    if limits.get("cpu"):
        resources["cpu"] = {"quota": int(float(limits["cpu"]) * CPU_PERIOD_US), "period": CPU_PERIOD_US}
    linux: dict = {
        "resources": resources,
        "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
        "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                        "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        "seccomp": seccomp.oci_profile(),  # the Python workers' profile, one list for both
    }
    if cgroups_path:
        linux["cgroupsPath"] = cgroups_path
    return {"ociVersion": "1.0.2", "process": proc, "root": {"path": str(rootfs), "readonly": True},
            "hostname": hostname, "mounts": mounts, "linux": linux}


def write(bundle_dir: Path, cfg: dict) -> Path:
    """Write ``config.json`` into ``bundle_dir`` (0700: it names the secrets' folder)."""
    bundle_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = bundle_dir / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path
