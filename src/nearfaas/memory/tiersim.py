"""The tier simulator (issue 18): replay a function's page-access trace under a memory-tier
policy, and price it. One object, ``simulate(trace, policy, config)``, serves the twin and the
benchmark, as the placement policies do.

A **trace** is a function's accesses per epoch: ``epochs[i]`` maps page → accesses that missed
the LLC in epoch i (an estimate may be fractional; memory/colocation.py's LLC filter takes out
what the cache serves), and ``owner`` maps page → the call-stack
hash of the allocation that owns it (from the shim's log). A **policy** decides, at the start of
each epoch, which pages sit on the fast tier (DRAM), never more than ``config.dram_pages``; a page
that changes tier costs a migration.

Time model (the paper's, reduced to what we can measure here):

    time = base_s × (1 + boundness × slow_share × delta_ns / fast_ns) + migrations × migrate_s

``base_s`` is the all-DRAM run time (measured), ``boundness`` the share of it stalled on memory
(measured per function), ``slow_share`` the share of LLC-missing accesses served by the slow
tier, ``fast_ns`` the fast tier's latency (measured by a pointer chase), ``delta_ns`` the slow
tier's extra latency (70, 150, 250 ns in the paper's sweep). So all-DRAM costs ``base_s`` exactly
and all-slow costs ``base_s × (1 + boundness × delta / fast)``.

Policies, from no knowledge to full:
1. ``all-dram`` — every page fast (the cap is ignored: the baseline).
2. ``all-cxl`` — every page slow.
3. ``first-touch`` — pages fill DRAM in the order first touched, until the cap.
4. ``interleave`` — every other page (by first touch) fast, until the cap.
5. ``tpp`` — first-touch, then after each epoch promote slow pages touched at least
   ``promote_at`` times, demoting the least recently used fast pages to stay under the cap.
6. ``porter`` — Porter's static hint: the owners (call stacks) ranked by accesses per page in a
   profiling trace; their pages fill DRAM in that order, no migration.
7. ``porter+migration`` — the hint, then ``tpp``'s promotions on top.
8. ``oracle`` — each epoch's most-accessed pages fast, moved for free: a lower bound.

Worked example: 4 pages, cap 2, one epoch {0: 90, 1: 5, 2: 5, 3: 0}, owner A for page 0 and B
for the rest, boundness 0.5, fast 100 ns, delta 150 ns: first-touch (order 0,1,2,3) keeps 0 and
1 fast, so 5 of 100 accesses are slow → 1 + 0.5 × 0.05 × 1.5 = 1.0375× base; the hint (A first)
does the same here; the oracle too.

Known caveats:
* Bandwidth is not modelled (a streaming function on CXL is latency-priced here), nor is the
  memory-level parallelism that hides latency: ``boundness`` folds both into one measured share.
* Epochs are coarse: a page hot for part of an epoch counts as hot for all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("all-dram", "all-cxl", "first-touch", "interleave", "tpp", "porter", "porter+migration", "oracle")


@dataclass(frozen=True)
class Trace:
    epochs: list[dict[int, float]]  # page -> LLC-missing accesses, per epoch
    owner: dict[int, str] = field(default_factory=dict)  # page -> call-stack hash of its allocation
    base_s: float = 1.0  # measured all-DRAM time
    boundness: float = 0.5  # measured share of base_s stalled on memory
    first_touch: tuple = ()  # pages in the order the program first touched them, where known

    def pages(self) -> list[int]:
        """Every page, in first-touch order (``first_touch``, then the order of the epochs)."""
        seen: dict[int, None] = dict.fromkeys(self.first_touch)
        for epoch in self.epochs:
            for page in epoch:
                seen.setdefault(page, None)
        for page in self.owner:
            seen.setdefault(page, None)
        return list(seen)


@dataclass(frozen=True)
class TierConfig:
    dram_pages: int  # the fast tier's cap for this function
    fast_ns: float = 100.0  # measured fast-tier latency
    delta_ns: float = 70.0  # slow tier = fast + delta
    migrate_s: float = 2e-6  # one 4 KiB page moved (copy + remap)
    promote_at: float = 0.5  # tpp: accesses in an epoch that earn a promotion (a sample counts a page once an epoch)


@dataclass
class Result:
    policy: str
    time_s: float
    slowdown: float  # time / base - 1
    slow_share: float  # of LLC-missing accesses
    slow_tier_page_share: float  # mean share of the footprint on the slow tier
    migrations: int
    max_fast_pages: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


UNSEEN = "*unseen*"  # in a hint: where owners the profile never saw rank


def hint(profile: Trace | list[Trace]) -> list[str]:
    """Porter's hint from one profiling trace or several (their counts pooled, as the live tuner
    pools a function's newest runs): owners, hottest (accesses per page) first, with ``UNSEEN``
    between the owners seen hot and those seen cold."""
    hits: dict[str, int] = {}
    pages: dict[str, int] = {}
    for one in profile if isinstance(profile, list) else [profile]:
        for page in one.pages():
            who = one.owner.get(page, "?")
            pages[who] = pages.get(who, 0) + 1
        for epoch in one.epochs:
            for page, n in epoch.items():
                who = one.owner.get(page, "?")
                hits[who] = hits.get(who, 0) + n
    ranked = sorted(pages, key=lambda w: (-hits.get(w, 0) / pages[w], w))
    # Owners the profile never saw come after every owner seen hot and before every owner seen
    # cold: the live engine puts a new call site on DRAM when it fits (placement.c), and a short-
    # lived allocation can escape a sparse sample (PageRank's per-iteration vectors at half size).
    cold = next((i for i, w in enumerate(ranked) if not hits.get(w, 0)), len(ranked))
    return ranked[:cold] + [UNSEEN] + ranked[cold:]


def slowdown(boundness: float, slow_share: float, delta_ns: float, fast_ns: float) -> float:
    """The time model's slowdown (module docstring), before migrations: the share of the run stalled
    on memory, times the share of its misses served slow, times how much slower they are. The
    latency experiment (bench/porter_latency.py) checks it against measured slowdowns."""
    return boundness * slow_share * delta_ns / fast_ns


def simulate(trace: Trace, policy: str, cfg: TierConfig, ranked_owners: list[str] | None = None) -> Result:
    """``trace`` under ``policy``; ``ranked_owners`` is the hint for the porter policies (default:
    learned from ``trace`` itself — pass one from another run to test that a hint carries over)."""
    if policy not in POLICIES:
        raise ValueError(f"policy: one of {', '.join(POLICIES)}, got {policy!r}")
    if cfg.dram_pages < 0 or cfg.fast_ns <= 0 or cfg.delta_ns < 0:
        raise ValueError("config: dram_pages >= 0, fast_ns > 0 and delta_ns >= 0")
    order = trace.pages()
    cap = len(order) if policy == "all-dram" else min(cfg.dram_pages, len(order))
    fast = _initial(policy, order, cap, trace, ranked_owners)
    last_use: dict[int, int] = {}
    total = slow = migrations = 0
    slow_pages_sum, max_fast = 0.0, len(fast)
    for i, epoch in enumerate(trace.epochs):
        if policy == "oracle":
            fast = set(sorted(order, key=lambda p: -epoch.get(p, 0))[:cap])  # moved for free
        for page, n in epoch.items():
            total += n
            slow += 0 if page in fast else n
            last_use[page] = i
        max_fast = max(max_fast, len(fast))
        slow_pages_sum += (len(order) - len(fast)) / len(order) if order else 0.0
        if policy in ("tpp", "porter+migration"):
            moved = _promote(fast, epoch, cap, last_use, cfg.promote_at)
            migrations += moved
    share = slow / total if total else 0.0
    time_s = trace.base_s * (1 + slowdown(trace.boundness, share, cfg.delta_ns, cfg.fast_ns)) + migrations * cfg.migrate_s
    return Result(policy, time_s, time_s / trace.base_s - 1, share,
                  slow_pages_sum / len(trace.epochs) if trace.epochs else 0.0, migrations, max_fast)


def _initial(policy: str, order: list[int], cap: int, trace: Trace, ranked: list[str] | None) -> set[int]:
    if policy in ("all-dram", "first-touch", "tpp"):
        return set(order[:cap])
    if policy == "interleave":
        return set(order[::2][:cap])
    if policy in ("porter", "porter+migration"):
        rank = {who: i for i, who in enumerate(ranked if ranked is not None else hint(trace))}
        unseen = rank.get(UNSEEN, len(rank))
        touched = {p: i for i, p in enumerate(order)}
        by_hint = sorted(order, key=lambda p: (rank.get(trace.owner.get(p, "?"), unseen), touched[p]))
        return set(by_hint[:cap])
    return set()  # all-cxl; the oracle picks per epoch


def _promote(fast: set[int], epoch: dict[int, float], cap: int, last_use: dict[int, int], promote_at: float) -> int:
    """Promote this epoch's hot slow pages, demoting the least recently used fast ones; the
    number of pages moved (each promotion that needs room moves two)."""
    hot = sorted((p for p, n in epoch.items() if n >= promote_at and p not in fast), key=lambda p: -epoch[p])
    moved = 0
    for page in hot:
        if len(fast) >= cap:
            if cap == 0:
                break
            victim = min(fast, key=lambda p: (last_use.get(p, -1), p))
            if epoch.get(victim, 0) >= epoch[page]:
                break  # the coldest fast page is as hot as this one: nothing gained
            fast.discard(victim)
            moved += 1
        fast.add(page)
        moved += 1
    return moved
