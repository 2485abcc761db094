"""A job as the engine sees it: one ``UnitInfo``, checked from top to bottom."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from koordqueue.api.constants import ANNOTATION_EXPECTED_RUNTIME
from koordqueue.api.dra import (
    DeviceClassMappings,
    UncountedClaim,
    job_claim_charges,
    missing_reason,
    pod_claims,
)
from koordqueue.api.meta import InvalidObject, section
from koordqueue.api.quantity import add
from koordqueue.engine.model import UnitInfo
from koordqueue.engine.runtimes import parse_expected_runtime
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
        expected_runtime=expected_runtime(meta.annotations, adapter.max_execution_seconds(job, meta)),
    )


def expected_runtime(annotations: Mapping[str, str], max_seconds: int | None) -> float | None:
    """``koord-queue/expected-runtime``, else the job's maximum execution time, else None: what
    a budget counts the job for. A value that is not a runtime is ignored here, as the
    forecast ignores it (the forecaster tells the job why: controller/forecaster.py)."""
    text = annotations.get(ANNOTATION_EXPECTED_RUNTIME)
    seconds = parse_expected_runtime(text)[0] if text is not None else None
    if seconds is None and max_seconds is not None:
        return float(max_seconds)
    return seconds


def charge_claims(unit: UnitInfo, job: Job, adapter: JobAdapter, templates: Mapping[str, Mapping[str, Any]],
                  claims: Mapping[str, Mapping[str, Any]], mappings: DeviceClassMappings) -> UnitInfo:
    """``unit`` charged for the claims its job's pods use (DRA, api/dra.py; the simulator's,
    as the controller's controller/dra.py): per pod for templates, once for a ResourceClaim
    named; node fit counts the devices of classes whose mapping names a driver. A template or
    claim not there: it waits, saying which; one that cannot be counted: InvalidObject."""
    meta = adapter.meta(job)
    sets = adapter.pod_sets(job, meta)
    where = meta.describe()
    try:
        roles = {ps.name: names for ps in sets
                 if (names := pod_claims(section(ps.template, "spec", "template"), f"{where}: {ps.role}"))}
        if not roles:
            return unit
        charges = job_claim_charges(roles, templates, claims, mappings, where)
    except UncountedClaim as e:
        raise InvalidObject(str(e)) from None
    total = dict(unit.request)
    for ps in sets:
        total = add(total, {name: amount * ps.count for name, amount in charges.per_pod.get(ps.name, {}).items()})
    unit.request = add(total, charges.shared)
    placed = {m.resource for m in mappings.values() if m.driver}
    unit.pod_sets = tuple(
        replace(ps, request=add(ps.request, {r: a for r, a in charges.per_pod.get(ps.name, {}).items() if r in placed}))
        for ps in unit.pod_sets)
    if charges.missing:
        unit.invalid = missing_reason(charges.missing)
    return unit
