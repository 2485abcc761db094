"""Who suspends and resumes jobs. A job's suspensions and resumes go one at a time, each
landing before the next is sent, in the order they were decided: a write that takes long
to land (retried after a 429 or a 500) must not land after one decided later. The same
line (job_locks) keeps a unit from being sent back before its job's resume on its way has
landed (scheduler.py). A job is resumed once per admission, with its admission's placement
(pods pinned to their domain, an elastic role's replicas) in the same write; a suspension
puts back what that placement changed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.controller.eventline import job_ref
from koordqueue.controller.keyedlock import KeyedLock
from koordqueue.controller.pods import PodView
from koordqueue.controller.records import older
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.views import JobView, UnitView, adapter_of_kind, admitted_placement
from koordqueue.engine import messages as msg
from koordqueue.engine.model import Placement
from koordqueue.jobs.base import JobAdapter, dequeued_patch, enqueued_patch
from koordqueue.jobs.placement import PodMarks, admission_patch, koordinator_marks, read_originals
from koordqueue.kube.errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

# A job we resumed whose view still says suspended: our watch has not brought the resume
# back yet, or someone suspended it since. The view's resourceVersion tells which: older than
# what our resume wrote, the job is not resumed again (nor suspended again, by the same rule,
# after a suspension of ours). A second write, with a new dequeue time, would land while
# kube-controller-manager's Job controller writes the Job's status from the first one: its
# write refused with a 409 and retried after a back-off of 1 s or more (bench/hold_timeline.py).
# Without resourceVersions to compare, a resume is sent again after this long.
RESUME_AGAIN_AFTER_SECONDS = 5.0

PodsKey = tuple[str, str, str]  # a job's pods in the pod index (informers.pods_key)


@dataclass(slots=True)
class VictimWait:
    """A preemptor's job waiting for the pods of the units preempted for it to terminate."""

    admitted_at: float | None  # the admission it belongs to (another one of the unit waits for nothing)
    victims: dict[str, PodsKey]  # victim unit key -> its job's pods
    until: float  # resumed then at the latest
    bound: float  # seconds from the preemption to `until`
    admitted_message: str = ""  # the admission's message, which the wait's own is added to
    said: str = ""  # the message written with the admission (saying it waits), if any
    ended_at: float | None = None  # when its job was let run (kept a while: pods_timed_from)


