"""The job reconciler: keeps every job and its QueueUnit in step. A new job gets its unit
and is suspended until admitted; an admitted unit's job is resumed (jobswitch.py), one sent
back is suspended; Reserved units pass or fail their admission checks; a running job's
unit follows it (Running, podState, the wait-for-pods-running timeout) and is finished
when it ends; a unit's spec and labels are its job's (a hand edit is undone). A job running
with no admission (its suspend field set to false by its tenant) is suspended again; an
admitted job that asks for more than it was admitted with is sent back, to be queued at its
new size. Runs in the job workers, one job at a time each (kube/workqueue.py)."""

from __future__ import annotations

import logging
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.dra import missing_reason
from koordqueue.api.objects import QueueSettings
from koordqueue.api.quantity import QuantityError, format_quantity, parse_resource_list
from koordqueue.controller import status as st
from koordqueue.controller.eventline import job_ref, unit_ref
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.lifetime import Lifetime
from koordqueue.controller.phases import HOLDING
from koordqueue.controller.resources import UNITS
from koordqueue.controller.scheduler import Scheduler
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import PENDING_INFORM_SECONDS, UnitStatusWriter
from koordqueue.controller.unitsync import Situation, UnitSync, grown
from koordqueue.controller.views import (
    JobView,
    Object,
    UnitView,
    adapter_of_kind,
    admitted_placement,
    held,
    missing_class_reason,
    queue_unit_manifest,
    unit_info,
    unit_view,
)
from koordqueue.engine.model import Held, UnitInfo
from koordqueue.jobs.base import JobAdapter, JobState, quota_of_labels
from koordqueue.kube.errors import AlreadyExists, Conflict, KubeError, NotFound
from koordqueue.kube.events import ObjectRef

log = logging.getLogger(__name__)

UNIT_LABELS_OWNED = (c.LABEL_QUOTA_NAME, c.LABEL_PREEMPTIBLE)  # the unit's labels the engine reads
# How long a unit we created may take to come through our watch before its job's next
# reconcile takes it for missing and creates it again (a create refused as AlreadyExists is a
# request for nothing: under load the watch lags the job's own updates).
UNIT_UNSEEN_SECONDS = 30.0


