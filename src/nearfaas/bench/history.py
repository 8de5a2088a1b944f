"""A last-writer-wins checker over a recorded history of object operations.

Clients record each operation on a key as it happened from their side: what they asked (PUT of
a unique value, DELETE, GET), when they sent it and when the answer came (monotonic seconds),
and what came back. The checker judges the history against the promise an object store with
last-writer-wins makes: once a write is acknowledged, later reads see it or something newer.

- **lost**: at the end, after every fault has healed, a key reads as something other than what
  its last acknowledged operation left (a value, or nothing after a DELETE), where that
  operation overlaps no other acknowledged one on the key (so its order is not in doubt).
- **resurrected**: the special case of *lost* where that last operation was a DELETE and the
  key came back.
- **stale**: a GET returned a value that an acknowledged operation had already replaced before
  the GET was sent (the replacing one ended before the read started), or returned nothing while
  a value was known to be current, or a value that was never written.
- **diverged**: after healing, the replicas of a key hold different values.

Operations whose answer never came (a timeout, a reset) are *unknown*: they may or may not have
taken effect, so they never make a read stale and a key whose last operation is unknown is not
judged at the end.

Worked example: PUT k=a [0, 1] ok; DELETE k [2, 3] ok; GET k [4, 5] → a is *stale*; at the
end k reads a → *resurrected*.

Known caveats:
- This is a last-writer-wins checker, not a full linearizability search (Knossos, Porcupine):
  concurrent operations are allowed any order, which is what LWW by a server clock gives.
- Time is each client's monotonic clock on one machine: fine for a local cluster, not across
  hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ABSENT = None  # what a GET of a missing key returns, and what a DELETE leaves


@dataclass
class Op:
    kind: str            # "put" | "delete" | "get"
    key: str
    start: float
    end: float
    ok: bool | None      # True acknowledged, False refused (no effect), None unknown
    value: str | None = None  # written (put) or read (get; ABSENT for a 404)


@dataclass
class Verdict:
    operations: int = 0
    acknowledged_writes: int = 0
    lost: list = field(default_factory=list)
    resurrected: list = field(default_factory=list)
    stale: list = field(default_factory=list)
    diverged: list = field(default_factory=list)

    def counts(self) -> dict:
        return {"operations": self.operations, "acknowledged_writes": self.acknowledged_writes, "lost": len(self.lost),
                "resurrected": len(self.resurrected), "stale": len(self.stale), "diverged": len(self.diverged)}


def _effect(op: Op):
    return op.value if op.kind == "put" else ABSENT


def check(history: list[Op], final: dict[str, str | None], replicas: dict[str, list[str | None]] | None = None) -> Verdict:
    """Judge ``history``; ``final`` is each key's value read after healing, ``replicas`` each
    key's value on every replica that should hold it (for divergence)."""
    verdict = Verdict(operations=len(history))
    by_key: dict[str, list[Op]] = {}
    for op in history:
        by_key.setdefault(op.key, []).append(op)
    for key, ops in by_key.items():
        writes = [o for o in ops if o.kind in ("put", "delete") and o.ok]
        unknown = [o for o in ops if o.kind in ("put", "delete") and o.ok is None]
        verdict.acknowledged_writes += len(writes)
        written = {o.value for o in ops if o.kind == "put" and o.ok is not False}
        for read in (o for o in ops if o.kind == "get" and o.ok):
            if read.value is not ABSENT and read.value not in written:
                verdict.stale.append((key, read.start, read.value, "never written"))
                continue
            settled = [w for w in writes if w.end < read.start]
            if not settled:
                continue
            latest = max(settled, key=lambda w: w.end)
            # Anything that may have landed after `latest` began could legitimately be read.
            candidates = {_effect(w) for w in writes + unknown if w.end >= latest.start and w.start < read.end}
            if read.value not in candidates:
                verdict.stale.append((key, read.start, read.value, f"expected one of {sorted(map(str, candidates))}"))
        if key not in final or not writes:
            continue
        last = max(writes, key=lambda w: w.end)
        if any(o.end >= last.start for o in writes + unknown if o is not last):
            continue  # its order against another write is not known: nothing to judge
        if final[key] != _effect(last):
            (verdict.resurrected if last.kind == "delete" else verdict.lost).append((key, _effect(last), final[key]))
    for key, values in (replicas or {}).items():
        if len(set(values)) > 1:
            verdict.diverged.append((key, values))
    return verdict
