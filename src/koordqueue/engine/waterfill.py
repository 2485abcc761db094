"""Weighted water-filling: how one parent's runtime quota is split among its children.

Koordinator's runtime-quota rule, for one resource: every child first gets
min(demand, min) (a child that does not lend has its demand raised to its min by the
caller, so it gets its full min); what is left of the parent's total goes to the
children that want more, in proportion to their shared weight, never beyond their
demand; what a child cannot use is handed again to the others until nothing is left or
nobody wants more. Integer arithmetic only: amounts are milli-units, and the
proportional part is split with largest-remainder rounding (ties go to the earlier
child, and callers list children in name order, so ties are by name) in whole units
whenever everything being split is a whole number of units, so that a 100-GPU parent
hands out whole GPUs and no unit is lost or made up.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import gcd

WHOLE = 1000  # milli-units in one unit


def water_fill(
    total: int | None,
    mins: Sequence[int],
    demands: Sequence[int],
    weights: Sequence[int],
) -> list[int]:
    """Each child's share of ``total`` (None: unbounded, everyone gets its demand).

    ``demands`` are already capped at each child's max (and raised to its min when it
    does not lend); all lists are parallel.
    """
    if total is None or sum(demands) <= total:
        return list(demands)
    out = [d if d < m else m for d, m in zip(demands, mins, strict=True)]
    rest = total - sum(out)
    if rest <= 0:
        return out if rest == 0 else _proportional(total, out)
    active = [i for i, w in enumerate(weights) if w > 0 and demands[i] > out[i]]
    while active:
        weight_sum = sum([weights[i] for i in active])
        # A child whose want, per unit of weight, is below the current level is
        # satisfied in full; the level only rises as children drop out, so every child
        # found here would also be satisfied at the final level.
        full = [i for i in active if (demands[i] - out[i]) * weight_sum <= rest * weights[i]]
        if not full:
            _split(rest, active, out, weights, demands, weight_sum)
            return out
        for i in full:
            rest -= demands[i] - out[i]
            out[i] = demands[i]
        active = [i for i in active if out[i] < demands[i]]
    return out


def _split(
    rest: int,
    active: list[int],
    out: list[int],
    weights: Sequence[int],
    demands: Sequence[int],
    weight_sum: int,
) -> None:
    """Share ``rest`` among ``active`` (whose weights sum to ``weight_sum``) by weight;
    none of them reaches its demand."""
    whole = rest % WHOLE == 0 and gcd(*[demands[i] - out[i] for i in active]) % WHOLE == 0
    step = WHOLE if whole else 1
    units = rest // step
    scaled = [units * weights[i] for i in active]
    floors = [amount // weight_sum for amount in scaled]
    leftover = units - sum(floors)
    if leftover:
        # Largest remainder first; the sort is stable (reversed too), so ties keep the
        # children's order.
        remainders = [amount % weight_sum for amount in scaled]
        for k in sorted(range(len(active)), key=remainders.__getitem__, reverse=True)[:leftover]:
            floors[k] += 1
    for k, i in enumerate(active):
        out[i] += floors[k] * step


def _proportional(total: int, guaranteed: list[int]) -> list[int]:
    """``total`` split in proportion to ``guaranteed`` (the parent has less than the mins)."""
    active = [i for i, g in enumerate(guaranteed) if g > 0]
    out = [0] * len(guaranteed)
    _split(total, active, out, guaranteed, guaranteed, sum([guaranteed[i] for i in active]))
    return out
