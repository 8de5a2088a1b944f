"""The thesis's multistage particle sifting (§5.3.2), as a plan any runtime can execute: which
bits each stage matches, which processing elements (PEs) a part may go to, and the key label
that names it. ``sift_ray`` runs the plan on Ray actors; the twin (``twin.sifting``) times it.

Ranks inject samples into their local PE; a PE accumulates a stage's data until it holds
``threshold`` particles, then *compacts*: splits it on the stage's next ID bits and publishes
each part to a PE of the next stage, chosen from a pool. After the last stage PE ``j`` holds
exactly the particles whose low ``log2(pes)`` ID bits equal ``j`` — the data is sorted across
the PEs, like the bottom level of a distributed LSM tree.

    stage 1 (any data)  ──split on bits [0, b)──▶  stage 2 (low b bits matched)  ──▶ … ──▶  stage S

Definitions (``pes`` = P and ``split`` = s are powers of two; b = log2 s, B = log2 P):

* stages S = ceil(B / b); after stage k, c_k = min(k·b, B) low bits are matched.
* pool(k, m) = the PEs whose index has low c_k bits equal to m: where a part with matched
  bits m may go after stage k. Its size is P / 2^c_k; after the last stage it is one PE.
* key → member: a PE j publishing to pool(k, m) picks member ``(j >> c_k) mod |pool|`` — PEs
  that share a prefix spread over the pool instead of piling onto its first member, and one
  compaction never reaches more than ``2^(c_k - c_{k-1}) <= s`` PEs (the pool bounds fan-out).
* key label = (next stage, matched bits, source part) where the source part is
  (source PE or rank, its stage, its compaction number, the part's index): unique for every
  object ever published, so a re-delivery after a failure is recognised and dropped.

Worked example: 8 PEs, split 4 → b = 2, B = 3, S = 2 stages. Stage 1 splits on bits 0-1 into
4 parts; the part with bits 0b10 goes to pool(1, 2) = {PE 2, PE 6}; PE 5 picks member
(5 >> 2) mod 2 = 1, i.e. PE 6. Stage 2 splits on bit 2 only (2 parts): bits 0b110 → PE 6.

Known caveats:
- Uneven low ID bits (the Particles dataset) make uneven PEs: sifting sorts, it does not
  balance. Hash the ID before sifting if balance matters more than locality of IDs.
- Accumulation is counted in particles, not bytes; wide tables cross a byte budget sooner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class SiftError(ValueError):
    pass


def _power_of_two(name: str, value, low: int = 1) -> int:
    if not isinstance(value, int) or value < low or value & (value - 1):
        raise SiftError(f"{name} must be a power of two >= {low}, got {value!r}; try 4, 8 or 16")
    return value.bit_length() - 1


@dataclass(frozen=True)
class Label:
    """A published object's key: unique per object (see the module's definitions)."""

    stage: int  # the stage that will consume it (S + 1: the final store)
    matched: int  # the ID bits matched so far (c_{stage-1} bits)
    source: int  # the publishing PE (or the injecting rank, for stage 1)
    source_stage: int  # 0 for injection
    seq: int  # the source's compaction (or injection) number
    part: int

    def __str__(self) -> str:
        return f"s{self.stage}/m{self.matched}/from{self.source}.{self.source_stage}.{self.seq}.{self.part}"


@dataclass(frozen=True)
class Plan:
    pes: int
    split: int
    threshold: int  # particles a PE accumulates in a stage before it compacts

    def __post_init__(self):
        if not isinstance(self.pes, int) or not 1 <= self.pes <= 4096:
            raise SiftError(f"pes must be 1..4096, got {self.pes!r}")
        _power_of_two("pes", self.pes)
        _power_of_two("split", self.split, low=2)
        if not isinstance(self.threshold, int) or self.threshold < 1:
            raise SiftError(f"threshold must be a positive number of particles, got {self.threshold!r} "
                            "(a PE compacts once it holds this many)")

    @property
    def bits(self) -> int:
        return self.pes.bit_length() - 1

    @property
    def bits_per_stage(self) -> int:
        return self.split.bit_length() - 1

    @property
    def stages(self) -> int:
        return max(1, math.ceil(self.bits / self.bits_per_stage)) if self.bits else 1

    def matched_after(self, stage: int) -> int:
        """c_k: low ID bits matched once stage ``stage`` has compacted (c_0 = 0)."""
        return min(stage * self.bits_per_stage, self.bits)

    def parts(self, stage: int) -> int:
        """How many parts stage ``stage``'s compaction makes (the last stage may make fewer)."""
        return 1 << (self.matched_after(stage) - self.matched_after(stage - 1))

    def pool(self, stage: int, matched: int) -> list[int]:
        mask = (1 << self.matched_after(stage)) - 1
        return [j for j in range(self.pes) if j & mask == matched]

    def destination(self, stage: int, source_pe: int, matched: int) -> int:
        pool = self.pool(stage, matched)
        if not pool:
            raise SiftError(f"stage {stage}: no PE matches bits {matched}")
        return pool[(source_pe >> self.matched_after(stage)) % len(pool)]

    def split_ids(self, stage: int, ids: np.ndarray) -> np.ndarray:
        """Each particle's part index at stage ``stage``: its ID bits [c_{k-1}, c_k)."""
        lo, hi = self.matched_after(stage - 1), self.matched_after(stage)
        return ((ids >> np.uint64(lo)) & np.uint64((1 << (hi - lo)) - 1)).astype(np.int64)

    def matched_bits(self, stage: int, ids_prefix: int, part: int) -> int:
        """The matched bits after stage ``stage`` of a part: the PE's prefix plus the part's bits."""
        return ids_prefix | (part << self.matched_after(stage - 1))

    def home(self, ids: np.ndarray) -> np.ndarray:
        """Where each particle must end: the PE numbered by its low B ID bits."""
        return (ids & np.uint64(self.pes - 1)).astype(np.int64)


def inject_pe(rank: int, pes: int) -> int:
    """A simulation rank's local PE (ranks share the PEs of their node, round robin)."""
    return rank % pes


def flow(plan: Plan, ids_by_rank: list[np.ndarray]) -> list[dict[int, np.ndarray]]:
    """The plan executed in memory, without thresholds: for each stage k (1..S+1), the IDs each
    PE holds when stage k starts (S+1: the final holdings). The reference the Ray run is checked
    against, and the per-stage load the twin's model times."""
    held: dict[int, list] = {}
    for rank, ids in enumerate(ids_by_rank):
        held.setdefault(inject_pe(rank, plan.pes), []).append(np.asarray(ids, np.uint64))
    stages = [{pe: np.concatenate(v) for pe, v in held.items()}]
    for stage in range(1, plan.stages + 1):
        nxt: dict[int, list] = {}
        prefix_mask = (1 << plan.matched_after(stage - 1)) - 1
        for pe, ids in stages[-1].items():
            part = plan.split_ids(stage, ids)
            for p in np.unique(part):
                dest = plan.destination(stage, pe, plan.matched_bits(stage, pe & prefix_mask, int(p)))
                nxt.setdefault(dest, []).append(ids[part == p])
        stages.append({pe: np.concatenate(v) for pe, v in nxt.items()})
    return stages
