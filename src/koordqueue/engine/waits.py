"""Why a unit waits, and what wakes its queue: the reasons a scan tells, the room it
waits for (at quota nodes, ``QuotaNode.waiters``; on the nodes, ``Ledger.node_waiters``)
and holds, and what a queue woken by room looks at again at its turn before it is scanned.

A queue is *woken* when room appears where it waits; *ripe* holds are those of a unit
that has waited past its Queue's hold-room-after (they keep room from borrowers of its
own priority too).
"""

from __future__ import annotations

import math

from koordqueue.engine import messages
from koordqueue.engine.fit import Misfit, borrowing, headroom
from koordqueue.engine.ledger import Ledger, NodeWait, QueueState, Reason, UnitRecord, UnitState, has_room
from koordqueue.engine.model import ResourceList
from koordqueue.engine.placement import PlacementKey, Unplaced
from koordqueue.engine.quotanode import Hold


def note_misfit(ledger: Ledger, record: UnitRecord, state: QueueState, misfit: Misfit, now: float) -> bool:
    """Say why the unit waits, wait for room where it lacks it, and hold what is free.
    Return whether it now waits for another limit (not only other amounts): the
    units behind it are told then, not each time an amount in the text moves."""
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
    if reason is not None and reason.key == key:
        told = False
    else:  # told when what it waits for differs, not only the amounts asked and used
        last = reason.key if reason is not None else None
        told = last is None or last[0] is not node or last[1] != key[1] or last[4:] != key[4:]
        reason = record.reason = Reason(key, messages.waiting(leaf, misfit, info.priority, ledger.protect(protected)))
    if record.message != reason.text:  # (``say``)
        record.message = reason.text
        ledger.changed[record.key] = reason.text
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
    waited_past = after if now >= ripe else None
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

def note_unplaced(ledger: Ledger, record: UnitRecord, state: QueueState, unplaced: Unplaced, waits: PlacementKey,
                  counts: dict[str, int] | None) -> bool:
    """Say why the unit's pods have no nodes, and wait for room on them that the placement
    ``waits`` (of ``counts`` of its pods, when not all) could use. Return whether it waits for another reason than before (see
    ``note_misfit``)."""
    key: tuple[object, ...] = ("nodes", unplaced)
    reason = record.reason
    told = reason is None or reason.key[0] != "nodes" or _kind(reason.key[1]) != _kind(unplaced)
    if reason is None or reason.key != key:
        reason = record.reason = Reason(key, messages.unplaced(state.leaf, unplaced))
    ledger.say(record, reason.text)
    waiting = ledger.node_waiters.setdefault(state.key, {})
    wait = waiting.get(waits)
    if wait is None:
        waiting[waits] = NodeWait(record.info.pod_sets, counts, [record.key])
    else:
        wait.units.append(record.key)
    return told


def room_left(state: QueueState) -> bool:
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

def nodes_left(ledger: Ledger, state: QueueState) -> bool:
    """Whether a failed placement that room on the nodes woke ``state`` for
    passes now; if none does, its units are told why anew (as its scan would) and it
    waits for room again. A unit told another kind of reason is scanned for (so that
    the units behind it are told as a scan tells them)."""
    waits, state.node_woken = state.node_woken, {}
    if waits and state.misfits_above:
        # Limits above its quota move with others' admissions: what it holds there and
        # what its units are told are worked out anew, as a scan does.
        return True
    for key, wait in waits.items():
        found = ledger.room.place(wait.pod_sets, wait.counts, key=key)
        if not isinstance(found, Unplaced):
            return True
        for unit in wait.units:
            record = ledger.units.get(unit)
            if record is None or record.queue is not state or record.state is not UnitState.QUEUED:
                return True
            if note_unplaced(ledger, record, state, found, key, wait.counts):
                return True
    return False


def _kind(unplaced: object) -> tuple[object, ...]:
    """What a reason to wait for nodes is about, without its amounts (see ``note_misfit``)."""
    if not isinstance(unplaced, Unplaced):
        return ()
    return (unplaced.pod_set, unplaced.asked, unplaced.resource, bool(unplaced.shut_out), unplaced.level)
