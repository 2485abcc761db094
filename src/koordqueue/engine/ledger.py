"""The ledger: every unit's standing and what admitted units hold, kept exact between cycles.

A unit is *attached* to the ledger in one state (parked, queued, backing off, admitted)
and *detached* from it before it changes; attaching an admitted unit *charges* its quota
(and its pods' room on the nodes), detaching it releases both, waking the queues that
wait for that room. The ledger knows which queues must be scanned again (``stale``, or,
within a cycle, the cycle's ``touch``) and which messages changed since the shell last
asked (``changed``); it makes no decision of its own: the cycle (cycle.py) admits and
preempts, the Engine (core.py) takes the inputs and rebuilds the ledger when quotas or
queues change. It imports neither of them.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple, Protocol

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import messages
from koordqueue.engine.backoff import backoff_seconds
from koordqueue.engine.fit import held_against_borrower
from koordqueue.engine.flavorsets import Flavoring
from koordqueue.engine.flavorsets import home as flavor_home
from koordqueue.engine.model import (
    EngineConfig,
    Placement,
    PodSetInfo,
    QueueInfo,
    QuotaInfo,
    ResourceList,
    UnitInfo,
)
from koordqueue.engine.pending import Entry, PendingQueue, Shape
from koordqueue.engine.placement import NodeRoom, PlacementKey
from koordqueue.engine.quotanode import Hold, QuotaNode
from koordqueue.engine.starting import Done, Starting
from koordqueue.engine.tenancy import Directory, Resolved, build_directory, resolve
from koordqueue.engine.tree import QuotaTree

if TYPE_CHECKING:
    from koordqueue.engine.fairness import Fairness

# Units right behind a unit that waits are told why they wait (who blocks them, or the
# same limit for the same request) when that changes, not when only the amounts in it
# do; further back they keep the text they got when they were queued, so that a cycle
# rewrites a few messages per queue, not thousands. The views (``standing``,
# ``queue_positions``) work out every unit's reason, with today's amounts, when asked.
BLOCKED_WINDOW = 20
RESOLVED_KEPT = 4096  # distinct (invalid, queue, namespace, quota) a unit asks for, resolved


class UnitState(Enum):
    PARKED = "parked"  # cannot be queued (no usable quota or queue); has a message
    QUEUED = "queued"  # pending and eligible, in its queue
    BACKOFF = "backoff"  # pending, not eligible before info.requeue_at
    ADMITTED = "admitted"  # holds quota


@dataclass(slots=True, eq=False)
class UnitRecord:
    """A unit as the ledger keeps it: the shell's ``UnitInfo`` and where it stands."""

    info: UnitInfo
    key: str
    entry: Entry
    shape: Shape
    charged: ResourceList  # what it holds of its quota when admitted: its request, or less (in part)
    elastic: bool  # some pod set may be admitted with fewer pods
    state: UnitState = UnitState.PARKED
    queue: QueueState | None = None  # resolved queue (queued, back-off)
    node: QuotaNode | None = None  # resolved quota (queued, back-off); charged node (admitted)
    message: str = ""
    reason: Reason | None = None  # why it last waited, and its text, not to format it again
    placement_key: PlacementKey | None = None  # what placing all its pods depends on (once asked for)
    protected: bool = False  # its last scan found units it could preempt, but within their protect time
    # It holds quota as a non-preemptible unit: never a victim, its request in ``pinned``
    # (tree.py). Set at admission: a label changed afterwards does not make a borrower safe.
    pinned: bool = False