class JobReconciler(Part):
    def __init__(self, shared: Shared, unit_sync: UnitSync, status: UnitStatusWriter, switch: JobSwitch,
                 scheduler: Scheduler, queue_settings: dict[str, QueueSettings]) -> None:
        super().__init__(shared)
        self.unit_sync = unit_sync
        self.status = status
        self.switch = switch
        self.scheduler = scheduler
        self.queue_settings = queue_settings  # (quotasync.py's)
        self.lifetime = Lifetime(shared, scheduler, status)  # active and maximumExecutionTimeSeconds

    async def reconcile(self, item: str) -> None:
        """Bring job ``item`` and its unit in step. Numbered as Kueue's ReconcileGenericJob:
        each step either ends the reconcile (a write whose echo brings the next one) or
        falls through to the next. Where the unit stands is read in one place
        (UnitSync.situation), again only after a step that changed it."""
        kind = item.partition("/")[0]
        # 1. A bare QueueUnit (no job of ours behind it): its own, shorter reconcile.
        if kind == c.QUEUE_UNIT_KIND:
            await self._reconcile_bare(item.partition("/")[2])
            return
        # 2. The job is gone: the unit it left is deleted (that unit, by its uid); being deleted: nothing to do.
        job = self.informers.job_view(item)
        if item in self.unit_sync.units_left:
            if job is None:
                await self._delete_unit_left(*self.unit_sync.units_left[item])  # (a failure comes back here)
            del self.unit_sync.units_left[item]
        if job is None or job.deleting:
            return
        self._warn_of_missing_classes(item, job)
        self._warn_of_missing_claims(item, job)
        adapter = adapter_of_kind(kind)
        # 3. No unit yet: create it, the job suspended until it is admitted.
        unit = self.informers.unit.get(job.unit_key)
        if unit is None:
            if not job.state.ended and not self._created_unseen(item, job.unit_key):
                await self._create_unit(item, job, adapter)
            return
        # 4. The unit of that name belongs to another job: not ours to drive; this job waits, suspended.
        if unit.consumer_name != job.name or unit.consumer_kind != job.kind:
            await self._name_taken(item, job, adapter, unit)
            return
        now = self.unit_sync.situation(item, unit)
        self._tell_priority_cap(item, job, now.known)
        # 5. The engine holds the unit as an orphan (made before its job): it stands for this job now.
        if now.orphan:
            await self.unit_sync.unit_changed(unit)
            now = self.unit_sync.situation(item, unit)
        # 6. The job ended: its unit is finished whatever our view of it says (a view older than
        # our last write, a Running say, would wait for our watch to bring that write first).
        if job.state.ended and (now.known is not None or now.current):
            await self._finish(unit, job, now)
            if job.suspended and job.finishes_once_resumed:
                await self.switch.let_finish(job, adapter)
            return
        # 7. We sent its unit back: its job stops now. Not from our views: the one of the unit
        # may not show the send-back yet (and we would wait for it below), the one of the job
        # may not show our resume yet (and take it for a job suspended already).
        if now.owed:
            await self.switch.suspend(job, adapter)
            return  # the rest when our watch brings that suspension back
        # 8. We wrote a newer version of the unit than our watch has brought: act on that one when it comes.
        if not now.current:
            return
        # 9. Inactive, or run past its maximum: sent back, its job suspended when that lands.
        if await self.lifetime.enforce(item, unit, job):
            return
        # 10. Asks for more than it was admitted with: sent back, queued again at its new size.
        if await self._send_back_grown(unit, job, now):
            return
        # 11. Reserved: its admission checks decide (a failed one sends it back).
        if unit.phase == c.Phase.RESERVED.value:
            self.unit_sync.pods_running(unit.key, False)  # (held, its pods not made yet: after a restart too)
            if await self._check_admission(unit, job):
                return  # its job suspended when that lands
        # 12. The job runs if and only if its unit is admitted: resumed, suspended, or its
        # pods put back.
        if not job.suspended:
            self.switch.seen_running(item)
        if now.may_run and job.suspended:
            await self._resume(item, unit, job, now)
        elif not now.may_run and not job.suspended and not now.finished and not (
                unit.phase in HOLDING and not now.admitted):
            # (A unit whose object still holds quota that the engine has taken back is being
            # preempted or sent back: its job is suspended once that status is written, never
            # before, or a write that fails would leave a job stopped and resumed again for nothing.)
            # Running with no admission: its suspend field set to false by hand (the annotation
            # left: told so), or made while no webhook answered. Suspended again: its pods go.
            await self.switch.suspend(job, adapter)
            if job.suspend_annotated:
                self._event(job_ref(job), c.EventType.WARNING, c.EventReason.SUSPENDED,
                            f"not admitted (its QueueUnit {unit.name} is {unit.phase or 'new'}), yet its suspend "
                            "field was set to false: suspended again; it runs once its QueueUnit is admitted")
        elif not now.may_run and job.suspended and job.placed and not now.finished:
            await self.switch.put_back(job)
        # 13. Admitted: its unit follows the run (Running, podState, wait-for-pods-running).
        if now.may_run:
            await self._follow_running(item, unit, job, now)
        # 14. The unit's spec and the labels the engine reads are its job's: a hand edit is undone.
        if job.unit_spec is not None and not now.finished and _unit_spec_drifted(unit, job):
            await self.client.patch(UNITS, unit.name, {"spec": _restoring(unit, job.unit_spec)},
                                    namespace=unit.namespace)
            self._event(unit_ref(unit), c.EventType.WARNING, c.EventReason.SPEC_RESTORED,
                        "spec edited by hand; restored from the job (edit the job instead)")
        labels = _unit_labels_drifted(unit, job)
        if labels and job.unit_spec is not None and not now.finished:
            await self.client.patch(UNITS, unit.name, {"metadata": {"labels": labels}}, namespace=unit.namespace)
            said = ", ".join(f"{k}={v}" if v is not None else f"{k} removed" for k, v in sorted(labels.items()))
            self._event(unit_ref(unit), c.EventType.WARNING, c.EventReason.SPEC_RESTORED,
                        f"labels set from the job: {said} (edit the job instead)")

    async def _reconcile_bare(self, key: str) -> None:
        """A bare unit (no job of ours behind it; views.bare_unit_info) holding quota: Reserved, its
        admission checks decide (as a job's unit's); grown since its admission (its owner raised
        spec.resource or a podSet's count, as Koord-Queue's extensions do when a job's replicas
        change), it is sent back as Preempted, its quota released, and queued again at its new
        size: charged only what it was admitted with meanwhile, it would run past its quota's max.
        Its owner, not we, starts and stops its workload."""
        unit = self.informers.unit.get(key)
        if unit is None or not self.informers.bare(unit):
            return
        now = self.unit_sync.situation(f"{c.QUEUE_UNIT_KIND}/{key}", unit)
        known = now.known
        if now.finished or not now.current or known is None or not now.admitted:
            return  # nothing to decide: finished, our view older than our last write, or holding no quota
        asks = self.informers.unit_info(unit)
        grew = grown(known.request, asks.request) if asks.invalid is None else []
        if held(asks) is Held.INACTIVE:  # its spec.active set false
            await self.scheduler.send_back(unit, None, c.Phase.PREEMPTED, f"{asks.invalid}; quota released",
                                           event=c.EventReason.DEACTIVATED)
        elif grew:
            said = ", ".join(f"{name} {format_quantity(asks.request[name])} (admitted with "
                             f"{format_quantity(known.request.get(name, 0))})" for name in grew)
            await self.scheduler.send_back(unit, None, c.Phase.PREEMPTED,
                                           f"it asks for more than it was admitted with: {said}; quota released, "
                                           "queued again at its new size", event=c.EventReason.PREEMPTED)
            self.unit_sync.refresh_asks(unit)
        elif unit.phase == c.Phase.RESERVED.value:
            await self._check_admission(unit, None)

    async def _send_back_grown(self, unit: UnitView, job: JobView, now: Situation) -> bool:
        """An admitted job that asks for more than it was admitted with (its replicas, parallelism
        or pods' requests raised since) is suspended and queued again at its new size, as Kueue
        stops a job that no longer matches its Workload: admitted, it was charged only what it
        had (unitsync.py), and its pods past that would run past its quota's max. One that shrank
        stays: charged less for fewer pods at once, but each pod at least what it was admitted
        with (views.as_admitted_per_pod: its running pods keep that). Whether it was sent back."""
        known = now.known
        if known is None or not now.admitted or job.unit_spec is None or now.finished:
            return False
        asks = self.informers.unit_info(unit)
        if asks.invalid is not None:
            return False
        said = _growth(known, unit, job, asks)
        if not said:
            return False
        await self.scheduler.send_back(unit, job, c.Phase.ENQUEUED,
                                       f"it asks for more than it was admitted with: {said}; suspended, quota "
                                       "released, queued again at its new size", event=c.EventReason.SUSPENDED)
        self.unit_sync.refresh_asks(unit)  # the engine queues it at its new size
        return True

    async def _resume(self, item: str, unit: UnitView, job: JobView, now: Situation) -> None:
        """Resume the admitted job. A resume that keeps failing (refused by the API server or a
        webhook: say its tenant filled its annotations up to the size limit) is retried, and
        after ``resume_refused_seconds`` its unit is sent back, its quota released: a job that
        cannot be let run must not hold quota for ever."""
        try:
            await self.switch.resume(job)
        except (Conflict, NotFound):
            raise  # a newer view comes (or the job is gone): no refusal
        except KubeError as e:
            record = self.records.job_to_write(item)
            at = self.clock()
            admission = now.known.admitted_at if now.known is not None else None
            if record.resume_failing is None or record.resume_failing[0] != admission:
                record.resume_failing = (admission, at)  # (failures of an earlier admission do not count)
            bound = self.config.resume_refused_seconds
            left = record.resume_failing[1] + bound - at
            if left > 0:
                self.jobs_queue.add_after(item, left + 0.05)  # looked at by the bound at the latest
                raise
            record.resume_failing = None
            await self.scheduler.send_back(unit, job, c.Phase.TIMEOUT_BACKOFF,
                                           f"its job could not be resumed for {bound:g} s ({_first_line(e)}); "
                                           "quota released")
            return
        done = self.records.job(item)
        if done is not None:
            done.resume_failing = None

    def _tell_priority_cap(self, item: str, job: JobView, known: UnitInfo | None) -> None:
        """A Warning on the job, once for each bound, when it asks for more priority than its
        quota's max-priority: it is queued at the bound (loading.capped)."""
        asked = (job.unit_spec or {}).get("priority")
        cap = self.engine.priority_cap(known) if known is not None and not job.state.ended else None
        record = self.records.job(item)
        if cap is None or not isinstance(asked, int) or asked <= cap[1]:
            if record is not None:
                record.told_priority_cap = None
            return
        if record is not None and record.told_priority_cap == cap[1]:
            return
        self.records.job_to_write(item).told_priority_cap = cap[1]
        self._event(job_ref(job), c.EventType.WARNING, c.EventReason.PRIORITY_CAPPED,
                    f"priority {asked} capped at {cap[1]}, the most quota {cap[0]} allows "
                    f"(annotation {c.ANNOTATION_MAX_PRIORITY})")

    async def _name_taken(self, item: str, job: JobView, adapter: JobAdapter, unit: UnitView) -> None:
        """Units are named job name + the kind's suffix (Koord-Queue's names), so a batch Job
        named ``train-py-qu`` and PyTorchJob ``train`` want one unit. The job that finds it taken
        is told (once per holder), kept suspended (it has no unit: nothing admits it) and looked
        at again when that unit goes (unitsync.py)."""
        self.unit_sync.name_taken.setdefault(unit.key, set()).add(item)
        holder = f"{unit.consumer_kind} {unit.namespace}/{unit.consumer_name}"
        record = self.records.job_to_write(item)
        if record.told_name_taken != holder:
            record.told_name_taken = holder
            self._event(job_ref(job), c.EventType.WARNING, c.EventReason.QUEUE_UNIT_NAME_TAKEN,
                        f"not queued: its QueueUnit {unit.name} is the unit of {holder}; this job waits, "
                        "suspended, until that unit is gone (rename one of the two jobs)")
        if not job.suspended and not job.state.ended:
            await self.switch.suspend(job, adapter)

    async def _delete_unit_left(self, key: str, uid: str) -> None:
        """The unit of a deleted job: that one (its uid), not one a new job of the name has since."""
        namespace, _, name = key.partition("/")
        try:
            await self.client.delete(UNITS, name, namespace=namespace, preconditions={"uid": uid})
        except (NotFound, Conflict):
            pass  # gone already (the garbage collector's), or another unit by now

    def _warn_of_missing_classes(self, item: str, job: JobView) -> None:
        """A Warning on the job, once for each set of missing PriorityClasses it waits for."""
        missing = job.missing_priority_classes if job.unit_spec is not None and not job.state.ended else ()
        record = self.records.job(item)
        if not missing:
            if record is not None:
                record.warned_of_classes = None
        elif (record.warned_of_classes if record is not None else None) != missing:
            self.records.job_to_write(item).warned_of_classes = missing
            self._event(job_ref(job), c.EventType.WARNING, c.EventReason.PRIORITY_CLASS_NOT_FOUND,
                        f"not admitted: {missing_class_reason(missing)}")

    def _warn_of_missing_claims(self, item: str, job: JobView) -> None:
        """A Warning on the job, once for each set of missing templates and claims it waits for."""
        missing = job.claims_missing if job.unit_spec is not None and not job.state.ended else ()
        record = self.records.job(item)
        if not missing:
            if record is not None:
                record.warned_of_claims = None
        elif (record.warned_of_claims if record is not None else None) != missing:
            self.records.job_to_write(item).warned_of_claims = missing
            self._event(job_ref(job), c.EventType.WARNING, c.EventReason.RESOURCE_CLAIM_NOT_FOUND,
                        f"not admitted: {missing_reason(missing)}")

    def _created_unseen(self, item: str, key: str) -> bool:
        """Whether we created the unit lately and our watch has not brought it yet: its arrival
        reconciles the job; should it never come, the job is looked at again after the bound."""
        record = self.records.unit(key)
        if record is None or record.created_at is None:
            return False
        left = record.created_at + UNIT_UNSEEN_SECONDS - self.clock()
        if left <= 0:
            record.created_at = None  # (assumed lost: created again, or found AlreadyExists)
            return False
        self.jobs_queue.add_after(item, left + 0.05)
        return True

    async def _create_unit(self, item: str, job: JobView, adapter: JobAdapter) -> None:
        if job.invalid or job.unit_spec is None:
            self._event(job_ref(job), c.EventType.WARNING, c.EventReason.INVALID_JOB,
                        f"not queued: {job.invalid or 'unreadable'}")
            if not job.suspended:
                await self.switch.suspend(job, adapter)
            return
        body = queue_unit_manifest(job)
        # A job that already ran before we started is accounted, not disturbed; a later one is suspended.
        adopt = not job.suspended and item in self.shared.initial_jobs and (
            job.state is JobState.RUNNING or self.informers.pod_count(job).running > 0)
        unfit = None
        if adopt:  # (unless it would take its quota past max: queued, and suspended, as any)
            unfit = self.unit_sync.adopt_if_it_fits(unit_info(unit_view(body), job), job.created)
            adopt = unfit is None
        try:
            created = await self.client.create(UNITS, body, namespace=job.namespace)
        except AlreadyExists:
            return
        record = self.records.unit_to_write(job.unit_key)
        record.rv, record.created_at = str(created["metadata"]["resourceVersion"]), self.clock()
        ref = ObjectRef.of(created)
        if adopt:
            await self.status.write(job.unit_key, {**st.running(), "message": "adopted: it was already running"})
            return
        # No status yet: the engine says where the unit stands in the message it sends for
        # every new unit, and that message brings the phase Enqueued with it (one write, at
        # the next flush of messages); a unit admitted before then gets its phase from that.
        self._event(ref, c.EventType.NORMAL, c.EventReason.ENQUEUED,
                    "queued" if unfit is None else f"queued, though it was running when the controller started: {unfit}")
        if not job.suspended:
            await self.switch.suspend(job, adapter)

    async def _finish(self, unit: UnitView, job: JobView, now: Situation) -> None:
        if now.finished:
            return
        succeeded = job.state is JobState.SUCCEEDED
        await self.status.write(unit.key, st.finished(succeeded), limit=self.status.job_line)
        self.shared.owed.forgive(unit.job_key)  # it runs no more
        known = self.engine.unit(unit.key)  # (read again: the write above awaited)
        self._remember("finished", unit.key, known.admitted_quota if known else None, f"the job {job.state.value}")
        if succeeded and known is not None and known.admitted_quota and known.admitted_at is not None:
            self.shared.runtimes.record(known.admitted_quota, job.name, self.clock() - known.admitted_at)
        self.unit_sync.finished(unit.key)
        record = self.records.unit(unit.key)
        if record is not None:
            record.finished()
        if not succeeded:  # (a success is told by the unit's phase: an event each would double the writes of most)
            self._event(unit_ref(unit), c.EventType.WARNING, c.EventReason.FAILED,
                        f"the job {job.state.value}; its quota is released")

    async def _check_admission(self, unit: UnitView, job: JobView | None) -> bool:
        """Reserved: all checks Ready → Dequeued; any Retry or Rejected → back to the queue
        (True: it was sent back)."""
        states = dict(unit.checks)
        failed = sorted(name for name, state in states.items()
                        if state in (c.AdmissionCheckState.RETRY, c.AdmissionCheckState.REJECTED))
        if failed:
            said = ", ".join(f"{name} said {states[name]}" for name in failed)
            await self.scheduler.send_back(unit, job, c.Phase.TIMEOUT_BACKOFF,
                                           f"admission check {said}; quota released")
            return True
        if states and all(state == c.AdmissionCheckState.READY for state in states.values()):
            await self.status.write(unit.key, st.checks_passed(sorted(states)))
            self._event(unit_ref(unit), c.EventType.NORMAL, c.EventReason.DEQUEUED, "admission checks passed")
        return False

    async def _follow_running(self, item: str, unit: UnitView, job: JobView, now: Situation) -> None:
        """An admitted job: Running when it runs, podState, and the wait-for-pods-running
        timeout; the engine is told whether its pods run (a Queue with wait-for-pods-running
        admits nothing more until they do)."""
        if self.unit_sync.pods_running(unit.key, job.state is JobState.RUNNING or
                                       unit.phase == c.Phase.RUNNING.value):
            self.wake.set()
        pods = self.informers.pod_count(job)
        self.unit_sync.work_done(unit.key, pods.all_succeeded)
        change = st.pod_state(unit, pods)
        if job.state is JobState.RUNNING and unit.phase == c.Phase.DEQUEUED.value:
            self._mark_running(item, unit.key, {**st.running(), **(change or {})})
            return
        if change is not None and (pods.running or pods.pending or unit.pod_state):
            only_pending = not pods.running and unit.phase == c.Phase.DEQUEUED.value  # none runs yet
            self.status.inform(unit.key, change, touch=False, within=PENDING_INFORM_SECONDS if only_pending else None)
        if unit.phase != c.Phase.DEQUEUED.value:
            return
        known = now.known
        settings = self.queue_settings.get(known.admitted_queue or "") if known else None
        if settings is None or not settings.wait_for_pods_running:
            return
        admitted = unit.allocated_at or (known.admitted_at if known and known.admitted_at else self.clock())
        since = self.switch.pods_timed_from(unit.key, known.admitted_at if known else None, admitted)
        if since is None:
            return  # its job waits for the pods of the units it preempted: looked at again when it is resumed
        left = since + self.config.wait_for_pods_running_seconds - self.clock()
        if left > 0:
            self.jobs_queue.add_after(item, left + 0.05)
            return
        await self.scheduler.send_back(unit, job, c.Phase.TIMEOUT_BACKOFF,
                                       f"its pods were not all running {self.config.wait_for_pods_running_seconds:g} s "
                                       f"after admission (running {pods.running}, pending {pods.pending}); "
                                       "quota released")

    def _mark_running(self, item: str, key: str, status: Object) -> None:
        """Write Running as news of the run (unitstatus.inform): it only informs, so admissions
        and resumes never wait behind it, nor does the job's worker (a job that ends meanwhile
        has its quota released at once, and its Succeed takes the place of Running). Not written
        if the unit is no longer Dequeued as we last wrote it, nor for a job that ended meanwhile."""

        def still() -> bool:
            known, view = self.engine.unit(key), self.informers.unit.get(key)
            return known is not None and known.admitted_quota is not None and view is not None and \
                view.phase == c.Phase.DEQUEUED.value and self.records.newer(key, view.resource_version) and \
                not self.informers.job_ended(item)

        def failed(e: KubeError) -> None:
            log.info("Running of %s not written: %s", key, e)
            self.jobs_queue.add_rate_limited(item)

        self.status.inform(key, status, still=still, failed=failed)


