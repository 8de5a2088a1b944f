"""Network processing headroom (thesis §4.3, issue 20): how much of a node's CPU is left for
functions while it keeps a given network rate. Runs are measured; the headroom is computed from
the measured delays and burst times with the thesis's formula.

Mechanism — the thesis's two-step pktgen method, with a user-space stand-in for pktgen
(native/headroom/sender.c: UDP bursts with sendmmsg; knobs size, burst, delay, threads):
1. **Sweep** packet size x threads x burst at delay 0 and keep the *minimum* configuration
   (fewest threads, then smallest packet, then smallest burst) whose delivered throughput is
   within ``tolerance`` of the best one seen.
2. **Delay search**: pktgen's "delay" is the time allotted to one burst; a thread that finishes
   early spins until it is over, and that spin is CPU a function could have had. Binary-search
   the largest delay whose throughput stays within ``tolerance`` of step 1's (or, with a
   target, at or above the target rate).
   ``headroom = (max_delay - t_burst) / max_delay``, with ``t_burst`` the median time to send
   one burst, measured in the run at the max delay. The thesis takes t_burst from step 1 at
   delay 0 (pktgen times no single burst); this sender times every burst, and at delay 0 an
   oversubscribed path (TBF dropping, a timer per queued packet) or a quota shared by spinning
   threads stretches the send time with work that is not the rate kept. Both are reported
   (``headroom_step1_t_burst`` is the thesis's literal reading); they agree when the sender is
   not oversubscribed.
A cross-check run sleeps instead of spinning, paced to exactly the rate kept (a delay of
``threads * burst * size * 8 / rate``), so the sender's CPU time (getrusage) gives
``1 - busy fraction`` independently of the formula.

Throughput is what the receiver (native/headroom/receiver.c) counted, UDP payload bits per
second of the sender's wall time: delivered, not attempted. The rig (econ/headroom_rig.py)
runs the pair over loopback or over a veth pair in a namespace it creates (optionally shaped
with TBF to a link profile), with the sender under a cgroup CPU quota equal to a node class's
``cpus`` — "against a storage node".

Worked example (``nearfaas econ headroom --class storage --target 1Gbit``: loopback, this
2-core VM, the sender held to a storage node's 0.5 core; measured once, other load present):
step 1's best, also its minimum within 5%, is 2 threads x 8192 B x burst 64 at 9.6 Gbit/s.
Keeping 1 Gbit/s (>= 0.95 Gbit/s), the largest delay is 3139 us, a burst takes 356 us to send
there, so headroom = (3139 - 356) / 3139 = 0.887: about 0.44 of the node's 0.5 core stays free
for functions. The sleeping cross-check, paced to 1 Gbit/s, was busy 13% of the half core
(1 - busy = 0.869). With ``--veth --link s3-like --target 500Mbit`` (TBF at 720 Mbit/s) the
best was 0.70 Gbit/s, and 500 Mbit/s left 0.81 (cross-check 0.70).

Known caveats:
- The sender is a user-space program: every datagram crosses the syscall boundary and gets its
  own skb (pktgen's clone_skb has no user-space equivalent), so rates are lower than pktgen's.
- Throughput counts UDP payload only (no IP/UDP/Ethernet headers); small packets understate
  the wire rate.
- On loopback and veth the receive path often runs in the sender's softirq context and is
  charged to the sender (and its quota); the receiver's own copy runs on another core. The
  node is the sending side; receiving costs differ.
- Other load on the machine moves the numbers; each run is one sample and the binary search
  assumes throughput does not rise with the delay. Repeat, or lengthen ``duration_s``.
- ``--veth`` puts both ends of the "link" on this machine's cores, and TBF drains a backlog
  with a timer per packet (costly in a VM): a shaped run measures the emulation too. The veth
  MTU is 65535 (no fragmentation), unlike a real 1500 or 9000 B link.
- Under a quota a spinning thread burns quota while it waits (pktgen's spin does the same),
  so its max delay is shorter than the sleeping sender's period for the rate, by about the
  share of a core each thread gets; the headroom is a share of the quota either way.
- At the maximum rate the headroom is mostly the tolerance itself (the thesis's host: < 1%);
  the method is meant for a target below the maximum, or a link slower than the sender.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

MAX_UDP_PAYLOAD = 65507  # 65535 - 20 (IPv4 header) - 8 (UDP header)
MAX_SEARCH_ITERS = 8     # delay-search runs at most (the CLI sizes its progress bar with it)
MIN_BURSTS_PER_RUN = 100  # fewer bursts per thread per run and the rate is quantised by ~1%+
SEARCH_PRECISION = 0.02  # stop when the delay interval is within 2% of its upper end


class TargetAboveMaxError(ValueError):
    """The requested rate is above what this path delivered at best."""


@dataclass(frozen=True)
class Knobs:
    """pktgen's knobs for one run. ``delay_ns`` is the time allotted to one burst."""
    size: int = 1472
    burst: int = 16
    delay_ns: int = 0
    threads: int = 1
    duration_s: float = 1.0
    wait: str = "spin"

    def __post_init__(self):
        problems = []
        for name, lo, hi, fix in (("size", 1, MAX_UDP_PAYLOAD, "a UDP payload is 1 to 65507 bytes, e.g. 1472"),
                                  ("burst", 1, 1_000_000, "packets per burst, 1 to 1000000, e.g. 16"),
                                  ("threads", 1, 256, "sender threads, 1 to 256")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                problems.append(f"{name} is {v!r}: {fix}")
        if isinstance(self.delay_ns, bool) or not isinstance(self.delay_ns, int) or not 0 <= self.delay_ns <= 10**10:
            problems.append(f"delay_ns is {self.delay_ns!r}: nanoseconds per burst, 0 (no delay) to 10 s")
        if not isinstance(self.duration_s, (int, float)) or not 0.05 <= self.duration_s <= 3600:
            problems.append(f"duration_s is {self.duration_s!r}: seconds per run, 0.05 to 3600")
        if self.wait not in ("spin", "sleep"):
            problems.append(f"wait is {self.wait!r}: spin (pktgen's busy wait) or sleep")
        if problems:
            raise ValueError("bad sender knobs: " + "; ".join(problems))

    def label(self) -> str:
        return (f"{self.threads} thread{'s' * (self.threads > 1)}, {self.size} B x {self.burst}"
                + (f", delay {self.delay_ns / 1000:g} us" if self.delay_ns else "") + (" (sleep)" if self.wait == "sleep" else ""))


@dataclass(frozen=True)
class Run:
    """One measured run: what the sender sent, what the receiver got, and the sender's CPU."""
    knobs: Knobs
    wall_s: float
    bursts: int
    attempted_packets: int
    sent_packets: int
    delivered_packets: int
    delivered_bytes: int
    send_errors: int
    t_burst_median_ns: float
    t_burst_mean_ns: float
    cpu_s: float                 # the sender process, user + system (spinning included)
    receiver_cpu_s: float = 0.0
    throttled_periods: int | None = None  # CFS periods the quota held the sender back (None: no quota)

    @property
    def delivered_bps(self) -> float:
        return self.delivered_bytes * 8 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def sent_bps(self) -> float:
        return self.sent_packets * self.knobs.size * 8 / self.wall_s if self.wall_s > 0 else 0.0

    def busy_fraction(self, cores: float) -> float:
        """The sender's CPU over ``cores`` cores of wall time (1.0 = all of them)."""
        return self.cpu_s / (self.wall_s * cores) if self.wall_s > 0 and cores > 0 else 0.0

    def to_dict(self) -> dict:
        return asdict(self) | {"delivered_bps": round(self.delivered_bps), "sent_bps": round(self.sent_bps)}


Probe = Callable[[Knobs], Run]


def headroom(max_delay_ns: float, t_burst_ns: float) -> float:
    """The thesis's headroom: the share of each burst's allotted time not spent sending.
    A max delay at or below t_burst means no time is left (the delay never took effect): 0."""
    if not t_burst_ns > 0 or not math.isfinite(t_burst_ns):
        raise ValueError(f"t_burst must be a positive time, got {t_burst_ns!r} ns")
    if not max_delay_ns >= 0 or not math.isfinite(max_delay_ns):
        raise ValueError(f"max_delay must be a non-negative time, got {max_delay_ns!r} ns")
    return 0.0 if max_delay_ns <= t_burst_ns else (max_delay_ns - t_burst_ns) / max_delay_ns


@dataclass
class Step1:
    runs: list[Run]
    best: Run      # the highest delivered throughput
    chosen: Run    # the minimum configuration within the tolerance of it
    tolerance: float

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance, "max_bps": round(self.best.delivered_bps), "best": self.best.to_dict(),
                "chosen": self.chosen.to_dict(), "runs": [r.to_dict() for r in self.runs]}


