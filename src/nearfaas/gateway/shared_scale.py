"""Scaling a function by hand across many gateways: one replica count, shared out.

Mechanism. Each gateway runs warm instances of its own (gateway/peers.py). ``POST
/system/scale-function/NAME {"replicas": R}`` reaches one of them through the balancer; with
one gateway it is that gateway's count, but with N it was only that gateway's, so the cluster
ran R plus what the others had. Now the request records ``{NAME: {"replicas": R, "at": t}}`` in
``<state>/gateway/scale.json`` (a locked read-modify-write) and every gateway keeps its share:
``R // N``, one more for the first ``R % N`` gateways in the cluster's order. Each gateway
follows the file with the other shared records (OpenFaaSAPI.follow_forever); a record older than
the function's deployment (a function deleted and deployed again) is ignored.

Worked example: 2 gateways; ``faas-cli scale resize --replicas 3`` lands on gw1. gw1 writes
the record and keeps 1; gw, 0.2 s later, keeps 2; every gateway's describe shows Replicas 3 and
counts both gateways' instances as available.

Known caveats:
- The shares are of the gateways the cluster has, alive or not: while one is down its share is
  missing (its restart takes it up again).
- A gateway whose share is 0 still starts an instance for a call it gets (a call never waits
  for another gateway's instance), and the autoscaler of each gateway scales on the load that
  gateway sees, from the hand-set count on.
"""

from __future__ import annotations

import time
from pathlib import Path

from nearfaas import atomic


class SharedScale:
    def __init__(self, path: Path, rank: int, count: int):
        self.file, self.rank, self.count = atomic.SharedJson(path), rank, count
        self._applied: dict[str, float] = {}  # function -> "at" of the record this gateway applied

    def share(self, replicas: int) -> int:
        return replicas // self.count + (1 if self.rank < replicas % self.count else 0)

    def _load(self) -> dict[str, dict]:
        data = self.file.read()
        return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("replicas"), int)} \
            if isinstance(data, dict) else {}

    async def record(self, name: str, replicas: int) -> int:
        """Record a hand-set count for every gateway (TimeoutError: a stopped peer holds the
        file); returns this gateway's share, which the caller applies now."""
        at = time.time()
        await self.file.update(lambda table: {**(table if isinstance(table, dict) else {}), name: {"replicas": replicas, "at": at}})
        self._applied[name] = at
        return self.share(replicas)

    def target(self, name: str, deployed_at: float) -> int | None:
        """The cluster-wide count set by hand for this deployment of ``name``, or None."""
        entry = self._load().get(name)
        return entry["replicas"] if entry is not None and entry.get("at", 0) > deployed_at else None

    def changes(self, deployed: dict[str, float]) -> list[tuple[str, int]]:
        """(function, this gateway's share) for each record another gateway made since this one
        last looked; ``deployed``: each function's deployment time."""
        out = []
        for name, entry in self._load().items():
            at = float(entry.get("at", 0))
            if name in deployed and at > deployed[name] and at > self._applied.get(name, 0.0):
                self._applied[name] = at
                out.append((name, self.share(int(entry["replicas"]))))
        return out