@dataclass(slots=True, eq=False)
class QueueState:
    """A Queue as the ledger keeps it: its pending units, and what its last scan left behind."""

    info: QueueInfo
    leaf: QuotaNode
    threshold: int
    node_fit: bool  # its units' pods must fit on the nodes (when nodes are known)
    pending: PendingQueue = field(default_factory=PendingQueue)
    # The room its scans hold, at quota nodes above its own, for a unit that lacks room there.
    holds: list[tuple[QuotaNode, Hold]] = field(default_factory=list)
    blocker: str | None = None  # the unit its last scan stopped at (Block, Intelligent)
    told_blocker: str | None = None  # the blocker the units behind it were last told about
    version: int = 0  # of its entry in the cycle's heap
    # Since its last scan, only room at nodes it waits on woke it (these, with the least
    # it asked there and, for room held, the priority it was held against: None when not
    # held); nothing else that could change its decisions happened.
    woken: list[tuple[QuotaNode, ResourceList, int | None]] = field(default_factory=list)
    # Likewise its failed placements that room grown on the nodes may let pass now.
    node_woken: dict[PlacementKey, NodeWait] = field(default_factory=dict)
    rescan: bool = True  # something other than room woke it: scan it in any case
    misfits_above: bool = False  # a unit of its last scan ran into a limit above its own quota
    reclaims: bool = False  # a unit of its last scan looked for capacity to reclaim
    key: str = field(init=False, default="")  # its Queue's key, kept (read on every turn)
    # Its quota has flavors (flavors.py): its units are admitted into one of them.
    flavors: Flavoring | None = None

    def __post_init__(self) -> None:
        self.key = self.info.key

    def stops_at(self, priority: int) -> bool:
        """Whether a misfit of this priority stops the rest of the queue."""
        policy = self.info.policy
        if policy == QueuePolicy.BLOCK:
            return True
        return policy == QueuePolicy.INTELLIGENT and priority >= self.threshold


@dataclass(slots=True)
class NodeWait:
    """A failed placement a queue waits on: what to try again, and the units told why they wait."""

    pod_sets: tuple[PodSetInfo, ...]
    counts: dict[str, int] | None
    units: list[str]


class Reason(NamedTuple):
    """Why a unit last waited (waits.py): what its text depends on, and the text."""

    key: tuple[object, ...]  # a misfit's node, resource, amounts and limit; or ("nodes", why its pods have none)
    text: str


class CycleHook(Protocol):
    """What the ledger asks of a running cycle (cycle.py): to scan a queue again."""

    def touch(self, state: QueueState, rescan: bool) -> None: ...


_UNIT_FIELDS = tuple(f.name for f in fields(UnitInfo) if f.init)
_unit_values = attrgetter(*_UNIT_FIELDS)


def copy_unit(unit: UnitInfo, **changes: object) -> UnitInfo:
    """``dataclasses.replace(unit, **changes)`` in a fraction of its time (UnitInfo has no
    ``__post_init__``): every unit set is copied."""
    copy = UnitInfo(*_unit_values(unit))
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


