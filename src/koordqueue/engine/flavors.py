"""GPU models as flavors: a leaf quota with a node selector is a *flavor* of its parent.

A unit charged to a parent with flavors is admitted into the first flavor, in the
parent's order (``koord-queue/flavor-order``, else by name), where it fits the quota
chain and its pods, pinned to the flavor's nodes, fit the nodes; as Kueue's
FlavorFungibility: by default it borrows in a flavor rather than move on
(``whenCanBorrow=Borrow``) and tries the next flavor rather than preempt in this one
(``whenCanPreempt=TryNextFlavor``: preemption only once no flavor fits). A unit whose
pods already select a model (nodeSelector, or required node affinity, on a selector's
key) is admitted only into the flavors that agree. A unit charged to a flavor itself is
a parent of one flavor. The admission names the flavor (koord-scheduler's quota label)
and pins the pods with a ``FLAVOR_LEVEL`` domain of its placement, written in the same
write that resumes the job, as topology domains are.

While it waits, a unit is counted as a pending request of its first agreeing flavor (a
leaf: the tree keeps demand at leaves), and its message says what each flavor refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from koordqueue.api.constants import FLAVOR_LEVEL
from koordqueue.engine import messages
from koordqueue.engine.fit import Misfit, borrowing, first_misfit
from koordqueue.engine.flavorsets import (
    DISAGREES,
    Flavor,
    Flavoring,
    Selector,
    agrees,
    build,
    home,
    pinned,
    selects,
    wait_text,
)
from koordqueue.engine.ledger import BLOCKED_WINDOW, Ledger, NodeWait, QueueState, UnitRecord
from koordqueue.engine.model import FlavorTry, Placement, PodSetInfo, Preemption, UnitInfo
from koordqueue.engine.pending import Entry, Head, Heads, Shape
from koordqueue.engine.placement import Unplaced, placement_key
from koordqueue.engine.preemption import Preemptor
from koordqueue.engine.quotanode import QuotaNode

# How a head of a flavored queue's scan ended: the names of cycle.Outcome's members.
ADMITTED, BORROWS_LATER, BLOCKS, WAITS = "ADMITTED", "BORROWS_LATER", "BLOCKS", "WAITS"


class ScanLike(Protocol):
    """What of a queue's scan (cycle.Scan) a flavored head reads and moves."""

    heads: Heads
    borrows: bool
    admitted: bool


class CycleLike(Protocol):
    """What of the cycle (cycle.Cycle) a flavored head uses (flavors.py sits below it)."""

    ledger: Ledger
    preemptor: Preemptor

    def admit(self, record: UnitRecord, state: QueueState, placement: Placement | None = None) -> None: ...

    def in_part(self, record: UnitRecord,
                state: QueueState) -> tuple[Placement | None, Misfit | Unplaced | None]: ...


def beyond_min(node: QuotaNode, request: Mapping[str, int]) -> bool:
    """Whether ``request`` takes a flavor past its min (Kueue's nominal quota): what
    ``whenCanBorrow`` is about; a runtime share above min is borrowed all the same."""
    used, floor = node.used, node.min
    return any(name in node.limit and used.get(name, 0) + amount > floor.get(name, 0)
               for name, amount in request.items() if amount)


def with_pins(placement: Placement | None, pod_sets: Sequence[PodSetInfo], selector: Selector) -> Placement:
    """``placement`` with a ``FLAVOR_LEVEL`` domain per pod set: its pods pinned to the flavor."""
    base = placement or Placement()
    return replace(base, domains=(*base.domains, *((ps.name, FLAVOR_LEVEL, selector) for ps in pod_sets)))


@dataclass(slots=True)
class _Found:
    flavor: Flavor
    placement: Placement | None
    borrows: bool


