"""Does a request fit its quota now? If not, where and why not.

A request r fits leaf q when, for q and every ancestor, used + r <= max (only
resources named in max limit), the cluster total is not exceeded, the unused min of
quotas that do not lend stays out of reach (at their parent), and no capacity held for
a unit waiting ahead of it is taken. Borrowing beyond a quota's min or runtime is
allowed: idle capacity is used (work-conserving) -- but not beside koord-scheduler (a
``capped`` leaf), which refuses every pod past its quota's runtime (its ElasticQuota
plugin, EnableRuntimeQuota on by default): there used + r <= runtime at the leaf too.

A non-preemptible unit is never a victim, so it may not borrow at all: as Koord-Queue
(``UsedOverMinWithOverSell``), it fits only while the non-preemptible usage of its quota
and each ancestor, plus r, stays within min (times the oversellrate) for every resource
the quota limits. When a request does not fit for good (more than a max, the cluster or
a min it is held to), that is the misfit said, wherever a passing limit comes first: a
queue does not wait for a unit that can never fit (cycle.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from koordqueue.engine.model import ResourceList
from koordqueue.engine.quotanode import MILLI_COUNTED, Hold, QuotaNode
from koordqueue.engine.waterfill import WHOLE, koordinator_fill

Released = dict[QuotaNode, ResourceList]
"""Usage taken away in a what-if (victims considered for preemption), per node."""


@dataclass(slots=True)
class Misfit:
    """The first limit a request runs into, from the leaf up."""

    node: QuotaNode
    resource: str
    asked: int
    used: int
    limit: int
    reserve: int = 0  # unused min of non-lending siblings kept out of reach
    held: int = 0  # free capacity held for others
    hold: Hold | None = None
    runtime: bool = False  # the limit is the leaf's runtime quota (beside koord-scheduler)
    pinned: bool = False  # the limit is the min a non-preemptible unit is held to (``used``: theirs)

    @property
    def never(self) -> bool:
        """The request is more than the limit itself: it fits only if the limit changes
        (a runtime moves with demand: never said of it)."""
        return self.asked > self.limit and not self.runtime

    @property
    def by_hold(self) -> bool:
        return self.hold is not None


def borrowing(leaf: QuotaNode, request: ResourceList) -> bool:
    """Whether admitting ``request`` takes ``leaf`` beyond its runtime quota."""
    runtime = leaf.runtime
    used = leaf.used
    for name, amount in request.items():  # (a loop: asked at every head of a scan)
        share = runtime.get(name)
        if share is not None and used.get(name, 0) + amount > share:
            return True
    return False


def first_misfit(
    leaf: QuotaNode,
    request: ResourceList,
    priority: int,
    released: Released | None = None,
    preemptible: bool = True,
) -> Misfit | None:
    """The first limit ``request`` runs into on ``leaf``'s path, or None if it fits; one
    it can never fit, if any, before one it waits for. ``preemptible`` False: held to min
    too (victims, ``released``, are preemptible: they free none of that).

    Capacity held for a waiting unit keeps away, within its own quota, units of lower
    priority; from other quotas, only units that would borrow (a quota within its
    runtime share is never kept from it), and of those only whom ``keeps_out`` says.
    """
    misfit = None if preemptible else _past_min(leaf, request)
    if misfit is None:
        misfit = _first_limit(leaf, request, priority, released)
        if misfit is None:
            return None
    if misfit.never:
        return misfit
    return never_fits(leaf, request, preemptible) or misfit


def never_fits(leaf: QuotaNode, request: ResourceList, preemptible: bool = True) -> Misfit | None:
    """The first limit on ``leaf``'s path that ``request`` is more than by itself (a max,
    the cluster's capacity, or for a non-preemptible unit a min), whatever is used. Asked
    of every unit that does not fit: the least limits on the path (cached on the leaf) say
    at once that most fit some day, and only a unit past one walks the path for the first."""
    ceiling = leaf.ceiling
    if ceiling is None:
        ceiling = leaf.ceiling = _ceiling(leaf)
    if _past(request, ceiling):
        return _first_max_past(leaf, request)
    if preemptible:
        return None
    floors = leaf.floor_ceiling
    if floors is None:
        floors = leaf.floor_ceiling = _floor_ceiling(leaf)
    return _first_min_past(leaf, request) if _past(request, floors) else None


def _past(request: ResourceList, caps: ResourceList) -> bool:
    """Whether ``request`` asks more than ``caps`` of some resource ``caps`` names."""
    for name, asked in request.items():
        cap = caps.get(name)
        if cap is not None and asked > cap:
            return True
    return False


def _ceiling(leaf: QuotaNode) -> ResourceList:
    """Per resource, the least limit on ``leaf``'s path."""
    ceiling: ResourceList = {}
    for node in leaf.path:
        for name, cap in node.limit.items():
            if cap < ceiling.get(name, cap + 1):
                ceiling[name] = cap
    return ceiling