class Ledger:
    """The accounting of units, quotas' usage, holds, starting units and victims.

    ``quotas`` and ``queues`` are the Engine's inputs (read, never written here).
    """

    def __init__(self, config: EngineConfig, quotas: Mapping[str, QuotaInfo], queues: Mapping[str, QueueInfo],
                 capacity: ResourceList | None) -> None:
        self.config = config
        self.quotas = quotas
        self.queues = queues
        self.units: dict[str, UnitRecord] = {}
        # The parents of deleted quotas some admitted unit still names (see ``charged_at``).
        self.removed_parents: dict[str, str | None] = {}
        self.tree = QuotaTree([], capacity, config.oversell_rate, config.koordinator)
        self.directory: Directory = build_directory({}, {}, {})
        # What ``resolve`` said under this directory, by what it reads of a unit.
        self.resolved: dict[tuple[str | None, str | None, str, str | None], Resolved | str] = {}
        self.qs: dict[str, QueueState] = {}
        # Quotas with flavors (a parent, or a flavor itself) -> them; set by the Engine at a rebuild.
        self.flavorings: Mapping[QuotaNode, Flavoring] = {}
        self.leaf_queues: dict[QuotaNode, list[QueueState]] = {}
        self.victims: dict[QuotaNode, list[tuple[float, str]]] = {}  # preemptible, by admission time
        self.borrowers: set[QuotaNode] = set()  # quotas using more than their runtime share
        self.used_by_name: dict[str, ResourceList] = {}
        self.fair: Fairness | None = None  # budgets and usage history, when any (fairness.py)
        self.backoff: list[tuple[float, str]] = []  # (requeue_at, unit)
        self.retry: list[tuple[float, str]] = []  # (when, queue): a queue scanned again then
        self.retry_at: dict[str, float] = {}
        self.stale: set[str] = set()  # queues to scan at the next cycle
        self.changed: dict[str, str] = {}  # unit -> its new message, since the shell last asked
        self.rebuild_needed = True  # quotas or queues changed: the Engine derives the ledger again
        self.now = -math.inf
        self.charges = 0  # admissions and releases so far: no usage moved while it stays the same
        self.cycle: CycleHook | None = None  # the cycle under way, if any
        self.room = NodeRoom(config.topology_levels)
        # Queues whose units wait for room on the nodes, with the placements that failed for them.
        self.node_waiters: dict[str, dict[PlacementKey, NodeWait]] = {}
        self.room_grew = False  # since the waiters were last looked at
        self.starting = Starting(self.pods_changed)  # admitted units whose pods do not all run yet
        self.done = Done()  # admitted units whose pods have all succeeded: no victims for a while

    def reset(self, tree: QuotaTree, directory: Directory) -> None:
        """Forget everything derived from quotas and queues (units are attached again after)."""
        self.tree = tree
        self.directory = directory
        self.resolved = {}
        self.qs = {}
        self.flavorings = {}
        self.leaf_queues = {}
        self.victims = {}
        self.borrowers = set()
        self.used_by_name = {}
        self.backoff = []
        self.retry = []
        self.retry_at = {}

    # --- units coming and going ---------------------------------------------------
    def attach(
        self,
        record: UnitRecord,
        previous: UnitState | None,
        backoff: bool = False,
        bulk: dict[str, list[tuple[Entry, Shape]]] | None = None,
    ) -> None:
        """Put a detached unit where its info says: charged (admitted), in back-off, queued
        (into ``bulk`` when given: loaded at once after a rebuild), or parked with why."""
        info = record.info
        if info.admitted_quota is not None:
            record.state = UnitState.ADMITTED
            record.node = self.charged_at(info.admitted_quota)
            self.charge(record, 1)
            return
        asks = (info.invalid, info.queue_name, info.namespace, info.quota_name)
        found = self.resolved.get(asks)
        if found is None:
            if len(self.resolved) >= RESOLVED_KEPT:
                self.resolved.clear()
            found = self.resolved[asks] = resolve(info, self.directory)
        if isinstance(found, str):
            record.state = UnitState.PARKED
            self.say(record, found)
            return
        leaf = self.tree.nodes[found.quota.name]
        state = self.qs.get(found.queue.key)
        if state is None:  # the quota's own queue, not (yet) set by the shell
            state = self.new_queue(found.queue, leaf)
        if state.flavors is None and leaf.children:  # (a parent whose flavors are all unusable)
            record.state = UnitState.PARKED
            self.say(record, f"quota {leaf.name} is a parent quota with no usable flavor; a job must use one "
                             "of the quotas below it")
            return
        if state.flavors is not None:
            home = flavor_home(state.flavors, info)
            if isinstance(home, str):
                record.state = UnitState.PARKED
                self.say(record, home)
                return
            leaf = home  # (its pending request counts at a leaf: the tree keeps demand there)
        record.node = leaf
        record.queue = state
        self.tree.add_pending(leaf, info.request, 1)
        if backoff or (info.requeue_at is not None and info.requeue_at > self.now):
            record.state = UnitState.BACKOFF
            assert info.requeue_at is not None
            heapq.heappush(self.backoff, (info.requeue_at, record.key))
            if not record.message:
                self.say(record, f"waiting out a back-off after {info.attempts} attempts")
            return
        record.state = UnitState.QUEUED
        if bulk is not None:
            bulk.setdefault(state.key, []).append((record.entry, record.shape))
        else:
            self.join(state, record)
        if previous is not UnitState.QUEUED or not record.message:
            self.say(record, messages.queued(state.key, state.leaf.name, state.info.policy))
            self.tell_as_first(state, record)

    def detach(self, record: UnitRecord) -> None:
        """Take a unit out of where it stands (releasing what it holds): it is parked, unsaid."""
        state = record.state
        if state is UnitState.ADMITTED:
            self.charge(record, -1)
        elif state is UnitState.QUEUED:
            assert record.queue is not None and record.node is not None
            record.queue.pending.remove(record.entry, record.shape)
            self.tree.add_pending(record.node, record.info.request, -1)
            self.touch(record.queue)
        elif state is UnitState.BACKOFF:
            assert record.node is not None
            self.tree.add_pending(record.node, record.info.request, -1)
        record.state = UnitState.PARKED
        record.queue = None
        record.node = None
        self.changed.pop(record.key, None)

    def charged_at(self, name: str) -> QuotaNode:
        """Where a unit admitted into quota ``name`` is charged: that quota, else (made
        unusable or deleted while the unit runs) its nearest usable ancestor, whose max
        its room still counts against, else the cluster."""
        nodes = self.tree.nodes
        node = nodes.get(name)
        if node is not None:
            return node
        current = name
        for _ in range(len(self.quotas) + len(self.removed_parents)):  # (a cycle of parents ends it)
            quota = self.quotas.get(current)
            parent = quota.parent if quota is not None else self.removed_parents.get(current)
            if parent is None:
                break
            current = parent
            node = nodes.get(current)
            if node is not None:
                return node
        return self.tree.root

    def tell_as_first(self, state: QueueState, record: UnitRecord) -> None:
        """A unit that joins right behind the first unit of its request, which waits, is
        told why as that one was: a scan tells those behind a unit only when its reason
        changes, not when they come."""
        first = state.pending.first_before(record.entry, record.shape, BLOCKED_WINDOW)
        if first is not None:
            told = self.units[first.key]
            if told.reason is not None and told.message == told.reason.text:
                self.say(record, told.message)

    def join(self, state: QueueState, record: UnitRecord) -> None:
        """A unit joins its queue's pending units: scan the queue again."""
        state.pending.add(record.entry, record.shape)
        state.told_blocker = None  # whoever waits behind the blocker, this one too, is told at the next scan
        self.touch(state)

    def send_back(self, record: UnitRecord, now: float, reason: str) -> float:
        """Release the unit's quota (if any) and put it in back-off; return requeue_at."""
        info = record.info
        queue = self.queues.get(info.admitted_queue) if info.admitted_queue is not None else None
        self.starting.stop(record.key)
        self.done.stop(record.key)
        self.detach(record)
        info.admitted_quota = info.admitted_queue = info.admitted_at = None
        info.placement = None
        info.attempts += 1
        delay = backoff_seconds(self.config, record.key, info.attempts, queue)
        info.requeue_at = now + delay
        self.attach(record, None, backoff=True)
        if record.state is UnitState.BACKOFF:
            self.say(record, messages.backing_off(reason, delay, info.attempts))
        return info.requeue_at

    # --- what admitted units hold -------------------------------------------------
    def charge(self, record: UnitRecord, sign: int, pending: bool = False) -> None:
        """Add or release an admitted unit's request, waking those who wait for room;
        ``pending``: it was counted as a pending request of its quota until now."""
        node = record.node
        assert node is not None
        info = record.info
        if sign > 0:
            record.charged = info.request if info.placement is None else _charged(info)
        if pending and record.charged is info.request:
            room = self.tree.admit(node, info.request)
        else:
            if pending:
                self.tree.add_pending(node, info.request, -1)
            room = self.tree.charge(node, record.charged, sign)
        if record.pinned:
            self.tree.pin(node, record.charged, sign)
        self.check_borrowing(node)
        self.charges += 1
        name = info.admitted_quota
        assert name is not None
        used = self.used_by_name.setdefault(name, {})
        for resource, amount in record.charged.items():
            used[resource] = used.get(resource, 0) + sign * amount
        if info.pod_sets:
            self.hold_room(record, sign)
        victims = self.victims.setdefault(node, [])
        item = (info.admitted_at if info.admitted_at is not None else -math.inf, record.key)
        if sign > 0:
            if not record.pinned:
                if not victims or victims[-1] <= item:
                    victims.append(item)  # (``insort``: admissions come in time order)
                else:
                    insort(victims, item)
            if room and node.parent is not None:
                self.wake_node(node.parent)
            return
        if not record.pinned:
            index = bisect_left(victims, item)
            if index < len(victims) and victims[index] == item:
                del victims[index]
        for upper in node.path:
            if upper.waiters or upper.hold_waiters:  # (``wake_node`` has nothing to do else)
                self.wake_node(upper)
        for state in self.leaf_queues.get(node, ()):
            self.touch(state)  # its own units may stop borrowing, and pass holds

    def hold_room(self, record: UnitRecord, sign: int) -> None:
        """An admitted unit's pods take room on the nodes planned for them (a unit found
        holding quota, or admitted on quota alone: where they fit now); released, they give
        it back."""
        room = self.room
        info = record.info
        if sign < 0:
            if room.release(record.key):
                self.room_grew = True
                if self.cycle is not None:  # victims' room, within the cycle
                    self.wake_nodes()
            return
        if not room:
            return
        placement = info.placement
        if placement is None or not placement.nodes:
            counts = dict(placement.counts) if placement is not None else None
            planned = room.best_effort(info.pod_sets, counts).nodes
            info.placement = replace(placement or Placement(), nodes=planned)
        assert info.placement is not None
        room.hold(record.key, info.placement.nodes)

    def check_borrowing(self, node: QuotaNode) -> None:
        """Keep ``borrowers`` (the reclaim candidates) up to date for ``node``."""
        used = node.used
        for name, share in node.runtime.items():
            if used.get(name, 0) > share:
                self.borrowers.add(node)
                return
        self.borrowers.discard(node)

    # --- units whose pods do not all run yet (wait-for-pods-running, starting.py) ----
    def pods_changed(self, queue: str) -> None:
        """A unit of ``queue`` started or stopped waiting for its pods: scan it again if it waits for them."""
        state = self.qs.get(queue)
        if state is not None and state.info.wait_for_pods_running and not self.rebuild_needed:
            self.touch(state)

    def pods_blocker(self, state: QueueState) -> str | None:
        """The first unit admitted through ``state`` whose pods do not all run yet, when
        its Queue waits for them (koord-queue/wait-for-pods-running)."""
        if not state.info.wait_for_pods_running:
            return None
        return self.starting.first(state.key)

    # --- which queues to scan -----------------------------------------------------
    def touch(self, state: QueueState, rescan: bool = True) -> None:
        """Something that may change the queue's decisions happened: scan it (again).
        ``rescan`` False: only room at a node it waits on (cycle.py, ``room_left``)."""
        cycle = self.cycle
        if cycle is None:
            state.rescan = state.rescan or rescan
            self.stale.add(state.key)
        else:
            cycle.touch(state, rescan)

    def retry_later(self, state: QueueState, when: float) -> None:
        """Scan ``state`` again at ``when`` (a hold ripens, a victim's protection ends)."""
        if self.retry_at.get(state.key, math.inf) > when:
            self.retry_at[state.key] = when
            heapq.heappush(self.retry, (when, state.key))

    def wake_nodes(self, everyone: bool = False) -> None:
        """Room grew on the nodes: scan again the queues waiting for it, those of whose
        failed placements one may pass now (room grew on a node that takes one of its pods);
        ``everyone``: nodes came, went or changed, all of them."""
        self.room_grew = False
        still: dict[str, dict[PlacementKey, NodeWait]] = {}
        for key in sorted(self.node_waiters):
            failed = self.node_waiters[key]
            state = self.qs.get(key)
            if state is None:
                continue
            if everyone:
                self.touch(state)
            elif any(self.room.failing(placement) is None for placement in failed):
                state.node_woken.update(failed)
                self.touch(state, rescan=False)
            else:
                still[key] = failed
        self.node_waiters = still

    def wake_node(self, node: QuotaNode, exclude: str | None = None) -> None:
        """Scan again the queues waiting at ``node`` that might fit in its room now."""
        for by_hold in (False, True):
            waiters = node.hold_waiters if by_hold else node.waiters
            if not waiters:
                continue
            priorities = node.hold_waiter_priority
            still: dict[str, ResourceList] = {}
            for key, need in waiters.items():
                state = self.qs.get(key) if key != exclude else None
                priority = priorities.get(key) if by_hold else None
                if state is None:
                    if key == exclude:
                        still[key] = need
                    elif by_hold:
                        priorities.pop(key, None)
                elif has_room(node, need, priority, state.leaf):
                    state.woken.append((node, need, priority))
                    self.touch(state, rescan=False)
                    if by_hold:
                        priorities.pop(key, None)
                else:
                    still[key] = need
            if by_hold:
                node.hold_waiters = still
            else:
                node.waiters = still

    # --- queues -------------------------------------------------------------------
    def new_queue(self, queue: QueueInfo, leaf: QuotaNode) -> QueueState:
        state = QueueState(queue, leaf, self.threshold(queue), self.node_fit(queue))
        self.qs[queue.key] = state
        self.leaf_queues.setdefault(leaf, []).append(state)
        flavoring = self.flavorings.get(leaf)
        if flavoring is not None:
            state.flavors = flavoring
            for flavor in flavoring.flavors:  # room or shares moving in a flavor concern it too
                if flavor.node is not leaf:
                    self.leaf_queues.setdefault(flavor.node, []).append(state)
        return state

    def node_fit(self, queue: QueueInfo) -> bool:
        """The Queue's koord-queue/node-fit, else its quota's, else the engine's."""
        if queue.node_fit is not None:
            return queue.node_fit
        quota = self.quotas.get(queue.quota) if queue.quota is not None else None
        if quota is not None and quota.node_fit is not None:
            return quota.node_fit
        return self.config.node_fit

    def threshold(self, queue: QueueInfo) -> int:
        if queue.priority_threshold is not None:
            return queue.priority_threshold
        quota = self.quotas.get(queue.quota) if queue.quota is not None else None
        if quota is not None and quota.priority_threshold is not None:
            return quota.priority_threshold
        return self.config.default_priority_threshold

    def places(self, state: QueueState, info: UnitInfo) -> bool:
        """Whether the unit's pods must fit on the nodes to be admitted."""
        return state.node_fit and bool(info.pod_sets) and bool(self.room)

    # --- what units are told ------------------------------------------------------
    def say(self, record: UnitRecord, text: str) -> None:
        if record.message != text:
            record.message = text
            self.changed[record.key] = text

    def protect(self, protected: bool) -> float | None:
        """The protect time, for a unit's message, when only it keeps the unit from preempting."""
        return self.config.protect_seconds if protected else None


def has_room(node: QuotaNode, need: ResourceList, priority: int | None, leaf: QuotaNode) -> bool:
    """Whether ``node`` has room for the least ask of some resource in ``need``; for
    units that found its room held (``priority``: the highest of them), room not held
    against them for units of other quotas."""
    limit, used, held = node.limit, node.used, node.held
    for name, amount in need.items():
        room = limit.get(name, amount) - used.get(name, 0)
        if amount > room:
            continue
        if priority is None or amount <= room - held.get(name, 0):
            return True
        if amount <= room - held_against_borrower(node, leaf, name, priority):
            return True
    return False


def _charged(info: UnitInfo) -> ResourceList:
    """What an admitted unit holds of its quota: its request, less the pods an admission
    in part left out."""
    placement = info.placement
    if placement is None or not placement.counts:
        return info.request
    request = dict(info.request)
    for ps in info.pod_sets:
        left_out = ps.count - placement.count_of(ps.name, ps.count)
        if left_out:
            for name, amount in ps.request.items():
                request[name] = request.get(name, 0) - left_out * amount
    return request
