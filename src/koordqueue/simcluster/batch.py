"""kube-controller-manager's Job controller, simulated: batch Jobs.

`parallelism` pods at a time until `completions` succeeded, or Failed past `backoffLimit`;
no pods while suspended, conditions and counts as the controller writes them. A Job's pods
are placed one by one (no gang), as kube-scheduler places them.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from koordqueue.api import constants as c
from koordqueue.api.meta import InvalidObject
from koordqueue.simcluster.jobloop import (
    Item,
    JobOperator,
    Object,
    SimKind,
    condition_is_true,
    find_condition,
    is_deleting,
    pod_phase,
)
from koordqueue.simcluster.kubelet import now_rfc3339

log = logging.getLogger(__name__)


def set_batch_condition(conditions: list[Object], kind: str, status: str, reason: str, message: str,
                        now: str) -> list[Object]:
    """The Job controller's: a condition is updated in place, its transition time kept if the status is."""
    current = find_condition(conditions, kind)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return conditions
    transition = current.get("lastTransitionTime", now) if current is not None and current.get("status") == status \
        else now
    new = {"type": kind, "status": status, "lastProbeTime": now, "lastTransitionTime": transition,
           "reason": reason, "message": message}
    if current is None:
        return [*conditions, new]
    return [new if cond is current else cond for cond in conditions]



class BatchJobController(JobOperator):
    @staticmethod
    def handles(kind: SimKind) -> bool:
        return True  # the kinds no other operator handles: batch Job

    @staticmethod
    def event_source(kind: SimKind) -> str:
        return c.BATCH_JOB_CONTROLLER

    async def sync(self, item: Item, kind: SimKind, job: Object, pods: list[Object]) -> None:
        meta = job["metadata"]
        spec = job.get("spec") or {}
        status: Object = copy.deepcopy(job.get("status") or {})
        old_status = copy.deepcopy(status)
        conditions: list[Object] = [cond for cond in status.get("conditions") or [] if isinstance(cond, dict)]
        now = now_rfc3339()
        try:
            suspended = kind.adapter.is_suspended(job)
            parallelism = _count(spec, "parallelism", 1)
            completions = None if spec.get("completions") is None else _count(spec, "completions", 1)
            backoff_limit = _count(spec, "backoffLimit", 6)
        except (InvalidObject, ValueError) as e:  # kube-apiserver's validation would have refused it
            log.warning("simulated Job controller: %s/%s: %s", meta["namespace"], meta["name"], e)
            self._event(job, c.EventType.WARNING, c.KUBEFLOW_REASON_FAILED_VALIDATION, f"the Job is not run: {e}")
            return
        active = [p for p in pods if pod_phase(p) not in (c.POD_SUCCEEDED, c.POD_FAILED) and not is_deleting(p)]
        succeeded = sum(1 for p in pods if pod_phase(p) == c.POD_SUCCEEDED)
        failed = sum(1 for p in pods if pod_phase(p) == c.POD_FAILED)

        def set_condition(kind_: str, state: str, reason: str, message: str) -> None:
            nonlocal conditions
            conditions = set_batch_condition(conditions, kind_, state, reason, message, now)

        finished = condition_is_true(conditions, c.BATCH_CONDITION_COMPLETE) or condition_is_true(
            conditions, c.BATCH_CONDITION_FAILED)
        if finished:
            await self._delete_pods(kind, job, active)
            active = []
        elif suspended:
            await self._delete_pods(kind, job, active)
            active = []
            if not condition_is_true(conditions, c.BATCH_CONDITION_SUSPENDED):
                set_condition(c.BATCH_CONDITION_SUSPENDED, c.CONDITION_TRUE, c.BATCH_REASON_SUSPENDED, "Job suspended")
                status.pop("startTime", None)  # (kube-controller-manager 1.36+ clears it)
            met = succeeded >= completions if completions is not None else succeeded >= 1
            if met and succeeded and not condition_is_true(conditions, c.BATCH_CONDITION_SUCCESS_CRITERIA_MET):
                # Pods that succeeded before the suspension landed are counted, and the Job has
                # met its criteria; Complete waits for a resume (kube-apiserver refuses a
                # finished Job without startTime, which a suspended Job does not have).
                set_condition(c.BATCH_CONDITION_SUCCESS_CRITERIA_MET, c.CONDITION_TRUE, c.BATCH_REASON_COMPLETED,
                              "Reached expected number of succeeded pods")
        else:
            if condition_is_true(conditions, c.BATCH_CONDITION_SUSPENDED):
                set_condition(c.BATCH_CONDITION_SUSPENDED, c.CONDITION_FALSE, c.BATCH_REASON_RESUMED, "Job resumed")
                status["startTime"] = now
            status.setdefault("startTime", now)
            done = succeeded >= completions if completions is not None else succeeded >= 1 and not active
            done = done or condition_is_true(conditions, c.BATCH_CONDITION_SUCCESS_CRITERIA_MET)
            if failed > backoff_limit:
                await self._delete_pods(kind, job, active)
                active = []
                for condition in (c.BATCH_CONDITION_FAILURE_TARGET, c.BATCH_CONDITION_FAILED):
                    set_condition(condition, c.CONDITION_TRUE, c.BATCH_REASON_BACKOFF_LIMIT,
                                  "Job has reached the specified backoff limit")
            elif done:  # (its pods are gone at once here: both conditions together)
                for condition in (c.BATCH_CONDITION_SUCCESS_CRITERIA_MET, c.BATCH_CONDITION_COMPLETE):
                    set_condition(condition, c.CONDITION_TRUE, c.BATCH_REASON_COMPLETED,
                                  "Reached expected number of succeeded pods")
                status["completionTime"] = now
            elif completions is not None:
                want = min(parallelism, completions - succeeded)
                active = await self._scale_batch(item, kind, job, active, want)
            elif not succeeded:  # no completions: once one pod succeeded, the rest only finish
                active = await self._scale_batch(item, kind, job, active, parallelism)
        status["conditions"] = conditions
        for field_name, value in (("active", len(active)), ("succeeded", succeeded), ("failed", failed)):
            if value:
                status[field_name] = value
            else:
                status.pop(field_name, None)
        status["ready"] = sum(1 for p in active if pod_phase(p) == c.POD_RUNNING)
        status["terminating"] = 0
        status.setdefault("uncountedTerminatedPods", {})
        if not conditions:
            status.pop("conditions")
        await self._write_status(kind, job, old_status, status)

    async def _scale_batch(self, item: Item, kind: SimKind, job: Object, active: list[Object],
                           want: int) -> list[Object]:
        if len(active) > want:
            extra = sorted(active, key=lambda p: pod_phase(p) == c.POD_RUNNING)[: len(active) - want]
            await self._delete_pods(kind, job, extra)
            return [p for p in active if p not in extra]
        if len(active) < want and not self._creations_in_flight(item):
            template = (job.get("spec") or {}).get("template") or {}
            bodies = []
            for _ in range(want - len(active)):
                pod = self._pod_from_template(job, template, {}, {}, None, kind)
                pod["metadata"]["generateName"] = f"{job['metadata']['name']}-"
                bodies.append(pod)
            await self._create_pods(item, kind, job, bodies)
        return active


def _count(spec: Mapping[str, Any], field_name: str, default: int) -> int:
    value = spec.get(field_name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"spec.{field_name} must be a whole number >= 0, not {value!r}")
    return value