def _floor_ceiling(leaf: QuotaNode) -> ResourceList:
    """Per resource, the least min a non-preemptible unit is held to on ``leaf``'s path
    below the cluster (0 where a quota limits a resource but names no min of it)."""
    floors: ResourceList = {}
    for node in leaf.path[:-1]:
        floor = node.min_limit
        for name in (*node.limit, *floor):
            cap = floor.get(name, 0)
            if cap < floors.get(name, cap + 1):
                floors[name] = cap
    return floors


def _first_max_past(leaf: QuotaNode, request: ResourceList) -> Misfit:
    """``never_fits`` for a request past some limit on the path: the first, from the leaf up."""
    for node in leaf.path:
        limit = node.limit
        if limit:
            for name, asked in request.items():
                cap = limit.get(name)
                if cap is not None and asked > cap:
                    return Misfit(node, name, asked, node.used.get(name, 0), cap)
    raise AssertionError("no limit passed")  # pragma: no cover - the ceiling said one is


def _first_min_past(leaf: QuotaNode, request: ResourceList) -> Misfit:
    """``never_fits`` for a non-preemptible request past some min on the path: the first."""
    for node in leaf.path[:-1]:
        limit, floor = node.limit, node.min_limit
        for name, asked in request.items():
            if (name in limit or name in floor) and asked > floor.get(name, 0):
                return Misfit(node, name, asked, node.pinned.get(name, 0), floor.get(name, 0), pinned=True)
    raise AssertionError("no min passed")  # pragma: no cover - the ceiling said one is


def _past_min(leaf: QuotaNode, request: ResourceList) -> Misfit | None:
    """Where a non-preemptible ``request`` would take the non-preemptible usage of a quota
    on ``leaf``'s path (not the cluster) past its min, for a resource the quota limits."""
    for node in leaf.path[:-1]:
        limit, floor, pinned = node.limit, node.min_limit, node.pinned
        for name, asked in request.items():
            if not asked or (name not in limit and name not in floor):
                continue
            cap = floor.get(name, 0)
            used = pinned.get(name, 0)
            if used + asked > cap:
                return Misfit(node, name, asked, used, cap, pinned=True)
    return None


def _first_limit(
    leaf: QuotaNode,
    request: ResourceList,
    priority: int,
    released: Released | None = None,
) -> Misfit | None:
    """``first_misfit`` of the limits every unit has (not a min), in order from the leaf up."""
    if leaf.capped:
        misfit = _past_runtime(leaf, request, released)
        if misfit is not None:
            return misfit
    borrows: bool | None = None
    child: QuotaNode | None = None
    for node in leaf.path:
        limit = node.limit
        if limit:
            used_map = node.used
            freed = released.get(node) if released else None
            reserve_map = node.lent_reserve
            held_map = node.held
            for name, asked in request.items():
                cap = limit.get(name)
                if cap is None:
                    continue
                used = used_map.get(name, 0)
                if freed:
                    used -= freed.get(name, 0)
                reserve = 0
                if child is not None:
                    if reserve_map:
                        reserve = reserve_map.get(name, 0) - child.own_reserve(name)
                    if released:  # victims may take a non-lending sibling below its min: kept from here
                        reserve += _reserve_change(node, child, name, released)
                free = cap - used - reserve
                if asked > free:
                    return Misfit(node, name, asked, used, cap, reserve)
                held = held_map.get(name, 0) if held_map else 0
                if held and asked > free - held:
                    # Some holds may keep it out: add up those that do (keeps_out).
                    against = sum(h.amounts.get(name, 0) for h in node.holds.get(leaf, ()) if priority < h.priority)
                    if borrows is None:
                        borrows = borrowing(leaf, request)
                    if borrows:
                        against += held_against_borrower(node, leaf, name, priority)
                    if asked > free - against:
                        first = next(h for h in node.holds_of[name] if keeps_out(h, leaf, priority)
                                     and (h.leaf is leaf or borrows))
                        return Misfit(node, name, asked, used, cap, reserve, against, first)
        child = node
    if leaf.capped:
        return koordinator_view(leaf, request, released)
    return None


