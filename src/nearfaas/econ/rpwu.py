"""RPWU (issue 20): how fast a node class does each of a set of micro-operations, relative to a
reference machine — the thesis's section 4.2 method. Every number here is measured.

Mechanism:
* Each stressor of a curated stress-ng subset (``DEFAULT_STRESSORS``) runs alone for
  ``duration`` seconds: ``stress-ng --<stressor> <instances> --timeout <d>s --metrics --yaml F``,
  once per *target* per repeat. Its rate is stress-ng's ``bogo-ops-per-second-real-time``.
* A target is a node class's CPU capacity (``cpus`` in the cluster file) or ``host``, the whole
  machine. Classes with equal ``cpus`` share a target: here they differ only by their quota.
* A class with ``cpus`` runs inside a cgroup CPU quota of its own (v1 ``cpu.cfs_quota_us`` /
  ``cpu.cfs_period_us`` or v2 ``cpu.max``, ``nearfaas-rpwu-<pid>-<i>`` under this process's own
  cgroup). stress-ng is started by ``/bin/sh``, which writes its own pid into the group's
  ``cgroup.procs`` and only then execs stress-ng, so every stress-ng worker starts inside the
  quota. No writable cgroup, or the write fails: ``QuotaUnavailable`` (fail closed; never an
  unrestricted run reported as a class).
* Repeats are interleaved (repeat, stressor, target), so drift such as background load or
  heat reaches every target alike instead of biasing whichever ran last.
* RPWU = bogo-ops/s of a run / mean bogo-ops/s of the same stressor on the reference (thesis
  §4.2.2: the "Raspberry Pi-based work unit"). The reference is a target of this run (default
  ``host``) or a saved ``--json`` output, e.g. from a Raspberry Pi 4B.
* Ranks (thesis Table 4.2): each target's stressors best to worst by mean RPWU, and each
  stressor's rank among the targets (and an external reference). Class averages (thesis "Class
  Results Analysis"): mean RPWU per stress-ng class, the classes stress-ng itself reports
  (``stress-ng --class <c>?``); a stressor in two classes counts in both.

Worked example (``nearfaas econ rpwu --class dscs,host --stressors cpu,udp,sem-sysv``, 2-core
VM, 1 instance, measured): ``cpu`` does about 1740 bogo-ops/s unrestricted and 870 in dscs's
0.5-CPU quota, RPWU 0.50; ``udp`` gets 0.38 (its sender and receiver share the half core that
had two whole cores); ``sem-sysv`` gets 1.2 (its two processes hand the semaphore over faster on
one core than across two), the kind of exception the thesis's ranks surface.

Known caveats:
- Short runs (default 2 s against the thesis's 60 s) rank differently for warm-up-sensitive
  stressors; the thesis's Table 4.3 shows ranks moving between 10 s and 60 s. A reference
  saved with another duration gets a warning in the result.
- stress-ng's bogo-ops are per stressor and per version: normalise only to a reference run
  by the same stress-ng version (a mismatch gets a warning).
- A quota caps CPU time, not memory bandwidth, cache or disk: a class on this machine is a
  slower CPU share of the same hardware, not a different device.
- Other load on the machine (a benchmark, the cluster) lowers every target; interleaving keeps
  the ratios fair but not the absolute rates.
- The cgroup v2 path mirrors node/capacity.py and is not exercised on the v1 development VM.
"""

from __future__ import annotations

import difflib
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import yaml

from nearfaas import cgroups as cg

HOST = "host"  # the unrestricted machine, always a valid target
DEFAULT_DURATION_S = 2
MIN_DURATION_S = 1  # stress-ng's --timeout counts whole seconds
DEFAULT_REPEATS = 3  # the thesis ran 5; 3 is the fewest that gives the box plot a spread
CGROUP_ROOT = "/sys/fs/cgroup"
PERIOD_US = 100_000  # CFS period, as node/capacity.py uses: the kernel default

