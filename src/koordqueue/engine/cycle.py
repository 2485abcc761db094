"""One scheduling cycle: the stale queues take turns, each turn admits at most one unit.

A ``Cycle`` is made by ``Engine.schedule(now)`` and dropped when it returns; what it
keeps (the heap of turns, each queue's scan, the units admitted in it, the reclaim
candidates found) is valid only within it. Queues take turns by Queue priority, then
admissions within the quota's runtime share before those that borrow, then fair share
(the quota furthest below its runtime share first).

Words used here:

- *scan*: one pass over a queue's pending units in order, resumed at each of its turns
  (``Scan``); a queue is scanned at most ``MAX_SCANS_PER_CYCLE`` times per cycle.
- *hold*: room a unit that lacks room at a quota above its own keeps there from
  borrowers of other quotas (quotanode.py ``Hold``); it is *ripe* once the unit has waited
  past its Queue's hold-room-after, and then holds against borrowers of its priority too.
- *woken*: a queue scanned again only because room appeared where it waits; its turn
  checks that room is still there before scanning (``room_left``, ``nodes_left``).
- *bar*: within a scan, the least amount of a resource that did not fit the quota's own
  max nor could by preemption; later units asking as much are passed over at once.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from enum import Enum
from itertools import islice
from typing import NamedTuple

from koordqueue.engine import flavors, waits
from koordqueue.engine.fairness import budget_wait
from koordqueue.engine.fit import Misfit, borrowing, first_misfit
from koordqueue.engine.ledger import (
    BLOCKED_WINDOW,
    Ledger,
    QueueState,
    UnitRecord,
    UnitState,
)
from koordqueue.engine.model import Admission, CycleResult, Placement
from koordqueue.engine.pending import Head, Heads, Shape
from koordqueue.engine.placement import PlacementKey, Unplaced, placement_key
from koordqueue.engine.preemption import Preemptor
from koordqueue.engine.quotanode import Hold, QuotaNode
from koordqueue.engine.views import live_message

MAX_SCANS_PER_CYCLE = 3  # a queue woken again within a cycle is scanned at most this often

_Held = dict[tuple[str, int, bool], int]
"""What a queue's holds at one node keep: (resource, priority, ripe) -> amount."""


class Turn(NamedTuple):
    """A queue's turn in a cycle, on the cycle's heap (compared field by field: the Queue of
    highest priority first, then one whose next unit does not borrow, then the least share,
    then, under fair sharing by history, the largest effective weight)."""

    neg_priority: int  # -the Queue's priority
    borrows: bool  # its next unit would borrow (Kueue: admissions within shares first)
    share: float  # its quota's usage over its share when pushed
    tie: int  # -its quota's effective weight under fair sharing by history; 0 without (``Cycle.tie``)
    key: str  # the Queue's
    version: int  # the queue's version when pushed: an older turn is dropped
    charges: int  # the ledger's charges then: when the same at its turn, its share is too


@dataclass(slots=True)
class Scan:
    """A queue's scan within one cycle, resumed at each of its turns."""

    heads: Heads
    old_holds: dict[QuotaNode, _Held]
    rounds: int
    admitted: bool = False
    restart: bool = False
    done: bool = False
    borrows: bool = False  # its next unit would borrow: it waits for the turns of those that do not
    # Per resource: the least amount that did not fit its quota's own max (nor could by
    # preemption), and the text it was told; units whose least asks as much wait as it does.
    bar: dict[str, tuple[int, str]] = field(default_factory=dict)


class Outcome(Enum):
    """How one head of a scan ended (``Cycle.process``)."""

    QUEUE_WAITS_FOR_PODS = "queue waits for pods"  # wait-for-pods-running: the scan stops
    BEYOND_DEPTH = "beyond depth"  # max-depth: the scan stops
    BELOW_BAR = "below bar"  # passed over with its group, told the bar's reason: the scan goes on
    BORROWS_LATER = "borrows later"  # it would borrow: the queue's turn ends, the next comes after non-borrowers'
    ADMITTED = "admitted"  # the queue's turn ends; it gets another
    BLOCKS = "blocks"  # it waits, and its Queue's policy stops at it: the scan stops
    WAITS = "waits"  # it waits; units behind it may fit: the scan goes on


