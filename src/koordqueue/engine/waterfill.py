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

Many sibling groups at once (a refresh of a whole tree splits thousands) go through one
vectorised pass of the same rule in 64-bit integers (numpy), for every group whose
products stay below 2**62; the loop does the others.

Beside koord-scheduler, which refuses a pod past its quota's runtime as it computes it,
``koordinator_fill`` splits as Koordinator v1.8.0 does instead (its rounding, its mins
scaled down when the parent has less than they add up to, its units), so that the
runtime we admit within is the one koord-scheduler checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from math import gcd
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())

WHOLE = 1000  # milli-units in one unit
_EXACT = 1 << 62  # every product of a group in a batch stays below this


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


def koordinator_fill(
    total: int | None,
    mins: Sequence[int],
    demands: Sequence[int],
    weights: Sequence[int],
    step: int,
    scale_mins: bool = True,
) -> list[int]:
    """Each child's runtime as Koordinator's calculator splits ``total`` (None: unbounded,
    everyone gets its demand); the lists as for ``water_fill``.

    ``step`` is Koordinator's unit in milli-units: it counts cpu in milli-cores (1) and
    every other resource in whole units (1000), rounded up as a Quantity's Value() is.
    Its rule (runtime_quota_calculator.go, redistribution): a child asking for more than
    its min gets its min and a part of what is left, else what it asks for; what is left
    goes out by shared weight in rounds, each share rounded half up on its own (so that a
    round may hand out a unit more or less than it has), what a child cannot use going to
    the next round. With ``scale_mins`` (its EnableMinQuotaScale, on by default) mins that
    add up to more than ``total`` are first scaled down to it in proportion, rounded down.
    """
    if total is None:
        return list(demands)
    rest = -(-total // step)
    floor = [-(-m // step) for m in mins]
    asks = [-(-d // step) for d in demands]
    shares = [-(-w // step) for w in weights]
    if scale_mins:
        sum_mins = sum(floor)
        if rest < sum_mins:
            floor = [int(float(rest) * float(m) / float(sum_mins)) if rest > 0 else 0 for m in floor]
    runtime = [0] * len(asks)
    wanting: list[int] = []
    weight_sum = 0
    for i, ask in enumerate(asks):
        runtime[i] = floor[i] if ask > floor[i] else ask
        if ask > floor[i]:
            wanting.append(i)
            weight_sum += shares[i]
        rest -= runtime[i]
    while rest > 0 and wanting and weight_sum > 0:
        left, still, still_weight = 0, [], 0
        for i in wanting:
            runtime[i] += int(float(shares[i]) * float(rest) / float(weight_sum) + 0.5)
            if runtime[i] < asks[i]:
                still.append(i)
                still_weight += shares[i]
            else:
                left += runtime[i] - asks[i]
                runtime[i] = asks[i]
        rest, wanting, weight_sum = left, still, still_weight
    return [r * step for r in runtime]


class Level:
    """Many sibling groups end to end, as 64-bit columns for the vectorised pass: each
    child is an element, each group a segment. Mins and weights are fixed; the owner
    keeps ``demands`` current. Raises OverflowError for a figure past 64 bits."""

    __slots__ = ("starts", "segment", "mins", "weights", "weight_bound", "demands")

    def __init__(self, groups: Sequence[tuple[list[int], list[int], list[int]]]) -> None:
        """``groups``: (mins, weights, demands) of each, none of them empty."""
        sizes = np.array([len(mins) for mins, _, _ in groups], dtype=np.int64)
        count = int(sizes.sum())
        self.starts, self.segment = _segments(sizes)
        self.mins = np.fromiter(chain.from_iterable(g[0] for g in groups), np.int64, count)
        self.demands = np.fromiter(chain.from_iterable(g[2] for g in groups), np.int64, count)
        weights = np.fromiter(chain.from_iterable(g[1] for g in groups), np.int64, count)
        common = np.gcd.reduceat(weights, self.starts)
        weights //= np.where(common > 0, common, 1)[self.segment]  # the same split, smaller products
        self.weights = weights
        self.weight_bound = np.add.reduceat(weights.astype(np.float64), self.starts) + 1

    def refit(self, index: int, mins: list[int], weights: list[int]) -> None:
        """Group ``index``'s new mins and weights (a quota was edited)."""
        start = int(self.starts[index])
        self.mins[start:start + len(mins)] = mins
        common = gcd(*weights)
        units = [w // common for w in weights] if common else list(weights)
        self.weights[start:start + len(units)] = units
        self.weight_bound[index] = float(sum(units)) + 1


def _segments(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For groups of ``sizes`` children end to end: where each group starts, and the
    group of each child."""
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts, np.repeat(np.arange(len(sizes)), sizes)


def fill_level(level: Level, totals: Sequence[int | None], chosen: Sequence[int] | None = None
               ) -> tuple[list[int], list[bool]]:
    """``water_fill`` of the ``chosen`` groups of ``level`` (all by default), in that
    order, each under its total, to the unit. Returns the shares end to end, and for
    each group whether they are exact: not when its products could pass 64 bits or its
    total falls short of its mins (the loop does those)."""
    if chosen is None:
        starts, segment = level.starts, level.segment
        demand, mins, weight, weight_bound = level.demands, level.mins, level.weights, level.weight_bound
    else:
        picked = np.array(chosen, dtype=np.int64)
        sizes = np.diff(np.append(level.starts, len(level.demands)))[picked]
        starts, segment = _segments(sizes)
        # Each picked element's place in the level's columns.
        where = np.repeat(level.starts[picked] - starts, sizes) + np.arange(len(segment))
        demand, mins, weight = level.demands[where], level.mins[where], level.weights[where]
        weight_bound = level.weight_bound[picked]
    bounded = np.array([t is not None for t in totals], dtype=bool)
    # The bounds in floats first, so that they cannot overflow themselves.
    bound = np.add.reduceat(demand.astype(np.float64), starts) * weight_bound
    limits = np.array([0 if t is None else t for t in totals], dtype=np.float64)
    exact = (bound < _EXACT) & (limits < _EXACT)
    if not exact.all():  # such groups' figures are left out of the sums below
        demand = np.where(exact[segment], demand, 0)
    total = np.array([t if t is not None and t < _EXACT else 0 for t in totals], dtype=np.int64)
    contended = bounded & (np.add.reduceat(demand, starts) > total)
    floor = np.minimum(demand, mins)
    extra = demand - floor  # what each wants beyond its min
    rest = total - np.add.reduceat(floor, starts)
    wanting = (weight > 0) & (extra > 0) & contended[segment]
    weight = np.where(wanting, weight, 0)
    weight_sum = np.add.reduceat(weight, starts)
    full = np.zeros(len(demand), dtype=bool)
    while True:
        # Children whose want per unit of weight is within the level get all of it;
        # the level only rises as they drop out (see water_fill).
        sated = wanting & (extra * weight_sum[segment] <= rest[segment] * weight)
        if not sated.any():
            break
        rest -= np.add.reduceat(np.where(sated, extra, 0), starts)
        weight_sum -= np.add.reduceat(np.where(sated, weight, 0), starts)
        full |= sated
        wanting &= ~sated
        weight[sated] = 0
    # The rest by weight among those still wanting, in whole units where all is whole.
    whole = (rest % WHOLE == 0) & (np.gcd.reduceat(np.where(wanting, extra, 0), starts) % WHOLE == 0)
    step = np.where(whole, WHOLE, 1)
    sharing = (weight_sum > 0) & (rest > 0)
    units = np.where(sharing, rest // step, 0)
    divisor = np.where(sharing, weight_sum, 1)[segment]
    scaled = units[segment] * weight
    got = scaled // divisor
    leftover = units - np.add.reduceat(got, starts)
    if leftover.any():
        # Largest remainder first within each group; the sort is stable, so ties keep
        # the children's order.
        remainder = scaled - got * divisor
        candidates = np.flatnonzero(remainder)
        order = candidates[np.lexsort((-remainder[candidates], segment[candidates]))]
        first = np.searchsorted(segment[order], np.arange(len(starts)))
        rank = np.arange(len(order)) - first[segment[order]]
        got[order[rank < leftover[segment[order]]]] += 1
    shares = np.where(contended[segment], floor + np.where(full, extra, got * step[segment]), demand)
    return shares.tolist(), (exact & ~(contended & (rest < 0))).tolist()