# The default subset: one or two stressors per area the thesis's §4.2.3 discusses, chosen to run
# unprivileged, without special hardware, and to finish hundreds of bogo-ops even in a 1-s run
# under a 0.5-CPU quota (``stack``, ``mmap``, ``memrate`` do about one op per second: too coarse).
# The value is the area; the class averages use stress-ng's own classes.
DEFAULT_STRESSORS: dict[str, str] = {
    "cpu": "CPU arithmetic (the thesis's BlueField-2 trails even the RPi4B here)",
    "vecmath": "CPU vector math (the BlueField-2's relative strength)",
    "cache": "CPU cache (last-level cache reads and writes)",
    "mcontend": "memory contention (the BlueField-2 ranks first)",
    "malloc": "memory allocation (virtual memory)",
    "memcpy": "memory bandwidth",
    "hdd": "storage I/O (file writes and reads in a temp dir)",
    "fstat": "filesystem metadata",
    "sem-sysv": "scheduler and IPC (System V semaphores)",
    "udp": "network (kernel UDP stack over loopback)",
    "zlib": "compression",
    "crypt": "cryptography (crypt(3) hashes)",
    "timer": "interrupts and timers",
}


class RpwuError(Exception):
    """Something the user can fix: the message says what and how."""


class UnknownStressor(RpwuError):
    def __init__(self, bad: list[str], valid: list[str]):
        self.bad, self.valid = bad, valid
        hints = [h for h in (difflib.get_close_matches(b, valid, n=1) for b in bad) if h]
        hint = f" (did you mean {', '.join(h[0] for h in hints)}?)" if hints else ""
        super().__init__(f"no such stress-ng stressor: {', '.join(bad)}{hint}; valid: {', '.join(valid)}")


class Skipped(RpwuError):
    """stress-ng ran but did no work: a stressor this machine cannot exercise (the thesis skipped such ones too)."""


class QuotaUnavailable(RpwuError):
    """No CPU quota can be enforced here; a class run would really be unrestricted."""


# ---------------------------------------------------------------- stress-ng itself

def find_stress_ng() -> str:
    path = shutil.which("stress-ng")
    if not path:
        raise RpwuError("stress-ng is not installed; install it with `make setup` (Debian package stress-ng)")
    return path


def _ask(binary: str, *args: str) -> str:
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
    return proc.stdout + proc.stderr


def available_stressors(binary: str) -> list[str]:
    return sorted(_ask(binary, "--stressors").split())


def stressor_classes(binary: str) -> dict[str, list[str]]:
    """stressor -> stress-ng's classes for it, as this stress-ng reports them."""
    m = re.search(r"available classes:(.*)", _ask(binary, "--class", "?"))
    out: dict[str, list[str]] = {}
    for cls in (m.group(1).split() if m else []):
        listing = re.search(r"stressors:(.*)", _ask(binary, "--class", f"{cls}?"))
        for name in (listing.group(1).split() if listing else []):
            out.setdefault(name, []).append(cls)
    return out


def check_stressors(names: list[str], valid: list[str]) -> list[str]:
    bad = [n for n in names if n not in valid]
    if bad:
        raise UnknownStressor(bad, valid)
    if not names:
        raise RpwuError("no stressors given; name at least one, e.g. cpu")
    return list(dict.fromkeys(names))  # repeated names would only weigh one stressor twice


def parse_metrics(text: str, stressor: str) -> dict:
    """One stressor's row of a ``--yaml`` report: bogo-ops, its real-time rate and the times."""
    doc = yaml.safe_load(text) or {}
    rows = (doc.get("metrics") or []) if isinstance(doc, dict) else []
    for row in rows:
        if isinstance(row, dict) and row.get("stressor") == stressor:
            return {"bogo_ops": float(row["bogo-ops"]), "bogo_ops_per_s": float(row["bogo-ops-per-second-real-time"]),
                    "wall_s": float(row["wall-clock-time"]), "user_s": float(row["user-time"]),
                    "system_s": float(row["system-time"])}
    raise RpwuError(f"stress-ng reported no metrics for {stressor}")


# ---------------------------------------------------------------- the CPU quota

