"""The quota tree: usage, demand and runtime quota of every usable quota (its nodes: quotanode.py).

The root stands for the cluster (its limit is the cluster capacity, or nothing when no
nodes are known); a quota's limit is its max times Koord-Queue's oversellrate. Usage is kept per node for the whole subtree, so that an admission
checks each ancestor in O(1). Demand is kept up to date as usage and requests change,
as Koordinator keeps each quota's request: a change walks up the path and stops where
a capped demand no longer moves (a rebuild loads everything first and sums it once).
An edit of a quota's amounts is taken in place. Runtime quota is split again only for
the sibling groups whose inputs moved (all of them after a rebuild), top-down, at
``refresh``; many groups of one depth at once by the vectorised water-fill. Beside
koord-scheduler (``koordinator``), runtime is split by Koordinator's own rule instead
(waterfill.koordinator_fill), one group at a time, and a quota admits nothing past it.
"""

from __future__ import annotations

from itertools import chain, compress
from operator import ne
from typing import TYPE_CHECKING

from koordqueue.engine.model import QuotaInfo, ResourceList
from koordqueue.engine.quotanode import MILLI_COUNTED, Group, QuotaNode, oversold
from koordqueue.engine.waterfill import WHOLE, Level, fill_level, koordinator_fill, water_fill

if TYPE_CHECKING:
    import numpy as np
else:
    from koordqueue.engine.lazynumpy import LazyNumpy

    np = LazyNumpy(globals())

# From this many sibling groups to split at one depth, one vectorised water-fill over
# columns the depth keeps is quicker than the loop over them.
LEVEL_GROUPS = 32


