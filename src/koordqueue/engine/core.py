"""The Engine: the front door of the functional core. It takes the inputs (quotas,
Queues, units, nodes), runs a scheduling cycle when asked, and answers the views.

Inputs are idempotent upserts; a change of quotas or queues rebuilds the derived state
(the ledger, ledger.py, by rebuild.py) at the next cycle (rare), a change of a unit is applied at once
in O(log n). A cycle (cycle.py) only looks at *stale* queues: those whose pending units
changed, or that wait on a node of the quota tree where room appeared, or whose runtime
share moved, or whose time (back-off, protection of victims) came. Within a cycle
queues take turns by Queue priority, then admissions within the quota's runtime share
before those that borrow, then fair share (the quota furthest below its runtime share
first), one admission per turn, so many units of every queue are admitted per cycle.

What the shell may expect of every entry point: no I/O, no clock of its own (``now`` is
passed in), no exception for input it can reject (a unit or quota it cannot use is
parked with a message, a quota with a validation error), and the decisions of a cycle
already applied to the engine's own state when ``schedule`` returns.
"""

from __future__ import annotations

from dataclasses import replace

from koordqueue.api.objects import FlavorToleration
from koordqueue.engine import timers, views
from koordqueue.engine.cycle import MAX_SCANS_PER_CYCLE, Cycle
from koordqueue.engine.fairness import Fairness
from koordqueue.engine.ledger import BLOCKED_WINDOW, Ledger, UnitRecord, UnitState, copy_unit
from koordqueue.engine.model import (
    CycleResult,
    EngineConfig,
    FlavorTry,
    NodeInfo,
    Placement,
    QueueInfo,
    QuotaInfo,
    QuotaStatus,
    ResourceList,
    Standing,
    UnitInfo,
)
from koordqueue.engine.pending import Entry, shape_of
from koordqueue.engine.rebuild import rebuild
from koordqueue.engine.tenancy import named_quota
from koordqueue.engine.validation import validate_quotas

__all__ = ["BLOCKED_WINDOW", "DEFAULT_CONFIG", "MAX_SCANS_PER_CYCLE", "Engine", "copy_unit"]

DEFAULT_CONFIG = EngineConfig()  # frozen, so one instance serves as the default


