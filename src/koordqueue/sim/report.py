"""What a simulation tells: the ``--json`` object, and a summary a person reads.

The JSON object is a contract (ARCHITECTURE.md, "The simulator"): exactly the keys
listed there, times in seconds or null, quantities as Kubernetes strings. Both forms
are pure functions of the result, so one trace always prints the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from json.encoder import encode_basestring
from typing import Any

from koordqueue.api.constants import Phase
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
SHARED_TEXTS = 4096  # distinct strings of the jobs kept encoded while writing them


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
    return {"jobs": [job_json(record) for record in result.jobs], "quotas": quotas_json(result),
            "end": _seconds(result.end)}


def quotas_json(result: SimResult) -> dict[str, Any]:
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
    return quotas


def render_json(result: SimResult) -> str:
    return "".join(json_chunks(result))


def json_chunks(result: SimResult) -> Iterator[str]:
    """``json.dumps(result_json(result), indent=2, ensure_ascii=False)``, byte for byte, a
    job at a time: a million jobs are never one dict, nor one string (and json.dumps
    with an indent is the pure-Python encoder)."""
    yield '{\n  "jobs": ['
    # One job's object is a template of its values, each written as _json_scalar writes it;
    # what jobs share (kinds, quotas, phases, the times of a few thousand moments) is
    # written once and looked up.
    template = "    {\n" + ",\n".join(f"      {encode_basestring(key)}: %s" for key in JOB_KEYS) + "\n    }"
    texts: dict[object, str] = {None: "null"}  # strings (and None)
    for phase in Phase:
        texts[phase] = encode_basestring(str(phase))
    numbers: dict[object, str] = {None: "null"}  # floats (times, rounded to the microsecond)
    counts: dict[object, str] = {None: "null"}  # ints

    def text(value: object) -> str:
        written = _json_scalar(value)
        if type(value) is str and len(texts) < SHARED_TEXTS:
            texts[value] = written
        return written

    def number(value: object, known: dict[object, str], kind: type) -> str:
        written = _json_scalar(_seconds(value) if type(value) is float else value)
        if type(value) is kind and len(known) < SHARED_TEXTS:
            known[value] = written
        return written

    get_text, get_number, get_count = texts.get, numbers.get, counts.get
    separator = "\n"
    for r in result.jobs:
        name, submitted, admitted, finished = r.name, r.submitted, r.admitted, r.finished
        yield separator + template % (
            get_text(r.kind) or text(r.kind),
            get_text(r.namespace) or text(r.namespace),
            encode_basestring(name) if type(name) is str else _json_scalar(name),
            get_text(r.quota) or text(r.quota),
            get_text(r.queue) or text(r.queue),
            (type(r.priority) is int and get_count(r.priority)) or number(r.priority, counts, int),
            (type(submitted) is float and get_number(submitted)) or number(submitted, numbers, float),
            (type(admitted) is float and get_number(admitted)) or number(admitted, numbers, float),
            (type(finished) is float and get_number(finished)) or number(finished, numbers, float),
            get_text(r.phase) or text(r.phase),
            (type(r.preemptions) is int and get_count(r.preemptions)) or number(r.preemptions, counts, int),
            (type(r.attempts) is int and get_count(r.attempts)) or number(r.attempts, counts, int),
            get_text(r.message) or text(r.message),
        )
        separator = ",\n"
    yield "\n  ]" if result.jobs else "]"
    quotas = json.dumps(quotas_json(result), indent=2, ensure_ascii=False).replace("\n", "\n  ")
    yield f',\n  "quotas": {quotas},\n  "end": {_json_scalar(_seconds(result.end))}\n}}'


def _json_scalar(value: object) -> str:
    """One value as json.dumps writes it: the C string escape, repr for numbers."""
    if type(value) is str:
        return encode_basestring(value)
    if value is None:
        return "null"
    if isinstance(value, str):
        return encode_basestring(value)
    if value is None or isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        return json.dumps(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    raise TypeError(f"not a JSON scalar: {value!r}")


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
