"""The QueueUnit status patches the controller writes, one function per transition.

Kept apart from the controller's I/O so that each transition's fields are in one
place and can be read (and tested) as plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import INT32_MAX
from koordqueue.controller.pods import PodCount
from koordqueue.controller.views import Object, UnitView, rfc3339
from koordqueue.engine.model import Placement


def enqueued(message: str) -> Object:
    return {"phase": c.Phase.ENQUEUED.value, "message": message}


def admitted(spec: Object, quota: str, queue: str, checks: Sequence[str], attempts: int, now: float,
             placement: Placement | None = None) -> Object:
    """Dequeued, or Reserved while the named admission checks are pending. ``spec``: the unit's,
    as its job says it (the pod sets); ``placement``: the pods admitted of each (fewer for an
    elastic role admitted in part) and the topology domain each role was given."""
    where = f"quota {quota} through queue {queue}"
    pod_sets = [ps for ps in spec.get("podSet") or () if isinstance(ps, Mapping)]
    admissions = []
    for ps in pod_sets:
        name, count = str(ps.get("name", "")), ps.get("count", 0)
        entry: Object = {"name": name, "replicas": placement.count_of(name, count) if placement else count,
                         "running": 0, "resources": _pod_request(ps)}
        domain = _domain(placement, name)
        if domain:
            entry["domain"] = domain
        admissions.append(entry)
    status: Object = {
        "phase": (c.Phase.RESERVED if checks else c.Phase.DEQUEUED).value,
        "message": (f"quota reserved in {where}; waiting for admission checks {', '.join(checks)}"
                    if checks else f"admitted into {where}") + _placement_note(pod_sets, placement),
        "lastAllocateTime": rfc3339(now),
        "attempts": attempts,
        "admissions": admissions,
        "admissionSummary": ",".join(f"{a['name']}={a['replicas']}" for a in admissions),
        "admissionChecks": [
            {"name": name, "state": c.AdmissionCheckState.PENDING.value, "lastTransitionTime": rfc3339(now)}
            for name in checks
        ] or None,
        "requeueState": None,
        # (the forecast of its start is over: controller/forecaster.py)
        c.EXPECTED_START_FIELD: None,
        c.EXPECTED_START_RANGE_FIELD: None,
        c.FORECAST_BASIS_FIELD: None,
        c.FORECAST_NOTE_FIELD: None,
    }
    return status


def _domain(placement: Placement | None, pod_set: str) -> dict[str, str]:
    """The node labels pinning a role's pods to its domain (widest level first)."""
    if placement is None:
        return {}
    return {label: value for name, _, chain in placement.domains if name == pod_set for label, value in chain}


def _placement_note(pod_sets: Sequence[Mapping[str, Any]], placement: Placement | None) -> str:
    """What the admission says besides its quota: roles admitted in part, the domains given."""
    if placement is None:
        return ""
    notes = []
    for ps in pod_sets:
        name, count = str(ps.get("name", "")), ps.get("count", 0)
        admitted = placement.count_of(name, count)
        if admitted != count:
            notes.append(f"{admitted} of {count} {name} pods (elastic)")
    domains: dict[tuple[str, str], list[str]] = {}
    for name, level, chain in placement.domains:
        domains.setdefault((level, "/".join(value for _, value in chain)), []).append(name)
    notes += [f"{', '.join(names)} pods in {level}={domain}" for (level, domain), names in domains.items()]
    return f"; {'; '.join(notes)}" if notes else ""


def checks_passed(names: Sequence[str]) -> Object:
    return {"phase": c.Phase.DEQUEUED.value, "message": f"admission checks {', '.join(names)} are Ready"}


def running() -> Object:
    return {"phase": c.Phase.RUNNING.value, "message": "the job is running"}


def execution_clock(unit: UnitView | None, status: Object, now: float, reset: bool = False) -> Object:
    """``status`` with the unit's execution clock (Koord-Queue's PodsReady condition and
    accumulatedPastExecutionTimeSeconds) moved along: started when it becomes Running, and
    when it leaves Running, stopped with the time it ran added (``reset``: emptied instead,
    once it ran past its maximum: a new budget if it is made active again). ``unit``: our
    view of it before this write."""
    phase = status.get("phase")
    since = unit.running_since if unit is not None else None
    if phase is None or (phase == c.Phase.RUNNING.value) == (since is not None) and not reset:
        return status
    if phase == c.Phase.RUNNING.value:
        return {**status, "conditions": [_pods_ready(True, now)]}
    ran = (unit.ran_seconds if unit is not None else 0) + (max(0, int(now - since)) if since is not None else 0)
    return {**status, "conditions": [_pods_ready(False, now)],
            "accumulatedPastExecutionTimeSeconds": None if reset else min(ran, INT32_MAX)}