class QuotaTree:
    """Nodes of the usable quotas under a root; figures refreshed on demand."""

    def __init__(self, quotas: list[QuotaInfo], capacity: ResourceList | None, oversell: float = 1.0,
                 koordinator: bool = False) -> None:
        self.koordinator = koordinator  # runtime split by Koordinator's rule, and a cap on admission
        self.root = QuotaNode(None, None)
        self.nodes: dict[str, QuotaNode] = {}
        by_parent: dict[str | None, list[QuotaInfo]] = {}
        for quota in quotas:
            by_parent.setdefault(quota.parent, []).append(quota)
        level = [self.root]
        while level:
            following: list[QuotaNode] = []
            for parent in level:
                key = None if parent.is_root else parent.name
                for info in sorted(by_parent.get(key, []), key=lambda q: q.name):
                    node = QuotaNode(info, parent, oversell)
                    node.capped = koordinator
                    parent.children.append(node)
                    self.nodes[node.name] = node
                    following.append(node)
            level = following
        self._leaves: dict[QuotaNode, list[QuotaNode]] = {self.root: []}
        order = [self.root, *self.nodes.values()]  # parents before children
        self._order = order
        for node in reversed(order):  # nothing used or asked for yet
            if not node.is_root:
                _work_out(node)
        for node in order:
            _build_groups(node)
            if not node.children and not node.is_root:
                for upper in node.path:
                    self._leaves.setdefault(upper, []).append(node)
        by_depth: dict[int, list[Group]] = {}
        for node in order:
            by_depth.setdefault(node.depth, []).extend(node.groups.values())
        self._levels: dict[int, tuple[Level, list[Group]]] = {}
        for depth, groups in by_depth.items():
            if len(groups) >= LEVEL_GROUPS and not koordinator:
                try:
                    columns = Level([(g.mins, g.weights, g.demands) for g in groups])
                except OverflowError:  # a figure past 64 bits: the loop splits this depth
                    continue
                self._levels[depth] = (columns, groups)
                start = 0
                for index, group in enumerate(groups):
                    group.column, group.start, group.index = columns.demands, start, index
                    start += len(group.kids)
        # Every group is split at the first refresh (their shares are not known yet).
        self._refill: set[QuotaNode] = {node for node in order if node.groups}
        self._fresh = True
        self._deferred = False
        self.set_capacity(capacity)

    def leaves_under(self, node: QuotaNode) -> list[QuotaNode]:
        """The quotas without children in ``node``'s subtree (``node`` itself if a leaf)."""
        return self._leaves.get(node, [])

    def set_capacity(self, capacity: ResourceList | None) -> None:
        self.root.limit = dict(capacity) if capacity is not None else {}
        self.root.runtime = dict(self.root.limit)
        self._refill.add(self.root)
        _forget_ceilings(self.root)

    # --- usage --------------------------------------------------------------------
    def charge(self, node: QuotaNode, request: ResourceList, sign: int) -> bool:
        """Add (sign 1) or remove (-1) an admitted request on ``node`` and its ancestors.

        Returns whether a quota that does not lend came closer to its min, which gives
        the others under its parent more room.
        """
        if self._deferred:
            _add(node.used, request, sign)
            return False
        room = False
        for current in node.path:
            parent = current.parent
            watch = parent is not None and not current.lends
            used = current.used
            for name, amount in request.items():
                if watch:
                    before = current.own_reserve(name)
                    used[name] = used.get(name, 0) + sign * amount
                    delta = current.own_reserve(name) - before
                    if delta:
                        assert parent is not None
                        parent.lent_reserve[name] = parent.lent_reserve.get(name, 0) + delta
                        room = room or delta < 0
                else:
                    used[name] = used.get(name, 0) + sign * amount
        self._spread(node, request, sign)
        return room

    def pin(self, node: QuotaNode, request: ResourceList, sign: int) -> None:
        """Count (or stop counting) an admitted non-preemptible unit's request in
        ``pinned`` of ``node`` and its ancestors (beside ``charge``, which counts it in used)."""
        if self._deferred:
            _add(node.pinned, request, sign)
            return
        for current in node.path:
            _add(current.pinned, request, sign)

    def admit(self, node: QuotaNode, request: ResourceList) -> bool:
        """``add_pending(node, request, -1)`` then ``charge(node, request, 1)`` in one pass:
        a pending request admitted whole leaves every want (usage plus requests) where it
        was, so no demand moves and nothing is spread. Returns what ``charge`` returns."""
        if self._deferred:
            _add(node.pending, request, -1)
            _add(node.used, request, 1)
            return False
        room = False
        for current in node.path:
            parent = current.parent
            watch = parent is not None and not current.lends
            used, pending = current.used, current.pending
            for name, amount in request.items():
                pending[name] = pending.get(name, 0) - amount
                if watch:
                    before = current.own_reserve(name)
                    used[name] = used.get(name, 0) + amount
                    delta = current.own_reserve(name) - before
                    if delta:
                        assert parent is not None
                        parent.lent_reserve[name] = parent.lent_reserve.get(name, 0) + delta
                        room = room or delta < 0
                else:
                    used[name] = used.get(name, 0) + amount
        return room

    def add_pending(self, node: QuotaNode, request: ResourceList, sign: int) -> None:
        """Count (or stop counting) a pending unit's request in its quota's demand."""
        if self._deferred:
            _add(node.pending, request, sign)
            return
        for current in node.path:
            pending = current.pending
            for name, amount in request.items():
                pending[name] = pending.get(name, 0) + sign * amount
        self._spread(node, request, sign)

    def _spread(self, node: QuotaNode, request: ResourceList, sign: int) -> None:
        """Carry a change of ``node``'s usage or requests into the demands on its path,
        marking the parents whose children's demand moved for a refill."""
        raw = {name: sign * amount for name, amount in request.items() if amount}
        self._carry(node, raw, raw)

    def _carry(self, current: QuotaNode, incoming: ResourceList, raw: ResourceList) -> None:
        """Add ``incoming`` to ``current``'s want, and what that moves of its demand to its
        parent's, and so on up; ``raw`` is the change of usage and requests behind it,
        which goes up as it is past nodes that do not limit a resource."""
        while (incoming or current.partial) and current.parent is not None:
            limit, want, demand = current.limit, current.want, current.demand
            outgoing: ResourceList = {}
            moved = False
            parent = current.parent
            for name, delta in incoming.items():
                if name not in limit:
                    continue
                total = want.get(name, 0) + delta
                want[name] = total
                new = current.demand_for(name, total)
                old = demand.get(name, 0)
                if new != old:
                    demand[name] = new
                    self._set_demand(current, name, new)
                    outgoing[name] = new - old
                    moved = True
            for name, delta in raw.items():
                if name not in limit:  # its parent counts its usage and requests as they are
                    outgoing[name] = delta
            if moved:
                self._refill.add(parent)
            incoming = outgoing
            current = parent

    def _set_demand(self, node: QuotaNode, resource: str, demand: int) -> None:
        """Tell ``node``'s group in its parent its new demand of ``resource``."""
        assert node.parent is not None
        group = node.parent.groups[resource]
        index = node.place[resource]
        group.demands[index] = demand
        if group.column is not None:
            try:
                group.column[group.start + index] = demand
            except OverflowError:  # past 64 bits: the loop splits this depth from now on
                self._drop_level(node.depth - 1)

    def update(self, info: QuotaInfo) -> None:
        """Take a quota's new min, max, shared weight or lending in place: its parent and
        the resources it names are the same (else the tree is built again)."""
        node = self.nodes[info.name]
        parent = node.parent
        assert parent is not None
        kept = {name: node.own_reserve(name) for name in node.min}
        node.info, node.limit, node.min, node.lends = info, oversold(info.max, node.oversell), dict(info.min), \
            info.allow_lent
        node.min_limit = oversold(info.min, node.oversell)
        _forget_ceilings(node)
        for name, reserve in kept.items():
            delta = node.own_reserve(name) - reserve
            if delta:
                parent.lent_reserve[name] = parent.lent_reserve.get(name, 0) + delta
        shared = info.shared_weight if info.shared_weight is not None else info.max
        for resource, index in node.place.items():
            group = parent.groups[resource]
            group.mins[index] = node.min.get(resource, 0)
            group.weights[index] = shared.get(resource, 0)
            if group.column is not None:
                try:
                    self._levels[parent.depth][0].refit(group.index, group.mins, group.weights)
                except OverflowError:  # past 64 bits: the loop splits this depth from now on
                    self._drop_level(parent.depth)
        before = node.demand
        node.demand = {name: node.demand_for(name, total) for name, total in node.want.items()}
        if not node.lends:
            for name, floor in node.min.items():
                node.demand.setdefault(name, floor)
        moved: ResourceList = {}
        for name in node.limit:
            new = node.demand.get(name, 0)
            if new != before.get(name, 0):
                self._set_demand(node, name, new)
                moved[name] = new - before.get(name, 0)
        self._refill.add(parent)  # its min, weight or cap moved, if not its demand
        self._carry(parent, moved, {})

    def defer(self) -> None:
        """Until ``settle``, count usage and requests only on the node they are given
        for: a rebuild loads every unit, then sums them up and works out demand once
        (a walk up the path for each of 100k units took most of a rebuild)."""
        self._deferred = True

    def settle(self) -> None:
        """Sum what was loaded since ``defer`` up the tree, and work out every node's
        lent reserve and demand from it."""
        self._deferred = False
        order = self._order
        for node in reversed(order):  # children before parents
            parent = node.parent
            if parent is not None:
                _add(parent.used, node.used, 1)
                _add(parent.pending, node.pending, 1)
                _add(parent.pinned, node.pinned, 1)
        for node in order:
            node.lent_reserve = {}
        for node in reversed(order):
            if not node.is_root:
                _work_out(node)
        for node in order:
            for resource, group in node.groups.items():
                group.demands[:] = [kid.demand[resource] for kid in group.kids]
        for depth, (columns, groups) in list(self._levels.items()):
            try:
                columns.demands[:] = np.fromiter(chain.from_iterable(g.demands for g in groups), np.int64,
                                                 len(columns.demands))
            except OverflowError:  # past 64 bits: the loop splits this depth from now on
                self._drop_level(depth)
        self._refill.update(node for node in order if node.groups)

    def _drop_level(self, depth: int) -> None:
        for group in self._levels.pop(depth)[1]:
            group.column = None

    # --- demand and runtime ---------------------------------------------------------
    def refresh(self) -> set[QuotaNode]:
        """Split runtime quota again where demand or a share moved, level by level from
        the top; return the nodes whose runtime changed (every node the first time)."""
        by_depth: dict[int, set[QuotaNode]] = {}
        for node in self._refill:
            by_depth.setdefault(node.depth, set()).add(node)
        self._refill = set()
        moved: list[QuotaNode] = []
        depth = 0
        while by_depth:
            parents = by_depth.pop(depth, set())
            depth += 1
            below = by_depth.setdefault(depth, set())
            groups = [group for parent in parents for group in parent.groups.values()]
            level = self._levels.get(depth - 1)
            if level is not None and len(groups) >= LEVEL_GROUPS:
                columns, every = level
                _fill_level(columns, every if len(groups) == len(every) else groups, moved, below)
            else:
                _fill(groups, moved, below, self.koordinator)
            if not below:
                del by_depth[depth]
        if self._fresh:
            self._fresh = False
            return set(self.nodes.values())
        return set(moved)


