"""Technology scaling between CMOS nodes (Stillmaker & Baas 2017).

Source: A. Stillmaker, B. Baas, "Scaling equations for the accurate prediction of CMOS device
performance from 180 nm to 7 nm", Integration, the VLSI Journal 58 (2017) 74-81 (+ erratum for
the worked example, eqs. 12-14). The paper fits, per node, delay(V) = a3 V^3 + a2 V^2 + a1 V + a0,
energy(V) = b2 V^2 + b1 V + b0 and a third "power" polynomial c2 V^2 + c1 V + c0; a factor is the
ratio of the target-node polynomial to the source-node polynomial.

What is verified (/work/shared/hw-references.md §3.7):
  * HP45 and HP14 coefficients [src, two independent re-implementations] -> 45 <-> 14 nm factors
    are computed here from the polynomials at the PTM nominal supply (45 nm: 1.0 V, 14 nm: 0.8 V).
  * Area (node-only) factors 45->14 = 0.17, 45->16 = 0.19, 45->7 = 0.059 [src].
What is NOT verified: every other node's energy/delay/leakage factor. Those are *interpolated*
here in log(node) between the verified anchors (and extrapolated beyond 14 nm with the same log
slope), which is an assumption, not the paper's table: see ``INTERPOLATED`` and docs/hw-models.md.
"""

from __future__ import annotations

import math

NODES_NM: tuple[int, ...] = (45, 32, 22, 16, 14, 10, 7)
QUANTITIES: tuple[str, ...] = ("energy", "area", "delay", "leakage")
REFERENCE_NM = 45

# Stillmaker & Baas 2017, Table (HP PTM fits) coefficients, via hw-references.md §3.7 [src].
HP_DELAY_COEFFS = {45: (-501.6, 1567.0, -1619.0, 566.1), 14: (-40.66, 109.2, -100.6, 35.92)}
HP_ENERGY_COEFFS = {45: (1.018, -0.3107, 0.1539), 14: (0.2363, -0.09675, 0.02239)}
# The third "power" fit. hw-references.md notes it does not equal energy/delay and is probably the
# static-power fit; we use it for "leakage" but that interpretation is UNVERIFIED (sweep it).
HP_POWER_COEFFS = {45: (5462.0, -1760.0, 522.4), 14: (1675.0, -711.0, 159.0)}
NOMINAL_VDD = {45: 1.0, 14: 0.8}  # PTM nominal supplies [src: hw-references.md §3.7]

# Area factors relative to 45 nm, Stillmaker & Baas area table via hw-references.md §3.7 [src].
AREA_VS_45_SRC = {45: 1.0, 16: 0.19, 14: 0.17, 7: 0.059}


def _poly(coeffs: tuple[float, ...], v: float) -> float:
    return sum(c * v ** (len(coeffs) - 1 - i) for i, c in enumerate(coeffs))


def stillmaker_factor(quantity: str, from_nm: int = 45, to_nm: int = 14, from_v: float | None = None, to_v: float | None = None) -> float:
    """Ratio target/source of the Stillmaker-Baas HP polynomial, for the nodes with verified
    coefficients (45 and 14 nm). ``from_v``/``to_v`` default to the PTM nominal supply.

    Nominal 45 nm @1.0 V -> 14 nm @0.8 V gives delay x0.361, energy x0.112, "power" x0.157
    (matches hw-references.md §3.7 [ran]).
    """
    table = {"delay": HP_DELAY_COEFFS, "energy": HP_ENERGY_COEFFS, "leakage": HP_POWER_COEFFS}.get(quantity)
    if table is None:
        raise ValueError(f"quantity={quantity!r}: stillmaker_factor supports 'delay', 'energy', 'leakage'")
    for field, nm in (("from_nm", from_nm), ("to_nm", to_nm)):
        if nm not in table:
            raise ValueError(
                f"{field}={nm}: verified Stillmaker-Baas coefficients exist only for {sorted(table)} nm; use scale() for interpolated nodes"
            )
    fv = NOMINAL_VDD[from_nm] if from_v is None else from_v
    tv = NOMINAL_VDD[to_nm] if to_v is None else to_v
    return _poly(table[to_nm], tv) / _poly(table[from_nm], fv)


def _loglog_interp(anchors: dict[int, float], nm: int) -> float:
    """Piecewise-linear interpolation of log(factor) against log(node); beyond the end anchors the
    nearest segment's slope is extended."""
    pts = sorted(anchors.items())
    if nm in anchors:
        return anchors[nm]
    xs = [math.log(n) for n, _ in pts]
    ys = [math.log(f) for _, f in pts]
    x = math.log(nm)
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        i = max(j for j in range(len(xs) - 1) if xs[j] <= x)
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return math.exp(ys[i] + slope * (x - xs[i]))


def _anchors(quantity: str) -> dict[int, float]:
    if quantity == "area":
        return AREA_VS_45_SRC
    return {45: 1.0, 14: stillmaker_factor(quantity, 45, 14)}


def factor_vs_45(quantity: str, node_nm: int) -> float:
    """Factor of ``quantity`` at ``node_nm`` relative to 45 nm (45 nm = 1.0)."""
    check_quantity(quantity)
    check_node(node_nm)
    return _loglog_interp(_anchors(quantity), node_nm)


# Which (quantity, node) factors are verified [src] and which are interpolated assumptions.
def is_verified(quantity: str, node_nm: int) -> bool:
    check_quantity(quantity)
    check_node(node_nm)
    return node_nm in _anchors(quantity)


INTERPOLATED = {q: tuple(n for n in NODES_NM if n not in (_anchors(q))) for q in QUANTITIES}


def check_node(node_nm: int, field: str = "node_nm") -> int:
    if node_nm not in NODES_NM:
        raise ValueError(f"{field}={node_nm!r}: unknown technology node; use one of {list(NODES_NM)} (nm)")
    return node_nm


def check_quantity(quantity: str) -> str:
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity={quantity!r}: unknown; use one of {list(QUANTITIES)}")
    return quantity


def scale(value: float, quantity: str = "energy", from_nm: int = 45, to_nm: int = 14) -> float:
    """Scale ``value`` (energy per op, area, delay, or leakage power) from one node to another.

    >>> round(scale(1.0, "energy", 45, 14), 3)
    0.112
    """
    check_quantity(quantity)
    check_node(from_nm, "from_nm")
    check_node(to_nm, "to_nm")
    return value * factor_vs_45(quantity, to_nm) / factor_vs_45(quantity, from_nm)