def _pods_ready(running: bool, now: float) -> Object:
    return {"type": c.UNIT_CONDITION_PODS_READY, "status": c.CONDITION_TRUE if running else c.CONDITION_FALSE,
            "reason": c.UNIT_REASON_PODS_RUNNING if running else c.UNIT_REASON_PODS_STOPPED,
            "message": "the job's pods run" if running else "the job's pods no longer run",
            "lastTransitionTime": rfc3339(now)}


def finished(succeeded: bool) -> Object:
    phase = c.Phase.SUCCEED if succeeded else c.Phase.FAILED
    return {"phase": phase.value, "message": "the job succeeded" if succeeded else "the job failed",
            "podState": None, "admissions": None, "admissionSummary": None}


def sent_back(phase: c.Phase, reason: str, attempts: int, requeue_at: float) -> Object:
    """Preempted or TimeoutBackoff: quota released, back in the queue at requeue_at."""
    return {
        "phase": phase.value,
        "message": reason,
        "requeueState": {"count": attempts, "requeueAt": rfc3339(requeue_at)},
        "admissions": None,
        "admissionSummary": None,
        "admissionChecks": None,
        "podState": None,
    }


def pod_state(unit: UnitView, pods: PodCount) -> Object | None:
    """podState and admissions[].running from the job's pods; None when unchanged."""
    roles = [ps for ps in unit.spec.get("podSet") or () if isinstance(ps, Mapping)]
    per_role = [pods.running_by_role.get(str(ps.get("name", "")), 0) for ps in roles]
    if len(roles) == 1 and not pods.running_by_role.get(str(roles[0].get("name", ""))):
        per_role = [pods.running]  # pods with no role label all belong to the one pod set
    if unit.pod_state == (pods.running, pods.pending) and unit.admissions_running == tuple(per_role):
        return None
    status: Object = {"podState": {"running": pods.running, "pending": pods.pending}}
    if unit.admissions and len(unit.admissions) == len(roles):  # as admitted (in part, in a domain)
        status["admissions"] = [{**admission, "running": n} for admission, n in zip(unit.admissions, per_role,
                                                                                    strict=True)]
    return status


def _pod_request(pod_set: Mapping[str, Any]) -> Any:
    containers = ((pod_set.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    return (containers[0].get("resources") or {}).get("requests") or {}


def queue_binding(queue: Mapping[str, Any], quota: str | None, quota_exists: bool, now: float) -> Object | None:
    """A Queue's status.quota and Bound condition, so that `kubectl get queue` says which quota takes
    its jobs, or that none does; None when `queue` (as last written) already says so."""
    if quota is None:
        bound, reason = c.CONDITION_FALSE, c.QUEUE_REASON_UNBOUND
        message = (f"bound to no ElasticQuota (label {c.LABEL_QUOTA_NAME}, or a quota of the same name): "
                   "jobs sent to this queue wait")
    elif not quota_exists:
        bound, reason = c.CONDITION_FALSE, c.QUEUE_REASON_QUOTA_MISSING
        message = f"bound to quota {quota}, which does not exist: jobs sent to this queue wait"
    else:
        bound, reason, message = c.CONDITION_TRUE, c.QUEUE_REASON_BOUND, f"jobs sent to this queue use quota {quota}"
    status = queue.get("status") or {}
    current = next((cond for cond in status.get("conditions") or ()
                    if isinstance(cond, Mapping) and cond.get("type") == c.QUEUE_CONDITION_BOUND), None)
    if status.get("quota") == quota and current is not None and \
            (current.get("status"), current.get("reason"), current.get("message")) == (bound, reason, message):
        return None
    since = current.get("lastTransitionTime") if current is not None and current.get("status") == bound else None
    condition = {"type": c.QUEUE_CONDITION_BOUND, "status": bound, "reason": reason, "message": message,
                 "lastTransitionTime": since or rfc3339(now)}
    return {"quota": quota, "conditions": [condition]}
