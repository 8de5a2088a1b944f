"""The thesis's data-availability model (section 3.2, equations 3.1-3.12): how much less often a
storage system built of embedded storage nodes loses data than one built of general-purpose
servers, both under 3-way copyset replication (issue 20). All of it is modelled.

The two systems (thesis Table 3.1):
* GP: ``m`` servers, ``n`` storage devices each; a replica of a chunk lives on the device of the
  same index on each server of a copyset.
* ES: ``m' = c * m`` embedded nodes, one device each.
Failures are independent and Poisson: the number of failed servers (nodes) in the period has
mean ``R_m``, of failed devices ``R_d = f * R_m`` (eq. 3.1, 3.2); ``R'_m = R_m``, ``R'_d = R_d``.
Copysets: ``l = w * m / 6`` of them (Cidon's permutation scheme, placement/copysets.py).

Data is lost when some copyset is *covered*: every member either failed itself or lost the
device of one common index ``i``. ``N(k, j)`` counts the (k servers, j devices) failure
combinations that cover a copyset; the thesis splits it into servers only ``N_m(k)``, devices
only ``N_d(j)`` and mixed ``N_md(k, j)`` (eq. 3.3-3.5) and sums (eq. 3.6, 3.7). Exactly three
failures have closed forms (eq. 3.12): ``N_m(3) = l``, ``N_d(3) = n l``, ``N_md(1,2) = N_md(2,1)
= 3 n l`` (and ``n = 1`` for ES).

Three ways to get the counts, each checking the others (tests/unit/test_econ_availability.py):
* ``three_failures``: the closed forms, the thesis's own comparison (eq. 3.12).
* ``enumerate_counts``: every combination of ``k`` servers and ``j`` devices over an actual set
  of copysets; equals the closed forms at ``k + j = 3`` and extends past it (the thesis's
  "future work": its general formula for N was elusive).
* ``monte_carlo``: failures drawn from the Poisson process itself, data loss checked against the
  copysets; a probability with a 95% Wilson interval, for clusters too large to enumerate.

Worked example (``python -m nearfaas.cli econ availability --m 10 --n 4 --c 4 --f 2 --w 4``):
l_gp = 6.67 copysets over 10 servers, l_es = 26.7 over 40 nodes; with R_m = 0.1 the GP system
loses data through exactly three failures with probability 5.9e-5 and the ES one 9.1e-6: relative benefit 6.6 (the thesis
reports up to 7.1 for four devices per server).

Known caveats:
- Eq. 3.6 adds its terms without removing overlaps (a combination where the servers alone and
  the devices alone each cover a copyset is counted twice), as the thesis writes it;
  ``union_probability`` is the exact probability of loss, to compare.
- ``R_m`` is the expected number of failed servers in the whole system during the period (the
  window before repair), the same for both systems, as the thesis assumes; it is an input.
- ``w * m / 6`` is a whole number of copysets only when the permutation scheme fits exactly;
  the closed forms use the fraction, as the thesis does, and the enumerator the real ones.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from nearfaas.placement import copysets as copyset_scheme

REPLICAS = 3  # the thesis's 3-way replication


@dataclass(frozen=True)
class Model:
    """The thesis's parameters (Table 3.1); ``r_m`` is the expected server failures in the period."""
    m: int
    n: int
    c: float
    f: float
    w: int
    r_m: float = 0.1

    def __post_init__(self):
        problems = []
        if self.m < REPLICAS:
            problems.append(f"m (servers) is {self.m}: 3-way replication needs at least 3; use --m 3 or more")
        if self.n < 2:
            problems.append(f"n (devices per server) is {self.n}: the model assumes at least 2; use --n 2 or more")
        if self.c < 1:
            problems.append(f"c (embedded nodes per server) is {self.c:g}: it must be at least 1")
        elif abs(self.c * self.m - round(self.c * self.m)) > 1e-9:
            problems.append(f"c * m = {self.c * self.m:g} is not a whole number of embedded nodes; pick c so it is")
        if not self.f > 0:
            problems.append(f"f (device-to-server failure-rate ratio) is {self.f:g}: it must be above 0, e.g. 2 (HDD) or 0.06 (SSD)")
        if self.w < 2 or self.w % (REPLICAS - 1):
            problems.append(f"w (scatter width) is {self.w}: with 3 replicas it must be a positive even number, e.g. 4")
        if not self.r_m > 0:
            problems.append(f"r_m (expected server failures in the period) is {self.r_m:g}: it must be above 0, e.g. 0.1")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def r_d(self) -> float:
        return self.f * self.r_m

    @property
    def m_es(self) -> int:
        return round(self.c * self.m)


