"""Koord-Queue v1.8's active and maximumExecutionTimeSeconds, job side. An inactive job
(annotation scheduling.x-k8s.io/active "false", or its unit's spec.active false) is never
admitted: the engine is fed it as held, saying why (views.unit_info); one admitted before it
became inactive is suspended here and its quota released, its unit back in the queue
(Enqueued). A job whose pods ran longer than its maximum, summed over its admissions (the
unit's execution clock, status.py), is made inactive (its unit's spec.active false, its run
time emptied: a new budget if it is made active again) and so suspended. Koord-Queue does
the same, and keeps the job and its unit: nothing is deleted or failed."""

from __future__ import annotations

from koordqueue.api import constants as c
from koordqueue.controller.phases import FINISHED
from koordqueue.controller.resources import UNITS
from koordqueue.controller.scheduler import Scheduler
from koordqueue.controller.shared import Part, Shared
from koordqueue.controller.unitstatus import UnitStatusWriter
from koordqueue.controller.views import JobView, Object, UnitView, inactive_reason, unit_active


class Lifetime(Part):
    def __init__(self, shared: Shared, scheduler: Scheduler, status: UnitStatusWriter) -> None:
        super().__init__(shared)
        self.scheduler = scheduler
        self.status = status

    async def enforce(self, item: str, unit: UnitView, job: JobView) -> bool:
        """Send back a job that is inactive or ran past its maximum (or time the next look);
        whether the unit was sent back here (the rest of its reconcile waits for that to land)."""
        if unit.phase in FINISHED or job.state.ended:
            return False
        await self._mirror(unit, job)
        known = self.engine.unit(unit.key)
        if known is None or known.admitted_quota is None:
            return False
        if not unit_active(unit, job):
            await self.scheduler.send_back(
                unit, job, c.Phase.ENQUEUED,
                f"{inactive_reason(job)}: suspended, quota released", event=c.EventReason.DEACTIVATED)
            return True
        limit = job.max_execution_seconds
        if limit is None or unit.running_since is None:
            return False
        left = limit - unit.ran_seconds - (self.clock() - unit.running_since)
        if left > 0:
            self.jobs_queue.add_after(item, left + 0.05)
            return False
        # Inactive from now on (its unit's spec says so, as Koord-Queue's does), then sent back.
        await self.client.patch(UNITS, unit.name, {"spec": {"active": False}}, namespace=unit.namespace)
        self.status.reset_clock(unit.key)
        await self.scheduler.send_back(
            unit, job, c.Phase.ENQUEUED,
            f"it ran past its maximum execution time ({limit} s, annotation {c.ANNOTATION_MAX_EXEC_TIME_SECONDS}, "
            "counted over its admissions): suspended, quota released, made inactive (its QueueUnit's "
            "spec.active false); it is admitted again once made active", event=c.EventReason.MAX_EXEC_TIME_EXCEEDED)
        return True

    async def _mirror(self, unit: UnitView, job: JobView) -> None:
        """The unit's spec.active and maximumExecutionTimeSeconds as its job's annotations say
        (an absent active annotation leaves the unit's own value, as in Koord-Queue)."""
        spec: Object = {}
        if job.active is not None and unit.spec.get("active") != job.active:
            spec["active"] = job.active
        if unit.spec.get("maximumExecutionTimeSeconds") != job.max_execution_seconds:
            spec["maximumExecutionTimeSeconds"] = job.max_execution_seconds
        if spec and job.unit_spec is not None:
            await self.client.patch(UNITS, unit.name, {"spec": spec}, namespace=unit.namespace)
