"""The engine: one object holding quotas, queues and units, and the scheduling cycle.

Shells tell it what changed (set_/remove_ calls) and ask it to run a cycle at a time
they pass in; it answers with decisions it has already applied to its own books. It
never does I/O and never reads a clock, so the simulator and the controller get the
same answers from the same inputs.
"""

from __future__ import annotations

import heapq
import zlib
from dataclasses import dataclass, field

from koordqueue.api.constants import SYSTEM_NAMESPACE, QueuePolicy
from koordqueue.api.quantity import format_quantity
from koordqueue.engine.model import (
    Admission,
    CycleResult,
    EngineConfig,
    Preemption,
    QueueInfo,
    QuotaInfo,
    QuotaStatus,
    ResourceList,
    Standing,
    UnitInfo,
)
from koordqueue.engine.validation import validate_quotas
from koordqueue.engine.waterfill import water_fill


@dataclass(slots=True)
class _Resolved:
    queue: QueueInfo | None
    quota: str | None
    reason: str | None  # why the unit cannot be queued at all


@dataclass(slots=True)
class _QueueRun:
    """One queue during a cycle: its candidates in order and where we are in them."""

    queue: QueueInfo
    quota: str
    units: list[UnitInfo]
    cursor: int = 0
    blocked_by: str | None = None  # Block/Intelligent: the head that does not fit
    high_blocked: bool = False


@dataclass(slots=True)
class _Fit:
    ok: bool
    reason: str = ""
    reclaimable: bool = False  # within its runtime share: borrowers may be preempted