class CpuQuota:
    """A cgroup granting ``cpus`` cores to whatever joins it, removed on ``close``."""

    def __init__(self, cpus: float, tag: str, root: str = CGROUP_ROOT):
        if not (isinstance(cpus, (int, float)) and math.isfinite(cpus) and cpus >= 0.01):
            raise RpwuError(f"cpus {cpus!r}: a quota must be at least 0.01 cores, e.g. 0.5")
        self.cpus, self.root, self.dir, self.method = float(cpus), root, "", ""
        self.quota_us = max(1000, round(cpus * PERIOD_US))  # the kernel's floor is 1 ms
        self.name = f"nearfaas-rpwu-{os.getpid()}-{tag}"

    def open(self) -> CpuQuota:
        try:
            if cg.is_v2(self.root):  # unified (v2)
                cg.enable(self.root, "+cpu")
                self.dir = cg.make_cpu_group(self.root, self.name, self.cpus, True, PERIOD_US)
                self.method = f"cgroup v2 cpu.max {self.quota_us} {PERIOD_US}"
            else:
                own = cg.own_cgroups()
                if "cpu" not in own:
                    raise OSError("no cgroup v1 cpu controller in /proc/self/cgroup")
                self.dir = cg.make_cpu_group(os.path.join(self.root, "cpu", own["cpu"].lstrip("/")), self.name, self.cpus,
                                             False, PERIOD_US)
                self.method = f"cgroup v1 cpu.cfs_quota_us {self.quota_us} / cpu.cfs_period_us {PERIOD_US}"
        except OSError as exc:
            self.close()
            raise QuotaUnavailable(
                f"cannot enforce a {self.cpus:g}-CPU quota: no writable CPU cgroup ({exc}); run as root on a machine "
                f"with cgroup v1 `cpu` or v2 `cpu.max`, or measure only --class {HOST}") from None
        return self

    def wrap(self, command: list[str]) -> list[str]:
        """The command, started by a shell that first moves itself into the group (fail closed)."""
        script = 'echo $$ > "$0" || { echo "nearfaas-rpwu: cannot join $0" >&2; exit 125; }; exec "$@"'
        return ["/bin/sh", "-c", script, os.path.join(self.dir, "cgroup.procs"), *command]

    def stat(self) -> dict[str, int]:
        """The group's CPU accounting: periods and how many were throttled (evidence the cap bit)."""
        return cg.cpu_stat(self.dir)

    def describe(self) -> dict:
        return {"cpus": self.cpus, "method": self.method, "group": self.dir, "cpu_stat": self.stat()}

    def close(self) -> None:
        if not self.dir or not os.path.isdir(self.dir):
            return
        for _ in range(50):  # stray workers (none when stress-ng exits cleanly) die before rmdir
            try:
                with open(os.path.join(self.dir, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.02)


# ---------------------------------------------------------------- measuring

@dataclass
class Target:
    """What one set of runs measures: ``cpus`` cores (None: the whole machine)."""
    name: str
    cpus: float | None
    classes: list[str] = field(default_factory=list)


def plan_targets(classes: dict[str, float | None]) -> list[Target]:
    """One target per distinct CPU capacity, unrestricted first; ``host`` joins the None group."""
    groups: dict[float | None, list[str]] = {}
    for name, cpus in classes.items():
        groups.setdefault(None if name == HOST else cpus, []).append(name)
    order = sorted(groups, key=lambda c: (c is not None, -(c or 0)))
    return [Target("+".join(groups[c]), c, groups[c]) for c in order]


def run_stressor(binary: str, stressor: str, duration: int, instances: int = 1, quota: CpuQuota | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="nearfaas-rpwu-") as tmp:
        report = os.path.join(tmp, "metrics.yaml")
        command = [binary, f"--{stressor}", str(instances), "--timeout", f"{duration}s", "--metrics",
                   "--yaml", report, "--temp-path", tmp]  # its scratch files go away with tmp
        try:
            proc = subprocess.run(quota.wrap(command) if quota else command, capture_output=True, text=True,
                                  timeout=duration * 5 + 60)
        except subprocess.TimeoutExpired:
            raise RpwuError(f"stress-ng --{stressor} did not stop within {duration * 5 + 60} s of a {duration}-s run") from None
        tail = " | ".join(line.strip() for line in (proc.stdout + proc.stderr).splitlines()[-3:])
        if "nearfaas-rpwu: cannot join" in proc.stderr:
            raise QuotaUnavailable(f"cannot put stress-ng into the {quota.cpus:g}-CPU quota group {quota.dir}: {tail}")
        if proc.returncode != 0 or not os.path.exists(report):
            raise Skipped(f"stress-ng exited {proc.returncode}: {tail}")
        with open(report) as f:
            sample = parse_metrics(f.read(), stressor)
    if sample["bogo_ops"] <= 0:
        raise Skipped(f"no bogo-ops in {duration} s (the stressor needs something this machine lacks): {tail}")
    return sample


def measure(binary: str, targets: list[Target], stressors: list[str], duration: int = DEFAULT_DURATION_S,
            repeats: int = DEFAULT_REPEATS, instances: int = 1, progress=None, cgroup_root: str = CGROUP_ROOT) -> dict:
    """Raw rates: ``{"rates": {target: {stressor: [bogo-ops/s per repeat]}}, "skipped": ...,
    "enforcement": ...}``. ``progress(target, stressor, repeat)`` is called after each run."""
    if int(duration) != duration or duration < MIN_DURATION_S:
        raise RpwuError(f"duration {duration!r}: whole seconds, at least {MIN_DURATION_S}")
    if repeats < 1 or instances < 0:
        raise RpwuError(f"repeats must be at least 1 (got {repeats}) and instances at least 0 (got {instances})")
    rates = {t.name: {s: [] for s in stressors} for t in targets}
    skipped: dict[str, dict[str, str]] = {t.name: {} for t in targets}
    quotas = {t.name: CpuQuota(t.cpus, str(i), cgroup_root) for i, t in enumerate(targets) if t.cpus is not None}
    try:
        for q in quotas.values():
            q.open()  # every quota before any run: fail closed before spending minutes
        for r in range(repeats):
            for s in stressors:
                for t in targets:
                    if s not in skipped[t.name]:
                        try:
                            rates[t.name][s].append(run_stressor(binary, s, int(duration), instances, quotas.get(t.name))
                                                    ["bogo_ops_per_s"])
                        except Skipped as exc:
                            skipped[t.name][s] = str(exc)
                            rates[t.name][s] = []
                    if progress:
                        progress(t, s, r)
        enforcement = {t.name: quotas[t.name].describe() if t.name in quotas else
                       {"cpus": None, "method": "none: the whole machine"} for t in targets}
    finally:
        for q in quotas.values():
            q.close()
    return {"rates": rates, "skipped": skipped, "enforcement": enforcement}


def machine_facts(binary: str | None = None) -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"hostname": platform.node(), "machine": platform.machine(), "kernel": platform.release(),
            "cpu_model": model, "cpus_online": os.cpu_count(),
            "stress_ng": (re.findall(r"version ([\w.\-]+)", _ask(binary, "--version")) or ["unknown"])[0] if binary else None}