def sweep(probe: Probe, sizes, threads, bursts, *, tolerance: float = 0.05, duration_s: float = 1.0,
          wait: str = "spin") -> Step1:
    """Step 1: every (threads, size, burst) at delay 0, smallest first; keep the first that comes
    within ``tolerance`` of the best throughput."""
    _check_tolerance(tolerance)
    grid = sorted({(t, s, b) for t in threads for s in sizes for b in bursts})
    if not grid:
        raise ValueError("step 1 needs at least one packet size, one thread count and one burst")
    runs = [probe(Knobs(size=s, burst=b, threads=t, duration_s=duration_s, wait=wait)) for t, s, b in grid]
    best = max(runs, key=lambda r: r.delivered_bps)
    if best.delivered_bps <= 0:
        raise RuntimeError("nothing arrived in any step-1 run: the receiver got no packets (is the path up?)")
    chosen = next(r for r in runs if r.delivered_bps >= (1 - tolerance) * best.delivered_bps)
    return Step1(runs, best, chosen, tolerance)


@dataclass
class Step2:
    floor_bps: float          # a run "keeps the rate" at or above this
    max_delay_ns: int         # the largest delay that kept the rate (measured, to SEARCH_PRECISION)
    base: Run                 # the delay-0 run the search started from
    runs: list[Run] = field(default_factory=list)
    target_bps: float | None = None
    note: str = ""
    cross_check: Run | None = None  # one run paced to the rate kept, sleeping instead of spinning
    cross_check_cores: float = 1.0

    @property
    def at_max(self) -> Run:
        """The run at the max delay (the delay-0 run if no delay kept the rate)."""
        return next((r for r in self.runs if r.knobs.delay_ns == self.max_delay_ns), self.base)

    @property
    def t_burst_ns(self) -> float:
        """Median send time of a burst while the rate is kept (measured at the max delay)."""
        return self.at_max.t_burst_median_ns

    @property
    def headroom(self) -> float:
        """Computed: (max_delay - t_burst) / max_delay."""
        return headroom(self.max_delay_ns, self.t_burst_ns)

    @property
    def headroom_step1_t_burst(self) -> float:
        """The same with the thesis's t_burst: step 1's, at delay 0."""
        return headroom(self.max_delay_ns, self.base.t_burst_median_ns)

    @property
    def cross_check_headroom(self) -> float | None:
        """1 - the sender's busy fraction in the sleeping run (measured CPU time)."""
        if self.cross_check is None:
            return None
        return 1.0 - self.cross_check.busy_fraction(self.cross_check_cores)

    def to_dict(self) -> dict:
        cc = self.cross_check
        return {"floor_bps": round(self.floor_bps), "target_bps": self.target_bps, "t_burst_ns": round(self.t_burst_ns),
                "t_burst_delay0_ns": round(self.base.t_burst_median_ns), "max_delay_ns": self.max_delay_ns,
                "headroom": round(self.headroom, 4), "headroom_step1_t_burst": round(self.headroom_step1_t_burst, 4),
                "note": self.note,
                "knobs": asdict(self.base.knobs), "runs": [r.to_dict() for r in self.runs],
                "cross_check": None if cc is None else cc.to_dict() | {
                    "cores": self.cross_check_cores, "headroom_from_cpu": round(self.cross_check_headroom, 4)}}


