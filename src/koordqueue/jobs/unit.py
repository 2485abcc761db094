"""A job as the engine sees it: one ``UnitInfo``, checked from top to bottom."""

from __future__ import annotations

from collections.abc import Mapping

from koordqueue.engine.model import UnitInfo
from koordqueue.jobs.base import Job, JobAdapter


def unit_info(job: Job, adapter: JobAdapter, priority_classes: Mapping[str, int], created: float,
              placed: bool = True) -> UnitInfo:
    """The engine's view of ``job``; raises ``InvalidObject`` (why, in words) when it is unusable.
    ``placed``: with its pod sets, for node fit (the simulator leaves them out with no nodes,
    but for an elastic one: admission in part needs them)."""
    meta = adapter.meta(job)  # read once: the simulator asks this for every job of a trace
    sets = adapter.pod_sets(job, meta)
    return UnitInfo(
        namespace=meta.namespace,
        name=adapter.unit_name(job, meta),
        priority=adapter.priority(job, priority_classes, meta),
        created=created,
        request=adapter.demand(job, meta, sets),
        queue_name=adapter.requested_queue(job, meta),
        quota_name=adapter.requested_quota(job, meta),
        preemptible=adapter.preemptible(job, meta),
        pod_sets=adapter.pod_set_infos(sets, meta) if placed or any(
            ps.min_count is not None and ps.min_count < ps.count for ps in sets) else (),
    )
