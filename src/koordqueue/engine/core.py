"""The Engine: the state of quotas, queues and units, and the scheduling cycle.

Inputs are idempotent upserts; a change of quotas or queues rebuilds the derived state
at the next cycle (rare), a change of a unit is applied at once in O(log n). A cycle
only looks at *stale* queues: those whose pending units changed, or that wait on a
node of the quota tree where room appeared, or whose runtime share moved, or whose
time (back-off, protection of victims) came. Within a cycle queues take turns by
Queue priority, then admissions within the quota's runtime share before those that
borrow, then fair share (the quota furthest below its runtime share first), one
admission per turn, so many units of every queue are admitted per cycle.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from itertools import islice
from operator import attrgetter

from koordqueue.api.constants import QueuePolicy
from koordqueue.engine import messages
from koordqueue.engine.backoff import backoff_seconds
from koordqueue.engine.fit import Misfit, borrowing, first_misfit, headroom, held_against_borrower
from koordqueue.engine.model import (
    Admission,
    CycleResult,
    EngineConfig,
    NodeInfo,
    Placement,
    PodSetInfo,
    Preemption,
    QueueInfo,
    QuotaInfo,
    QuotaStatus,
    ResourceList,
    Standing,
    UnitInfo,
)
from koordqueue.engine.pending import Entry, Heads, PendingQueue, Shape, shape_of
from koordqueue.engine.placement import CheckKey, NodeRoom, Unplaced, check_key
from koordqueue.engine.preemption import Candidate, binding, choose_victims
from koordqueue.engine.tenancy import Directory, Resolved, build_directory, named_quota, resolve
from koordqueue.engine.tree import Hold, QuotaNode, QuotaTree
from koordqueue.engine.validation import validate_quotas

MAX_SCANS_PER_CYCLE = 3  # a queue woken again within a cycle is scanned at most this often
# Units right behind a unit that waits are told why they wait (who blocks them, or the
# same limit for the same request) when that changes, not when only the amounts in it
# do; further back they keep the text they got when they were queued, so that a cycle
# rewrites a few messages per queue, not thousands. The views (``standing``,
# ``queue_positions``) work out every unit's reason, with today's amounts, when asked.
BLOCKED_WINDOW = 20
RESOLVED_KEPT = 4096  # distinct (invalid, queue, namespace, quota) a unit asks for, resolved
DEFAULT_CONFIG = EngineConfig()  # frozen, so one instance serves as the default


class _State(Enum):
    PARKED = "parked"  # cannot be queued (no usable quota or queue); has a message
    QUEUED = "queued"  # pending and eligible, in its queue
    BACKOFF = "backoff"  # pending, not eligible before info.requeue_at
    ADMITTED = "admitted"  # holds quota


@dataclass(slots=True, eq=False)
class _Unit:
    info: UnitInfo
    key: str
    entry: Entry
    shape: Shape
    charged: ResourceList  # what it holds of its quota when admitted: its request, or less (in part)
    elastic: bool  # some pod set may be admitted with fewer pods
    state: _State = _State.PARKED
    queue: _Queue | None = None  # resolved queue (queued, back-off)
    node: QuotaNode | None = None  # resolved quota (queued, back-off); charged node (admitted)
    message: str = ""
    reason: tuple[tuple[object, ...], str] | None = None  # its last misfit and its text, not to format it again
    check: CheckKey | None = None  # what a check of all its pods depends on (once asked for)
    protected: bool = False  # its last scan found units it could preempt, but within their protect time
    # It holds quota as a non-preemptible unit: never a victim, its request in ``pinned``
    # (tree.py). Set at admission: a label changed afterwards does not make a borrower safe.
    pinned: bool = False


@dataclass(slots=True, eq=False)
class _Queue:
    info: QueueInfo
    leaf: QuotaNode
    threshold: int
    node_fit: bool  # its units' pods must fit on the nodes (when nodes are known)
    pending: PendingQueue = field(default_factory=PendingQueue)
    holds: list[tuple[QuotaNode, Hold]] = field(default_factory=list)
    blocker: str | None = None  # the unit its last scan stopped at (Block, Intelligent)
    told_blocker: str | None = None  # the blocker the units behind it were last told about
    version: int = 0  # of its entry in the cycle's heap
    # Since its last scan, only room at nodes it waits on woke it (these, with the least
    # it asked there and, for room held, the priority it was held against: None when not
    # held); nothing else that could change its decisions happened.
    woken: list[tuple[QuotaNode, ResourceList, int | None]] = field(default_factory=list)
    # Likewise its failed placement checks that room grown on the nodes may let pass now.
    node_woken: dict[CheckKey, _NodeWait] = field(default_factory=dict)
    rescan: bool = True  # something other than room woke it: scan it in any case
    misfits_above: bool = False  # a unit of its last scan ran into a limit above its own quota
    reclaims: bool = False  # a unit of its last scan looked for capacity to reclaim
    key: str = field(init=False, default="")  # its Queue's key, kept (read on every turn)

    def __post_init__(self) -> None:
        self.key = self.info.key

    def stops_at(self, priority: int) -> bool:
        """Whether a misfit of this priority stops the rest of the queue."""
        policy = self.info.policy
        if policy == QueuePolicy.BLOCK:
            return True
        return policy == QueuePolicy.INTELLIGENT and priority >= self.threshold


@dataclass(slots=True)
class _NodeWait:
    """A failed placement check a queue waits on: what to check again, and the units told why they wait."""

    pod_sets: tuple[PodSetInfo, ...]
    counts: dict[str, int] | None
    units: list[str]


@dataclass(slots=True)
class _Scan:
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


_Held = dict[tuple[str, int, bool], int]
"""What a queue's holds at one node keep: (resource, priority, ripe) -> amount."""

_Turn = tuple[int, bool, float, str, int, int]
"""A queue's turn in a cycle: (-Queue priority, its next unit borrows, share, key, version,
the engine's charges then: when they are the same at its turn, its share is too)."""


_UNIT_FIELDS = tuple(f.name for f in fields(UnitInfo) if f.init)
_unit_values = attrgetter(*_UNIT_FIELDS)


def copy_unit(unit: UnitInfo, **changes: object) -> UnitInfo:
    """``dataclasses.replace(unit, **changes)`` in a fraction of its time (UnitInfo has no
    ``__post_init__``): every unit set is copied."""
    copy = UnitInfo(*_unit_values(unit))
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


def _share(leaf: QuotaNode) -> float:
    """How far a quota is into its runtime share (its most used resource)."""
    worst = 0.0
    used = leaf.used
    for name, runtime in leaf.runtime.items():
        amount = used.get(name, 0)
        if amount > 0:
            share = amount / runtime if runtime > 0 else math.inf
            if share > worst:
                worst = share
    return worst