def _forget_ceilings(node: QuotaNode) -> None:
    """Clear the cached ceilings of ``node`` and every node below it (a limit on their
    path changed)."""
    stack = [node]
    while stack:
        current = stack.pop()
        current.ceiling = current.floor_ceiling = None
        stack.extend(current.children)


def _build_groups(node: QuotaNode) -> None:
    resources = sorted({name for child in node.children for name in child.limit})
    for resource in resources:
        kids = [child for child in node.children if resource in child.limit]
        weights = []
        for index, child in enumerate(kids):
            assert child.info is not None
            shared = child.info.shared_weight if child.info.shared_weight is not None else child.info.max
            weights.append(shared.get(resource, 0))
            child.place[resource] = index
        node.groups[resource] = Group(node, resource, kids, [k.min.get(resource, 0) for k in kids], weights,
                                      [k.demand[resource] for k in kids], [None] * len(kids),
                                      any(k.children for k in kids))


def _work_out(node: QuotaNode) -> None:
    """A node's want and demand from its own usage and requests (a leaf) or its
    children's (whose are worked out), and its part of its parent's lent reserve."""
    want: ResourceList = {}
    if node.children:
        for name in node.limit:
            total = 0
            for child in node.children:
                if name in child.limit:
                    total += child.demand.get(name, 0)
                else:  # a child that does not limit it passes on its usage and requests as they are
                    total += child.used.get(name, 0) + child.pending.get(name, 0)
            want[name] = total
    else:
        want = {name: node.used.get(name, 0) + node.pending.get(name, 0) for name in node.limit}
    node.want = want
    node.demand = {name: node.demand_for(name, total) for name, total in want.items()}
    if not node.lends:  # a min of a resource it does not limit: kept all the same
        for name, floor in node.min.items():
            node.demand.setdefault(name, floor)
    parent = node.parent
    assert parent is not None
    for name in node.min:
        reserve = node.own_reserve(name)
        if reserve:
            parent.lent_reserve[name] = parent.lent_reserve.get(name, 0) + reserve


