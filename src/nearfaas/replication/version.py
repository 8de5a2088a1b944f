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

A clock stepped back, or a process restarted with its host clock behind, must not stamp
versions below ones it already handed out: the gateway's clock keeps a **ceiling** on disk
(``ceiling_file``), always above every version it has stamped, raised ``RESERVE_MS`` at a time
(one small fsynced write per ``RESERVE_MS`` of clock, not one per write), and starts from it
again; and it ``observe``s each storage node's high-water mark (their health answers), so even a
gateway with a fresh state directory stamps past every version the nodes hold, and the versions
its hint journal owes (which may sit only on nodes that are down).

Worked example (with a 10 s reserve, for round numbers): the gateway stamps up to 12:00:00.500
and its ceiling file says 12:00:10.000;
it is killed and restarted with its host clock at 11:58:00. It starts from 12:00:10.000, so its
next PUT of an acknowledged key gets a version above the old one and wins, instead of being a
no-op on every replica (the restart lost acknowledged overwrites and deletes, issue 43).

Known caveats:
- The wall-clock part trusts the host clock within the skew the gateway has observed: the
  clock only moves forward, so a clock stepped back cannot make new writes lose to old ones,
  but gateways with skewed clocks order their concurrent writes by that skew (gateway/peers.py).
- A restart costs the clock up to ``RESERVE_MS`` of lead over the wall clock. Harmless for one
  gateway; with several, a restarted one waits that lead out before it serves, or its writes
  would order above a peer's later ones (seen as stale reads in the consistency harness).
- A gateway that lost its ceiling file and its hint journal, started with its clock behind while
  every node holding the newest versions is down, can stamp below them until it sees those nodes.
- 16 bits of logical counter allow 65,536 versions per millisecond before the clock borrows
  from the next millisecond, which is harmless: the order stays total.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from nearfaas import atomic


_LOGICAL_BITS = 16
# How far above the last stamp the persisted ceiling is set: one fsynced 17-byte write per second
# of stamping, and at most a second of lead over the wall clock after a restart (which a gateway
# among several waits out before it serves: gateway/app.py).
RESERVE_MS = 1_000


def clock_of(version: str) -> int:
    """The clock part of a version (0 for NO_VERSION)."""
    return int(version[:16], 16) if version else 0


def wall_seconds(version: str) -> float:
    """When a version was stamped, in unix seconds (0.0 for NO_VERSION)."""
    return (clock_of(version) >> _LOGICAL_BITS) / 1000.0


class HybridClock:
    """Stamps versions that are unique, increasing, and close to wall-clock time; with a
    ``ceiling_file``, also across restarts (see the module's comment)."""

    def __init__(self, origin: str, *, wall=time.time, ceiling_file: Path | str | None = None):
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", origin):
            raise ValueError(f"clock origin {origin!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
        self.origin = origin
        self.width = 17 + len(origin)  # the length of every version this clock stamps
        self._wall = wall
        self._last = 0
        self._lock = threading.Lock()
        self._ceiling_file = Path(ceiling_file) if ceiling_file is not None else None
        self._ceiling = 0
        if self._ceiling_file is not None:
            self._last = self._ceiling = _read_ceiling(self._ceiling_file)

    def now(self) -> str:
        physical = int(self._wall() * 1000) << _LOGICAL_BITS
        with self._lock:
            self._last = max(physical, self._last + 1)
            if self._ceiling_file is not None and self._last >= self._ceiling:
                # Durable before the version is handed out: a restart starts above it.
                self._ceiling = self._last + (RESERVE_MS << _LOGICAL_BITS)
                atomic.write_text(self._ceiling_file, f"{self._ceiling:016x}\n")
            return f"{self._last:016x}.{self.origin}"

    def high_water(self) -> str:
        """The newest clock value stamped or observed (a version's clock part; "" for none)."""
        with self._lock:
            return f"{self._last:016x}" if self._last else ""

    def lead_s(self) -> float:
        """How far this clock is ahead of the wall clock, in seconds (0.0 when it is not)."""
        with self._lock:
            return max(0.0, ((self._last >> _LOGICAL_BITS) / 1000.0) - self._wall())

    def observe(self, version: str) -> None:
        """Move past a version seen elsewhere, so that what is stamped next is newer than it."""
        if version:
            with self._lock:
                self._last = max(self._last, clock_of(version))


def _read_ceiling(path: Path) -> int:
    """The clock value a persisted ceiling names (0: none yet, or unreadable: the nodes' high-water
    marks, observed before the first write, bound it instead)."""
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return 0
