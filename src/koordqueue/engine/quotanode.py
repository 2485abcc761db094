"""The quota tree's nodes: a usable quota (or the root, the cluster) with the figures
kept for it -- limits, usage, demand, runtime quota, holds -- and the sibling groups its
runtime is split among. QuotaTree (tree.py) keeps those figures current.

The root stands for the cluster (its limit is the cluster capacity, or nothing when no
nodes are known); a quota's limit is its max times Koord-Queue's oversellrate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from koordqueue.engine.model import QuotaInfo, ResourceList

if TYPE_CHECKING:
    import numpy as np

ROOT = ""  # the name of the root node (the cluster)
MILLI_COUNTED = frozenset({"cpu"})  # what Koordinator counts in milli-units; all else in whole units


@dataclass(slots=True, eq=False)
class Hold:
    """Free capacity of a node kept, until its queue is scanned again, for a unit that
    waits for more of it: others it holds against may not take it meanwhile (fit.py
    says whom: units of lower priority, and of its own once it has waited long enough)."""

    holder: str  # unit key
    leaf: QuotaNode  # the holder's quota
    priority: int
    amounts: ResourceList
    # The wait (its Queue's koord-queue/hold-room-after) its holder has waited past: it holds
    # against borrowers of its own priority too. None: only against lower priorities.
    waited_past: float | None = None


@dataclass(slots=True, eq=False)
class Group:
    """The children of a node that limit one resource, in name order, with their mins
    and weights, their demands (kept current as they change) and the shares they got;
    where their depth keeps columns, their demands there too, from ``start``."""

    parent: QuotaNode
    resource: str
    kids: list[QuotaNode]
    mins: list[int]
    weights: list[int]
    demands: list[int]
    shares: list[int | None]
    inner: bool  # some kids have children
    column: np.ndarray | None = None
    start: int = 0  # its first kid's place in the column
    index: int = 0  # its place among the groups of the column


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
        "want",
        "demand",
        "runtime",
        "lent_reserve",
        "groups",
        "place",
        "holds",
        "holds_of",
        "held",
        "held_ranked",
        "waiters",
        "hold_waiters",
        "hold_waiter_priority",
        "partial",
        "oversell",
        "capped",
        "min_limit",
        "pinned",
        "ceiling",
        "floor_ceiling",
    )

    def __init__(self, info: QuotaInfo | None, parent: QuotaNode | None, oversell: float = 1.0) -> None:
        self.name = info.name if info is not None else ROOT
        self.info = info
        self.parent = parent
        self.oversell = oversell  # Koord-Queue's oversellrate: its limit is its max times this
        self.capped = False  # beside koord-scheduler: nothing is admitted past its runtime (fit.py)
        self.children: list[QuotaNode] = []
        self.depth: int = 0 if parent is None else parent.depth + 1
        # This node and its ancestors up to the root, nearest first.
        self.path: tuple[QuotaNode, ...] = (self,) if parent is None else (self, *parent.path)
        self.limit: ResourceList = oversold(info.max, oversell) if info is not None else {}
        self.min: ResourceList = dict(info.min) if info is not None else {}
        self.lends = info.allow_lent if info is not None else True
        # What non-preemptible units may use (its min times the oversellrate, as Koord-Queue):
        # they are never victims, so what they took past min would never come back.
        self.min_limit: ResourceList = oversold(info.min, oversell) if info is not None else {}
        # The least limit of each resource on its path, and the least min a non-preemptible
        # unit is held to there (fit.never_fits): worked out when first asked, and cleared
        # when a limit on the path changes (QuotaTree.update, set_capacity).
        self.ceiling: ResourceList | None = None
        self.floor_ceiling: ResourceList | None = None
        self.used: ResourceList = {}  # admitted requests of the whole subtree
        self.pinned: ResourceList = {}  # the part of ``used`` that non-preemptible units hold
        self.pending: ResourceList = {}  # requests of the pending units of the subtree
        # Per resource it limits: used + pending (a leaf), else what its children want
        # (their demand, or the usage and requests of a child that does not limit it).
        self.want: ResourceList = {}
        self.demand: ResourceList = {}  # per resource of ``limit``: want, capped at max
        self.runtime: ResourceList = {}  # per resource of ``limit``
        self.lent_reserve: ResourceList = {}  # unused min of children that do not lend
        self.groups: dict[str, Group] = {}  # by resource
        self.place: dict[str, int] = {}  # resource -> its index in its parent's group of it
        # Free capacity held here for waiting units, by the quota of the unit it is held for.
        self.holds: dict[QuotaNode, list[Hold]] = {}
        self.held: ResourceList = {}  # the sum of all those holds
        # The same sums by resource, then by whom they keep out of other quotas (fit.keeps_out):
        # (priority, waited past the bound). A check adds up a few sums, not every hold.
        self.held_ranked: dict[str, dict[tuple[int, bool], int]] = {}
        self.holds_of: dict[str, dict[Hold, None]] = {}  # the same holds by resource, oldest first
        # Queues to scan again when room appears here, with the least they asked of each
        # resource that did not fit: less room than that cannot let any of them in.
        self.waiters: dict[str, ResourceList] = {}
        # The same for units that found the room here held for others: for them, room is
        # what is not held for units of other quotas.
        self.hold_waiters: dict[str, ResourceList] = {}
        # ... with the highest priority of its units that found the room held: the holds
        # that keep it out depend on it (fit.keeps_out).
        self.hold_waiter_priority: dict[str, int] = {}
        # An ancestor (not the root) limits a resource that this node, or a node between
        # them, does not: that ancestor's demand then follows this node's usage and
        # requests as they are, not only its capped demand, so every change goes up.
        self.partial: bool = (
            parent is not None
            and not parent.is_root
            and (parent.partial or any(name not in self.limit for name in parent.limit))
        )

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def demand_for(self, resource: str, want: int) -> int:
        """``want`` capped at max; raised to min when the quota does not lend, since it
        keeps its min whatever it uses."""
        cap = self.limit[resource]
        demand = want if want < cap else cap
        if not self.lends:
            floor = self.min.get(resource, 0)
            if demand < floor:
                return floor
        return demand

    def own_reserve(self, resource: str) -> int:
        """The part of this node's min that it keeps from others (0 when it lends)."""
        if self.lends:
            return 0
        floor = self.min.get(resource, 0)
        used = self.used.get(resource, 0)
        return floor - used if used < floor else 0

    def add_hold(self, hold: Hold) -> None:
        self._count_hold(hold, 1)
        self.holds.setdefault(hold.leaf, []).append(hold)
        for name, amount in hold.amounts.items():
            if amount:
                self.holds_of.setdefault(name, {})[hold] = None

    def remove_hold(self, hold: Hold) -> None:
        self._count_hold(hold, -1)
        same = self.holds[hold.leaf]
        same.remove(hold)
        if not same:
            del self.holds[hold.leaf]
        for name, amount in hold.amounts.items():
            if amount:
                del self.holds_of[name][hold]

    def _count_hold(self, hold: Hold, sign: int) -> None:
        held = self.held
        rank = (hold.priority, hold.waited_past is not None)
        for name, amount in hold.amounts.items():
            held[name] = held.get(name, 0) + sign * amount
            ranked = self.held_ranked.setdefault(name, {})
            left = ranked.get(rank, 0) + sign * amount
            if left:
                ranked[rank] = left
            else:
                ranked.pop(rank, None)

    def __repr__(self) -> str:
        return f"QuotaNode({self.name or '<cluster>'})"


def oversold(amounts: ResourceList, rate: float) -> ResourceList:
    """``amounts`` times Koord-Queue's oversellrate, rounded down: a request fits while
    used + request <= max x rate, exactly (a float product would round 2^53 and more)."""
    if rate == 1.0:
        return dict(amounts)
    factor = Fraction(rate)
    return {name: math.floor(amount * factor) for name, amount in amounts.items()}