def poisson(rate: float, k: int) -> float:
    """Eq. 3.1/3.2: the probability of exactly ``k`` failures when ``rate`` are expected."""
    return rate ** k * math.exp(-rate) / math.factorial(k)


def _three_terms(nodes: int, devices: int, r_m: float, r_d: float, w: int) -> dict:
    """Eq. 3.12's four terms for one system (devices = per node), with ``l = w * nodes / 6``."""
    copysets, total = w * nodes / 6, nodes * devices
    return {"servers_3": poisson(r_m, 3) * copysets / math.comb(nodes, 3),
            "devices_3": poisson(r_d, 3) * devices * copysets / math.comb(total, 3),
            "servers_1_devices_2": poisson(r_m, 1) * poisson(r_d, 2) * 3 * devices * copysets / (nodes * math.comb(total, 2)),
            "servers_2_devices_1": poisson(r_m, 2) * poisson(r_d, 1) * 3 * devices * copysets / (math.comb(nodes, 2) * total),
            "copysets": copysets}


def three_failures(model: Model) -> dict:
    """Eq. 3.12: the probability of losing data through exactly three failures, GP and ES, and
    their ratio (the relative benefit of embedded storage nodes)."""
    gp = _three_terms(model.m, model.n, model.r_m, model.r_d, model.w)
    es = _three_terms(model.m_es, 1, model.r_m, model.r_d, model.w)
    p_gp = sum(v for k, v in gp.items() if k != "copysets")
    p_es = sum(v for k, v in es.items() if k != "copysets")
    return {"p_gp": p_gp, "p_es": p_es, "relative_benefit": p_gp / p_es, "terms_gp": gp, "terms_es": es,
            "m_es": model.m_es, "r_d": model.r_d, "label": "modelled: thesis eq. 3.12 (exactly three failures)"}


# -- counting failure combinations over real copysets ---------------------------------------------

def masks(sets, names: list[str]) -> list[int]:
    """Each copyset as a bit mask over ``names``' positions."""
    index = {name: i for i, name in enumerate(names)}
    return [sum(1 << index[x] for x in cs) for cs in sets]


def loses(copyset_masks: list[int], failed_servers: int, failed_devices: dict[int, int]) -> bool:
    """Is some copyset covered? ``failed_devices``: device index -> mask of servers whose device
    of that index failed."""
    if any(cs & failed_servers == cs for cs in copyset_masks):
        return True
    for lost in failed_devices.values():
        covered = failed_servers | lost
        if any(cs & covered == cs for cs in copyset_masks):
            return True
    return False


