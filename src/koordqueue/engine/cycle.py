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
  borrowers of other quotas (tree.py ``Hold``); it is *ripe* once the unit has waited
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

from koordqueue.engine import messages
from koordqueue.engine.fit import Misfit, borrowing, first_misfit, headroom
from koordqueue.engine.ledger import (
    BLOCKED_WINDOW,
    Ledger,
    NodeWait,
    QueueState,
    UnitRecord,
    UnitState,
    has_room,
)
from koordqueue.engine.model import Admission, CycleResult, Placement, Preemption, ResourceList
from koordqueue.engine.pending import Head, Heads
from koordqueue.engine.placement import CheckKey, Unplaced, check_key
from koordqueue.engine.preemption import Candidate, binding, choose_victims
from koordqueue.engine.tree import Hold, QuotaNode

MAX_SCANS_PER_CYCLE = 3  # a queue woken again within a cycle is scanned at most this often

_Held = dict[tuple[str, int, bool], int]
"""What a queue's holds at one node keep: (resource, priority, ripe) -> amount."""

_Turn = tuple[int, bool, float, str, int, int]
"""A queue's turn in a cycle: (-Queue priority, its next unit borrows, share, key, version,
the ledger's charges then: when they are the same at its turn, its share is too)."""


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


_TURN_ENDS = frozenset((Outcome.ADMITTED, Outcome.BORROWS_LATER))