class Engine:
    """Decides which units are admitted and which are preempted; see the module doc."""

    def __init__(self, config: EngineConfig = DEFAULT_CONFIG) -> None:
        self._config = config
        self._capacity = None if config.cluster_capacity is None else dict(config.cluster_capacity)
        self._quotas: dict[str, QuotaInfo] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._units: dict[str, _Unit] = {}
        self._reasons: dict[str, str] = {}
        # The parents of deleted quotas some admitted unit still names (see ``_charged_at``).
        self._removed_parents: dict[str, str | None] = {}
        self._tree = QuotaTree([], self._capacity, config.oversell_rate, config.koordinator)
        self._directory: Directory = build_directory({}, {}, {})
        # What ``resolve`` said under this directory, by what it reads of a unit.
        self._resolved: dict[tuple[str | None, str | None, str, str | None], Resolved | str] = {}
        self._qs: dict[str, _Queue] = {}
        self._leaf_queues: dict[QuotaNode, list[_Queue]] = {}
        self._victims: dict[QuotaNode, list[tuple[float, str]]] = {}  # preemptible, by admission time
        self._borrowers: set[QuotaNode] = set()  # quotas using more than their runtime share
        self._used_by_name: dict[str, ResourceList] = {}
        self._backoff: list[tuple[float, str]] = []
        self._retry: list[tuple[float, str]] = []
        self._retry_at: dict[str, float] = {}
        self._stale: set[str] = set()
        self._changed: dict[str, str] = {}
        self._rebuild_needed = True
        self._now = -math.inf
        self._heap: list[_Turn] | None = None  # during a cycle
        self._charges = 0  # admissions and releases so far: no usage moved while it stays the same
        self._admitted_now: set[str] = set()  # units admitted in this cycle: never its victims
        # Within a cycle, until some usage changes: (leaf, top, resources) -> what may be reclaimed.
        self._reclaim_cache: dict[tuple[QuotaNode, QuotaNode, frozenset[str]], tuple[list[Candidate], float]] = {}
        self._scans: dict[str, _Scan] = {}
        self._room = NodeRoom(config.topology_levels)
        # Queues whose units wait for room on the nodes, with the checks that failed for them.
        self._node_waiters: dict[str, dict[CheckKey, _NodeWait]] = {}
        self._room_grew = False  # since the waiters were last looked at
        # Admitted units whose pods do not all run yet, with the key of the Queue they were
        # admitted through, and the same by Queue in admission order: a Queue with
        # koord-queue/wait-for-pods-running admits nothing more while it has one.
        self._starting: dict[str, str] = {}
        self._starting_in: dict[str, dict[str, None]] = {}

    # --- inputs -------------------------------------------------------------------
    def set_quota(self, quota: QuotaInfo) -> None:
        old = self._quotas.get(quota.name)
        if old == quota:
            return
        self._quotas[quota.name] = quota
        self._removed_parents.pop(quota.name, None)
        if self._rebuild_needed or old is None or not _limits_only(old, quota) or quota.name in self._reasons:
            self._rebuild_needed = True
            return
        reasons = validate_quotas(self._quotas)
        if reasons != self._reasons:  # it (or another) becomes unusable: derive everything again
            self._rebuild_needed = True
            return
        # Only its min, max, weight or lending moved: taken in place, without loading every
        # unit again. Its siblings' and its own units may find room (or lose it).
        node = self._tree.nodes[quota.name]
        self._tree.update(quota)
        for upper in node.path:
            self._wake_node(upper)
        for leaf in self._tree.leaves_under(node.parent or self._tree.root):
            for state in self._leaf_queues.get(leaf, ()):
                self._touch(state)

    def remove_quota(self, name: str) -> None:
        removed = self._quotas.pop(name, None)
        if removed is not None:
            self._removed_parents[name] = removed.parent
            self._rebuild_needed = True

    def set_queue(self, queue: QueueInfo) -> None:
        old = self._queues.get(queue.key)
        if old == queue:
            return
        self._queues[queue.key] = queue
        state = self._qs.get(queue.key)
        if not self._rebuild_needed and state is not None and state.info.quota == queue.quota:
            # Same binding: the same units use it; only its order and policy change.
            state.info = queue
            state.threshold = self._threshold(queue)
            state.node_fit = self._node_fit(queue)
            self._touch(state)
            return
        self._rebuild_needed = True

    def remove_queue(self, key: str) -> None:
        if self._queues.pop(key, None) is not None:
            self._rebuild_needed = True

    def set_cluster_capacity(self, capacity: ResourceList | None) -> None:
        capacity = None if capacity is None else dict(capacity)
        if capacity == self._capacity:
            return
        self._capacity = capacity
        if not self._rebuild_needed:
            self._tree.set_capacity(capacity)
            for state in self._qs.values():
                self._touch(state)

    def set_koordinator(self, on: bool) -> None:
        """Whether koord-scheduler schedules the pods (EngineConfig.koordinator): a
        controller in auto mode turns it on once it sees Koordinator's quotas."""
        if on != self._config.koordinator:
            self._config = replace(self._config, koordinator=on)
            self._rebuild_needed = True

    @property
    def koordinator(self) -> bool:
        return self._config.koordinator

    def set_node(self, node: NodeInfo) -> None:
        """A node, new or changed: where units' pods may go (node fit, topology)."""
        if self._room.set_node(node):
            self._wake_nodes(everyone=True)

    def remove_node(self, name: str) -> None:
        if self._room.remove_node(name):
            self._wake_nodes(everyone=True)

    def set_node_usage(self, node: str, used: ResourceList) -> None:
        """What the pods bound to ``node`` request (every pod, of units or not)."""
        if self._room.set_usage(node, used):
            self._room_grew = True

    def set_unit_pods(self, key: str, pods: dict[tuple[str, str], int]) -> None:
        """The unit's pods bound to nodes: (pod set, node) -> how many."""
        if self._room.set_pods(key, pods):
            self._room_grew = True

    def node_free(self, node: str) -> ResourceList:
        """The room left on ``node`` as placement sees it."""
        return self._room.free(node)

    def set_unit(self, unit: UnitInfo, owned: bool = False) -> None:
        """A unit, new or changed. ``owned``: the caller hands ``unit`` over and never
        touches it again, so it is kept as it is, not copied (the simulator's fresh units)."""
        key = unit.key
        old = self._units.get(key)
        if old is not None and old.info == unit:
            return
        pod_sets = unit.pod_sets
        record = _Unit(unit if owned else copy_unit(unit), key,
                       (-unit.priority, unit.created, unit.namespace, unit.name, key),
                       shape_of(unit.request, pod_sets, unit.preemptible), unit.request,
                       bool(pod_sets) and any(ps.elastic for ps in pod_sets))
        record.pinned = not unit.preemptible
        if old is not None and old.state is _State.ADMITTED and unit.admitted_quota is not None:
            record.pinned = record.pinned and old.pinned  # as it was admitted (``_Unit.pinned``)
        previous = None
        if old is not None:
            previous = old.state
            record.message = old.message
            self._detach(old)
        self._units[key] = record
        if unit.pod_sets or (old is not None and old.info.pod_sets):
            self._room.track(key, unit.pod_sets)
        starting = self._starting.get(key)
        if starting is not None and (unit.admitted_quota is None or starting != unit.admitted_queue):
            self._not_starting(key)
        if not self._rebuild_needed:
            self._attach(record, previous)

    def remove_unit(self, key: str) -> None:
        record = self._units.pop(key, None)
        if record is not None:
            if key in self._starting:
                self._not_starting(key)
            self._detach(record)
            if record.info.pod_sets:
                self._room.forget(key)

    def requeue(self, key: str, now: float, reason: str) -> float:
        record = self._units[key]
        if self._rebuild_needed:
            self._rebuild()
        return self._send_back(record, now, reason)

    def set_pods_running(self, key: str, running: bool) -> bool:
        """Whether all pods of an admitted unit run (the shell watches them). A unit the
        engine admits starts out with pods not running; one handed in admitted (loaded
        after a restart) counts as running until the shell says otherwise. Returns
        whether that changed."""
        if running and key not in self._starting:
            return False  # (it was not waiting for them)
        record = self._units.get(key)
        info = record.info if record is not None else None
        before = self._starting.get(key)
        if running or info is None or info.admitted_quota is None or info.admitted_queue is None:
            self._not_starting(key)
        else:
            self._now_starting(key, info.admitted_queue)
        return self._starting.get(key) != before

    def revert_admission(self, key: str) -> None:
        record = self._units.get(key)
        if record is None or record.info.admitted_quota is None:
            return
        self._not_starting(key)
        if self._rebuild_needed:
            record.info.admitted_quota = record.info.admitted_queue = record.info.admitted_at = None
            record.info.placement = None
            return
        self._detach(record)
        info = record.info
        info.admitted_quota = info.admitted_queue = info.admitted_at = None
        info.placement = None
        self._attach(record, None)

    # --- the cycle ----------------------------------------------------------------
    def schedule(self, now: float) -> CycleResult:
        result = CycleResult()
        self._now = now
        self._sync()
        self._expire(now)
        if self._stale:
            self._run_cycle(now, result)
        result.messages = self._changed
        self._changed = {}
        result.next_wakeup = self._next_wakeup(now)
        return result

    def _run_cycle(self, now: float, result: CycleResult) -> None:
        heap: list[_Turn] = []
        self._heap = heap
        self._admitted_now = set()
        self._scans = {}
        stale = sorted(self._stale)
        self._stale = set()
        for key in stale:
            state = self._qs.get(key)
            if state is not None:
                self._push(state)
        try:
            while heap:
                _, _, share, key, version, charges = heapq.heappop(heap)
                state = self._qs[key]
                if version != state.version:
                    continue
                # Others of its quota were admitted meanwhile (no usage moved: no share did).
                if charges != self._charges and _share(state.leaf) > share:
                    self._push(state)
                    continue
                if self._step(state, now, result):
                    self._push(state)
        finally:
            self._heap = None
            self._scans = {}
            self._admitted_now = set()
            self._reclaim_cache = {}

    def _push(self, state: _Queue) -> None:
        assert self._heap is not None
        state.version += 1
        scan = self._scans.get(state.key)
        borrows = scan is not None and scan.borrows
        heapq.heappush(self._heap, (-state.info.priority, borrows, _share(state.leaf), state.key, state.version,
                                    self._charges))

    def _step(self, state: _Queue, now: float, result: CycleResult) -> bool:
        """Go on scanning ``state`` until one unit is admitted (True) or none can be."""
        scan = self._scans.get(state.key)
        if scan is None or scan.restart:
            if not state.rescan and not self._room_left(state) and not self._nodes_left(state):
                # Woken by room at a quota node it waits on or on the nodes its pods wait
                # for, which others took before its turn: its scan would end where the last
                # one did.
                if scan is not None:
                    scan.restart = False
                    scan.done = True
                return False
            scan = self._start_scan(state, 1 if scan is None else scan.rounds + 1)
        heads = scan.heads
        leaf = state.leaf
        depth = state.info.max_depth
        wait_for_pods = state.info.wait_for_pods_running
        places = state.node_fit and bool(self._room)  # (``_places`` less the unit's pod sets)
        while (head := heads.peek()) is not None:
            entry, shape, least_asked = head
            if wait_for_pods and self._pods_blocker(state) is not None:
                # koord-queue/wait-for-pods-running: nothing more until those pods run.
                heads.clear()
                self._tell_blocked(state, 0)
                break
            if depth is not None and state.pending.position(entry) > depth:
                # koord-queue/max-depth: the rest of the queue is not looked at.
                heads.clear()
                self._tell_blocked(state, depth)
                break
            record = self._units[entry[4]]
            if scan.bar and self._below_bar(scan, record, least_asked):
                continue
            info = record.info
            misfit = first_misfit(leaf, info.request, info.priority, preemptible=info.preemptible)
            if misfit is None and not scan.borrows and borrowing(leaf, info.request):
                # As in Kueue: admissions within runtime shares come first in a cycle, so
                # that a borrower does not take what another quota is about to claim.
                scan.borrows = True
                return True
            heads.pop()
            record.protected = False
            placement: Placement | None = None
            unplaced: Unplaced | None = None
            waits: CheckKey | None = None  # the failed check whose room it waits for
            waits_counts: dict[str, int] | None = None  # its pod counts, when not all of them
            if misfit is None and places and info.pod_sets:
                if record.check is None:
                    record.check = check_key(info.pod_sets)
                found = self._room.place(info.pod_sets, key=record.check)
                if isinstance(found, Unplaced):
                    unplaced = found
                    waits = record.check
                else:
                    placement = found
            admit = misfit is None and unplaced is None
            least: Misfit | Unplaced | None = None  # an elastic unit: why not even its least
            if not admit and record.elastic:
                placement, least = self._in_part(record, state)
                admit = placement is not None
                if isinstance(least, Unplaced):  # no fewer pods fit either: it waits for room for its least
                    elastic = next(ps for ps in info.pod_sets if ps.elastic)
                    waits_counts = {elastic.name: elastic.min_count or 0}
                    waits = check_key(info.pod_sets, waits_counts)
            by_quota = False  # it fits neither its quota nor by preemption, whatever its pods
            if not admit and misfit is not None:
                admit, placement, by_quota = self._preempt_for(record, state, misfit, now, result)
                if not admit and least is not None:  # it waits for room for its least, not its most
                    misfit, unplaced = (least, None) if isinstance(least, Misfit) else (None, least)
            if admit:
                self._admit(record, state, now, result, placement)
                following = state.pending.next_of(shape)
                if following is not None:
                    heads.push(following, shape)
                scan.admitted = True
                return True
            # Same request, same or lower priority: the rest of this stream waits too.
            if unplaced is not None:
                assert waits is not None
                told = self._note_unplaced(record, state, unplaced, waits, waits_counts)
            else:
                assert misfit is not None
                told = self._note_misfit(record, state, misfit, now)
                if by_quota and not isinstance(least, Unplaced):
                    # The heads of its group (the same request after it) wait as it does.
                    units, text = self._units, record.message
                    for dropped in heads.drop_group():
                        other = units[dropped[4]]
                        if other.message != text:  # _say, inline: a group can have many heads
                            self._say(other, text)
                    if misfit.node is leaf:  # (``_raise_bar`` looks no further else)
                        self._raise_bar(scan, state, misfit, text)
            if state.stops_at(info.priority) and not _never(misfit, unplaced):
                # (a unit that can never fit is passed over: nothing that ends makes room for it)
                told = told or state.told_blocker != record.key
                state.blocker = state.told_blocker = record.key
                heads.clear()
                if told:
                    for follower in islice(state.pending.ordered(), 1, BLOCKED_WINDOW + 1):
                        other = self._units[follower[4]]
                        self._say(other, self._live_message(other))
            elif told:
                for follower in state.pending.followers(shape, BLOCKED_WINDOW):
                    self._say(self._units[follower[4]], record.message)
        self._finish_scan(state, scan)
        return False

    def _raise_bar(self, scan: _Scan, state: _Queue, misfit: Misfit, text: str) -> None:
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

    def _below_bar(self, scan: _Scan, record: _Unit, least: dict[str, int]) -> bool:
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
        self._say(record, text)
        units = self._units
        for dropped in heads.drop_group():
            other = units[dropped[4]]
            if other.message != text:
                self._say(other, text)
        return True

    def _pods_blocker(self, state: _Queue) -> str | None:
        """The first unit admitted through ``state`` whose pods do not all run yet, when
        its Queue waits for them (koord-queue/wait-for-pods-running)."""
        if not state.info.wait_for_pods_running:
            return None
        units = self._starting_in.get(state.key)
        return next(iter(units)) if units else None

    def _tell_blocked(self, state: _Queue, start: int) -> None:
        """Tell the pending units from position ``start`` + 1 on (the first of them: see
        ``BLOCKED_WINDOW``) why their queue's scan stops before them."""
        units = islice(state.pending.ordered(), start, start + BLOCKED_WINDOW + 1)
        for position, entry in enumerate(units, start=start + 1):
            other = self._units[entry[4]]
            self._say(other, self._live_message(other, position=position))

    def _now_starting(self, key: str, queue: str, touch: bool = True) -> None:
        before = self._starting.get(key)
        if before == queue:
            return
        if before is not None:
            self._not_starting(key)
        self._starting[key] = queue
        self._starting_in.setdefault(queue, {})[key] = None
        if touch:
            self._pods_changed(queue)

    def _not_starting(self, key: str) -> None:
        queue = self._starting.pop(key, None)
        if queue is None:
            return
        units = self._starting_in[queue]
        del units[key]
        if not units:
            del self._starting_in[queue]
        self._pods_changed(queue)

    def _pods_changed(self, queue: str) -> None:
        """A unit of ``queue`` started or stopped waiting for its pods: scan it again if it waits for them."""
        state = self._qs.get(queue)
        if state is not None and state.info.wait_for_pods_running and not self._rebuild_needed:
            self._touch(state)

    def _start_scan(self, state: _Queue, rounds: int) -> _Scan:
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
        self._node_waiters.pop(state.key, None)  # its scan finds what it waits for anew
        scan = _Scan(state.pending.heads(), old, rounds)
        self._scans[state.key] = scan
        return scan

    def _finish_scan(self, state: _Queue, scan: _Scan) -> None:
        scan.done = True
        if state.reclaims or state.info.preemption:
            # Whether its units may take capacity from others depends on more than room
            # (who borrows, whose protection ends): such a queue is scanned whenever woken.
            state.rescan = True
        if scan.admitted and state.holds:
            # Held for a unit that a later unit of its quota, admitted since, may have left
            # short of its own quota: scanned again, it holds only what it still can use, and
            # what it lets go wakes those it kept out (below, at the end of that scan).
            self._touch(state)
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
                self._wake_node(node, exclude=state.key)

    def _note_misfit(self, record: _Unit, state: _Queue, misfit: Misfit, now: float) -> bool:
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
        if reason is not None and reason[0] == key:
            told = False
        else:  # told when what it waits for differs, not only the amounts asked and used
            last = reason[0] if reason is not None else None
            told = last is None or last[0] is not node or last[1] != key[1] or last[4:] != key[4:]
            reason = record.reason = (key, messages.waiting(leaf, misfit, info.priority, self._protect(protected)))
        if record.message != reason[1]:  # (``_say``)
            record.message = reason[1]
            self._changed[record.key] = reason[1]
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
                    self._retry_later(state, ripe)
            child = upper
        return told

    def _preempt_for(
        self, record: _Unit, state: _Queue, misfit: Misfit, now: float, result: CycleResult
    ) -> tuple[bool, Placement | None, bool]:
        """Make room for ``record`` by reclaim or priority preemption: whether it did,
        where its pods go (when they are placed), in the room its victims give back, and
        whether its request and priority alone kept it from doing so (not its pods)."""
        if misfit.hold is not None or misfit.pinned or misfit.never:  # victims free no min of its own
            return False, None, True
        leaf = state.leaf
        info = record.info
        reclaim = self._config.reclaim and not borrowing(leaf, info.request)
        if not reclaim and not state.info.preemption:
            return False, None, True
        top, names = binding(leaf, info.request)
        if top is None:
            return False, None, True
        reclaim = reclaim and top is not leaf and all(name in leaf.runtime for name in names)
        if not reclaim and not state.info.preemption:
            return False, None, True
        state.reclaims = state.reclaims or reclaim
        protect = self._config.protect_seconds
        candidates: list[Candidate] = []
        free_at = math.inf  # when a protected candidate stops being protected
        if reclaim:
            found, free_at = self._reclaim_candidates(leaf, top, names, now)
            candidates += found
        if state.info.preemption:
            for admitted_at, key in self._victims.get(leaf, ()):
                victim = self._units[key]
                if victim.info.priority >= info.priority or key in self._admitted_now:
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
                self._retry_later(state, free_at)
            return False, None, True
        placement = None
        if self._places(state, info):
            # Preemption makes room in quotas, not on nodes: only when the victims' room on
            # the nodes is enough for its pods too.
            placed = self._room.place(info.pod_sets, released=[c.key for c in chosen])
            if isinstance(placed, Unplaced):
                return False, None, False
            placement = placed
        reasons = [self._preemption_reason(c, record, leaf, names) for c in chosen]
        for candidate, reason in zip(chosen, reasons, strict=True):
            requeue_at = self._send_back(self._units[candidate.key], now, reason)
            result.preempted.append(
                Preemption(candidate.key, candidate.node.name, record.key, reason, requeue_at)
            )
        return True, placement, False

    def _reclaim_candidates(
        self, leaf: QuotaNode, top: QuotaNode, names: frozenset[str], now: float
    ) -> tuple[list[Candidate], float]:
        """Units under ``top`` of quotas above their runtime share in ``names`` that may be
        taken back for a unit of ``leaf``, and when the first protected one stops being
        protected. Kept for the rest of the cycle until some usage changes: the heads of
        a queue that do not fit ask the same question again and again."""
        key = (leaf, top, names)
        known = self._reclaim_cache.get(key)
        if known is not None:
            return known
        protect = self._config.protect_seconds
        candidates: list[Candidate] = []
        free_at = math.inf
        on_path = set(leaf.path)
        for other in self._borrowers:
            victims = self._victims.get(other)
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
                if unit_key in self._admitted_now:
                    continue
                victim = self._units[unit_key]
                candidates.append(
                    Candidate(unit_key, other, victim.charged, victim.info.priority, admitted_at,
                              victim.entry, chain)
                )
        self._reclaim_cache[key] = (candidates, free_at)
        return candidates, free_at

    def _preemption_reason(
        self, candidate: Candidate, preemptor: _Unit, leaf: QuotaNode, names: frozenset[str]
    ) -> str:
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

    def _protect(self, protected: bool) -> float | None:
        """The protect time, for a unit's message, when only it keeps the unit from preempting."""
        return self._config.protect_seconds if protected else None

    def _retry_later(self, state: _Queue, when: float) -> None:
        if self._retry_at.get(state.key, math.inf) > when:
            self._retry_at[state.key] = when
            heapq.heappush(self._retry, (when, state.key))

    def _admit(
        self, record: _Unit, state: _Queue, now: float, result: CycleResult, placement: Placement | None = None
    ) -> None:
        info = record.info
        state.pending.remove(record.entry, record.shape)
        info.admitted_quota = state.leaf.name
        info.admitted_queue = state.key
        info.admitted_at = now
        info.requeue_at = None
        info.placement = placement
        record.state = _State.ADMITTED
        record.queue = None
        record.node = state.leaf
        record.pinned = not info.preemptible
        self._charge(record, 1, pending=True)
        self._admitted_now.add(record.key)
        self._now_starting(record.key, state.key, touch=False)  # (its scan looks before the next unit)
        record.message = ""
        self._changed.pop(record.key, None)
        # The placement decided, not the nodes guessed for a unit admitted on quota alone.
        result.admitted.append(Admission(record.key, state.leaf.name, state.key, placement))

    def _send_back(self, record: _Unit, now: float, reason: str) -> float:
        """Release the unit's quota (if any) and put it in back-off; return requeue_at."""
        info = record.info
        queue = self._queues.get(info.admitted_queue) if info.admitted_queue is not None else None
        self._not_starting(record.key)
        self._detach(record)
        info.admitted_quota = info.admitted_queue = info.admitted_at = None
        info.placement = None
        info.attempts += 1
        delay = backoff_seconds(self._config, record.key, info.attempts, queue)
        info.requeue_at = now + delay
        self._attach(record, None, backoff=True)
        if record.state is _State.BACKOFF:
            self._say(record, messages.backing_off(reason, delay, info.attempts))
        return info.requeue_at

    # --- state changes of units ---------------------------------------------------
    def _attach(
        self,
        record: _Unit,
        previous: _State | None,
        backoff: bool = False,
        bulk: dict[str, list[tuple[Entry, Shape]]] | None = None,
    ) -> None:
        info = record.info
        if info.admitted_quota is not None:
            record.state = _State.ADMITTED
            record.node = self._charged_at(info.admitted_quota)
            self._charge(record, 1)
            return
        asks = (info.invalid, info.queue_name, info.namespace, info.quota_name)
        found = self._resolved.get(asks)
        if found is None:
            if len(self._resolved) >= RESOLVED_KEPT:
                self._resolved.clear()
            found = self._resolved[asks] = resolve(info, self._directory)
        if isinstance(found, str):
            record.state = _State.PARKED
            self._say(record, found)
            return
        leaf = self._tree.nodes[found.quota.name]
        state = self._qs.get(found.queue.key)
        if state is None:  # the quota's own queue, not (yet) set by the shell
            state = self._new_queue(found.queue, leaf)
        record.node = leaf
        record.queue = state
        self._tree.add_pending(leaf, info.request, 1)
        if backoff or (info.requeue_at is not None and info.requeue_at > self._now):
            record.state = _State.BACKOFF
            assert info.requeue_at is not None
            heapq.heappush(self._backoff, (info.requeue_at, record.key))
            if not record.message:
                self._say(record, f"waiting out a back-off after {info.attempts} attempts")
            return
        record.state = _State.QUEUED
        if bulk is not None:
            bulk.setdefault(state.key, []).append((record.entry, record.shape))
        else:
            self._join(state, record)
        if previous is not _State.QUEUED or not record.message:
            self._say(record, messages.queued(state.key, leaf.name, state.info.policy))
            self._tell_as_first(state, record)

    def _charged_at(self, name: str) -> QuotaNode:
        """Where a unit admitted into quota ``name`` is charged: that quota, else (made
        unusable or deleted while the unit runs) its nearest usable ancestor, whose max
        its room still counts against, else the cluster."""
        nodes = self._tree.nodes
        node = nodes.get(name)
        if node is not None:
            return node
        current = name
        for _ in range(len(self._quotas) + len(self._removed_parents)):  # (a cycle of parents ends it)
            quota = self._quotas.get(current)
            parent = quota.parent if quota is not None else self._removed_parents.get(current)
            if parent is None:
                break
            current = parent
            node = nodes.get(current)
            if node is not None:
                return node
        return self._tree.root

    def _tell_as_first(self, state: _Queue, record: _Unit) -> None:
        """A unit that joins right behind the first unit of its request, which waits, is
        told why as that one was: a scan tells those behind a unit only when its reason
        changes, not when they come."""
        first = state.pending.first_before(record.entry, record.shape, BLOCKED_WINDOW)
        if first is not None:
            told = self._units[first[4]]
            if told.reason is not None and told.message == told.reason[1]:
                self._say(record, told.message)

    def _join(self, state: _Queue, record: _Unit) -> None:
        """A unit joins its queue's pending units: scan the queue again."""
        state.pending.add(record.entry, record.shape)
        state.told_blocker = None  # whoever waits behind the blocker, this one too, is told at the next scan
        self._touch(state)

    def _detach(self, record: _Unit) -> None:
        state = record.state
        if state is _State.ADMITTED:
            self._charge(record, -1)
        elif state is _State.QUEUED:
            assert record.queue is not None and record.node is not None
            record.queue.pending.remove(record.entry, record.shape)
            self._tree.add_pending(record.node, record.info.request, -1)
            self._touch(record.queue)
        elif state is _State.BACKOFF:
            assert record.node is not None
            self._tree.add_pending(record.node, record.info.request, -1)
        record.state = _State.PARKED
        record.queue = None
        record.node = None
        self._changed.pop(record.key, None)

    def _charge(self, record: _Unit, sign: int, pending: bool = False) -> None:
        """Add or release an admitted unit's request, waking those who wait for room;
        ``pending``: it was counted as a pending request of its quota until now."""
        node = record.node
        assert node is not None
        info = record.info
        if sign > 0:
            record.charged = info.request if info.placement is None else _charged(info)
        if pending and record.charged is info.request:
            room = self._tree.admit(node, info.request)
        else:
            if pending:
                self._tree.add_pending(node, info.request, -1)
            room = self._tree.charge(node, record.charged, sign)
        if record.pinned:
            self._tree.pin(node, record.charged, sign)
        self._check_borrowing(node)
        self._charges += 1
        if self._reclaim_cache:
            self._reclaim_cache = {}
        name = info.admitted_quota
        assert name is not None
        used = self._used_by_name.setdefault(name, {})
        for resource, amount in record.charged.items():
            used[resource] = used.get(resource, 0) + sign * amount
        if info.pod_sets:
            self._hold_room(record, sign)
        victims = self._victims.setdefault(node, [])
        item = (info.admitted_at if info.admitted_at is not None else -math.inf, record.key)
        if sign > 0:
            if not record.pinned:
                if not victims or victims[-1] <= item:
                    victims.append(item)  # (``insort``: admissions come in time order)
                else:
                    insort(victims, item)
            if room and node.parent is not None:
                self._wake_node(node.parent)
            return
        if not record.pinned:
            index = bisect_left(victims, item)
            if index < len(victims) and victims[index] == item:
                del victims[index]
        for upper in node.path:
            if upper.waiters or upper.hold_waiters:  # (``_wake_node`` has nothing to do else)
                self._wake_node(upper)
        for state in self._leaf_queues.get(node, ()):
            self._touch(state)  # its own units may stop borrowing, and pass holds

    def _hold_room(self, record: _Unit, sign: int) -> None:
        """An admitted unit's pods take room on the nodes planned for them (a unit found
        holding quota, or admitted on quota alone: where they fit now); released, they give
        it back."""
        room = self._room
        info = record.info
        if sign < 0:
            if room.release(record.key):
                self._room_grew = True
                if self._heap is not None:  # victims' room, within the cycle
                    self._wake_nodes()
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

    def _places(self, state: _Queue, info: UnitInfo) -> bool:
        """Whether the unit's pods must fit on the nodes to be admitted."""
        return state.node_fit and bool(info.pod_sets) and bool(self._room)

    def _in_part(self, record: _Unit, state: _Queue) -> tuple[Placement | None, Misfit | Unplaced | None]:
        """An elastic unit that does not fit whole: the most pods of its elastic pod set,
        down to its min count, that fit its quota (and the nodes) now; else None and why
        not even its min count fits."""
        info = record.info
        elastic = next(ps for ps in info.pod_sets if ps.elastic)
        assert elastic.min_count is not None
        places = self._places(state, info)
        leaf = state.leaf

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
            return self._room.place(info.pod_sets, counts)

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

    def _note_unplaced(self, record: _Unit, state: _Queue, unplaced: Unplaced, waits: CheckKey,
                       counts: dict[str, int] | None) -> bool:
        """Say why the unit's pods have no nodes, and wait for room on them that the check
        ``waits`` (of ``counts`` of its pods, when not all) could use. Return whether it waits for another reason than before (see
        ``_note_misfit``)."""
        key: tuple[object, ...] = ("nodes", unplaced)
        reason = record.reason
        told = reason is None or reason[0][0] != "nodes" or _kind(reason[0][1]) != _kind(unplaced)
        if reason is None or reason[0] != key:
            reason = record.reason = (key, messages.unplaced(state.leaf, unplaced))
        self._say(record, reason[1])
        waiting = self._node_waiters.setdefault(state.key, {})
        wait = waiting.get(waits)
        if wait is None:
            waiting[waits] = _NodeWait(record.info.pod_sets, counts, [record.key])
        else:
            wait.units.append(record.key)
        return told

    def _wake_nodes(self, everyone: bool = False) -> None:
        """Room grew on the nodes: scan again the queues waiting for it, those of whose
        failed checks one may pass now (room grew on a node that takes one of its pods);
        ``everyone``: nodes came, went or changed, all of them."""
        self._room_grew = False
        still: dict[str, dict[CheckKey, _NodeWait]] = {}
        for key in sorted(self._node_waiters):
            checks = self._node_waiters[key]
            state = self._qs.get(key)
            if state is None:
                continue
            if everyone:
                self._touch(state)
            elif any(self._room.failing(check) is None for check in checks):
                state.node_woken.update(checks)
                self._touch(state, rescan=False)
            else:
                still[key] = checks
        self._node_waiters = still

    def _wake_node(self, node: QuotaNode, exclude: str | None = None) -> None:
        """Scan again the queues waiting at ``node`` that might fit in its room now."""
        for by_hold in (False, True):
            waiters = node.hold_waiters if by_hold else node.waiters
            if not waiters:
                continue
            priorities = node.hold_waiter_priority
            still: dict[str, ResourceList] = {}
            for key, need in waiters.items():
                state = self._qs.get(key) if key != exclude else None
                priority = priorities.get(key) if by_hold else None
                if state is None:
                    if key == exclude:
                        still[key] = need
                    elif by_hold:
                        priorities.pop(key, None)
                elif self._has_room(node, need, priority, state.leaf):
                    state.woken.append((node, need, priority))
                    self._touch(state, rescan=False)
                    if by_hold:
                        priorities.pop(key, None)
                else:
                    still[key] = need
            if by_hold:
                node.hold_waiters = still
            else:
                node.waiters = still

    @staticmethod
    def _has_room(node: QuotaNode, need: ResourceList, priority: int | None, leaf: QuotaNode) -> bool:
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

    def _room_left(self, state: _Queue) -> bool:
        """Whether a node that woke ``state`` still has the room it was woken for; if
        none has, the queue waits at those nodes again."""
        woken = state.woken
        if any(self._has_room(node, need, priority, state.leaf) for node, need, priority in woken):
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

    def _nodes_left(self, state: _Queue) -> bool:
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
            found = self._room.place(wait.pod_sets, wait.counts, key=key)
            if not isinstance(found, Unplaced):
                return True
            for unit in wait.units:
                record = self._units.get(unit)
                if record is None or record.queue is not state or record.state is not _State.QUEUED:
                    return True
                if self._note_unplaced(record, state, found, key, wait.counts):
                    return True
        return False

    def _touch(self, state: _Queue, rescan: bool = True) -> None:
        """Something that may change the queue's decisions happened: scan it (again).
        ``rescan`` False: only room at a node it waits on (see ``_room_left``)."""
        if self._heap is None:
            state.rescan = state.rescan or rescan
            self._stale.add(state.key)
            return
        scan = self._scans.get(state.key)
        state.rescan = state.rescan or rescan or (scan is not None and not scan.done)
        if scan is None:
            self._push(state)
        elif not scan.done:
            scan.restart = True
        elif scan.rounds < MAX_SCANS_PER_CYCLE:
            scan.done = False
            scan.restart = True
            self._push(state)
        else:
            self._stale.add(state.key)

    def _say(self, record: _Unit, text: str) -> None:
        if record.message != text:
            record.message = text
            self._changed[record.key] = text

    # --- derived state ----------------------------------------------------------
    def _sync(self) -> None:
        if self._rebuild_needed:
            self._rebuild()
        self._room.sync()
        if self._room_grew:
            self._wake_nodes()
        for node in self._tree.refresh():
            self._check_borrowing(node)
            for state in self._leaf_queues.get(node, ()):
                self._touch(state)

    def _check_borrowing(self, node: QuotaNode) -> None:
        """Keep ``_borrowers`` (the reclaim candidates) up to date for ``node``."""
        used = node.used
        for name, share in node.runtime.items():
            if used.get(name, 0) > share:
                self._borrowers.add(node)
                return
        self._borrowers.discard(node)

    def _rebuild(self) -> None:
        """Derive everything from the inputs again (after quotas or queues changed)."""
        self._rebuild_needed = False
        self._reasons = validate_quotas(self._quotas)
        self._tree = QuotaTree(
            [q for q in self._quotas.values() if q.name not in self._reasons], self._capacity,
            self._config.oversell_rate, self._config.koordinator,
        )
        self._directory = build_directory(self._quotas, self._queues, self._reasons)
        self._resolved = {}
        self._qs = {}
        self._leaf_queues = {}
        self._victims = {}
        self._borrowers = set()
        self._used_by_name = {}
        self._backoff = []
        self._retry = []
        self._retry_at = {}
        for key in sorted(self._queues):
            queue = self._queues[key]
            node = self._tree.nodes.get(queue.quota) if queue.quota is not None else None
            if node is not None and node.info is not None and not node.info.is_parent:
                self._new_queue(queue, node)
        bulk: dict[str, list[tuple[Entry, Shape]]] = {}
        self._tree.defer()
        for record in self._units.values():
            previous = record.state
            record.state = _State.PARKED
            record.queue = None
            record.node = None
            self._attach(record, previous, bulk=bulk)
        if self._removed_parents:  # keep those still named by admitted units, and those between
            kept: dict[str, str | None] = {}
            for record in self._units.values():
                current = record.info.admitted_quota
                while current in self._removed_parents and current not in kept:
                    kept[current] = parent = self._removed_parents[current]
                    current = parent
            self._removed_parents = kept
        self._tree.settle()
        for key, items in bulk.items():
            self._qs[key].pending.load(items)
        self._stale = set(self._qs)

    def _new_queue(self, queue: QueueInfo, leaf: QuotaNode) -> _Queue:
        state = _Queue(queue, leaf, self._threshold(queue), self._node_fit(queue))
        self._qs[queue.key] = state
        self._leaf_queues.setdefault(leaf, []).append(state)
        return state

    def _node_fit(self, queue: QueueInfo) -> bool:
        """The Queue's koord-queue/node-fit, else its quota's, else the engine's."""
        if queue.node_fit is not None:
            return queue.node_fit
        quota = self._quotas.get(queue.quota) if queue.quota is not None else None
        if quota is not None and quota.node_fit is not None:
            return quota.node_fit
        return self._config.node_fit

    def _threshold(self, queue: QueueInfo) -> int:
        if queue.priority_threshold is not None:
            return queue.priority_threshold
        quota = self._quotas.get(queue.quota) if queue.quota is not None else None
        if quota is not None and quota.priority_threshold is not None:
            return quota.priority_threshold
        return self._config.default_priority_threshold

    def _expire(self, now: float) -> None:
        backoff = self._backoff
        while backoff and backoff[0][0] <= now:
            when, key = heapq.heappop(backoff)
            record = self._units.get(key)
            if record is None or record.state is not _State.BACKOFF or record.info.requeue_at != when:
                continue
            state = record.queue
            assert state is not None
            record.state = _State.QUEUED
            self._join(state, record)
            assert record.node is not None
            self._say(record, messages.queued(state.key, record.node.name, state.info.policy))
            self._tell_as_first(state, record)
        retry = self._retry
        while retry and retry[0][0] <= now:
            when, key = heapq.heappop(retry)
            if self._retry_at.get(key) == when:
                del self._retry_at[key]
                state = self._qs.get(key)
                if state is not None:
                    self._touch(state)

    def _next_wakeup(self, now: float) -> float | None:
        if self._stale:
            return now
        backoff = self._backoff
        while backoff:
            when, key = backoff[0]
            record = self._units.get(key)
            if record is not None and record.state is _State.BACKOFF and record.info.requeue_at == when:
                break
            heapq.heappop(backoff)
        retry = self._retry
        while retry and self._retry_at.get(retry[0][1]) != retry[0][0]:
            heapq.heappop(retry)
        times = [heap[0][0] for heap in (backoff, retry) if heap]
        return min(times) if times else None

    # --- views --------------------------------------------------------------------
    def unit(self, key: str) -> UnitInfo | None:
        record = self._units.get(key)
        return None if record is None else replace(record.info)

    def quota_status(self) -> dict[str, QuotaStatus]:
        self._sync()
        out: dict[str, QuotaStatus] = {}
        for name in sorted(self._quotas):
            quota = self._quotas[name]
            node = self._tree.nodes.get(name)
            if node is None:
                out[name] = QuotaStatus(
                    name,
                    dict(quota.min),
                    dict(quota.max),
                    dict(self._used_by_name.get(name, {})),
                    {},
                    {},
                    False,
                    self._reasons.get(name),
                    dict(quota.max),
                )
            else:
                used = {k: v for k, v in node.used.items() if v}
                out[name] = QuotaStatus(
                    name, dict(quota.min), dict(quota.max), used, dict(node.runtime), dict(node.demand), True,
                    limit=dict(node.limit),
                )
        return out

    def protect_wait(self, key: str) -> float | None:
        """The protect time, when the queued unit ``key`` could preempt for room but for
        its victims' protect time (by its last scan, or that of the first unit of its
        request); else None."""
        self._sync()
        record = self._units.get(key)
        if record is None or record.state is not _State.QUEUED or record.queue is None:
            return None
        return self._protect(self._protected(record, record.queue))

    def _protected(self, record: _Unit, state: _Queue) -> bool:
        first = state.pending.next_of(record.shape)  # what holds for the first of its request holds for it
        return self._units[first[4]].protected if first is not None else record.protected

    def named_quota(self, info: UnitInfo) -> str | None:
        """The leaf quota ``info`` asks for, usable or not (``tenancy.named_quota``)."""
        self._sync()
        return named_quota(info, self._directory)

    def priority_cap(self, info: UnitInfo) -> tuple[str, int] | None:
        """The quota ``info`` asks for and its max-priority, when it has one: the shell queues
        the unit at no more than that (a tenant's priority must not rank it past other teams)."""
        if all(quota.max_priority is None for quota in self._quotas.values()):
            return None  # (no bound anywhere: not worth resolving the unit)
        name = self.named_quota(info)
        quota = self._quotas.get(name) if name is not None else None
        if name is None or quota is None or quota.max_priority is None:
            return None
        return name, quota.max_priority

    def validation_errors(self) -> dict[str, str]:
        self._sync()
        return dict(self._reasons)

    def queue_positions(self) -> dict[str, list[Standing]]:
        self._sync()
        out: dict[str, list[Standing]] = {}
        for key in sorted(self._qs):
            state = self._qs[key]
            rows = []
            reasons: dict[tuple[Shape, int, bool], str] = {}
            for position, entry in enumerate(state.pending.ordered(), start=1):
                record = self._units[entry[4]]
                rows.append(
                    Standing(
                        record.key,
                        key,
                        state.leaf.name,
                        position,
                        record.info.priority,
                        self._live_message(record, reasons, position),
                    )
                )
            out[key] = rows
        return out

    def standing(self, key: str) -> Standing | None:
        self._sync()
        record = self._units.get(key)
        if record is None:
            return None
        info = record.info
        if record.state is _State.ADMITTED:
            return Standing(
                key,
                info.admitted_queue,
                info.admitted_quota,
                None,
                info.priority,
                f"admitted to quota {info.admitted_quota}",
            )
        state = record.queue
        quota = record.node.name if record.node is not None else None
        position = (
            state.pending.position(record.entry)
            if state is not None and record.state is _State.QUEUED
            else None
        )
        return Standing(
            key, state.key if state else None, quota, position, info.priority, self._live_message(record)
        )

    def _live_message(self, record: _Unit, reasons: dict[tuple[Shape, int, bool], str] | None = None,
                      position: int | None = None) -> str:
        """Why a queued unit waits now: its queue waiting for a unit's pods, else being
        beyond its queue's depth, else who blocks it, else the limit its request runs into
        (worked out now, so that units the last cycle did not get to have a reason too),
        else the text it was last told. ``reasons`` caches the limit's text per request and
        priority, for many units of one queue; ``position``: the unit's in its queue, when known."""
        state = record.queue
        if record.state is not _State.QUEUED or state is None:
            return record.message
        starting = self._pods_blocker(state)
        if starting is not None:
            return messages.pods_starting(state.key, starting)
        depth = state.info.max_depth
        if depth is not None:
            if position is None:
                position = state.pending.position(record.entry)
            if position > depth:
                return messages.beyond_depth(state.key, depth)
        blocker = self._units.get(state.blocker) if state.blocker is not None else None
        if (
            blocker is not None
            and blocker is not record
            and blocker.state is _State.QUEUED
            and blocker.entry < record.entry
        ):
            if state.info.policy == QueuePolicy.INTELLIGENT and record.info.priority < state.threshold:
                return messages.band_blocked(blocker.key, state.key, state.threshold)
            return messages.blocked(blocker.key, state.key, str(state.info.policy))
        info = record.info
        protected = self._protected(record, state)
        key = (record.shape, info.priority, protected)
        text = reasons.get(key) if reasons is not None else None
        if text is None:
            request, counts = info.request, None
            misfit = first_misfit(state.leaf, request, info.priority, preemptible=info.preemptible)
            if misfit is not None and any(ps.elastic for ps in info.pod_sets):  # why not even its least
                request, counts = _least(info)
                misfit = first_misfit(state.leaf, request, info.priority, preemptible=info.preemptible)
            text = "" if misfit is None else messages.waiting(state.leaf, misfit, info.priority,
                                                              self._protect(protected))
            if misfit is None and self._places(state, info):
                found = self._room.place(info.pod_sets, counts)
                if isinstance(found, Unplaced):
                    text = messages.unplaced(state.leaf, found)
            if reasons is not None:
                reasons[key] = text
        return text or record.message