def _device_masks(devices: tuple[int, ...], n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for d in devices:  # device d is index d % n on server d // n
        out[d % n] = out.get(d % n, 0) | (1 << (d // n))
    return out


def enumerate_counts(copyset_masks: list[int], servers: int, n: int, k: int, j: int) -> dict:
    """Every combination of ``k`` failed servers and ``j`` failed devices (of ``servers * n``):
    how many lose data (``any``), and the thesis's split: k-sets of servers that lose data alone
    (``servers_only``, its N_m(k)), j-sets of devices that do (``devices_only``, N_d(j)), and
    combinations that lose data only through both together (``mixed``, N_md(k, j))."""
    any_loss = mixed = servers_only = 0
    device_combos = list(itertools.combinations(range(servers * n), j))
    device_masks = [_device_masks(d, n) for d in device_combos]
    device_alone = [loses(copyset_masks, 0, d) for d in device_masks]
    for combo in itertools.combinations(range(servers), k):
        s_mask = sum(1 << s for s in combo)
        s_alone = loses(copyset_masks, s_mask, {})
        servers_only += s_alone
        if s_alone:
            any_loss += len(device_combos)
            continue
        for d_masks, d_alone in zip(device_masks, device_alone, strict=True):
            if d_alone:
                any_loss += 1
            elif loses(copyset_masks, s_mask, d_masks):
                any_loss += 1
                mixed += 1
    return {"k": k, "j": j, "any": any_loss, "servers_only": servers_only, "devices_only": sum(device_alone),
            "mixed": mixed, "combinations": math.comb(servers, k) * len(device_combos)}


def thesis_probability(copyset_masks: list[int], servers: int, n: int, r_m: float, r_d: float,
                       max_failures: int = 5) -> float:
    """Eq. 3.6 (3.7 with ``n = 1``) with every N enumerated, summed up to ``max_failures``."""
    p = 0.0
    for k in range(REPLICAS, min(servers, max_failures) + 1):
        p += poisson(r_m, k) * enumerate_counts(copyset_masks, servers, n, k, 0)["servers_only"] / math.comb(servers, k)
    for j in range(REPLICAS, min(servers * n, max_failures) + 1):
        p += poisson(r_d, j) * enumerate_counts(copyset_masks, servers, n, 0, j)["devices_only"] / math.comb(servers * n, j)
    for k in range(1, servers + 1):
        for j in range(1, servers * n + 1):
            if REPLICAS <= k + j <= max_failures:
                c = enumerate_counts(copyset_masks, servers, n, k, j)
                p += poisson(r_m, k) * poisson(r_d, j) * c["mixed"] / c["combinations"]
    return p


def union_probability(copyset_masks: list[int], servers: int, n: int, r_m: float, r_d: float,
                      max_failures: int = 5) -> dict:
    """The exact probability of data loss, every (k, j) with k + j <= ``max_failures``
    enumerated; ``tail`` bounds what the truncation leaves out."""
    p = 0.0
    for total in range(REPLICAS, max_failures + 1):
        for k in range(0, total + 1):
            j = total - k
            if k > servers or j > servers * n:
                continue
            counts = enumerate_counts(copyset_masks, servers, n, k, j)
            p += poisson(r_m, k) * poisson(r_d, j) * counts["any"] / counts["combinations"]
    tail = 1.0 - sum(poisson(r_m + r_d, t) for t in range(max_failures + 1))  # P(more failures than enumerated)
    return {"p": p, "tail_bound": max(0.0, tail), "max_failures": max_failures, "label": "modelled: exact enumeration"}


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a binomial proportion."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    # At 0 or every success the interval touches 0 or 1 exactly (rounding would leave it short).
    return (0.0 if successes == 0 else max(0.0, centre - half)), (1.0 if successes == trials else min(1.0, centre + half))


def monte_carlo(copyset_masks: list[int], servers: int, n: int, *, r_m: float | None = None, r_d: float | None = None,
                k: int | None = None, j: int | None = None, trials: int = 100_000, seed: int = 1,
                progress=None) -> dict:
    """Draw failures and check for loss: either from the Poisson process (``r_m``, ``r_d``) or a
    fixed count (``k`` servers and ``j`` devices, uniformly: estimates ``N(k, j) / combinations``)."""
    rng = random.Random(seed)
    fixed = k is not None
    losses = 0
    for t in range(trials):
        kk = k if fixed else _draw_poisson(rng, r_m)
        jj = j if fixed else _draw_poisson(rng, r_d)
        kk, jj = min(kk, servers), min(jj, servers * n)
        s_mask = sum(1 << s for s in rng.sample(range(servers), kk))
        d_masks = _device_masks(tuple(rng.sample(range(servers * n), jj)), n)
        losses += loses(copyset_masks, s_mask, d_masks)
        if progress and t % 10_000 == 0:
            progress(t)
    lo, hi = wilson(losses, trials)
    return {"p": losses / trials, "ci95": [lo, hi], "trials": trials, "losses": losses,
            "label": "modelled: Monte-Carlo over the copysets"}


def _draw_poisson(rng: random.Random, rate: float) -> int:
    k, p, threshold = 0, 1.0, math.exp(-rate)  # Knuth: fine for the small rates failures have
    while True:
        p *= rng.random()
        if p <= threshold:
            return k
        k += 1


def copysets_for(nodes: int, w: int, seed_name: str = "node") -> tuple[list[int], list[str]]:
    """Copysets of ``nodes`` named nodes by the permutation scheme, as masks (and the names)."""
    names = [f"{seed_name}-{i:03d}" for i in range(nodes)]
    return masks(copyset_scheme.generate(names, REPLICAS, w), names), names


def sweep(ms, ns, cs, fs, ws, r_m: float = 0.1):
    """Rows of the relative benefit over every combination given (``c=None``: c = n, the
    thesis's "as many embedded nodes as server devices")."""
    for m, n, c, f, w in itertools.product(ms, ns, cs, fs, ws):
        model = Model(m, n, float(n if c is None else c), f, w, r_m)
        r = three_failures(model)
        yield {"m": m, "n": n, "c": model.c, "f": f, "w": w, "p_gp": r["p_gp"], "p_es": r["p_es"],
               "relative_benefit": r["relative_benefit"]}


# -- a nearfaas cluster's own object store ----------------------------------------------------------

def replica_sets(ring, factor: int, dscs_replica: bool, scheme, objects: int) -> set[tuple[str, ...]]:
    """The distinct node sets the store's own placement rule (placement/replicas.py) gives
    ``objects`` keys: the copysets that data actually shares."""
    from nearfaas.placement.replicas import replicas_for

    return {tuple(sorted(n.name for n in replicas_for(ring, "availability", f"object-{i}", factor, dscs_replica, scheme)))
            for i in range(objects)}


def cluster_availability(ring, factor: int, dscs_replica: bool, scheme, *, r_m: float, objects: int = 10_000,
                         trials: int = 100_000, seed: int = 1, progress=None) -> dict:
    """The data-loss odds of a cluster's storage nodes under its replication scheme: each node
    is one failure domain holding one store (the thesis's embedded-node case, n = 1). Exact
    P(loss | k nodes fail) for every k from the factor up, the Poisson-weighted total, and a
    Monte-Carlo check of it."""
    names = sorted(n.name for n in ring)
    sets = replica_sets(ring, factor, dscs_replica, scheme, objects)
    mk = masks(sets, names)
    size = min(len(s) for s in sets)
    by_k = {}
    for k in range(size, len(names) + 1):
        counts = enumerate_counts(mk, len(names), 1, k, 0)
        by_k[k] = counts["servers_only"] / counts["combinations"]
        if progress:
            progress(k)
        if by_k[k] == 1.0 or math.comb(len(names), k + 1) > 2_000_000:
            break
    last = max(by_k)
    p = sum(poisson(r_m, k) * frac for k, frac in by_k.items())
    # Beyond the last k enumerated, losing data is at least as likely: bound it by one.
    tail = 1.0 - sum(poisson(r_m, k) for k in range(last + 1))
    mc = monte_carlo(mk, len(names), 1, r_m=r_m, r_d=0.0, trials=trials, seed=seed)
    return {"nodes": len(names), "replica_sets": len(sets), "loss_given_k_failures": {str(k): v for k, v in by_k.items()},
            "p_loss": p, "p_loss_upper": p + max(0.0, tail), "monte_carlo": mc,
            "label": "modelled: the store's own placement over the cluster's storage nodes, exact enumeration + Monte-Carlo"}