class Attempt(NamedTuple):
    """What trying to admit a unit found (``Cycle.attempt``)."""

    admit: bool
    placement: Placement | None  # where its pods go, when they are placed (or fewer of them: in part)
    misfit: Misfit | None  # why its request (or, elastic, its least) does not fit its quota
    unplaced: Unplaced | None  # why its pods (or its least) have no nodes
    waits: CheckKey | None  # the failed placement check whose room it waits for
    waits_counts: dict[str, int] | None  # its pod counts in that check, when not all of them
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
        self.heap: list[_Turn] = []
        self.scans: dict[str, Scan] = {}
        self.admitted_now: set[str] = set()  # units admitted in this cycle: never its victims
        # Until some usage changes (the ledger's charges move): (leaf, top, resources) -> what may be reclaimed.
        self.reclaim_cache: dict[tuple[QuotaNode, QuotaNode, frozenset[str]], tuple[list[Candidate], float]] = {}
        self.reclaim_charges = -1

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
                _, _, last_share, key, version, charges = heapq.heappop(heap)
                state = self.qs[key]
                if version != state.version:
                    continue
                # Others of its quota were admitted meanwhile (no usage moved: no share did).
                if charges != ledger.charges and share(state.leaf) > last_share:
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
        heapq.heappush(self.heap, (-state.info.priority, borrows, share(state.leaf), state.key, state.version,
                                   self.ledger.charges))

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
        if not state.rescan and not self.room_left(state) and not self.nodes_left(state):
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
        # 4. It fits but would borrow: as in Kueue, admissions within runtime shares come
        # first in a cycle, so that a borrower does not take what another quota is about to claim.
        info = record.info
        leaf = state.leaf
        misfit = first_misfit(leaf, info.request, info.priority, preemptible=info.preemptible)
        if misfit is None and not scan.borrows and borrowing(leaf, info.request):
            scan.borrows = True
            return Outcome.BORROWS_LATER
        # 5. Whole, in part, or by preemption: admitted.
        heads.pop()
        record.protected = False
        tried = self.attempt(record, state, misfit)
        if tried.admit:
            self.admit(record, state, tried.placement)
            following = state.pending.next_of(shape)
            if following is not None:
                heads.push(following, shape)
            scan.admitted = True
            return Outcome.ADMITTED
        # 6. It waits, told why; with it the rest of its stream (same request, same or
        # lower priority), and when neither its quota nor preemption could fit it, its group.
        told = self.note_wait(record, state, scan, tried)
        # 7. Its Queue's policy stops at it (a unit that can never fit is passed over:
        # nothing that ends makes room for it). The units behind it are told who blocks them.
        if state.stops_at(info.priority) and not _never(tried.misfit, tried.unplaced):
            told = told or state.told_blocker != record.key
            state.blocker = state.told_blocker = record.key
            heads.clear()
            if told:
                units = self.units
                for follower in islice(state.pending.ordered(), 1, BLOCKED_WINDOW + 1):
                    other = units[follower.key]
                    ledger.say(other, ledger.live_message(other))
            return Outcome.BLOCKS
        # 8. Units behind it may fit: the scan goes on. Those of its stream are told its reason.
        if told:
            units = self.units
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
        waits: CheckKey | None = None
        waits_counts: dict[str, int] | None = None
        if misfit is None and state.node_fit and info.pod_sets and self.room:  # (``Ledger.places``)
            if record.check is None:
                record.check = check_key(info.pod_sets)
            found = self.room.place(info.pod_sets, key=record.check)
            if isinstance(found, Unplaced):
                unplaced = found
                waits = record.check
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
                waits = check_key(info.pod_sets, waits_counts)
        by_quota = False
        if not admit and misfit is not None:
            admit, placement, by_quota = self.preempt_for(record, state, misfit)
            if not admit and least is not None:  # it waits for room for its least, not its most
                misfit, unplaced = (least, None) if isinstance(least, Misfit) else (None, least)
        return Attempt(admit, placement, misfit, unplaced, waits, waits_counts, least, by_quota)

    def note_wait(self, record: UnitRecord, state: QueueState, scan: Scan, tried: Attempt) -> bool:
        """Tell a unit that was not admitted why it waits, and what it waits for; those of
        its group wait as it does when only its request and priority kept it out. Return
        whether the units behind it must be told (see ``note_misfit``)."""
        if tried.unplaced is not None:
            assert tried.waits is not None
            return self.note_unplaced(record, state, tried.unplaced, tried.waits, tried.waits_counts)
        misfit = tried.misfit
        assert misfit is not None
        told = self.note_misfit(record, state, misfit)
        if tried.by_quota and not isinstance(tried.least, Unplaced):
            # The heads of its group (the same request after it) wait as it does.
            units, text, say = self.units, record.message, self.ledger.say
            for dropped in scan.heads.drop_group():
                other = units[dropped.key]
                if other.message != text:  # (``say``, inline: a group can have many heads)
                    say(other, text)
            if misfit.node is state.leaf:  # (``raise_bar`` looks no further else)
                self.raise_bar(scan, state, misfit, text)
        return told

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
            ledger.say(other, ledger.live_message(other, position=position))

    # --- why a unit waits -----------------------------------------------------------
    def note_misfit(self, record: UnitRecord, state: QueueState, misfit: Misfit) -> bool:
        """Say why the unit waits, wait for room where it lacks it, and hold what is free.
        Return whether it now waits for another limit (not only other amounts): the
        units behind it are told then, not each time an amount in the text moves."""
        ledger = self.ledger
        leaf = state.leaf
        hold = misfit.hold
        node = misfit.node
        key: tuple[object, ...]
        protected = record.protected
        if hold is None:
            key = (node, misfit.resource, misfit.asked, misfit.used, misfit.limit, misfit.reserve, None, None, None,
                   protected, misfit.pinned)
        else:
            key = (node, misfit.resource, misfit.asked, misfit.used, misfit.limit, misfit.reserve,
                   hold.holder, hold.priority, hold.waited_past, protected, False)
        reason = record.reason
        info = record.info
        if reason is not None and reason[0] == key:
            told = False
        else:  # told when what it waits for differs, not only the amounts asked and used
            last = reason[0] if reason is not None else None
            told = last is None or last[0] is not node or last[1] != key[1] or last[4:] != key[4:]
            reason = record.reason = (key, messages.waiting(leaf, misfit, info.priority, ledger.protect(protected)))
        if record.message != reason[1]:  # (``say``)
            record.message = reason[1]
            ledger.changed[record.key] = reason[1]
        if misfit.runtime and node not in leaf.path:  # a sibling koord-scheduler would cut: room under their parent
            node = node.parent or leaf
        # Held room keeps away units of other quotas only while they borrow (fit.py);
        # whether this one borrows changes only with its own quota, which scans it again.
        if misfit.hold is not None and borrowing(leaf, info.request):
            need = node.hold_waiters.setdefault(state.key, {})
            if info.priority > node.hold_waiter_priority.get(state.key, -math.inf):
                node.hold_waiter_priority[state.key] = info.priority
        else:
            need = node.waiters.setdefault(state.key, {})
        if misfit.asked < need.get(misfit.resource, math.inf):
            need[misfit.resource] = misfit.asked
        if misfit.runtime or node is leaf or misfit.pinned or misfit.asked > misfit.limit:  # (or it never fits)
            # Its own quota's limit, or the min of non-preemptible usage: others' units
            # are no competition (Priority skips it), holding room keeps nothing for it.
            return told
        state.misfits_above = True
        if node.used.get(misfit.resource, 0) <= leaf.used.get(misfit.resource, 0):
            return told  # nobody else uses that node: holding keeps nothing from anyone
        # Hold up to the node where it lacks room, not above: room above that node is of
        # no use to it until that node has room, and holding it would only keep others
        # (who can use it now) waiting, perhaps for one another. Against borrowers of its
        # own priority only once it has waited past its Queue's bound: its queue is
        # scanned again then, to hold anew.
        after = state.info.hold_room_after
        since = info.created if info.requeue_at is None else max(info.created, info.requeue_at)
        ripe = since + after  # the very time its queue is woken at, so that it is ripe then
        waited_past = after if self.now >= ripe else None
        child = leaf
        for upper in leaf.path[1 : leaf.path.index(node) + 1]:
            amounts: ResourceList = {}
            for name, amount in info.request.items():
                room = headroom(upper, child, name)
                if room is not None and room > 0:
                    amounts[name] = min(amount, room)
            if amounts:
                hold = Hold(record.key, leaf, info.priority, amounts, waited_past)
                upper.add_hold(hold)
                state.holds.append((upper, hold))
                if waited_past is None:
                    ledger.retry_later(state, ripe)
            child = upper
        return told

    def note_unplaced(self, record: UnitRecord, state: QueueState, unplaced: Unplaced, waits: CheckKey,
                      counts: dict[str, int] | None) -> bool:
        """Say why the unit's pods have no nodes, and wait for room on them that the check
        ``waits`` (of ``counts`` of its pods, when not all) could use. Return whether it waits for another reason than before (see
        ``note_misfit``)."""
        key: tuple[object, ...] = ("nodes", unplaced)
        reason = record.reason
        told = reason is None or reason[0][0] != "nodes" or _kind(reason[0][1]) != _kind(unplaced)
        if reason is None or reason[0] != key:
            reason = record.reason = (key, messages.unplaced(state.leaf, unplaced))
        self.ledger.say(record, reason[1])
        waiting = self.ledger.node_waiters.setdefault(state.key, {})
        wait = waiting.get(waits)
        if wait is None:
            waiting[waits] = NodeWait(record.info.pod_sets, counts, [record.key])
        else:
            wait.units.append(record.key)
        return told

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
        protect = self.config.protect_seconds
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
                if admitted_at + protect > now:
                    free_at = min(free_at, admitted_at + protect)
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
        reasons = [_preemption_reason(c, record, leaf, names) for c in chosen]
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
        taken back for a unit of ``leaf``, and when the first protected one stops being
        protected. Kept for the rest of the cycle until some usage changes: the heads of
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
                victim = self.units[unit_key]
                candidates.append(
                    Candidate(unit_key, other, victim.charged, victim.info.priority, admitted_at,
                              victim.entry, chain)
                )
        self.reclaim_cache[key] = (candidates, free_at)
        return candidates, free_at

    # --- a queue woken by room: is the room still there? ----------------------------
    def room_left(self, state: QueueState) -> bool:
        """Whether a node that woke ``state`` still has the room it was woken for; if
        none has, the queue waits at those nodes again."""
        woken = state.woken
        if any(has_room(node, need, priority, state.leaf) for node, need, priority in woken):
            return True
        for node, need, priority in woken:
            waiting = (node.waiters if priority is None else node.hold_waiters).setdefault(state.key, {})
            for name, amount in need.items():
                if amount < waiting.get(name, math.inf):
                    waiting[name] = amount
            if priority is not None and priority > node.hold_waiter_priority.get(state.key, -math.inf):
                node.hold_waiter_priority[state.key] = priority
        state.woken = []
        return False

    def nodes_left(self, state: QueueState) -> bool:
        """Whether a failed placement check that room on the nodes woke ``state`` for
        passes now; if none does, its units are told why anew (as its scan would) and it
        waits for room again. A unit told another kind of reason is scanned for (so that
        the units behind it are told as a scan tells them)."""
        waits, state.node_woken = state.node_woken, {}
        if waits and state.misfits_above:
            # Limits above its quota move with others' admissions: what it holds there and
            # what its units are told are worked out anew, as a scan does.
            return True
        for key, wait in waits.items():
            found = self.room.place(wait.pod_sets, wait.counts, key=key)
            if not isinstance(found, Unplaced):
                return True
            for unit in wait.units:
                record = self.units.get(unit)
                if record is None or record.queue is not state or record.state is not UnitState.QUEUED:
                    return True
                if self.note_unplaced(record, state, found, key, wait.counts):
                    return True
        return False


def _preemption_reason(candidate: Candidate, preemptor: UnitRecord, leaf: QuotaNode, names: frozenset[str]) -> str:
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


def _kind(unplaced: object) -> tuple[object, ...]:
    """What a reason to wait for nodes is about, without its amounts (see ``note_misfit``)."""
    if not isinstance(unplaced, Unplaced):
        return ()
    return (unplaced.pod_set, unplaced.asked, unplaced.resource, bool(unplaced.shut_out), unplaced.level)
