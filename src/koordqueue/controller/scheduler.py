"""The scheduling loop: runs a cycle of the engine when something changed (the engine decides
who is admitted and who preempted: engine/), then writes its decisions, each unit's status
first and its job after it: victims before the admissions that need their room, a cycle's
admissions in a task of their own (the next cycle need not wait for them; one that preempts
does, as a victim may be a unit whose admission is still being written). Also sends units
back (timeouts, failed admission checks) and puts them back in the queue after their back-off.
Before each cycle it tells the engine whether koord-scheduler schedules the pods (Koordinator
mode: auto turns it on once Koordinator's own quotas are seen), and logs when that changes.

Of the engine's unit mutators it calls only the decisions' own: ``schedule``, ``revert_admission``
(an admission whose write failed, as Kueue's scheduler forgets a workload it assumed) and
``requeue`` (a send-back); a unit put back as its object says goes through unitsync.py."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from koordqueue import aio
from koordqueue.api import constants as c
from koordqueue.api.objects import QueueSettings
from koordqueue.controller import status as st
from koordqueue.controller.eventline import job_ref, unit_ref
from koordqueue.controller.jobswitch import JobSwitch
from koordqueue.controller.overview import mode_text
from koordqueue.controller.phases import FINISHED, SENT_BACK
from koordqueue.controller.resources import UNITS
from koordqueue.controller.selectors import selector_matches
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.unitsync import back_off_until, count_as_admitted
from koordqueue.controller.views import JobView, Object, UnitView, admitted_placement
from koordqueue.engine.model import Admission, CycleResult, Placement, UnitInfo
from koordqueue.kube.errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.002  # after a wake, let a burst of events land in one cycle
BACKOFF_RECHECK_SECONDS = 0.5  # a unit out of back-off whose job is not suspended yet looks again after


class Scheduler(Part):
    def __init__(self, shared: Shared, status: UnitStatusWriter, switch: JobSwitch,
                 queue_settings: dict[str, QueueSettings]) -> None:
        super().__init__(shared)
        self.status = status
        self.switch = switch
        self.queue_settings = queue_settings  # (quotasync.py's)
        self.admitting: set[asyncio.Task[None]] = set()  # cycles' admissions being written
        self.cycles = 0

    async def run(self) -> None:
        next_wakeup: float | None = None
        self._say_mode()
        while True:
            timeout = None if next_wakeup is None else max(0.0, next_wakeup - self.clock())
            backoff_ends = self.shared.backoffs.next_at()
            if backoff_ends is not None:
                until = max(0.0, backoff_ends - self.clock())
                timeout = until if timeout is None else min(timeout, until)
            if timeout is not None:
                timeout /= self.config.clock_rate  # (real seconds: the clock may run faster)
            await aio.wait_event(self.wake, timeout)
            self.wake.clear()
            await asyncio.sleep(BATCH_SECONDS)
            await self._end_backoffs()
            if self.shared.beside_koordinator != self.engine.koordinator:
                self.engine.set_koordinator(self.shared.beside_koordinator)
                self._say_mode()
            started = time.perf_counter()
            result = self.engine.schedule(self.clock())
            self.metrics.cycle_duration.observe(time.perf_counter() - started)
            self.cycles += 1
            next_wakeup = result.next_wakeup
            for admission in result.admitted:
                self.records.pending_messages.pop(admission.unit, None)
            self.records.pending_messages.update(result.messages)
            if result.preempted:
                # A victim may be a unit whose admission is still being written: its Preempted
                # must come after its Dequeued.
                await asyncio.gather(*self.admitting, return_exceptions=True)  # (each logs its own)
                await self._preempt_then_admit(result)
            elif result.admitted:
                # The next cycle need not wait for these writes: room freed meanwhile is used at once.
                task = asyncio.create_task(self._admit_all(result.admitted), name=f"admit-{self.cycles}")
                self.admitting.add(task)
                task.add_done_callback(self._admissions_written)

    def _say_mode(self) -> None:
        self.engine.set_koordinator(self.shared.beside_koordinator)
        log.info("%s (--koordinator %s)", mode_text(self.engine.koordinator), self.config.koordinator)

    async def _preempt_then_admit(self, result: CycleResult) -> None:
        """Victims first: the admissions of a cycle may need their room, so they are written
        only once every victim's unit says it holds no quota. Written together, a reader of the
        objects (or a controller restarted in between) would see a quota over its max."""
        written = await asyncio.gather(
            *(self._preempt(p.unit, p.reason, p.requeue_at, p.quota) for p in result.preempted))
        if not all(written):
            for admission in result.admitted:  # decided with room a victim still holds
                self.engine.revert_admission(admission.unit)
            self.wake.set()
            return
        # A unit admitted and then picked as a victim later in the same cycle is not admitted
        # at all: the engine has it backing off, and its Preempted status says why.
        victims = {p.unit for p in result.preempted}
        admitted = [a for a in result.admitted if a.unit not in victims]
        for admission in admitted:  # its job waits for its victims' pods to terminate (jobswitch.py)
            mine = [p.unit for p in result.preempted if p.preemptor == admission.unit]
            if mine:
                self.switch.wait_for_victims(admission.unit, mine)
        await self._admit_all(admitted)

    async def _admit_all(self, admitted: list[Admission]) -> None:
        await asyncio.gather(*(self._admit(a.unit, a.quota, a.queue, a.placement) for a in admitted))

    def _still_admitted(self, key: str, quota: str, admitted_at: float | None) -> bool:
        """Whether the engine still holds the admission of `key` into `quota` made at `admitted_at`."""
        known = self.engine.unit(key)
        return known is not None and known.admitted_quota == quota and known.admitted_at == admitted_at

    async def _admission_landed(self, key: str, status: Object) -> bool:
        """Whether the stored unit shows this admission. A Conflict after a retry may be our own
        write: the patch landed, its answer was lost (kube-apiserver was restarted), and the
        client sent it again on the version it had made. Undone then, the unit would be
        admitted again while its object holds quota, and its room given to another meanwhile."""
        ns, _, name = key.partition("/")
        try:
            found = await self.client.list(UNITS, namespace=ns, field_selector=f"metadata.name={name}")
        except KubeError as e:
            log.warning("admission of %s: whether it landed is unknown (%s); undone", key, e)
            return False
        for obj in found.items:
            stored = obj.get("status") or {}
            if all(stored.get(field) == status[field] for field in ("phase", "attempts", "lastAllocateTime")):
                self.records.saw(key, str(obj["metadata"]["resourceVersion"]))
                log.info("admission of %s landed though its answer was lost", key)
                return True
        return False

    def _admissions_written(self, task: asyncio.Task[None]) -> None:
        self.admitting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a cycle's admissions failed", exc_info=task.exception())

    async def _admit(self, key: str, quota: str, queue: str, placement: Placement | None = None) -> None:
        unit = self.informers.unit.get(key)
        info = self.engine.unit(key)
        if unit is None or info is None:
            self.engine.revert_admission(key)
            return
        if unit.job_key in self.shared.owed:
            # Sent back, and its job not suspended since: admitted now, it would run on from
            # before. (The back-off's end is looked at before each cycle; the engine may still
            # let it go first, when that look took a while.)
            self.engine.revert_admission(key)
            self._look_again(key, unit)
            return
        bare = self.informers.bare(unit)
        job = None if bare else self.informers.job_of(unit)
        if not bare and (job is None or job.unit_spec is None):  # gone or unusable since the cycle: its unit waits
            self.engine.revert_admission(key)
            self.wake.set()
            return
        now = self.clock()
        settings = self.queue_settings.get(queue)
        # The job's labels and spec (a unit's labels edited by hand would skip its checks); a
        # bare unit's own: nothing else stands behind it.
        labels = dict(job.unit_labels) if job is not None else dict(unit.labels)
        spec = job.unit_spec if job is not None and job.unit_spec is not None else unit.spec
        checks = [check.name for check in (settings.admission_checks if settings else ())
                  if selector_matches(check.label_selector, labels)]
        status = st.admitted(spec, quota, queue, checks, info.attempts + 1, now, placement)
        status["message"] = self.switch.admission_message(key, status["message"])
        try:
            # Only while the engine still holds this admission when its turn comes: its unit may
            # have been finished meanwhile (its job ended) and its room given to another.
            admitted_at = info.admitted_at
            written = await self.status.write(key, status, precondition=True,
                                              still=lambda: self._still_admitted(key, quota, admitted_at))
        except (Conflict, NotFound) as e:
            if not (isinstance(e, Conflict) and e.after_retry and await self._admission_landed(key, status)):
                log.info("admission of %s not written (%s); undone", key, e.reason)
                self.engine.revert_admission(key)
                self.wake.set()
                return
            written = True
        except KubeError as e:
            log.warning("admission of %s not written: %s; undone", key, e)
            self.engine.revert_admission(key)
            self.wake.set()
            return
        if not written:
            log.info("admission of %s not written: the engine no longer holds it (its unit finished meanwhile)", key)
            return
        self._remember("admitted", key, quota, status["message"])
        self.metrics.admissions.labels(queue, quota).inc()
        self.metrics.admission_wait.labels(queue).observe(max(0.0, now - unit.created))
        reason = c.EventReason.RESERVED if checks else c.EventReason.DEQUEUED
        self._event(unit_ref(unit), c.EventType.NORMAL, reason, status["message"])
        if not checks and job is not None:
            await self.switch.resume_admitted(unit, placement)  # (a bare unit's owner starts its own workload)
        self.jobs_queue.add(unit.job_key)

    async def _preempt(self, key: str, reason: str, requeue_at: float, quota: str) -> bool:
        """Write a victim's Preempted status; False (and the victim keeps its quota) if that failed."""
        unit = self.informers.unit.get(key)
        if unit is None:
            return True
        info = self.engine.unit(key)
        try:
            async with self.switch.job_locks.hold(unit.job_key):  # after its job's resume on its way, if any
                written = await self.status.write(
                    key, st.sent_back(c.Phase.PREEMPTED, reason, info.attempts if info else 0, requeue_at),
                    still=functools.partial(self._still_sent_back, key))
        except KubeError as e:
            log.warning("preemption of %s not written: %s; it keeps its quota", key, e)
            if info is not None:
                self._hold_again(key, info)
            return False
        if not written:
            log.info("preemption of %s not written: its unit finished or went meanwhile", key)
            return True  # (it holds nothing now)
        if not self.informers.bare(unit):
            # (A bare unit's owner stops its workload when it reads Preempted, as Koord-Queue's
            # job extensions do, and may write Enqueued itself; we owe no suspension.)
            self.shared.owed.owe(unit.job_key)
        self.shared.backoffs.push(requeue_at, key)
        self._remember("preempted", key, quota, reason)
        self.metrics.preemptions.labels(quota).inc()
        self._event(unit_ref(unit), c.EventType.WARNING, c.EventReason.PREEMPTED, reason)
        job = self.informers.job_of(unit)
        if job is not None:
            self._event(job_ref(job), c.EventType.WARNING, c.EventReason.PREEMPTED, reason)
        self.jobs_queue.add(unit.job_key)
        return True

    def _still_sent_back(self, key: str) -> bool:
        """Whether the engine still holds `key` as it sent it back (known, holding no quota):
        not once its unit was finished or deleted meanwhile (its job's reconciler wrote
        Succeed while the send-back waited for the unit's lock, say)."""
        known = self.engine.unit(key)
        return known is not None and known.admitted_quota is None

    def _hold_again(self, key: str, info: UnitInfo) -> None:
        """A send-back (or preemption) of `key` was not written: its object still says it
        holds quota, and so does the engine again (count_as_admitted). Not when its unit was
        finished or deleted meanwhile: charged again then, it would hold its quota for good,
        as nothing lets go of a finished unit a second time (chaos run, seed 20261204)."""
        unit = self.informers.unit.get(key)
        if unit is None or unit.phase in FINISHED or not self._still_sent_back(key):
            return
        count_as_admitted(self.engine, info, unit.allocated_at or unit.created, admitted_placement(unit))

    async def _end_backoffs(self) -> None:
        now = self.clock()
        while (key := self.shared.backoffs.pop_due(now)) is not None:
            if not self._waiting(key):
                continue  # admitted again since (an entry left from an earlier back-off), or gone
            unit = self.informers.unit.get(key)
            job = self.informers.job_of(unit) if unit is not None else None
            if unit is not None and job is not None and not job.state.ended and (
                    unit.job_key in self.shared.owed or (unit.phase in SENT_BACK and not job.suspended)):
                # Its job still runs from before (its suspension is not written yet): admitted
                # again now, it would run twice over without a suspension between. Wait for that.
                # (What we owe is known even when our views of the unit and the job lag.)
                self._look_again(key, unit, now)
                continue
            if unit is not None and unit.phase in SENT_BACK:
                # (Our view of the unit may lag: Preempted still, when we have since written its
                # new admission. Written then, this Enqueued would take back what its job was given.)
                try:
                    await self.status.write(key, st.enqueued("back in the queue after a back-off"),
                                            still=functools.partial(self._waiting, key))
                except KubeError as e:
                    log.info("unit %s not requeued yet: %s", key, e)

    def _look_again(self, key: str, unit: UnitView, now: float | None = None) -> None:
        """Keep a unit out of the queue a little longer, its job's suspension asked for again."""
        now = self.clock() if now is None else now
        back_off_until(self.engine, key, now + BACKOFF_RECHECK_SECONDS)
        self.shared.backoffs.push(now + BACKOFF_RECHECK_SECONDS, key)
        self.jobs_queue.add(unit.job_key)

    async def send_back(self, unit: UnitView, job: JobView | None, phase: c.Phase, reason: str,
                        event: c.EventReason = c.EventReason.TIMEOUT_BACKOFF) -> None:
        """Release the unit's quota and back it off (timeout, failed admission check, inactive)."""
        known = self.engine.unit(unit.key)
        if known is None or known.admitted_quota is None:
            return  # already sent back (a second look at a stale view of the unit)
        requeue_at = self.engine.requeue(unit.key, self.clock(), reason)
        info = self.engine.unit(unit.key)
        try:
            async with self.switch.job_locks.hold(unit.job_key):  # after its job's resume on its way, if any
                written = await self.status.write(
                    unit.key, st.sent_back(phase, reason, info.attempts if info else 0, requeue_at),
                    still=functools.partial(self._still_sent_back, unit.key))
        except KubeError:
            self._hold_again(unit.key, known)
            raise
        if not written:
            return  # its unit finished or went meanwhile: it holds nothing
        if job is not None:  # (a bare unit's owner stops its own workload)
            self.shared.owed.owe(unit.job_key)
        self.shared.backoffs.push(requeue_at, unit.key)
        self._remember("sent back", unit.key, info.admitted_quota if info else None, reason)
        self.metrics.requeues.labels(phase.value).inc()
        self._event(unit_ref(unit), c.EventType.WARNING, event, reason)
        if job is not None:
            self._event(job_ref(job), c.EventType.WARNING, event, reason)
        self.jobs_queue.add(unit.job_key)
        self.wake.set()
