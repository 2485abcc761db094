"""A job as the engine sees it: one ``UnitInfo``, checked from top to bottom."""

from __future__ import annotations

from collections.abc import Mapping

from koordqueue.engine.model import UnitInfo
from koordqueue.jobs.base import Job, JobAdapter


def unit_info(job: Job, adapter: JobAdapter, priority_classes: Mapping[str, int], created: float) -> UnitInfo:
    """The engine's view of ``job``; raises ``InvalidObject`` (why, in words) when it is unusable."""
    meta = adapter.meta(job)  # read once: the simulator asks this for every job of a trace
    return UnitInfo(
        namespace=meta.namespace,
        name=adapter.unit_name(job, meta),
        priority=adapter.priority(job, priority_classes, meta),
        created=created,
        request=adapter.demand(job, meta),
        queue_name=adapter.requested_queue(job, meta),
        quota_name=adapter.requested_quota(job, meta),
        preemptible=adapter.preemptible(job, meta),
    )