def _add(totals: ResourceList, amounts: ResourceList, sign: int) -> None:
    for name, amount in amounts.items():
        totals[name] = totals.get(name, 0) + sign * amount


def _fill(groups: list[Group], moved: list[QuotaNode], below: set[QuotaNode], koordinator: bool = False) -> None:
    """Split each group's parent's runtime among its children, one by one (by Koordinator's
    rule beside koord-scheduler)."""
    for group in groups:
        total = group.parent.runtime.get(group.resource)
        if koordinator:
            step = 1 if group.resource in MILLI_COUNTED else WHOLE
            shares = koordinator_fill(total, group.mins, group.demands, group.weights, step)
        else:
            shares = water_fill(total, group.mins, group.demands, group.weights)
        _share(group, shares, moved, below)


def _fill_level(columns: Level, groups: list[Group], moved: list[QuotaNode], below: set[QuotaNode]) -> None:
    """Split many groups of one depth at once, from its columns (those whose figures do
    not fit 64 bits one by one); ``groups`` are all of them, in order, or some."""
    totals = [group.parent.runtime.get(group.resource) for group in groups]
    whole = len(groups) == len(columns.starts)
    flat, exact = fill_level(columns, totals, None if whole else [group.index for group in groups])
    start = 0
    for group, done in zip(groups, exact, strict=True):
        end = start + len(group.kids)
        if done:
            shares = flat[start:end]
        else:
            shares = water_fill(group.parent.runtime.get(group.resource), group.mins, group.demands, group.weights)
        start = end
        _share(group, shares, moved, below)


def _share(group: Group, shares: list[int], moved: list[QuotaNode], below: set[QuotaNode]) -> None:
    """Give the group's children their new shares; add those whose share moved to
    ``moved``, and those of them with children of their own to ``below``."""
    before = group.shares
    if shares == before:
        return
    group.shares = shares  # type: ignore[assignment]  # ints are ints or None
    resource = group.resource
    start = len(moved)
    if before[0] is None:  # the first split: every share is new
        for kid, share in zip(group.kids, shares, strict=True):
            kid.runtime[resource] = share
        moved.extend(group.kids)
    else:
        for kid, share in compress(zip(group.kids, shares, strict=True), map(ne, shares, before)):
            kid.runtime[resource] = share
            moved.append(kid)
    if group.inner:
        below.update(kid for kid in moved[start:] if kid.children)
