"""What a simulation tells: the ``--json`` object, and a summary a person reads.

The JSON object is a contract (ARCHITECTURE.md, "The simulator"): exactly the keys
listed there, times in seconds or null, quantities as Kubernetes strings. Both forms
are pure functions of the result, so one trace always prints the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from koordqueue.api.quantity import format_quantity, format_resource_list
from koordqueue.engine.model import ResourceList

from .simulator import JobRecord, SimResult

JOB_KEYS = (
    "kind",
    "namespace",
    "name",
    "quota",
    "queue",
    "priority",
    "submitted",
    "admitted",
    "finished",
    "phase",
    "preemptions",
    "attempts",
    "message",
)
QUOTA_KEYS = ("min", "max", "peak_used", "runtime_at_end")
TOP_KEYS = ("jobs", "quotas", "end")


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def job_json(record: JobRecord) -> dict[str, Any]:
    return {
        "kind": record.kind,
        "namespace": record.namespace,
        "name": record.name,
        "quota": record.quota,
        "queue": record.queue,
        "priority": record.priority,
        "submitted": _seconds(record.submitted),
        "admitted": _seconds(record.admitted),
        "finished": _seconds(record.finished),
        "phase": None if record.phase is None else str(record.phase),
        "preemptions": record.preemptions,
        "attempts": record.attempts,
        "message": record.message,
    }


def result_json(result: SimResult) -> dict[str, Any]:
    quotas: dict[str, Any] = {}
    for name, quota in result.quotas.items():
        usage = result.usage.quotas.get(name)
        peak = {resource: 0 for resource in quota.max} | (usage.peak if usage else {})
        quotas[name] = {
            "min": format_resource_list(quota.min),
            "max": format_resource_list(quota.max),
            "peak_used": format_resource_list(peak),
            "runtime_at_end": format_resource_list(result.runtime_at_end.get(name, {})),
        }
    return {"jobs": [job_json(record) for record in result.jobs], "quotas": quotas, "end": _seconds(result.end)}


def render_json(result: SimResult) -> str:
    return json.dumps(result_json(result), indent=2, ensure_ascii=False)


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def mean_used(result: SimResult, name: str) -> ResourceList:
    """The time average of a quota's usage over the whole simulation, in milli-units."""
    usage = result.usage.quotas.get(name)
    if usage is None or result.end <= 0:
        return {}
    return {resource: round(area / result.end) for resource, area in usage.area.items()}


def _share(used: ResourceList, of: ResourceList) -> str:
    parts = [f"{resource} {100 * used.get(resource, 0) / amount:.0f}%" for resource, amount in of.items() if amount > 0]
    return ", ".join(parts) or "-"


def _wait(values: list[float]) -> tuple[str, str, str]:
    if not values:
        return "-", "-", "-"
    return tuple(f"{v:.1f}" for v in (percentile(values, 0.5), percentile(values, 0.9), max(values)))  # type: ignore[return-value]


def render_summary(result: SimResult) -> str:
    jobs = result.jobs
    finished = [job for job in jobs if job.finished is not None]
    preemptions = sum(job.preemptions for job in jobs)
    lines = [
        f"Simulated {result.end:g} s: {len(jobs)} jobs, {len(finished)} finished, "
        f"{len(jobs) - len(finished)} not finished, {preemptions} preemptions.",
    ]
    if result.capacity is not None:
        lines.append("Cluster capacity: " + format_amounts(result.capacity))
    lines += ["", "Waits to first admission (seconds), usage as a share of min (time average)."]
    header = ("quota", "jobs", "admitted", "wait p50", "p90", "max", "preempted", "mean used / min")
    rows = [header]
    for name, quota in result.quotas.items():
        mine = [job for job in jobs if job.quota == name]
        waits = [job.admitted - job.submitted for job in mine if job.admitted is not None and job.submitted is not None]
        rows.append(
            (
                name,
                str(len(mine)),
                str(len(waits)),
                *_wait(waits),
                str(sum(job.preemptions for job in mine)),
                _share(mean_used(result, name), quota.min),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if result.capacity:
        busy: ResourceList = {}
        roots = [name for name, quota in result.quotas.items() if quota.parent is None]
        for name in roots:
            for resource, amount in mean_used(result, name).items():
                busy[resource] = busy.get(resource, 0) + amount
        lines += ["", "Cluster utilisation (admitted / capacity, time average): " + _share(busy, result.capacity)]
    unfinished = [job for job in jobs if job.finished is None]
    if unfinished:
        lines += ["", "Not finished:"]
        for job in unfinished:
            who = f"{job.kind or '?'} {job.namespace or '?'}/{job.name or '?'}"
            lines.append(f"  {who} [{job.phase or 'not submitted'}]: {job.message or 'running'}")
    if result.warnings:
        lines += ["", "Warnings:"] + [f"  {warning}" for warning in result.warnings]
    return "\n".join(lines)


def format_amounts(resources: ResourceList) -> str:
    return ", ".join(f"{name} {format_quantity(amount)}" for name, amount in resources.items())