class JobSwitch(Part):
    def __init__(self, shared: Shared, status: UnitStatusWriter | None = None) -> None:
        super().__init__(shared)
        self.status = status  # (None: no message is written when a wait for victims ends)
        self.job_locks = KeyedLock()  # job item -> one suspension or resume at a time
        self.victim_waits: dict[str, VictimWait] = {}  # preemptor unit key -> what its job waits for

    def wire(self) -> None:
        """A victim's pod that ends or goes: the jobs waiting for it look again (after the pod
        index has taken the change: unitsync wires first)."""
        self.informers.pod.on_update(lambda _old, new: self._victim_pod_changed(new))
        self.informers.pod.on_delete(self._victim_pod_changed)

    # --- preemptors wait for their victims' pods ------------------------------------------

    def wait_for_victims(self, key: str, victims: list[str]) -> None:
        """The unit ``key`` was just admitted by preempting ``victims``: its job is not resumed
        while their pods linger (see the module's docstring)."""
        known = self.engine.unit(key)
        if known is None:
            return
        now = self.clock()
        for waiter in [k for k, w in self.victim_waits.items() if self._expired(w, now)]:
            del self.victim_waits[waiter]
        found: dict[str, PodsKey] = {}
        pods: list[PodView] = []
        for victim in victims:
            unit = self.informers.unit.get(victim)
            job = self.informers.job_of(unit) if unit is not None else None
            if job is None:
                continue
            found[victim] = self.informers.pods_key(job)
            pods += self.informers.pods.lingering(*found[victim])
        if not pods:
            return
        bound = max(pod.grace for pod in pods) + self.config.victim_wait_margin_seconds
        self.victim_waits[key] = VictimWait(known.admitted_at, found, now + bound, bound)

    def _expired(self, wait: VictimWait, now: float) -> bool:
        """An ended wait is kept while its pods' wait-for-pods-running timeout may run (it is
        timed from the wait's end); one not ended past its bound is of an admission undone
        since, whose job was never resumed."""
        if wait.ended_at is not None:
            return wait.ended_at + self.config.wait_for_pods_running_seconds <= now
        return wait.until <= now

    def admission_message(self, key: str, message: str) -> str:
        """The admission's message, with what its job waits for when it waits for victims."""
        wait = self.victim_waits.get(key)
        if wait is None:
            return message
        wait.admitted_message = message
        pods, units = self._victims_left(wait)
        wait.said = f"{message}; {msg.waiting_for_victims(pods, units, wait.bound)}" if pods else message
        return wait.said

    def _victims_left(self, wait: VictimWait) -> tuple[int, list[str]]:
        """How many of the victims' pods linger, and whose. A victim admitted again since is not
        waited for: the pods of its job are its own again."""
        pods, units = 0, list[str]()
        for victim, pods_key in wait.victims.items():
            info = self.engine.unit(victim)
            if info is not None and info.admitted_quota is not None:
                continue
            n = len(self.informers.pods.lingering(*pods_key))
            if n:
                pods, units = pods + n, [*units, victim]
        return pods, units

    def pods_timed_from(self, key: str, admitted_at: float | None, since: float) -> float | None:
        """From when the pods of the admitted unit ``key`` are timed (wait-for-pods-running):
        ``since`` (its admission), or the moment its job was let run after waiting for its
        victims' pods; None while it waits (its pods are not made yet)."""
        wait = self.victim_waits.get(key)
        if wait is None or wait.admitted_at != admitted_at:
            return since
        return None if wait.ended_at is None else max(since, wait.ended_at)

    def _victim_pod_changed(self, pod: PodView) -> None:
        if not pod.job_label or not self.victim_waits:
            return
        for key, wait in self.victim_waits.items():
            if wait.ended_at is None and pod.job in wait.victims.values():
                unit = self.informers.unit.get(key)
                if unit is not None:
                    self.jobs_queue.add(unit.job_key)

    def _still_waits(self, item: str, key: str, admitted_at: float | None) -> tuple[str, str] | bool:
        """Whether the job of the admitted unit ``key`` waits for its victims' pods still (True; it
        is looked at again by the bound at the latest); else what its unit's message said while
        it waited and what it says once the job is resumed (or False: nothing to say)."""
        wait = self.victim_waits.get(key)
        if wait is None or wait.ended_at is not None:
            return False
        if wait.admitted_at != admitted_at:
            del self.victim_waits[key]
            return False
        pods, units = self._victims_left(wait)
        now = self.clock()
        if pods and now < wait.until:
            self.jobs_queue.add_after(item, wait.until - now + 0.05)
            return True
        wait.ended_at = now
        if pods:
            log.warning("job %s resumed though %d pods of preempted units %s had not terminated after %g s",
                        item, pods, ", ".join(units), wait.bound)
        if not wait.said or wait.said == wait.admitted_message:
            return False  # its message never said it waits
        said = msg.victims_outlasted(pods, units, wait.bound) if pods else msg.victims_gone(list(wait.victims))
        return wait.said, f"{wait.admitted_message}; {said}"

    def _resumed(self, item: str, when: float | None) -> None:
        """When we resumed the job (None: not since its view showed it, or we suspended it)."""
        record = self.records.job_to_write(item) if when is not None else self.records.job(item)
        if record is not None:
            record.resumed_at = when

    def _wrote(self, item: str, suspended: bool, obj: dict[str, Any]) -> None:
        """Our write of the job's suspension landed, as ``obj`` (the server's answer)."""
        rv = (obj.get("metadata") or {}).get("resourceVersion") if isinstance(obj, dict) else None
        self.records.job_to_write(item).written = (suspended, str(rv)) if rv else None

    def _view_behind(self, job: JobView, suspended: bool) -> bool | None:
        """Whether writing the job ``suspended`` (or not) would repeat what is done: our last
        write set it so and every view of it is older than that write, or our newest view shows
        it so already (``job``, the view a caller decided from, may be older than that one).
        False: neither; None when the resourceVersions cannot be compared."""
        informer = self.informers.jobs.get(job.kind)
        newest = informer.get(job.key) if informer is not None else None
        newest_rv = informer.version(job.key) if informer is not None else None
        record = self.records.job(f"{job.kind}/{job.key}")
        written = record.written if record is not None else None
        if written is not None and older(newest_rv, written[1]):
            return written[0] == suspended  # (our last write is newer than every view of it)
        if newest is not None and newest.suspended == suspended:
            return True
        if written is None or written[0] != suspended:
            return False
        return older(newest_rv, written[1])

    def _resumed_already(self, job: JobView) -> bool:
        """Whether our last resume of the job may not be in its view yet: the view is older than
        what that resume wrote (or, with no resourceVersions to compare, the resume is recent),
        or our newest view shows it running already."""
        record = self.records.job(f"{job.kind}/{job.key}")
        if record is None or record.resumed_at is None:
            return False
        behind = self._view_behind(job, False)
        if behind is not None:
            return behind
        return self.clock() - record.resumed_at < RESUME_AGAIN_AFTER_SECONDS

    def seen_running(self, item: str) -> None:
        """Our view shows the job not suspended: a resume of ours has landed."""
        self._resumed(item, None)

    async def suspend(self, job: JobView, adapter: JobAdapter) -> None:
        """Suspend the job, and put back what its admission changed on it (the domain its
        pods were pinned to, an elastic role's replicas), in one write."""
        item = f"{job.kind}/{job.key}"
        self._resumed(item, None)
        owed = self.shared.owed.token(item)
        if owed is None and self._view_behind(job, True):
            return  # (a view from before our last suspension of it, which landed)
        placement_patch = await self._placement_patch_read(job, None)
        patch = _merged(_merged(adapter.suspend_patch({}, native=job.native_suspend), placement_patch or {}),
                        self._stamps(job, None))
        async with self.job_locks.hold(item):
            written = await self.client.patch(self.informers.job_resource(job.kind), job.name, patch,
                                              namespace=job.namespace)
            self._wrote(item, True, written)
        if owed is not None:  # (not if owed anew while we wrote)
            self.shared.owed.paid(item, owed)

    async def let_finish(self, job: JobView, adapter: JobAdapter) -> None:
        """Resume a job that ended while suspended (JobAdapter.finishes_once_resumed): its own
        controller makes no pods for it, and marks it Complete or Failed only once resumed.
        Its unit is finished already, its quota released."""
        item = f"{job.kind}/{job.key}"
        async with self.job_locks.hold(item):
            if self._view_behind(job, False):
                return  # (a view from before our last resume of it, which landed)
            written = await self.client.patch(self.informers.job_resource(job.kind), job.name,
                                              adapter.resume_patch({}, native=job.native_suspend), namespace=job.namespace)
            self._wrote(item, False, written)
        self._event(job_ref(job), c.EventType.NORMAL, c.EventReason.RESUMED,
                    "it ended while suspended (its pods had finished before the suspension landed): "
                    "resumed so that its controller marks it finished; no pod is made for it")

    def _stamps(self, job: JobView, resumed: float | None) -> dict[str, Any]:
        """Koord-Queue's annotations on a job we suspend (resumed None) or resume, in the same
        write: when it was let run, and that it is queued (since it was made) if no one said so
        yet (our webhook says it as the job is created; a job made suspended without it gets no
        write of its own for it)."""
        patch = dequeued_patch(resumed)
        return patch if job.enqueued else _merged(enqueued_patch(job.created or self.clock()), patch)

    async def _placement_patch_read(self, job: JobView, placement: Placement | None,
                                    quota: str | None = None) -> dict[str, Any] | None:
        """``_placement_patch``, for a kind whose roles a merge patch can only write with the rest
        of a list (a Ray cluster's worker groups): made on the job read now, and written only
        over that version of it (a Conflict otherwise: the list may have changed since)."""
        patch = self._placement_patch(job, placement, quota)
        if patch is None or not adapter_of_kind(job.kind).role_patch_reads_job:
            return patch
        # (a list of it by name: the controller lists and watches jobs, and is granted no get)
        found = await self.client.list(self.informers.job_resource(job.kind), namespace=job.namespace,
                                       field_selector=f"metadata.name={job.name}")
        if not found.items:
            raise NotFound(404, "NotFound", f"{job.kind} {job.key} not found")
        current = found.items[0]
        try:
            patch = self._placement_patch(job, placement, quota, current)
        except InvalidObject as e:
            raise Conflict(409, "Conflict", f"{job.kind} {job.key} changed since it was read: {e.reason}") from None
        if patch is not None:
            patch["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        return patch

    def _placement_patch(self, job: JobView, placement: Placement | None,
                         quota: str | None = None, current: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The part of a job's patch that applies an admission's placement to it (pods pinned
        to their domain, an elastic role's replicas; beside Koordinator, its pods marked with
        ``quota`` and a gang), or, with None, puts back what an earlier one changed; None when
        there is nothing to write."""
        try:
            before = read_originals(job.placed, f"{job.kind} {job.key}")
        except InvalidObject as e:
            log.warning("%s", e.reason)
            before = {}
        marks = None
        if placement is not None and quota is not None and self.shared.beside_koordinator:
            marks = koordinator_marks(quota, job.name, job.roles, placement)
        tolerations = self.engine.flavor_tolerations(quota) if placement is not None and quota is not None else ()
        if tolerations:  # admitted into a flavor with tolerations: its pods get them, as its node selector
            marks = replace(marks or PodMarks(), tolerations=tuple(t.as_dict() for t in tolerations))
        adapter = adapter_of_kind(job.kind)
        role_patch = partial(adapter.role_patch, job=current) if current is not None or not adapter.role_patch_reads_job \
            else _unread  # (whether there is anything to write: _placement_patch_read then reads the job)
        return admission_patch(role_patch, job.roles, before, placement, marks)

    async def put_back(self, job: JobView) -> None:
        """A suspended job whose admission's changes are still on it (suspended by someone
        else, or our suspension written from a view older than our resume): put them back,
        while its unit is not admitted."""
        if self._placement_patch(job, None) is None:
            return
        async with self.job_locks.hold(f"{job.kind}/{job.key}"):
            known = self.engine.unit(job.unit_key)
            if known is not None and known.admitted_quota is not None:
                return  # admitted again meanwhile: its resume writes its own
            patch = await self._placement_patch_read(job, None)
            if patch is None:
                return
            await self.client.patch(self.informers.job_resource(job.kind), job.name, patch, namespace=job.namespace)

    async def resume(self, job: JobView, placement: Placement | None = None) -> None:
        """Resume a job, once: the admission and the reconciler of its unit's admission may both
        find it suspended before our watch brings the first resume back. In its turn after the
        job's suspensions on their way, and only while its unit is still admitted then. Its
        admission's placement (``placement``, else what its unit's status says) goes into the
        same write: its pods pinned to their domain, an elastic role's replicas set."""
        item = f"{job.kind}/{job.key}"
        async with self.job_locks.hold(item):
            known = self.engine.unit(job.unit_key)
            if known is None or known.admitted_quota is None:
                return  # sent back while this waited for its turn
            if self._resumed_already(job):
                return
            waits = self._still_waits(item, job.unit_key, known.admitted_at)
            if waits is True:
                return  # its victims' pods still hold the room it was given
            self._resumed(item, self.clock())
            if placement is None:
                unit = self.informers.unit.get(job.unit_key)
                placement = admitted_placement(unit) if unit is not None else None
            try:
                placement_patch = await self._placement_patch_read(job, placement or Placement(), known.admitted_quota)
            except KubeError:
                self._resumed(item, None)
                raise
            patch = _merged(adapter_of_kind(job.kind).resume_patch({}, native=job.native_suspend), placement_patch or {})
            patch = _merged(patch, self._stamps(job, self.clock()))
            try:
                written = await self.client.patch(self.informers.job_resource(job.kind), job.name, patch,
                                                  namespace=job.namespace)
            except KubeError:
                self._resumed(item, None)
                raise
            self._wrote(item, False, written)
        if isinstance(waits, tuple):
            await self._say_waited(job.unit_key, *waits)

    async def _say_waited(self, key: str, said: str, message: str) -> None:
        """Its unit's message no longer says the job waits for its victims' pods, if it still
        does (a later write, Running say, has said the rest)."""
        if self.status is None:
            return

        def still() -> bool:
            known = self.engine.unit(key)
            return known is not None and known.admitted_quota is not None and \
                self.records.written_message(key) == said

        try:
            await self.status.write(key, {"message": message}, limit=self.status.message_limit, still=still)
        except KubeError as e:
            log.info("message of %s not written: %s", key, e)

    async def resume_admitted(self, unit: UnitView, placement: Placement | None) -> None:
        """Let an admitted unit's job run now, rather than when our watch brings back the
        admission we just wrote (the job reconciler does it then, if this fails)."""
        job = self.informers.job_of(unit)
        if job is None or not job.suspended or job.deleting:
            return
        try:
            await self.resume(job, placement)
        except KubeError as e:
            log.info("job %s not resumed yet: %s", job.key, e)


def _unread(changes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {}


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two merge patches as one (``b`` wins where both set a value)."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out
