"""The measuring rig behind econ/headroom.py: the C sender and receiver (native/headroom, built
by ``make setup`` into native/headroom/build/), the path between them and the CPU quota the
sender runs under. Every number it returns is measured.

Paths:
* ``Loopback`` — 127.0.0.1, nothing to set up.
* ``Veth`` — a network namespace ``nearfaas-hr-<pid>`` with one end of a veth pair
  (``nfhr<pid>h`` here, ``nfhr<pid>n`` there, a /30 in 10.250.0.0/16 picked from the pid); the
  receiver runs inside it. The MTU is 65535, so no datagram is fragmented (as on loopback).
  With a link profile of finite bandwidth the host end gets a TBF qdisc at that rate (this
  kernel has no netem, so only the bandwidth is emulated, not the first-byte latency). Torn
  down on exit, also on errors and Ctrl-C; leftovers of a killed run (a dead pid in the name)
  are removed by the next one.
* ``CpuQuota`` — a cgroup v1 group ``/sys/fs/cgroup/cpu/nearfaas-headroom-<pid>`` with
  ``cpu.cfs_quota_us = cpus * 100000``; the sender is started inside it (a shell writes its own
  pid to ``cgroup.procs`` and execs the sender, so no packet leaves before the quota holds). If
  the quota cannot be set, or a run used more CPU than it allows, it fails: an unrestricted run
  must never be reported as a node's.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import subprocess
import time
from pathlib import Path

from nearfaas import cgroups as cg
from nearfaas.econ.headroom import Knobs, Run
from nearfaas.link.profiles import LinkProfile
from nearfaas.pids import alive

BUILD = Path(__file__).resolve().parents[3] / "native" / "headroom" / "build"
CGROUP_CPU = "/sys/fs/cgroup/cpu"
PERIOD_US = 100_000
VETH_MTU = 65535  # the veth maximum: every UDP payload (<= 65507 B) fits one frame
QUOTA_SLACK = 1.25  # a run may show this much over its quota (accounting granularity) before we call it unenforced


class RigError(RuntimeError):
    """The rig cannot measure what was asked (missing binary, no namespace, no quota)."""


def binaries(build: Path = BUILD) -> tuple[Path, Path]:
    sender, receiver = build / "sender", build / "receiver"
    for p in (sender, receiver):
        if not os.access(p, os.X_OK):
            raise RigError(f"the headroom rig is not built: {p} is missing; run `make setup` "
                           f"(or `make -C native/headroom`; needs a C compiler)")
    return sender, receiver


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and p.returncode:
        raise RigError(f"`{' '.join(argv)}` failed: {(p.stderr or p.stdout).strip()}")
    return p


class Loopback:
    name = "loopback"
    dest = bind = "127.0.0.1"
    prefix: list[str] = []
    link: LinkProfile | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def describe(self) -> dict:
        return {"path": "loopback", "dest": self.dest}


class Veth:
    """A namespace and a veth pair for the receiver, optionally shaped to ``link``'s bandwidth."""

    def __init__(self, link: LinkProfile | None = None):
        self.link = link
        pid = os.getpid()
        self.ns, self.host_if, self.peer_if = f"nearfaas-hr-{pid}", f"nfhr{pid}h", f"nfhr{pid}n"
        base = (pid % 16384) * 4  # a /30 per pid in 10.250.0.0/16
        net = f"10.250.{base >> 8}.{base & 255}"
        self.subnet = net + "/30"
        self.dest = self.bind = f"10.250.{base >> 8}.{(base & 255) + 2}"
        self.host_ip = f"10.250.{base >> 8}.{(base & 255) + 1}"
        self.prefix = ["ip", "netns", "exec", self.ns]
        self.shaped_bps = link.bandwidth_bytes_per_s * 8 if link and link.bandwidth_bytes_per_s != float("inf") else None

    def __enter__(self):
        if os.geteuid() != 0:
            raise RigError("--veth creates a network namespace and a veth pair, which needs root; run as root or use --loopback")
        if not shutil.which("ip"):
            raise RigError("--veth needs the `ip` command (iproute2); install it or use --loopback")
        sweep_stale()
        if re.search(rf"\binet 10\.250\.{self.host_ip.split('.')[2]}\.", _sh("ip", "-4", "-o", "addr", check=False).stdout):
            raise RigError(f"{self.subnet} overlaps an address already on this machine; run again (the pid picks another)")
        try:
            _sh("ip", "netns", "add", self.ns)
            _sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if, "netns", self.ns)
            # One frame per datagram, as on loopback: with a 1500 B MTU, sizes above 1472 fragment,
            # and fragments lost to the shaper fill the reassembly queue until nothing arrives.
            _sh("ip", "link", "set", self.host_if, "mtu", str(VETH_MTU))
            _sh("ip", "-n", self.ns, "link", "set", self.peer_if, "mtu", str(VETH_MTU))
            _sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _sh("ip", "link", "set", self.host_if, "up")
            _sh("ip", "-n", self.ns, "addr", "add", f"{self.dest}/30", "dev", self.peer_if)
            _sh("ip", "-n", self.ns, "link", "set", self.peer_if, "up")
            _sh("ip", "-n", self.ns, "link", "set", "lo", "up")
            if self.shaped_bps:
                rate_bytes = self.shaped_bps / 8
                # TBF's bucket must hold at least one tick of tokens and the largest packet.
                burst = max(256 * 1024, int(rate_bytes / 100))
                _sh("tc", "qdisc", "add", "dev", self.host_if, "root", "tbf", "rate", f"{int(self.shaped_bps)}bit",
                    "burst", str(burst), "latency", "20ms")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        _sh("ip", "netns", "del", self.ns, check=False)  # takes the peer, and with it the pair
        _sh("ip", "link", "del", self.host_if, check=False)
        return False

    def describe(self) -> dict:
        return {"path": "veth", "namespace": self.ns, "dest": self.dest, "mtu": VETH_MTU,
                "link": self.link.name if self.link else None, "shaped_bps": self.shaped_bps}


