"""The quota tree: usage, demand and runtime quota of every usable quota.

The root stands for the cluster (its limit is the cluster capacity, or nothing when no
nodes are known). Usage is kept per node for the whole subtree, so that an admission
checks each ancestor in O(1). Demand and runtime quota are cached and recomputed only
where something changed: a change of a leaf's usage or pending requests walks up to
the root, and only the sibling groups whose inputs moved are filled again, top-down.
"""

from __future__ import annotations

from dataclasses import dataclass

from koordqueue.engine.model import QuotaInfo, ResourceList
from koordqueue.engine.waterfill import water_fill

ROOT = ""  # the name of the root node (the cluster)


@dataclass(slots=True, eq=False)
class Hold:
    """Free capacity of a node kept, until its queue is scanned again, for a unit that
    waits for more of it: others it holds against may not take it meanwhile."""

    holder: str  # unit key
    leaf: QuotaNode  # the holder's quota
    priority: int
    amounts: ResourceList


class QuotaNode:
    """One usable quota (or the root), with its cached figures."""

    __slots__ = (
        "name",
        "info",
        "parent",
        "children",
        "depth",
        "path",
        "limit",
        "min",
        "lends",
        "used",
        "pending",
        "demand",
        "runtime",
        "lent_reserve",
        "groups",
        "holds",
        "held",
        "waiters",
        "hold_waiters",
        "partial",
    )

    def __init__(self, info: QuotaInfo | None, parent: QuotaNode | None) -> None:
        self.name = info.name if info is not None else ROOT
        self.info = info
        self.parent = parent
        self.children: list[QuotaNode] = []
        self.depth: int = 0 if parent is None else parent.depth + 1
        # This node and its ancestors up to the root, nearest first.
        self.path: tuple[QuotaNode, ...] = (self,) if parent is None else (self, *parent.path)
        self.limit: ResourceList = dict(info.max) if info is not None else {}
        self.min: ResourceList = dict(info.min) if info is not None else {}
        self.lends = info.allow_lent if info is not None else True
        self.used: ResourceList = {}  # admitted requests of the whole subtree
        self.pending: ResourceList = {}  # requests of the pending units of the subtree
        self.demand: ResourceList = {}  # per resource of ``limit``
        self.runtime: ResourceList = {}  # per resource of ``limit``
        self.lent_reserve: ResourceList = {}  # unused min of children that do not lend
        # resource -> (children that limit it, in name order; their mins; their weights).
        self.groups: dict[str, tuple[list[QuotaNode], list[int], list[int]]] = {}
        # Free capacity held here for waiting units, by the quota of the unit it is held for.
        self.holds: dict[QuotaNode, list[Hold]] = {}
        self.held: ResourceList = {}  # the sum of all those holds
        # Queues to scan again when room appears here, with the least they asked of each
        # resource that did not fit: less room than that cannot let any of them in.
        self.waiters: dict[str, ResourceList] = {}
        # The same for units that found the room here held for others: for them, room is
        # what is not held for units of other quotas.
        self.hold_waiters: dict[str, ResourceList] = {}
        # An ancestor (not the root) limits a resource that this node, or a node between
        # them, does not: that ancestor's demand then follows this node's usage and
        # requests, not only its (capped) demand, so every change must go up.
        self.partial: bool = (
            parent is not None
            and not parent.is_root
            and (parent.partial or any(name not in self.limit for name in parent.limit))
        )

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def own_reserve(self, resource: str) -> int:
        """The part of this node's min that it keeps from others (0 when it lends)."""
        if self.lends:
            return 0
        floor = self.min.get(resource, 0)
        used = self.used.get(resource, 0)
        return floor - used if used < floor else 0

    def add_hold(self, hold: Hold) -> None:
        self.holds.setdefault(hold.leaf, []).append(hold)
        held = self.held
        for name, amount in hold.amounts.items():
            held[name] = held.get(name, 0) + amount

    def remove_hold(self, hold: Hold) -> None:
        same = self.holds[hold.leaf]
        same.remove(hold)
        if not same:
            del self.holds[hold.leaf]
        held = self.held
        for name, amount in hold.amounts.items():
            held[name] -= amount

    def __repr__(self) -> str:
        return f"QuotaNode({self.name or '<cluster>'})"


