"""Choosing victims: reclaim from borrowers, and priority preemption inside a quota.

After Kueue's reclaimWithinCohort: candidates are tried in order (units of other
quotas first, then lowest priority, then most recently admitted) and taken one by one,
a borrower's unit only while its quota is still above its runtime share, until the
request fits; then each victim but the last is given back if the request still fits
without it. The result is a small set (no victim can be spared), found in
O(candidates x depth).
"""

from __future__ import annotations

from dataclasses import dataclass

from koordqueue.engine.fit import Released, first_misfit
from koordqueue.engine.model import ResourceList
from koordqueue.engine.pending import Entry
from koordqueue.engine.tree import QuotaNode


@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    node: QuotaNode  # the quota it is charged to
    request: ResourceList
    priority: int
    admitted_at: float
    entry: Entry  # its place in its queue: of units admitted at once, the later went in last
    # Reclaim: the victim's quota and its ancestors below the node it shares with the
    # preemptor; each must stay above its runtime share. Empty for priority preemption.
    chain: tuple[QuotaNode, ...] = ()

    def order(self) -> tuple[bool, int, float]:
        return (not self.chain, self.priority, -self.admitted_at)


def binding(leaf: QuotaNode, request: ResourceList) -> tuple[QuotaNode | None, frozenset[str]]:
    """The highest node whose limit ``request`` exceeds now, and every resource exceeded."""
    top: QuotaNode | None = None
    names: set[str] = set()
    child: QuotaNode | None = None
    for node in leaf.path:
        for name, asked in request.items():
            cap = node.limit.get(name)
            if cap is None:
                continue
            reserve = 0
            if child is not None and node.lent_reserve:
                reserve = node.lent_reserve.get(name, 0) - child.own_reserve(name)
            if node.used.get(name, 0) + asked + reserve > cap:
                top = node
                names.add(name)
        child = node
    return top, frozenset(names)


def choose_victims(
    leaf: QuotaNode,
    request: ResourceList,
    priority: int,
    candidates: list[Candidate],
    resources: frozenset[str],
) -> list[Candidate] | None:
    """The victims that make room for ``request`` on ``leaf``, or None if none can."""
    released: Released = {}
    chosen: list[Candidate] = []
    # Most recently admitted first; among units admitted at the same time, the one
    # admitted last (later in its queue's order): a stable sort on the queue order, reversed.
    ordered = sorted(candidates, key=lambda c: c.entry, reverse=True)
    ordered.sort(key=Candidate.order)
    for candidate in ordered:
        if candidate.chain and not _still_borrowing(candidate, released, resources):
            continue
        _add(released, candidate, 1)
        chosen.append(candidate)
        if first_misfit(leaf, request, priority, released) is None:
            break
    else:
        return None
    for candidate in reversed(chosen[:-1]):
        _add(released, candidate, -1)
        if first_misfit(leaf, request, priority, released) is not None:
            _add(released, candidate, 1)
        else:
            chosen.remove(candidate)
    return chosen


def _still_borrowing(candidate: Candidate, released: Released, resources: frozenset[str]) -> bool:
    """Whether every node of the candidate's chain is still above its runtime share in a
    resource the preemptor lacks and the candidate uses."""
    names = [name for name in candidate.request if name in resources]
    for node in candidate.chain:
        freed = released.get(node, {})
        if not any(
            name in node.runtime and node.used.get(name, 0) - freed.get(name, 0) > node.runtime[name]
            for name in names
        ):
            return False
    return True


def _add(released: Released, candidate: Candidate, sign: int) -> None:
    for node in candidate.node.path:
        freed = released.setdefault(node, {})
        for name, amount in candidate.request.items():
            freed[name] = freed.get(name, 0) + sign * amount