class CpuQuota:
    """The sender held to ``cpus`` cores by a cgroup v1 CFS quota; fails closed."""

    def __init__(self, cpus: float, root: str = CGROUP_CPU):
        if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not 0.01 <= cpus <= 1024:
            raise ValueError(f"cpus is {cpus!r}: a CPU quota in cores, 0.01 to 1024, e.g. 0.5")
        self.cpus, self.root = float(cpus), root
        self.group = os.path.join(root, f"nearfaas-headroom-{os.getpid()}")

    def __enter__(self):
        if not cg.is_cgroup(self.root) or not os.path.isfile(os.path.join(self.root, "cpu.cfs_quota_us")):
            raise RigError(f"cannot hold the sender to {self.cpus:g} cores: no cgroup v1 cpu hierarchy at {self.root} "
                           "(needs cgroup v1 with the cpu controller); refusing to measure without the quota")
        sweep_stale(self.root)
        quota = max(1000, round(self.cpus * PERIOD_US))
        try:
            cg.make_cpu_group(self.root, os.path.basename(self.group), self.cpus, False, PERIOD_US)
            with open(os.path.join(self.group, "cpu.cfs_quota_us")) as f:
                if int(f.read()) != quota:
                    raise OSError("the quota did not stick")
        except OSError as e:
            self.__exit__(None, None, None)
            raise RigError(f"cannot hold the sender to {self.cpus:g} cores with a CPU quota in {self.group}: {e} "
                           "(needs root and a writable cgroup); refusing to measure without the quota") from None
        return self

    def __exit__(self, *exc):
        for _ in range(50):  # the sender's exit can lag its reaping by a moment
            try:
                os.rmdir(self.group)
                return False
            except FileNotFoundError:
                return False
            except OSError:
                time.sleep(0.02)
        return False

    def wrap(self, argv: list[str]) -> list[str]:
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.group, "cgroup.procs"), *argv]

    def throttled(self) -> int:
        """CFS periods in which the quota ran out so far (cpu.stat nr_throttled)."""
        try:
            with open(os.path.join(self.group, "cpu.stat")) as f:
                stat = dict(line.split()[:2] for line in f if line.strip())
        except OSError:
            return 0
        return int(stat.get("nr_throttled", 0))