def _growth(known: UnitInfo, unit: UnitView, job: JobView, asks: UnitInfo) -> str:
    """What the admitted unit's job asks for beyond its admission ("": nothing): more of a
    resource in all than the engine charges it, more pods of a role than were admitted (an
    elastic role admitted in part, raised within what it asks; or after a restart, where the
    engine took its size from the job as it is now, the admission its unit's status says), or
    more per pod than its status says were admitted."""
    grew = [f"{name} {format_quantity(asks.request[name])} (admitted with "
            f"{format_quantity(known.request.get(name, 0))})" for name in grown(known.request, asks.request)]
    if grew or job.suspended:  # (suspended: not resumed yet, its admission's replicas not set on it yet)
        return ", ".join(grew)
    placement = known.placement or admitted_placement(unit)
    live = dict(job.live_counts)
    admitted = {str(a.get("name")): a for a in unit.admissions}
    for ps in job.pod_sets:
        count = live.get(ps.name, ps.count)
        allowed = placement.count_of(ps.name, count) if placement is not None else count
        if count > allowed:
            grew.append(f"{ps.name} {count} pods (admitted with {allowed})")
        was = _amounts(admitted.get(ps.name, {}).get("resources")) if ps.name in admitted else None
        grew += [f"{ps.name} {name} {format_quantity(ps.request[name])} a pod (admitted with "
                 f"{format_quantity(was.get(name, 0))})" for name in grown(was, ps.request)] if was else []
    return ", ".join(grew)


