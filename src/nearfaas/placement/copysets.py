"""Copyset replication (Cidon et al., USENIX ATC '13): the scheme the thesis's data-availability
model assumes (issue 20), offered beside rendezvous hashing (``replication.scheme: copyset``).

Rendezvous hashing scatters each object's ``R`` replicas over its own top-``R`` nodes, so with
many objects nearly every ``R``-subset of nodes holds some object together: any ``R``
simultaneous failures lose data. Copyset replication confines replicas to a few fixed
``R``-subsets, the *copysets*; ``R`` failures lose data only when they are exactly one of them.

Mechanism (the permutation scheme of Cidon's section 3):
1. ``P = w / (R - 1)`` permutations of the storage nodes, where the scatter width ``w`` is how
   many other nodes a node's data may be copied to. The permutations are drawn from a generator
   seeded by the sorted node names, so every gateway (and the twin) derives the same ones.
2. Each permutation is cut into consecutive groups of ``R``: those are copysets. A group that
   repeats an existing copyset makes the whole permutation be drawn again.
3. An object's copyset is the rendezvous winner among all copysets (the copyset's members
   hashed with the bucket and key); its replicas are the copyset's members, the one that
   scores highest for the key first (the primary).

With ``dscs_replica`` every copyset is built as one dscs node (round robin over a permutation of
the dscs nodes) plus ``R - 1`` of the others cut from their permutation, so every object still
has a copy on a dscs drive (DSCS-Serverless section 5.2), without leaving the copysets.

Worked example: 9 storage nodes, ``R = 3``, ``w = 4``: two permutations of three groups each,
6 copysets (``w * m / 6``). Three random nodes failing lose data only if they are one of those
6 triples: 6 of the 84 possible triples, 7%; with rendezvous hashing and thousands of objects
every triple holds some object, 100%. The twin's availability model (econ/availability.py)
prices exactly this.

Known caveats:
- When ``m`` is not a multiple of the group size, a permutation's last group is filled up from
  the permutation's start (still distinct nodes); those nodes' scatter width grows by a little.
- Adding or removing a storage node re-draws the permutations, so most copysets change and
  objects move (rendezvous moves only the changed node's share). A node *replaced* under the
  same name (a lost disk) keeps its copysets; anti-entropy copies its objects back.
- Choosing a copyset uniformly (not a primary first, then one of its copysets, as Cidon does)
  spreads objects evenly over nodes only while nodes sit in equally many copysets, which the
  scheme gives when ``m`` is a multiple of the group size.
- With dscs_replica the dscs nodes sit in more copysets than the others when they are few.
"""

from __future__ import annotations

import functools
import hashlib
import random

MAX_REDRAWS = 50  # draws of one permutation before accepting that no new copyset is left


def default_scatter_width(factor: int) -> int:
    """Two permutations' worth: what ``scatter_width: 0`` means."""
    return 2 * max(1, factor - 1)


def check_scatter_width(w: int, factor: int, nodes: int) -> None:
    """Raise ValueError, naming the fix, unless ``w`` works for ``factor`` copies on ``nodes``."""
    if factor < 2:
        raise ValueError(f"copyset replication needs at least 2 copies (factor is {factor}); use factor >= 2 "
                         "or scheme: rendezvous")
    if w < factor - 1 or w % (factor - 1):
        raise ValueError(f"scatter width {w} must be a positive multiple of factor - 1 = {factor - 1} "
                         f"(each permutation adds {factor - 1} to it), e.g. {2 * (factor - 1)}")
    if w > nodes - 1:
        raise ValueError(f"scatter width {w} exceeds the {nodes - 1} other storage nodes a node can copy to; "
                         f"use at most {nodes - 1 - (nodes - 1) % (factor - 1)}")


def generate(names: list[str] | tuple[str, ...], factor: int, scatter_width: int,
             anchors: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The copysets of ``names`` (each a sorted tuple of ``factor`` names), by the permutation
    scheme; with ``anchors`` (the dscs nodes, under dscs_replica) each copyset holds exactly
    one anchor. Deterministic in its arguments."""
    names = sorted(set(names))
    check_scatter_width(scatter_width, factor, len(names))
    anchors = tuple(sorted(set(anchors) & set(names)))
    others = [n for n in names if n not in anchors] if anchors and len(anchors) < len(names) else names
    if others is names:
        anchors = ()
    seed = hashlib.blake2b("\0".join(names + ["|", *anchors, "|", str(factor)]).encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(seed, "big"))
    size = factor - 1 if anchors else factor
    if len(others) < size:  # too few non-dscs nodes to fill a group: fall back to plain groups
        others, anchors, size = names, (), factor
    found: list[tuple[str, ...]] = []
    seen: set[tuple[str, ...]] = set()
    for _ in range(scatter_width // (factor - 1)):
        for _attempt in range(MAX_REDRAWS):
            groups = _cut(rng.sample(others, len(others)), size)
            if anchors:
                order = rng.sample(anchors, len(anchors))
                groups = [g + (order[i % len(order)],) for i, g in enumerate(groups)]
            sets = [tuple(sorted(g)) for g in groups]
            if len(set(sets)) == len(sets) and not seen.intersection(sets):
                found += sets
                seen.update(sets)
                break
    return found


def _cut(perm: list[str], size: int) -> list[tuple[str, ...]]:
    groups = [tuple(perm[i:i + size]) for i in range(0, len(perm), size)]
    if len(groups[-1]) < size:  # fill the short last group from the permutation's start
        last = list(groups[-1])
        last += [n for n in perm if n not in last][: size - len(last)]
        groups[-1] = tuple(last)
    return groups


@functools.lru_cache(maxsize=64)
def cached(names: tuple[str, ...], factor: int, scatter_width: int, anchors: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``generate`` memoised per ring: the gateway asks for every request."""
    return tuple(generate(names, factor, scatter_width, anchors))


def pick(copysets, bucket: str, key: str, score) -> list[str]:
    """The object's replicas: the rendezvous winner among ``copysets``, its members ordered by
    their own score for the key (primary first)."""
    best = max(copysets, key=lambda cs: score("\0".join(cs), bucket, key))
    return sorted(best, key=lambda n: score(n, bucket, key), reverse=True)
