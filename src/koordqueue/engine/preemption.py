"""Choosing victims: reclaim from borrowers, and priority preemption inside a quota.

After Kueue's reclaimWithinCohort: candidates are tried in order (units of other
quotas first, then lowest priority, then most recently admitted) and taken one by one,
a borrower's unit only while its quota is still above its runtime share, until the
request fits; then each victim but the last is given back if the request still fits
without it. The result is a small set (no victim can be spared), found in
O(candidates x depth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from koordqueue.engine import messages
from koordqueue.engine.fit import Misfit, Released, borrowing, first_misfit
from koordqueue.engine.ledger import Ledger, QueueState, UnitRecord
from koordqueue.engine.model import CycleResult, Placement, Preemption, ResourceList
from koordqueue.engine.pending import Entry
from koordqueue.engine.placement import Unplaced
from koordqueue.engine.quotanode import QuotaNode


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


class Preemptor:
    """Preemption within one cycle (cycle.py): it finds victims for a unit that does not
    fit, sends them back through the ledger and records them in the cycle's result. The
    reclaim candidates it found are kept until some usage changes (the ledger's charges)."""

    def __init__(self, ledger: Ledger, now: float, result: CycleResult, admitted_now: set[str]) -> None:
        self.ledger = ledger
        self.now = now
        self.result = result
        self.units = ledger.units
        self.room = ledger.room
        self.config = ledger.config
        self.admitted_now = admitted_now  # units admitted in this cycle: never its victims
        # (leaf, top, resources) -> what may be reclaimed, while the ledger's charges stay ``reclaim_charges``.
        self.reclaim_cache: dict[tuple[QuotaNode, QuotaNode, frozenset[str]], tuple[list[Candidate], float]] = {}
        self.reclaim_charges = -1

    def preempt_for(
        self, record: UnitRecord, state: QueueState, misfit: Misfit
    ) -> tuple[bool, Placement | None, bool]:
        """Make room for ``record`` by reclaim or priority preemption: whether it did,
        where its pods go (when they are placed), in the room its victims give back, and
        whether its request and priority alone kept it from doing so (not its pods)."""
        if misfit.hold is not None or misfit.pinned or misfit.never:  # victims free no min of its own
            return False, None, True
        ledger = self.ledger
        leaf = state.leaf
        info = record.info
        now = self.now
        reclaim = self.config.reclaim and not borrowing(leaf, info.request)
        if not reclaim and not state.info.preemption:
            return False, None, True
        top, names = binding(leaf, info.request)
        if top is None:
            return False, None, True
        reclaim = reclaim and top is not leaf and all(name in leaf.runtime for name in names)
        if not reclaim and not state.info.preemption:
            return False, None, True
        state.reclaims = state.reclaims or reclaim
        candidates: list[Candidate] = []
        free_at = math.inf  # when a protected candidate stops being protected
        if reclaim:
            found, free_at = self.reclaim_candidates(leaf, top, names)
            candidates += found
        if state.info.preemption:
            for admitted_at, key in ledger.victims.get(leaf, ()):
                victim = self.units[key]
                if victim.info.priority >= info.priority or key in self.admitted_now:
                    continue
                spared = self.spared_until(key, admitted_at)
                if spared > now:
                    free_at = min(free_at, spared)
                    continue
                candidates.append(
                    Candidate(key, leaf, victim.charged, victim.info.priority, admitted_at, victim.entry)
                )
        chosen = choose_victims(leaf, info.request, info.priority, candidates, names) if candidates else None
        if chosen is None:
            if free_at < math.inf:
                record.protected = True
                ledger.retry_later(state, free_at)
            return False, None, True
        placement = None
        if ledger.places(state, info):
            # Preemption makes room in quotas, not on nodes: only when the victims' room on
            # the nodes is enough for its pods too.
            placed = self.room.place(info.pod_sets, released=[c.key for c in chosen])
            if isinstance(placed, Unplaced):
                return False, None, False
            placement = placed
        reasons = [_reason(c, record, leaf, names) for c in chosen]
        for candidate, reason in zip(chosen, reasons, strict=True):
            requeue_at = ledger.send_back(self.units[candidate.key], now, reason)
            self.result.preempted.append(
                Preemption(candidate.key, candidate.node.name, record.key, reason, requeue_at)
            )
        return True, placement, False

    def reclaim_candidates(
        self, leaf: QuotaNode, top: QuotaNode, names: frozenset[str]
    ) -> tuple[list[Candidate], float]:
        """Units under ``top`` of quotas above their runtime share in ``names`` that may be
        taken back for a unit of ``leaf``, and when the first protected one (``spared_until``)
        stops being protected. Kept for the rest of the cycle until some usage changes: the heads of
        a queue that do not fit ask the same question again and again."""
        ledger = self.ledger
        if self.reclaim_charges != ledger.charges:
            self.reclaim_cache = {}
            self.reclaim_charges = ledger.charges
        key = (leaf, top, names)
        known = self.reclaim_cache.get(key)
        if known is not None:
            return known
        now = self.now
        protect = self.config.protect_seconds
        candidates: list[Candidate] = []
        free_at = math.inf
        on_path = set(leaf.path)
        for other in ledger.borrowers:
            victims = ledger.victims.get(other)
            if not victims or other is leaf or other.children or top not in other.path:
                continue
            if victims[0][0] + protect > now:
                free_at = min(free_at, victims[0][0] + protect)
                continue
            if not any(other.used.get(n, 0) > other.runtime.get(n, math.inf) for n in names):
                continue
            chain = tuple(n for n in other.path if n not in on_path)
            for admitted_at, unit_key in victims:
                if admitted_at + protect > now:
                    free_at = min(free_at, admitted_at + protect)
                    break
                if unit_key in self.admitted_now:
                    continue
                spared = self.spared_until(unit_key, admitted_at)
                if spared > now:
                    free_at = min(free_at, spared)
                    continue
                victim = self.units[unit_key]
                candidates.append(
                    Candidate(unit_key, other, victim.charged, victim.info.priority, admitted_at,
                              victim.entry, chain)
                )
        self.reclaim_cache[key] = (candidates, free_at)
        return candidates, free_at

    def spared_until(self, key: str, admitted_at: float) -> float:
        """Until when an admitted unit is no victim: its protect time, or, its pods all
        succeeded, the grace its controller has to say it ended (``starting.Done``)."""
        spared = admitted_at + self.config.protect_seconds
        done = self.ledger.done.spared_until(key, self.config.done_grace_seconds)
        return spared if done is None else max(spared, done)


def _reason(candidate: Candidate, preemptor: UnitRecord, leaf: QuotaNode, names: frozenset[str]) -> str:
    if not candidate.chain:
        return messages.outranked(preemptor.key, preemptor.info.priority, leaf.name)
    node = candidate.node
    name = next(
        (
            n
            for n in sorted(names)
            if n in candidate.request and node.used.get(n, 0) > node.runtime.get(n, 0)
        ),
        sorted(names)[0],
    )
    return messages.reclaimed(node, name, preemptor.key, leaf.name)