def _unit_spec_drifted(unit: UnitView, job: JobView) -> bool:
    """Whether the unit asks for something else than its job: priority, queue, total request
    (as amounts), pod sets (name, count, minCount). How pod templates are written is not
    compared: Koord-Queue copies whole templates where we keep only the requests, and a
    unit it wrote is not one edited by hand."""
    want = job.unit_spec
    assert want is not None
    if unit.spec.get("priority") != want.get("priority"):
        return True
    if "queue" in want and unit.spec.get("queue") != want["queue"]:
        return True
    if "queue" not in want and unit.spec.get("queue") not in (None, "", quota_of_labels(dict(job.unit_labels))):
        return True  # a queue given by hand (Koord-Queue writes the one of the job's quota: no change)
    return _amounts(unit.spec.get("resource")) != _amounts(want.get("resource")) or \
        _pod_set_shape(unit.spec.get("podSet")) != _pod_set_shape(want.get("podSet"))


def _restoring(unit: UnitView, want: Object) -> Object:
    """The merge patch putting the job's spec on its unit: a queue or a resource the job no
    longer names is removed (null), or a merge patch would keep it (a claim's devices shown
    after its job stopped naming it)."""
    spec = want if "queue" in want else {**want, "queue": None}
    had = unit.spec.get("resource")
    gone = {name: None for name in had if name not in (want.get("resource") or {})} if isinstance(had, dict) else {}
    return {**spec, "resource": {**gone, **(want.get("resource") or {})}} if gone else spec


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _job_label(job: JobView, name: str) -> str | None:
    return dict(job.unit_labels).get(name)


def _unit_labels_drifted(unit: UnitView, job: JobView) -> dict[str, str | None]:
    """The owned labels on which the unit and its job differ, as a merge patch to the job's values."""
    return {name: _job_label(job, name) for name in UNIT_LABELS_OWNED
            if unit.label(name) != _job_label(job, name)}


def _amounts(resources: object) -> dict[str, int] | None:
    try:
        return parse_resource_list(resources or {})
    except QuantityError:
        return None


def _pod_set_shape(pod_sets: object) -> list[tuple[Any, ...]] | None:
    if not isinstance(pod_sets, list):
        return None
    return sorted((str(p.get("name")), p.get("count"), p.get("minCount")) if isinstance(p, dict) else ("?",)
                  for p in pod_sets)
