"""A YCSB workload-A generator (Cooper et al., SoCC 2010): the key-value workload the thesis
measures MBWU with (issue 20). Written here, no Java: 50% reads, 50% updates of fixed-size
records, keys drawn from YCSB's *scrambled zipfian* distribution.

Mechanism: ``Zipfian`` is YCSB's ZipfianGenerator (Gray et al., "Quickly generating
billion-record synthetic databases", SIGMOD 1994): item ``i`` of ``n`` is drawn with probability
proportional to ``1 / (i + 1) ** theta`` (theta = 0.99, YCSB's default) by inverting a closed
form with the precomputed zeta(n, theta). Scrambling hashes the rank with 64-bit FNV-1a and
takes it modulo ``n``, so the hot keys are spread over the key space (and over the LSM tree's
files) instead of being the first few, as YCSB does.

Worked example: ``Workload(records=100_000, seed=1).batch(4)`` gives four operations such as
``[("r", "user0000041377"), ("u", "user0000091650", <1000 random hex characters>), ...]``; about
half are updates, and the most popular 1% of keys take roughly 40% of the draws.

Known caveats:
- zeta(n) is summed once per generator (O(n)); a million records take about a second.
- Values are random hex, so they do not compress: RocksDB's compression is off for the
  workload anyway (econ/kvstore.py), as YCSB's random bytes would make it pointless.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

THETA = 0.99  # YCSB's ZipfianGenerator.ZIPFIAN_CONSTANT
RECORD_BYTES = 1000  # YCSB's default record: 10 fields x 100 bytes
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv1a64(value: int) -> int:
    h = FNV_OFFSET
    for _ in range(8):
        h ^= value & 0xFF
        h = (h * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        value >>= 8
    return h


def key(i: int) -> str:
    return f"user{i:010d}"


@dataclass
class Zipfian:
    """Ranks 0..n-1, rank r with probability proportional to 1 / (r + 1) ** theta."""
    n: int
    theta: float = THETA
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"records must be at least 1, got {self.n}")
        self.zetan = sum(1.0 / (i + 1) ** self.theta for i in range(self.n))
        zeta2 = 1.0 + 0.5 ** self.theta
        self.alpha = 1.0 / (1.0 - self.theta)
        self.eta = (1 - (2.0 / self.n) ** (1 - self.theta)) / (1 - zeta2 / self.zetan) if self.n > 1 else 0.0
        self._half_pow = 1 + 0.5 ** self.theta

    def next(self) -> int:
        u = self.rng.random()
        uz = u * self.zetan
        if uz < 1.0:
            return 0
        if uz < self._half_pow:
            return 1 if self.n > 1 else 0
        return min(self.n - 1, int(self.n * (self.eta * u - self.eta + 1) ** self.alpha))


@dataclass
class Workload:
    """YCSB workload A over ``records`` keys: ``read_share`` reads, the rest updates."""
    records: int
    value_bytes: int = RECORD_BYTES
    read_share: float = 0.5
    seed: int = 1

    def __post_init__(self):
        if not 0.0 <= self.read_share <= 1.0:
            raise ValueError(f"read_share must be between 0 and 1, got {self.read_share}")
        if not 1 <= self.value_bytes <= 1 << 20:
            raise ValueError(f"value_bytes must be between 1 and 1 MiB, got {self.value_bytes}")
        self.rng = random.Random(self.seed)
        self.zipf = Zipfian(self.records, rng=self.rng)

    def next_key(self) -> str:
        return key(fnv1a64(self.zipf.next()) % self.records)

    def batch(self, size: int) -> list[tuple]:
        ops = []
        for _ in range(size):
            k = self.next_key()
            if self.rng.random() < self.read_share:
                ops.append(("r", k))
            else:
                ops.append(("u", k, self.rng.randbytes((self.value_bytes + 1) // 2).hex()[: self.value_bytes]))
        return ops