def process(cycle: CycleLike, state: QueueState, scan: ScanLike, head: Head) -> str:
    """One head of a flavored queue's scan (``Cycle.process`` from its step 4): how it
    ended, as the name of a ``cycle.Outcome``."""
    entry, shape, _ = head
    ledger = cycle.ledger
    record = ledger.units[entry.key]
    info = record.info
    flavoring = state.flavors
    assert flavoring is not None
    candidates = flavoring.agreeing(info.pod_sets)
    places = ledger.places(state, info)
    refused: list[tuple[Flavor, str]] = []
    found: _Found | None = None
    later: _Found | None = None  # whenCanBorrow=TryNextFlavor: the first flavor it would borrow in
    misfits: list[tuple[Flavor, Misfit]] = []
    unplaced_waits: list[tuple[Flavor, tuple[PodSetInfo, ...]]] = []
    for flavor in candidates:
        node = flavor.node
        misfit = first_misfit(node, info.request, info.priority, preemptible=info.preemptible)
        if misfit is not None:
            refused.append((flavor, messages.waiting(node, misfit, info.priority)))
            misfits.append((flavor, misfit))
            if flavoring.preempt_first and later is None and not misfit.never:  # whenCanPreempt=Preempt
                found = _preempt(cycle, state, record, flavor, misfit)
                if found is not None:
                    break
            continue
        borrows = borrowing(node, info.request)
        if not flavoring.borrow_first and later is not None and beyond_min(node, info.request):
            refused.append((flavor, f"it would borrow in quota {node.name}"))
            continue
        placement: Placement | None = None
        if places:
            pods = pinned(info.pod_sets, flavor)
            got = ledger.room.place(pods, key=placement_key(pods))
            if isinstance(got, Unplaced):
                refused.append((flavor, messages.unplaced(node, got)))
                unplaced_waits.append((flavor, pods))
                if flavoring.preempt_first and later is None:
                    found = _reclaim_nodes(cycle, record, flavor, pods)
                    if found is not None:
                        break
                continue
            placement = got
        if not flavoring.borrow_first and beyond_min(node, info.request):
            later = _Found(flavor, placement, borrows)
            refused.append((flavor, f"it would borrow in quota {node.name}"))
            continue
        found = _Found(flavor, placement, borrows)
        break
    if found is None:
        found = later
    if found is not None and found.borrows and not scan.borrows:
        scan.borrows = True  # as ``Cycle.process`` step 4: admissions within runtime shares first
        return BORROWS_LATER
    scan.heads.pop()
    record.protected = False
    if found is None:
        lacking = dict(misfits)
        no_nodes = dict(unplaced_waits)
        for flavor in candidates:  # elastic: fewer pods; then preemption, flavor by flavor
            misfit = lacking.get(flavor)
            if misfit is not None:
                found = _in_part(cycle, state, record, flavor) if record.elastic else None
                if found is None and not misfit.never and not flavoring.preempt_first:
                    found = _preempt(cycle, state, record, flavor, misfit)
            elif flavor in no_nodes and not flavoring.preempt_first:
                found = _reclaim_nodes(cycle, record, flavor, no_nodes[flavor])
            if found is not None:
                break
    if found is None:
        return _wait(cycle, state, scan, record, shape, flavoring, candidates, refused, misfits, unplaced_waits)
    _admit(cycle, state, record, found)
    following = state.pending.next_of(shape)
    if following is not None:
        scan.heads.push(following, shape)
    scan.admitted = True
    return ADMITTED


def _view(state: QueueState, node: QuotaNode) -> QueueState:
    """The queue as seen from one flavor: the same Queue, pending units and holds, the
    flavor as its quota (what ``Preemptor`` and ``Cycle.admit`` read)."""
    return QueueState(state.info, node, state.threshold, state.node_fit, pending=state.pending, holds=state.holds)


class _PinnedPods:
    """Within it, the unit's pod sets are pinned to a flavor (what preemption and
    admission in part place), and put back after."""

    def __init__(self, info: UnitInfo, flavor: Flavor) -> None:
        self.info, self.flavor, self.kept = info, flavor, info.pod_sets

    def __enter__(self) -> None:
        self.info.pod_sets = pinned(self.kept, self.flavor)

    def __exit__(self, *_: object) -> None:
        self.info.pod_sets = self.kept


def _preempt(cycle: CycleLike, state: QueueState, record: UnitRecord, flavor: Flavor, misfit: Misfit) -> _Found | None:
    view = _view(state, flavor.node)
    with _PinnedPods(record.info, flavor):
        admit, placement, _ = cycle.preemptor.preempt_for(record, view, misfit)
    state.reclaims = state.reclaims or view.reclaims
    return _Found(flavor, placement, False) if admit else None