class Engine:
    """Decides which units are admitted and which are preempted; see the module doc."""

    def __init__(self, config: EngineConfig = DEFAULT_CONFIG) -> None:
        self._config = config
        self._capacity = None if config.cluster_capacity is None else dict(config.cluster_capacity)
        self._quotas: dict[str, QuotaInfo] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._reasons: dict[str, str] = {}  # quota -> why it cannot be used (validation)
        self._flavor_problems: dict[str, str] = {}  # parent quota -> what is wrong with its flavor order
        self._ledger = Ledger(config, self._quotas, self._queues, self._capacity)
        self._fair = Fairness()  # usage history and budgets (fairness.py): inert unless asked for

    @property
    def _rebuild_needed(self) -> bool:
        return self._ledger.rebuild_needed

    @_rebuild_needed.setter
    def _rebuild_needed(self, value: bool) -> None:
        self._ledger.rebuild_needed = value

    # --- inputs -------------------------------------------------------------------
    def set_quota(self, quota: QuotaInfo) -> None:
        """An ElasticQuota, new or changed. A change of its min, max, weight or lending
        only is taken in place; any other change rebuilds the ledger at the next cycle
        (or view). An unusable quota is reported by ``validation_errors``."""
        old = self._quotas.get(quota.name)
        if old == quota:
            return
        ledger = self._ledger
        self._quotas[quota.name] = quota
        self._fair.planned = False
        ledger.removed_parents.pop(quota.name, None)
        if self._rebuild_needed or old is None or not _limits_only(old, quota) or quota.name in self._reasons:
            self._rebuild_needed = True
            return
        reasons = validate_quotas(self._quotas)
        if reasons != self._reasons:  # it (or another) becomes unusable: derive everything again
            self._rebuild_needed = True
            return
        # Only its min, max, weight or lending moved: taken in place, without loading every
        # unit again. Its siblings' and its own units may find room (or lose it).
        tree = ledger.tree
        node = tree.nodes[quota.name]
        tree.update(self._fair.effective(quota))
        for upper in node.path:
            ledger.wake_node(upper)
        for leaf in tree.leaves_under(node.parent or tree.root):
            for state in ledger.leaf_queues.get(leaf, ()):
                ledger.touch(state)

    def remove_quota(self, name: str) -> None:
        """An ElasticQuota deleted: its units are parked at the next rebuild; admitted
        units keep their charge, at its nearest usable ancestor (``Ledger.charged_at``)."""
        removed = self._quotas.pop(name, None)
        if removed is not None:
            self._fair.planned = False
            self._ledger.removed_parents[name] = removed.parent
            self._rebuild_needed = True

    def set_queue(self, queue: QueueInfo) -> None:
        """A Queue, new or changed; bound to the same quota, its order and policy change in place."""
        old = self._queues.get(queue.key)
        if old == queue:
            return
        self._queues[queue.key] = queue
        ledger = self._ledger
        state = ledger.qs.get(queue.key)
        if not self._rebuild_needed and state is not None and state.info.quota == queue.quota:
            # Same binding: the same units use it; only its order and policy change.
            state.info = queue
            state.threshold = ledger.threshold(queue)
            state.node_fit = ledger.node_fit(queue)
            ledger.touch(state)
            return
        self._rebuild_needed = True

    def remove_queue(self, key: str) -> None:
        """A Queue deleted: its pending units are parked (or go to their quota's own queue) at the next rebuild."""
        if self._queues.pop(key, None) is not None:
            self._rebuild_needed = True

    def set_cluster_capacity(self, capacity: ResourceList | None) -> None:
        """What the cluster holds in all (None: unbounded): the root of the quota tree."""
        capacity = None if capacity is None else dict(capacity)
        if capacity == self._capacity:
            return
        self._capacity = capacity
        if not self._rebuild_needed:
            ledger = self._ledger
            ledger.tree.set_capacity(capacity)
            for state in ledger.qs.values():
                ledger.touch(state)

    def set_koordinator(self, on: bool) -> None:
        """Whether koord-scheduler schedules the pods (EngineConfig.koordinator): a
        controller in auto mode turns it on once it sees Koordinator's quotas."""
        if on != self._config.koordinator:
            self._config = replace(self._config, koordinator=on)
            self._fair.planned = False
            self._ledger.config = self._config
            self._rebuild_needed = True

    @property
    def koordinator(self) -> bool:
        """Whether koord-scheduler's rules hold (see ``set_koordinator``)."""
        return self._config.koordinator

    def set_node(self, node: NodeInfo) -> None:
        """A node, new or changed: where units' pods may go (node fit, topology)."""
        if self._ledger.room.set_node(node):
            self._ledger.wake_nodes(everyone=True)

    def remove_node(self, name: str) -> None:
        """A node gone: every queue waiting for room on the nodes is scanned again."""
        if self._ledger.room.remove_node(name):
            self._ledger.wake_nodes(everyone=True)

    def set_node_usage(self, node: str, used: ResourceList) -> None:
        """What the pods bound to ``node`` request (every pod, of units or not)."""
        if self._ledger.room.set_usage(node, used):
            self._ledger.room_grew = True

    def set_unit_pods(self, key: str, pods: dict[tuple[str, str], int]) -> None:
        """The unit's pods bound to nodes: (pod set, node) -> how many."""
        if self._ledger.room.set_pods(key, pods):
            self._ledger.room_grew = True

    def node_free(self, node: str) -> ResourceList:
        """The room left on ``node`` as placement sees it."""
        return self._ledger.room.free(node)

    def set_unit(self, unit: UnitInfo, owned: bool = False) -> None:
        """A unit, new or changed: taken at once (queued, admitted as its info says, or
        parked with why). A unit handed in admitted (``admitted_quota`` set: loaded after
        a restart) is charged as it is, even past its quota's max; its pods count as
        running (``set_pods_running``). ``owned``: the caller hands ``unit`` over and never
        touches it again, so it is kept as it is, not copied (the simulator's fresh units)."""
        key = unit.key
        ledger = self._ledger
        old = ledger.units.get(key)
        if old is not None and old.info == unit:
            return
        pod_sets = unit.pod_sets
        record = UnitRecord(unit if owned else copy_unit(unit), key,
                            Entry(-unit.priority, unit.created, unit.namespace, unit.name, key),
                            shape_of(unit.request, pod_sets, unit.preemptible), unit.request,
                            bool(pod_sets) and any(ps.elastic for ps in pod_sets))
        record.pinned = not unit.preemptible
        if old is not None and old.state is UnitState.ADMITTED and unit.admitted_quota is not None:
            record.pinned = record.pinned and old.pinned  # as it was admitted (``UnitRecord.pinned``)
        previous = None
        if old is not None:
            previous = old.state
            record.message = old.message
            ledger.detach(old)
        ledger.units[key] = record
        if unit.pod_sets or (old is not None and old.info.pod_sets):
            ledger.room.track(key, unit.pod_sets)
        starting = ledger.starting.get(key)
        if starting is not None and (unit.admitted_quota is None or starting != unit.admitted_queue):
            ledger.starting.stop(key)
        if unit.admitted_quota is None:
            ledger.done.stop(key)
        if not ledger.rebuild_needed:
            ledger.attach(record, previous)

    def remove_unit(self, key: str) -> None:
        """A unit gone (its job deleted or finished): what it held is released at once and
        the queues waiting for that room are scanned at the next cycle. Unknown keys are ignored."""
        ledger = self._ledger
        record = ledger.units.pop(key, None)
        if record is not None:
            if key in ledger.starting:
                ledger.starting.stop(key)
            ledger.done.stop(key)
            ledger.detach(record)
            if record.info.pod_sets:
                ledger.room.forget(key)

    def requeue(self, key: str, now: float, reason: str) -> float:
        """Send a known unit (admitted or not) back to its queue after a back-off: what it
        held is released, its attempts counted, and it is told ``reason``. Returns when it
        may be admitted again (its ``requeue_at``). Raises KeyError for an unknown unit."""
        ledger = self._ledger
        record = ledger.units[key]
        if ledger.rebuild_needed:
            self._rebuild()
        return ledger.send_back(record, now, reason)

    def set_pods_running(self, key: str, running: bool) -> bool:
        """Whether all pods of an admitted unit run (the shell watches them). A unit the
        engine admits starts out with pods not running; one handed in admitted (loaded
        after a restart) counts as running until the shell says otherwise. Returns
        whether that changed."""
        ledger = self._ledger
        if running and key not in ledger.starting:
            return False  # (it was not waiting for them)
        record = ledger.units.get(key)
        info = record.info if record is not None else None
        before = ledger.starting.get(key)
        if running or info is None or info.admitted_quota is None or info.admitted_queue is None:
            ledger.starting.stop(key)
        else:
            ledger.starting.start(key, info.admitted_queue)
        return ledger.starting.get(key) != before

    def set_work_done(self, key: str, done: bool, now: float) -> None:
        """Whether all pods of an admitted unit have succeeded (the shell watches them), told
        at ``now``: such a unit is no victim of preemption or reclaim for the grace its
        controller needs to say it ended (``starting.Done``). Not admitted or unknown units
        are ignored."""
        ledger = self._ledger
        record = ledger.units.get(key)
        if done and record is not None and record.info.admitted_quota is not None:
            ledger.done.start(key, now)
        else:
            ledger.done.stop(key)

    def revert_admission(self, key: str) -> None:
        """Undo an admission the shell could not carry out (its write failed, or the job
        changed under it): the unit is queued again at once, without a back-off nor an
        attempt counted. Unknown or not admitted units are ignored."""
        ledger = self._ledger
        record = ledger.units.get(key)
        if record is None or record.info.admitted_quota is None:
            return
        ledger.starting.stop(key)
        ledger.done.stop(key)
        if ledger.rebuild_needed:
            record.info.admitted_quota = record.info.admitted_queue = record.info.admitted_at = None
            record.info.placement = None
            return
        ledger.detach(record)
        info = record.info
        info.admitted_quota = info.admitted_queue = info.admitted_at = None
        info.placement = None
        ledger.attach(record, None)

    # --- the cycle ----------------------------------------------------------------
    def schedule(self, now: float) -> CycleResult:
        """Run one scheduling cycle at ``now`` (never earlier than the last one's). Returns
        the units admitted (with their placement when their pods were placed) and
        preempted (with when they may come back), the messages that changed since the
        last cycle (units not in it keep theirs), and the next time that time alone can
        change a decision (None: only a change of the inputs can). Every decision is
        already applied: the shell writes them out, or calls ``revert_admission`` for an
        admission it could not write."""
        result = CycleResult()
        ledger = self._ledger
        ledger.now = now
        fair = self._fair
        if fair.active or not fair.planned:
            self._fairness(now)
        self._sync()
        timers.expire(ledger, now)
        if ledger.stale:
            Cycle(ledger, now, result).run()
        if fair.active:
            fair.snapshot(ledger.tree)
        result.messages = ledger.changed
        ledger.changed = {}
        result.next_wakeup = timers.next_wakeup(ledger, now)
        return result

    # --- fairness over weeks (fairness.py) ------------------------------------------
    def _fairness(self, now: float) -> None:
        """Count usage up to ``now``, and give the quota tree the weights history gives
        (once a minute); with no budget nor sharing by history, nothing."""
        fair = self._fair
        ledger = self._ledger
        if not fair.planned:
            fair.plan(self._quotas, self._config)
            ledger.fair = fair if fair.active else None
            if not fair.active:
                return
        fair.advance(now)
        if ledger.rebuild_needed:
            self._rebuild()
        moved = fair.rescore(now, ledger.tree, self._quotas)
        tree = ledger.tree
        for name in moved:
            node = tree.nodes.get(name)
            if node is None or node.parent is None:
                continue
            tree.update(fair.effective(self._quotas[name]))
            for upper in node.path:  # (queues whose runtime moves are scanned by ``_sync``)
                ledger.wake_node(upper)

    def usage_history(self) -> dict[str, object]:
        """The usage history, JSON-able, for the shell to keep across restarts."""
        return self._fair.history.dump()

    def load_usage_history(self, data: object) -> str | None:
        """Take back what ``usage_history`` gave before a restart; returns why not, if not."""
        return self._fair.history.load(data)

    def fairness_status(self) -> dict[str, dict[str, object]]:
        """Per tracked quota: its decayed usage (resource-hours), effective weight, and
        each budget's use within its window (resource-hours) and amount."""
        return views.fairness_status(self._fair)

    # --- derived state ----------------------------------------------------------
    def _sync(self) -> None:
        ledger = self._ledger
        if ledger.rebuild_needed:
            self._rebuild()
        ledger.room.sync()
        if ledger.room_grew:
            ledger.wake_nodes()
        for node in ledger.tree.refresh():
            ledger.check_borrowing(node)
            for state in ledger.leaf_queues.get(node, ()):
                ledger.touch(state)

    def _rebuild(self) -> None:
        """Derive everything from the inputs again (after quotas or queues changed; rebuild.py)."""
        self._reasons, self._flavor_problems = rebuild(
            self._ledger, self._quotas, self._queues, self._capacity, self._config, self._fair)

    # --- views --------------------------------------------------------------------
    def unit(self, key: str) -> UnitInfo | None:
        """A copy of the unit as the engine holds it (admitted quota, placement, attempts
        as its decisions left them); None for an unknown key. A shallow copy: the shell may
        set its fields, not change what they hold (its request, its pod sets)."""
        ledger = self._ledger
        record = ledger.units.get(key)
        return None if record is None else replace(record.info)

    def quota_status(self) -> dict[str, QuotaStatus]:
        """Every quota (usable or not) by name: its min, max, usage, runtime share and limit."""
        self._sync()
        return views.quota_status(self._ledger, self._quotas, self._reasons)

    def queue_positions(self) -> dict[str, list[Standing]]:
        """Every Queue's pending units in admission order, with their position and why they wait now."""
        self._sync()
        return views.queue_positions(self._ledger)

    def standing(self, key: str) -> Standing | None:
        """Where a unit stands now (None: unknown): its queue and quota, its position when
        queued, and why it waits (worked out now, not only the last message told)."""
        self._sync()
        return views.standing(self._ledger, key)

    def protect_wait(self, key: str) -> float | None:
        """The protect time, when the queued unit ``key`` could preempt for room but for
        its victims' protect time (by its last scan, or that of the first unit of its
        request); else None."""
        self._sync()
        return views.protect_wait(self._ledger, key)

    def named_quota(self, info: UnitInfo) -> str | None:
        """The leaf quota ``info`` asks for, usable or not (``tenancy.named_quota``)."""
        self._sync()
        return named_quota(info, self._ledger.directory)

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

    def flavor_tolerations(self, quota: str) -> tuple[FlavorToleration, ...]:
        """The tolerations of a flavor (``koord-queue/tolerations``), which the pods of the
        units admitted into it get with its node selector; () for any other quota."""
        info = self._quotas.get(quota)
        return info.tolerations if info is not None and info.node_selector else ()

    def flavors_tried(self, key: str) -> list[FlavorTry] | None:
        """For a queued unit of a quota with flavors: each flavor in order and why it refuses
        the unit now (the words of its message, flavor by flavor); else None."""
        self._sync()
        return views.flavors_tried(self._ledger, key)

    def flavor_of(self, key: str, placement: Placement | None) -> str | None:
        """The flavor a unit of a quota with flavors was admitted into, by the node labels its
        admission pinned (``placement``, as its status says them): how a restarted controller
        charges it where it was admitted, not to its first flavor. None: its quota has no
        flavors, or no flavor's selector is among those labels."""
        self._sync()
        return views.flavor_of(self._ledger, key, placement)

    def flavor_problems(self) -> dict[str, str]:
        """Parent quota name -> what is wrong with its flavors (a flavor order naming no flavor of it)."""
        self._sync()
        return dict(self._flavor_problems)

    def validation_errors(self) -> dict[str, str]:
        """Quota name -> why it cannot be used (validation.py); a unit asking for it is parked."""
        self._sync()
        return dict(self._reasons)



def _limits_only(old: QuotaInfo, new: QuotaInfo) -> bool:
    """Whether ``new`` differs from ``old`` in the amounts of its min, max and shared
    weight and its lending only, naming the same resources."""
    same_rest = replace(old, min=new.min, max=new.max, shared_weight=new.shared_weight,
                        allow_lent=new.allow_lent) == new
    return same_rest and old.min.keys() == new.min.keys() and old.max.keys() == new.max.keys()