_TURN_ENDS = (Outcome.ADMITTED, Outcome.BORROWS_LATER)  # (a tuple: ``in`` compares by identity first; an Enum hashes in Python)


class Attempt(NamedTuple):
    """What trying to admit a unit found (``Cycle.attempt``)."""

    admit: bool
    placement: Placement | None  # where its pods go, when they are placed (or fewer of them: in part)
    misfit: Misfit | None  # why its request (or, elastic, its least) does not fit its quota
    unplaced: Unplaced | None  # why its pods (or its least) have no nodes
    waits: PlacementKey | None  # the failed placement whose room it waits for
    waits_counts: dict[str, int] | None  # its pod counts in that placement, when not all of them
    least: Misfit | Unplaced | None  # an elastic unit: why not even its least
    by_quota: bool  # it fits neither its quota nor by preemption, whatever its pods


def share(leaf: QuotaNode) -> float:
    """How far a quota is into its runtime share (its most used resource)."""
    worst = 0.0
    used = leaf.used
    for name, runtime in leaf.runtime.items():
        amount = used.get(name, 0)
        if amount > 0:
            part = amount / runtime if runtime > 0 else math.inf
            if part > worst:
                worst = part
    return worst


class Cycle:
    """One ``schedule(now)``: the turns of the stale queues, over the Engine's ledger."""

    def __init__(self, ledger: Ledger, now: float, result: CycleResult) -> None:
        self.ledger = ledger
        self.now = now
        self.result = result
        self.units = ledger.units  # (not replaced within a cycle: read on every step)
        self.qs = ledger.qs
        self.room = ledger.room
        self.config = ledger.config
        self.heap: list[Turn] = []
        self.scans: dict[str, Scan] = {}
        self.admitted_now: set[str] = set()  # units admitted in this cycle: never its victims
        self.preemptor = Preemptor(ledger, now, result, self.admitted_now)

    def run(self) -> None:
        """Give the stale queues turns until none can admit more."""
        ledger = self.ledger
        heap = self.heap
        stale = sorted(ledger.stale)
        ledger.stale = set()
        ledger.cycle = self
        try:
            for key in stale:
                state = self.qs.get(key)
                if state is not None:
                    self.push(state)
            while heap:
                turn = heapq.heappop(heap)
                state = self.qs[turn.key]
                if turn.version != state.version:
                    continue
                # Others of its quota were admitted meanwhile (no usage moved: no share did).
                if turn.charges != ledger.charges and share(state.leaf) > turn.share:
                    self.push(state)
                    continue
                if self.step(state):
                    self.push(state)
        finally:
            ledger.cycle = None

    def push(self, state: QueueState) -> None:
        state.version += 1
        scan = self.scans.get(state.key)
        borrows = scan is not None and scan.borrows
        heapq.heappush(self.heap, Turn(-state.info.priority, borrows, share(state.leaf), self.tie(state.leaf),
                                       state.key, state.version, self.ledger.charges))

    def tie(self, leaf: QuotaNode) -> int:
        """Between quotas equally far into their runtime shares (none used yet, say), the
        one that used less lately, for its weight, goes first: minus its effective weight
        under fair sharing by history (fairness.py); 0 for every quota without it."""
        fair = self.ledger.fair
        if fair is None or not fair.weights:
            return 0
        weight = fair.weights.get(leaf.name)
        return -max(weight.values(), default=0) if weight else 0

    def touch(self, state: QueueState, rescan: bool) -> None:
        """The ledger's ``touch`` within a cycle: give the queue another turn, or scan it
        again from the start at its next one (at most ``MAX_SCANS_PER_CYCLE`` times)."""
        scan = self.scans.get(state.key)
        state.rescan = state.rescan or rescan or (scan is not None and not scan.done)
        if scan is None:
            self.push(state)
        elif not scan.done:
            scan.restart = True
        elif scan.rounds < MAX_SCANS_PER_CYCLE:
            scan.done = False
            scan.restart = True
            self.push(state)
        else:
            self.ledger.stale.add(state.key)

    def step(self, state: QueueState) -> bool:
        """Go on scanning ``state`` until one unit is admitted (True: the queue takes
        another turn), its next unit would borrow (True: its turn comes after those that
        do not) or none can be (False)."""
        scan = self.scan_of(state)
        if scan is None:
            return False
        heads = scan.heads
        while (head := heads.peek()) is not None:
            if self.process(state, scan, head) in _TURN_ENDS:
                return True
        self.finish_scan(state, scan)
        return False

    def scan_of(self, state: QueueState) -> Scan | None:
        """The queue's scan to go on with: its own, a new one (first turn, or something
        changed since: ``Scan.restart``), or None when only room woke it and that room is
        gone (its scan would end where the last one did)."""
        scan = self.scans.get(state.key)
        if scan is not None and not scan.restart:
            return scan
        if not state.rescan and not waits.room_left(state) and not waits.nodes_left(self.ledger, state):
            # Woken by room at a quota node it waits on or on the nodes its pods wait
            # for, which others took before its turn.
            if scan is not None:
                scan.restart = False
                scan.done = True
            return None
        return self.start_scan(state, 1 if scan is None else scan.rounds + 1)

    def process(self, state: QueueState, scan: Scan, head: Head) -> Outcome:
        """One head of the scan, as Kueue's ``processEntry``: each guard ends in an outcome."""
        entry, shape, least_asked = head
        heads = scan.heads
        ledger = self.ledger
        # 1. koord-queue/wait-for-pods-running: nothing more until the pods of a unit it admitted run.
        if state.info.wait_for_pods_running and ledger.pods_blocker(state) is not None:
            heads.clear()
            self.tell_blocked(state, 0)
            return Outcome.QUEUE_WAITS_FOR_PODS
        # 2. koord-queue/max-depth: the rest of the queue is not looked at.
        depth = state.info.max_depth
        if depth is not None and state.pending.position(entry) > depth:
            heads.clear()
            self.tell_blocked(state, depth)
            return Outcome.BEYOND_DEPTH
        # 3. It asks at least what a unit before it could not get of its own quota's max.
        record = self.units[entry.key]
        if scan.bar and self.below_bar(scan, record, least_asked):
            return Outcome.BELOW_BAR
        # 3b. A budget of a quota on its path would be exceeded within its window
        # (koord-queue/budget): it waits until enough past use ages out (fairness.py).
        if ledger.fair is not None and ledger.fair.budgeted and self.over_budget(state, record, shape):
            heads.pop()
            return Outcome.WAITS
        # 4. Its quota has flavors: each is tried in turn (flavors.py).
        if state.flavors is not None:
            return Outcome[flavors.process(self, state, scan, head)]
        info = record.info
        leaf = state.leaf
        # 5. It fits but would borrow: as in Kueue, admissions within runtime shares come
        # first in a cycle, so that a borrower does not take what another quota is about to claim.
        misfit = first_misfit(leaf, info.request, info.priority, preemptible=info.preemptible)
        if misfit is None and not scan.borrows and borrowing(leaf, info.request):
            scan.borrows = True
            return Outcome.BORROWS_LATER
        heads.pop()
        record.protected = False
        placement: Placement | None = None
        if misfit is not None and not record.elastic:
            # 6. It does not fit its quota (and cannot with fewer pods): room made by
            # preemption, else it waits.
            admit, placement, by_quota = self.preemptor.preempt_for(record, state, misfit)
            if not admit:
                return self.wait(state, scan, record, shape,
                                 Attempt(False, None, misfit, None, None, None, None, by_quota))
        elif misfit is not None or (info.pod_sets and state.node_fit and self.room):
            # 7. Its pods must fit on the nodes, or (elastic) fewer of them its quota: they
            # are placed, or fewer of them, or room is made by preemption; else it waits.
            tried = self.attempt(record, state, misfit)
            if not tried.admit:
                return self.wait(state, scan, record, shape, tried)
            placement = tried.placement
        # 8. Admitted; the next unit of its stream becomes a head.
        self.admit(record, state, placement)
        following = state.pending.next_of(shape)
        if following is not None:
            heads.push(following, shape)
        scan.admitted = True
        return Outcome.ADMITTED

    def over_budget(self, state: QueueState, record: UnitRecord, shape: Shape) -> bool:
        """Whether a budget holds ``record`` back; if so it is told why (and the rest of its
        stream, which waits behind it), and its queue is scanned again when the budget frees up."""
        ledger = self.ledger
        assert ledger.fair is not None
        held = budget_wait(ledger.fair, state.leaf, record.info, self.now)
        if held is None:
            return False
        text, when = held
        ledger.say(record, text)
        for follower in state.pending.followers(shape, BLOCKED_WINDOW):
            ledger.say(self.units[follower.key], text)
        if when is not None:
            ledger.retry_later(state, when)
        return True

    def wait(self, state: QueueState, scan: Scan, record: UnitRecord, shape: Shape, tried: Attempt) -> Outcome:
        """A head that was not admitted, as ``process`` goes on: each guard ends in an outcome."""
        ledger = self.ledger
        units = self.units
        # 1. It waits, told why; with it the rest of its stream (same request, same or
        # lower priority), and when neither its quota nor preemption could fit it, its
        # group. ``told``: the units behind it must be told (see ``waits.note_misfit``).
        misfit, unplaced = tried.misfit, tried.unplaced
        if unplaced is not None:
            assert tried.waits is not None
            told = waits.note_unplaced(ledger, record, state, unplaced, tried.waits, tried.waits_counts)
        else:
            assert misfit is not None
            told = waits.note_misfit(ledger, record, state, misfit, self.now)
            if tried.by_quota and not isinstance(tried.least, Unplaced):
                # The heads of its group (the same request after it) wait as it does.
                text, say = record.message, ledger.say
                for dropped in scan.heads.drop_group():
                    other = units[dropped.key]
                    if other.message != text:  # (``say``, inline: a group can have many heads)
                        say(other, text)
                if misfit.node is state.leaf:  # (``raise_bar`` looks no further else)
                    self.raise_bar(scan, state, misfit, text)
        # 2. Its Queue's policy stops at it (a unit that can never fit is passed over:
        # nothing that ends makes room for it). The units behind it are told who blocks them.
        if state.stops_at(record.info.priority) and not _never(misfit, unplaced):
            told = told or state.told_blocker != record.key
            state.blocker = state.told_blocker = record.key
            scan.heads.clear()
            if told:
                for follower in islice(state.pending.ordered(), 1, BLOCKED_WINDOW + 1):
                    other = units[follower.key]
                    ledger.say(other, live_message(ledger, other))
            return Outcome.BLOCKS
        # 3. Units behind it may fit: the scan goes on. Those of its stream are told its reason.
        if told:
            for follower in state.pending.followers(shape, BLOCKED_WINDOW):
                ledger.say(units[follower.key], record.message)
        return Outcome.WAITS

    def attempt(self, record: UnitRecord, state: QueueState, misfit: Misfit | None) -> Attempt:
        """Try to admit the unit (``misfit``: why its whole request does not fit its quota,
        if it does not): its pods placed on the nodes, else fewer of them (elastic), else
        room made by preemption."""
        info = record.info
        placement: Placement | None = None
        unplaced: Unplaced | None = None
        waits: PlacementKey | None = None
        waits_counts: dict[str, int] | None = None
        if misfit is None and state.node_fit and info.pod_sets and self.room:  # (``Ledger.places``)
            if record.placement_key is None:
                record.placement_key = placement_key(info.pod_sets)
            found = self.room.place(info.pod_sets, key=record.placement_key)
            if isinstance(found, Unplaced):
                unplaced = found
                waits = record.placement_key
            else:
                placement = found
        admit = misfit is None and unplaced is None
        least: Misfit | Unplaced | None = None
        if not admit and record.elastic:
            placement, least = self.in_part(record, state)
            admit = placement is not None
            if isinstance(least, Unplaced):  # no fewer pods fit either: it waits for room for its least
                elastic = next(ps for ps in info.pod_sets if ps.elastic)
                waits_counts = {elastic.name: elastic.min_count or 0}
                waits = placement_key(info.pod_sets, waits_counts)
        by_quota = False
        if not admit and misfit is not None:
            admit, placement, by_quota = self.preemptor.preempt_for(record, state, misfit)
            if not admit and least is not None:  # it waits for room for its least, not its most
                misfit, unplaced = (least, None) if isinstance(least, Misfit) else (None, least)
        return Attempt(admit, placement, misfit, unplaced, waits, waits_counts, least, by_quota)

    # --- a scan: its start, its end, the units it passes over ------------------------
    def start_scan(self, state: QueueState, rounds: int) -> Scan:
        old: dict[QuotaNode, _Held] = {}
        if state.holds:
            for node, hold in state.holds:
                node.remove_hold(hold)
            old = _held_by_node(state.holds)
            state.holds = []
        state.blocker = None
        state.rescan = False
        state.reclaims = False
        state.woken = []
        state.node_woken = {}
        state.misfits_above = False
        self.ledger.node_waiters.pop(state.key, None)  # its scan finds what it waits for anew
        scan = Scan(state.pending.heads(), old, rounds)
        self.scans[state.key] = scan
        return scan

    def finish_scan(self, state: QueueState, scan: Scan) -> None:
        scan.done = True
        if state.reclaims or state.info.preemption:
            # Whether its units may take capacity from others depends on more than room
            # (who borrows, whose protection ends): such a queue is scanned whenever woken.
            state.rescan = True
        if scan.admitted and state.holds:
            # Held for a unit that a later unit of its quota, admitted since, may have left
            # short of its own quota: scanned again, it holds only what it still can use, and
            # what it lets go wakes those it kept out (below, at the end of that scan).
            self.ledger.touch(state)
            return
        if not scan.old_holds:
            return
        # Where its holds keep out less than before (less of some resource, or the same
        # for a unit that has not waited as long, or of lower priority), units they kept
        # out may fit now: also after an admission, which may have left the holder short
        # of its own quota.
        new = _held_by_node(state.holds)
        for node, held in scan.old_holds.items():
            now_held = new.get(node, {})
            if any(now_held.get(rank, 0) < amount for rank, amount in held.items()):
                self.ledger.wake_node(node, exclude=state.key)

    def raise_bar(self, scan: Scan, state: QueueState, misfit: Misfit, text: str) -> None:
        """A unit's least did not fit its own quota's max, and no preemption could make it
        fit: every later unit of the scan whose least asks as much of that resource cannot
        fit either (the quota's usage only grows within a scan; a unit of it that leaves
        restarts the scan), and borrows, so that nothing can be reclaimed for it."""
        leaf = state.leaf
        if misfit.node is not leaf or misfit.hold is not None or misfit.runtime or misfit.pinned or leaf.capped \
                or state.info.preemption:
            return
        name = misfit.resource
        runtime = leaf.runtime.get(name)
        if runtime is None or runtime > misfit.limit:
            return
        known = scan.bar.get(name)
        if known is None or misfit.asked < known[0]:
            scan.bar[name] = (misfit.asked, text)

    def below_bar(self, scan: Scan, record: UnitRecord, least: dict[str, int]) -> bool:
        """Whether the head ``record`` (its group's least request: ``least``) cannot fit by ``scan.bar``: if
        so it is taken with the rest of its group, told the text of the unit that raised the
        bar (as a group is told its first unit's)."""
        for name, (amount, said) in scan.bar.items():
            if least.get(name, 0) >= amount:
                text = said
                break
        else:
            return False
        heads = scan.heads
        heads.pop()
        say = self.ledger.say
        say(record, text)
        units = self.units
        for dropped in heads.drop_group():
            other = units[dropped.key]
            if other.message != text:
                say(other, text)
        return True

    def tell_blocked(self, state: QueueState, start: int) -> None:
        """Tell the pending units from position ``start`` + 1 on (the first of them: see
        ``BLOCKED_WINDOW``) why their queue's scan stops before them."""
        ledger = self.ledger
        units = islice(state.pending.ordered(), start, start + BLOCKED_WINDOW + 1)
        for position, entry in enumerate(units, start=start + 1):
            other = self.units[entry.key]
            ledger.say(other, live_message(ledger, other, position=position))

    # --- why a unit waits -----------------------------------------------------------
    # --- admission and preemption ---------------------------------------------------
    def admit(self, record: UnitRecord, state: QueueState, placement: Placement | None = None) -> None:
        ledger = self.ledger
        info = record.info
        state.pending.remove(record.entry, record.shape)
        info.admitted_quota = state.leaf.name
        info.admitted_queue = state.key
        info.admitted_at = self.now
        info.requeue_at = None
        info.placement = placement
        record.state = UnitState.ADMITTED
        record.queue = None
        record.node = state.leaf
        record.pinned = not info.preemptible
        ledger.charge(record, 1, pending=True)
        self.admitted_now.add(record.key)
        ledger.now_starting(record.key, state.key, touch=False)  # (its scan looks before the next unit)
        record.message = ""
        ledger.changed.pop(record.key, None)
        # The placement decided, not the nodes guessed for a unit admitted on quota alone.
        self.result.admitted.append(Admission(record.key, state.leaf.name, state.key, placement))

    def in_part(self, record: UnitRecord, state: QueueState) -> tuple[Placement | None, Misfit | Unplaced | None]:
        """An elastic unit that does not fit whole: the most pods of its elastic pod set,
        down to its min count, that fit its quota (and the nodes) now; else None and why
        not even its min count fits."""
        info = record.info
        elastic = next(ps for ps in info.pod_sets if ps.elastic)
        assert elastic.min_count is not None
        places = self.ledger.places(state, info)
        leaf = state.leaf
        room = self.room

        def fits(count: int) -> Placement | Misfit | Unplaced:
            request = dict(info.request)
            for name, amount in elastic.request.items():
                request[name] = request.get(name, 0) - (elastic.count - count) * amount
            misfit = first_misfit(leaf, request, info.priority, preemptible=info.preemptible)
            if misfit is not None:
                return misfit
            counts = {elastic.name: count}
            if not places:
                return Placement(counts=tuple(counts.items()))
            return room.place(info.pod_sets, counts)

        low, high = elastic.min_count, elastic.count - 1
        best = fits(low)
        if not isinstance(best, Placement):
            return None, best
        while low < high:  # fits(low) holds; the most that fits is in [low, high]
            middle = (low + high + 1) // 2
            found = fits(middle)
            if isinstance(found, Placement):
                low, best = middle, found
            else:
                high = middle - 1
        return best, None

def _held_by_node(holds: list[tuple[QuotaNode, Hold]]) -> dict[QuotaNode, _Held]:
    out: dict[QuotaNode, _Held] = {}
    for node, hold in holds:
        held = out.setdefault(node, {})
        ripe = hold.waited_past is not None
        for name, amount in hold.amounts.items():
            rank = (name, hold.priority, ripe)
            held[rank] = held.get(rank, 0) + amount
    return out


def _never(misfit: Misfit | None, unplaced: Unplaced | None) -> bool:
    """Whether a unit that does not fit never will while the quotas and nodes stay as they
    are: more than a limit itself (fit.py), or pods that no node may take, or that the
    nodes could not hold even empty."""
    if misfit is not None:
        return misfit.never
    return unplaced is not None and (unplaced.never or bool(unplaced.shut_out))