def _reclaim_nodes(cycle: CycleLike, record: UnitRecord, flavor: Flavor,
                   pods: tuple[PodSetInfo, ...]) -> _Found | None:
    """A unit that fits its flavor's quota, within the flavor's min, but whose pods find no
    room on the flavor's nodes: take back what units of other quotas' same flavor (the same
    node selector) hold there past their own min, as Kueue reclaims within a cohort per
    flavor (the quota tree counts GPUs, not models: this is where the model's nodes are
    given back to the team whose min it is). Lowest priority first, then the most recently
    admitted; the fewest whose room lets its pods be placed."""
    node = flavor.node
    info = record.info
    if beyond_min(node, info.request) or not info.pod_sets:
        return None
    ledger = cycle.ledger
    preemptor = cycle.preemptor
    now = preemptor.now
    names = [name for name, amount in info.request.items() if amount and name in node.limit]
    candidates: list[tuple[int, float, str, QuotaNode, Entry]] = []
    for other in {f.node for flavoring in ledger.flavorings.values() for f in flavoring.flavors}:
        if other is node or other.info is None or other.info.node_selector != flavor.selector:
            continue
        for admitted_at, key in ledger.victims.get(other, ()):
            victim = ledger.units[key]
            if preemptor.spared_until(key, admitted_at) > now or key in preemptor.admitted_now:
                continue
            candidates.append((victim.info.priority, -admitted_at, key, other, victim.entry))
    # Of units admitted at once, the one admitted last (later in its queue) first (as choose_victims).
    candidates.sort(key=lambda c: c[4], reverse=True)
    candidates.sort(key=lambda c: (c[0], c[1]))
    chosen: list[tuple[str, QuotaNode]] = []
    freed: dict[QuotaNode, dict[str, int]] = {}
    placement: Placement | Unplaced | None = None
    for _, _, key, other, _ in candidates:
        charged = ledger.units[key].charged
        gone = freed.setdefault(other, {})
        if not any(other.used.get(n, 0) - gone.get(n, 0) > other.min.get(n, 0) and charged.get(n, 0)
                   for n in names):
            continue  # its quota is within its own min (what is left of it)
        for n, amount in charged.items():
            gone[n] = gone.get(n, 0) + amount
        chosen.append((key, other))
        placement = ledger.room.place(pods, released=[k for k, _ in chosen])
        if isinstance(placement, Placement):
            break
    if not isinstance(placement, Placement):
        return None
    for index in range(len(chosen) - 2, -1, -1):  # none that could be spared
        fewer = chosen[:index] + chosen[index + 1:]
        again = ledger.room.place(pods, released=[k for k, _ in fewer])
        if isinstance(again, Placement):
            chosen, placement = fewer, again
    for key, other in chosen:
        name = next((n for n in names if ledger.units[key].charged.get(n, 0)), names[0] if names else "")
        reason = messages.reclaimed(other, name, record.key, node.name)
        requeue_at = ledger.send_back(ledger.units[key], now, reason)
        preemptor.result.preempted.append(Preemption(key, other.name, record.key, reason, requeue_at))
    return _Found(flavor, placement, False)


def _in_part(cycle: CycleLike, state: QueueState, record: UnitRecord, flavor: Flavor) -> _Found | None:
    view = _view(state, flavor.node)
    with _PinnedPods(record.info, flavor):
        placement, _ = cycle.in_part(record, view)
    return None if placement is None else _Found(flavor, placement, False)


def _admit(cycle: CycleLike, state: QueueState, record: UnitRecord, found: _Found) -> None:
    info = record.info
    node = found.flavor.node
    tree = cycle.ledger.tree
    if record.node is not node:  # its pending request moves to the flavor it is admitted into
        assert record.node is not None
        tree.add_pending(record.node, info.request, -1)
        tree.add_pending(node, info.request, 1)
        record.node = node
    placement = with_pins(found.placement, info.pod_sets, found.flavor.selector)
    cycle.admit(record, _view(state, node), placement)