def _held_by_node(holds: list[tuple[QuotaNode, Hold]]) -> dict[QuotaNode, _Held]:
    out: dict[QuotaNode, _Held] = {}
    for node, hold in holds:
        held = out.setdefault(node, {})
        ripe = hold.waited_past is not None
        for name, amount in hold.amounts.items():
            rank = (name, hold.priority, ripe)
            held[rank] = held.get(rank, 0) + amount
    return out


def _limits_only(old: QuotaInfo, new: QuotaInfo) -> bool:
    """Whether ``new`` differs from ``old`` in the amounts of its min, max and shared
    weight and its lending only, naming the same resources."""
    same_rest = replace(old, min=new.min, max=new.max, shared_weight=new.shared_weight,
                        allow_lent=new.allow_lent) == new
    return same_rest and old.min.keys() == new.min.keys() and old.max.keys() == new.max.keys()


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


def _never(misfit: Misfit | None, unplaced: Unplaced | None) -> bool:
    """Whether a unit that does not fit never will while the quotas and nodes stay as they
    are: more than a limit itself (fit.py), or pods that no node may take, or that the
    nodes could not hold even empty."""
    if misfit is not None:
        return misfit.never
    return unplaced is not None and (unplaced.never or bool(unplaced.shut_out))


def _least(info: UnitInfo) -> tuple[ResourceList, dict[str, int]]:
    """An elastic unit's least: its request and pod counts with its elastic pod sets at their min."""
    request = dict(info.request)
    counts = {}
    for ps in info.pod_sets:
        if ps.elastic:
            assert ps.min_count is not None
            counts[ps.name] = ps.min_count
            for name, amount in ps.request.items():
                request[name] = request.get(name, 0) - (ps.count - ps.min_count) * amount
    return request, counts


def _kind(unplaced: object) -> tuple[object, ...]:
    """What a reason to wait for nodes is about, without its amounts (see ``_note_misfit``)."""
    if not isinstance(unplaced, Unplaced):
        return ()
    return (unplaced.pod_set, unplaced.asked, unplaced.resource, bool(unplaced.shut_out), unplaced.level)
