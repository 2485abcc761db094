"""QueueUnits, pods, PriorityClasses and jobs into the engine: each unit as its object
says (holding quota, backing off, waiting) once the first sync is over, then as they
change; what a job asks for (through its view, never its unit's spec); where each job's
pods are bound and the room they take on each node. Each change of a job or its unit
queues the job for its reconciler (reconciler.py), its deletion too: the reconciler deletes
the unit it leaves (units_left).

The one writer of units: what the objects say about a unit reaches the engine through this
file alone (set_unit, remove_unit, set_pods_running, set_unit_pods), from the functions
below (the start-up loader, loading.py, calls load_unit) or the UnitSync part (the other
parts call its methods). The engine's own decisions about units are applied by
scheduler.py: a cycle's admissions, undone when their write fails (revert_admission), and
send-backs (requeue). scripts/engine_writers.py lists the callers; tests/controller/
test_one_writer.py holds them to this."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from koordqueue.api import constants as c
from koordqueue.api.quantity import add
from koordqueue.controller.phases import FINISHED, HOLDING, RUNNABLE, SENT_BACK
from koordqueue.controller.pods import NodeUsage, PodView
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.views import (
    JobView,
    UnitView,
    admitted_placement,
    held,
    orphan_info,
    priority_classes_changed,
    with_priority_classes,
)
from koordqueue.engine import Engine
from koordqueue.engine.model import Held, Placement, ResourceList, UnitInfo

UNRESOLVED = "(unresolved)"  # a unit held in a quota that is gone: charged to the cluster total


def capped(engine: Engine, info: UnitInfo) -> UnitInfo:
    """``info`` with its priority at most its quota's max-priority (annotation
    koord-queue/max-priority): what every unit is given to the engine with, so that no tenant
    ranks its jobs past other teams' by writing a large priority or naming a high PriorityClass."""
    cap = engine.priority_cap(info)
    if cap is not None and info.priority > cap[1]:
        info.priority = cap[1]
    return info


def count_as_admitted(engine: Engine, info: UnitInfo, since: float, placement: Placement | None = None) -> None:
    """Account a unit as holding quota, as its object says it does (not a hold: room the
    engine keeps for a waiting unit): in the quota it resolves to, else the one it names
    when that one is unusable now (its room then counts in its nearest usable ancestor),
    else the cluster's; ``placement``: what its status says was admitted (an elastic role
    in part)."""
    info.requeue_at = None
    info.placement = placement
    engine.set_unit(capped(engine, info))
    standing = engine.standing(info.key)
    info.admitted_quota = engine.flavor_of(info.key, placement) or \
        (standing.quota if standing and standing.quota else None) or engine.named_quota(info) or UNRESOLVED
    info.admitted_queue = standing.queue if standing else None
    info.admitted_at = since
    engine.set_unit(info)


def adopt_if_it_fits(engine: Engine, info: UnitInfo, since: float) -> str | None:
    """Account a job found running when the controller started (made while no webhook
    answered, say) as admitted, as count_as_admitted, if that takes no quota past its limit
    (max x oversellrate) nor further past it: None. Else leave it out of the engine and say
    which quota it does not fit: it is queued as any, and its job suspended."""
    before = engine.quota_status()
    count_as_admitted(engine, info, since)
    for name, status in engine.quota_status().items():
        was = before[name].used if name in before else {}
        for resource, used in status.used.items():
            cap = status.limit.get(resource)
            if cap is not None and used > cap and used > was.get(resource, 0):
                engine.remove_unit(info.key)
                info.admitted_quota = info.admitted_queue = info.admitted_at = None
                return f"it does not fit quota {name} ({resource}: {used} used with it, of at most {cap})"
    return None


def load_unit(engine: Engine, unit: UnitView, info: UnitInfo | None, now: float,
              orphan: str | None = None) -> float | None:
    """Put a unit into the engine (``info``: what its job asks for) where its object says it
    is: holding quota, backing off or waiting; return when it leaves back-off. ``orphan``:
    why it stands for no job we queue (orphans.orphan_reason): it waits, holding nothing,
    whatever its status says. The controller's start-up load and `koord-queue status`'s
    snapshot (loading.take_snapshot) both load units through here."""
    if orphan is not None:
        engine.set_unit(orphan_info(unit, orphan))
        return None
    assert info is not None, "a unit that is no orphan is loaded with what its job asks for"
    if unit.phase in FINISHED:
        return None
    if unit.phase in HOLDING:
        count_as_admitted(engine, info, unit.allocated_at or unit.created, admitted_placement(unit))
        return None
    requeue_at = None
    if unit.phase in SENT_BACK:
        requeue_at = unit.requeue_at if unit.requeue_at is not None else now
        info.requeue_at = requeue_at
    engine.set_unit(capped(engine, info))
    return requeue_at


