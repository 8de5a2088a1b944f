"""Object versions: one total order over every write and delete of a key.

A version is a string that sorts the way the writes happened::

    "0000018c2f3a4b5c0003.gw"
     |--------------||--| |-- origin: who stamped it (the gateway, or a node for node-local data)
     48-bit wall ms  16-bit logical counter   (a hybrid logical clock, Kulkarni et al. 2014)

Plain string comparison is the order: the clock part is fixed-width lowercase hex, and the
origin breaks a tie between two clocks that read the same value. ``""`` (NO_VERSION) sorts
below every version: objects written before versions existed lose to any versioned write.

Replicas apply last-writer-wins by this order (node/objectstore.py): a write or delete whose
version is not newer than what the replica holds is a no-op there, so replicas that receive
the same set of writes in any order, any number of times, end up identical.

Worked example: the gateway's clock reads 1,700,000,000,000 ms twice in a row; the first PUT
gets ``0000018bcfe56800 0000.gw`` (without the space), the second ``...6800 0001.gw``; a node
that restarts and sees the second first, then the first (a retry), keeps the second.

Known caveats:
- The wall-clock part trusts the host clock within the skew the gateway has observed: the
  clock only moves forward (``observe`` pulls it past any version seen on a node), so a clock
  stepped back cannot make new writes lose to old ones, but two gateways with skewed clocks
  would order their concurrent writes by that skew (there is one gateway today).
- 16 bits of logical counter allow 65,536 versions per millisecond before the clock borrows
  from the next millisecond, which is harmless: the order stays total.
"""

from __future__ import annotations

import re
import threading
import time


_LOGICAL_BITS = 16


def clock_of(version: str) -> int:
    """The clock part of a version (0 for NO_VERSION)."""
    return int(version[:16], 16) if version else 0


def wall_seconds(version: str) -> float:
    """When a version was stamped, in unix seconds (0.0 for NO_VERSION)."""
    return (clock_of(version) >> _LOGICAL_BITS) / 1000.0


class HybridClock:
    """Stamps versions that are unique, increasing, and close to wall-clock time."""

    def __init__(self, origin: str, *, wall=time.time):
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", origin):
            raise ValueError(f"clock origin {origin!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
        self.origin = origin
        self.width = 17 + len(origin)  # the length of every version this clock stamps
        self._wall = wall
        self._last = 0
        self._lock = threading.Lock()

    def now(self) -> str:
        physical = int(self._wall() * 1000) << _LOGICAL_BITS
        with self._lock:
            self._last = max(physical, self._last + 1)
            return f"{self._last:016x}.{self.origin}"

    def observe(self, version: str) -> None:
        """Move past a version seen elsewhere, so that what is stamped next is newer than it."""
        if version:
            with self._lock:
                self._last = max(self._last, clock_of(version))