class QuotaTree:
    """Nodes of the usable quotas under a root; figures refreshed on demand."""

    def __init__(self, quotas: list[QuotaInfo], capacity: ResourceList | None) -> None:
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
                    node = QuotaNode(info, parent)
                    parent.children.append(node)
                    self.nodes[node.name] = node
                    following.append(node)
                    for name in node.min:  # nothing used yet: all of its min is kept
                        reserve = node.own_reserve(name)
                        if reserve:
                            parent.lent_reserve[name] = parent.lent_reserve.get(name, 0) + reserve
            level = following
        self._leaves: dict[QuotaNode, list[QuotaNode]] = {self.root: []}
        for node in (self.root, *self.nodes.values()):
            _build_groups(node)
            if not node.children and not node.is_root:
                for upper in node.path:
                    self._leaves.setdefault(upper, []).append(node)
        self._order = [self.root, *self.nodes.values()]  # parents before children
        self._dirty: set[QuotaNode] = set()
        self._refill: set[QuotaNode] = set()
        self._full = True
        self.set_capacity(capacity)

    def leaves_under(self, node: QuotaNode) -> list[QuotaNode]:
        """The quotas without children in ``node``'s subtree (``node`` itself if a leaf)."""
        return self._leaves.get(node, [])

    def set_capacity(self, capacity: ResourceList | None) -> None:
        self.root.limit = dict(capacity) if capacity is not None else {}
        self.root.runtime = dict(self.root.limit)
        self._refill.add(self.root)

    # --- usage --------------------------------------------------------------------
    def charge(self, node: QuotaNode, request: ResourceList, sign: int) -> bool:
        """Add (sign 1) or remove (-1) an admitted request on ``node`` and its ancestors.

        Returns whether a quota that does not lend came closer to its min, which gives
        the others under its parent more room.
        """
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
        if not node.is_root:
            self._dirty.add(node)
        return room

    def add_pending(self, node: QuotaNode, request: ResourceList, sign: int) -> None:
        """Count (or stop counting) a pending unit's request in its quota's demand."""
        for current in node.path:
            pending = current.pending
            for name, amount in request.items():
                pending[name] = pending.get(name, 0) + sign * amount
        if not node.is_root:
            self._dirty.add(node)

    # --- demand and runtime ---------------------------------------------------------
    def refresh(self) -> set[QuotaNode]:
        """Bring demand and runtime up to date; return the nodes whose runtime changed."""
        if self._full:
            return self._refresh_all()
        if not self._dirty and not self._refill:
            return set()
        by_depth: dict[int, set[QuotaNode]] = {}
        for node in self._dirty:
            by_depth.setdefault(node.depth, set()).add(node)
        self._dirty = set()
        refill = self._refill
        self._refill = set()
        for depth in range(max(by_depth, default=0), 0, -1):
            for node in by_depth.get(depth, ()):
                demand = _demand_of(node)
                if demand != node.demand or node.partial:
                    node.demand = demand
                    parent = node.parent
                    assert parent is not None
                    refill.add(parent)
                    if not parent.is_root:
                        by_depth.setdefault(depth - 1, set()).add(parent)
        changed: set[QuotaNode] = set()
        fill_by_depth: dict[int, set[QuotaNode]] = {}
        for node in refill:
            fill_by_depth.setdefault(node.depth, set()).add(node)
        depth = 0
        while fill_by_depth:
            parents = fill_by_depth.pop(depth, set())
            depth += 1
            for parent in parents:
                for child in _fill(parent):
                    changed.add(child)
                    if child.children:
                        fill_by_depth.setdefault(child.depth, set()).add(child)
        return changed

    def _refresh_all(self) -> set[QuotaNode]:
        """Every demand bottom-up, then every sibling group top-down (after a rebuild)."""
        self._full = False
        self._dirty = set()
        self._refill = set()
        order = self._order
        for node in reversed(order):
            if not node.is_root:
                node.demand = _demand_of(node)
        changed: set[QuotaNode] = set()
        for node in order:
            if node.children:
                changed.update(_fill(node))
        return changed


def _build_groups(node: QuotaNode) -> None:
    resources = sorted({name for child in node.children for name in child.limit})
    for resource in resources:
        kids = [child for child in node.children if resource in child.limit]
        weights = []
        for child in kids:
            assert child.info is not None
            shared = child.info.shared_weight if child.info.shared_weight is not None else child.info.max
            weights.append(shared.get(resource, 0))
        node.groups[resource] = (kids, [k.min.get(resource, 0) for k in kids], weights)


def _demand_of(node: QuotaNode) -> ResourceList:
    """Per resource the quota limits: used plus pending (a parent: its children's
    demands), capped at max; raised to min when the quota does not lend, since it keeps
    its min whatever it uses."""
    demand: ResourceList = {}
    if node.children:
        for name, cap in node.limit.items():
            total = 0
            for child in node.children:
                if name in child.limit:
                    total += child.demand.get(name, 0)
                else:  # a child that does not limit it wants all it uses and asks for
                    total += child.used.get(name, 0) + child.pending.get(name, 0)
            demand[name] = total if total < cap else cap
    else:
        used = node.used
        pending = node.pending
        for name, cap in node.limit.items():
            total = used.get(name, 0) + pending.get(name, 0)
            demand[name] = total if total < cap else cap
    if not node.lends:
        for name, floor in node.min.items():
            if demand.get(name, 0) < floor:
                demand[name] = floor
    return demand


def _fill(parent: QuotaNode) -> list[QuotaNode]:
    """Split the parent's runtime among its children; return those whose share moved."""
    changed: list[QuotaNode] = []
    parent_runtime = parent.runtime
    for resource, (kids, mins, weights) in parent.groups.items():
        total = parent_runtime.get(resource)
        demands = [kid.demand.get(resource, 0) for kid in kids]
        for kid, share in zip(kids, water_fill(total, mins, demands, weights), strict=True):
            if kid.runtime.get(resource) != share:
                kid.runtime[resource] = share
                if not changed or changed[-1] is not kid:
                    changed.append(kid)
    return changed