def _wait(cycle: CycleLike, state: QueueState, scan: ScanLike, record: UnitRecord, shape: Shape,
          flavoring: Flavoring, candidates: Sequence[Flavor], refused: Sequence[tuple[Flavor, str]],
          misfits: Sequence[tuple[Flavor, Misfit]], unplaced: Sequence[tuple[Flavor, tuple[PodSetInfo, ...]]]) -> str:
    """It waits: told what each flavor refused, woken by room where any of them lacked it."""
    ledger = cycle.ledger
    info = record.info
    text = wait_text(flavoring, info, candidates, refused)
    told = record.message != text
    ledger.say(record, text)
    record.reason = None
    for _, misfit in misfits:
        node = misfit.node
        need = node.waiters.setdefault(state.key, {})
        if misfit.asked < need.get(misfit.resource, math.inf):
            need[misfit.resource] = misfit.asked
    if unplaced:
        waiting = ledger.node_waiters.setdefault(state.key, {})
        for _, pods in unplaced:
            key = placement_key(pods)
            wait = waiting.get(key)
            if wait is None:
                waiting[key] = NodeWait(pods, None, [record.key])
            else:
                wait.units.append(record.key)
        state.misfits_above = True  # woken by room on the nodes: scanned again (what it is told spans flavors)
    never = bool(candidates) and all(m.never for _, m in misfits) and len(misfits) == len(candidates)
    if state.stops_at(info.priority) and candidates and not never:
        state.blocker = state.told_blocker = record.key
        scan.heads.clear()
        return BLOCKS
    if told:
        for follower in state.pending.followers(shape, BLOCKED_WINDOW):
            ledger.say(ledger.units[follower.key], text)
    return WAITS


def live_message(ledger: Ledger, record: UnitRecord, state: QueueState) -> str:
    """Why a queued unit of a flavored quota waits now (the views: explain, positions)."""
    flavoring = state.flavors
    assert flavoring is not None
    candidates, refused, fits = _refusals(ledger, record, state)
    if fits is not None:
        return record.message  # it fits one now: the next cycle admits it
    return wait_text(flavoring, record.info, candidates, refused)


def tried(ledger: Ledger, record: UnitRecord, state: QueueState) -> list[FlavorTry]:
    """Each flavor of a queued unit's quota, in order, and why it refuses the unit now: the
    words of its message, flavor by flavor (the views: explain, the dashboard)."""
    flavoring = state.flavors
    assert flavoring is not None
    candidates, refused, fits = _refusals(ledger, record, state)
    why = {flavor.node.name: text for flavor, text in refused}
    out = []
    for flavor in flavoring.flavors:
        name = flavor.node.name
        if flavor not in candidates:
            text: str | None = DISAGREES
        elif name in why:
            text = why[name]
        elif fits is flavor:
            text = None
        else:
            break  # not reached: an earlier flavor fits
        out.append(FlavorTry(name, selects(flavor.selector), text))
    return out


def _refusals(ledger: Ledger, record: UnitRecord,
              state: QueueState) -> tuple[tuple[Flavor, ...], list[tuple[Flavor, str]], Flavor | None]:
    """The flavors a unit's pods agree with, what each refused it, in order, up to the first
    where it fits now (returned last; None: none)."""
    flavoring = state.flavors
    assert flavoring is not None
    info = record.info
    candidates = flavoring.agreeing(info.pod_sets)
    refused: list[tuple[Flavor, str]] = []
    places = ledger.places(state, info)
    for flavor in candidates:
        misfit = first_misfit(flavor.node, info.request, info.priority, preemptible=info.preemptible)
        if misfit is not None:
            refused.append((flavor, messages.waiting(flavor.node, misfit, info.priority)))
            continue
        if places:
            got = ledger.room.place(pinned(info.pod_sets, flavor))
            if isinstance(got, Unplaced):
                refused.append((flavor, messages.unplaced(flavor.node, got)))
                continue
        return candidates, refused, flavor
    return candidates, refused, None


__all__ = ["Flavor", "Flavoring", "agrees", "build", "home", "live_message", "pinned", "process", "tried", "wait_text",
           "with_pins"]