def delay_search(probe: Probe, base: Knobs, floor_bps: float, max_iters: int = MAX_SEARCH_ITERS) -> tuple[int, list[Run]]:
    """Step 2: the largest delay (ns) whose throughput stays >= ``floor_bps``. Delay 0 is taken as
    good (the caller measured it); no delay can beat ``threads*burst*size*8 / floor`` (a thread
    sends one burst per delay at most), so the search starts between the two."""
    if not floor_bps > 0:
        raise ValueError(f"the rate to keep must be positive, got {floor_bps!r} bit/s")
    lo, hi = 0, math.ceil(base.threads * base.burst * base.size * 8 / floor_bps * 1e9)
    runs: list[Run] = []
    while len(runs) < max_iters and hi - lo > max(SEARCH_PRECISION * hi, 100):
        mid = (lo + hi) // 2
        run = probe(replace(base, delay_ns=mid))
        runs.append(run)
        lo, hi = (mid, hi) if run.delivered_bps >= floor_bps else (lo, mid)
    return lo, runs


def step2(probe: Probe, step1: Step1, target_bps: float | None = None, *, cores: float | None = None,
          cross_check: bool = True) -> Step2:
    """Step 2 on step 1's chosen configuration: keep its own rate, or ``target_bps`` (bit/s)
    if given; a target above step 1's best raises TargetAboveMaxError with the measured max.
    ``cores``: the CPU the sender may use (a node's cpus), for the cross-check's busy fraction."""
    tol, base = step1.tolerance, step1.chosen
    note = ""
    if target_bps is None:
        floor = (1 - tol) * base.delivered_bps
    else:
        if not (isinstance(target_bps, (int, float)) and math.isfinite(target_bps) and target_bps > 0):
            raise ValueError(f"the target rate must be a positive number of bit/s, got {target_bps!r}")
        if target_bps > step1.best.delivered_bps:
            raise TargetAboveMaxError(
                f"target {fmt_rate(target_bps)} is above the measured maximum of this path, "
                f"{fmt_rate(step1.best.delivered_bps)} ({step1.best.knobs.label()}); lower the target, or add "
                f"packet sizes, bursts or threads to the sweep if they could go faster")
        floor = (1 - tol) * target_bps
    knobs = base.knobs
    period_cap_s = knobs.threads * knobs.burst * knobs.size * 8 / floor
    if period_cap_s > knobs.duration_s / MIN_BURSTS_PER_RUN and knobs.burst > 1:
        # A long delay leaves few bursts per run and quantises the rate; a smaller burst keeps
        # the same share of send time per period (t_burst scales with it), so shrink it.
        smaller = max(1, int(knobs.burst * knobs.duration_s / MIN_BURSTS_PER_RUN / period_cap_s))
        note = (f"burst lowered from {knobs.burst} to {smaller} so each run holds at least {MIN_BURSTS_PER_RUN} bursts "
                f"per thread at this rate")
        base = probe(replace(knobs, burst=smaller, delay_ns=0))
        knobs = base.knobs
        if base.delivered_bps < floor:
            raise RuntimeError(f"{knobs.label()} delivered only {fmt_rate(base.delivered_bps)} at delay 0, below the "
                               f"rate to keep ({fmt_rate(floor)}); raise --duration so larger bursts fit")
    max_delay, runs = delay_search(probe, replace(knobs, delay_ns=0), floor)
    result = Step2(floor, max_delay, base, runs, target_bps, note)
    if cross_check:
        # Paced to exactly the rate kept: spinning under a quota burns quota, so the spin run's
        # delay is not the sleeping run's; the period that yields the rate is.
        rate = target_bps or base.delivered_bps
        paced = min(10**10, math.ceil(knobs.threads * knobs.burst * knobs.size * 8 / rate * 1e9))
        result.cross_check = probe(replace(knobs, delay_ns=paced, wait="sleep"))
        result.cross_check_cores = min(float(knobs.threads), cores) if cores else float(knobs.threads)
    return result


def at_target(probe: Probe, step1: Step1, rate_bps: float, **kw) -> Step2:
    """The largest delay that still sustains ``rate_bps`` and the headroom there."""
    return step2(probe, step1, rate_bps, **kw)


def _check_tolerance(tolerance: float) -> None:
    if not (isinstance(tolerance, (int, float)) and 0 < tolerance < 0.5):
        raise ValueError(f"tolerance is {tolerance!r}: a fraction between 0 and 0.5, e.g. 0.05 (5%)")


_PREFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(r"\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([kKmMgGtT]?)(bits?/s|bits?|bps|b/s|B/s|Bps|bytes?/s)\s*")


def parse_rate(text: str) -> float:
    """A rate as people write it, in bit/s: "1Gbit", "200Mbit", "1.5 Gbps", "100MB/s" (bytes)."""
    m = _RATE.fullmatch(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a rate; write a number and a unit, e.g. 1Gbit, 200Mbit, 1.5Gbps or 100MB/s")
    value = float(m.group(1)) * _PREFIX[m.group(2).lower()] * (8 if m.group(3).startswith("B") else 1)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{text!r}: a rate must be above zero")
    return value


def fmt_rate(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"