@dataclass
class Engine:
    config: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        self._quotas: dict[str, QuotaInfo] = {}
        self._invalid: dict[str, str] = {}
        self._children: dict[str | None, list[str]] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._units: dict[str, UnitInfo] = {}
        self._used: dict[str, ResourceList] = {}  # every quota node, parents included
        self._runtime: dict[str, ResourceList] = {}
        self._demand: dict[str, ResourceList] = {}
        self._capacity: ResourceList | None = self.config.cluster_capacity
        self._messages: dict[str, str] = {}
        self._resolved: dict[str, _Resolved] = {}
        self._tree_dirty = True

    # --- inputs ---------------------------------------------------------------------

    def set_quota(self, quota: QuotaInfo) -> None:
        self._quotas[quota.name] = quota
        self._tree_dirty = True

    def remove_quota(self, name: str) -> None:
        if self._quotas.pop(name, None) is not None:
            self._tree_dirty = True

    def set_queue(self, queue: QueueInfo) -> None:
        self._queues[queue.key] = queue
        self._resolved.clear()

    def remove_queue(self, key: str) -> None:
        if self._queues.pop(key, None) is not None:
            self._resolved.clear()

    def set_cluster_capacity(self, capacity: ResourceList | None) -> None:
        self._capacity = dict(capacity) if capacity else None

    def set_unit(self, unit: UnitInfo) -> None:
        old = self._units.get(unit.key)
        if old is not None and old.admitted_quota is not None:
            self._charge(old.admitted_quota, old.request, -1)
        self._units[unit.key] = unit
        self._resolved.pop(unit.key, None)
        if unit.admitted_quota is not None:
            self._charge(unit.admitted_quota, unit.request, +1)

    def remove_unit(self, key: str) -> None:
        unit = self._units.pop(key, None)
        if unit is not None and unit.admitted_quota is not None:
            self._charge(unit.admitted_quota, unit.request, -1)
        self._messages.pop(key, None)
        self._resolved.pop(key, None)

    def requeue(self, key: str, now: float, reason: str) -> float:
        unit = self._units[key]
        self._release(unit)
        unit.attempts += 1
        unit.requeue_at = now + self._backoff(unit)
        self._messages[key] = reason
        return unit.requeue_at

    def revert_admission(self, key: str) -> None:
        unit = self._units.get(key)
        if unit is not None:
            self._release(unit)

    # --- views ----------------------------------------------------------------------

    def unit(self, key: str) -> UnitInfo | None:
        return self._units.get(key)

    def validation_errors(self) -> dict[str, str]:
        self._refresh_tree()
        return dict(self._invalid)

    def quota_status(self) -> dict[str, QuotaStatus]:
        self._refresh_tree()
        self._refresh_runtime()
        return {
            name: QuotaStatus(
                name=name, min=dict(q.min), max=dict(q.max), used=dict(self._used.get(name, {})),
                runtime=dict(self._runtime.get(name, {})), demand=dict(self._demand.get(name, {})),
                valid=name not in self._invalid, reason=self._invalid.get(name),
            )
            for name, q in sorted(self._quotas.items())
        }

    def queue_positions(self) -> dict[str, list[Standing]]:
        self._refresh_tree()
        out: dict[str, list[Standing]] = {}
        for queue_key, quota, units in self._pending_by_queue():
            out[queue_key] = [
                Standing(u.key, queue_key, quota, i + 1, u.priority, self._messages.get(u.key, ""))
                for i, u in enumerate(units)
            ]
        return out

    def standing(self, key: str) -> Standing | None:
        unit = self._units.get(key)
        if unit is None:
            return None
        self._refresh_tree()
        res = self._resolve(unit)
        queue_key = res.queue.key if res.queue else None
        position = None
        if unit.admitted_quota is None and queue_key is not None:
            for qk, _, units in self._pending_by_queue():
                if qk == queue_key:
                    position = next((i + 1 for i, u in enumerate(units) if u.key == key), None)
        message = self._messages.get(key) or res.reason or ""
        return Standing(key, queue_key, unit.admitted_quota or res.quota, position, unit.priority, message)

    # --- the cycle ------------------------------------------------------------------

    def schedule(self, now: float) -> CycleResult:
        self._refresh_tree()
        self._refresh_runtime()
        result = CycleResult()
        waiting: dict[str, str] = {}
        runs: list[_QueueRun] = []
        next_wakeup: float | None = None
        for unit in self._units.values():
            if unit.admitted_quota is not None:
                continue
            if unit.requeue_at is not None and unit.requeue_at > now:
                next_wakeup = _earliest(next_wakeup, unit.requeue_at)
                waiting[unit.key] = self._messages.get(unit.key) or (
                    f"backing off after {unit.attempts} attempt(s); eligible again in "
                    f"{unit.requeue_at - now:.0f}s"
                )
        for queue_key, quota, units in self._pending_by_queue():
            eligible = [u for u in units if u.requeue_at is None or u.requeue_at <= now]
            if eligible:
                runs.append(_QueueRun(self._queue_of(queue_key, quota), quota, eligible))
        for pending in self._units.values():
            if pending.admitted_quota is None and pending.key not in waiting:
                res = self._resolve(pending)
                if res.reason is not None:
                    waiting[pending.key] = res.reason
        heap = [(self._queue_rank(r), i) for i, r in enumerate(runs)]
        heapq.heapify(heap)
        protect_blocked: float | None = None
        while heap:
            _, i = heapq.heappop(heap)
            run = runs[i]
            candidate = self._next_candidate(run, waiting)
            if candidate is None:
                continue
            unit = candidate
            fit = self._fits(run.quota, unit.request)
            if not fit.ok:
                victims, protected_until = self._plan_preemption(run, unit, fit, now)
                protect_blocked = _earliest(protect_blocked, protected_until)
                if victims:
                    for victim in victims:
                        result.preempted.append(self._preempt(victim, unit, now))
                    fit = self._fits(run.quota, unit.request)
            if fit.ok:
                self._admit(unit, run, now)
                result.admitted.append(Admission(unit.key, run.quota, run.queue.key))
                self._messages.pop(unit.key, None)
                waiting.pop(unit.key, None)
            else:
                waiting[unit.key] = fit.reason
                self._after_misfit(run, unit)
            run.cursor += 1
            heapq.heappush(heap, (self._queue_rank(run), i))
        for key, message in waiting.items():
            if self._messages.get(key) != message:
                self._messages[key] = message
                result.messages[key] = message
        for p in result.preempted:
            next_wakeup = _earliest(next_wakeup, p.requeue_at)
        result.next_wakeup = _earliest(next_wakeup, protect_blocked)
        return result

    # --- policies ---------------------------------------------------------------------

    def _threshold(self, queue: QueueInfo) -> int:
        if queue.priority_threshold is not None:
            return queue.priority_threshold
        quota = self._quotas.get(queue.quota or "")
        if quota is not None and quota.priority_threshold is not None:
            return quota.priority_threshold
        return self.config.default_priority_threshold

    def _next_candidate(self, run: _QueueRun, waiting: dict[str, str]) -> UnitInfo | None:
        """The next unit this queue's policy lets us try; those passed over get a reason."""
        policy = run.queue.policy
        while run.cursor < len(run.units):
            unit = run.units[run.cursor]
            if run.blocked_by is not None:
                if policy is QueuePolicy.BLOCK or (
                    policy is QueuePolicy.INTELLIGENT and (run.high_blocked or unit.priority >= self._threshold(run.queue))
                ):
                    waiting[unit.key] = (
                        f"blocked behind {run.blocked_by} ({policy.value} policy of queue {run.queue.key})"
                    )
                    run.cursor += 1
                    continue
            if (policy is QueuePolicy.INTELLIGENT and run.high_blocked
                    and unit.priority < self._threshold(run.queue)):
                waiting[unit.key] = (
                    f"waiting: high-priority units of queue {run.queue.key} go first (Intelligent policy)"
                )
                run.cursor += 1
                continue
            return unit
        return None

    def _after_misfit(self, run: _QueueRun, unit: UnitInfo) -> None:
        policy = run.queue.policy
        if policy is QueuePolicy.BLOCK:
            run.blocked_by = unit.key
        elif policy is QueuePolicy.INTELLIGENT and unit.priority >= self._threshold(run.queue):
            run.blocked_by = unit.key
            run.high_blocked = True

    def _queue_rank(self, run: _QueueRun) -> tuple[int, float, str]:
        """Higher Queue priority first; among equals the quota furthest below its share."""
        used, runtime = self._used.get(run.quota, {}), self._runtime.get(run.quota, {})
        ratio = 0.0
        for name, share in runtime.items():
            if share > 0:
                ratio = max(ratio, used.get(name, 0) / share)
            elif used.get(name, 0) > 0:
                ratio = max(ratio, float("inf"))
        return (-run.queue.priority, ratio, run.queue.key)

    # --- quota arithmetic -------------------------------------------------------------

    def _path(self, quota: str) -> list[QuotaInfo]:
        out: list[QuotaInfo] = []
        q = self._quotas.get(quota)
        while q is not None and len(out) <= len(self._quotas):
            out.append(q)
            q = self._quotas.get(q.parent) if q.parent else None
        return out

    def _charge(self, quota: str, request: ResourceList, sign: int) -> None:
        for node in self._path(quota) or [QuotaInfo(quota, "", {}, {})]:
            used = self._used.setdefault(node.name, {})
            for name, amount in request.items():
                used[name] = used.get(name, 0) + sign * amount

    def _root_used(self) -> ResourceList:
        total: ResourceList = {}
        for name in self._children.get(None, []):
            for r, v in self._used.get(name, {}).items():
                total[r] = total.get(r, 0) + v
        return total

    def _reserved_by_others(self, parent: str | None, child: str) -> ResourceList:
        """Unused min of siblings that do not lend: out of everyone else's reach."""
        out: ResourceList = {}
        for sibling in self._children.get(parent, []):
            q = self._quotas[sibling]
            if sibling == child or q.allow_lent:
                continue
            used = self._used.get(sibling, {})
            for r, m in q.min.items():
                out[r] = out.get(r, 0) + max(0, m - used.get(r, 0))
        return out

    def _fits(self, quota: str, request: ResourceList) -> _Fit:
        path = self._path(quota)
        for node in path:
            used = self._used.get(node.name, {})
            for r, amount in sorted(request.items()):
                if amount and r in node.max and used.get(r, 0) + amount > node.max[r]:
                    return _Fit(False, self._too_much(quota, node.name, r, amount, used.get(r, 0), node.max[r], "max"),
                                self._within_runtime(quota, request))
            parent_limit = self._limit_of(node.parent)
            if parent_limit is None:
                continue
            parent_used = self._used.get(node.parent, {}) if node.parent else self._root_used()
            reserved = self._reserved_by_others(node.parent, node.name)
            for r, amount in sorted(request.items()):
                if amount and r in parent_limit:
                    have = parent_used.get(r, 0) + reserved.get(r, 0)
                    if have + amount > parent_limit[r]:
                        where = node.parent or "the cluster"
                        return _Fit(False, self._too_much(quota, where, r, amount, have, parent_limit[r],
                                                          "max" if node.parent else "capacity"),
                                    self._within_runtime(quota, request))
        return _Fit(True)

    def _limit_of(self, parent: str | None) -> ResourceList | None:
        """What all children of ``parent`` together may hold: its max, or the cluster."""
        if parent is None:
            return self._capacity
        return self._quotas[parent].max

    def _too_much(self, quota: str, where: str, r: str, ask: int, used: int, limit: int, what: str) -> str:
        prefix = f"waiting for quota {quota}" if where == quota else f"waiting for quota {quota} (limited by {where})"
        return (f"{prefix}: {r} asks {format_quantity(ask)}, used {format_quantity(used)} "
                f"of {what} {format_quantity(limit)}")

    def _within_runtime(self, quota: str, request: ResourceList) -> bool:
        runtime, used = self._runtime.get(quota, {}), self._used.get(quota, {})
        return all(used.get(r, 0) + a <= runtime.get(r, 0) for r, a in request.items() if a)

    # --- admission and preemption -----------------------------------------------------

    def _admit(self, unit: UnitInfo, run: _QueueRun, now: float) -> None:
        unit.admitted_quota = run.quota
        unit.admitted_queue = run.queue.key
        unit.admitted_at = now
        unit.requeue_at = None
        self._charge(run.quota, unit.request, +1)

    def _release(self, unit: UnitInfo) -> None:
        if unit.admitted_quota is not None:
            self._charge(unit.admitted_quota, unit.request, -1)
        unit.admitted_quota = unit.admitted_queue = unit.admitted_at = None

    def _backoff(self, unit: UnitInfo) -> float:
        c = self.config
        delay = min(c.backoff_cap, c.backoff_base * c.backoff_factor ** max(0, unit.attempts - 1))
        spread = (zlib.crc32(f"{unit.key}/{unit.attempts}".encode()) % 2001 - 1000) / 1000.0
        return delay * (1 + c.backoff_jitter * spread)

    def _preempt(self, victim: UnitInfo, preemptor: UnitInfo, now: float) -> Preemption:
        quota = victim.admitted_quota or ""
        self._release(victim)
        victim.attempts += 1
        victim.requeue_at = now + self._backoff(victim)
        reason = (f"preempted to make room for {preemptor.key} (priority {preemptor.priority}) "
                  f"in quota {self._resolve(preemptor).quota}; requeued with backoff")
        self._messages[victim.key] = reason
        return Preemption(victim.key, quota, preemptor.key, reason, victim.requeue_at)

    def _plan_preemption(self, run: _QueueRun, unit: UnitInfo, fit: _Fit, now: float
                         ) -> tuple[list[UnitInfo], float | None]:
        """The fewest victims that make room, or none; also when protection lifts."""
        candidates: list[UnitInfo] = []
        protected_until: float | None = None
        if self.config.reclaim and fit.reclaimable:
            for other in self._units.values():
                q = other.admitted_quota
                if q is None or q == run.quota or q in self._invalid:
                    continue
                if self._over_runtime(q):
                    candidates.append(other)
        if run.queue.preemption:
            candidates += [o for o in self._units.values()
                           if o.admitted_quota == run.quota and o.priority < unit.priority]
        eligible = []
        for other in candidates:
            if not other.preemptible:
                continue
            if other.admitted_at is not None and now - other.admitted_at < self.config.protect_seconds:
                protected_until = _earliest(protected_until, other.admitted_at + self.config.protect_seconds)
                continue
            eligible.append(other)
        if not eligible:
            return [], protected_until
        eligible.sort(key=lambda o: (o.priority, -(o.admitted_at or 0.0), o.key))
        chosen: list[UnitInfo] = []
        for other in eligible:
            q = other.admitted_quota
            if q is None or (q != run.quota and not self._over_runtime(q)):
                continue  # taking more would push that borrower below its own share
            if not _helps(other.request, unit.request):
                continue
            chosen.append(other)
            self._charge(q, other.request, -1)
            if self._fits(run.quota, unit.request).ok:
                break
        ok = self._fits(run.quota, unit.request).ok
        for other in chosen:  # undo the trial; the caller applies the real thing
            self._charge(other.admitted_quota or "", other.request, +1)
        if not ok:
            return [], protected_until
        # Fewest: drop any victim whose room is not needed after all.
        for other in list(reversed(chosen)):
            rest = [o for o in chosen if o is not other]
            for o in rest:
                self._charge(o.admitted_quota or "", o.request, -1)
            enough = self._fits(run.quota, unit.request).ok
            for o in rest:
                self._charge(o.admitted_quota or "", o.request, +1)
            if enough:
                chosen = rest
        return chosen, protected_until

    def _over_runtime(self, quota: str) -> bool:
        used, runtime = self._used.get(quota, {}), self._runtime.get(quota, {})
        return any(v > runtime.get(r, 0) for r, v in used.items() if v > 0)

    # --- the tree, demand and runtime quota ---------------------------------------

    def _refresh_tree(self) -> None:
        if not self._tree_dirty:
            return
        self._tree_dirty = False
        self._invalid = validate_quotas(self._quotas)
        self._children = {}
        for name in sorted(self._quotas):
            if name not in self._invalid:
                self._children.setdefault(self._quotas[name].parent, []).append(name)
        used: dict[str, ResourceList] = {}
        self._used = used
        for unit in self._units.values():
            if unit.admitted_quota is not None:
                self._charge(unit.admitted_quota, unit.request, +1)
        self._resolved.clear()

    def _refresh_runtime(self) -> None:
        pending: dict[str, ResourceList] = {}
        for unit in self._units.values():
            if unit.admitted_quota is None:
                res = self._resolve(unit)
                if res.quota is not None and res.reason is None:
                    acc = pending.setdefault(res.quota, {})
                    for r, v in unit.request.items():
                        acc[r] = acc.get(r, 0) + v
        demand: dict[str, ResourceList] = {}

        def leaf_demand(name: str) -> ResourceList:
            q = self._quotas[name]
            kids = self._children.get(name, [])
            if kids:
                total: ResourceList = {}
                for k in kids:
                    for r, v in leaf_demand(k).items():
                        total[r] = total.get(r, 0) + v
            else:
                total = dict(self._used.get(name, {}))
                for r, v in pending.get(name, {}).items():
                    total[r] = total.get(r, 0) + v
            for r in list(total):
                if r in q.max:
                    total[r] = min(total[r], q.max[r])
            demand[name] = total
            return total

        for top in self._children.get(None, []):
            leaf_demand(top)
        self._demand = demand
        runtime: dict[str, ResourceList] = {}

        def split(parent_total: ResourceList | None, kids: list[str]) -> None:
            if not kids:
                return
            resources = sorted({r for k in kids for r in (*self._quotas[k].max, *demand[k])})
            for k in kids:
                runtime[k] = {}
            for r in resources:
                mins, demands, weights = [], [], []
                for k in kids:
                    q = self._quotas[k]
                    m = q.min.get(r, 0)
                    d = demand[k].get(r, 0)
                    if not q.allow_lent:
                        d = max(d, m)
                    mins.append(m)
                    demands.append(d)
                    w = (q.shared_weight if q.shared_weight is not None else q.max).get(r, q.max.get(r, 0))
                    weights.append(w)
                total = None if parent_total is None else parent_total.get(r)
                shares = water_fill(total, mins, demands, weights, kids)
                for k, s in zip(kids, shares, strict=True):
                    runtime[k][r] = s
            for k in kids:
                split(runtime[k], self._children.get(k, []))

        split(self._capacity, self._children.get(None, []))
        self._runtime = runtime

    # --- resolution (SEMANTICS.md §5) ----------------------------------------------

    def _resolve(self, unit: UnitInfo) -> _Resolved:
        cached = self._resolved.get(unit.key)
        if cached is None:
            cached = self._resolve_fresh(unit)
            self._resolved[unit.key] = cached
        return cached

    def _resolve_fresh(self, unit: UnitInfo) -> _Resolved:
        if unit.invalid:
            return _Resolved(None, None, f"the job cannot be queued: {unit.invalid}")
        queue: QueueInfo | None = None
        if unit.queue_name:
            queue = (self._queues.get(f"{SYSTEM_NAMESPACE}/{unit.queue_name}")
                     or self._queues.get(f"{unit.namespace}/{unit.queue_name}"))
            if queue is None:
                return _Resolved(None, None, f"queue {unit.queue_name} does not exist")
            if queue.quota is None:
                return _Resolved(queue, None, f"queue {queue.key} is bound to no quota; it admits nothing")
            quota_name = queue.quota
        elif unit.quota_name:
            quota_name = unit.quota_name
        else:
            found = self._quota_for_namespace(unit.namespace)
            if isinstance(found, _Resolved):
                return found
            quota_name = found
        quota = self._quotas.get(quota_name)
        if quota is None:
            return _Resolved(queue, None, f"quota {quota_name} does not exist")
        if quota_name in self._invalid:
            return _Resolved(queue, quota_name, f"quota {quota_name} is not usable: {self._invalid[quota_name]}")
        if quota.is_parent:
            return _Resolved(queue, quota_name, f"quota {quota_name} is a parent quota; jobs go to its children")
        if unit.namespace != quota.namespace and unit.namespace not in quota.namespaces:
            return _Resolved(queue, quota_name,
                             f"quota {quota_name} is not bound to namespace {unit.namespace}; not admitted")
        if queue is None:
            queue = self._queue_of(f"{SYSTEM_NAMESPACE}/{quota_name}", quota_name)
        return _Resolved(queue, quota_name, None)

    def _quota_for_namespace(self, namespace: str) -> str | _Resolved:
        leaves = [q for q in self._quotas.values() if not q.is_parent]
        if any(q.name == namespace for q in leaves):
            return namespace
        living = [q.name for q in leaves if q.namespace == namespace]
        if len(living) == 1:
            return living[0]
        listing = [q.name for q in leaves if namespace in q.namespaces]
        if len(listing) == 1 and not living:
            return listing[0]
        if living or listing:
            names = ", ".join(sorted(living or listing))
            return _Resolved(None, None, f"namespace {namespace} has several quotas ({names}); "
                                         "name one with the label quota.scheduling.koordinator.sh/name")
        return _Resolved(None, None, f"no quota for namespace {namespace}: name one with the label "
                                     "quota.scheduling.koordinator.sh/name or a queue with "
                                     "scheduling.x-k8s.io/queue")

    def _queue_of(self, key: str, quota: str) -> QueueInfo:
        queue = self._queues.get(key)
        if queue is not None:
            return queue
        q = self._quotas.get(quota)
        ns, _, name = key.partition("/")
        return QueueInfo(name=name, namespace=ns, quota=quota, policy=q.policy if q else QueuePolicy.PRIORITY,
                         priority_threshold=q.priority_threshold if q else None)

    def _pending_by_queue(self) -> list[tuple[str, str, list[UnitInfo]]]:
        groups: dict[str, tuple[str, list[UnitInfo]]] = {}
        for unit in self._units.values():
            if unit.admitted_quota is not None:
                continue
            res = self._resolve(unit)
            if res.reason is not None or res.queue is None or res.quota is None:
                continue
            groups.setdefault(res.queue.key, (res.quota, []))[1].append(unit)
        out = []
        for key in sorted(groups):
            quota, units = groups[key]
            units.sort(key=lambda u: (-u.priority, u.created, u.namespace, u.name))
            out.append((key, quota, units))
        return out


def _helps(victim: ResourceList, need: ResourceList) -> bool:
    return any(victim.get(r, 0) > 0 for r, a in need.items() if a)


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