def sweep_stale(cgroup_root: str = CGROUP_CPU) -> None:
    """Remove namespaces, links and cgroups left by a headroom run that was killed."""
    if shutil.which("ip") and os.geteuid() == 0:
        for line in _sh("ip", "netns", "list", check=False).stdout.splitlines():
            m = re.match(r"nearfaas-hr-(\d+)\b", line)
            if m and not alive(int(m.group(1))):
                _sh("ip", "netns", "del", m.group(0), check=False)
        for m in re.finditer(r"\d+: (nfhr(\d+)h)[@:]", _sh("ip", "-o", "link", check=False).stdout):
            if not alive(int(m.group(2))):
                _sh("ip", "link", "del", m.group(1), check=False)
    try:
        names = os.listdir(cgroup_root)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"nearfaas-headroom-(\d+)", name)
        if m and not alive(int(m.group(1))):
            try:
                os.rmdir(os.path.join(cgroup_root, name))
            except OSError:
                pass


class Rig:
    """Measures one run of the sender over ``path``, under ``quota`` if given: a Probe."""

    def __init__(self, path=None, quota: CpuQuota | None = None, build: Path = BUILD):
        self.sender, self.receiver = binaries(build)
        self.path = path or Loopback()
        self.quota = quota

    def __call__(self, knobs: Knobs) -> Run:
        recv = subprocess.Popen([*self.path.prefix, str(self.receiver), "--bind", self.path.bind, "--port", "0",
                                 "--max-seconds", str(knobs.duration_s + 60)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            port = json.loads(_line(recv, 10.0))["port"]
            argv = [str(self.sender), "--dest", self.path.dest, "--port", str(port), "--size", str(knobs.size),
                    "--burst", str(knobs.burst), "--delay", str(knobs.delay_ns), "--threads", str(knobs.threads),
                    "--duration", repr(float(knobs.duration_s)), "--wait", knobs.wait]
            before = self.quota.throttled() if self.quota else None
            sent = subprocess.run(self.quota.wrap(argv) if self.quota else argv, capture_output=True, text=True,
                                  timeout=knobs.duration_s + 30)
            if sent.returncode:
                raise RigError(f"the sender failed ({knobs.label()}): {sent.stderr.strip() or f'exit {sent.returncode}'}")
            s = json.loads(sent.stdout)
            time.sleep(0.05)  # let the last datagrams reach the receiver's socket
            out, errs = recv.communicate(input="", timeout=15)
            if recv.returncode:
                raise RigError(f"the receiver failed: {errs.strip() or f'exit {recv.returncode}'}")
            r = json.loads(out.strip().splitlines()[-1])
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
        run = Run(knobs, s["wall_s"], s["bursts"], s["attempted_packets"], s["sent_packets"], r["packets"], r["bytes"],
                  s["send_errors"], float(s["t_burst_median_ns"]), float(s["t_burst_mean_ns"]),
                  s["cpu_user_s"] + s["cpu_sys_s"], r["cpu_s"],
                  None if before is None else self.quota.throttled() - before)
        if self.quota and run.cpu_s > self.quota.cpus * run.wall_s * QUOTA_SLACK + 0.02:
            raise RigError(f"the CPU quota did not hold: the sender used {run.cpu_s / run.wall_s:.2f} cores against a "
                           f"quota of {self.quota.cpus:g}; refusing to report this run as the node's")
        return run

    def describe(self) -> dict:
        return self.path.describe() | {"cpus": self.quota.cpus if self.quota else None,
                                       "quota": self.quota.group if self.quota else None}


def _line(proc: subprocess.Popen, timeout: float) -> str:
    """The receiver's first line (its port), or a clear error if it never says it."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        raise RigError(f"the receiver did not start within {timeout:g} s")
    line = proc.stdout.readline()
    if not line:
        raise RigError(f"the receiver exited at start: {proc.stderr.read().strip() or f'exit {proc.wait()}'}")
    return line