def back_off_until(engine: Engine, key: str, until: float) -> None:
    """Keep a waiting unit out of the queue until ``until`` (its job's suspension is not
    written yet: scheduler._look_again). An admitted or unknown unit is left as it is."""
    known = engine.unit(key)
    if known is not None and known.admitted_quota is None:
        known.requeue_at = until
        engine.set_unit(known)


class Situation(NamedTuple):
    """Where a job's unit stands, read in one place (UnitSync.situation) for its reconciler
    to branch on: the engine's copy of it and what our views and records say."""

    known: UnitInfo | None  # the engine's copy (None: the engine does not have it)
    admitted: bool  # the engine holds it admitted (it holds quota)
    orphan: bool  # the engine holds it as standing for no job (made before its job)
    current: bool  # our view of the unit is at least as new as our last write of it
    owed: bool  # we sent it back and owe its job a suspension
    finished: bool  # its object says it finished (Succeeded, Failed)
    may_run: bool  # admitted, and its object says so (Dequeued or Running): its job may run


class UnitSync(Part):
    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.node_usage = NodeUsage()  # what bound pods take on each node: the engine's, for node fit
        # job item -> (unit key, uid) of the unit a deleted job left, for its reconciler to delete
        self.units_left: dict[str, tuple[str, str]] = {}
        # unit key -> the jobs that want a unit of that name another job's unit has
        # (reconciler.py): reconciled again when it goes, one of them gets the name then
        self.name_taken: dict[str, set[str]] = {}

    def wire(self) -> None:
        informers = self.informers

        def pcs_changed(*_: Any) -> None:
            informers.pc_version += 1  # jobs' priorities may change: their next views are made afresh
            informers.priority_classes.clear()
            informers.priority_classes.update(informers.pc.items())  # (those without a value are not kept)
            self._priority_classes_changed()

        informers.pc.on_add(pcs_changed)
        informers.pc.on_update(pcs_changed)
        informers.pc.on_delete(pcs_changed)
        informers.quota.on_update(self._max_priority_changed)  # (after quotasync's: the engine has it)
        informers.unit.on_add(self.unit_changed)
        informers.unit.on_update(lambda _old, new: self.unit_changed(new))
        informers.unit.on_delete(self._unit_deleted)
        informers.pod.on_add(self._pod_changed)
        informers.pod.on_update(lambda old, new: self._pod_changed(new, old))
        informers.pod.on_delete(self._pod_deleted)
        self._held_nodes: set[str] = set()  # nodes where allocated claims hold devices (_held_changed)
        for dra in informers.claims.informers()[1:]:  # claims (their allocations), slices (their pools)
            dra.on_add(self._held_changed)
            dra.on_update(self._held_changed)
            dra.on_delete(self._held_changed)
        for dra in informers.claims.informers()[:2]:  # templates, claims: the jobs whose pods use them
            changed = functools.partial(self._claims_changed, dra.resource.plural)
            dra.on_add(changed)
            dra.on_update(functools.partial(_new_only, changed))
            dra.on_delete(changed)
        for kind, inf in informers.jobs.items():
            inf.on_add(functools.partial(self._job_added, kind))
            inf.on_update(functools.partial(self._job_updated, kind))
            inf.on_delete(self._job_deleted)

    def situation(self, item: str, unit: UnitView) -> Situation:
        """Where the unit of job ``item`` stands: the engine's copy, our view, our records."""
        known = self.engine.unit(unit.key)
        admitted = known is not None and known.admitted_quota is not None
        return Situation(
            known=known,
            admitted=admitted,
            orphan=held(known) is Held.ORPHAN,
            current=self.records.newer(unit.key, unit.resource_version),
            owed=item in self.shared.owed,
            finished=unit.phase in FINISHED,
            may_run=admitted and unit.phase in RUNNABLE,
        )

    def pods_running(self, key: str, running: bool) -> bool:
        """Tell the engine whether all pods of the admitted unit run (a Queue with
        wait-for-pods-running admits nothing more until they do); whether that changed."""
        return self.engine.set_pods_running(key, running)

    def work_done(self, key: str, done: bool) -> None:
        """Tell the engine whether all pods of the admitted unit have succeeded: its job ends
        anyway, so it is no victim for a grace (its controller may write so seconds later
        under load; preempting it meanwhile would fail that write and delay its end)."""
        self.engine.set_work_done(key, done, self.clock())

    def finished(self, key: str) -> None:
        """The unit's job ended (its Succeeded or Failed written): its quota, or its place in line, is released."""
        self.engine.remove_unit(key)
        self.wake.set()

    def adopt_if_it_fits(self, info: UnitInfo, since: float) -> str | None:
        """A job found running at start-up accounted as admitted if it fits (adopt_if_it_fits)."""
        return adopt_if_it_fits(self.engine, info, since)

    def _remember_deletion(self, key: str, what: str) -> None:
        self.shared.recent.deleted(self.engine, self.clock(), key, what)

    def load_units(self) -> None:
        """After the first sync: every unit as its object says (holding, backing off, waiting)."""
        now = self.clock()
        for _, unit in self.informers.unit.items():
            self.records.unit_to_write(unit.key).rv = unit.resource_version
            orphan = self.informers.orphan_reason(unit)
            if orphan is not None:
                load_unit(self.engine, unit, None, now, orphan=orphan)
                continue
            requeue_at = load_unit(self.engine, unit, self.informers.unit_info(unit), now)
            if requeue_at is not None:
                self.shared.backoffs.push(requeue_at, unit.key)
            job = self.informers.job_of(unit)
            if job is not None:
                self._tell_unit_pods(job)
            if unit.phase in SENT_BACK and job is not None and not job.suspended and not job.state.ended:
                self.shared.owed.owe(unit.job_key)  # the last controller stopped before suspending it
            if unit.phase not in FINISHED:
                self.records.unit_to_write(unit.key).written_message = unit.message

    async def unit_changed(self, unit: UnitView) -> None:
        if not self.records.newer(unit.key, unit.resource_version):
            return  # older than what we wrote ourselves: nothing new
        self.records.unit_to_write(unit.key).rv = unit.resource_version
        if not self.shared.sync_done:
            return
        current = self.engine.unit(unit.key)
        if unit.phase in FINISHED:
            if current is not None:
                self.engine.remove_unit(unit.key)
                self.wake.set()
        elif current is None:
            orphan = self.informers.orphan_reason(unit)
            if orphan is not None:
                self.engine.set_unit(orphan_info(unit, orphan))
            elif unit.phase in HOLDING:
                count_as_admitted(self.engine, self.informers.unit_info(unit), unit.allocated_at or unit.created,
                                  admitted_placement(unit))
            else:
                self.engine.set_unit(capped(self.engine, self.informers.unit_info(unit)))
            job = self.informers.job_of(unit)
            if job is not None:
                self._tell_unit_pods(job)
            self.wake.set()
        else:
            self._refresh_asks(unit, current)
        if self.informers.bare(unit):
            self.jobs_queue.add(f"{c.QUEUE_UNIT_KIND}/{unit.key}")  # (reconciler.py: its checks, its growth)
        else:
            self._enqueue_job(unit.job_key, self.informers.job_of(unit))

    def _refresh_asks(self, unit: UnitView, current: UnitInfo) -> None:
        """Give the engine what the unit's job asks for now, its admission state kept (the
        engine owns that while we run). Admitted, it asks each pod at least what it was
        admitted with (views.as_admitted_per_pod): a job that shrank is charged less only
        for fewer pods."""
        info = capped(self.engine, self.informers.unit_info(unit))
        if not _spec_changed(current, info):
            return
        info.admitted_quota, info.admitted_queue = current.admitted_quota, current.admitted_queue
        info.admitted_at, info.requeue_at = current.admitted_at, current.requeue_at
        if info.invalid is None and held(current) is Held.INACTIVE:
            info.requeue_at = None  # made active again: queued at once (its send-back was no failure)
        info.attempts, info.placement = current.attempts, current.placement
        if current.admitted_quota is not None and info.invalid is not None:
            info.request = current.request  # its job unusable now: it holds what it was admitted with
        elif current.admitted_quota is not None and grown(current.request, info.request):
            # Grown since its admission (more replicas, say): charged no more than it was
            # admitted with, never past its quota's max; its job's reconciler sends it back to
            # be queued at its new size (reconciler.py), and refresh_asks is called again then.
            info.request, info.pod_sets = current.request, current.pod_sets
        self.engine.set_unit(info)
        self.wake.set()

    def refresh_asks(self, unit: UnitView) -> None:
        """The engine told what the unit's job asks for now (after its unit was sent back)."""
        current = self.engine.unit(unit.key)
        if current is not None and unit.phase not in FINISHED:
            self._refresh_asks(unit, current)

    def _max_priority_changed(self, old: Any, new: Any) -> None:
        """A quota's max-priority changed: every unit not finished is given its priority anew
        (capped by the new bound, or not), and its job reconciled (and told)."""
        key = c.ANNOTATION_MAX_PRIORITY
        if not self.shared.sync_done or \
                ((old.get("metadata") or {}).get("annotations") or {}).get(key) == \
                ((new.get("metadata") or {}).get("annotations") or {}).get(key):
            return
        for _, unit in self.informers.unit.items():
            current = self.engine.unit(unit.key)
            if current is not None and unit.phase not in FINISHED:
                self._refresh_asks(unit, current)
                self.jobs_queue.add(unit.job_key)

    async def _unit_deleted(self, unit: UnitView) -> None:
        self._remember_deletion(unit.key, f"QueueUnit {unit.key} was deleted")
        self.engine.remove_unit(unit.key)
        self.records.forget_unit(unit.key)
        self.jobs_queue.add(unit.job_key)
        for item in self.name_taken.pop(unit.key, ()):
            self.jobs_queue.add(item)
        self.wake.set()

    # --- pods: where they are bound, which jobs they belong to ------------------------

    def _pod_changed(self, pod: PodView, old: PodView | None = None) -> None:
        self._pod_room(self.node_usage.put(pod), pod)
        if not pod.job_label or (old is not None and old.phase == pod.phase):
            return
        self.informers.pods.put(pod)
        self._tell_work_done(pod)
        self._pod_owner_changed(pod)

    def _pod_deleted(self, pod: PodView) -> None:
        self._pod_room(self.node_usage.remove(pod), pod)
        if not pod.job_label:
            return
        self.informers.pods.remove(pod)
        self._tell_work_done(pod)
        self._pod_owner_changed(pod)

    def _tell_work_done(self, pod: PodView) -> None:
        """At once, not when the job's worker comes to it: the pods of the pod's job all
        succeeded, or no longer (``work_done``)."""
        for _, job in self.informers.jobs_of_pod(pod):
            self.work_done(job.unit_key, self.informers.pod_count(job).all_succeeded)

    def _node_used(self, node: str) -> ResourceList:
        """What bound pods request on ``node``, and the devices allocated claims hold there (DRA)."""
        used = self.node_usage.used.get(node, {})
        held = self.informers.claims.node_held().get(node)
        return add(used, held) if held else used

    def _held_changed(self, *_: object) -> None:
        """A claim's allocation or a slice changed: the devices held on nodes, as used room."""
        held = self.informers.claims.node_held()
        for node in self._held_nodes | held.keys():
            self.engine.set_node_usage(node, self._node_used(node))
        self._held_nodes = set(held)
        self.wake.set()

    def _pod_room(self, nodes: set[str], pod: PodView) -> None:
        """A pod bound, ended or gone: the room on its node changed, and where its job's pods are."""
        if not nodes:
            return
        for node in nodes:
            self.engine.set_node_usage(node, self._node_used(node))
        if pod.job_label:
            for _, job in self.informers.jobs_of_pod(pod):
                self._tell_unit_pods(job)
        self.wake.set()

    def _tell_unit_pods(self, job: JobView) -> None:
        """Where the pods of the job's unit are bound: the room they take is theirs, not the
        unbound pods' its admission planned."""
        if job.pods is not None:
            where = self.node_usage.bound((job.pods[0], job.namespace, job.pods[1]),
                                          tuple(ps.name for ps in job.pod_sets))
            self.engine.set_unit_pods(job.unit_key, where)

    def _pod_owner_changed(self, pod: PodView) -> None:
        for item, _ in self.informers.jobs_of_pod(pod):
            self.jobs_queue.add(item)

    # --- jobs: what they ask for ---------------------------------------------------------

    def _priority_classes_changed(self) -> None:
        """The jobs naming a PriorityClass that came, went or changed: the engine gets their
        new priority (or holds them, or lets them go) now, their units are rewritten."""
        if not self.shared.sync_done:
            return  # load_units reads every job's view as it is then
        for kind, informer in self.informers.jobs.items():
            for key, job in informer.items():
                if job.priority_classes and priority_classes_changed(job, self.informers.priority_classes):
                    self._job_changed(f"{kind}/{key}", with_priority_classes(job, self.informers.priority_classes))

    def _claims_changed(self, plural: str, obj: Any) -> None:
        """A ResourceClaimTemplate or ResourceClaim came, changed or went: the jobs whose pods
        use one of its name in its namespace are charged anew (a job waiting for it is
        queued; an admitted one that grew is sent back, charged no more meanwhile)."""
        if not self.shared.sync_done:
            return  # load_units reads every job's view as it is then
        namespace, name = obj["namespace"], obj["name"]
        templates = plural == c.RESOURCE_CLAIM_TEMPLATE_PLURAL
        for kind, informer in self.informers.jobs.items():
            for job_key, job in informer.items():
                if job.namespace == namespace and any(name in (names.templates if templates else names.claims)
                                                      for _, names in job.pod_claims):
                    item = f"{kind}/{job_key}"
                    view = self.informers.job_view(item)
                    if view is not None:
                        self._job_changed(item, view)

    def _job_added(self, kind: str, job: JobView) -> None:
        self._job_changed(f"{kind}/{job.key}", job)

    def _job_updated(self, kind: str, old: JobView, job: JobView) -> None:
        if old.pods != job.pods:  # a RayJob's new Ray cluster: where its pods are bound, anew
            self._tell_unit_pods(job)
        self._job_changed(f"{kind}/{job.key}", job)

    def _job_changed(self, item: str, job: JobView) -> None:
        """What the job asks for goes to the engine at once (not through its unit's spec,
        which the job's reconciler rewrites later); then the job is reconciled."""
        unit = self.informers.unit.get(job.unit_key)
        current = self.engine.unit(job.unit_key) if self.shared.sync_done else None
        if unit is not None and current is not None and unit.phase not in FINISHED:
            self._refresh_asks(unit, current)
        self._enqueue_job(item, job)

    def _enqueue_job(self, item: str, job: JobView | None) -> None:
        """A job that ended goes ahead of the others: reconciling it releases its quota, and
        it must not wait behind thousands of new jobs to be given units."""
        self.jobs_queue.add(item, urgent=job is not None and job.state.ended)

    def _job_deleted(self, job: JobView) -> None:
        item = f"{job.kind}/{job.key}"
        self.records.forget_job(item)
        self._remember_deletion(job.unit_key, f"{job.kind} {job.key} was deleted")
        self.engine.remove_unit(job.unit_key)
        self.wake.set()
        # Its unit goes now, as Koord-Queue deletes it, not when the garbage collector gets to
        # it: kube-controller-manager's watches a new CRD's objects only from its next discovery
        # (every 30 s), and a job deleted with --cascade=orphan leaves its unit for good.
        unit = self.informers.unit.get(job.unit_key)
        if unit is not None and (unit.consumer_kind, unit.consumer_name) == (job.kind, job.name):
            self.units_left[item] = (unit.key, unit.uid)
            self.jobs_queue.add(item)


def _new_only(handler: Any, _old: Any, new: Any) -> None:
    handler(new)


def grown(admitted: ResourceList, asks: ResourceList) -> list[str]:
    """The resources of which a job asks more now than its unit was admitted with."""
    return sorted(name for name, amount in asks.items() if amount > admitted.get(name, 0))


def _spec_changed(current: UnitInfo, new: UnitInfo) -> bool:
    return (current.priority, current.request, current.queue_name, current.quota_name, current.preemptible,
            current.invalid, current.pod_sets) != (new.priority, new.request, new.queue_name, new.quota_name,
                                                   new.preemptible, new.invalid, new.pod_sets)
