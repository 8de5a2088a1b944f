"""Emulated storage-link profiles: the numbers, where they come from, and what they predict.

A profile describes the compute <-> storage link: a first-byte latency distribution (constant,
or lognormal fixed by its median and p99) and a bandwidth. The placement policy `auto` uses
`expected_transfer_s` to predict what moving an input will cost; the user-space injection of
these delays into live traffic comes with the emulated-links work of the near-data issue.

Sources (each number is a parameter; those marked *assumption* are not from a measurement):
- `s3-like` first byte: AWS, "Best Practices Design Patterns: Optimizing Amazon S3
  Performance", section "Timeouts and Retries for Latency-Sensitive Applications": small
  requests (< 512 KB) see median latencies "in the tens of milliseconds" -> median 30 ms.
  Tail: DSCS-Serverless Fig. 3 observes p99 ~= 2.1 x median for S3 reads -> p99 63 ms.
  Bandwidth per connection: 90 MB/s, *assumption* (one TCP stream to S3 from one worker).
- `dc-25g`: 25 Gb/s Ethernet line rate = 3.125 GB/s; 90% usable after TCP/IP framing ->
  2.8 GB/s (*assumption*). First byte: one intra-datacenter round trip plus a storage server's
  request handling, median 0.1 ms, p99 0.5 ms (*assumption*, tens to hundreds of
  microseconds per Barroso et al., "Attack of the Killer Microseconds", CACM 2017).
- `local`: no link (same node or loopback); nothing is added.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

_Z99 = 2.3263478740408408  # standard normal quantile at 0.99


@dataclass(frozen=True)
class LinkProfile:
    name: str
    first_byte_median_s: float = 0.0
    first_byte_p99_s: float = 0.0  # equal to the median: a constant latency
    bandwidth_bytes_per_s: float = math.inf
    source: str = ""

    def __post_init__(self) -> None:
        if self.first_byte_median_s < 0 or self.first_byte_p99_s < self.first_byte_median_s:
            raise ValueError(f"link {self.name}: need 0 <= median <= p99 first-byte latency")
        if self.bandwidth_bytes_per_s <= 0:
            raise ValueError(f"link {self.name}: bandwidth must be positive")

    @property
    def sigma(self) -> float:
        """Lognormal shape fixed by the median and p99 (0 for a constant latency)."""
        if self.first_byte_median_s == 0 or self.first_byte_p99_s == self.first_byte_median_s:
            return 0.0
        return math.log(self.first_byte_p99_s / self.first_byte_median_s) / _Z99

    def expected_first_byte_s(self) -> float:
        # Mean of a lognormal: median * exp(sigma^2 / 2).
        return self.first_byte_median_s * math.exp(self.sigma ** 2 / 2)

    def expected_transfer_s(self, nbytes: int, requests: int = 1) -> float:
        """Expected time to move ``nbytes`` in ``requests`` requests over this link."""
        if nbytes < 0 or requests < 0:
            raise ValueError("bytes and requests must be non-negative")
        return requests * self.expected_first_byte_s() + nbytes / self.bandwidth_bytes_per_s

    def sample_first_byte_s(self, rng: random.Random) -> float:
        if self.sigma == 0.0:
            return self.first_byte_median_s
        return self.first_byte_median_s * math.exp(rng.gauss(0.0, self.sigma))


PROFILES: dict[str, LinkProfile] = {
    "local": LinkProfile("local", source="no link: same node or loopback"),
    "dc-25g": LinkProfile("dc-25g", 100e-6, 500e-6, 2.8e9,
                          source="25 GbE line rate at 90% usable; intra-DC first byte (assumptions, see module doc)"),
    "s3-like": LinkProfile("s3-like", 30e-3, 63e-3, 90e6,
                           source="AWS S3 performance whitepaper (tens of ms median); DSCS Fig. 3 (p99 = 2.1x median)"),
}


def get_profile(name: str) -> LinkProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown link profile {name!r}; choose one of: {', '.join(PROFILES)}") from None


class EmulatedLink:
    """A link profile applied in user space (this kernel has no netem) to one process's
    transfers: each request waits a sampled first-byte latency, and its bytes drain through a
    token bucket at the profile's bandwidth, shared by every transfer of the process."""

    def __init__(self, profile: LinkProfile, seed: int | None = None, sleep=None, clock=None):
        import threading
        import time

        self.profile = profile
        self._rng = random.Random(seed)
        self._sleep = sleep or time.sleep
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        # The bucket holds at most 64 KiB of credit: bursts beyond one chunk wait for tokens.
        self._burst = 64 * 1024
        self._tokens = float(self._burst)
        self._last = self._clock()

    @property
    def active(self) -> bool:
        return self.profile.first_byte_median_s > 0 or math.isfinite(self.profile.bandwidth_bytes_per_s)

    def first_byte(self) -> float:
        """Wait one request's first-byte latency; returns the seconds waited."""
        with self._lock:
            delay = self.profile.sample_first_byte_s(self._rng)
        if delay > 0:
            self._sleep(delay)
        return delay

    def transfer(self, nbytes: int) -> float:
        """Wait until ``nbytes`` may have crossed the link; returns the seconds waited."""
        rate = self.profile.bandwidth_bytes_per_s
        if not math.isfinite(rate) or nbytes <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * rate)
            self._last = now
            self._tokens -= nbytes  # may go negative: the debt is paid by waiting
            wait = -self._tokens / rate if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