def koordinator_view(leaf: QuotaNode, request: ResourceList, released: Released | None = None) -> Misfit | None:
    """What koord-scheduler makes of the quotas once the unit's pods exist: each quota asks
    for what is admitted to it (the pods it counts), ``leaf`` for ``request`` more, and the
    runtime quota of each on the leaf's path and of their siblings is split by its rule,
    rounding included. A quota left below what it asks for would have pods refused ("Insufficient
    quotas"): the leaf (its new pods), or a sibling whose pods are not all bound yet."""
    freed_of = released or {}
    for name, asked in request.items():
        total = leaf.path[-1].runtime.get(name)
        for node in reversed(leaf.path[:-1]):  # from the top down
            parent = node.parent
            assert parent is not None
            group = parent.groups.get(name)
            if group is None or name not in node.limit:
                break
            asks = []
            for kid in group.kids:
                used = kid.used.get(name, 0) - freed_of.get(kid, {}).get(name, 0)
                asks.append(kid.demand_for(name, used + asked if kid is node else used))
            shares = koordinator_fill(total, group.mins, asks, group.weights, 1 if name in MILLI_COUNTED else WHOLE)
            for kid, ask, share in zip(group.kids, asks, shares, strict=True):
                if share < ask:
                    used = kid.used.get(name, 0) - freed_of.get(kid, {}).get(name, 0)
                    return Misfit(kid, name, asked, used, share, runtime=True)
            total = shares[group.kids.index(node)]
    return None


def _past_runtime(leaf: QuotaNode, request: ResourceList, released: Released | None) -> Misfit | None:
    """What koord-scheduler would refuse: a resource of which used + request passes the
    leaf's runtime (one the request passes max of is left to say it never fits)."""
    runtime, used_map, limit = leaf.runtime, leaf.used, leaf.limit
    freed = released.get(leaf) if released else None
    for name, asked in request.items():
        share = runtime.get(name)
        if share is None or asked > limit.get(name, asked):
            continue
        used = used_map.get(name, 0)
        if freed:
            used -= freed.get(name, 0)
        if used + asked > share:
            return Misfit(leaf, name, asked, used, share, runtime=True)
    return None


def keeps_out(hold: Hold, leaf: QuotaNode, priority: int) -> bool:
    """Whether ``hold`` keeps a unit of ``leaf`` and ``priority`` from the room it holds
    (a unit of another quota only while it borrows; the caller checks that): units of
    lower priority, and of the same priority from another quota once the holder has
    waited past its Queue's bound. Room is never kept from a unit of higher priority."""
    if hold.leaf is leaf:
        return priority < hold.priority
    return _keeps_borrowers_out(hold, priority)


def _keeps_borrowers_out(hold: Hold, priority: int) -> bool:
    """``keeps_out`` for a borrowing unit of another quota than the holder's."""
    return priority < hold.priority or (priority == hold.priority and hold.waited_past is not None)


def held_against_borrower(node: QuotaNode, leaf: QuotaNode, name: str, priority: int) -> int:
    """How much of ``name`` at ``node`` is held for units of other quotas than ``leaf``
    against a borrowing unit of ``leaf`` and ``priority``: from the sums by rank (a few),
    less ``leaf``'s own holds among them."""
    against = 0
    for (rank, waited), amount in node.held_ranked.get(name, {}).items():
        if rank > priority or (rank == priority and waited):
            against += amount
    for hold in node.holds.get(leaf, ()):
        if _keeps_borrowers_out(hold, priority):
            against -= hold.amounts.get(name, 0)
    return against


def headroom(node: QuotaNode, child: QuotaNode | None, name: str) -> int | None:
    """Free capacity of ``name`` at ``node`` for a unit coming up through ``child``,
    after every hold; None when ``node`` does not limit it."""
    cap = node.limit.get(name)
    if cap is None:
        return None
    reserve = 0
    if child is not None and node.lent_reserve:
        reserve = node.lent_reserve.get(name, 0) - child.own_reserve(name)
    return cap - node.used.get(name, 0) - reserve - node.held.get(name, 0)


def _reserve_change(node: QuotaNode, path_child: QuotaNode, name: str, released: Released) -> int:
    """How much more of ``node``'s room non-lending children keep once ``released`` goes."""
    change = 0
    for other, freed in released.items():
        if other.parent is not node or other is path_child or other.lends:
            continue
        amount = freed.get(name, 0)
        if not amount:
            continue
        floor = other.min.get(name, 0)
        used = other.used.get(name, 0)
        before = floor - used if used < floor else 0
        after_used = used - amount
        after = floor - after_used if after_used < floor else 0
        change += after - before
    return change