# ---------------------------------------------------------------- normalising and ranking

def reference_from_file(data: object, wanted: str | None, where: str) -> tuple[str, dict[str, list[float]], dict]:
    """The bogo-ops/s of one target of a saved ``--json`` result: (its name, rates, its run facts)."""
    targets = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, dict) or not targets:
        raise RpwuError(f"{where} is not a `nearfaas econ rpwu --json` output (no `targets`); save one with "
                        f"`nearfaas econ rpwu --class {HOST} --json > ref.json` on the reference device")
    if wanted:
        names = [n for n, t in targets.items() if n == wanted or wanted in (t.get("classes") or [])]
    else:
        names = [n for n, t in targets.items() if HOST in (t.get("classes") or [])] or (list(targets) if len(targets) == 1 else [])
    if len(names) != 1:
        raise RpwuError(f"{where} holds targets {', '.join(targets)}; pick one as FILE:TARGET")
    try:
        rates = {s: [float(v) for v in row["bogo_ops_per_s"]] for s, row in targets[names[0]]["stressors"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise RpwuError(f"{where}: target {names[0]} has no stressors.*.bogo_ops_per_s lists") from None
    facts = {k: data.get(k) for k in ("machine", "duration_s", "instances")}
    return names[0], rates, facts


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def normalise(rates: list[float], reference: list[float]) -> list[float] | None:
    """Each run's RPWU: its rate over the reference's mean rate (None: no usable reference)."""
    ref = _mean(reference)
    return [r / ref for r in rates] if ref and ref > 0 else None


def analyse(raw: dict, reference: tuple[str, dict[str, list[float]]], classes_of: dict[str, list[str]],
            external: bool) -> dict[str, dict]:
    """Per target: each stressor's rates, RPWUs, mean RPWU, ranks; its class averages."""
    ref_name, ref_rates = reference
    out: dict[str, dict] = {}
    for target, per_stressor in raw["rates"].items():
        rows = {}
        for s, rates in per_stressor.items():
            rpwu = normalise(rates, ref_rates.get(s, [])) if rates else None
            rows[s] = {"bogo_ops_per_s": rates, "rpwu": rpwu, "rpwu_mean": _mean(rpwu) if rpwu else None,
                       "rpwu_min": min(rpwu) if rpwu else None, "rpwu_max": max(rpwu) if rpwu else None,
                       "classes": classes_of.get(s, [])}
            if s in raw["skipped"].get(target, {}):
                rows[s]["skipped"] = raw["skipped"][target][s]
            elif rpwu is None:
                rows[s]["why_no_rpwu"] = f"the reference {ref_name} has no positive rate for {s}"
        ranked = sorted((s for s in rows if rows[s]["rpwu_mean"] is not None), key=lambda s: -rows[s]["rpwu_mean"])
        for i, s in enumerate(ranked, 1):
            rows[s]["rank"] = i
        out[target] = {"stressors": rows, "ranking": ranked, "class_averages": class_averages(rows)}
    for s in next(iter(raw["rates"].values()), {}):  # each stressor's rank among the systems measured
        scores = {t: out[t]["stressors"][s]["rpwu_mean"] for t in out if out[t]["stressors"][s]["rpwu_mean"] is not None}
        if external and s in ref_rates:
            scores[ref_name] = 1.0
        for i, t in enumerate(sorted(scores, key=lambda t: -scores[t]), 1):
            if t in out:
                out[t]["stressors"][s]["rank_among_systems"] = f"{i}/{len(scores)}"
    return out


def class_averages(rows: dict[str, dict]) -> dict[str, dict]:
    """Mean (as the thesis averages) and geometric mean of the stressors' mean RPWU per class."""
    by_class: dict[str, list[str]] = {}
    for s, row in rows.items():
        if row["rpwu_mean"] is not None:
            for cls in row["classes"] or ["unclassified"]:
                by_class.setdefault(cls, []).append(s)
    return {cls: {"mean": statistics.fmean(rows[s]["rpwu_mean"] for s in names),
                  "geomean": statistics.geometric_mean(rows[s]["rpwu_mean"] for s in names),
                  "stressors": names} for cls, names in sorted(by_class.items())}


def build_result(raw: dict, targets: list[Target], stressors: list[str], classes_of: dict[str, list[str]],
                 reference: tuple[str, dict[str, list[float]]], reference_source: dict, facts: dict,
                 duration: int, repeats: int, instances: int) -> dict:
    """The whole answer, labelled measured; ``reference_source`` says where the reference came
    from (``{"file": ..., "machine": ..., "duration_s": ...}`` or ``{"file": None}``)."""
    external = bool(reference_source.get("file"))
    analysed = analyse(raw, reference, classes_of, external)
    ref_facts = reference_source.get("machine") or {}
    theirs = {"seconds per stressor": reference_source.get("duration_s"), "instances": reference_source.get("instances"),
              "stress-ng version": ref_facts.get("stress_ng")}
    ours = {"seconds per stressor": duration, "instances": instances, "stress-ng version": facts.get("stress_ng")}
    # a reference measured differently skews every ratio (duration: thesis Table 4.3's rank shifts)
    warnings = [f"the reference ran with {k} {theirs[k]}, this run with {ours[k]}: the ratios mix two settings"
                for k in ours if external and theirs[k] not in (None, ours[k])]
    if repeats < 3:
        warnings.append(f"{repeats} repeat(s): too few for a meaningful spread in the box plot; use --repeats 3 or more")
    return {
        "label": "measured", "metric": "RPWU: stress-ng bogo-ops/s (real time) over the reference's mean, per stressor",
        "machine": facts, "duration_s": duration, "repeats": repeats, "instances": instances,
        "reference": {"target": reference[0], "source": reference_source.get("file") or "this run",
                      "machine": ref_facts if external else facts},
        "stressors": {s: {"area": DEFAULT_STRESSORS.get(s, "chosen by the user"), "classes": classes_of.get(s, [])}
                      for s in stressors},
        "targets": {t.name: {"classes": t.classes, "cpus": t.cpus, "enforcement": raw["enforcement"][t.name],
                             **analysed[t.name]} for t in targets},
        "warnings": warnings,
    }
